"""Small helpers every launcher shares: input checks and the output buffer. No kernels here."""
from __future__ import annotations

import torch

from ..device import DEVICE

FLOAT_DTYPES = (torch.float16, torch.bfloat16, torch.float32)


def check_input(x: torch.Tensor, name: str = "x") -> None:
    """Raise TypeError/ValueError for inputs the kernels cannot take (never return a wrong result)."""
    if not isinstance(x, torch.Tensor):
        raise TypeError(f"{name} must be a torch.Tensor, got {type(x).__name__}")
    if x.dtype not in FLOAT_DTYPES:
        raise TypeError(f"{name} has dtype {x.dtype}; the kernels take float16, bfloat16 or float32 "
                        "(they accumulate in float32)")
    if x.dim() != 2:
        raise ValueError(f"{name} must be 2-D [rows, cols] (softmax over the last dim), got shape {tuple(x.shape)}; "
                         "softmax_lab.softmax takes any shape")
    if x.device.type != DEVICE.type:
        raise ValueError(f"{name} is on {x.device} but kernels run on {DEVICE.type}: "
                         "move it with .to(softmax_lab.DEVICE)")


def rows_view(x: torch.Tensor) -> torch.Tensor:
    """Kernels step between rows with the row stride, but need the elements of a row next to each other."""
    return x if x.stride(1) == 1 or x.shape[1] <= 1 else x.contiguous()


def output_for(x: torch.Tensor, out: torch.Tensor | None, name: str = "out") -> torch.Tensor:
    """The caller's ``out`` (checked), or a new tensor like ``x``."""
    if out is None:
        return torch.empty(x.shape, dtype=x.dtype, device=x.device)
    if tuple(out.shape) != tuple(x.shape) or out.dtype != x.dtype or out.device != x.device:
        raise ValueError(f"{name} must match the input: shape {tuple(x.shape)}, {x.dtype} on {x.device}; "
                         f"got shape {tuple(out.shape)}, {out.dtype} on {out.device}")
    if out.shape[1] > 1 and out.stride(1) != 1:
        raise ValueError(f"{name} must have contiguous rows (stride 1 along the last dim)")
    return out


def prepare(x: torch.Tensor, out: torch.Tensor | None, max_cols: int | None = None, kernel: str = "",
            instead: str = "") -> tuple[torch.Tensor, torch.Tensor]:
    """What every launcher does first: check ``x`` (and its row length against ``max_cols``), make its rows
    contiguous, and get the output. Returns ``(x, y)``."""
    check_input(x)
    if max_cols is not None:
        check_row_length(x.shape[1], max_cols, kernel, instead)
    x = rows_view(x)
    return x, output_for(x, out)


def check_row_length(n_cols: int, max_cols: int, kernel: str, instead: str) -> None:
    if n_cols > max_cols:
        raise ValueError(f"{kernel} supports rows of up to {max_cols} elements, got {n_cols}; use {instead}")


def num_sms(device: torch.device) -> int:
    """Multiprocessors of the GPU (programs run on these); 4 in the CPU interpreter, to keep grids small."""
    if device.type == "cuda":
        return torch.cuda.get_device_properties(device).multi_processor_count
    return 4


def default_num_warps(block: int) -> int:
    """More warps for wider blocks: roughly 8-16 elements per thread."""
    if block <= 1024:
        return 4
    if block <= 4096:
        return 8
    if block <= 16384:
        return 16
    return 32


# Plain-Python twins of triton.cdiv and triton.next_power_of_2. Triton's versions go through a constexpr
# wrapper costing microseconds per call, and a launcher calls them on every launch (launch overhead matters
# on small inputs, where the kernel itself takes only ~10 µs on a GPU).
def cdiv(a: int, b: int) -> int:
    return -(-a // b)


def next_power_of_2(n: int) -> int:
    return 1 if n <= 1 else 1 << (n - 1).bit_length()
