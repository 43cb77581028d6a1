"""Probe (issue 15, seventh session): where an eager call of ``softmax_lab.softmax`` spends its CPU time, beside
``torch.softmax``, at 4x128 (a tiny input) and 4096x1024 fp32. "CPU": µs per call with the GPU held busy
(``torch.cuda._sleep``), so calls only queue; "loop": µs per call of a back-to-back loop, as ``softmax-lab bench``
times eager calls (20 ms of calls, median of 5).

    python3 results/probe_eager_call.py OUT/h200-eager-call.json
"""
import datetime, json, sys, time

import torch
import triton

sys.path.insert(0, "code")
import softmax_lab  # noqa: E402
from softmax_lab import bench, dispatch, op  # noqa: E402


def cpu_us(fn, n=400, loops=7):
    for _ in range(20):
        fn()
    torch.cuda.synchronize()
    ts = []
    for _ in range(loops):
        torch.cuda._sleep(200_000_000)  # ~100 ms of GPU work: the calls below only queue behind it
        t0 = time.perf_counter()
        for _ in range(n):
            fn()
        ts.append((time.perf_counter() - t0) / n * 1e6)
        torch.cuda.synchronize()
    return sorted(ts)[loops // 2]


out = dict(device=torch.cuda.get_device_name(), torch=torch.__version__, triton=triton.__version__,
           date=datetime.datetime.now(datetime.timezone.utc).isoformat(timespec="seconds"),
           command="python3 results/probe_eager_call.py " + " ".join(sys.argv[1:]), shapes={})
for shape in [(4, 128), (4096, 1024)]:
    x = torch.randn(shape, device="cuda")
    y = torch.empty_like(x)
    softmax_lab.softmax(x)  # makes the plan
    ptr = x.data_ptr()
    plan = op._PLANS[(x.shape, x.stride(), x.dtype, x.get_device(), ptr & 15, 1)]
    run = dispatch.plan_2d(x)
    xs = [torch.randn(shape, device="cuda") for _ in range(8)]
    r = {}
    for label, fn in [("torch.softmax", lambda: torch.softmax(x, -1)),
                      ("softmax_lab.softmax", lambda: softmax_lab.softmax(x)),
                      ("its plan: allocate and launch", lambda: plan(x, ptr)),
                      ("the launch alone (dispatch.plan_2d's run)", lambda: run(y.data_ptr(), ptr)),
                      ("torch.empty_like", lambda: torch.empty_like(x)),
                      ("op._route", lambda: op._route(x)),
                      ("the plan's key", lambda: (x.shape, x.stride(), x.dtype, x.get_device(), x.data_ptr() & 15, 1))]:
        r[label + ", CPU"] = cpu_us(fn)
    for label, fn in [("torch.softmax", lambda i: torch.softmax(xs[i], -1)),
                      ("softmax_lab.softmax", lambda i: softmax_lab.softmax(xs[i]))]:
        r[label + ", loop"] = 1e3 * bench._time_eager(fn, len(xs), 0.005)
    out["shapes"]["x".join(map(str, shape))] = r
    for k, v in r.items():
        print(f"{shape} {v:7.2f} us  {k}", flush=True)
with open(sys.argv[1], "w") as f:
    json.dump(out, f, indent=1)
