"""The unaligned kernels' knobs on odd widths (rows that are not whole 16-byte vectors: GPT-2's 50,257, 77, 130),
beside the dispatcher, ``torch.softmax``, a copy of the same bytes and the register kernels with one element per
access that ran there before (``softmax_lab.bench.compare``). GPU machine, repository root:

    PYTHONPATH=code python3 benchmarks/sweeps/odd_widths.py OUT.json

Recorded: ``benchmarks/records/h200-odd-widths-probe-{a,b}.json`` (two forms of the kernels' edges).
"""
import sys

import torch

from softmax_lab import bench
from softmax_lab.kernels import cooperative_softmax, fused_softmax, multirow_softmax
from softmax_lab.kernels.unaligned import unaligned_backward, unaligned_cooperative_softmax, unaligned_softmax

F32, BF16 = torch.float32, torch.bfloat16


def old(name, fn, **knobs):
    return (f"{name} (old)", lambda x, out: fn(x, out=out, **knobs), knobs)


def tiles(*rows_warps):
    return [("unaligned", lambda x, out, r=r, w=w: unaligned_softmax(x, out=out, ROWS=r, num_warps=w),
             dict(ROWS=r, num_warps=w)) for r, w in rows_warps]


def cooperative(*block_warps):
    return [("unaligned_cooperative",
             lambda x, out, b=b, w=w: unaligned_cooperative_softmax(x, out=out, BLOCK=b, num_warps=w),
             dict(BLOCK=b, num_warps=w)) for b, w in block_warps]


def backward(*settings):
    return [("unaligned_backward", lambda y, dy, out, k=k: unaligned_backward(y, dy, out, **k), k) for k in settings]


FORWARD = [((2048, 50257, BF16, 0), cooperative((2048, 2), (2048, 4), (4096, 2), (4096, 4), (4096, 8), (8192, 4),
                                                (8192, 8))),
           ((100000, 77, F32, 0), tiles((8, 1), (8, 2), (16, 2), (16, 4), (32, 4))),
           ((65536, 130, BF16, 0), [old("multirow", multirow_softmax, ROWS=4, num_warps=2)]
            + tiles((2, 1), (4, 1), (4, 2), (8, 2), (8, 4), (16, 4), (32, 4))),
           ((32768, 1000, F32, 3), [old("multirow", multirow_softmax, ROWS=1, num_warps=4)]
            + tiles((1, 2), (1, 4), (2, 4), (4, 4))),
           ((8192, 4100, BF16, 0), [old("fused", fused_softmax, num_warps=8)] + tiles((1, 4), (1, 8), (2, 8), (1, 16))),
           ((1024, 50257, F32, 0), [old("cooperative", cooperative_softmax, BLOCK=8192, num_warps=4)]
            + cooperative((2048, 2), (4096, 4), (8192, 4), (8192, 8)))]
BACKWARD = [((2048, 50257, BF16), backward(*[dict(BLOCK=b, num_warps=w) for b, w in
                                              ((2048, 2), (4096, 2), (4096, 4), (8192, 4), (8192, 8))])),
            ((65536, 130, BF16), backward(*[dict(ROWS=r, num_warps=w) for r, w in ((4, 2), (8, 2), (8, 4), (16, 4))])),
            ((100000, 77, F32), backward(*[dict(ROWS=r, num_warps=w) for r, w in ((16, 2), (32, 4), (32, 8))]))]


def main(path):
    bench.sweep(path, [(n_rows, n_cols, dtype, c, dict(kind=kind, rep_ms=50, view_pad=pad[0] if pad else 0))
                       for kind, cases in (("forward", FORWARD), ("backward", BACKWARD))
                       for (n_rows, n_cols, dtype, *pad), c in cases],
                "python3 benchmarks/sweeps/odd_widths.py " + " ".join(sys.argv[1:]))


if __name__ == "__main__":
    main(sys.argv[1])
