"""Checks for chapter 6, half precision and attention: the masked (causal + left-padding) softmax kernel.

``check_masked_softmax(masked_softmax)`` runs a learner's launcher
``masked_softmax(scores, out, causal=..., left_pad=...)`` on attention-shaped ``[B, H, S, S]`` scores in
float32, float16 and bfloat16. Query ``q`` may attend key ``k`` when ``k <= q`` (causal) and ``k >= left_pad[b]``
(the first ``left_pad[b]`` tokens of sequence ``b`` are padding). A row with no key left is fully masked and must
come out as zeros, the library's convention (``softmax_lab.reference.masked_softmax_ref``).
"""
from __future__ import annotations

import torch

from ..device import DEVICE
from ..reference import masked_softmax_ref
from ..testing import TOLERANCES, poisoned_like, randn
from .ch05 import quiet
from ._pitfalls import Verdict
from .common import Report, lane_map_of
from ..device import DEVICE as _DEVICE

__all__ = ["check_masked_softmax"]

FULLY_MASKED = ("a fully masked row gave NaN: its max is -inf, so exp(-inf - (-inf)) = NaN and the sum is 0 - "
                "the convention is zeros (shift by 0 when the max is -inf, and divide only where the sum > 0)")
OFF_BY_ONE = "causal mask off by one: query q attends keys 0..q inclusive (keep k <= q)"
LEAK = ("masked positions got probability: give them -inf before the max (not 0, and not just skipped in the "
        "store) so that exp makes them exactly 0")
FP32 = ("errors of several fp16 ulps: load with .to(tl.float32), compute x - max, exp and the sum in fp32, "
        "and round to fp16 only once, at the store")
EXP_FP16 = ("tl.exp was given a half-precision tensor: Triton's exp takes fp32 (and fp16's own exp would overflow "
            "past ln(65504) = 11.09) - load with .to(tl.float32) and compute in fp32")
PAD = "left padding ignored: keys k < left_pad[b] are padding and must get probability 0"


def attention_mask(B: int, S: int, causal: bool = True, left_pad=None, shift: int = 0,
                   device=None) -> torch.Tensor | None:
    """Boolean ``[B, 1, S, S]`` mask, True = takes part: ``k <= q + shift`` (causal) and ``k >= left_pad[b]``.

    ``shift`` is 0 for the real causal mask; -1 and +1 give the two off-by-one mistakes.
    """
    device = device or DEVICE
    q = torch.arange(S, device=device).view(1, 1, S, 1)
    k = torch.arange(S, device=device).view(1, 1, 1, S)
    keep = torch.ones(B, 1, S, S, dtype=torch.bool, device=device)
    if causal:
        keep = keep & (k <= q + shift)
    if left_pad is not None:
        keep = keep & (k >= left_pad.to(device).view(B, 1, 1, 1))
    return keep


def _ulp_problem(y: torch.Tensor, ref: torch.Tensor) -> bool:
    """True when a float16 result is off by more than one fp16 ulp anywhere (fp32 math rounds once: <= 1/2 ulp).

    One ulp at ``ref`` is 2**(floor(log2|ref|) - 10), and never less than fp16's subnormal spacing 2**-24."""
    err = (y.to(torch.float64).cpu() - ref.cpu()).abs()
    ulp = torch.exp2(torch.floor(torch.log2(ref.cpu().abs())) - 10).clamp(min=2.0 ** -24)
    return bool((err > ulp).any())


def masked_problem(fn, scores: torch.Tensor, causal: bool, left_pad, strict_fp16: bool = False) -> str:
    """'' when the learner's masked softmax matches the float64 reference, else a plain-words reason."""
    B, H, S, _ = scores.shape
    out = poisoned_like(scores)
    try:
        with quiet():
            y = fn(scores, out, causal=causal, left_pad=left_pad)
    except Exception as err:  # noqa: BLE001 - name the classic one, leave the rest to Report
        if "Expected dtype" in str(err) and ("fp16" in str(err) or "bf16" in str(err)):
            return EXP_FP16
        raise
    y = out if y is None else y
    if tuple(y.shape) != tuple(scores.shape):
        return f"output shape {tuple(y.shape)} != scores shape {tuple(scores.shape)}"
    if y.dtype != scores.dtype:
        return f"output dtype {y.dtype} != scores dtype {scores.dtype} (store in the input's dtype)"
    keep = attention_mask(B, S, causal, left_pad, device=scores.device)
    ref = masked_softmax_ref(scores, keep).cpu()
    y64 = y.to(torch.float64).cpu()
    empty = ~keep.expand(B, H, S, S).any(dim=-1).cpu()  # fully masked rows
    if bool(torch.isnan(y64[empty]).any()):
        return FULLY_MASKED
    if bool(torch.isnan(y64).any()):
        return f"{int(torch.isnan(y64).sum())} output value(s) are NaN (still poisoned: not stored, or overflowed)"
    if bool((y64[empty] != 0).any()):
        return "a fully masked row must be all zeros, not a spread of probability over masked keys"
    atol, rtol = TOLERANCES[scores.dtype]
    if torch.allclose(y64, ref, atol=atol, rtol=rtol):
        if strict_fp16 and scores.dtype == torch.float16 and _ulp_problem(y64, ref):
            return FP32
        return ""
    masked_out = ~keep.expand(B, H, S, S).cpu()
    if bool((y64[masked_out].abs() > atol).any()):
        for shift in (-1, 1):
            if causal:
                alt = masked_softmax_ref(scores, attention_mask(B, S, True, left_pad, shift, scores.device)).cpu()
                if torch.allclose(y64, alt, atol=atol, rtol=rtol):
                    return OFF_BY_ONE
        if left_pad is not None and bool(left_pad.any()):
            alt = masked_softmax_ref(scores, attention_mask(B, S, causal, None, device=scores.device)).cpu()
            if torch.allclose(y64, alt, atol=atol, rtol=rtol):
                return PAD
        return LEAK
    if causal:
        alt = masked_softmax_ref(scores, attention_mask(B, S, True, left_pad, -1, scores.device)).cpu()
        if torch.allclose(y64, alt, atol=atol, rtol=rtol):
            return OFF_BY_ONE
    if scores.dtype != torch.float32:
        return f"values differ from the float64 reference by more than the {scores.dtype} tolerance - {FP32}"
    worst = float((y64 - ref).abs().max())
    return f"values differ from the float64 reference (largest error {worst:.1e}; tolerance {atol:g} + {rtol:g}*|y|)"


def _pad(values) -> torch.Tensor:
    return torch.tensor(values, dtype=torch.int32, device=DEVICE)


def _cases(seed: int = 60):
    """(name, scores, causal, left_pad, strict_fp16): boundary lengths, dtypes, and the masking traps."""
    f32, f16, bf16 = torch.float32, torch.float16, torch.bfloat16
    yield "no mask, 1x1x1x1", randn((1, 1, 1, 1), f32, seed=seed), False, None, False
    yield "no mask, 1x1x31x31", randn((1, 1, 31, 31), f32, seed=seed + 1), False, None, False
    yield "causal, fp32 1x1x32x32", randn((1, 1, 32, 32), f32, seed=seed + 2), True, None, False
    yield "causal, fp32 2x1x33x33", randn((2, 1, 33, 33), f32, seed=seed + 3), True, None, False
    yield "causal, fp32 1x1x129x129", randn((1, 1, 129, 129), f32, seed=seed + 4), True, None, False
    yield "causal, fp16 1x1x64x64 (within 1 fp16 ulp)", randn((1, 1, 64, 64), f16, seed=seed + 5), True, None, True
    yield "causal, bf16 1x1x48x48", randn((1, 1, 48, 48), bf16, seed=seed + 6), True, None, False
    yield "large fp16 scores (up to 60: exp(60) overflows fp16)", \
        (randn((1, 1, 40, 40), f32, seed=seed + 7, scale=20.0).clamp(-60, 60)).to(f16), True, None, False
    yield "causal + left padding [0, 5], 2 heads: 5 fully masked rows per head", randn((2, 2, 17, 17), f32, seed=seed + 8), True, \
        _pad([0, 5]), False
    yield "no causal, left padding [3, 0]", randn((2, 1, 20, 20), f16, seed=seed + 9), False, _pad([3, 0]), False
    yield "a sequence that is all padding: every row fully masked", randn((2, 1, 16, 16), bf16, seed=seed + 10), \
        True, _pad([16, 2]), False


def lane_launch(masked_softmax):
    """How the lane map (shown after a FAIL) runs the learner's launcher: S x S causal scores, as [1, 1, S, S]."""
    def causal(x):
        out = torch.empty_like(x)
        masked_softmax(x[None, None], out[None, None], causal=True, left_pad=None)
        return out

    return causal


def lane_input():
    """6 x 6 scores inside rows of 9: the padding and the row stride both show."""
    return torch.randn(6, 9, generator=torch.Generator().manual_seed(0)).to(_DEVICE)[:, :6]


def check_masked_softmax(masked_softmax) -> Verdict:
    """Exercise ch06-masked: ``masked_softmax(scores, out, causal=..., left_pad=...)`` on [B, H, S, S] scores."""
    report = Report("ch06-masked", drawing=lane_map_of(lane_launch(masked_softmax), lane_input))
    for name, scores, causal, left_pad, strict in _cases():
        report.run(name, lambda s=scores, c=causal, p=left_pad, st=strict: masked_problem(masked_softmax, s, c, p,
                                                                                           st))
    return Verdict(report.show())


# ------------------------------------------------------------------------------- what the grader launches

def _judge_case(rng, name, B, H, S, dtype, causal, pad, strided=False, int64=False, big_step=0):
    import numpy as np

    from .judging import INT64_HINT, Buf, KCase, big_rows_input, big_rows_output, np2, rows_input, rows_output

    R = B * H * S
    x = rng.normal(0, 3, (R, S))
    if big_step:
        xin = big_rows_input(rng, x, big_step, dtype)
    else:
        xin = rows_input(rng, x, S + int(rng.integers(3, 20)) if strided else S, dtype)
    xv = np.stack([xin.storage[r * xin.step: r * xin.step + S] for r in range(R)])
    rows = np.arange(R)
    q = (rows % S)[:, None]
    k = np.arange(S)[None, :]
    keep = np.ones((R, S), dtype=bool)
    if causal:
        keep &= k <= q
    pads = np.zeros(B, dtype=np.int64) if pad is None else np.asarray(pad)
    if pad is not None:
        keep &= k >= pads[rows // (H * S)][:, None]
    s = np.where(keep, xv, -np.inf)
    m = s.max(axis=1, keepdims=True)
    m = np.where(np.isinf(m), 0.0, m)
    e = np.exp(s - m)
    tot = e.sum(axis=1, keepdims=True)
    ref = e / np.where(tot == 0, 1.0, tot)
    if big_step:
        out = big_rows_output(ref, big_step, dtype)
    else:
        out = rows_output(ref, S + int(rng.integers(3, 20)) if strided else S, dtype)
    padbuf = Buf(pads.astype(np.float64) if pad is not None else np.zeros(max(B, 1)), "int32")
    args = [("buf", "x"), ("buf", "out"), ("buf", "pad"), ("int", xin.kernel_step or xin.step),
            ("int", out.kernel_step or out.step), ("int", S), ("int", H * S)]
    return KCase(name, (R,), args, {"x": xin, "out": out, "pad": padbuf},
                 {"BLOCK": np2(S), "CAUSAL": causal, "HAS_PAD": pad is not None}, int64=int64,
                 hint=INT64_HINT if int64 or big_step else "")


def _judge_cases(rng):
    from .judging import BIG_STEP, gpu_scale

    S1, S2 = int(rng.integers(20, 40)), int(rng.integers(10, 20))
    return [
        _judge_case(rng, "no mask 1x1x1", 1, 1, 1, "float32", False, None),
        _judge_case(rng, f"causal fp32 2x1x{S1}", 2, 1, S1, "float32", True, None),
        _judge_case(rng, f"causal fp16 1x1x{S1}", 1, 1, S1, "float16", True, None),
        _judge_case(rng, f"causal bf16 1x2x{S2}", 1, 2, S2, "bfloat16", True, None),
        _judge_case(rng, f"causal + left padding 2x2x{S2}", 2, 2, S2, "float32", True,
                    [0, int(rng.integers(2, S2 - 1))]),
        _judge_case(rng, f"left padding only, fp16, strided 2x1x{S2}", 2, 1, S2, "float16", False,
                    [int(rng.integers(1, S2 - 1)), 0], strided=True),
        _judge_case(rng, "a sequence that is all padding", 2, 1, 8, "float32", True, [8, 1]),
        _judge_case(rng, "64-bit row offsets", 1, 1, 5, "float32", True, None, strided=True, int64=True),
    ] + ([_judge_case(rng, "rows 2**30 apart: offsets past 2**31 elements", 1, 1, 3, "float32", True, None,
                      big_step=BIG_STEP)] if gpu_scale() else [])  # last: a fault may spoil the GPU context


def _judges():
    from .judging import KernelJudge

    return {"ch06-masked": KernelJudge("masked_softmax_kernel", _judge_cases, int64=True)}


JUDGES = _judges()
