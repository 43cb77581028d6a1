"""Issue 15, seventh session: rows that are whole 16-byte vectors but whose length or stride is not a multiple of
16 (1,000 fp32, 4,104 bf16, ...). The register kernels now take their ints in vectors (``VEC``, ``_launch.row_vector``);
this times ``softmax_lab.softmax`` and the backward with that (``VEC`` as chosen) and without it (``row_vector``
forced to 1, what the kernels did before), a copy of the same bytes beside. GPU time: ``bench._time`` (CUDA
graph, rotating buffers >= 512 MiB, median); every result checked against float64 before and after timing.

    python3 results/run-h200-vectors.py OUT/h200-vectors.json
"""
import datetime
import json
import sys

import torch
import triton

sys.path.insert(0, "code")
import softmax_lab  # noqa: E402
from softmax_lab import bench, op  # noqa: E402
from softmax_lab.kernels import _launch, backward, cooperative, fused, multirow, softmax_backward  # noqa: E402

MODULES = (fused, multirow, backward, cooperative)
FORWARD = [(16384, 1000, torch.float32), (65536, 200, torch.bfloat16), (32768, 1000, torch.bfloat16),
           (8192, 4100, torch.float32), (8192, 4104, torch.bfloat16), (2048, 20008, torch.float32),
           (512, 100008, torch.float32), (4096, 1024, torch.float32), (8192, 8200, torch.bfloat16)]
BACKWARD = [(16384, 1000, torch.float32), (8192, 4104, torch.bfloat16), (512, 100008, torch.float32)]


def with_vectors(on: bool):
    for m in MODULES:
        m.row_vector = _launch.row_vector if on else (lambda n_cols, *tensors: 1)
    op._PLANS.clear()


def run(kind, n_rows, n_cols, dtype):
    moved = (2 if kind == "forward" else 3) * n_rows * n_cols * torch.empty((), dtype=dtype).element_size()
    n_buf = max(2, min(16, -(-bench.ROTATE_BYTES // moved)))
    xs = bench._buffers((n_rows, n_cols), dtype, n_buf)
    rec = dict(kind=kind, shape=f"{n_rows}x{n_cols}", dtype=str(dtype).split(".")[1],
               choice=softmax_lab.softmax.choose(n_rows, n_cols, dtype)[0], vec=_launch.row_vector(n_cols, xs[0]))
    if kind == "forward":
        outs = [torch.empty_like(x) for x in xs]
        copy = lambda i: outs[i].copy_(xs[i])  # noqa: E731
        fn, check = (lambda i: softmax_lab.softmax(xs[i])), (lambda i: bench._check(fn(i), xs[i]))
    else:
        ys = [torch.softmax(x.float(), -1).to(dtype) for x in xs]
        outs = [torch.empty_like(x) for x in xs]
        copy = lambda i: torch.add(ys[i], xs[i], out=outs[i])  # noqa: E731
        fn = lambda i: softmax_backward(ys[i], xs[i], out=outs[i])  # noqa: E731
        check = lambda i: bench._check(fn(i), ys[i], "backward", xs[i])  # noqa: E731
    rec["copy_gbps"] = moved / bench._time(copy, n_buf, 20) / 1e6
    for on in (False, True):
        with_vectors(on)
        bad = check(0)
        ms = bench._time(fn, n_buf, 20)
        bad = bad or check(n_buf - 1)
        rec["vectors" if on else "elements"] = dict(pct_of_copy=100 * moved / ms / 1e6 / rec["copy_gbps"],
                                                    checked=bad or "ok")
    print(json.dumps(rec), flush=True)
    return rec


if __name__ == "__main__":
    out = dict(device=torch.cuda.get_device_name(), torch=torch.__version__, triton=triton.__version__,
               date=datetime.datetime.now(datetime.timezone.utc).isoformat(timespec="seconds"),
               command="python3 results/run-h200-vectors.py " + " ".join(sys.argv[1:]), records=[])
    for kind, shapes in (("forward", FORWARD), ("backward", BACKWARD)):
        for shape in shapes:
            out["records"].append(run(kind, *shape))
            torch.cuda.empty_cache()
    with_vectors(True)
    with open(sys.argv[1], "w") as f:
        json.dump(out, f, indent=1)
