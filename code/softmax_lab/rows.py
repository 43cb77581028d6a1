"""The operator's plumbing, shared by its eager bodies (``op.py``) and its traced ones (``traced.py``): ``dim``
checked the way torch checks it, any tensor as 2-D rows along ``dim`` and back, and the forward-AD guard."""
from __future__ import annotations

import operator

import torch
import torch.autograd.forward_ad as forward_ad
from torch import Tensor


def as_dim(dim):
    """An integer-like ``dim`` (a NumPy integer: anything with ``__index__``) as an int, as torch takes it; other
    values as they are (``normalize_dim`` says what is wrong with them)."""
    if type(dim) is int or isinstance(dim, (bool, torch.SymInt)) or not hasattr(type(dim), "__index__"):
        return dim
    return operator.index(dim)


def normalize_dim(dim, ndim: int) -> int:
    """``dim`` made non-negative, with torch's errors."""
    if isinstance(dim, torch.SymInt):  # (make_fx with symbolic shapes passes ints as SymInts: the dim is static)
        dim = int(dim)
    if isinstance(dim, bool) or not isinstance(dim, int):
        raise TypeError(f"softmax(): argument 'dim' (position 2) must be int, not {type(dim).__name__}")
    span = max(ndim, 1)  # a 0-d tensor takes dim 0 or -1, like torch
    if not -span <= dim < span:
        raise IndexError(f"Dimension out of range (expected to be in range of [{-span}, {span - 1}], but got {dim})")
    return dim + span if dim < 0 else dim


def as_rows(t: Tensor, dim: int) -> Tensor:
    """``t`` with ``dim`` moved last, as a 2-D [rows, n] tensor whose rows are contiguous."""
    if t.dim() != 2 or dim != 1:  # (a 2-D input along dim 1 needs no new view: views cost microseconds)
        t = t.movedim(dim, -1) if dim != t.dim() - 1 else t
        t = t.reshape(-1, t.shape[-1])
    return t.contiguous() if t.shape[1] > 1 and t.stride(1) != 1 else t


def from_rows(y2: Tensor, shape, dim: int) -> Tensor:
    """Undo ``as_rows`` for a fresh output: shape it like the input, contiguous."""
    last = len(shape) - 1
    if dim == last:
        return y2 if last == 1 else y2.view(*shape)  # (view(*ints) is cheaper than view(Size) per call)
    moved = list(shape)
    moved.append(moved.pop(dim))
    return y2.view(*moved).movedim(-1, dim).contiguous()


def refuse_unlike(y: Tensor, dy: Tensor) -> None:
    """softmax_backward's y and dy must be alike, as torch's own ``_softmax_backward_data`` asks: dx is computed
    in their dtype, so a float64 dy beside a float32 y would lose its precision without a word."""
    if y.shape != dy.shape:  # (rows alike are not enough: y 2x3x4 and dy 3x2x4 fold to the same rows)
        raise ValueError(f"dy has shape {tuple(dy.shape)} but y has shape {tuple(y.shape)}: softmax_backward "
                         "needs them alike")
    if y.device != dy.device:
        raise ValueError(f"dy is on {dy.device} but y is on {y.device}: softmax_backward needs them on one device")
    if y.dtype != dy.dtype:
        raise ValueError(f"dy is {dy.dtype} but y is {y.dtype}: softmax_backward needs them alike (torch's "
                         f"_softmax_backward_data does too); convert one first, e.g. dy.to({y.dtype})")


def refuse_tangents(op: str, *tensors: Tensor) -> None:
    """Called directly under forward-mode AD, a custom op would drop the tangents without a word: refuse."""
    if forward_ad._current_level < 0:
        return
    try:
        dual = any(forward_ad.unpack_dual(t).tangent is not None for t in tensors)
    except RuntimeError:  # traced (make_fx of a jvp, linearize): the tangents are the tracer's business, not ours
        return
    if dual:
        raise RuntimeError(f"torch.ops.softmax_lab.{op} does not carry forward-mode AD tangents; call "
                           "softmax_lab.softmax(...) instead, which implements the jvp y·(ẋ - Σ y·ẋ)")
