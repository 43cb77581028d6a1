"""Round 17: the TMA backward with the slice's columns past its largest power of two held in registers
(``clustered_tma_backward(..., held=True)``) against the same knobs with them in a second shared tile. The one
line of issue 28 still under QuACK in the backward, 512×151936 fp32 (0.96×), runs 16 programs of 2 × (8192 +
2048) fp32 = 80 KB of shared memory each: two a multiprocessor. Held, 64 KB: three. Beside it, the other rows whose
slices have a TAIL tile (151,936 bf16, 163,840 fp32, 20,000 in both). GPU machine (sm_90), repository root:

    PYTHONPATH=code python3 benchmarks/sweeps/held_tail.py OUT.json            # h200-held-tail-round17.json
    PYTHONPATH=code python3 benchmarks/sweeps/held_tail.py --border OUT.json   # h200-held-tail-border-round17.json

``--border``: fp32 rows on either side of 147,456, where the tail tile grows from 1,024 columns (72 KB a program:
three a multiprocessor already) to 2,048 (80 KB: two), the dispatcher's border between 16 × 4 and 16 × 8 held.

``bench.compare`` (buffers past the L2 cache, every result checked against float64 before and after it is
timed), after an edge check of the held form (one-hot rows of y, dy of ±1e4, dx written over dy).
"""
import sys

import torch

from softmax_lab import bench
from softmax_lab.kernels.clustered_tma_backward import clustered_tma_backward

from clustered_backward import edge_check  # (the sweeps beside this one: python3 puts this folder on the path)
from tma_backward import tma_backward

F32, BF16 = torch.float32, torch.bfloat16


KNOBS = {(512, 151936, F32): [(16, 4), (16, 8)], (1024, 151936, F32): [(16, 4)], (512, 163840, F32): [(16, 4), (16, 8)],
         (1024, 151936, BF16): [(16, 4), (8, 4)], (4096, 20000, F32): [(4, 8), (4, 4)],
         (4096, 20000, BF16): [(2, 4), (4, 4)]}


BORDER = {(512, 135000, F32): [(16, 4), (16, 8)], (512, 147456, F32): [(16, 4), (16, 8)],
          (512, 147460, F32): [(16, 4), (16, 8)]}


def main(path, border=False):
    meta = {}
    if not border:
        bad = edge_check([(4, 151936, F32, dict(parts=16, num_warps=4, held=True)),
                          (4, 151936, BF16, dict(parts=16, num_warps=4, held=True)),
                          (3, 20000, F32, dict(parts=4, num_warps=8, held=True)),
                          (5, 163840, F32, dict(parts=16, num_warps=8, held=True))], clustered_tma_backward)
        print("edge check:", bad or "ok", flush=True)
        meta = dict(edge_check=bad or "ok")
    cases = [(n_rows, n_cols, dtype, [tma_backward(p, w, held=h) for p, w in knobs for h in (False, True)])
             for (n_rows, n_cols, dtype), knobs in (BORDER if border else KNOBS).items()]
    command = "PYTHONPATH=code python3 benchmarks/sweeps/held_tail.py " + ("--border " if border else "") + "OUT.json"
    bench.sweep(path, cases, command, kind="backward", **meta)


if __name__ == "__main__":
    if sys.argv[1] == "--border":
        main(sys.argv[2], border=True)
    else:
        main(sys.argv[1])
