"""Round 14: how much one measurement of the streamed clustered_tma form moves from run to run. The issue's bench
(h200-bench-round14.json) timed 1024×128256 bf16 at 88.5% of copy (GPU time, CUDA graph) where the ranges sweep
of the same hour (h200-tma-ranges-round14.json) timed 95.1, with the same kernel and knobs. Here each shape is
timed ``REPEATS`` times in one process by ``bench.compare`` (the timer both use), with the dispatcher's choice, the
other knobs, and a copy of the same bytes each time. GPU machine, repository root:

    PYTHONPATH=code python3 benchmarks/sweeps/stream_repeats.py OUT.json
"""
import sys

import torch

from softmax_lab import bench
from softmax_lab.kernels import clustered_tma_softmax

BF16 = torch.bfloat16
REPEATS = 4


def tma(parts, warps, stream):
    knobs = dict(parts=parts, num_warps=warps, stream=stream)
    name = f"clustered_tma {'stream' if stream else 'held'}"
    return name, lambda x, out: clustered_tma_softmax(x, out=out, **knobs), knobs


SHAPES = [(1024, 128256, BF16, [tma(8, 8, True), tma(16, 4, True), tma(4, 8, True)]),
          (1024, 65536, BF16, [tma(8, 4, False), tma(8, 4, True), tma(4, 8, True)])]


if __name__ == "__main__":
    bench.sweep(sys.argv[1], [(rows, cols, dtype, candidates, dict(eager=True, rep_ms=40))
                              for _ in range(REPEATS) for rows, cols, dtype, candidates in SHAPES],
                "PYTHONPATH=code python3 benchmarks/sweeps/stream_repeats.py OUT.json",
                line=lambda rec: f"{rec['impl']:22s} {rec.get('choice') or rec.get('knobs') or ''} "
                                 f"{rec.get('pct_copy', 0):6.1f}% eager {rec.get('eager_ms', 0) * 1e3:.1f} us "
                                 f"{rec.get('checked') or rec.get('error')}")
