"""Exercise ch05-online-kernel: a learner's launcher ``online_softmax(x, out, BLOCK=...)`` on rows longer than one
block, and on the traps (a later tile raising the max, a whole tile of -inf); from ``memcount``'s count of its
own loads and stores: is it online (at most two reads of every element, one write)?"""
from __future__ import annotations

import numpy as np
import torch

from .. import judging
from ...device import DEVICE
from ...memcount import count_calls
from ...reference import softmax_ref
from ...testing import compare, poisoned_like, randn
from .._pitfalls import Verdict, quiet
from ..ch06 import _ulp_problem, half_sums_in_half
from ..common import Report, _returned, lane_map_of
from ..judging import INT64_HINT, TORCH, KernelJudge, softmax_case, softmax_rows
from ._online import INF_TILE, NEG_INF, RESCALE, _per_element


def _row_sums_off(y: torch.Tensor, ref: torch.Tensor) -> bool:
    finite = torch.isfinite(ref).all(dim=-1)
    s = y.to(torch.float64).sum(dim=-1).cpu()
    return bool(((s - 1).abs() > 1e-3)[finite.cpu()].any())


def _no_rescale_softmax(x: torch.Tensor, block: int) -> torch.Tensor:
    """The output of the classic bug (l never rescaled), in float64, for tiles of ``block``."""
    x64 = x.detach().to(torch.float64).cpu()
    m = torch.full((x64.shape[0], 1), NEG_INF, dtype=torch.float64)
    l = torch.zeros_like(m)
    for start in range(0, x64.shape[1], block):
        m = torch.maximum(m, x64[:, start:start + block].amax(dim=1, keepdim=True))
        shift = torch.where(m == NEG_INF, torch.zeros_like(m), m)
        l = l + torch.exp(x64[:, start:start + block] - shift).sum(dim=1, keepdim=True)
    return torch.exp(x64 - m) / l


def _one_walk_softmax(x: torch.Tensor, block: int) -> torch.Tensor:
    """The output of a single walk that stores each tile with the (m, l) known when it was read, in float64."""
    x64 = x.detach().to(torch.float64).cpu()
    m = torch.full((x64.shape[0], 1), NEG_INF, dtype=torch.float64)
    l = torch.zeros_like(m)
    y = torch.empty_like(x64)
    for start in range(0, x64.shape[1], block):
        tile = x64[:, start:start + block]
        m_new = torch.maximum(m, tile.amax(dim=1, keepdim=True))
        shift = torch.where(m_new == NEG_INF, torch.zeros_like(m_new), m_new)
        l = l * torch.exp(m - shift) + torch.exp(tile - shift).sum(dim=1, keepdim=True)
        m = m_new
        y[:, start:start + block] = torch.exp(tile - shift) / l
    return y


ONE_WALK = ("each tile's outputs were stored with the max and sum of the tiles read so far, not of the whole row: "
            "a later tile still raised the max or added to the sum, so the earlier outputs came out too large")


def online_problem(fn, x: torch.Tensor, block: int, pitfall: str = "") -> str:
    """'' when ``fn(x, out, BLOCK=block)`` matches the float64 reference, else a plain-words reason."""
    out = poisoned_like(x)
    try:
        with quiet(), half_sums_in_half():
            y = fn(x, out, BLOCK=block)
    except Exception as err:
        if "Expected dtype" in str(err) and ("fp16" in str(err) or "bf16" in str(err)):
            return EXP_HALF
        raise
    y = out if y is None else y
    problem = compare(y, x)
    if not problem and x.dtype == torch.float16 and _ulp_problem(y, softmax_ref(x)):
        problem = ("some outputs are more than 1 fp16 ulp from the float64 reference (fp32 math rounds once, at "
                   "the store)")
    if not problem:
        return ""
    if pitfall in (HALF, HALF_SUM) and y.shape == x.shape:
        return f"{problem} - {pitfall}"
    ref = softmax_ref(x)
    if (y.shape == x.shape and x.shape[1] > block and not torch.isnan(y).any()
            and torch.allclose(y.to(torch.float64).cpu(), _one_walk_softmax(x, block), atol=1e-5, rtol=1e-4)):
        return f"{problem} - {ONE_WALK}"
    if y.shape == x.shape and not torch.isnan(ref).any() and torch.isnan(y).any():
        nan_rows = torch.isnan(y).all(dim=-1)
        if pitfall == INF_TILE and bool(nan_rows.any()):
            return f"whole rows came out NaN - {INF_TILE}"
        return problem
    if y.shape == x.shape and _row_sums_off(y, ref):
        bug = _no_rescale_softmax(x, block)
        if pitfall == RESCALE or torch.allclose(y.to(torch.float64).cpu(), bug, atol=1e-5, rtol=1e-4):
            return f"rows do not sum to 1 - {RESCALE}"
    return f"{problem} - {pitfall}" if pitfall else problem


MASK_HINT = ("a row longer than one block: some tiles were never walked, lanes read or wrote past the row's end, "
             "or padding took part in the max or the sum")
ROW_STRIDE = ("rows are not contiguous: rows stepped by n_cols, not by the view's row stride, land inside the "
              "wrong rows")

HALF = ("half precision in and out: the row is fp16/bf16, the arithmetic (exp, the running max and sum) "
        "needs fp32, and the output is stored in the input's dtype")

EXP_HALF = ("tl.exp was given a half-precision tensor: Triton's exp takes fp32 or fp64, in the interpreter and "
            "on the GPU alike")
HALF_SUM = ("the running sum lost its small terms: after the shift each row is one 1.0 and 255 terms of e^-8, and "
            "near 1 fp16 values are 0.001 apart, so a sum kept in half precision never grows past 1.0")

# The cases, read by the notebook check and by the grader's judge alike: (name, (rows, columns), BLOCK, values,
# the pitfall a FAIL names, the check's seed, the input's row step, dtype). Values: "random", "rising" (the max in
# the last tile), "negative" ([-1002, -1001, -1000]) or "lead -inf" (the first two tiles all -inf). The check draws
# them from its fixed seeds (CPU and GPU see the same rows); the judge from the grader's seed, plus JUDGE_FRESH
# fresh cases with strided inputs and outputs.
ONLINE_CASES = [
    *[(f"random {r}x{c}, BLOCK=32", (r, c), 32, "random", MASK_HINT, 50 + i, None, "float32")
      for i, (r, c) in enumerate([(1, 1), (2, 31), (3, 32), (4, 33), (2, 255), (3, 257)])],
    ("long rows 2x300, BLOCK=64", (2, 300), 64, "random", MASK_HINT, 60, None, "float32"),
    ("max in the last tile (rising row 2x192, BLOCK=32)", (2, 192), 32, "rising", RESCALE, None, None, "float32"),
    ("all-negative row [-1002, -1001, -1000], BLOCK=32", (1, 3), 32, "negative",
     "the padding lanes took part in the max, which became 0", None, None, "float32"),
    ("first two tiles all -inf (2x300, BLOCK=64)", (2, 300), 64, "lead -inf", INF_TILE, 61, None, "float32"),
    ("strided view big[:, :300], BLOCK=64", (3, 300), 64, "random", ROW_STRIDE, 62, 350, "float32"),
    ("float16 2x100, BLOCK=32 (half precision in and out)", (2, 100), 32, "random", HALF, 63, None, "float16"),
    ("bfloat16 2x100, BLOCK=32 (half precision in and out)", (2, 100), 32, "random", HALF, 64, None, "bfloat16"),
    ("float16 2x256 of one 8 and 255 zeros, BLOCK=32: 255 small terms in the running sum", (2, 256), 32,
     "one eight", HALF_SUM, None, None, "float16"),
]
JUDGE_FRESH = 2  # fresh cases in every grader run, besides all the named ones


def case_values(kind: str, shape: tuple, seed: int | None, step: int | None,
                dtype: str = "float32") -> torch.Tensor:
    """The check's values for one case of ONLINE_CASES (a view with rows ``step`` apart when given)."""
    if dtype != "float32":
        return case_values(kind, shape, seed, step).to(TORCH[dtype])
    if kind == "rising":
        return torch.linspace(-8.0, 8.0, shape[1], device=DEVICE).repeat(shape[0], 1)
    if kind == "negative":
        return torch.tensor([[-1002.0, -1001.0, -1000.0]], device=DEVICE)
    if kind == "one eight":
        return torch.from_numpy(one_eight(shape, 0)).to(torch.float32).to(DEVICE)
    x = randn((shape[0], step or shape[1]), device=DEVICE, seed=seed)
    if kind == "lead -inf":
        x[:, :128] = NEG_INF
    return x[:, :shape[1]]


def one_eight(shape: tuple, first: int) -> np.ndarray:
    """Rows of zeros with one 8 each (at ``first``, then 7 columns further per row): one 1.0 and many e^-8 after
    the shift, a sum that only fp32 keeps."""
    x = np.zeros(shape)
    for r in range(shape[0]):
        x[r, (first + 7 * r) % shape[1]] = 8.0
    return x


def fresh_values(kind: str, shape: tuple, rng: np.random.Generator) -> np.ndarray:
    """The judge's values for the same case, from the grader's seed (float64)."""
    if kind == "rising":
        return np.tile(np.linspace(-8, 8, shape[1]), (shape[0], 1)) + rng.normal(0, 0.01, shape)
    if kind == "negative":
        return np.array([[-1002.0, -1001.0, -1000.0]])
    if kind == "one eight":
        return one_eight(shape, int(rng.integers(0, shape[1])))
    if kind == "lead -inf":
        x = rng.normal(0, 3, shape)
        x[:, :128] = NEG_INF
        return x
    return softmax_rows(rng, shape)


def fresh_case(rng: np.random.Generator) -> tuple:
    """One random case like ONLINE_CASES', rows strided in and out, from the grader's seed."""
    R, C, block = int(rng.integers(2, 5)), int(rng.integers(65, 300)), int(rng.choice([32, 64]))
    return f"strided input and output {R}x{C}, BLOCK={block}", (R, C), block, "random", ROW_STRIDE, None, -1, \
        "float32"


def _cases():
    """(name, x, BLOCK, pitfall) for the notebook check."""
    for name, shape, block, kind, pitfall, seed, step, dtype in ONLINE_CASES:
        yield name, case_values(kind, shape, seed, step, dtype), block, pitfall


def lane_launch(online_softmax):
    """How the lane map (shown after a FAIL) runs the learner's launcher on one small strided input."""
    return lambda x: _returned(online_softmax(x, out := torch.empty_like(x), BLOCK=4), out)


lane_input = None  # the default: 4 rows of 10 inside rows of 14


NOT_ONLINE = ("that is not online: a kernel that reads the row once for its max, once more for its sum and once "
              "more to write the outputs reads every element 3 times, where at most 2 reads are allowed")


def traffic_problem(fn, x: torch.Tensor, block: int) -> str:
    """'' when the launcher reads every element at most twice and writes every output exactly once (memcount:
    the kernel's own masked loads and stores, run through the interpreter)."""
    out = poisoned_like(x)
    with quiet():
        _, c = count_calls(fn, x, out, BLOCK=block)
    n = x.numel()
    if c.launches == 0:
        return "no Triton kernel was launched: the launcher must start your kernel"
    if c.loads > 2 * n:
        return f"your kernel read every element {_per_element(c.loads, n)} times - {NOT_ONLINE}"
    if c.loads < n:
        return "some elements were never read: each tile loop must cover the whole row"
    if c.stores > n:
        return (f"your kernel wrote every output {_per_element(c.stores, n)} times, where once is allowed: an "
                "output stored before the row's max and sum are final costs that store, and a read and a store more")
    if c.stores < n:
        return "some outputs were never written: the stores did not cover every tile of the row"
    return ""


def check_online_softmax(online_softmax) -> Verdict:
    """Exercise ch05-online-kernel: ``online_softmax(x, out, BLOCK=...)`` for rows longer than one block."""
    report = Report("ch05-online-kernel", drawing=lane_map_of(lane_launch(online_softmax), effect=True))
    for name, x, block, pitfall in _cases():
        report.run(name, lambda x=x, block=block, pitfall=pitfall: online_problem(online_softmax, x, block,
                                                                                  pitfall))
    x = randn((2, 300), device=DEVICE, seed=57)
    report.run("is it online? 2x300, BLOCK=64: at most 2 reads and 1 write per element (memcount)",
               lambda: traffic_problem(online_softmax, x, 64))
    return Verdict(report.show())


def _kernel_cases(rng):
    """The grader's launches: every named case and JUDGE_FRESH fresh ones with values from its seed, then the
    64-bit offsets (counted in the interpreter; on a GPU, real rows 2**30 apart)."""
    args = ["x", "out", "x_stride", "out_stride", "n"]
    out = []
    for name, (R, C), block, kind, _, _, step, dtype in ONLINE_CASES + [fresh_case(rng) for _ in range(JUDGE_FRESH)]:
        out.append(softmax_case(rng, name, fresh_values(kind, (R, C), rng), args, block, (R,), dtype=dtype,
                                strided=step == -1, steps=None if step == -1 else (step, None)))
    x = softmax_rows(rng, (3, 40))
    out.append(softmax_case(rng, "64-bit row offsets", x, args, 32, (3,), strided=True, int64=True, hint=INT64_HINT))
    if judging.gpu_scale():  # last: a fault here may spoil the GPU context for later launches
        out.append(softmax_case(rng, "rows 2**30 apart: offsets past 2**31 elements", softmax_rows(rng, (3, 70)),
                                args, 32, (3,), hint=INT64_HINT, big_step=judging.BIG_STEP))
    return out


JUDGES = {"ch05-online-kernel": KernelJudge("online_softmax_kernel", _kernel_cases, int64=True)}
