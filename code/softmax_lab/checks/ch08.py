"""Checks for chapter 8, the backward pass: ``dx = y * (dy - sum(dy * y))`` per row.

``check_softmax_backward(softmax_backward)`` runs a learner's launcher ``softmax_backward(y, dy, out)`` on the
boundary shapes, half precision, strided views and rows where the answer is known exactly, and names the usual
mistakes: the missing ``- sum(dy * y)`` term, ``sum(dy)`` instead of ``sum(dy * y)``, a flipped sign, and
forgetting the factor ``y``. Two properties the chapter teaches are checked on the learner's kernel too:

* **accumulate in fp32**: half-precision rows designed so that an fp16 dot product visibly breaks the tolerance
  (``dy = 1000 + small noise``: adding a constant to ``dy`` cannot change ``dx``, but near 1000 fp16 values are
  0.5 apart, so a dot product rounded to fp16 is off by up to 0.25 and every ``dx`` with it);
* **traffic**: two reads (``y``, ``dy``) and one write (``dx``) per element, counted by ``memcount``.
"""
from __future__ import annotations

import torch

from ..device import DEVICE
from ..memcount import count_calls
from ..reference import softmax_backward_ref, softmax_ref
from ..testing import TOLERANCES, poisoned_like, randn
from ._pitfalls import quiet
from .ch06 import half_sums_in_half
from ._pitfalls import Verdict
from .common import Report, _returned, lane_map_of
from ..device import DEVICE as _DEVICE
from . import judging
from .judging import KernelJudge

__all__ = ["check_softmax_backward"]

# (what the mistake computes, in float64; what to tell the learner)
MISTAKES = [
    (lambda y, dy: y * dy,
     "the - sum(dy * y) term is missing: every input moves every output through the shared denominator, "
     "so dx = y * (dy - sum(dy * y))"),
    (lambda y, dy: y * (dy - dy.sum(-1, keepdim=True)),
     "you subtracted sum(dy); the term is the dot product sum(dy * y)"),
    (lambda y, dy: y * ((dy * y).sum(-1, keepdim=True) - dy),
     "the sign is flipped: dx = y * (dy - sum(dy * y)), not y * (sum(dy * y) - dy)"),
    (lambda y, dy: dy - (dy * y).sum(-1, keepdim=True),
     "the factor y is missing: dx = y * (dy - sum(dy * y))"),
]


HALF_DOT = ("the dot product sum(dy * y) was accumulated in half precision: with dy near 1000, fp16 steps are "
            "0.5 there (bf16: 4), so the rounded dot is off by up to 0.25 and so is every dy - dot - load y and "
            "dy with .to(tl.float32), compute in fp32, and round once, at the store")
PADDING = ("padding lanes must load as 0.0 (other=0.0), not -inf as in the forward: -inf * 0 = NaN and "
           "-inf * -inf = inf poison the dot product sum(dy * y)")


def backward_problem(fn, y: torch.Tensor, dy: torch.Tensor, pitfall: str = "") -> str:
    """'' when ``fn(y, dy, out)`` matches the float64 reference, else a plain-words reason."""
    out = poisoned_like(y)
    with quiet(), half_sums_in_half():
        dx = fn(y, dy, out)
    dx = out if dx is None else dx
    if tuple(dx.shape) != tuple(y.shape):
        return f"output shape {tuple(dx.shape)} != input shape {tuple(y.shape)}"
    if dx.dtype != y.dtype:
        return f"output dtype {dx.dtype} != input dtype {y.dtype} (store in the input's dtype)"
    dx64 = dx.to(torch.float64).cpu()
    bad = int((~torch.isfinite(dx64)).sum())
    if bad:
        n_cols = y.shape[-1]
        if n_cols & (n_cols - 1):  # not a power of two: the block has padding lanes
            return (f"{bad} output value(s) are NaN or inf - {PADDING}, or they were never stored")
        return f"{bad} output value(s) are NaN or inf (still poisoned: not stored?)"
    y64, dy64 = y.to(torch.float64).cpu(), dy.to(torch.float64).cpu()
    ref = softmax_backward_ref(y64, dy64)
    atol, rtol = TOLERANCES[y.dtype]
    if torch.allclose(dx64, ref, atol=atol, rtol=rtol):
        return ""
    for mistake, message in MISTAKES:
        if torch.allclose(dx64, mistake(y64, dy64), atol=atol, rtol=rtol):
            return message
    worst = float((dx64 - ref).abs().max())
    text = f"values differ from the float64 reference (largest error {worst:.1e}; tolerance {atol:g} + {rtol:g}*|dx|)"
    return f"{text} - {pitfall}" if pitfall else text


def _softmax_of(x: torch.Tensor) -> torch.Tensor:
    return softmax_ref(x).to(x.dtype)


def _cases(seed: int = 80):
    """(name, y, dy, pitfall): y is a real softmax output, dy a fresh random upstream gradient."""
    d = DEVICE
    mask_hint = ("a row shorter than its power-of-two block: mask the loads (other=0.0, so padding adds nothing "
                 "to sum(dy * y)) and the store")
    for i, (M, N) in enumerate([(1, 1), (2, 31), (3, 32), (4, 33), (2, 255), (3, 257)]):
        y = _softmax_of(randn((M, N), device=d, seed=seed + i))
        yield f"random {M}x{N}", y, randn((M, N), device=d, seed=seed + 50 + i), mask_hint
    k = 5
    onehot = torch.zeros(2, 40, device=d)
    onehot[:, k] = 1.0
    yield "one-hot y (a saturated softmax): dx must be 0", onehot, randn((2, 40), device=d, seed=seed + 20), ""
    uniform = torch.full((2, 24), 1 / 24, device=d)
    yield "uniform y and constant dy: dx must be 0", uniform, torch.full((2, 24), 0.7, device=d), \
        "adding a constant to dy cannot change dx"
    for dt in (torch.float16, torch.bfloat16):
        y = _softmax_of(randn((2, 100), device=d, seed=seed + 30)).to(dt)
        yield f"{str(dt).replace('torch.', '')} 2x100 (half precision in and out)", y, \
            randn((2, 100), dt, device=d, seed=seed + 31), "load with .to(tl.float32) and store in the input dtype"
    for dt in (torch.float16, torch.bfloat16):
        y, dy = offset_rows(dt, seed + 35)
        yield f"{str(dt).replace('torch.', '')} 2x100, dy = 1000 + noise: " \
            "the dot product must be accumulated in fp32", \
            y, dy, HALF_DOT
    big_y = _softmax_of(randn((3, 160), device=d, seed=seed + 40))
    big_dy = randn((3, 170), device=d, seed=seed + 41)
    yield "strided views y[:, :150], dy[:, :150]", big_y[:, :150], big_dy[:, :150], \
        "rows are not contiguous: use each tensor's own row stride"


def offset_rows(dtype, seed: int, shape=(2, 100)):
    """(y, dy) in ``dtype``: y a softmax with a few large probabilities, dy = 1000 + integer noise (exact in
    fp16 and bf16). dx does not depend on the 1000; a dot product rounded to half precision does."""
    g = torch.Generator().manual_seed(seed)
    x = torch.randn(shape, generator=g, dtype=torch.float64) * 2
    x[:, :3] += 4.0  # three large probabilities per row: each dx there multiplies the dot's error by ~0.3
    y = torch.softmax(x, -1).to(dtype)
    step = 4.0 if dtype == torch.bfloat16 else 1.0
    dy = 1000.0 + step * torch.randint(-8, 9, shape, generator=g).to(torch.float64)
    return y.to(DEVICE), dy.to(dtype).to(DEVICE)


def traffic_problem(fn, y: torch.Tensor, dy: torch.Tensor) -> str:
    """Two reads and one write per element (memcount), with the output right."""
    out = poisoned_like(y)
    with quiet():
        _, c = count_calls(fn, y, dy, out)
    n = y.numel()
    if c.launches == 0:
        return "no Triton kernel was launched: the launcher must start your kernel"
    reads = {name: c.loads_of.get(name, 0) for name in ("y_ptr", "dy_ptr")}
    for name, k in reads.items():
        if k > n:
            return (f"{name[:-4]} was read {k / n:.3g} times per element: load each row of y and dy once and keep "
                    "them in registers (the dot product and dx use the same values) - 2 reads + 1 write in all")
    if c.loads > 2 * n:
        return f"{c.loads / n:.3g} reads per element: the backward needs exactly two, one of y and one of dy"
    if c.loads < 2 * n:
        return "some elements of y or dy were never read: each program loads its whole row of both"
    if c.stores != n:
        return f"every dx must be written exactly once (counted {c.stores / n:.3g} writes per element)"
    return ""


def lane_launch(softmax_backward):
    """How the lane map (shown after a FAIL) runs the learner's launcher: y drawn, dy = 1 everywhere."""
    return lambda y: _returned(softmax_backward(y, torch.ones_like(y), out := torch.empty_like(y)), out)


def lane_input():
    """A softmax output of 4 contiguous rows of 10 (y, as the backward kernel receives it)."""
    return torch.softmax(torch.randn(4, 10, generator=torch.Generator().manual_seed(0)), -1).to(_DEVICE)


def check_softmax_backward(softmax_backward) -> Verdict:
    """Exercise ch08-backward: ``softmax_backward(y, dy, out)`` returns dx = y * (dy - sum(dy * y))."""
    report = Report("ch08-backward", drawing=lane_map_of(lane_launch(softmax_backward), lane_input,
                                                            padding=None))  # dy, y padded with 0 is right here
    for name, y, dy, pitfall in _cases():
        report.run(name, lambda y=y, dy=dy, p=pitfall: backward_problem(softmax_backward, y, dy, p))
    y = _softmax_of(randn((4, 50), device=DEVICE, seed=97))
    dy = randn((4, 50), device=DEVICE, seed=98)
    report.run("traffic, 4x50: 2 reads (y, dy) + 1 write (dx) per element (memcount)",
               lambda: traffic_problem(softmax_backward, y, dy))
    return Verdict(report.show())


# ------------------------------------------------------------------------------- what the grader launches

def _judge_case(rng, name, R, C, dtype, strided=False, int64=False, big_step=0, offset=False):
    from .judging import (INT64_HINT, KCase, big_rows_input, big_rows_output, cast, np2, rows_input, rows_output,
                          softmax64, view_of)

    gap = (lambda: C + int(rng.integers(3, 30))) if strided else (lambda: C)
    y = cast(softmax64(rng.normal(0, 3, (R, C))), dtype)
    if offset:  # dy = 1000 + integer noise (exact in fp16): an fp16 dot product is off by up to 0.25
        dy_values = 1000.0 + rng.integers(-8, 9, (R, C)).astype(float)
    else:
        dy_values = rng.normal(0, 1, (R, C))
    if big_step:
        yin, dyin = big_rows_input(rng, y, big_step, dtype), big_rows_input(rng, dy_values, big_step, dtype)
    else:
        yin, dyin = rows_input(rng, y, gap(), dtype), rows_input(rng, dy_values, gap(), dtype)
    y64, dy64 = view_of(yin, yin.storage), view_of(dyin, dyin.storage)
    ref = y64 * (dy64 - (dy64 * y64).sum(axis=1, keepdims=True))
    out = big_rows_output(ref, big_step, dtype) if big_step else rows_output(ref, gap(), dtype)
    args = [("buf", "y"), ("buf", "dy"), ("buf", "out"), ("int", yin.kernel_step or yin.step),
            ("int", dyin.kernel_step or dyin.step), ("int", out.kernel_step or out.step), ("int", C)]
    return KCase(name, (R,), args, {"y": yin, "dy": dyin, "out": out}, {"BLOCK": np2(C)}, int64=int64,
                 hint=INT64_HINT if int64 or big_step else "")


def _judge_cases(rng):
    C = int(rng.integers(100, 260))
    return [_judge_case(rng, "1x1", 1, 1, "float32"), _judge_case(rng, "2x31", 2, 31, "float32"),
            _judge_case(rng, "3x32", 3, 32, "float32"), _judge_case(rng, f"2x{C}", 2, C, "float32"),
            _judge_case(rng, "fp16 2x100", 2, 100, "float16"), _judge_case(rng, "bf16 2x60", 2, 60, "bfloat16"),
            _judge_case(rng, "fp16 2x100, dy = 1000 + noise (accumulate in fp32)", 2, 100, "float16", offset=True),
            _judge_case(rng, f"strided 3x{C}", 3, C, "float32", strided=True),
            _judge_case(rng, "64-bit row offsets", 3, 9, "float32", strided=True, int64=True)] + (
        [_judge_case(rng, "rows 2**30 apart: offsets past 2**31 elements", 3, 40, "float32", big_step=judging.BIG_STEP)]
        if judging.gpu_scale() else [])  # last: a fault may spoil the GPU context


def _judges():
    return {"ch08-backward": KernelJudge("softmax_backward_kernel", _judge_cases, int64=True)}


JUDGES = _judges()
