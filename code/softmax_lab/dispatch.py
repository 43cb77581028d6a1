"""The dispatcher behind ``softmax_lab.softmax``: which kernel runs for a given row length and row count.

``choose(n_rows, n_cols, dtype)`` picks a kernel from ``softmax_lab.kernels`` and its knobs; ``softmax_2d(x)``
runs it on a 2-D tensor with contiguous rows. How the choice was tuned on an H200: ``results/README.md``.

* short rows: ``multirow`` with several rows per program (one row per program from about 1024 elements);
* rows that fit one block (up to 32768 elements): ``fused``, one row per program, more warps;
* longer rows: ``online`` (one program per row, walking it in tiles) when there are at least as many rows
  as multiprocessors, else ``split_row`` (several programs per row).

Any shape, any ``dim``, ``dtype=``, masks and autograd are the operator's job (``op.py``). This module was
``softmax.py``; it was renamed so that ``import softmax_lab.softmax`` cannot hide the function.
"""
from __future__ import annotations

import torch

from .device import DEVICE
from .kernels import fused_softmax, multirow_softmax, online_softmax, split_row_softmax
from .kernels._launch import num_sms

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
# Longer rows: online softmax (one program per row, 32 warps, big tiles) when there are at least as many
# rows as multiprocessors; otherwise split-row with about four programs per multiprocessor.
ONLINE_MIN_ROWS_PER_SM = 1
SPLIT = dict(BLOCK=4096, num_warps=8)
SPLIT_PROGRAMS_PER_SM = 4
LAUNCHERS = {"multirow": multirow_softmax, "fused": fused_softmax, "online": online_softmax,
             "split_row": split_row_softmax}


def choose(n_rows: int, n_cols: int, dtype: torch.dtype):
    """(kernel name, launcher, keyword knobs) the dispatcher uses for a [n_rows, n_cols] input."""
    size = 2 if dtype in (torch.float16, torch.bfloat16) else 4
    for max_cols, name, knobs in TABLE[size]:
        if n_cols <= max_cols:
            return name, LAUNCHERS[name], dict(knobs)
    sms = num_sms(DEVICE)
    if n_rows >= ONLINE_MIN_ROWS_PER_SM * sms:
        return "online", online_softmax, dict(BLOCK=16384 if n_cols <= 131072 else 8192, num_warps=32)
    chunks = -(-SPLIT_PROGRAMS_PER_SM * sms // n_rows)
    return "split_row", split_row_softmax, dict(SPLIT, chunks=chunks)


def softmax_2d(x2: torch.Tensor) -> torch.Tensor:
    """Softmax over the last dim of a 2-D tensor whose rows are contiguous, on the kernel ``choose`` picks."""
    n_rows, n_cols = x2.shape
    _, launch, knobs = choose(n_rows, n_cols, x2.dtype)
    return launch(x2, **knobs)
