"""Chapter 8's causal self-attention block, compiled against eager: does torch.compile make it faster with
softmax_lab.softmax? Times fp16 and fp32, forward (no grad) and forward+backward, for softmax_lab.softmax(mask=)
with the GPU operators as triton_ops (Inductor launches the kernels itself) and as opaque custom_ops (Inductor calls
the operator through the dispatcher), and for torch.softmax(masked_fill) beside them. Needs a CUDA GPU.

    python tools/bench_attention.py --out bench-out/h200-attention-compiled.json

Each operator kind runs in its own process (the kind is chosen when softmax_lab.op is imported:
SOFTMAX_LAB_OPS=custom_op keeps the opaque ones). Prints one table, writes JSON (device, versions, date, command).
"""
import argparse
import json
import math
import os
import re
import subprocess
import sys
import time

KINDS = ("custom_op", "triton_op")  # the default route first; triton_op is opt-in (docs/operator.md)


def parse():
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--out", required=True, help="JSON file with every record")
    p.add_argument("--kind", choices=KINDS, help="(internal) time one operator kind in this process")
    p.add_argument("--shape", default="4,1024,512,8", help="B,S,D,H of the block (default %(default)s)")
    p.add_argument("--rep", type=int, default=200,
                   help="milliseconds per triton.testing.do_bench (default %(default)s)")
    return p.parse_args()


def run_one(args):
    os.environ["SOFTMAX_LAB_OPS"] = args.kind
    import torch
    import triton
    from torch._inductor.utils import run_and_get_code

    import softmax_lab

    if not softmax_lab.ON_GPU:
        sys.exit("bench_attention needs a CUDA GPU")
    dev = softmax_lab.DEVICE
    B, S, D, H = (int(n) for n in args.shape.split(","))

    class CausalSelfAttention(torch.nn.Module):  # chapter 8's block, with the softmax as a parameter
        def __init__(self, softmax_fn):
            super().__init__()
            self.softmax_fn, self.qkv, self.proj = softmax_fn, torch.nn.Linear(D, 3 * D), torch.nn.Linear(D, D)

        def forward(self, x, mask):
            q, k, v = self.qkv(x).view(B, S, 3, H, D // H).permute(2, 0, 3, 1, 4)
            scores = q @ k.transpose(-2, -1) / math.sqrt(D // H)
            return self.proj((self.softmax_fn(scores, mask) @ v).transpose(1, 2).reshape(B, S, D))

    impls = {"softmax_lab.softmax(mask=)": lambda s, m: softmax_lab.softmax(s, -1, mask=m),
             "torch.softmax(masked_fill)": lambda s, m: torch.softmax(s.masked_fill(~m, float("-inf")), -1)}
    if args.kind != KINDS[0]:
        impls.pop("torch.softmax(masked_fill)")  # the same in both processes: timed once
    causal = torch.ones(S, S, dtype=torch.bool, device=dev).tril()
    records = []
    for dtype in (torch.float16, torch.float32):
        x = torch.randn(B, S, D, device=dev, dtype=dtype)
        for impl, fn in impls.items():
            torch.manual_seed(0)
            block = CausalSelfAttention(fn).to(dev, dtype)
            torch._dynamo.reset()
            breaks = torch._dynamo.explain(block)(x, causal).graph_break_count
            compiled = torch.compile(block, fullgraph=True)
            with torch.no_grad():
                y_c, codes = run_and_get_code(compiled, x, causal)
                y_e = block(x, causal)
                eager_fwd = triton.testing.do_bench(lambda: block(x, causal), rep=args.rep)
                compiled_fwd = triton.testing.do_bench(lambda: compiled(x, causal), rep=args.rep)
            xg = x.clone().requires_grad_()
            compiled_fb = triton.testing.do_bench(lambda: compiled(xg, causal).float().sum().backward(), rep=args.rep)
            eager_fb = triton.testing.do_bench(lambda: block(xg, causal).float().sum().backward(), rep=args.rep)
            code = "\n".join(codes)
            records.append(dict(
                ops=args.kind if impl.startswith("softmax_lab") else "torch", impl=impl, dtype=str(dtype).split(".")[1],
                block=f"B={B} S={S} D={D} H={H} causal", graph_breaks=breaks,
                inductor_launches_kernel="masked_softmax_kernel" in code,
                inductor_calls_operator=bool(re.search(r"torch\.ops\.softmax_lab\.\w+\.default\(", code)),
                eager_fwd_ms=round(eager_fwd, 4), compiled_fwd_ms=round(compiled_fwd, 4),
                eager_fwd_bwd_ms=round(eager_fb, 4), compiled_fwd_bwd_ms=round(compiled_fb, 4),
                max_abs_diff_compiled_vs_eager=float((y_c.float() - y_e.float()).abs().max())))
            print(json.dumps(records[-1]), flush=True)
    header = dict(device=torch.cuda.get_device_name(), torch=torch.__version__, triton=triton.__version__)
    with open(args.out, "w") as f:
        json.dump(dict(header, records=records), f, indent=1)


def main():
    args = parse()
    if args.kind:
        return run_one(args)
    records, header = [], {}
    for kind in KINDS:
        part = f"{args.out}.{kind}.json"
        cmd = [sys.executable, __file__, "--kind", kind, "--out", part, "--shape", args.shape, "--rep", str(args.rep)]
        done = subprocess.run(cmd, stderr=subprocess.PIPE, text=True)
        if done.returncode:  # a route Inductor cannot compile is a result too: record why, time the others
            why = [line for line in done.stderr.splitlines() if line.strip()][-1:] or [f"exit status {done.returncode}"]
            print(f"{kind}: failed: {why[0]}", file=sys.stderr)
            records.append(dict(ops=kind, impl="softmax_lab.softmax(mask=)", failed=why[0]))
            continue
        with open(part) as f:
            data = json.load(f)
        records += data.pop("records")
        header = data
        os.remove(part)
    header.update(date=time.strftime("%Y-%m-%d %H:%M UTC", time.gmtime()), command=" ".join(sys.argv))
    with open(args.out, "w") as f:
        json.dump(dict(header, records=records), f, indent=1)
    print(f"\n{header['device']}, torch {header['torch']}, triton {header['triton']}: ms (compiled / eager)")
    print(f"{'softmax':28} {'ops':10} {'dtype':8} {'fwd compiled':>12} {'fwd eager':>10} {'fwd+bwd compiled':>17} "
          f"{'fwd+bwd eager':>14}  kernel in Inductor's code")
    for r in records:
        if "failed" in r:
            print(f"{r['impl']:28} {r['ops']:10} failed: {r['failed'][:90]}")
            continue
        print(f"{r['impl']:28} {r['ops']:10} {r['dtype']:8} {r['compiled_fwd_ms']:12.3f} {r['eager_fwd_ms']:10.3f} "
              f"{r['compiled_fwd_bwd_ms']:17.3f} {r['eager_fwd_bwd_ms']:14.3f}  {r['inductor_launches_kernel']}")


if __name__ == "__main__":
    main()
