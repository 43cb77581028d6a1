"""Three row kernels that pass a quick test on contiguous rows, each with one bug (ch04-find-the-bug).

Each scales every row of a 2-D tensor so that its absolute values add up to 1, with one program per row and the
rows ``in_row_stride`` / ``out_row_stride`` elements apart, like chapter 4's fused kernel (not a softmax: their
source must not answer another exercise). Chapter 4 shows their source (``show``) and runs the quick test on them
(``quick_test``); the learner finds each bug and a test layout that exposes it. ``goes_wrong`` runs one on a
layout (the notebook check); ``simulate`` computes the same in float64 (the grader's judge, which has no kernels).
"""
from __future__ import annotations

import inspect

import numpy as np
import torch
import triton
import triton.language as tl

from ..device import DEVICE
from .common import GUARD, GUARD_LEN, guarded


@triton.jit
def suspect_a_kernel(out_ptr, in_ptr, in_row_stride, out_row_stride, n_cols, BLOCK: tl.constexpr):
    r = tl.program_id(0).to(tl.int64)
    k = tl.arange(0, BLOCK)
    inside = k < n_cols
    v = tl.load(in_ptr + r * in_row_stride + k)
    total = tl.sum(tl.abs(v), axis=0)
    tl.store(out_ptr + r * out_row_stride + k, v / total, mask=inside)


@triton.jit
def suspect_b_kernel(out_ptr, in_ptr, in_row_stride, out_row_stride, n_cols, BLOCK: tl.constexpr):
    r = tl.program_id(0).to(tl.int64)
    k = tl.arange(0, BLOCK)
    inside = k < n_cols
    v = tl.load(in_ptr + r * n_cols + k, mask=inside, other=0.0)
    total = tl.sum(tl.abs(v), axis=0)
    tl.store(out_ptr + r * out_row_stride + k, v / total, mask=inside)


@triton.jit
def suspect_c_kernel(out_ptr, in_ptr, in_row_stride, out_row_stride, n_cols, BLOCK: tl.constexpr):
    r = tl.program_id(0).to(tl.int64)
    k = tl.arange(0, BLOCK)
    inside = k < n_cols
    v = tl.load(in_ptr + r * in_row_stride + k, mask=inside, other=0.0)
    total = tl.sum(tl.abs(v), axis=0)
    tl.store(out_ptr + r * in_row_stride + k, v / total, mask=inside)


SUSPECTS = {"A": suspect_a_kernel, "B": suspect_b_kernel, "C": suspect_c_kernel}
QUICK_SHAPES = [(4, 16), (8, 32), (2, 64)]  # contiguous rows whose length is a power of two


def launcher(name: str):
    """``fn(x, out)``: suspect ``name`` launched like the chapter's fused kernel (one program per row)."""
    kernel = SUSPECTS[name]

    def launch(x: torch.Tensor, out: torch.Tensor) -> torch.Tensor:
        n_rows, n_cols = x.shape
        kernel[(n_rows,)](out, x, x.stride(0), out.stride(0), n_cols, BLOCK=triton.next_power_of_2(n_cols))
        return out

    return launch


def show(name: str) -> None:
    """Print suspect ``name``'s kernel."""
    print(inspect.getsource(SUSPECTS[name].fn).split("\n", 1)[1].rstrip())  # without the decorator line


def reference(x: torch.Tensor) -> torch.Tensor:
    """What every suspect should compute: each row divided by the sum of its absolute values."""
    return x / x.abs().sum(dim=-1, keepdim=True)


def quick_test(name: str) -> str:
    """The quick test every suspect passes: random contiguous rows of QUICK_SHAPES against ``reference``."""
    launch = launcher(name)
    g = torch.Generator().manual_seed(4)
    for rows, cols in QUICK_SHAPES:
        x = torch.randn(rows, cols, generator=g).to(DEVICE)
        y = launch(x, torch.empty_like(x))
        if not torch.allclose(y, reference(x), rtol=1e-5, atol=1e-6):
            return f"suspect {name}: FAIL on {rows}x{cols}"
    return f"suspect {name}: passes the quick test ({', '.join(f'{r}x{c}' for r, c in QUICK_SHAPES)}, contiguous)"


def goes_wrong(name: str, layout, seed: int = 76) -> bool:
    """Suspect ``name`` on ``layout`` = (rows, cols, input row step, output row step), random values (and random
    values in the input's gaps and after its end), output poisoned with NaN and GUARD around it: does it write a
    wrong value, or write where it must not?"""
    rows, cols, in_step, out_step = layout
    g = torch.Generator().manual_seed(seed)
    source = (torch.randn(rows * in_step + GUARD_LEN, generator=g) * 3).to(DEVICE)
    x = source[: rows * in_step].view(rows, in_step)[:, :cols]
    flat = guarded(rows * out_step, device=DEVICE)
    out = flat[: rows * out_step].view(rows, out_step)[:, :cols]
    out.fill_(float("nan"))
    launcher(name)(x, out)
    inside = torch.zeros(flat.numel(), dtype=torch.bool, device=DEVICE)
    inside[: rows * out_step].view(rows, out_step)[:, :cols] = True
    if bool((flat[~inside] != GUARD).any()):
        return True
    return not torch.allclose(out, reference(x), rtol=1e-5, atol=1e-6)


def simulate(name: str, layout, rng: np.random.Generator) -> bool:
    """``goes_wrong`` computed in float64 (values from ``rng``), as the suspect's kernel runs."""
    rows, cols, in_step, out_step = layout
    block = triton.next_power_of_2(cols)
    source = rng.normal(0, 3, rows * in_step + block)
    x = np.stack([source[r * in_step: r * in_step + cols] for r in range(rows)])
    ref = x / np.abs(x).sum(axis=1, keepdims=True)
    out = np.full(rows * max(in_step, out_step) + block, GUARD)
    for r in range(rows):
        start = r * (cols if name == "B" else in_step)
        lanes = source[start: start + (block if name == "A" else cols)]  # A reads every lane of its block
        at = r * (in_step if name == "C" else out_step)
        out[at: at + cols] = lanes[:cols] / np.abs(lanes).sum()
    inside = np.zeros(out.size, dtype=bool)
    for r in range(rows):
        inside[r * out_step: r * out_step + cols] = True
    got = np.stack([out[r * out_step: r * out_step + cols] for r in range(rows)])
    return bool((out[~inside] != GUARD).any() or not np.allclose(got, ref, rtol=1e-5, atol=1e-6))
