"""``softmax_lab.softmax(x, dim=-1, mask=None)``: the dispatcher.

It picks a kernel from ``softmax_lab.kernels`` for the row length and row count (``choose``), handles any
shape, any ``dim``, strided inputs, empty tensors and autograd, and returns a tensor in ``x``'s dtype
(arithmetic in float32). How the choice was tuned on an H200: ``results/README.md``.

* short rows: ``multirow`` with several rows per program (one row per program from about 1024 elements);
* rows that fit one block (up to 32768 elements): ``fused``, one row per program, more warps;
* longer rows: ``online`` (one program per row, walking it in tiles) when there are at least as many rows
  as multiprocessors, else ``split_row`` (several programs per row).

With ``mask`` (SDPA convention: bool True = takes part, float = added; broadcast to ``x``), the masked
kernel runs instead; rows where everything is masked come out as zeros, not NaN.
"""
from __future__ import annotations

import torch

from .device import DEVICE
from .kernels import SoftmaxFunction, cooperative_softmax, fused_softmax, masked_softmax, multirow_softmax
from .kernels._launch import FLOAT_DTYPES

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


def _check(x: torch.Tensor, mask: torch.Tensor | None) -> None:
    if not isinstance(x, torch.Tensor):
        raise TypeError(f"softmax needs a torch.Tensor, got {type(x).__name__}")
    if not x.dtype.is_floating_point:
        raise TypeError(f"softmax needs a floating-point tensor, got {x.dtype}: convert it first, e.g. x.float()")
    if x.dtype not in FLOAT_DTYPES:
        raise TypeError(f"softmax_lab kernels take float16, bfloat16 or float32 (float32 arithmetic), got {x.dtype}")
    if x.device.type != DEVICE.type:
        raise ValueError(f"x is on {x.device} but kernels run on {DEVICE.type}: use x.to(softmax_lab.DEVICE)")
    if mask is not None:
        if not isinstance(mask, torch.Tensor):
            raise TypeError(f"mask must be a torch.Tensor or None, got {type(mask).__name__}")
        if mask.device != x.device:
            raise ValueError(f"mask is on {mask.device} but x is on {x.device}")
        if mask.dtype != torch.bool and not mask.dtype.is_floating_point:
            raise TypeError(f"mask must be bool (True = takes part) or floating point (added), got {mask.dtype}")
        try:
            torch.broadcast_shapes(mask.shape, x.shape)
        except RuntimeError:
            raise ValueError(f"mask of shape {tuple(mask.shape)} does not broadcast to x of shape "
                             f"{tuple(x.shape)}") from None
        if torch.broadcast_shapes(mask.shape, x.shape) != x.shape:
            raise ValueError(f"mask of shape {tuple(mask.shape)} would broadcast x of shape {tuple(x.shape)} "
                             "to a bigger shape")


def _softmax_2d(x2: torch.Tensor) -> torch.Tensor:
    """Softmax over the last dim of a 2-D tensor whose rows are contiguous."""
    n_rows, n_cols = x2.shape
    _, launch, knobs = choose(n_rows, n_cols, x2.dtype)
    return launch(x2, **knobs)


def softmax(x: torch.Tensor, dim: int = -1, mask: torch.Tensor | None = None) -> torch.Tensor:
    """Softmax of ``x`` along ``dim`` on the fastest kernel for its shape; same dtype as ``x``.

    Follows ``torch.softmax`` for NaN and ±inf (a row with NaN or +inf gives NaN; an all -inf row gives NaN),
    except with ``mask``: rows where everything is masked give zeros. Differentiable.
    """
    _check(x, mask)
    if x.dim() == 0:
        return softmax(x.reshape(1), 0, None if mask is None else mask.reshape(1)).reshape(())
    dim = dim + x.dim() if dim < 0 else dim
    if not 0 <= dim < x.dim():
        raise IndexError(f"dim {dim} is out of range for a {x.dim()}-D tensor")
    if x.numel() == 0:
        return torch.empty_like(x)
    last = x.dim() - 1
    xt = x.movedim(dim, last) if dim != last else x
    if mask is not None:
        mt = mask.expand(x.shape)
        mt = mt.movedim(dim, last) if dim != last else mt
        forward = lambda t: masked_softmax(t, mt)  # noqa: E731
        y = SoftmaxFunction.apply(xt, forward) if _needs_grad(xt) else forward(xt)
    else:
        n = xt.shape[-1]
        x2 = xt.reshape(-1, n)
        if n > 1 and x2.stride(-1) != 1:
            x2 = x2.contiguous()
        y = (SoftmaxFunction.apply(x2, _softmax_2d) if _needs_grad(x2) else _softmax_2d(x2)).view(xt.shape)
    return y.movedim(last, dim) if dim != last else y


def _needs_grad(t: torch.Tensor) -> bool:
    return torch.is_grad_enabled() and t.requires_grad
softmax.choose = choose  # softmax_lab.softmax.choose(n_rows, n_cols, dtype): what the dispatcher would run
