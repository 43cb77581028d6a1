"""The shared-memory kernels with and without ``online`` (the sum taken with the max as each chunk lands,
``kernels/chunk_state.py``: one pass over shared memory fewer), beside QuACK, on the lines of issue 28 they run:
``resident`` (2048×32768 / 32000 bf16), ``unaligned_resident`` (2048×50257 bf16), ``clustered`` (the LM widths).
GPU machine (sm_90), repository root, QuACK importable for its line (``benchmarks/bench_with_peers.sh`` shows how):

    PYTHONPATH=code python3 benchmarks/sweeps/online_sum.py OUT.json

Every candidate is checked against float64 before and after it is timed (``bench.compare``). Its run:
``benchmarks/records/h200-online-sum-round9.json`` (at 136880f, without QuACK, before 2048×32000 and 8 warps at
50,257 were added, and before the rounding fix of ``chunk_state.py``; docs/performance.md, round 9).
"""
import sys

import torch

from softmax_lab import bench
from softmax_lab.kernels import clustered_softmax, resident_softmax, unaligned_resident_softmax


def both(name, launch, settings):
    """(name, fn, knobs) for each setting, with online off and on."""
    return [(f"{name} online={on}", lambda x, out, k=k, on=on: launch(x, out, online=on, **k), dict(k, online=on))
            for k in settings for on in (False, True)]


def main(path):
    bf16, fp32 = torch.bfloat16, torch.float32
    quack = bench.peer_candidates()
    cases = [(2048, n, bf16, quack + both("resident", resident_softmax, [dict(num_warps=8, overlap=True)]))
             for n in (32768, 32000)]
    cases.append((2048, 50257, bf16, both("unaligned_resident", unaligned_resident_softmax,
                                          [dict(num_warps=16, line=128), dict(num_warps=8, line=128)])))
    clustered = {(1024, 65536, bf16): [dict(parts=4, num_warps=4, vectors=2), dict(parts=8, num_warps=4)],
                 (1024, 128256, bf16): [dict(parts=8, num_warps=2, vectors=1), dict(parts=8, num_warps=4)],
                 (512, 151936, fp32): [dict(parts=8, num_warps=4), dict(parts=16, num_warps=4)],
                 (1024, 65536, fp32): [dict(parts=8, num_warps=2, vectors=2)]}
    for (n_rows, n_cols, dtype), settings in clustered.items():
        cases.append((n_rows, n_cols, dtype, quack + both("clustered", clustered_softmax, settings)))
    bench.sweep(path, cases, "PYTHONPATH=code python3 benchmarks/sweeps/online_sum.py OUT.json")


if __name__ == "__main__":
    main(sys.argv[1])
