"""Exercise ch06-masked: the masked (causal + left-padding) softmax kernel, its case table, check and judge.

``check_masked_softmax(masked_softmax)`` runs a learner's launcher
``masked_softmax(scores, out, causal=..., left_pad=...)`` on attention-shaped ``[B, H, S, S]`` scores in
float32, float16 and bfloat16. Query ``q`` may attend key ``k`` when ``k <= q`` (causal) and ``k >= left_pad[b]``
(the first ``left_pad[b]`` tokens of sequence ``b`` are padding). A row with no key left is fully masked and must
come out as zeros, the library's convention (``softmax_lab.reference.masked_softmax_ref``).

Beyond the values it checks what the chapter teaches: strided scores *and* strided outputs (each with its own
row stride), low-precision accumulation exposed by chapter 6's own row (one 1.0 among many e^-8 after the shift:
an fp16 running sum loses every small term), and the traffic counted by ``memcount`` (each kept score read once,
masked-out scores never, every output written once).

On the CPU, Triton's interpreter adds an fp16 tensor with numpy, which accumulates in fp32 and would hide an
fp16 sum; while a learner's kernel runs, ``half_sums_in_half()`` makes ``tl.sum`` of an fp16 tensor add in fp16,
one term after another, as a GPU thread adds the values it holds. On a GPU nothing is changed.
"""
from __future__ import annotations

import contextlib

import numpy as np
import torch

from ...device import DEVICE, ON_GPU
from ...memcount import count_calls
from ...reference import masked_softmax_ref
from ...testing import TOLERANCES, poisoned_like, randn
from .. import judging
from .._pitfalls import Verdict, quiet
from ..common import GUARD, Report, lane_map_of
from ..judging import (INT64_HINT, TORCH, Buf, KCase, KernelJudge, big_rows_input, big_rows_output, np2, rows_input,
                       rows_output)

__all__ = ["check_masked_softmax", "half_sums_in_half"]

FULLY_MASKED = ("a fully masked row gave NaN: its max is -inf, so x - max computed -inf - (-inf) = NaN before any "
                "exponential, and the NaN reached every output of the row (the convention is a row of zeros)")
ZERO_SUM = ("a fully masked row gave NaN: its shift left every score at -inf, so every exp(x - max) is 0 and the "
            "row's sum is 0, and the division then computed 0/0 = NaN (the convention is a row of zeros)")
NAN_ROW = "a fully masked row gave NaN (the convention is a row of zeros)"
PAD_SHIFTED = ("left padding off by one: in each padded sequence's rows (sequence {b}, query {q}, for one) one key "
               "too {what} (keys 0..left_pad[b]-1 are the padding, key left_pad[b] the first real token)")
PAD_WHAT = {1: "many is masked: the first real token got no probability",
            -1: "few is masked: the last padding token got probability, and the real keys too little"}
OFF_BY_ONE = ("causal mask off by one: these rows are the softmax where each query sees one key too many or too few "
              "(query q sees keys 0..q, itself included)")
LEAK = ("masked positions got probability: keys the mask removes still took part in the max or the sum (a masked "
        "score that counts as 0 has exp(0 - m) > 0), so they get probability and the kept keys too little")
FP32 = ("errors of several fp16 ulps: part of the arithmetic ran in half precision, which rounds to 11 bits at every "
        "step (fp32 arithmetic, rounded once at the end, stays within one ulp)")
EXP_FP16 = ("tl.exp was given a half-precision tensor: Triton's exp takes fp32 (and fp16's own exp would overflow "
            "past ln(65504) = 11.09)")
PAD = "left padding ignored: keys k < left_pad[b] are padding, yet they got probability"
HALF_SUM = ("the sum was accumulated in fp16: near 1, fp16 values are 0.001 apart, so every small exp(x - max) "
            "added to it is rounded away (chapter 6's row: 1.0 plus many e^-8 stays 1.0, and every output comes "
            "out too large)")
OUT_STRIDE = ("the outputs are not where they belong: the output has its own row stride (here it differs from "
              "the scores'), and rows were written at another spacing")
IN_STRIDE = ("rows of scores are not contiguous (a view like big[..., :S], rows farther apart than S): rows were "
             "read at another spacing")
UNWRITTEN = ("outputs of masked-out keys were never written: they still hold whatever the output held before the "
             "launch (NaN here, anything in real use), so those rows do not read as zeros where the mask removed keys")
UNWRITTEN_MARK = -7.0  # what a second launch's output is filled with: no softmax ever writes a negative value


@contextlib.contextmanager
def half_sums_in_half():
    """CPU interpreter only: ``tl.sum`` of an fp16 tensor adds in fp16, term after term (numpy would add in
    fp32 and hide the mistake), and of a bf16 tensor in bf16 (numpy would add its bit patterns: garbage). Sums of
    fp32 tensors, and everything on a GPU, are left as they are."""
    if ON_GPU:
        yield
        return
    from triton.runtime import interpreter

    ops = interpreter.ReduceOps
    original = ops.sum

    def sum_(self, input):
        data = input.handle.data
        bf16 = data.dtype == np.uint16 and str(input.dtype) == "bf16"  # the interpreter keeps bf16 as raw bits
        if data.dtype != np.float16 and not bf16:
            return original(self, input)
        axis = self.axis
        flat = data.reshape(-1) if axis is None else data
        if bf16:  # numpy would add the bit patterns: add the values in bf16, term after term, as fp16 above
            terms = torch.from_numpy((flat.astype(np.uint32) << 16).view(np.float32)).to(torch.bfloat16)
            terms = terms.movedim(0 if axis is None else axis, 0)
            acc = terms[0].clone()
            for term in terms[1:]:
                acc = acc + term
            total = acc.view(torch.int16).numpy().view(np.uint16)
        else:
            acc = np.add.accumulate(flat, axis=0 if axis is None else axis, dtype=np.float16)
            total = np.take(acc, -1, axis=0 if axis is None else axis)
        if self.keep_dims:
            total = np.expand_dims(total, 0 if axis is None else axis)
        return self.to_tensor(total, input.dtype)

    ops.sum = sum_
    try:
        yield
    finally:
        ops.sum = original


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


def _strided_output(scores: torch.Tensor, gap: int):
    """(out view [B, H, S, S] whose rows are S + gap apart, the whole buffer): NaN in the view, GUARD around."""
    B, H, S, _ = scores.shape
    big = torch.full((B, H, S, S + gap), GUARD, dtype=scores.dtype, device=scores.device)
    out = big[..., :S]
    out.fill_(float("nan"))
    return out, big


def masked_problem(fn, scores: torch.Tensor, causal: bool, left_pad, strict_fp16: bool = False,
                   out_gap: int = 0) -> str:
    """'' when the learner's masked softmax matches the float64 reference, else a plain-words reason.
    ``out_gap``: the output is a strided view, rows ``S + out_gap`` apart, with guard values in the gaps."""
    B, H, S, _ = scores.shape
    out, big = _strided_output(scores, out_gap) if out_gap else (poisoned_like(scores), None)
    try:
        with quiet(), half_sums_in_half():
            y = fn(scores, out, causal=causal, left_pad=left_pad)
    except Exception as err:
        if "Expected dtype" in str(err) and ("fp16" in str(err) or "bf16" in str(err)):
            return EXP_FP16
        raise
    y = out if y is None else y
    if big is not None:
        if y.data_ptr() != out.data_ptr():
            return "the launcher must write into the `out` it is given (here a strided view), not a new tensor"
        if not torch.equal(big[..., S:], torch.full_like(big[..., S:], GUARD)):
            return OUT_STRIDE
    if tuple(y.shape) != tuple(scores.shape):
        return f"output shape {tuple(y.shape)} != scores shape {tuple(scores.shape)}"
    if y.dtype != scores.dtype:
        return f"output dtype {y.dtype} != scores dtype {scores.dtype} (store in the input's dtype)"
    keep = attention_mask(B, S, causal, left_pad, device=scores.device)
    ref = masked_softmax_ref(scores, keep).cpu()
    y64 = y.to(torch.float64).cpu()
    empty = ~keep.expand(B, H, S, S).any(dim=-1).cpu()  # fully masked rows
    atol, rtol = TOLERANCES[scores.dtype]
    if not scores.is_contiguous() and not torch.allclose(y64, ref, atol=atol, rtol=rtol, equal_nan=True):
        if _read_at_spacing_s(y64, scores, keep, atol, rtol):
            return IN_STRIDE
    if bool(torch.isnan(y64).any()):
        never = _never_written(fn, scores, causal, left_pad, out_gap)
        if bool(never.any()):
            masked_out = ~keep.expand(B, H, S, S).cpu()
            return NOT_WRITTEN if bool((never & ~masked_out).any()) else UNWRITTEN
    if bool(torch.isnan(y64[empty]).any()):
        return _nan_source(fn, scores.dtype)
    if bool(torch.isnan(y64).any()):
        return f"{int(torch.isnan(y64).sum())} output value(s) are NaN (still poisoned: not stored, or overflowed)"
    pad_shifted = _pad_off_by_one(y64, ref, scores, causal, left_pad, atol, rtol)
    if pad_shifted:
        return pad_shifted
    if bool((y64[empty] != 0).any()):
        return "a fully masked row must be all zeros, not a spread of probability over masked keys"
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


def _pad_off_by_one(y64, ref, scores, causal: bool, left_pad, atol: float, rtol: float) -> str:
    """The padding mask one key off (each sequence's padding taken one key longer or shorter): which way, and the
    first row it changed; '' when the output is not that."""
    if left_pad is None:
        return ""
    B, H, S, _ = scores.shape
    for step in (1, -1):
        pads = (left_pad.to(scores.device) + step).clamp(min=0)
        alt = masked_softmax_ref(scores, attention_mask(B, S, causal, pads, device=scores.device)).cpu()
        if torch.allclose(y64, alt, atol=atol, rtol=rtol):
            b, _, q = (int(i) for i in (alt - ref).abs().amax(dim=-1).nonzero()[0][:3])
            return PAD_SHIFTED.format(what=PAD_WHAT[step], b=b, q=q)
    return ""


def _nan_source(fn, dtype) -> str:
    """Why a fully masked row came out NaN: the launcher run once more (interpreted, by memcount, on a GPU too) on
    one row of 4 keys that are all padding, with the interpreter's float subtractions and divisions watched for
    the first NaN made from no NaN: in x - max (the max of the row is -inf) or in the division (its sum is 0)."""
    from triton.runtime import interpreter

    builder = interpreter.InterpreterBuilder
    ops = {"create_fsub": FULLY_MASKED, "create_fdiv": ZERO_SUM, "create_precise_divf": ZERO_SUM}
    saved = {name: getattr(builder, name) for name in ops}
    first: list[str] = []

    def watched(name):
        def op(self, lhs, rhs):
            out = saved[name](self, lhs, rhs)
            made = np.asarray(out.data)
            if not first and made.dtype.kind == "f" and np.isnan(made).any() and not any(
                    np.isnan(np.asarray(a.data)).any() for a in (lhs, rhs) if np.asarray(a.data).dtype.kind == "f"):
                first.append(name)
            return out
        return op

    scores = torch.zeros(1, 1, 4, 4, dtype=dtype, device=DEVICE)
    pad = torch.tensor([4], dtype=torch.int32, device=DEVICE)
    for name in ops:
        setattr(builder, name, watched(name))
    try:
        with quiet(), np.errstate(all="ignore"):
            count_calls(fn, scores, poisoned_like(scores), causal=False, left_pad=pad)
    except Exception:
        pass  # the first launch's verdict stands; only its explanation is less specific
    finally:
        for name, op in saved.items():
            setattr(builder, name, op)
    return ops[first[0]] if first else NAN_ROW


def chapter6_row(S: int, dtype=torch.float16) -> torch.Tensor:
    """[1, 1, S, S] scores whose every row is one 8 and S - 1 zeros: after the shift, one 1.0 and S - 1 copies of
    e^-8 (chapter 6's sum). An fp16 running sum stays at 1.0; the true sum is 1 + (S - 1) e^-8."""
    return case_scores("chapter 6", (1, 1, S), S, None).to(DEVICE, dtype)


# The cases, read by the notebook check and by the grader's judge alike: (name, (B, H, S), dtype, causal,
# left_pad, values, the mistake a FAIL names, the check's seed, (the scores' row step, the output's row step) or
# None for contiguous rows, strict: fp16 within 1 ulp). Values: "random"; "large" (fp16 scores up to 60);
# "chapter 6" (each row one 8 and S - 1 zeros). The check draws them from its seeds (CPU and GPU see the same
# rows); the judge from the grader's seed.
MASKED_CASES = [
    ("no mask, 1x1x1x1", (1, 1, 1), "float32", False, None, "random", "", 60, None, False),
    ("no mask, 1x1x31x31", (1, 1, 31), "float32", False, None, "random", "", 61, None, False),
    ("causal, fp32 1x1x32x32", (1, 1, 32), "float32", True, None, "random", "", 62, None, False),
    ("causal, fp32 2x1x33x33", (2, 1, 33), "float32", True, None, "random", "", 63, None, False),
    ("causal, fp32 1x1x129x129", (1, 1, 129), "float32", True, None, "random", "", 64, None, False),
    ("causal, fp16 1x1x64x64 (within 1 fp16 ulp)", (1, 1, 64), "float16", True, None, "random", "", 65, None, True),
    ("causal, bf16 1x1x48x48", (1, 1, 48), "bfloat16", True, None, "random", "", 66, None, False),
    ("large fp16 scores (up to 60: exp(60) overflows fp16)", (1, 1, 40), "float16", True, None, "large", "", 67,
     None, False),
    ("causal + left padding [0, 5], 2 heads: 5 fully masked rows per head", (2, 2, 17), "float32", True, [0, 5],
     "random", "", 68, None, False),
    ("no causal, left padding [3, 0]", (2, 1, 20), "float16", False, [3, 0], "random", "", 69, None, False),
    ("a sequence that is all padding: every row fully masked", (2, 1, 16), "bfloat16", True, [16, 2], "random", "",
     70, None, False),
    # the output as far apart as the scores: a swapped stride stays in bounds
    ("strided scores big[..., :24] (rows 37 apart), causal", (2, 2, 24), "float32", True, None, "random", IN_STRIDE,
     71, (37, 37), False),
    ("strided output (rows 24 + 11 apart), causal + left padding [2, 0]", (2, 2, 24), "float16", True, [2, 0],
     "random", "", 72, (24, 35), False),
    ("chapter 6's sum: each row one 8 and 127 zeros, fp16 1x1x128x128 (within 1 fp16 ulp)", (1, 1, 128), "float16",
     False, None, "chapter 6", HALF_SUM, 73, None, True),
]


def case_scores(kind: str, shape: tuple, step: int, seed) -> torch.Tensor:
    """float32 scores ``[B, H, S, step]`` on the CPU for one case (the row's first S are the scores)."""
    B, H, S = shape
    if kind == "chapter 6":
        scores = torch.zeros(B, H, S, step)
        rows = torch.arange(S)
        scores[..., rows, (rows * 7) % S] = 8.0  # the 8 moves from row to row
        return scores
    x = randn((B, H, S, step), torch.float32, device="cpu", seed=seed, scale=20.0 if kind == "large" else 3.0)
    return x.clamp(-60, 60) if kind == "large" else x


def _cases():
    """(name, scores, causal, left_pad, strict_fp16, extras) for the notebook check. extras: out_gap, pitfall."""
    for name, (B, H, S), dtype, causal, pads, kind, pitfall, seed, steps, strict in MASKED_CASES:
        in_step, out_step = steps or (S, S)
        scores = case_scores(kind, (B, H, S), in_step, seed).to(DEVICE, TORCH[dtype])[..., :S]
        pad = None if pads is None else torch.tensor(pads, dtype=torch.int32, device=DEVICE)
        yield name, scores, causal, pad, strict, {"pitfall": pitfall, "out_gap": out_step - S}


def masked_traffic_problem(fn, scores: torch.Tensor, left_pad) -> str:
    """Causal (+ padding) traffic counted by memcount: each kept score read once, masked ones never, every
    output written once."""
    B, H, S, _ = scores.shape
    keep = attention_mask(B, S, True, left_pad, device=scores.device).expand(B, H, S, S)
    kept, n = int(keep.sum()), scores.numel()
    out = poisoned_like(scores)
    with quiet():
        _, c = count_calls(fn, scores, out, causal=True, left_pad=left_pad)
    if c.launches == 0:
        return "no Triton kernel was launched: the launcher must start your kernel"
    reads = c.loads_of.get("x_ptr", c.loads)
    if reads > kept and reads % kept == 0 and reads // kept > 1:
        return (f"every kept score was read {reads // kept} times: the max, the exponentials and the sum each "
                "fetched the row from memory again")
    if reads > kept:
        return ("the kernel also read scores that the mask removes: a masked key still cost a read, and saving "
                "those reads is the point of computing the mask from the indices")
    if reads < kept:
        return "some kept scores were never read: the load left out keys that a query sees"
    if c.stores < n:
        return (f"every output must be written exactly once, zeros included (counted {c.stores / n:.3g} writes "
                "per output): the masked-out positions were left unwritten, holding whatever was there before")
    if c.stores > n:
        return f"outputs were written more than once (counted {c.stores / n:.3g} writes per output)"
    return ""


def lane_launch(masked_softmax):
    """How the lane map (shown after a FAIL) runs the learner's launcher: S x S causal scores, as [1, 1, S, S]."""
    def causal(x):
        out = torch.empty_like(x)
        masked_softmax(x[None, None], out[None, None], causal=True, left_pad=None)
        return out

    return causal


def lane_input():
    """6 x 6 scores inside rows of 9: the padding and the row stride both show."""
    return torch.randn(6, 9, generator=torch.Generator().manual_seed(0)).to(DEVICE)[:, :6]


NOT_WRITTEN = "some outputs were never written: they still hold whatever the output held before the launch"


def _read_at_spacing_s(y64: torch.Tensor, scores: torch.Tensor, keep: torch.Tensor, atol: float, rtol: float) -> bool:
    """Is the output the masked softmax of the scores' memory read as if rows were S apart (the strided case)?"""
    packed = torch.as_strided(scores, scores.shape, torch.empty(scores.shape, device="meta").stride(),
                              scores.storage_offset())
    alt = masked_softmax_ref(packed, keep).cpu()
    return torch.allclose(y64, alt, atol=atol, rtol=rtol, equal_nan=True)


def _never_written(fn, scores: torch.Tensor, causal: bool, left_pad, out_gap: int = 0) -> torch.Tensor:
    """Launch again into an output (laid out as the case's) full of UNWRITTEN_MARK: where it is still there,
    nothing was stored."""
    out = _strided_output(scores, out_gap)[0] if out_gap else torch.empty_like(scores)
    out.fill_(UNWRITTEN_MARK)
    with quiet(), half_sums_in_half():
        y = fn(scores, out, causal=causal, left_pad=left_pad)
    y = out if y is None else y
    return (y == UNWRITTEN_MARK).cpu()


def check_masked_softmax(masked_softmax) -> Verdict:
    """Exercise ch06-masked: ``masked_softmax(scores, out, causal=..., left_pad=...)`` on [B, H, S, S] scores."""
    report = Report("ch06-masked", drawing=lane_map_of(lane_launch(masked_softmax), lane_input))
    for name, scores, causal, left_pad, strict, extras in _cases():
        report.run(name, lambda s=scores, c=causal, p=left_pad, st=strict, e=extras:
                   _with_pitfall(masked_problem(masked_softmax, s, c, p, st, e.get("out_gap", 0)), e.get("pitfall")))
    scores = randn((1, 2, 32, 32), torch.float16, seed=66)
    report.run("traffic, causal + left padding [3], fp16 1x2x32x32: kept scores read once, masked ones never, "
               "every output written once (memcount)",
               lambda: masked_traffic_problem(masked_softmax, scores, torch.tensor([3], dtype=torch.int32,
                                                                                   device=DEVICE)))
    return Verdict(report.show())


def _with_pitfall(problem: str, pitfall: str | None) -> str:
    """A case's own diagnosis replaces the generic one: the fp16 sum for chapter 6's row (the row stride of a
    strided input is diagnosed in masked_problem, from the values)."""
    if not problem or not pitfall:
        return problem
    if pitfall == HALF_SUM and (FP32 in problem):
        return HALF_SUM
    return problem


# ------------------------------------------------------------------------------- what the grader launches

def _judge_case(rng, name, B, H, S, dtype, causal, pad, steps=None, int64=False, big_step=0, x=None, hint=""):
    """One launch of the learner's kernel: x (B*H*S rows of S scores, float64) with rows ``steps[0]`` apart (or
    ``big_step``), the output's ``steps[1]`` apart; the float64 reference computed here."""
    R = B * H * S
    in_step, out_step = steps or (S, S)
    if big_step:
        xin = big_rows_input(rng, x, big_step, dtype)
    else:
        xin = rows_input(rng, x, in_step, dtype)
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
    out = big_rows_output(ref, big_step, dtype) if big_step else rows_output(ref, out_step, dtype)
    padbuf = Buf(pads.astype(np.float64) if pad is not None else np.zeros(max(B, 1)), "int32")
    args = [("buf", "x"), ("buf", "out"), ("buf", "pad"), ("int", xin.kernel_step or xin.step),
            ("int", out.kernel_step or out.step), ("int", S), ("int", H * S)]
    return KCase(name, (R,), args, {"x": xin, "out": out, "pad": padbuf},
                 {"BLOCK": np2(S), "CAUSAL": causal, "HAS_PAD": pad is not None}, int64=int64,
                 hint=INT64_HINT if int64 or big_step else hint)


def _judge_cases(rng):
    """The grader's launches: every case of MASKED_CASES with values from its seed, then the 64-bit offsets
    (counted in the interpreter; on a GPU, real rows 2**30 apart)."""
    out = []
    for name, (B, H, S), dtype, causal, pads, kind, pitfall, _, steps, _ in MASKED_CASES:
        x = case_scores(kind, (B, H, S), S, int(rng.integers(2**31))).double().reshape(B * H * S, S).numpy()
        out.append(_judge_case(rng, name, B, H, S, dtype, causal, pads, steps, x=x,
                               hint=f"the trap this case sets: {pitfall}" if pitfall else ""))
    x = case_scores("random", (1, 1, 5), 5, int(rng.integers(2**31))).double().reshape(5, 5).numpy()
    out.append(_judge_case(rng, "64-bit row offsets", 1, 1, 5, "float32", True, None, (11, 9), int64=True, x=x))
    if judging.gpu_scale():  # last: a fault may spoil the GPU context
        x = case_scores("random", (1, 1, 3), 3, int(rng.integers(2**31))).double().reshape(3, 3).numpy()
        out.append(_judge_case(rng, "rows 2**30 apart: offsets past 2**31 elements", 1, 1, 3, "float32", True, None,
                               x=x, big_step=judging.BIG_STEP))
    return out


JUDGES = {"ch06-masked": KernelJudge("masked_softmax_kernel", _judge_cases, int64=True)}
