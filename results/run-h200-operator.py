"""Issue 12 on the GPU: eager per-call cost of softmax_lab.softmax, and a compiled attention block against eager.

    python results/run-h200-operator.py --label after --attention --out operator-after.json

Per-call cost: the host time of one call when calls are issued back to back (N calls, one synchronize,
divided by N), on inputs small enough that the GPU finishes each kernel before the next launch comes: what
a small model pays per softmax. Works on the old code too (only ``softmax_lab.softmax`` and the kernels),
so the same script measures before and after.
"""
import argparse
import json
import math
import time

import torch
import triton

import softmax_lab
from softmax_lab import kernels

p = argparse.ArgumentParser()
p.add_argument("--label", default="")
p.add_argument("--attention", action="store_true", help="also time the compiled attention block")
p.add_argument("--out", required=True, help="JSON file, rewritten after every record")
args = p.parse_args()
dev = torch.device("cuda")
sm = softmax_lab.softmax


def per_call_us(fn, n=1000, repeats=3):
    for _ in range(200):
        fn()
    torch.cuda.synchronize()
    best = []
    for _ in range(repeats):
        t = time.perf_counter()
        for _ in range(n):
            fn()
        torch.cuda.synchronize()
        best.append((time.perf_counter() - t) / n * 1e6)
    return sorted(best)[len(best) // 2]  # median of the repeats


records = []
HEADER = dict(device=torch.cuda.get_device_name(), torch=torch.__version__, triton=triton.__version__,
              date=time.strftime("%Y-%m-%d %H:%M UTC", time.gmtime()))


def save():
    with open(args.out, "w") as f:
        json.dump(dict(HEADER, records=records), f, indent=1)
for shape in [(4, 128), (64, 1000), (1, 4096)]:
    x = torch.randn(shape, device=dev)
    x3 = x.view(1, *shape)
    xg = x.clone().requires_grad_()
    out = torch.empty_like(x)
    mask = torch.ones(shape[-1], dtype=torch.bool, device=dev)
    name = "fused" if shape[-1] > 2048 else "multirow"
    launch = kernels.ALL[name]
    knobs = dict(num_warps=4) if name == "fused" else dict(ROWS=1, num_warps=4)
    cases = {
        "torch.softmax": lambda: torch.softmax(x, -1),
        "bare triton launch (fused kernel)": lambda: kernels.fused_softmax_kernel[(shape[0],)](
            out, x, x.stride(0), out.stride(0), shape[1], BLOCK=triton.next_power_of_2(shape[1]), num_warps=4),
        f"launcher {name}_softmax": lambda: launch(x, **knobs),
        "softmax_lab.softmax(x, -1)": lambda: sm(x, -1),
        "softmax_lab.softmax(x3, -1) (3-D)": lambda: sm(x3, -1),
        "softmax_lab.softmax(x, -1, mask=bool)": lambda: sm(x, -1, mask=mask),
        "softmax_lab.softmax(x requiring grad) fwd": lambda: sm(xg, -1),
        "torch.softmax(x requiring grad) fwd": lambda: torch.softmax(xg, -1),
    }
    if hasattr(torch.ops, "softmax_lab") and hasattr(torch.ops.softmax_lab, "softmax"):
        op = torch.ops.softmax_lab.softmax.default
        cases["torch.ops.softmax_lab.softmax (dispatcher)"] = lambda: op(x, 1)
    for impl, fn in cases.items():
        records.append(dict(label=args.label, shape=list(shape), impl=impl, us_per_call=round(per_call_us(fn), 2)))
        print(records[-1], flush=True)
    save()

if args.attention:
    class Attention(torch.nn.Module):
        def __init__(self, d, heads, softmax_fn):
            super().__init__()
            self.heads, self.softmax_fn = heads, softmax_fn
            self.qkv, self.proj = torch.nn.Linear(d, 3 * d), torch.nn.Linear(d, d)

        def forward(self, x, mask):
            B, S, D = x.shape
            q, k, v = self.qkv(x).view(B, S, 3, self.heads, D // self.heads).permute(2, 0, 3, 1, 4)
            scores = q @ k.transpose(-2, -1) / math.sqrt(D // self.heads)
            return self.proj((self.softmax_fn(scores, mask) @ v).transpose(1, 2).reshape(B, S, D))

    B, S, D, H = 4, 1024, 512, 8
    causal = torch.ones(S, S, dtype=torch.bool, device=dev).tril()
    impls = {"softmax_lab.softmax": lambda s, m: sm(s, -1, mask=m),
             "torch.softmax(masked_fill)": lambda s, m: torch.softmax(s.masked_fill(~m, float("-inf")), -1)}
    for dtype in (torch.float32, torch.float16):
        x = torch.randn(B, S, D, device=dev, dtype=dtype)
        for impl, fn in impls.items():
            torch.manual_seed(0)
            block = Attention(D, H, fn).to(dev, dtype)
            torch._dynamo.reset()
            explain = torch._dynamo.explain(block)(x, causal)
            compiled = torch.compile(block, fullgraph=True)
            with torch.no_grad():
                t0 = time.perf_counter()
                y_c = compiled(x, causal)
                torch.cuda.synchronize()
                compile_s = time.perf_counter() - t0
                y_e = block(x, causal)
                eager_ms = triton.testing.do_bench(lambda: block(x, causal), rep=100)
                compiled_ms = triton.testing.do_bench(lambda: compiled(x, causal), rep=100)
            records.append(dict(label=args.label, block=f"attention B={B} S={S} D={D} H={H} causal",
                                dtype=str(dtype), impl=impl, graph_breaks=explain.graph_break_count,
                                eager_fwd_ms=round(eager_ms, 4), compiled_fwd_ms=round(compiled_ms, 4),
                                first_compile_s=round(compile_s, 1),
                                max_abs_diff_compiled_vs_eager=float((y_c - y_e).abs().max())))
            # forward + backward, compiled
            xg = x.clone().requires_grad_()
            compiled_fb = lambda: compiled(xg, causal).float().sum().backward()  # noqa: E731
            eager_fb = lambda: block(xg, causal).float().sum().backward()  # noqa: E731
            records[-1]["eager_fwd_bwd_ms"] = round(triton.testing.do_bench(eager_fb, rep=100), 4)
            records[-1]["compiled_fwd_bwd_ms"] = round(triton.testing.do_bench(compiled_fb, rep=100), 4)
            print(records[-1], flush=True)
            save()

