"""Checks for chapter 8, the backward pass: the gradient ``dx`` of a row's softmax, from its output ``y`` and the
upstream gradient ``dy`` (the learner derives the formula; the reference is ``reference.softmax_backward_ref``).

``check_softmax_backward(softmax_backward)`` runs a learner's launcher ``softmax_backward(y, dy, out)`` on the
boundary shapes, half precision, strided views and rows where the answer is known exactly, and names the usual
mistakes of the derivation (each recognised by the values it gives, and described by what it got wrong, never
by the right formula): the coupling through the shared denominator left out, every upstream gradient weighed
alike, a flipped sign, and each output's own probability left out. Two properties the chapter teaches are
checked on the learner's kernel too:

* **accumulate in fp32**: half-precision rows designed so that an fp16 dot product visibly breaks the tolerance
  (``dy = 1000 + small noise``: adding a constant to ``dy`` cannot change ``dx``, but near 1000 fp16 values are
  0.5 apart, so a dot product rounded to fp16 is off by up to 0.25 and every ``dx`` with it);
* **traffic**: two reads (``y``, ``dy``) and one write (``dx``) per element, counted by ``memcount``.
"""
from __future__ import annotations

import numpy as np
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
     "dx = y * dy treats each output as if it depended on its own input only: the part of the gradient that "
     "flows through the shared denominator is missing (every input moves every output), so a row of dx does not "
     "sum to 0"),
    (lambda y, dy: y * (dy - dy.sum(-1, keepdim=True)),
     "the subtracted term is the plain sum(dy): it weighs every upstream gradient alike, as if each output had "
     "the same probability"),
    (lambda y, dy: y * ((dy * y).sum(-1, keepdim=True) - dy),
     "the sign is flipped: every dx is the negative of the reference"),
    (lambda y, dy: dy - (dy * y).sum(-1, keepdim=True),
     "the factor y is missing: dx is not scaled by each output's own probability"),
    (lambda y, dy: dy * y * (1 - y),
     "only the diagonal of the Jacobian was used (how each input moves its own output): every other output "
     "depends on that input too, through the shared denominator, and its share of the gradient is missing"),
]


HALF_DOT = ("the row's reduction was accumulated in half precision: with dy near 1000, fp16 values are 0.5 apart "
            "there (bf16: 4), so every addition rounds the running sum to that spacing, and every dx carries the error")
HALF_MATH = ("the arithmetic ran in half precision: bf16 keeps 8 bits and fp16 11, so the products and the dot "
             "product of a row lose most of theirs, and dx drifts or overflows")
PADDING = ("the padding lanes loaded -inf, as in the forward: -inf * 0 = NaN and -inf * -inf = inf poison the "
           "row's reduction")


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
        if y.dtype != torch.float32 and pitfall:
            return f"{bad} output value(s) are NaN or inf - {pitfall}"
        n_cols = y.shape[-1]
        if n_cols & (n_cols - 1):  # not a power of two: the block has padding lanes
            return (f"{bad} output value(s) are NaN or inf - {PADDING}, or they were never stored")
        return f"{bad} output value(s) are NaN or inf (still poisoned: not stored?)"
    y64, dy64 = y.to(torch.float64).cpu(), dy.to(torch.float64).cpu()
    ref = softmax_backward_ref(y64, dy64)
    atol, rtol = TOLERANCES[y.dtype]
    if torch.allclose(dx64, ref, atol=atol, rtol=rtol):
        return ""
    worst = float((dx64 - ref).abs().max())
    for mistake, message in MISTAKES:
        wrong = mistake(y64, dy64)
        # named only where dx is that formula and clearly not a rounded reference: in fp16/bf16 a kernel whose
        # reduction rounds can land within the tolerance of a formula whose difference from dx is small here
        if torch.allclose(dx64, wrong, atol=atol, rtol=rtol) and float((dx64 - wrong).abs().max()) < worst / 4:
            return message
    text = f"values differ from the float64 reference (largest error {worst:.1e}; tolerance {atol:g} + {rtol:g}*|dx|)"
    return f"{text} - {pitfall}" if pitfall else text


def _softmax_of(x: torch.Tensor) -> torch.Tensor:
    return softmax_ref(x).to(x.dtype)


MASK_HINT = ("a row shorter than its power-of-two block: the padding lanes must add nothing to the row's "
             "reduction, and nothing may be stored past the row")

# The cases, read by the notebook check and by the grader's judge alike: (name, (rows, columns), y, dy, dtype, the
# row steps of y and dy (None: contiguous), the pitfall a FAIL names). y: "softmax" (of random scores), "one-hot",
# "uniform" or "peaked" (three large probabilities per row); dy: "random", "constant" (0.7) or "offset"
# (1000 + integer noise, exact in fp16 and bf16). The check draws them from a fixed seed, the judge from the
# grader's seed, and adds JUDGE_FRESH strided cases and the 64-bit row offsets.
BACKWARD_CASES = [
    *[(f"random {M}x{N}", (M, N), "softmax", "random", "float32", None, MASK_HINT)
      for M, N in [(1, 1), (2, 31), (3, 32), (4, 33), (2, 255), (3, 257)]],
    ("one-hot y (a saturated softmax): dx must be 0", (2, 40), "one-hot", "random", "float32", None, ""),
    ("uniform y and constant dy: dx must be 0", (2, 24), "uniform", "constant", "float32", None,
     "adding a constant to dy changed dx"),
    *[(f"{dt} 2x100 (half precision in and out)", (2, 100), "softmax", "random", dt, None,
       HALF_MATH) for dt in ("float16", "bfloat16")],
    *[(f"{dt} 2x100, dy = 1000 + noise: the row's sum must be accumulated in fp32", (2, 100), "peaked", "offset",
       dt, None, HALF_DOT) for dt in ("float16", "bfloat16")],
    ("strided views y[:, :150], dy[:, :150]", (3, 150), "softmax", "random", "float32", (160, 170),
     "rows are not contiguous: each tensor has its own row stride"),
]
CHECK_SEED = 80
JUDGE_FRESH = 2  # fresh strided cases in every grader run, besides all the named ones


def case_arrays(rng: np.random.Generator, shape: tuple, y_kind: str, dy_kind: str, dtype: str):
    """(y, dy) of one case as float64 arrays, rounded to ``dtype`` (what the kernel reads)."""
    R, C = shape
    if y_kind == "one-hot":
        y = np.zeros(shape)
        y[:, int(rng.integers(0, C))] = 1.0
    elif y_kind == "uniform":
        y = np.full(shape, 1.0 / C)
    else:
        x = rng.normal(0, 2 if y_kind == "peaked" else 1, shape)
        if y_kind == "peaked":
            x[:, :3] += 4.0  # three large probabilities per row: each dx there multiplies the dot's error by ~0.3
        y = judging.softmax64(x)
    if dy_kind == "constant":
        dy = np.full(shape, 0.7)
    elif dy_kind == "offset":  # fp16 steps are 1 near 1000, bf16 steps 8: the noise stays exact
        dy = 1000.0 + (4.0 if dtype == "bfloat16" else 1.0) * rng.integers(-8, 9, shape)
    else:
        dy = rng.normal(0, 1, shape)
    return judging.cast(y, dtype), judging.cast(dy, dtype)


def fresh_case(rng: np.random.Generator) -> tuple:
    """One random strided case like BACKWARD_CASES', from the grader's seed."""
    R, C = int(rng.integers(2, 5)), int(rng.integers(100, 260))
    steps = (C + int(rng.integers(3, 30)), C + int(rng.integers(3, 30)))
    return f"strided {R}x{C}", (R, C), "softmax", "random", "float32", steps, ""


def _cases():
    """(name, y, dy, pitfall) for the notebook check: the table's tensors, drawn from a fixed seed."""
    rng = np.random.default_rng(CHECK_SEED)
    for name, (R, C), y_kind, dy_kind, dtype, steps, pitfall in BACKWARD_CASES:
        y, dy = case_arrays(rng, (R, C), y_kind, dy_kind, dtype)
        tensors = []
        for values, step in zip((y, dy), steps or (C, C)):
            big = torch.zeros(R, step, dtype=judging.TORCH[dtype], device=DEVICE)
            big[:, :C] = torch.from_numpy(values).to(judging.TORCH[dtype])
            tensors.append(big[:, :C])
        yield name, tensors[0], tensors[1], pitfall


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
                    "them in registers (the row's reduction and dx use the same values) - 2 reads + 1 write in all")
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
    """Exercise ch08-backward: ``softmax_backward(y, dy, out)`` returns dx, the gradient of the softmax's input."""
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

def _judge_case(rng, name, shape, y_kind, dy_kind, dtype, steps=None, int64=False, big_step=0):
    from .judging import INT64_HINT, KCase, big_rows_input, big_rows_output, np2, rows_input, rows_output, view_of

    R, C = shape
    y, dy_values = case_arrays(rng, shape, y_kind, dy_kind, dtype)
    ys, dys = steps or (None, None)
    if big_step:
        yin, dyin = big_rows_input(rng, y, big_step, dtype), big_rows_input(rng, dy_values, big_step, dtype)
    else:
        yin, dyin = rows_input(rng, y, ys, dtype), rows_input(rng, dy_values, dys, dtype)
    y64, dy64 = view_of(yin, yin.storage), view_of(dyin, dyin.storage)
    ref = y64 * (dy64 - (dy64 * y64).sum(axis=1, keepdims=True))
    out_step = C + int(rng.integers(3, 30)) if steps else None
    out = big_rows_output(ref, big_step, dtype) if big_step else rows_output(ref, out_step, dtype)
    args = [("buf", "y"), ("buf", "dy"), ("buf", "out"), ("int", yin.kernel_step or yin.step),
            ("int", dyin.kernel_step or dyin.step), ("int", out.kernel_step or out.step), ("int", C)]
    return KCase(name, (R,), args, {"y": yin, "dy": dyin, "out": out}, {"BLOCK": np2(C)}, int64=int64,
                 hint=INT64_HINT if int64 or big_step else "")


def _judge_cases(rng):
    """The grader's launches: every case of the table and JUDGE_FRESH strided ones, values from its seed, then the
    64-bit row offsets (counted in the interpreter; on a GPU, real rows 2**30 apart)."""
    out = [_judge_case(rng, name, shape, y_kind, dy_kind, dtype, steps)
           for name, shape, y_kind, dy_kind, dtype, steps, _ in
           BACKWARD_CASES + [fresh_case(rng) for _ in range(JUDGE_FRESH)]]
    out.append(_judge_case(rng, "64-bit row offsets", (3, 9), "softmax", "random", "float32", (16, 13), int64=True))
    if judging.gpu_scale():  # last: a fault may spoil the GPU context
        out.append(_judge_case(rng, "rows 2**30 apart: offsets past 2**31 elements", (3, 40), "softmax", "random",
                               "float32", big_step=judging.BIG_STEP))
    return out


def _judges():
    return {"ch08-backward": KernelJudge("softmax_backward_kernel", _judge_cases, int64=True)}


JUDGES = _judges()
