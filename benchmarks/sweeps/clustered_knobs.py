"""The clustered kernel's knobs (programs a row is split over, warps, vectors per access) beside the dispatcher
and the resident kernel, on the shapes where a row is split over a Hopper cluster (``kernels/clustered.py``).
Each setting that fits shared memory, with ``torch.softmax`` and a copy of the same bytes
(``softmax_lab.bench.compare``). GPU machine (sm_90), repository root:

    PYTHONPATH=code python3 benchmarks/sweeps/clustered_knobs.py OUT.json [round5]

Recorded: ``benchmarks/records/h200-clustered-b.json`` (whose run also timed the relaunch plans' CPU cost, with
the package's private plan cache: see ``git log -- results/run-h200-clustered-b.py``). ``round5``: the bf16 rows
of 72,000-131,072 and the settings around 8 programs of 2 warps, where issue 28's round 5 moved the dispatcher
(its records, ``h200-clustered-bf16-knobs-round5.json`` and ``h200-clustered-lm-sweep-round5.json``, came from two
one-off scripts on 2 buffers, since removed: ``git show 7cc397e --stat``).
"""
import sys

import torch

from softmax_lab import bench
from softmax_lab.kernels import clustered_softmax, resident_softmax
from softmax_lab.kernels.clustered import slices

F32, F16, BF16 = torch.float32, torch.float16, torch.bfloat16
SHARED_BYTES = 227 * 1024  # an H100/H200 block's shared memory, opted in
SETTINGS = [dict(parts=p, num_warps=w, vectors=v) for p in (2, 4, 8, 16)
            for w, v in ((1, 4), (2, 2), (2, 4), (4, 1), (4, 2))]
ROUND5_SETTINGS = [dict(parts=p, num_warps=w, vectors=v) for p in (4, 8, 16) for w in (2, 4, 8) for v in (1, 2, 4)]
ROUND5_SHAPES = [(1024, 128256, BF16), (2048, 128256, BF16), (1024, 98304, BF16), (4096, 98304, BF16),
                 (1024, 131072, BF16), (2048, 81920, BF16), (1024, 72000, BF16), (1024, 65536, BF16)]
SHAPES = [(1024, 65536, F32), (1024, 65536, BF16), (2048, 65536, BF16), (4096, 131072, BF16), (512, 131072, F32),
          (1024, 100000, F32), (2048, 24000, BF16), (4096, 20000, F16), (2048, 32768, BF16), (256, 262144, F32)]


def fits(n_cols, dtype, knobs):
    """Whether the kernel's own sizing (whole chunks per slice) gives a slice that fits shared memory."""
    try:
        return slices(n_cols, dtype.itemsize, **knobs)["SLICE"] * dtype.itemsize <= SHARED_BYTES
    except ValueError:
        return False


def candidates(n_cols, dtype, settings=SETTINGS):
    out = [("clustered", lambda x, out, k=k: clustered_softmax(x, out=out, **k), k)
           for k in settings if fits(n_cols, dtype, k)]
    if n_cols <= 32768 and dtype != F32:
        out += [("resident", lambda x, out, w=w: resident_softmax(x, out=out, num_warps=w, overlap=True),
                 dict(num_warps=w, overlap=True)) for w in (8, 4)]
    return out


def main(path, which="all"):
    shapes, settings = (ROUND5_SHAPES, ROUND5_SETTINGS) if which == "round5" else (SHAPES, SETTINGS)
    bench.sweep(path, [(n_rows, n_cols, dtype, candidates(n_cols, dtype, settings))
                       for n_rows, n_cols, dtype in shapes],
                "python3 benchmarks/sweeps/clustered_knobs.py " + " ".join(sys.argv[1:]))


if __name__ == "__main__":
    main(*sys.argv[1:3])
