"""Exercise ch09-block-tree: one block per row, the max and the sum reduced as a tree in shared memory."""
from __future__ import annotations

from .._pitfalls import Verdict
from ..common import Report
from ._blocks import _check_kernel, _launcher


def check_block_tree(kernel) -> Verdict:
    """Exercise ch09-block-tree: ``kernel(x, y, n_cols)``, one block per row, trees in dynamic shared memory."""
    report = Report("ch09-block-tree")
    _check_kernel(report, kernel, _launcher(kernel), 90, [(2, 100, 64)])
    return Verdict(report.show())
