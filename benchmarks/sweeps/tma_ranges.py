"""The ranges round 13 gave ``kernels/clustered_tma.py``, checked on widths between the ones its sweeps timed
(``clustered_tma.py``): at each shape the dispatcher (its record's ``choice``) beside what ran there before round 13
(``clustered`` for 16-bit rows of 57,345-131,072 and fp32 rows of 49,152-65,536, ``cooperative`` for fp32 rows of
65,537-163,840) and the other form of clustered_tma, with ``torch.softmax`` and a copy of the same bytes
(``softmax_lab.bench.compare``, eager time too). GPU machine, repository root:

    PYTHONPATH=code python3 benchmarks/sweeps/tma_ranges.py OUT.json
    PYTHONPATH=code python3 benchmarks/sweeps/tma_ranges.py --round14 OUT.json   # round 14's shapes (SHAPES_14)

Its one run (``h200-tma-ranges-round13.json``, 11:03Z) was on the rules of 882ed54, which gave the streamed form
16-bit rows of 57,345-65,536 and 81,921-131,072 and fp32 rows of 131,073-163,840; that form was taken out again the
same hour (it gives a wrong row now and then: ``tma_race.py``), so its "softmax_lab.softmax" lines in those ranges
are the streamed form's, not today's dispatcher's (the held form's lines beside them are).
"""
import sys

import torch

from softmax_lab import bench
from softmax_lab.kernels import clustered_softmax, clustered_tma_softmax, cooperative_softmax

F32, BF16 = torch.float32, torch.bfloat16


def clustered(parts, warps, vectors):
    knobs = dict(parts=parts, num_warps=warps, vectors=vectors, online=True)
    return "clustered", lambda x, out: clustered_softmax(x, out=out, **knobs), knobs


def tma(parts, warps, stream):
    knobs = dict(parts=parts, num_warps=warps, stream=stream)
    name = f"clustered_tma {'stream' if stream else 'held'}"
    return name, lambda x, out: clustered_tma_softmax(x, out=out, **knobs), knobs


COOPERATIVE = ("cooperative", lambda x, out: cooperative_softmax(x, out=out, BLOCK=8192, num_warps=4),
               dict(BLOCK=8192, num_warps=4))
SHAPES = [(1024, 60000, BF16, [clustered(4, 4, 2), tma(8, 4, False)]),
          (1024, 65536, BF16, [clustered(4, 4, 2), tma(8, 4, False)]),
          (1024, 73728, BF16, [clustered(4, 4, 1), tma(8, 4, True)]),
          (1024, 81920, BF16, [clustered(4, 4, 1), tma(8, 4, True)]),
          (1024, 90000, BF16, [clustered(8, 2, 1), tma(8, 4, False)]),
          (1024, 100000, BF16, [clustered(8, 2, 1), tma(16, 4, True)]),
          (1024, 110000, BF16, [clustered(8, 2, 1)]),
          (1024, 128256, BF16, [clustered(8, 2, 1)]),
          (1024, 131072, BF16, [clustered(8, 2, 1)]),
          (1024, 49152, F32, [clustered(8, 2, 2)]),
          (1024, 80000, F32, [COOPERATIVE, tma(16, 4, True)]),
          (512, 140000, F32, [COOPERATIVE, tma(8, 8, False)]),
          (512, 151936, F32, [COOPERATIVE, tma(8, 8, False)]),
          (512, 163840, F32, [COOPERATIVE, tma(8, 8, False)])]
# Round 14 (``--round14``), the streamed form back in the library with its race fixed: the new border between the
# held and streamed forms of 16-bit rows (77,824: held 94.2 at 73,728 against streamed 91.8, 88.9 at 81,920 against
# 93.4), and the streamed form past the dispatcher's ranges (16-bit rows past 131,072 and fp32 rows past 163,840
# run on cooperative).
SHAPES_14 = [(1024, 60000, BF16, [tma(8, 4, False)]),
             (1024, 77824, BF16, [tma(8, 4, True)]),
             (1024, 77832, BF16, [tma(8, 4, False)]),
             (1024, 90000, BF16, [clustered(8, 2, 1), tma(8, 4, False)]),
             (1024, 128256, BF16, [clustered(8, 2, 1), tma(8, 8, True)]),
             (1024, 163840, BF16, [tma(8, 4, True), tma(8, 8, True), tma(16, 4, True)]),
             (512, 262144, BF16, [tma(8, 4, True), tma(8, 8, True), tma(16, 4, True)]),
             (512, 200000, F32, [tma(16, 4, True), tma(16, 8, True)]),
             (512, 262144, F32, [tma(16, 4, True), tma(16, 8, True)])]


def main(path, shapes=SHAPES, option=""):
    bench.sweep(path, [(n_rows, n_cols, dtype, candidates, dict(eager=True))
                       for n_rows, n_cols, dtype, candidates in shapes],
                f"PYTHONPATH=code python3 benchmarks/sweeps/tma_ranges.py {option}OUT.json",
                line=lambda rec: f"{rec['impl']:22s} {rec.get('choice') or rec.get('knobs') or ''} "
                                 f"{rec.get('pct_copy', 0):6.1f}% eager {rec.get('eager_ms', 0) * 1e3:.1f} us "
                                 f"{rec.get('checked') or rec.get('error')}")


if __name__ == "__main__":
    if sys.argv[1] == "--round14":  # --round14 OUT.json
        main(sys.argv[2], SHAPES_14, "--round14 ")
    else:
        main(sys.argv[1])
