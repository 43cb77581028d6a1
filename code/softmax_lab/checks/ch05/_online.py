"""What chapter 5's exercises share: the -inf that starts a running max, the two classic mistakes of the
(m, l) recurrence in plain words, the (max, sum) of a chunk, and per-element traffic counts."""
from __future__ import annotations

import math




NEG_INF = float("-inf")


RESCALE = ("l was not rescaled when the max grew: the old sum was counted against the old max, so a later "
           "tile that raises the max leaves it too large")


INF_TILE = ("a tile of all -inf gives m_new = -inf, and shifting by it computes exp(-inf - (-inf)) = NaN, which "
            "poisons the running sum from then on")


def _close(a: float, b: float) -> bool:
    if math.isinf(a) or math.isinf(b):
        return a == b
    return abs(a - b) <= 1e-9 + 1e-9 * abs(b)


def _per_element(count: int, n: int) -> str:
    """How many times per element, as a learner reads it: '3', '2.5'."""
    return f"{count / n:.3g}"


def _stats(values) -> tuple[float, float]:
    """(max, sum of exp(v - max)) of a chunk in float64; (-inf, 0) for an empty or all -inf chunk."""
    vals = [float(v) for v in values]
    m = max(vals, default=NEG_INF)
    if m == NEG_INF:
        return NEG_INF, 0.0
    return m, math.fsum(math.exp(v - m) for v in vals)
