"""Issue 28, round 6: the sweeps behind ``TAIL_TILES`` (multirow's ``tail=True``), ``unaligned_resident``'s
``line=128`` and the resident kernel on aligned bf16 rows of 32,769-57,344 (``kernels/tuning.py``). Each candidate
beside the dispatcher, ``torch.softmax`` and a copy of the same bytes (``bench.compare``: buffers past the L2 cache,
results checked against float64 before and after timing). GPU machine (sm_90), repository root:

    PYTHONPATH=code python3 benchmarks/sweeps/tail_tiles_and_lines.py OUT.json aligned   # h200-aligned-round6.json
    PYTHONPATH=code python3 benchmarks/sweeps/tail_tiles_and_lines.py OUT.json tail      # h200-tail-tiles-round6.json
    PYTHONPATH=code python3 benchmarks/sweeps/tail_tiles_and_lines.py OUT.json lines     # h200-tail-lines-round6.json

* ``aligned``: bf16 rows of 50,264 (whole vectors, rows not on 128-byte lines) on the clustered and resident kernels;
  multirow's old tiles on rows of 128-144.
* ``tail``: multirow with ``tail=True`` on widths a little past a power of two, and resident against
  unaligned_resident on aligned bf16 rows of 36,864-65,536.
* ``lines``: unaligned_resident with windows from 16, 64 and 128 bytes before each row; the tail tiles' (ROWS,
  num_warps) on 64 MiB inputs (the % of copy there is above 100: compare within a shape only).
What they showed, and the rules taken from them: docs/performance.md, "Issue 28, round 6".
"""
import sys

import torch

from softmax_lab import bench
from softmax_lab.kernels import clustered_softmax, multirow_softmax, resident_softmax
from softmax_lab.kernels.unaligned_resident import refusal, unaligned_resident_softmax

F32, BF16 = torch.float32, torch.bfloat16


def clustered(*settings):
    return [("clustered", lambda x, out, k=dict(parts=p, num_warps=w, vectors=v): clustered_softmax(x, out=out, **k),
             dict(parts=p, num_warps=w, vectors=v)) for p, w, v in settings]


def resident(*warps):
    return [("resident", lambda x, out, w=w: resident_softmax(x, out=out, num_warps=w, overlap=True),
             dict(num_warps=w)) for w in warps]


def window(n_cols, dtype, warps, lines):
    probe = torch.empty((2, n_cols), dtype=dtype, device="cuda")
    return [("unaligned_resident", lambda x, out, k=dict(num_warps=w, line=line):
             unaligned_resident_softmax(x, out=out, **k), dict(num_warps=w, line=line))
            for w in warps for line in lines if not refusal(probe, None, w, line)]


def multirow(tiles, tail):
    return [("multirow", lambda x, out, k=dict(ROWS=r, num_warps=w, tail=tail): multirow_softmax(x, out=out, **k),
             dict(ROWS=r, num_warps=w, tail=tail)) for r, w in tiles]


def tail_grid(n_cols):
    """(ROWS, num_warps) with 4-32 elements a thread of the power-of-two tile, tiles up to 8192 elements."""
    main = 1 << (n_cols.bit_length() - 1)
    return [(r, w) for r in (1, 2, 4, 8, 16) for w in (1, 2, 4, 8, 16)
            if r * main // (32 * w) in (4, 8, 16, 32) and r * main <= 8192]


def shapes(which):
    """(n_rows, n_cols, dtype, candidates) of one sweep."""
    if which == "aligned":
        out = [(2048, 50264, BF16, clustered((2, 4, 1), (2, 8, 1), (2, 4, 2), (4, 4, 1), (4, 2, 1), (4, 2, 2),
                                             (8, 2, 1), (8, 1, 2)) + resident(4, 8, 16))]
        return out + [(65536, n, BF16, multirow([(8, 1), (8, 2), (16, 2), (16, 4), (4, 1)], False))
                      for n in (128, 130, 136, 144)]
    if which == "tail":
        tiles = [(1, 1), (2, 1), (4, 1), (8, 1), (8, 2), (16, 2), (16, 4), (32, 4), (1, 8), (1, 16)]
        out = []
        for n_rows, n_cols, dtype in [(65536, 130, BF16), (65536, 136, BF16), (65536, 144, BF16), (65536, 160, BF16),
                                      (65536, 260, BF16), (32768, 520, BF16), (16384, 1030, BF16), (100000, 77, F32),
                                      (65536, 130, F32), (65536, 144, F32), (32768, 260, F32), (16384, 1030, F32),
                                      (16384, 2050, F32), (8192, 4100, F32), (8192, 4100, BF16), (8192, 8200, BF16),
                                      (4096, 12000, F32)]:
            keep = [(r, w) for r, w in tiles if not ((r * n_cols > 8192 and r > 1) or r * n_cols > 64 * 32 * w)]
            out.append((n_rows, n_cols, dtype, multirow(keep, True)))
        return out + [(2048, n, BF16, [c for w in (8, 16) for c in resident(w) + window(n, BF16, [w], [16])])
                      for n in (36864, 40960, 49152, 50264, 57344, 65536)]
    out = [(n_rows, n_cols, dtype, window(n_cols, dtype, (4, 8, 16), (16, 64, 128)))
           for n_rows, n_cols, dtype in [(2048, 50257, BF16), (4096, 50257, BF16), (2048, 50264, BF16),
                                         (2048, 32001, BF16), (2048, 50257, F32), (8192, 10001, BF16)]]
    for dtype, widths in ((BF16, (130, 136, 144, 160, 264, 272, 528, 1030, 1100, 2050, 4100, 8200)),
                          (F32, (65, 77, 80, 130, 160, 272, 520, 1030, 2050, 4200, 8200))):
        out += [(max(1, (64 << 20) // (n * dtype.itemsize)), n, dtype, multirow(tail_grid(n), True)) for n in widths]
    return out


def main(path, which):
    bench.sweep(path, shapes(which), "python3 benchmarks/sweeps/tail_tiles_and_lines.py " + " ".join(sys.argv[1:]))


if __name__ == "__main__":
    main(*sys.argv[1:3])
