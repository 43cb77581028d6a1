"""Masked softmax for attention scores ``[B, H, S_q, S_k]`` (or any shape: leading dims are folded).

The mask follows ``torch.nn.functional.scaled_dot_product_attention``:
  * boolean mask: ``True`` = this key takes part, ``False`` = masked out (as if the score were -inf);
  * any float mask: added to the scores (use -inf, or a large negative number, to mask);
  * it broadcasts against the scores, e.g. ``[S_q, S_k]`` (causal) or ``[B, 1, 1, S_k]`` (padding).

Difference from a plain softmax (documented on purpose): a row where every key is masked out returns
ZEROS, not NaN (torch.softmax would give NaN: exp(-inf - -inf)). A fully masked query then contributes
nothing instead of poisoning everything after it with NaN.

The mask is never copied: broadcast dimensions are read with stride 0.
"""
import torch
import triton
import triton.language as tl

from ._launch import (check_knobs, check_mask, check_no_grad, check_row_length, check_tensor, default_num_warps,
                      next_power_of_2)
from .combine import safe_shift

MAX_COLS = 65536
NO_MASK, BOOL_MASK, ADD_MASK = 0, 1, 2


@triton.jit
def masked_softmax_kernel(out_ptr, s_ptr, mask_ptr, n_heads, n_q, n_cols,
                          s_sb, s_sh, s_sq, s_sk, m_sb, m_sh, m_sq, m_sk,
                          MASK_KIND: tl.constexpr, BLOCK: tl.constexpr):
    # One program per row of scores: find its (batch, head, query) to step with each tensor's strides.
    row = tl.program_id(0).to(tl.int64)
    q = row % n_q
    h = (row // n_q) % n_heads
    b = row // (n_q * n_heads)
    cols = tl.arange(0, BLOCK)
    in_row = cols < n_cols
    s = tl.load(s_ptr + b * s_sb + h * s_sh + q * s_sq + cols * s_sk, mask=in_row,
                other=float("-inf")).to(tl.float32)
    mask_at = mask_ptr + b * m_sb + h * m_sh + q * m_sq + cols * m_sk
    if MASK_KIND == 1:  # boolean: False -> -inf
        keep = tl.load(mask_at, mask=in_row, other=0) != 0
        s = tl.where(keep, s, float("-inf"))
    elif MASK_KIND == 2:  # additive
        s = s + tl.load(mask_at, mask=in_row, other=0.0).to(tl.float32)
    # A fully masked row has max -inf: shift by 0 instead, so every exp() is 0 ...
    num = tl.exp(s - safe_shift(tl.max(s, axis=0)))
    total = tl.sum(num, axis=0)
    # ... and divide by 1 instead of 0: the row comes out as zeros.
    y = num / tl.where(total == 0.0, 1.0, total)
    tl.store(out_ptr + row * n_cols + cols, y.to(out_ptr.dtype.element_ty), mask=in_row)


def _as_4d(t: torch.Tensor) -> torch.Tensor:
    """View ``t`` as [B, H, S_q, S_k]: add leading 1s, or fold extra leading dims into B."""
    while t.dim() < 4:
        t = t.unsqueeze(0)
    if t.dim() > 4:
        t = t.reshape(-1, *t.shape[-3:])
    return t


def masked_softmax(scores: torch.Tensor, mask: torch.Tensor | None = None, num_warps: int | None = None):
    """Softmax over the last dim of ``scores`` (any shape, usually [B, H, S_q, S_k]) under an SDPA-style
    ``mask`` (bool: True = takes part; float: added). Fully masked rows give zeros. Returns a contiguous
    tensor shaped like ``scores``, in its dtype. A raw launch: it records no gradient, so it refuses inputs
    that require grad (``softmax_lab.softmax(scores, -1, mask=mask)`` is the differentiable operator)."""
    check_tensor(scores, "scores")
    if scores.dim() == 0:
        raise ValueError("scores must have at least one dimension")
    check_no_grad(scores, "scores")
    check_knobs(num_warps=num_warps)
    kind = NO_MASK
    if mask is not None:
        check_mask(mask, scores, "scores")
        check_no_grad(mask, "mask")
        kind = BOOL_MASK if mask.dtype == torch.bool else ADD_MASK
        mask = mask.expand(scores.shape)  # broadcast like SDPA; stride 0, no copy
    n_cols = scores.shape[-1]
    check_row_length(n_cols, MAX_COLS, "masked_softmax", "a shorter key length")
    out = torch.empty(scores.shape, dtype=scores.dtype, device=scores.device)
    if scores.numel() == 0:
        return out
    s4 = _as_4d(scores)
    if mask is None:
        m4, m_strides = s4, (0, 0, 0, 0)  # not read
    else:
        m4 = _as_4d(mask.view(torch.uint8) if kind == BOOL_MASK else mask)
        m_strides = m4.stride()
    B, H, Q, K = s4.shape
    BLOCK = next_power_of_2(K)
    masked_softmax_kernel[(B * H * Q,)](out, s4, m4, H, Q, K, *s4.stride(), *m_strides,
                                        MASK_KIND=kind, BLOCK=BLOCK,
                                        num_warps=num_warps or default_num_warps(BLOCK))
    return out
