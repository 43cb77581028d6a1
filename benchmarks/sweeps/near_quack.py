"""The knobs around the dispatcher's on the issue's shapes that stop 2-4% under QuACK (docs/performance.md, round
10: 2048×32768 and 2048×32000 bf16 0.97-0.98×, 8192×8200 bf16 0.98×, 4096×1024 fp32 0.96×, 3×500000 fp32 0.96×),
each timed beside the dispatcher with ``bench.compare`` (buffers past the L2 cache, checked against float64 before
and after); QuACK too when it imports (``benchmarks/bench_with_peers.sh`` shows how). GPU machine, repository root:

    PYTHONPATH=code python3 benchmarks/sweeps/near_quack.py OUT.json            # h200-near-quack-round11.json
    PYTHONPATH=code python3 benchmarks/sweeps/near_quack.py OUT.json resident   # h200-resident-warps-round11.json
    PYTHONPATH=code python3 benchmarks/sweeps/near_quack.py OUT.json backward   # h200-backward-knobs-round11.json
    PYTHONPATH=code python3 benchmarks/sweeps/near_quack.py OUT.json long       # h200-long-rows-knobs-round11.json

The rows of 32,768 and 32,000 bf16 try ``resident`` (with the sum taken online, as the dispatcher) on 4 and 16
warps beside its 8; 8192×8200 bf16 tries ``resident`` and ``fused`` beside its tail tiles; 4096×1024 fp32 the
``multirow`` tiles of 1, 2 and 4 rows on 1 to 8 warps; 3×500000 fp32 the cooperative kernel's tile and warps,
and the clustered kernel (a row on 16 programs, each slice in shared memory). ``resident``: 16-bit rows across the
range the dispatcher gives ``resident`` on 8 warps (8,321-32,768), on 8 and 16 warps, where the first run found
16 warps ahead at 32,768 and 32,000. ``backward``: ``resident_backward``'s warps and lines at 2048×50257 bf16
(85.6% of copy in round 10, on 16 warps from the 128-byte line) and a few widths of its 16-warp range. ``long``:
the fp32 rows the cooperative kernel runs (512×151936, 1024×128256, 16×1048576) on its other tiles and warps, two
tiles a program, and the clustered and ``l2_reread`` kernels.
"""
import sys

import torch

from softmax_lab import bench
from softmax_lab.kernels import cooperative_softmax, fused_softmax, multirow_softmax
from softmax_lab.kernels.clustered import clustered_softmax
from softmax_lab.kernels.resident import resident_softmax

F32, BF16 = torch.float32, torch.bfloat16


def resident(warps):
    return (f"resident {warps} warps online", lambda x, out: resident_softmax(x, out, warps, online=True),
            dict(num_warps=warps, online=True))


def multirow(rows, warps, tail=False):
    return (f"multirow {rows} rows {warps} warps{' tail' if tail else ''}",
            lambda x, out: multirow_softmax(x, out, ROWS=rows, num_warps=warps, tail=tail),
            dict(ROWS=rows, num_warps=warps, tail=tail))


def cooperative(block, warps, tiles=1):
    knobs = dict(BLOCK=block, num_warps=warps, tiles=tiles)
    return f"cooperative {block}x{tiles} {warps} warps", lambda x, out: cooperative_softmax(x, out, **knobs), knobs


def l2_reread(block, warps):
    from softmax_lab.kernels.l2_reread import l2_reread_softmax

    knobs = dict(BLOCK=block, num_warps=warps)
    return f"l2_reread {block} {warps} warps", lambda x, out: l2_reread_softmax(x, out, **knobs), knobs


def clustered(parts, warps):
    return (f"clustered {parts}x{warps} online", lambda x, out: clustered_softmax(x, out, parts, warps, online=True),
            dict(parts=parts, num_warps=warps, online=True))


def fused(warps):
    return (f"fused {warps} warps", lambda x, out: fused_softmax(x, out, num_warps=warps), dict(num_warps=warps))


CASES = [(2048, 32768, BF16, [resident(4), resident(16)]),
         (2048, 32000, BF16, [resident(4), resident(16)]),
         (8192, 8200, BF16, [resident(4), resident(8), fused(8), fused(16), multirow(1, 8, True),
                             multirow(1, 16, True)]),
         (4096, 1024, F32, [multirow(r, w) for r in (1, 2, 4) for w in (1, 2, 4, 8) if (r, w) != (1, 4)]),
         (3, 500000, F32, [cooperative(b, w) for b in (2048, 4096, 8192, 16384) for w in (4, 8, 16)
                           if b // (32 * w) in (4, 8, 16, 32, 64)] + [clustered(16, 8), clustered(16, 16)])]


RESIDENT_WIDTHS = [(8192, 8448), (4096, 10000), (4096, 12288), (4096, 16384), (4096, 20000), (2048, 24576),
                   (2048, 28672), (2048, 30000), (2048, 32768), (4096, 16384, torch.float16),
                   (2048, 32768, torch.float16)]


def resident_backward_(warps, line):
    from softmax_lab.kernels.resident_backward import resident_backward

    knobs = dict(num_warps=warps, line=line)
    name = f"resident_backward {warps} warps line {line}"
    return name, lambda y, dy, out: resident_backward(y, dy, out, **knobs), knobs


BACKWARD = [(2048, 50257, BF16, [resident_backward_(w, line) for w in (8, 16, 32) for line in (16, 128)
                                 if (w, line) != (16, 128)]),
            (2048, 40000, BF16, [resident_backward_(w, 128) for w in (8, 32)]),
            (4096, 20001, BF16, [resident_backward_(w, 128) for w in (8, 32)])]


LONG = [(512, 151936, F32, [cooperative(b, w) for b, w in ((4096, 4), (4096, 8), (8192, 8), (8192, 16), (16384, 16))]
          + [cooperative(4096, 4, 2), cooperative(8192, 4, 2), clustered(16, 4), clustered(16, 8)]),
        (1024, 128256, F32, [cooperative(b, w) for b, w in ((4096, 4), (8192, 8), (16384, 16))]
         + [clustered(16, 4), clustered(16, 8)]),
        (16, 1048576, F32, [cooperative(b, w) for b, w in ((4096, 4), (8192, 4), (8192, 16), (16384, 16))]
         + [cooperative(8192, 8, 2), cooperative(4096, 4, 4), l2_reread(8192, 8), l2_reread(4096, 4)])]


def main(path, which="near"):
    quack = bench.peer_candidates()
    if which == "long":
        cases = [(n_rows, n_cols, dtype, quack + candidates) for n_rows, n_cols, dtype, candidates in LONG]
        bench.sweep(path, cases, "PYTHONPATH=code python3 benchmarks/sweeps/near_quack.py " + " ".join(sys.argv[1:]))
        return
    if which == "backward":
        cases = [(rows, cols, dtype, candidates, dict(kind="backward")) for rows, cols, dtype, candidates in BACKWARD]
        bench.sweep(path, cases, "PYTHONPATH=code python3 benchmarks/sweeps/near_quack.py " + " ".join(sys.argv[1:]),
                    kind="backward")
        return
    if which == "resident":
        cases = [(rows, cols, dtype[0] if dtype else BF16, quack + [resident(8), resident(16)])
                 for rows, cols, *dtype in RESIDENT_WIDTHS]
    else:
        cases = [(n_rows, n_cols, dtype, quack + candidates) for n_rows, n_cols, dtype, candidates in CASES]
    bench.sweep(path, cases, "PYTHONPATH=code python3 benchmarks/sweeps/near_quack.py " + " ".join(sys.argv[1:]))


if __name__ == "__main__":
    main(*sys.argv[1:])
