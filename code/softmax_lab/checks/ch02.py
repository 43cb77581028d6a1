"""Checks for chapter 2 (masks and padding): the masked load and store of a one-row-per-program kernel.

``check_masked_rows(softmax_rows)`` runs the learner's launcher ``softmax_rows(x, out)`` (2-D, contiguous) on
row lengths around powers of two, the all-negative row in a block of 4, and large values. Outputs are
poisoned and followed by a guard zone, so a missing store mask or a load that runs into the next row is
caught and named.
"""
from __future__ import annotations

import torch
import triton

from ..testing import BOUNDARY_SHAPES
from ._pitfalls import Verdict, random_rows, softmax_problem
from .common import Report, _returned, lane_map_of
from ..device import DEVICE as _DEVICE

__all__ = ["check_masked_rows", "MASK_CASES"]

MASK_CASES = [
    ("3 columns in a block of 4 [[1, 2, 3]]", torch.tensor([[1.0, 2.0, 3.0]])),
    ("all-negative row [-1002, -1001, -1000]", torch.tensor([[-1002.0, -1001.0, -1000.0]])),
    *[(f"random {r}x{c}", random_rows((r, c), 20 + i)) for i, (r, c) in enumerate(BOUNDARY_SHAPES)],
    ("all-negative rows 3x5", -1000.0 - random_rows((3, 5), 30).abs()),
    ("large values [1000, 1001, 1002]", torch.tensor([[1000.0, 1001.0, 1002.0]])),
]


def lane_launch(softmax_rows):
    """How the lane map (shown after a FAIL) runs the learner's launcher on one input."""
    return lambda x: _returned(softmax_rows(x, out := torch.empty_like(x)), out)


def lane_input():
    """Contiguous rows: this chapter's kernel steps from row to row by n_cols (strides come in chapter 4)."""
    return torch.randn(4, 10, generator=torch.Generator().manual_seed(0)).to(_DEVICE)


def check_masked_rows(softmax_rows) -> Verdict:
    """Print PASS/FAIL per case and a summary line; True when all pass."""
    report = Report("ch02-masked-load-store", drawing=lane_map_of(lane_launch(softmax_rows), lane_input))
    for name, values in MASK_CASES:
        report.run(name, lambda v=values: softmax_problem(softmax_rows, v, triton.next_power_of_2))
    return Verdict(report.show())


# ------------------------------------------------------------------------------- what the grader launches

def _judge_cases(rng):
    from .judging import np2, softmax_case, softmax_rows

    shapes = [(1, 3), (2, 31), (3, 32), (4, 33), (2, int(rng.integers(100, 255))), (3, 257),
              (3, int(rng.integers(3, 8)))]
    out = []
    for R, C in shapes:
        x = softmax_rows(rng, (R, C))
        out.append(softmax_case(rng, f"{R}x{C}", x, ["out", "x", "n"], np2(C), (R,)))
    return out


def _judges():
    from .judging import KernelJudge

    return {"ch02-masked-load-store": KernelJudge("softmax_rows_kernel", _judge_cases)}


JUDGES = _judges()
