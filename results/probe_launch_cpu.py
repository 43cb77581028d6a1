"""CPU cost per launch with the GPU held busy (torch.cuda._sleep), so launches only queue; and GPU time per launch."""
import time, torch, triton, json, sys
import softmax_lab
from softmax_lab import op, dispatch
from softmax_lab.kernels import _launch, multirow

def cpu_us(fn, n=400, loops=7):
    for _ in range(20): fn()
    torch.cuda.synchronize()
    ts = []
    for _ in range(loops):
        torch.cuda._sleep(200_000_000)  # ~100 ms of GPU time: the launches below only queue
        t0 = time.perf_counter()
        for _ in range(n): fn()
        ts.append((time.perf_counter() - t0) / n * 1e6)
        torch.cuda.synchronize()
    return sorted(ts)[loops // 2]

def gpu_us(fn, n=400):
    g = torch.cuda.CUDAGraph()
    s = torch.cuda.Stream(); s.wait_stream(torch.cuda.current_stream())
    with torch.cuda.stream(s):
        for _ in range(3): fn()
    torch.cuda.current_stream().wait_stream(s)
    with torch.cuda.graph(g):
        for _ in range(n): fn()
    ts=[]
    for _ in range(5):
        a, b = torch.cuda.Event(True), torch.cuda.Event(True)
        a.record(); g.replay(); b.record(); b.synchronize()
        ts.append(a.elapsed_time(b) * 1e3 / n)
    return sorted(ts)[2]

out = {}
for shape in [(4, 128), (4096, 1024)]:
    x = torch.randn(shape, device="cuda"); y = torch.empty_like(x)
    xp, yp = x.data_ptr(), y.data_ptr()
    name, launch, knobs = dispatch.choose(*shape, x.dtype)
    kernel, grid, args, options = multirow.launch_setup(y, x, **knobs)
    run = _launch.relauncher(kernel, grid, args, **options)
    _launch.STATIC_LAUNCH = False
    run_t = _launch.relauncher(kernel, grid, args, **options)
    _launch.STATIC_LAUNCH = True
    softmax_lab.softmax(x)
    r = {}
    for label, fn in [("torch.softmax", lambda: torch.softmax(x, -1)), ("torch.empty_like", lambda: torch.empty_like(x)),
                      ("torch launcher run", lambda: run(yp, xp)), ("triton launcher run", lambda: run_t(yp, xp)),
                      ("softmax_lab.softmax fast path", lambda: softmax_lab.softmax(x)),
                      ("x.data_ptr()", lambda: x.data_ptr()), ("op._route", lambda: op._route(x))]:
        r[label + " CPU"] = cpu_us(fn)
    r["torch.softmax GPU (graph)"] = gpu_us(lambda: torch.softmax(x, -1))
    r["softmax_lab kernel GPU (graph)"] = gpu_us(lambda: launch(x, out=y, **knobs))
    out[f"{shape}"] = r
    for k, v in r.items(): print(f"{shape} {v:7.2f} us {k}")
json.dump(out, open(sys.argv[1], "w"), indent=1)
