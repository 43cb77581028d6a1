"""Issue 28, round 7: the sweeps behind ``tuning.RESIDENT_BACKWARD`` (``kernels/resident_backward.py``) and the
persistent forward rules (``kernels/persistent_resident.py``). Each shape on the kernel it ran on before and on
the new kernel at each warp count that fits, beside the dispatcher, PyTorch's kernel and a copy of the same bytes
(``bench.compare``: buffers past the L2 cache, results checked against float64 before and after timing). GPU
machine (sm_90), repository root:

    PYTHONPATH=code python3 benchmarks/sweeps/persistent_rows.py OUT.json backward  # h200-backward-round7.json
    PYTHONPATH=code python3 benchmarks/sweeps/persistent_rows.py OUT.json forward   # h200-forward-round7.json

What they showed, and the rules taken from them: docs/performance.md, "Issue 28, round 7".
"""
import sys

import torch

from softmax_lab import bench
from softmax_lab.kernels import cooperative_backward
from softmax_lab.kernels.persistent_resident import persistent_resident_softmax
from softmax_lab.kernels.persistent_resident import refusal as forward_refusal
from softmax_lab.kernels.resident_backward import refusal, resident_backward
from softmax_lab.kernels.unaligned import takes, unaligned_backward

F32, F16, BF16 = torch.float32, torch.float16, torch.bfloat16
BACKWARD = [(2048, 50257, BF16), (2048, 50257, F16), (4096, 32001, BF16), (2048, 32768, BF16), (4096, 20000, BF16),
            (4096, 24577, BF16), (8192, 16385, BF16), (1024, 57337, BF16), (4096, 16385, F32), (4096, 20000, F32),
            (2048, 28669, F32)]
FORWARD = [(1024, 65536, BF16), (1024, 65536, F16), (2048, 65536, BF16), (2048, 50257, BF16), (2048, 50264, BF16),
           (2048, 32768, BF16), (2048, 57344, BF16), (1024, 61440, BF16), (4096, 40000, BF16), (8192, 16385, BF16),
           (4096, 20000, F32), (2048, 28669, F32), (2048, 28672, F32)]


def before(y, dy, out):
    """The backward kernel this shape ran on before round 7."""
    if takes(y, dy, out):
        return unaligned_backward(y, dy, out)
    return cooperative_backward(y, dy, out)


def candidates(kind, n_cols, dtype):
    probe = torch.empty((2, n_cols), dtype=dtype, device="cuda")
    if kind == "forward":  # (the dispatcher's kernel is timed anyway: bench.compare's "softmax_lab.softmax")
        return [("persistent_resident", lambda x, out, w=w: persistent_resident_softmax(x, out=out, num_warps=w),
                 dict(num_warps=w)) for w in (4, 8, 16, 32) if not forward_refusal(probe, None, w)]
    return [("before", before, None)] + [
        ("resident_backward", lambda y, dy, out, w=w: resident_backward(y, dy, out=out, num_warps=w), dict(num_warps=w))
        for w in (4, 8, 16, 32) if not refusal(probe, probe, probe, w)]


if __name__ == "__main__":
    kind = sys.argv[2]
    bench.sweep(sys.argv[1], [(n_rows, n_cols, dtype, candidates(kind, n_cols, dtype))
                              for n_rows, n_cols, dtype in (FORWARD if kind == "forward" else BACKWARD)],
                "python3 benchmarks/sweeps/persistent_rows.py " + " ".join(sys.argv[1:]), kind=kind)
