"""Round 15, tried and lost: TMA copies of rows that are not whole 16-byte vectors, through a flat (1-D) descriptor
of the rows laid end to end. A 2-D descriptor needs a row stride of whole 16-byte vectors, which a row of 50,257
bf16 elements lacks; a 1-D one has no stride, and its boxes may start at any element... if TMA takes such starts.

It does not: commit e548afa had the flat form in ``kernels/clustered_tma_backward.py``; its backward ran right where
every box starts on 16 bytes (rows of 65,536, 131,072 and 50,264 bf16 forced flat: max error 2e-6 to 7e-6) and
stopped with "an illegal instruction was encountered" where boxes start off 16 bytes (50,257; and 77, 20,001 in its
GPU tests), `benchmarks/records/h200-tma-flat-round15.log`. The form was taken out again. To run this probe, check
that commit out (``git worktree add /tmp/flat e548afa``) and, there, on the GPU machine:

    PYTHONPATH=code python3 benchmarks/sweeps/flat_probe.py 50257      # (this file, copied into it)
"""
import sys

import torch

from softmax_lab.kernels import clustered_tma_backward as m
from softmax_lab.reference import softmax_backward_ref

m.is_flat = lambda y: True  # (every row through the flat descriptors, whole vectors too)
n = int(sys.argv[1])
dtype = torch.bfloat16
y = torch.softmax(torch.randn(64, n, device="cuda"), -1).to(dtype)
dy = torch.randn(64, n, device="cuda").to(dtype)
try:
    dx = m.clustered_tma_backward(y, dy, parts=8, num_warps=4)
    torch.cuda.synchronize()
    print(n, "flat ran, max err", (dx.double() - softmax_backward_ref(y, dy)).abs().max().item())
except Exception as e:
    print(n, "flat failed:", type(e).__name__, str(e)[:80])
