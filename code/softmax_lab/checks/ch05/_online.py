"""What chapter 5's exercises share: the -inf that starts a running max, the two classic mistakes of the
(m, l) recurrence in plain words, the (max, sum) of a chunk, and per-element traffic counts."""
from __future__ import annotations

import math




NEG_INF = float("-inf")


RESCALE = ("forgot to rescale l by exp(m - m_new): the old sum was counted against the old max, so when a "
           "later tile raises the max it must shrink")


INF_TILE = ("a tile of all -inf gives m_new = -inf and exp(-inf - (-inf)) = NaN: while the max is still -inf, "
            "shift by 0 instead (Python: 0.0 if m_new == -inf else m_new; Triton: tl.where(m_new == -inf, 0.0, m_new))")


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
