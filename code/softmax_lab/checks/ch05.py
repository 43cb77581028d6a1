"""Checks for chapter 5, online softmax: the (m, l) update and the online kernel.

``check_online_update(online_update)`` tests one step of the recurrence, in plain Python/torch::

    m_new = max(m, max(tile))
    l_new = l * exp(m - m_new) + sum(exp(tile - m_new))

``check_online_softmax(online_softmax)`` runs a learner's launcher ``online_softmax(x, out, BLOCK=...)`` on rows
longer than one block, and on the traps: a later tile raising the max (l must be rescaled), and a whole tile
of -inf (exp(-inf - (-inf)) is NaN).
"""
from __future__ import annotations

import contextlib
import math
import warnings

import numpy as np
import torch

from ..device import DEVICE
from ..reference import softmax_ref
from ..testing import compare, poisoned_like, randn
from ._pitfalls import Verdict
from .common import Report, _returned, lane_map_of

__all__ = ["check_online_update", "check_online_softmax"]

NEG_INF = float("-inf")

RESCALE = ("forgot to rescale l by exp(m - m_new): the old sum was counted against the old max, so when a "
           "later tile raises the max it must shrink")
INF_TILE = ("a tile of all -inf gives m_new = -inf and exp(-inf - (-inf)) = NaN: while the max is still -inf, "
            "shift by 0 instead (Python: 0.0 if m_new == -inf else m_new; Triton: tl.where(m_new == -inf, 0.0, m_new))")
BAD_MAX = "m must be the largest value seen so far: m_new = max(m, max(tile))"


@contextlib.contextmanager
def quiet():
    """Silence numpy's 'invalid value' warnings: stderr output would differ between runs and break nbval."""
    with warnings.catch_warnings(), np.errstate(all="ignore"):
        warnings.simplefilter("ignore")
        yield


# ------------------------------------------------------------------------------------------ the (m, l) update


def run_online_update(online_update, row, tile: int):
    """Fold ``online_update`` over ``row`` in tiles of ``tile`` values, from (m, l) = (-inf, 0).

    Returns the list of (m, l) after each tile, as Python floats.
    """
    x = torch.as_tensor(row, dtype=torch.float64)
    m, l = NEG_INF, 0.0
    steps = []
    for start in range(0, x.numel(), tile):
        m, l = online_update(m, l, x[start:start + tile])
        m, l = float(m), float(l)
        steps.append((m, l))
    return steps


def _expected_steps(row, tile: int):
    x = [float(v) for v in row]
    steps = []
    for end in range(tile, len(x) + tile, tile):
        seen = x[:min(end, len(x))]
        m = max(seen)
        l = 0.0 if m == NEG_INF else sum(math.exp(v - m) for v in seen)
        steps.append((m, l))
    return steps


def _no_rescale_steps(row, tile: int):
    """What the classic bug gives: l += sum(exp(tile - m_new)) without rescaling the old l."""
    x = [float(v) for v in row]
    m, l, steps = NEG_INF, 0.0, []
    for start in range(0, len(x), tile):
        t = x[start:start + tile]
        m = max(m, max(t))
        l = l + sum(math.exp(v - m) for v in t)
        steps.append((m, l))
    return steps


def _close(a: float, b: float) -> bool:
    if math.isinf(a) or math.isinf(b):
        return a == b
    return abs(a - b) <= 1e-9 + 1e-9 * abs(b)


def _update_problem(online_update, row, tile: int, pitfall: str = "") -> str:
    with quiet():
        got = run_online_update(online_update, row, tile)
    want = _expected_steps(row, tile)
    if len(got) != len(want):
        return f"expected {len(want)} steps, got {len(got)}"
    for k, ((m, l), (m_ok, l_ok)) in enumerate(zip(got, want), start=1):
        where = f"after tile {k}"
        if math.isnan(m) or math.isnan(l):
            if any(math.isinf(v) and v < 0 for v in row[: k * tile]):
                return f"{where}: NaN - {INF_TILE}"
            return f"{where}: NaN in (m, l)"
        if not _close(m, m_ok):
            return f"{where}: m = {m:.4g}, expected {m_ok:.4g} - {BAD_MAX}"
        if not _close(l, l_ok):
            bug = _no_rescale_steps(row, tile)
            if _close(l, bug[k - 1][1]):
                return f"{where}: l = {l:.4f}, expected {l_ok:.4f} - {RESCALE}"
            return f"{where}: l = {l:.4f}, expected {l_ok:.4f}" + (f" - {pitfall}" if pitfall else "")
    return ""


def check_online_update(online_update) -> Verdict:
    """Exercise ch05-online-update: ``online_update(m, l, tile) -> (m_new, l_new)``."""
    report = Report("ch05-online-update")
    g = torch.Generator().manual_seed(5)
    cases = [
        ("seed example [1, 2 | 3, 0] (l = 1.368, then 1.553)", [1.0, 2.0, 3.0, 0.0], 2, RESCALE),
        ("max in the first tile [5, 4 | 3, 2]", [5.0, 4.0, 3.0, 2.0], 2, ""),
        ("rising row, 5 tiles of 4", [0.5 * i for i in range(20)], 4, RESCALE),
        ("random row of 50, tiles of 7", (torch.randn(50, generator=g, dtype=torch.float64) * 3).tolist(), 7,
         RESCALE),
        ("first tile all -inf [-inf, -inf | 1, 2]", [NEG_INF, NEG_INF, 1.0, 2.0], 2, INF_TILE),
        ("large values [1000, 1001 | 1002]: no overflow", [1000.0, 1001.0, 1002.0], 2,
         "subtract the running max before exp"),
    ]
    for name, row, tile, pitfall in cases:
        report.run(name, lambda row=row, tile=tile, pitfall=pitfall: _update_problem(online_update, row, tile,
                                                                                    pitfall))
    return Verdict(report.show())


# ------------------------------------------------------------------------------------------------ the kernel


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


def online_problem(fn, x: torch.Tensor, block: int, pitfall: str = "") -> str:
    """'' when ``fn(x, out, BLOCK=block)`` matches the float64 reference, else a plain-words reason."""
    out = poisoned_like(x)
    with quiet():
        y = fn(x, out, BLOCK=block)
    y = out if y is None else y
    problem = compare(y, x)
    if not problem:
        return ""
    ref = softmax_ref(x)
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


def _cases(seed: int = 50):
    """(name, x, BLOCK, pitfall) for the online kernel, fresh from ``seed`` so CPU and GPU see the same rows."""
    d = DEVICE
    mask_hint = ("a row longer than one block: loop over tiles with start + tl.arange(0, BLOCK), mask "
                 "cols < n_cols on every load and store, and pad with -inf")
    shapes = [(1, 1), (2, 31), (3, 32), (4, 33), (2, 255), (3, 257)]
    for i, shape in enumerate(shapes):
        yield f"random {shape[0]}x{shape[1]}, BLOCK=32", randn(shape, device=d, seed=seed + i), 32, mask_hint
    yield "long rows 2x300, BLOCK=64", randn((2, 300), device=d, seed=seed + 10), 64, mask_hint
    rising = torch.linspace(-8.0, 8.0, 192, device=d).repeat(2, 1)
    yield "max in the last tile (rising row 2x192, BLOCK=32)", rising, 32, RESCALE
    neg = torch.tensor([[-1002.0, -1001.0, -1000.0]], device=d)
    yield "all-negative row [-1002, -1001, -1000], BLOCK=32", neg, 32, \
        "max became 0: pad masked lanes with -inf, not 0"
    lead = randn((2, 300), device=d, seed=seed + 11)
    lead[:, :128] = NEG_INF
    yield "first two tiles all -inf (2x300, BLOCK=64)", lead, 64, INF_TILE
    big = randn((3, 350), device=d, seed=seed + 12)
    yield "strided view big[:, :300], BLOCK=64", big[:, :300], 64, \
        "rows are not contiguous: step between rows with the row stride, not n_cols"


def lane_launch(online_softmax):
    """How the lane map (shown after a FAIL) runs the learner's launcher on one small strided input."""
    return lambda x: _returned(online_softmax(x, out := torch.empty_like(x), BLOCK=4), out)


lane_input = None  # the default: 4 rows of 10 inside rows of 14


def check_online_softmax(online_softmax) -> Verdict:
    """Exercise ch05-online-kernel: ``online_softmax(x, out, BLOCK=...)`` for rows longer than one block."""
    report = Report("ch05-online-kernel", drawing=lane_map_of(lane_launch(online_softmax)))
    for name, x, block, pitfall in _cases():
        report.run(name, lambda x=x, block=block, pitfall=pitfall: online_problem(online_softmax, x, block,
                                                                                  pitfall))
    return Verdict(report.show())


# ------------------------------------------------------------------------------- what the grader launches

def _update_calls(rng):
    from .judging import PCall

    def expect(row, tile):
        want = _expected_steps(row, tile)

        def problem(value):
            if not isinstance(value, list) or len(value) != len(want):
                return f"expected {len(want)} (m, l) steps"
            for k, (got, (m, l)) in enumerate(zip(value, want), start=1):
                if not (isinstance(got, list) and len(got) == 2 and _close(float(got[0]), m)
                        and _close(float(got[1]), l)):
                    return f"after tile {k}: (m, l) = {got!r}, expected ({m:.6g}, {l:.6g})"
            return ""
        return problem

    calls = []
    for n, tile in ((int(rng.integers(5, 40)), int(rng.integers(2, 8))), (int(rng.integers(20, 60)), 4)):
        row = [float(v) for v in rng.normal(0, 3, n)]
        calls.append(PCall(f"random row of {n}, tiles of {tile}", "online_update", [], expect(row, tile), row, tile))
    rising = [float(v) for v in np.sort(rng.normal(0, 4, 24))]
    calls.append(PCall("rising row, tiles of 4", "online_update", [], expect(rising, 4), rising, 4))
    lead = [NEG_INF, NEG_INF, NEG_INF] + [float(v) for v in rng.normal(0, 3, 5)]
    calls.append(PCall("first tile all -inf", "online_update", [], expect(lead, 3), lead, 3))
    big = [1000.0 + float(v) for v in rng.normal(0, 2, 6)]
    calls.append(PCall("large values", "online_update", [], expect(big, 2), big, 2))
    return calls


def _kernel_cases(rng):
    from .judging import BIG_STEP, INT64_HINT, gpu_scale, softmax_case, softmax_rows

    args = ["x", "out", "x_stride", "out_stride", "n"]
    out = []
    for R, C, block in [(1, 1, 32), (2, 31, 32), (4, 33, 32), (3, int(rng.integers(200, 300)), 64),
                        (2, int(rng.integers(65, 130)), 32)]:
        x = softmax_rows(rng, (R, C))
        out.append(softmax_case(rng, f"{R}x{C}, BLOCK={block}", x, args, block, (R,)))
    x = np.tile(np.linspace(-8, 8, 192), (2, 1)) + rng.normal(0, 0.01, (2, 192))
    out.append(softmax_case(rng, "max in the last tile 2x192, BLOCK=32", x, args, 32, (2,)))
    x = rng.normal(0, 3, (2, 300))
    x[:, :128] = NEG_INF
    out.append(softmax_case(rng, "first two tiles all -inf 2x300, BLOCK=64", x, args, 64, (2,)))
    x = softmax_rows(rng, (3, int(rng.integers(100, 200))))
    out.append(softmax_case(rng, f"strided input and output 3x{x.shape[1]}, BLOCK=64", x, args, 64, (3,),
                            strided=True))
    x = softmax_rows(rng, (3, 40))
    out.append(softmax_case(rng, "64-bit row offsets", x, args, 32, (3,), strided=True, int64=True, hint=INT64_HINT))
    if gpu_scale():  # last: a fault here may spoil the GPU context for later launches
        out.append(softmax_case(rng, "rows 2**30 apart: offsets past 2**31 elements", softmax_rows(rng, (3, 70)),
                                args, 32, (3,), hint=INT64_HINT, big_step=BIG_STEP))
    return out


def _judges():
    from .judging import KernelJudge, PythonJudge

    return {"ch05-online-update": PythonJudge(_update_calls),
            "ch05-online-kernel": KernelJudge("online_softmax_kernel", _kernel_cases, int64=True)}


JUDGES = _judges()
