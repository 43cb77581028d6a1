"""Probe (issue 15, seventh session), run under Nsight Compute: where the clustered kernel's warps wait, beside the
resident kernel holding a slice of the same size (64 KB: bf16 rows of 32768 on resident, rows of 65536 split
over 2 and 4 programs on clustered).

    ncu --section WarpStateStats --section Occupancy --section SpeedOfLight -k regex:softmax_kernel \\
        python3 results/probe_cluster_stalls.py
"""
import sys

import torch

sys.path.insert(0, "code")
import softmax_lab  # noqa: E402,F401
from softmax_lab.kernels import clustered_softmax, resident_softmax  # noqa: E402

a = torch.randn(2048, 32768, device="cuda").to(torch.bfloat16)
b = torch.randn(1024, 65536, device="cuda").to(torch.bfloat16)
for _ in range(2):  # the first launch compiles; ncu profiles every launch of the kernels it matches
    resident_softmax(a, num_warps=8, overlap=True)
    clustered_softmax(b, parts=2, num_warps=4, vectors=2)
    clustered_softmax(b, parts=4, num_warps=4, vectors=2)
torch.cuda.synchronize()
