"""Round 16: where an eager call's host time goes. Per call, a Python loop of calls timed on the host (inputs small
enough that the GPU keeps up): torch's softmax, ours (torch's kernel below ``tuning.TORCH_EAGER_BYTES``, and its own
kernel), and the pieces of our fast path: the output's allocation, the compiled kernel's relaunch
(``_launch.relauncher``), the route check; then an empty Triton kernel launched by Triton's launcher and by
``cuLaunchKernel`` itself (ctypes), to part the launcher from the driver. GPU machine, repository root:

    PYTHONPATH=code python3 benchmarks/sweeps/launch_cost.py OUT.json           # h200-launch-cost-direct-round16.json
    PYTHONPATH=code python3 benchmarks/sweeps/launch_cost.py OUT.json --launchers  # ...-launchers2-round16.json
"""
import ctypes
import json
import sys
import time

import torch
import triton

from softmax_lab import op, softmax
from softmax_lab.dispatch import plan_2d
from softmax_lab.kernels import multirow
from softmax_lab.kernels._launch import relauncher


def per_call(f, n=20000):
    """Median of 5 host-side µs per call over n calls (after 2000 to warm up)."""
    for _ in range(2000):
        f()
    torch.cuda.synchronize()
    times = []
    for _ in range(5):
        start = time.perf_counter()
        for _ in range(n):
            f()
        times.append((time.perf_counter() - start) / n * 1e6)
        torch.cuda.synchronize()
    return round(sorted(times)[2], 2)


@triton.jit
def empty_kernel(x_ptr, n):
    pass


def pieces(shape):
    x = torch.randn(shape, device="cuda")
    y = torch.empty_like(x)
    run, x_ptr, y_ptr = plan_2d(x), x.data_ptr(), y.data_ptr()
    got = {"torch.softmax": per_call(lambda: torch.softmax(x, -1)),
           "torch.neg(x, out=y)": per_call(lambda: torch.neg(x, out=y)),
           "softmax_lab.softmax": per_call(lambda: softmax(x)),
           "torch.empty_like": per_call(lambda: torch.empty_like(x)),
           "relaunch (plan_2d's run)": per_call(lambda: run(y_ptr, x_ptr)),
           "op._route": per_call(lambda: op._route(x))}
    below, op.TORCH_BELOW = op.TORCH_BELOW, 0
    op._PLANS.clear()
    got["softmax_lab.softmax, its own kernel"] = per_call(lambda: softmax(x))
    op.TORCH_BELOW = below
    op._PLANS.clear()
    return got


def launchers():
    x = torch.empty(16, device="cuda")
    compiled = empty_kernel.warmup(x, 5, grid=(1,))
    compiled._init_handles()
    launch, function, meta = compiled.run.launch, compiled.function, compiled.packed_metadata
    stream, x_ptr = torch._C._cuda_getCurrentRawStream(0), x.data_ptr()
    cuda = ctypes.CDLL("libcuda.so.1")
    values = [ctypes.c_uint64(x_ptr), ctypes.c_int32(5), ctypes.c_uint64(0), ctypes.c_uint64(0)]  # (+ Triton's
    # two scratch pointers, null)
    params = (ctypes.c_void_p * 4)(*[ctypes.cast(ctypes.byref(v), ctypes.c_void_p) for v in values])
    cu_launch = cuda.cuLaunchKernel
    cu_launch.argtypes = [ctypes.c_void_p] + [ctypes.c_uint] * 7 + [ctypes.c_void_p] * 3
    assert cu_launch(function, 1, 1, 1, 32 * compiled.metadata.num_warps, 1, 1, 0, stream, params, None) == 0
    got = {"Triton's launcher, empty kernel": per_call(lambda: launch(1, 1, 1, stream, function, False, False, None,
                                                                      None, meta, None, None, None, x_ptr, 5)),
           "cuLaunchKernel (ctypes), empty kernel": per_call(lambda: cu_launch(
               function, 1, 1, 1, 32 * compiled.metadata.num_warps, 1, 1, 0, stream, params, None))}
    run = relauncher(empty_kernel, (1,), (x, 5))
    got["relauncher's run, empty kernel"] = per_call(lambda: run(x_ptr, 5))
    # the dispatcher's kernel for 32×1024 fp32 (multirow), by Triton's launcher with its arguments prebuilt, and
    # by the relauncher's run
    x, y = torch.randn(32, 1024, device="cuda"), torch.empty(32, 1024, device="cuda")
    kernel, grid, args, options = multirow.launch_setup(y, x)
    compiled = kernel.warmup(*args, grid=grid, **options)
    compiled._init_handles()
    fixed = (compiled.function, False, False, None, None, compiled.packed_metadata, None, None, None, y.data_ptr(),
             x.data_ptr(), *args[2:], *[options[name] for name in kernel.arg_names[len(args):]])
    g = (*grid, 1, 1)[:3]
    got["Triton's launcher, multirow 32x1024"] = per_call(lambda: compiled.run.launch(*g, stream, *fixed))
    run = relauncher(kernel, grid, args, **options)
    y_ptr, x_ptr = y.data_ptr(), x.data_ptr()
    got["relauncher's run, multirow 32x1024"] = per_call(lambda: run(y_ptr, x_ptr))
    return got


def main(path, shapes=((1, 128), (32, 1024), (4096, 1024))):
    out = {}
    for shape in shapes:
        out[f"{shape[0]}x{shape[1]}"] = got = pieces(shape)
        print(shape, got, flush=True)
    out["launchers"] = got = launchers()
    print(got, flush=True)
    command = "PYTHONPATH=code python3 benchmarks/sweeps/launch_cost.py OUT.json"
    json.dump(dict(per_call_us=out, device=torch.cuda.get_device_name(), torch=torch.__version__,
                   triton=triton.__version__, command=command), open(path, "w"), indent=1)


if __name__ == "__main__":
    main(sys.argv[1], () if "--launchers" in sys.argv else ((1, 128), (32, 1024), (4096, 1024)))
