"""The register kernels' warps, and where the resident kernel takes over, for rows a little longer than a power
of two (the rules' limits in ``dispatch.FORWARD`` between powers of two).

A register kernel's ``BLOCK`` is the next power of two, so a row a little past one is up to half padding; the
resident kernel's shared memory is sized to the row. Each candidate beside the dispatcher, ``torch.softmax`` and
a copy of the same bytes (``softmax_lab.bench.compare``). GPU machine, repository root:

    PYTHONPATH=code python3 benchmarks/sweeps/widths_past_powers_of_two.py OUT.json       # the first look
    PYTHONPATH=code python3 benchmarks/sweeps/widths_past_powers_of_two.py OUT.json b     # more widths

Recorded: ``benchmarks/records/h200-padding.json`` and ``-b`` (before the limits), ``-c`` and ``-d`` (after).
"""
import sys

import torch

from softmax_lab import bench
from softmax_lab.kernels import cooperative_softmax, fused_softmax, multirow_softmax, resident_softmax

BF, F32 = torch.bfloat16, torch.float32


def fused(*warps):
    return [("fused", lambda x, out, w=w: fused_softmax(x, out=out, num_warps=w), dict(num_warps=w)) for w in warps]


def resident(*warps):
    return [("resident", lambda x, out, w=w: resident_softmax(x, out=out, num_warps=w, overlap=True),
             dict(num_warps=w, overlap=True)) for w in warps]


def multirow(*rows_warps):
    return [("multirow", lambda x, out, r=r, w=w: multirow_softmax(x, out=out, ROWS=r, num_warps=w),
             dict(ROWS=r, num_warps=w)) for r, w in rows_warps]


COOPERATIVE = [("cooperative", lambda x, out: cooperative_softmax(x, out=out, BLOCK=8192, num_warps=4),
                dict(BLOCK=8192, num_warps=4))]
ALL_MULTIROW = multirow(*[(r, w) for r in (1, 2, 4, 8) for w in (2, 4, 8)])
CASES = [((8192, 4104, BF), fused(4, 8, 16, 32) + resident(4, 8, 16)),
         ((8192, 5000, BF), fused(4, 8, 16, 32) + resident(4, 8, 16)),
         ((8192, 6000, BF), fused(4, 8, 16, 32) + resident(4, 8, 16)),
         ((8192, 4100, F32), fused(4, 8, 16, 32) + resident(4, 8, 16)),
         ((4096, 9000, F32), fused(4, 8, 16, 32) + resident(4, 8, 16)),
         ((2048, 20008, F32), fused(4, 8, 16, 32) + resident(4, 8, 16) + COOPERATIVE),
         ((65536, 200, BF), ALL_MULTIROW), ((65536, 200, F32), ALL_MULTIROW), ((32768, 600, BF), ALL_MULTIROW)]
CASES_B = ([((8192, n, F32), fused(4, 8, 16)) for n in (5000, 6000, 7000, 8192)]
           + [((8192, n, BF), fused(4, 8, 16)) for n in (7000, 7600, 8192)]
           + [((4096, n, F32), fused(8, 16, 32) + resident(8)) for n in (12000, 16384)]
           + [((2048, n, F32), fused(32) + resident(8) + COOPERATIVE) for n in (17000, 24000, 28000, 32768)]
           + [((65536, n, BF), multirow((2, 2), (4, 2), (8, 4))) for n in (130, 160, 256)]
           + [((32768, n, BF), multirow((1, 2), (2, 2), (2, 4))) for n in (520, 800, 1000, 1024)])


def main(path, cases):
    bench.sweep(path, [(*shape, candidates) for shape, candidates in cases],
                "python3 benchmarks/sweeps/widths_past_powers_of_two.py " + " ".join(sys.argv[1:]))


if __name__ == "__main__":
    main(sys.argv[1], CASES_B if sys.argv[2:] == ["b"] else CASES)
