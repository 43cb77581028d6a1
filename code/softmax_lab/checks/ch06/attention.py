"""Exercise ch06-attention, the capstone: a learner's attention forward kernel with online softmax, checked against
``scaled_dot_product_attention`` in float64 and judged by the grader, both from one case table.

The learner's launcher is ``attention(q, k, v, out, causal=..., left_pad=..., BLOCK_M=..., BLOCK_N=...)`` on
``[B, H, S, D]`` fp16/bf16 tensors; its kernel ``attention_kernel`` runs one program per block of queries and
streams the keys and values tile by tile. Key ``k`` is seen by query ``q`` when ``k >= left_pad[b]`` and, with
``causal``, ``k <= q``. The contract for a query that sees no key at all: its output row is **zeros** (as
FlashAttention gives, and PyTorch's SDPA, while ``torch.softmax`` over the masked scores gives NaN).

On the CPU, Triton's interpreter multiplies bf16 tiles in ``tl.dot`` as raw 16-bit integers, so the spec asks for
tiles converted to fp32 before the dots, as chapter 6's rule asks for everything computed (on a GPU, fp32 dots run
as TF32, exact for 16-bit inputs). Each case that sets a trap names the mistake it catches when it fails.
"""
from __future__ import annotations

import contextlib
import math
from types import SimpleNamespace

import numpy as np
import torch

from ...device import DEVICE, ON_GPU
from ...memcount import count_calls
from ...testing import TOLERANCES
from .._pitfalls import Verdict, quiet
from ..common import GUARD, Report
from .. import judging
from ..judging import TORCH, Buf, KCase, KernelJudge, big_rows_input, big_rows_output, cast, rows_input, rows_output

__all__ = ["check_attention", "attention_ref", "case_tensors", "ATTENTION_CASES"]

BLOCK_M = BLOCK_N = 16  # the tiles every case runs with (tl.dot needs 16 or more on a GPU)

# What a failing trap says: the mistake and what it does, never the line that fixes it.
RESCALE = ("when a later key tile raises a query's running max, what was gathered before it (the output "
           "accumulator, or l) stayed weighted by the old max: rows whose max arrives late give their early keys "
           "far too much weight")
NO_GUARD_TILE = ("these queries see no key at all in their first tiles (left padding): their running max is still "
                 "-inf after such a tile, exp(-inf - (-inf)) is NaN, and the NaN stays in the accumulator for every "
                 "later tile")
NO_GUARD_ROW = ("a query that sees no key came out NaN: its running max stays -inf and its l 0, and both "
                "exp(-inf - (-inf)) and 0/0 are NaN (the contract is a row of zeros, what FlashAttention and SDPA "
                "give)")
ZERO_ROW = "a query that sees no key must give a row of zeros (the contract), not values taken from masked keys"
MASK_AFTER_MAX = ("masked scores took part in the max: here the keys a query may not see score far above the ones it "
                  "may, so every kept exp(s - m) underflows to 0 and the row comes out 0 or NaN")
FP16_ACC = ("the output accumulator lost what 16 bits cannot hold: these values cancel (running sums climb past "
            "16,000, where fp16 values are 8 or more apart, then fall back to a few units), so an accumulator "
            "rounded to the input's dtype between tiles is off by whole units")
OFF_BY_ONE = ("the causal mask is off by one: these outputs are attention where each query sees one key too many "
              "or too few (query q sees keys 0..q, itself included)")
STRIDE = ("q, k and v here are views of one packed [.., S, 3*D] tensor (rows 3*D apart) and the output's rows are "
          "D + 8 apart: rows were read or written as if each tensor were contiguous")
PAD = "left padding ignored: keys k < left_pad[b] were seen by the queries of sequence b"
EXP_FP16 = ("tl.exp was given a half-precision tensor: Triton's exp takes fp32 (and fp16's own exp would overflow "
            "past ln(65504) = 11.09)")
BF16_DOT = ("bf16 tiles reached tl.dot: Triton's CPU interpreter multiplies bf16 tiles as raw 16-bit integers, "
            "which gives garbage here (on a GPU it would be right); the spec asks for fp32 tiles in the dots")

# The cases, read by the notebook check and by the grader's judge alike: (name, (B, H, S, D), dtype, causal,
# left_pad, values, the mistake a FAIL names, the check's seed). Values: "random"; "rising" (scores grow along
# the keys: the max arrives late); "steep" (future keys score hundreds above the kept ones); "cancel" (q = 0 so
# every p is exactly 1, v near +1000 then near -1000); "packed" (q, k, v views of one [B, H, S, 3D] tensor, the
# output a view with rows D + 8 apart). The check draws them from its seeds (CPU and GPU see the same values);
# the judge from the grader's seed.
ATTENTION_CASES = [
    ("one query, one key: 1x1x1, D=16", (1, 1, 1, 16), "float16", False, None, "random", "", 70),
    ("S = 15, one tile less one: 1x1x15, D=16, causal", (1, 1, 15, 16), "float16", True, None, "random", "", 71),
    ("S = 16, one whole tile: 2x1x16, D=64", (2, 1, 16, 64), "float16", False, None, "random", "", 72),
    ("S = 17, one tile and one: 1x2x17, D=64, causal, bf16", (1, 2, 17, 64), "bfloat16", True, None, "random", "",
     73),
    ("causal, 2x2x50, D=16", (2, 2, 50, 16), "float16", True, None, "random", OFF_BY_ONE, 74),
    ("the max arrives late (scores rise along the keys): 1x2x80, D=16", (1, 2, 80, 16), "float16", False, None,
     "rising", RESCALE, 75),
    ("left padding [5, 0], not causal, two heads per sequence (each head reads its sequence's pad): 2x2x24, D=64",
     (2, 2, 24, 64), "float16", False, [5, 0], "random", PAD, 76),
    ("left padding [0, 37], causal: whole key tiles masked, queries 0..36 of sequence 1 see no key: 2x1x50, D=16",
     (2, 1, 50, 16), "float16", True, [0, 37], "random", NO_GUARD_TILE, 77),
    ("a sequence that is all padding: every query sees no key, bf16 2x1x20, D=16", (2, 1, 20, 16), "bfloat16", True,
     [20, 3], "random", NO_GUARD_ROW, 78),
    ("causal, the keys a query may not see score hundreds above the ones it may: 1x1x40, D=16", (1, 1, 40, 16),
     "float16", True, None, "steep", MASK_AFTER_MAX, 79),
    ("values that cancel (q = 0, v near +1000 then near -1000): 1x1x64, D=16", (1, 1, 64, 16), "float16", False,
     None, "cancel", FP16_ACC, 80),
    ("q, k, v views of one packed qkv, output rows D + 8 apart: bf16 1x2x33, D=64, causal", (1, 2, 33, 64),
     "bfloat16", True, None, "packed", STRIDE, 81),
]


def case_tensors(kind: str, shape: tuple, seed: int) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """float64 (q, k, v), each ``[B, H, S, D]``, for one case's values (CPU; the same on every machine)."""
    B, H, S, D = shape
    g = torch.Generator().manual_seed(int(seed))
    q, k, v = (torch.randn(B, H, S, D, generator=g, dtype=torch.float64) for _ in range(3))
    keys = torch.arange(S, dtype=torch.float64)
    if kind == "rising":  # score += 8 j / S: most queries' max is among the last keys
        q[..., 0] = 2.0
        k[..., 0] = 16.0 * keys / S
    elif kind == "steep":  # score = 10 j: the masked future is up to 10 (S - 1) above the diagonal
        q.zero_()
        q[..., 0] = math.sqrt(D)
        k[..., 0] = 10.0 * keys
    elif kind == "cancel":  # every score 0, so every p is 1; the sum over v cancels to a few units
        q.zero_()
        halves = torch.randint(0, 9, (B, H, S, D), generator=g).to(torch.float64) / 2
        v = torch.where((keys < S // 2).view(1, 1, S, 1), 1000.0 + halves, -1000.0 - halves)
    return q, k, v


@contextlib.contextmanager
def bf16_dots():
    """CPU interpreter only: notes whether a ``tl.dot`` got bf16 tiles (``.bf16``), which the interpreter multiplies
    as raw 16-bit integers. Nothing is changed; on a GPU nothing is watched."""
    seen = SimpleNamespace(bf16=False)
    if ON_GPU:
        yield seen
        return
    import triton.language as tl
    from triton.runtime import interpreter

    builder = interpreter.InterpreterBuilder
    original = builder.create_dot

    def create_dot(self, a, b, *rest):
        seen.bf16 = seen.bf16 or tl.bfloat16 in (a.dtype.scalar, b.dtype.scalar)
        return original(self, a, b, *rest)

    builder.create_dot = create_dot
    try:
        yield seen
    finally:
        builder.create_dot = original


def attention_ref(q, k, v, causal: bool, left_pad=None, shift: int = 0) -> torch.Tensor:
    """float64 attention by ``scaled_dot_product_attention`` (CPU) on the given values, with the mask the spec
    names; a query that sees no key gives zeros. ``shift`` -1 / +1: the two causal off-by-one mistakes."""
    q, k, v = (t.detach().to("cpu", torch.float64) for t in (q, k, v))
    keep = _keep(q.shape[0], q.shape[2], causal, left_pad, shift)
    out = torch.nn.functional.scaled_dot_product_attention(q, k, v, attn_mask=keep)
    return torch.where(keep.any(dim=-1, keepdim=True), out, 0.0)


def _keep(B: int, S: int, causal: bool, left_pad, shift: int = 0) -> torch.Tensor:
    """Boolean ``[B, 1, S, S]``: True where query q sees key k."""
    qs = torch.arange(S).view(S, 1)
    ks = torch.arange(S).view(1, S)
    keep = torch.ones(B, 1, S, S, dtype=torch.bool)
    if causal:
        keep = keep & (ks <= qs + shift)
    if left_pad is not None:
        keep = keep & (ks >= torch.as_tensor(left_pad).view(B, 1, 1, 1))
    return keep


def _inputs(kind, shape, dtype, seed):
    """The learner's tensors on the device: (q, k, v, out, the buffer around out or None)."""
    B, H, S, D = shape
    q, k, v = (t.to(DEVICE, dtype) for t in case_tensors(kind, shape, seed))
    if kind == "packed":
        qkv = torch.cat([q, k, v], dim=-1)
        q, k, v = qkv[..., :D], qkv[..., D:2 * D], qkv[..., 2 * D:]
        big = torch.full((B, H, S, D + 8), GUARD, dtype=dtype, device=DEVICE)
        out = big[..., :D]
        out.fill_(float("nan"))
        return q, k, v, out, big
    return q, k, v, torch.full_like(q, float("nan")), None


def attention_problem(fn, kind, shape, dtype_name, causal, left_pad, pitfall, seed) -> str:
    """'' when the learner's ``attention`` matches the float64 reference on one case, else a plain-words reason."""
    dtype = TORCH[dtype_name]
    q, k, v, out, big = _inputs(kind, shape, dtype, seed)
    pad = None if left_pad is None else torch.tensor(left_pad, dtype=torch.int32, device=DEVICE)
    try:
        with quiet(), bf16_dots() as dots:
            y = fn(q, k, v, out, causal=causal, left_pad=pad, BLOCK_M=BLOCK_M, BLOCK_N=BLOCK_N)
    except Exception as err:
        if "Expected dtype" in str(err) and ("fp16" in str(err) or "bf16" in str(err)):
            return EXP_FP16
        raise
    y = out if y is None else y
    B, H, S, D = shape
    if big is not None:
        if y.data_ptr() != out.data_ptr():
            return "the launcher must write into the `out` it is given (here a strided view), not a new tensor"
        if not torch.equal(big[..., D:], torch.full_like(big[..., D:], GUARD)):
            return f"the kernel wrote between the output's rows - {STRIDE}"
    if tuple(y.shape) != tuple(shape) or y.dtype != dtype:
        return f"output {tuple(y.shape)} {y.dtype}, expected {tuple(shape)} {dtype} (the input's shape and dtype)"
    y64 = y.detach().to("cpu", torch.float64)
    ref = attention_ref(q, k, v, causal, left_pad)
    empty = ~_keep(B, S, causal, left_pad).any(dim=-1).expand(B, H, S)  # queries that see no key
    nan_rows = torch.isnan(y64).any(dim=-1)
    if bool((nan_rows & ~empty).any()):
        said = f"{int((nan_rows & ~empty).sum())} of {int((~empty).sum())} queries that see keys came out NaN"
        return f"{said} - {pitfall}" if pitfall in (NO_GUARD_TILE, MASK_AFTER_MAX) else said
    if bool(nan_rows[empty].any()):
        return NO_GUARD_ROW
    atol, rtol = TOLERANCES[dtype]
    right = ((y64 - ref).abs() <= atol + rtol * ref.abs()).all(dim=-1)  # per query
    if bool(right.all()):
        return ""
    if dots.bf16:
        return BF16_DOT
    if causal:
        for shift in (-1, 1):  # every query right under the true mask or under one shifted by a key
            alt = attention_ref(q, k, v, True, left_pad, shift)
            if bool((right | ((y64 - alt).abs() <= atol + rtol * alt.abs()).all(dim=-1)).all()):
                return OFF_BY_ONE
    for wrong in (_without_rescale(q, k, v, causal, left_pad, l_too=False),
                  _without_rescale(q, k, v, causal, left_pad, l_too=True)):
        if bool((right | ((y64 - wrong).abs() <= atol + rtol * wrong.abs()).all(dim=-1)).all()):
            return RESCALE
    if left_pad is not None and any(left_pad):
        alt = attention_ref(q, k, v, causal, None)
        if bool((right | ((y64 - alt).abs() <= atol + rtol * alt.abs()).all(dim=-1)).all()):
            return PAD
    if bool((y64[empty] != 0).any()):
        return ZERO_ROW
    worst = float((y64 - ref).abs().max())
    said = f"largest error {worst:.2g} against the float64 reference (tolerance {atol:g} + {rtol:g}*|out|)"
    return f"{said} - the trap this case sets: {pitfall}" if pitfall else said


def _without_rescale(q, k, v, causal: bool, left_pad, l_too: bool) -> torch.Tensor:
    """float64 output of the classic mistake, tiles of BLOCK_N keys: the accumulator (and with ``l_too`` l as
    well) never brought to a new max."""
    q, k, v = (t.detach().to("cpu", torch.float64) for t in (q, k, v))
    B, H, S, D = q.shape
    s = (q @ k.transpose(-1, -2)) * D ** -0.5
    s = s.masked_fill(~_keep(B, S, causal, left_pad), float("-inf"))
    m = torch.full((B, H, S, 1), float("-inf"), dtype=torch.float64)
    l = torch.zeros_like(m)
    acc = torch.zeros_like(q)
    for start in range(0, S, BLOCK_N):
        tile = s[..., start:start + BLOCK_N]
        m_new = torch.maximum(m, tile.amax(dim=-1, keepdim=True))
        shift = torch.where(m_new == float("-inf"), 0.0, m_new)
        p = torch.exp(tile - shift)
        l = (l if l_too else l * torch.exp(m - shift)) + p.sum(dim=-1, keepdim=True)
        acc = acc + p @ v[..., start:start + BLOCK_N, :]
        m = m_new
    return acc / torch.where(l == 0, 1.0, l)


TWO_WALKS = ("every {what} was read {n} times per block of queries: a walk that finds the max (or l) came before "
             "the walk that gathers the output, so each tile crosses memory more than once (the rescaled "
             "accumulator is what lets one walk do it all)")


def traffic_problem(fn, shape: tuple = (1, 2, 48, 16)) -> str:
    """'' when, counted by ``memcount`` (the kernel's own loads and stores), each program reads every key and value
    once, the queries once, and writes every output once: one walk. Not causal, so every tile is needed."""
    B, H, S, D = shape
    q, k, v = (t.to(DEVICE, torch.float16) for t in case_tensors("random", shape, 82))
    out = torch.full_like(q, float("nan"))
    with quiet():
        _, c = count_calls(fn, q, k, v, out, causal=False, left_pad=None, BLOCK_M=BLOCK_M, BLOCK_N=BLOCK_N)
    if c.launches == 0:
        return "no Triton kernel was launched: the launcher must start your kernel"
    blocks = -(-S // BLOCK_M)
    once = blocks * B * H * S * D  # every key (value) once per query block
    for what, name in (("key", "k_ptr"), ("value", "v_ptr")):
        reads = c.loads_of.get(name, 0)
        if reads > once:
            return TWO_WALKS.format(what=what, n=f"{reads / once:.3g}")
        if reads < once:
            return f"some {what}s were never read: the walk over the key tiles did not cover every key"
    if c.loads_of.get("q_ptr", 0) > q.numel():
        return "the queries were read more than once: each program fetched its block of queries again during the walk"
    if c.stores != out.numel():
        return (f"every output must be written exactly once (counted {c.stores / out.numel():.3g} writes per output): "
                "provisional outputs cost a write and a read each")
    return ""


def check_attention(attention) -> Verdict:
    """Exercise ch06-attention: ``attention(q, k, v, out, causal=..., left_pad=..., BLOCK_M=..., BLOCK_N=...)``."""
    report = Report("ch06-attention")
    for name, shape, dtype, causal, left_pad, kind, pitfall, seed in ATTENTION_CASES:
        report.run(name, lambda a=(kind, shape, dtype, causal, left_pad, pitfall, seed):
                   attention_problem(attention, *a))
    report.run("one walk? fp16 1x2x48, D=16, not causal: each key and value read once per block of queries, every "
               "output written once (memcount)", lambda: traffic_problem(attention))
    return Verdict(report.show())


# ------------------------------------------------------------------------------- what the grader launches

BIG_OFFSETS = "offsets past 2**31 elements came out wrong: some offset arithmetic ran in 32 bits and wrapped around"


def _judge_case(rng, name, shape, dtype, causal, left_pad, kind, pitfall, big_step=0) -> KCase:
    """One launch on one case's values (drawn from the grader's seed): q, k, v and the output as flat buffers of
    rows of D, ``big_step`` apart when given (the GPU's 64-bit offsets case)."""
    B, H, S, D = shape
    q, k, v = (torch.from_numpy(cast(t.numpy(), dtype)) for t in case_tensors(kind, shape, rng.integers(2**31)))
    ref = attention_ref(q, k, v, causal, left_pad).reshape(B * H * S, D).numpy()
    R = B * H * S
    if big_step:
        step = o_step = big_step
        ins = [big_rows_input(rng, t.reshape(R, D).numpy(), big_step, dtype) for t in (q, k, v)]
        out = big_rows_output(ref, big_step, dtype)
    else:
        step = 3 * D if kind == "packed" else D
        o_step = D + 8 if kind == "packed" else D
        ins = [rows_input(rng, t.reshape(R, D).numpy(), step, dtype) for t in (q, k, v)]
        out = rows_output(ref, o_step, dtype)
    pads = np.zeros(B) if left_pad is None else np.asarray(left_pad, dtype=np.float64)
    buffers = {"q": ins[0], "k": ins[1], "v": ins[2], "out": out, "pad": Buf(pads, "int32")}
    args = [("buf", "q"), ("buf", "k"), ("buf", "v"), ("buf", "out"), ("buf", "pad"), ("int", step), ("int", step),
            ("int", step), ("int", o_step), ("int", S), ("int", H), ("float", D ** -0.5)]
    grid = (-(-S // BLOCK_M), B * H)
    hint = BIG_OFFSETS if big_step else f"the trap this case sets: {pitfall}" if pitfall else ""
    return KCase(name, grid, args, buffers, {"BLOCK_M": BLOCK_M, "BLOCK_N": BLOCK_N, "D": D, "CAUSAL": causal,
                                             "HAS_PAD": left_pad is not None}, hint=hint)


def _kernel_cases(rng):
    """The grader's launches: every case of the table, with values drawn from its seed; on a GPU with the memory,
    rows 2**30 elements apart (last: a fault may spoil the GPU context)."""
    out = [_judge_case(rng, name, shape, dtype, causal, left_pad, kind, pitfall)
           for name, shape, dtype, causal, left_pad, kind, pitfall, _ in ATTENTION_CASES]
    if judging.gpu_scale():
        out.append(_judge_case(rng, "rows 2**30 apart: offsets past 2**31 elements, causal 1x1x3, D=16",
                               (1, 1, 3, 16), "float16", True, None, "random", "", big_step=judging.BIG_STEP))
    return out


JUDGES = {"ch06-attention": KernelJudge("attention_kernel", _kernel_cases)}
