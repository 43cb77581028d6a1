"""Issue 15, the launch floor: CPU cost of one launch with the GPU held busy (launches only queue), for a kernel
PyTorch launches itself (runtime API) and for Triton kernels launched through the driver API (Triton's launcher,
torch's static launcher), with one argument and with seven. Usage: python3 results/probe_launch_floor.py OUT.json"""
import json
import sys
import time

import torch
import triton
import triton.language as tl


@triton.jit
def one_arg(p):
    tl.store(p + tl.program_id(0), 1.0)


@triton.jit
def seven_args(p, q, a, b, c, d, e):
    tl.store(p + tl.program_id(0), (a + b + c + d + e).to(tl.float32))


def cpu_us(fn, n=400, loops=7):
    for _ in range(20):
        fn()
    torch.cuda.synchronize()
    ts = []
    for _ in range(loops):
        torch.cuda._sleep(200_000_000)  # ~100 ms of GPU work: what follows only queues
        t0 = time.perf_counter()
        for _ in range(n):
            fn()
        ts.append((time.perf_counter() - t0) / n * 1e6)
        torch.cuda.synchronize()
    return sorted(ts)[loops // 2]


def main(path):
    x = torch.zeros(1024, device="cuda")
    p = x.data_ptr()
    stream = torch._C._cuda_getCurrentRawStream(0)
    k1 = one_arg.warmup(x, grid=(1,))
    k7 = seven_args.warmup(x, x, 1, 2, 3, 4, 5, grid=(1,))
    for k in (k1, k7):
        k._init_handles()
    static = torch._C._StaticCudaLauncher._launch_kernel
    l1, l7 = k1.run, k7.run
    r = {
        "torch.cuda._sleep(1) (a kernel launched by torch, runtime API)": cpu_us(lambda: torch.cuda._sleep(1)),
        "x.add_(1) (torch elementwise, dispatcher + launch)": cpu_us(lambda: x.add_(1)),
        "torch.softmax(x, 0)": cpu_us(lambda: torch.softmax(x, 0)),
        "Triton launcher, 1 argument": cpu_us(lambda: l1.launch(1, 1, 1, stream, k1.function, False, False, None,
                                                                None, k1.packed_metadata, None, None, None, p)),
        "Triton launcher, 7 arguments": cpu_us(lambda: l7.launch(1, 1, 1, stream, k7.function, False, False, None, None,
                                                                 k7.packed_metadata, None, None, None, p, p, 1, 2, 3,
                                                                 4, 5)),
        "torch static launcher, 1 argument": cpu_us(lambda: static(k1.function, 1, 1, 1, 4, 0, "OOO",
                                                                   (p, None, None), stream)),
        "torch static launcher, 7 arguments": cpu_us(lambda: static(k7.function, 1, 1, 1, 4, 0, "OOiiiiiOO",
                                                                    (p, p, 1, 2, 3, 4, 5, None, None), stream)),
    }
    torch.cuda.synchronize()
    for k, v in r.items():
        print(f"{v:7.2f} us  {k}")
    json.dump(dict(device=torch.cuda.get_device_name(), torch=torch.__version__, triton=triton.__version__,
                   date=time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()),
                   command="python3 results/probe_launch_floor.py " + path, cpu_us_per_launch=r), open(path, "w"),
              indent=1)


if __name__ == "__main__":
    main(sys.argv[1])
