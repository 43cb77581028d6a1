"""The online softmax state ``(m, l)`` and how two of them combine: one ``@triton.jit`` helper for every kernel.

A softmax over part of a row needs two numbers: ``m``, the largest value seen, and ``l = Σ exp(x - m)``.
Two parts ``(m_a, l_a)`` and ``(m_b, l_b)`` combine into the state of both:

    m = max(m_a, m_b),    l = l_a·exp(m_a - m) + l_b·exp(m_b - m)

(each sum is rescaled to the common max). ``online.py`` folds every tile into a running state per lane,
``split_row.py`` and ``cooperative.py`` combine the states of a row's chunks. Chapter 5 builds the same update.

-inf care: while everything seen is -inf, ``m`` is -inf and ``x - m`` would be -inf - (-inf) = NaN, so the
shift is 0 instead (``safe_shift``): exp(-inf) = 0 and ``l`` stays 0. A row that is -inf everywhere still
gives NaN at the end (0 / 0), like torch.softmax.
"""
import triton
import triton.language as tl


@triton.jit
def safe_shift(m):
    """The max to subtract: ``m``, or 0 where ``m`` is -inf (nothing but -inf seen yet)."""
    return tl.where(m == float("-inf"), 0.0, m)


@triton.jit
def online_combine(m_a, l_a, m_b, l_b):
    """The state of two parts, elementwise: (max, both sums rescaled to it). ``(x, 1.0)`` is one value's state."""
    m = tl.maximum(m_a, m_b)
    shift = safe_shift(m)
    return m, l_a * tl.exp(m_a - shift) + l_b * tl.exp(m_b - shift)


@triton.jit
def online_reduce(m, l):
    """Combine a 1-D block of states (lanes, or a row's chunks) into one: ``(max, total sum)``."""
    m_all = tl.max(m, axis=0)
    return m_all, tl.sum(l * tl.exp(m - safe_shift(m_all)), axis=0)
