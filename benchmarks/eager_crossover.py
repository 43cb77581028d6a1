"""Where a plain eager call of ``softmax_lab.softmax`` stops costing more than ``torch.softmax`` (issue 28, "Eager
calls"): µs per call of torch's, of the course's kernels alone (``SOFTMAX_LAB_TORCH_BELOW=0``, as shipped since
round 17) and routed (inputs up to 4 MiB on torch's kernel through our fast path: ``op.torch_is_quicker``, as
shipped until round 16, whose records call it "shipped"), forward and backward, over sizes from 4 KB to 64 MB; the
largest error against float64 of torch's and of the course's kernels. Run on a GPU with the checkout's package
first on PYTHONPATH:

    PYTHONPATH=code python3 benchmarks/eager_crossover.py OUT.json [label] [forward,backward]

Eager: median µs per call of a Python loop of back-to-back calls (``bench._time_eager``); GPU time: CUDA graph.
"""
from __future__ import annotations

import json
import sys
import time

import torch

import softmax_lab
from softmax_lab import bench, op
from softmax_lab.reference import softmax_backward_ref, softmax_ref
from softmax_lab.testing import tolerance

WIDTHS = (128, 1024, 4096, 16384)
ROUTED_BYTES = 4 << 20  # (the route's size from round 5 to round 16)
SIZES = [4 << 10, 64 << 10, 1 << 20, 4 << 20, 8 << 20, 16 << 20, 32 << 20, 64 << 20]  # input bytes


def eager(fn, gpu_us):
    return round(bench._time_eager(fn, 4, gpu_us / 1e3) * 1e3, 2)


def kernels_only(on: bool):
    """Every input on the course's kernels (on) or small ones on torch's (``op.torch_is_quicker``)."""
    op.TORCH_BELOW = 0 if on else ROUTED_BYTES
    op._PLANS.clear(), op._BACKWARD_PLANS.clear()


def measure(kind, dtype, width, size):
    rows = max(1, size // (width * dtype.itemsize))
    xs = bench._buffers((rows, width), dtype, 4)
    row = dict(kind=kind, shape=f"{rows}x{width}", dtype=str(dtype), bytes=rows * width * dtype.itemsize)
    if kind == "forward":
        ours, theirs = (lambda i: softmax_lab.softmax(xs[i])), (lambda i: torch.softmax(xs[i], -1))
    else:
        ys = [torch.softmax(x.float(), -1).to(dtype) for x in xs]
        ours = lambda i: op.softmax_backward(ys[i], xs[i])
        theirs = lambda i: torch._softmax_backward_data(xs[i], ys[i], -1, dtype)
    for name, fn, only in (("torch", theirs, True), ("kernels", ours, True), ("routed", ours, False)):
        kernels_only(only)
        gpu = bench._time(fn, 4, 10) * 1e3
        row[name + "_gpu_us"], row[name + "_eager_us"] = round(gpu, 2), eager(fn, gpu)
    # Accuracy: both against float64 (until round 17 against each other, at the tests' atol without their 10×:
    # backward rows of 128 and 1024 "did not match" when both were off float64 by as much)
    atol, rtol = tolerance(dtype)
    want = softmax_ref(xs[1].double()) if kind == "forward" else softmax_backward_ref(ys[1], xs[1])
    kernels_only(True)
    for name, fn in (("torch", theirs), ("kernels", ours)):
        row[name + "_max_err"] = float((fn(1).double() - want).abs().max())
    row["as_accurate_as_torch"] = row["kernels_max_err"] <= 2 * row["torch_max_err"] or bool(
        torch.allclose(ours(1).double(), want, atol=atol, rtol=rtol))
    return row


def main(path, label="", kinds="forward,backward"):
    records = []
    for kind, widths, sizes in (("forward", WIDTHS, SIZES), ("backward", (128, 1024, 16384), SIZES[:6])):
        if kind not in kinds.split(","):
            continue
        for dtype in (torch.float32, torch.bfloat16):
            for width in widths:
                for size in sorted({max(size, width * dtype.itemsize) for size in sizes}):
                    records.append(measure(kind, dtype, width, size))
                    print(records[-1], flush=True)
    import triton

    meta = dict(device=torch.cuda.get_device_name(), torch=torch.__version__, triton=triton.__version__,
                label=label, date=time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()),
                command="PYTHONPATH=code python3 benchmarks/eager_crossover.py " + " ".join(sys.argv[1:]))
    with open(path, "w") as fh:
        json.dump(dict(meta=meta, records=records), fh, indent=1)


if __name__ == "__main__":
    main(*sys.argv[1:])
