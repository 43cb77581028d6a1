"""Issue 15, the launch path: what each step of an eager ``softmax_lab.softmax`` call costs, in one process,
beside ``torch.softmax``. Usage (GPU machine, repository root): ``python3 results/run-h200-launch.py OUT.json``.

Per-call cost = wall time of a loop of N back-to-back calls on the same tensors, divided by N (the GPU work
of these inputs is shorter than the Python of a call, so the loop measures the CPU side). Median of 7 loops.
Eager time on the issue's two shapes = the same loop on rotating buffers, timed with CUDA events.
"""
import json
import sys
import time

import torch
import triton

import softmax_lab
from softmax_lab import bench, dispatch, op
from softmax_lab.kernels import multirow
from softmax_lab.kernels._launch import relauncher

assert softmax_lab.ON_GPU


def per_call_us(fn, n=2000, loops=7):
    for _ in range(50):
        fn()
    torch.cuda.synchronize()
    times = []
    for _ in range(loops):
        t0 = time.perf_counter()
        for _ in range(n):
            fn()
        torch.cuda.synchronize()
        times.append((time.perf_counter() - t0) / n * 1e6)
    return sorted(times)[loops // 2]


def steps(shape, dtype=torch.float32):
    x = torch.randn(shape, device="cuda", dtype=dtype)
    y = torch.empty_like(x)
    n_rows, n_cols = shape
    name, launch, knobs = dispatch.choose(n_rows, n_cols, dtype)
    kernel, grid, args, options = multirow.launch_setup(y, x, **knobs)
    compiled = kernel[grid](*args, **options)
    runner = compiled[(*grid, 1, 1)[:3]]
    fixed = (*args[2:], *[options[k] for k in kernel.arg_names[len(args):]])
    run = relauncher(kernel, grid, args, **options)
    yp, xp = y.data_ptr(), x.data_ptr()
    key = (x.shape, x.stride(), x.dtype, x.get_device(), x.data_ptr() & 15, 1)  # as op._softmax_impl (dim 1)
    sm = softmax_lab.softmax
    sm(x)
    out = {
        "torch.softmax": per_call_us(lambda: torch.softmax(x, -1)),
        "torch.empty (output allocation)": per_call_us(lambda: torch.empty(shape, dtype=dtype, device="cuda")),
        "torch.empty_like": per_call_us(lambda: torch.empty_like(x)),
        "Triton kernel[grid](...) (bare JIT launch)": per_call_us(lambda: kernel[grid](*args, **options)),
        "CompiledKernel[grid](...) runner": per_call_us(lambda: runner(y, x, *fixed)),
        "relauncher run(y, x) (compiled launcher, direct; tensors)": per_call_us(lambda: run(y, x)),
        "relauncher run(y_ptr, x_ptr) (addresses as ints)": per_call_us(lambda: run(yp, xp)),
        "relauncher run(y.data_ptr(), x.data_ptr())": per_call_us(lambda: run(y.data_ptr(), x.data_ptr())),
        "launcher multirow_softmax(x, out=y, **knobs) (checks + JIT launch)":
            per_call_us(lambda: launch(x, out=y, **knobs)),
        "launcher multirow_softmax(x, **knobs) (+ allocation)": per_call_us(lambda: launch(x, **knobs)),
        "dispatcher softmax_2d(x) (choose + launcher)": per_call_us(lambda: dispatch.softmax_2d(x)),
        "custom op torch.ops.softmax_lab.softmax(x, 1)": per_call_us(lambda: torch.ops.softmax_lab.softmax(x, 1)),
        "op._route(x)": per_call_us(lambda: op._route(x)),
        "plan key (shape, stride, dtype, device, alignment)":
            per_call_us(lambda: (x.shape, x.stride(), x.dtype, x.get_device(), x.data_ptr() & 15, 1)),
        "plan(x, ptr) (allocation + relaunch)": per_call_us(lambda: op._PLANS[key](x, xp)),
        "softmax_lab.softmax(x) before (checks, route, dispatcher, launcher)":
            per_call_us(lambda: (op._check(x, None, None), op._softmax_impl(x, op._dim(-1, 2)))),
        "softmax_lab.softmax(x) (fast path)": per_call_us(lambda: sm(x)),
    }
    return name, out


def eager_ms(fn, n_buf):
    """ms per call of 5 loops of 2000 back-to-back calls over rotating buffers, CUDA events, median
    (``softmax-lab bench``'s eager timer, asked for its longest loop)."""
    return bench._time_eager(fn, n_buf, gpu_ms=0.01)


def main(path):
    result = dict(device=torch.cuda.get_device_name(), torch=torch.__version__, triton=triton.__version__,
                  date=time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()),
                  command="python3 results/run-h200-launch.py " + path, per_call_us={}, eager={})
    for shape in [(4, 128), (4096, 1024), (65536, 128)]:
        name, out = steps(shape)
        result["per_call_us"][f"{shape[0]}x{shape[1]} float32 ({name})"] = out
        print(f"\n{shape} ({name})")
        for k, v in out.items():
            print(f"  {v:7.2f} us  {k}")
    for shape in [(4096, 1024), (65536, 128)]:
        n_buf = max(2, (512 << 20) // (2 * 4 * shape[0] * shape[1]))
        xs = [torch.randn(shape, device="cuda") for _ in range(n_buf)]
        t = eager_ms(lambda i: torch.softmax(xs[i], -1), n_buf)
        s = eager_ms(lambda i: softmax_lab.softmax(xs[i]), n_buf)
        result["eager"][f"{shape[0]}x{shape[1]} float32"] = dict(torch_ms=t, softmax_lab_ms=s, vs_torch=t / s)
        print(f"eager {shape}: torch {t * 1e3:.1f} us, softmax_lab {s * 1e3:.1f} us, {t / s:.2f}x torch")
    with open(path, "w") as fh:
        json.dump(result, fh, indent=1)


if __name__ == "__main__":
    main(sys.argv[1])
