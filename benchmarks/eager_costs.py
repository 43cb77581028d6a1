"""What one eager call of ``softmax_lab.softmax`` costs, step by step, beside ``torch.softmax`` (issue 28, "Eager
calls"). Run on a GPU with the checkout's package first on PYTHONPATH:

    PYTHONPATH=code python3 benchmarks/eager_costs.py OUT.json [label]

Eager time: median µs per call of a Python loop of back-to-back calls (``bench._time_eager``: 5 repeats, CUDA
events), with the GPU time of the same call (``bench._time``, CUDA graph) beside it. Steps: µs per call of each
piece of the fast path alone, timed with ``time.perf_counter`` over 20,000 calls (best of 5).
"""
from __future__ import annotations

import json
import sys
import time

import torch

import softmax_lab
from softmax_lab import bench, op

F32, BF16 = torch.float32, torch.bfloat16
FORWARD = [(1, 128, F32), (32, 1024, F32), (4096, 1024, F32), (3, 500000, F32), (16, 1048576, F32),
           (2048, 50257, BF16), (4, 70001, BF16), (2, 1100000, F32)]
BACKWARD = [(4096, 1024, F32), (1, 128, F32), (512, 151936, F32), (2048, 50257, BF16), (16, 1048576, F32)]


def ctypes_launch(x, y):
    """The plan's kernel for x launched through ``cuLaunchKernel`` from ctypes, with a parameter array built once
    and the two addresses written into it per call: what a launcher of our own would cost, against Triton's
    generated C launcher (which also checks the context and parses ~20 Python arguments per call). A probe,
    not a code path: ``run(y_ptr, x_ptr)``, or None where it does not apply (clusters, scratch)."""
    import ctypes

    from softmax_lab import dispatch

    name, knobs = dispatch._runnable(x)
    if name not in dispatch.PLANNED:
        return None
    kernel, grid, args, options = dispatch.PLANNED[name](y, x, **knobs)
    compiled = kernel.warmup(*args, grid=grid, **options)
    compiled._init_handles()
    meta = compiled.metadata
    if getattr(meta, "num_ctas", 1) != 1 or meta.global_scratch_size or getattr(meta, "profile_scratch_size", 0):
        return None
    values = dict(zip(kernel.arg_names, args), **options)
    types = {"i1": ctypes.c_int8, "i32": ctypes.c_int32, "i64": ctypes.c_int64, "u32": ctypes.c_uint32,
             "u64": ctypes.c_uint64, "fp32": ctypes.c_float}
    cells = []
    for arg, ty in compiled.src.signature.items():
        if ty == "constexpr":
            continue
        value = values[arg]
        if ty[0] == "*":
            cells.append(ctypes.c_uint64(value.data_ptr()))
        else:
            cells.append(types[ty](value))
    cells += [ctypes.c_uint64(0), ctypes.c_uint64(0)]  # global and profile scratch: none
    params = (ctypes.c_void_p * len(cells))(*[ctypes.addressof(c) for c in cells])
    cuda = ctypes.CDLL("libcuda.so.1")
    launch = cuda.cuLaunchKernel
    launch.argtypes = [ctypes.c_void_p] + [ctypes.c_uint] * 7 + [ctypes.c_void_p] * 3
    launch.restype = ctypes.c_int
    function, threads, shared = compiled.function, 32 * meta.num_warps, meta.shared
    g0, g1, g2 = (*grid, 1, 1)[:3]
    out_cell, in_cell = cells[0], cells[1]
    stream = torch._C._cuda_getCurrentRawStream
    device = torch.cuda.current_device()

    def run(y_ptr, x_ptr):
        out_cell.value, in_cell.value = y_ptr, x_ptr
        err = launch(function, g0, g1, g2, threads, 1, 1, shared, stream(device), params, None)
        if err:
            raise RuntimeError(f"cuLaunchKernel: error {err}")

    return run


def steps(x):
    """µs per call of each step of the fast path, alone (no GPU work but the launch)."""
    from softmax_lab.dispatch import plan_2d

    y = torch.empty_like(x)
    run = plan_2d(x)
    ptr = x.data_ptr()
    own = ctypes_launch(x, y)
    if own:  # the same bits as the plan's launch
        y2 = torch.empty_like(x)
        own(y2.data_ptr(), ptr)
        run(y.data_ptr(), ptr)
        assert torch.equal(y, y2), "ctypes launch differs"
    device = torch.cuda.current_device()
    pieces = {
        "guard (types, layout)": lambda: (type(x) is torch.Tensor and type(-1) is int and x.layout is torch.strided),
        "_route": lambda: op._route(x),
        "is_neg": lambda: x.is_neg(),
        "plan key": lambda: (x.shape, x.stride(), x.dtype, x.get_device(), x.data_ptr() & 15, 1),
        "torch.empty_like": lambda: torch.empty_like(x),
        "current raw stream": lambda: torch._C._cuda_getCurrentRawStream(device),
        "launch (plan's run)": lambda: run(y.data_ptr(), ptr),
        "launch (ctypes cuLaunchKernel)": (lambda: own(y.data_ptr(), ptr)) if own else (lambda: None),
        "whole call (softmax_lab.softmax)": lambda: softmax_lab.softmax(x),
        "torch.softmax": lambda: torch.softmax(x, -1),
    }
    out = {name: per_call(fn) for name, fn in pieces.items()}
    below, op.TORCH_BELOW = op.TORCH_BELOW, 0  # (small inputs too on the course's kernel, not routed to torch's)
    op._PLANS.clear()
    out["whole call, the course's kernel (SOFTMAX_LAB_TORCH_BELOW=0)"] = per_call(lambda: softmax_lab.softmax(x))
    op.TORCH_BELOW = below
    op._PLANS.clear()
    return out


def per_call(fn, n=20000):
    """Host µs per call of ``fn`` over n calls, best of 5 (``time.perf_counter``)."""
    best = float("inf")
    for _ in range(5):
        torch.cuda.synchronize()
        t0 = time.perf_counter()
        for _ in range(n):
            fn()
        best = min(best, (time.perf_counter() - t0) / n * 1e6)
    torch.cuda.synchronize()
    return round(best, 3)


def main(path, label=""):
    records = []
    for n_rows, n_cols, dtype in FORWARD:
        xs = bench._buffers((n_rows, n_cols), dtype, 4)
        for impl, fn in (("torch.softmax", lambda i: torch.softmax(xs[i], -1)),
                         ("softmax_lab.softmax", lambda i: softmax_lab.softmax(xs[i]))):
            gpu = bench._time(fn, 4, 20)
            eager = bench._time_eager(fn, 4, gpu)
            records.append(dict(kind="forward", shape=f"{n_rows}x{n_cols}", dtype=str(dtype), impl=impl,
                                gpu_us=round(gpu * 1e3, 2), eager_us=round(eager * 1e3, 2)))
            print(records[-1], flush=True)
    for n_rows, n_cols, dtype in BACKWARD:
        ys = [torch.softmax(x.float(), -1).to(dtype) for x in bench._buffers((n_rows, n_cols), dtype, 4)]
        dys = bench._buffers((n_rows, n_cols), dtype, 4)
        for impl, fn in (("torch", lambda i: torch._softmax_backward_data(dys[i], ys[i], -1, dtype)),
                         ("softmax_lab.softmax_backward", lambda i: op.softmax_backward(ys[i], dys[i]))):
            gpu = bench._time(fn, 4, 20)
            eager = bench._time_eager(fn, 4, gpu)
            records.append(dict(kind="backward", shape=f"{n_rows}x{n_cols}", dtype=str(dtype), impl=impl,
                                gpu_us=round(gpu * 1e3, 2), eager_us=round(eager * 1e3, 2)))
            print(records[-1], flush=True)
    tiny = steps(torch.randn(1, 128, device="cuda"))
    print(tiny, flush=True)
    import triton

    meta = dict(device=torch.cuda.get_device_name(), torch=torch.__version__, triton=triton.__version__,
                label=label, date=time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()),
                command="PYTHONPATH=code python3 benchmarks/eager_costs.py " + " ".join(sys.argv[1:]))
    with open(path, "w") as fh:
        json.dump(dict(meta=meta, records=records, steps_1x128_fp32_us=tiny), fh, indent=1)


if __name__ == "__main__":
    main(*sys.argv[1:])
