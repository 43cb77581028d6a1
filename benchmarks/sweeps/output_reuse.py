"""Round 16: does the forward's figure depend on where its output goes? Rounds 14-15 found the streamed clustered_tma
form at 1024×128256 bf16 at 95-96% of copy with some placements of its buffers and 88-90 with others (one output for
two inputs fast, two in turn slow). Here each implementation is timed three ways over the same two rotating inputs
(as ``bench.compare``, CUDA graph, median): into two outputs in turn (``rotate``), into one output every call
(``one``), and allocating its output each call (``new``, as ``softmax_lab.softmax`` and QuACK's ``softmax_fwd``
do); all against a copy into two outputs in turn. If writing over the last call's output is what speeds a kernel
up (its tail still in L2, dirty), the copy into one output shows it too. GPU machine, repository root, QuACK on
the path (``benchmarks/bench_with_peers.sh`` unpacks it):

    PYTHONPATH=code:/tmp/site:/tmp/site/nvidia_cutlass_dsl/dsl_packages \
        python3 benchmarks/sweeps/output_reuse.py OUT.json                      # h200-output-reuse-round16.json
"""
import json
import sys

import torch
import triton

from softmax_lab import bench, softmax

F32, BF16 = torch.float32, torch.bfloat16
SHAPES = [(1024, 128256, BF16), (1024, 65536, BF16), (2048, 32768, BF16), (512, 151936, F32)]


def add(records, base_ms, label, ms, checked, **fields):
    """Keep one timing (``pct_copy`` against ``base_ms``, the copy's) and print it after ``label``."""
    rec = dict(fields, ms=ms, pct_copy=100 * base_ms / ms, checked=checked)
    records.append(rec)
    print(f"{label} {ms * 1e3:8.1f} us {rec['pct_copy']:6.1f}% {checked}", flush=True)


def save(path, records, script):
    json.dump(dict(records=records, device=torch.cuda.get_device_name(), torch=torch.__version__,
                   triton=triton.__version__, command=f"PYTHONPATH=code:/tmp/site:... python3 {script} OUT.json"),
              open(path, "w"), indent=1)


def impls():
    out = {"copy": (lambda x, o: o.copy_(x), lambda x: x.clone())}

    def ours(x, o):  # (the dispatcher's kernel and knobs, into o)
        _, fn, knobs = softmax.choose(*x.shape, x.dtype)
        return fn(x, out=o, **knobs)

    out["softmax_lab"] = (ours, softmax)
    try:
        from quack.softmax import _softmax_fwd, softmax_fwd

        out["quack"] = (lambda x, o: _softmax_fwd(x, o), softmax_fwd)
    except Exception as err:  # (run without the peers: ours and the copy alone)
        print("quack:", type(err).__name__, err, flush=True)
    return out


def main(path):
    records = []
    for n_rows, n_cols, dtype in SHAPES:
        xs = [torch.randn((n_rows, n_cols), device="cuda").mul_(3).to(dtype) for _ in range(2)]
        outs = [torch.empty_like(xs[0]) for _ in range(2)]
        ref = [torch.softmax(x[[0, n_rows - 1]].double(), -1) for x in xs]
        base = None
        for impl, (into, alloc) in impls().items():
            for mode, fn in (("rotate", lambda i: into(xs[i], outs[i])), ("one", lambda i: into(xs[i], outs[0])),
                             ("new", lambda i: alloc(xs[i]))):
                ms = bench._time(fn, 2, 60)
                ok = "not checked"
                if impl != "copy":
                    y = alloc(xs[1]) if mode == "new" else into(xs[1], outs[1])
                    y = outs[1] if y is None else y
                    ok = "ok" if torch.allclose(y[[0, n_rows - 1]].double(), ref[1], atol=1e-2, rtol=2e-2) else "WRONG"
                base = base or ms
                name = str(dtype).split(".")[1]
                add(records, base, f"{n_rows}x{n_cols} {name:9s} {impl:12s} {mode:7s}", ms, ok, rows=n_rows,
                    cols=n_cols, dtype=name, impl=impl, mode=mode)
    save(path, records, "benchmarks/sweeps/output_reuse.py")


if __name__ == "__main__":
    main(sys.argv[1])
