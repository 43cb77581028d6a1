"""Round 16: where an eager call's host time goes, at three sizes: ``eager_costs.steps`` (each step of the fast
path alone, Triton's launcher and a ctypes ``cuLaunchKernel`` of the same kernel, whole calls on torch's kernel
and on the course's) for 1×128, 32×1024 and 4096×1024 fp32; with ``--launchers``, an empty Triton kernel launched
by Triton's launcher and by ``_launch.relauncher``'s run (what the relauncher adds to a launch). GPU machine,
repository root:

    PYTHONPATH=code python3 benchmarks/sweeps/launch_cost.py OUT.json [--launchers]

The round-16 records (``h200-launch-cost-direct-round16.json``, ``h200-launch-cost-launchers2-round16.json``) came
from this script's first form (5e7397f), which timed the same steps with code of its own.
"""
import json
import os
import sys

import torch
import triton

from softmax_lab.kernels._launch import relauncher

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))  # (benchmarks/, for eager_costs)
from eager_costs import per_call, steps

SHAPES = [(1, 128), (32, 1024), (4096, 1024)]


@triton.jit
def empty_kernel(x_ptr, n):
    pass


def launchers():
    """µs per call of an empty kernel by Triton's launcher, arguments prebuilt, and by the relauncher's run."""
    x = torch.empty(16, device="cuda")
    compiled = empty_kernel.warmup(x, 5, grid=(1,))
    compiled._init_handles()
    launch, function, meta = compiled.run.launch, compiled.function, compiled.packed_metadata
    stream, x_ptr = torch._C._cuda_getCurrentRawStream(0), x.data_ptr()
    run = relauncher(empty_kernel, (1,), (x, 5))
    pieces = {"Triton's launcher, empty kernel": lambda: launch(1, 1, 1, stream, function, False, False, None, None,
                                                                meta, None, None, None, x_ptr, 5),
              "relauncher's run, empty kernel": lambda: run(x_ptr, 5)}
    return {name: per_call(fn) for name, fn in pieces.items()}


def main(path, with_launchers):
    out = {}
    for shape in SHAPES:
        out[f"{shape[0]}x{shape[1]}"] = got = steps(torch.randn(shape, device="cuda"))
        print(shape, got, flush=True)
    if with_launchers:
        out["launchers"] = got = launchers()
        print(got, flush=True)
    command = "PYTHONPATH=code python3 benchmarks/sweeps/launch_cost.py " + " ".join(sys.argv[1:])
    json.dump(dict(per_call_us=out, device=torch.cuda.get_device_name(), torch=torch.__version__,
                   triton=triton.__version__, command=command), open(path, "w"), indent=1)


if __name__ == "__main__":
    main(sys.argv[1], "--launchers" in sys.argv)
