"""Issue 28, round 7: the sweep behind ``tuning.RESIDENT_BACKWARD`` (``kernels/resident_backward.py``). Each backward
shape on the kernels it ran on before (the unaligned cooperative kernel for rows that do not start on 16 bytes,
the cooperative one for the rest) and on ``resident_backward`` at each warp count that fits, beside the dispatcher,
PyTorch's backward and a copy of the same bytes (``bench.compare``: buffers past the L2 cache, results checked
against float64 before and after timing). GPU machine (sm_90), repository root:

    PYTHONPATH=code python3 benchmarks/sweeps/resident_backward.py OUT.json     # h200-resident-backward-round7.json

What it showed, and the rules taken from it: docs/performance.md, "Issue 28, round 7".
"""
import sys

import torch

from softmax_lab import bench
from softmax_lab.kernels import cooperative_backward
from softmax_lab.kernels.resident_backward import refusal, resident_backward
from softmax_lab.kernels.unaligned import takes, unaligned_backward

F32, F16, BF16 = torch.float32, torch.float16, torch.bfloat16
SHAPES = [(2048, 50257, BF16), (2048, 50257, F16), (4096, 32001, BF16), (2048, 32768, BF16), (4096, 20000, BF16),
          (4096, 24577, BF16), (8192, 16385, BF16), (1024, 57337, BF16), (4096, 16385, F32), (4096, 20000, F32),
          (2048, 28669, F32)]


def before(y, dy, out):
    """The kernel this shape ran on before round 7."""
    if takes(y, dy, out):
        return unaligned_backward(y, dy, out)
    return cooperative_backward(y, dy, out)


def candidates(n_cols, dtype):
    probe = torch.empty((2, n_cols), dtype=dtype, device="cuda")
    return [("before", before, None)] + [
        ("resident_backward", lambda y, dy, out, w=w: resident_backward(y, dy, out=out, num_warps=w), dict(num_warps=w))
        for w in (4, 8, 16, 32) if not refusal(probe, probe, probe, w)]


if __name__ == "__main__":
    bench.sweep(sys.argv[1], [(n_rows, n_cols, dtype, candidates(n_cols, dtype)) for n_rows, n_cols, dtype in SHAPES],
                "python3 benchmarks/sweeps/resident_backward.py " + " ".join(sys.argv[1:]), kind="backward")
