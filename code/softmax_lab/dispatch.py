"""The dispatcher behind ``softmax_lab.softmax``: which kernel runs for a given row length and row count.

``choose(n_rows, n_cols, dtype)`` picks a kernel from ``softmax_lab.kernels`` and its knobs; ``softmax_2d(x)``
runs it on a 2-D tensor with contiguous rows. How the choice was tuned on an H200: ``results/README.md``.

* short rows: ``multirow`` with several rows per program (one row per program from about 1024 elements);
* rows that fit one block (up to 32768 elements): ``fused``, one row per program, more warps;
* longer rows: ``cooperative``, each row shared by several programs that keep their chunk in registers and
  exchange their partial ``(m, l)``, so the row is read once (``kernels/cooperative.py``).

Any shape, any ``dim``, ``dtype=``, masks and autograd are the operator's job (``op.py``). This module was
``softmax.py``; it was renamed so that ``import softmax_lab.softmax`` cannot hide the function.
"""
from __future__ import annotations

import torch

from .kernels import cooperative_softmax, fused_softmax, multirow_softmax

# The tuning table, from sweeps on an H200 (results/README.md): for each element size in bytes, the first
# row whose max row length fits gives (kernel, knobs). ROWS is rows per program; None means "one row each".
TABLE = {
    4: [(128, "multirow", dict(ROWS=8, num_warps=4)), (256, "multirow", dict(ROWS=4, num_warps=4)),
        (512, "multirow", dict(ROWS=2, num_warps=2)), (2048, "multirow", dict(ROWS=1, num_warps=4)),
        (4096, "fused", dict(num_warps=16)), (8192, "fused", dict(num_warps=16)),
        (32768, "fused", dict(num_warps=32))],
    2: [(128, "multirow", dict(ROWS=8, num_warps=4)), (512, "multirow", dict(ROWS=2, num_warps=2)),
        (1024, "multirow", dict(ROWS=2, num_warps=4)), (2048, "multirow", dict(ROWS=1, num_warps=4)),
        (4096, "fused", dict(num_warps=8)), (8192, "fused", dict(num_warps=16)),
        (32768, "fused", dict(num_warps=32))],
}
# Longer rows: cooperative softmax (kernels/cooperative.py): each row shared by cdiv(N, BLOCK) programs that
# keep their chunk in registers, so the row is read once. BLOCK and warps per element size, from the H200
# sweep (results/README.md).
COOPERATIVE = {4: [(262144, dict(BLOCK=8192, num_warps=4)), (None, dict(BLOCK=8192, num_warps=8))],
               2: [(None, dict(BLOCK=4096, num_warps=4))]}
LAUNCHERS = {"multirow": multirow_softmax, "fused": fused_softmax, "cooperative": cooperative_softmax}


def choose(n_rows: int, n_cols: int, dtype: torch.dtype):
    """(kernel name, launcher, keyword knobs) the dispatcher uses for a [n_rows, n_cols] input."""
    size = 2 if dtype in (torch.float16, torch.bfloat16) else 4
    for max_cols, name, knobs in TABLE[size]:
        if n_cols <= max_cols:
            return name, LAUNCHERS[name], dict(knobs)
    for max_cols, knobs in COOPERATIVE[size]:
        if max_cols is None or n_cols <= max_cols:
            return "cooperative", cooperative_softmax, dict(knobs)


def softmax_2d(x2: torch.Tensor) -> torch.Tensor:
    """Softmax over the last dim of a 2-D tensor whose rows are contiguous, on the kernel ``choose`` picks."""
    n_rows, n_cols = x2.shape
    _, launch, knobs = choose(n_rows, n_cols, x2.dtype)
    return launch(x2, **knobs)
