"""The operators as torch.compile sees them on a GPU: ``torch.library.triton_op`` bodies that launch the kernels
through ``wrap_triton``.

``op.py`` registers these functions as ``softmax_lab::softmax``, ``masked_softmax`` and ``softmax_backward`` when
kernels run on a GPU. torch.compile traces them (with FakeTensors: only shapes, strides and dtypes, never
addresses), so Inductor's generated code launches the kernels itself, next to its own kernels, instead of calling
an opaque operator through the dispatcher on every step; torch.export keeps one node per call. Eager calls of
``softmax_lab.softmax`` do not come here: they take the dispatcher's tuned kernels (``op.py``).

Which kernels: the masked kernel (``kernels/masked.py``, one row per program; without a mask for plain softmax)
for rows up to its ``MAX_COLS``, the backward tile kernel for rows up to ``tuning.BACKWARD_TILE_COLS``, and the
float64 kernels (``kernels/double.py``, any row length) for float64 and for longer rows. On the CPU these bodies
are not used: Triton's interpreter cannot be traced, so the operators there are opaque ``custom_op``s.
"""
import torch
from torch import Tensor
from torch.library import wrap_triton

from .kernels import double
from .kernels._launch import cdiv, default_num_warps
from .kernels.backward import softmax_backward_kernel
from .kernels.masked import MAX_COLS as MASKED_MAX_COLS
from .kernels.masked import masked_softmax_kernel
from .kernels.tuning import BACKWARD_TILE, BACKWARD_TILE_COLS
from .rows import as_rows, from_rows, normalize_dim, refuse_tangents, refuse_unlike


def _block(n, most: int | None = None) -> int:
    """The next power of two >= ``n`` (at most ``most``). Written with comparisons, not ``bit_length``: under
    torch.compile with dynamic shapes ``n`` is a SymInt, and comparisons guard a range of lengths (one compiled
    graph for all rows of 513-1024 elements) where an ``int(n)`` would recompile for every length."""
    block = 1
    while block < n and (most is None or block < most):
        block *= 2
    return block


def _as_4d(t: Tensor) -> Tensor:
    """``t`` as [B, H, S_q, S_k] (the masked kernel's view): leading 1s added, extra leading dims folded into B."""
    while t.dim() < 4:
        t = t.unsqueeze(0)
    return t.reshape(-1, *t.shape[-3:]) if t.dim() > 4 else t


def _forward(x: Tensor, mask: Tensor | None, dim: int) -> Tensor:
    dim = normalize_dim(dim, x.dim())
    if x.dim() == 0:
        return _forward(x.reshape(1), None if mask is None else mask.reshape(1), 0).reshape(())
    last = x.dim() - 1
    xs = x if dim == last else x.movedim(dim, last)  # rows along the last dim (a view)
    out = torch.empty(xs.shape, dtype=x.dtype, device=x.device)
    if x.numel() == 0:
        return out if dim == last else out.movedim(last, dim).contiguous()
    ms = None if mask is None else mask.expand(x.shape)  # stride 0 along broadcast dims: never copied
    ms = ms if ms is None or dim == last else ms.movedim(dim, last)
    n_cols = xs.shape[-1]
    if x.dtype != torch.float64 and n_cols <= MASKED_MAX_COLS:
        s4 = _as_4d(xs)
        kind, m4, m_strides = 0, s4, (0, 0, 0, 0)  # (no mask: not read)
        if ms is not None:
            kind = 1 if ms.dtype == torch.bool else 2
            m4 = _as_4d(ms)  # a bool mask as it is: Inductor cannot lower .view(uint8) of an expanded one
            m_strides = m4.stride()
        b, h, q, k = s4.shape
        block = _block(k)
        wrap_triton(masked_softmax_kernel)[(b * h * q,)](
            out, s4, m4, h, q, k, *s4.stride(), *m_strides, MASK_KIND=kind, BLOCK=block,
            num_warps=default_num_warps(block))
    else:  # float64, or rows longer than the masked kernel takes: the float64 kernels, on 2-D rows
        x2 = xs.reshape(-1, n_cols)
        x2 = x2 if x2.stride(1) == 1 else x2.contiguous()
        kind, m, m_strides = double.NO_MASK, x2, (0, 0)
        if ms is not None:
            kind = double.BOOL_MASK if ms.dtype == torch.bool else double.ADD_MASK
            m = ms.reshape(-1, n_cols)
            m_strides = m.stride()
        wrap_triton(double.double_softmax_kernel)[(x2.shape[0],)](
            out, x2, m, x2.stride(0), n_cols, *m_strides, n_cols, MASK_KIND=kind,
            BLOCK=_block(n_cols, double.MAX_BLOCK), num_warps=4)
    return out if dim == last else out.movedim(last, dim).contiguous()


def softmax(x: Tensor, dim: int) -> Tensor:
    """Softmax of ``x`` along ``dim`` (negative counts from the end); a new contiguous tensor."""
    refuse_tangents("softmax", x)
    return _forward(x.resolve_neg(), None, dim)


def masked_softmax(x: Tensor, mask: Tensor, dim: int) -> Tensor:
    """Softmax of ``x`` along ``dim`` under ``mask`` (bool: True takes part; float: added; broadcast to x)."""
    refuse_tangents("masked_softmax", x, mask)
    return _forward(x.resolve_neg(), mask.resolve_neg(), dim)


def softmax_backward(y: Tensor, dy: Tensor, dim: int) -> Tensor:
    """dx = y·(dy - Σ dy·y) along ``dim``, for y = softmax(x) and the incoming gradient dy."""
    refuse_tangents("softmax_backward", y, dy)
    refuse_unlike(y, dy)
    y, dy = y.resolve_neg(), dy.resolve_neg()
    dim = normalize_dim(dim, y.dim())
    if y.dim() == 0:
        return softmax_backward(y.reshape(1), dy.reshape(1), 0).reshape(())
    if y.numel() == 0:
        return torch.empty(y.shape, dtype=y.dtype, device=y.device)
    y2, dy2 = as_rows(y, dim), as_rows(dy, dim)
    dx2 = torch.empty(y2.shape, dtype=y.dtype, device=y.device)
    n_rows, n_cols = y2.shape
    strides = (y2.stride(0), dy2.stride(0), dx2.stride(0))
    if y.dtype != torch.float64 and n_cols <= BACKWARD_TILE_COLS:
        block = _block(n_cols)
        rows = max(1, BACKWARD_TILE // block)
        wrap_triton(softmax_backward_kernel)[(cdiv(n_rows, rows),)](
            dx2, y2, dy2, *strides, n_rows, n_cols, ROWS=rows, BLOCK=block, VEC=1,
            num_warps=default_num_warps(rows * block))
    else:
        wrap_triton(double.double_backward_kernel)[(n_rows,)](
            dx2, y2, dy2, *strides, n_cols, BLOCK=_block(n_cols, double.MAX_BLOCK), num_warps=4)
    return from_rows(dx2, y.shape, dim)
