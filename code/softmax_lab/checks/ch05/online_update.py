"""Exercise ch05-online-update: one step of the running (max, sum) recurrence, in plain Python/torch, which the
learner derives from chapter 5's worked example. The check compares the pair after every tile with the row's
running (max, sum) computed from the definition, and names the classic mistakes."""
from __future__ import annotations

import math

import numpy as np
import torch

from .._pitfalls import Verdict, quiet
from ..common import Report
from ..judging import PCall, PythonJudge
from ._online import INF_TILE, NEG_INF, RESCALE, _close


BAD_MAX = "m is not the largest value seen so far"
INVERTED = ("l was converted the wrong way when the max grew: the old terms were made larger, yet counted against "
            "a larger max every one of them must shrink, so l comes out too large")


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


def _inverted_steps(row, tile: int):
    """What the rate turned upside down gives: the old l multiplied by exp(m_new - m) when the max grows."""
    x = [float(v) for v in row]
    m, l, steps = NEG_INF, 0.0, []
    for start in range(0, len(x), tile):
        t = x[start:start + tile]
        m_new = max(m, max(t))
        if m_new != NEG_INF:
            l = (l * math.exp(m_new - m) if m != NEG_INF else 0.0) + sum(math.exp(v - m_new) for v in t)
        m = m_new
        steps.append((m, l))
    return steps


NO_SHIFT = ("l holds the plain sum of exp(x), with no max subtracted: it is not the sum against m, and values "
            "near 1000 overflow it to inf")
OWN_MAX = ("the tile's terms were counted against the tile's own max, not the running max m_new: when the tile does "
           "not raise the max, its terms come out too large")


def _exp(v: float) -> float:
    try:
        return math.exp(v)
    except OverflowError:  # what torch.exp gives past the float64 range
        return math.inf


def _no_shift_steps(row, tile: int):
    """What a sum with no max subtracted gives: l = sum(exp(x)) over everything seen."""
    x = [float(v) for v in row]
    m, l, steps = NEG_INF, 0.0, []
    for start in range(0, len(x), tile):
        t = x[start:start + tile]
        m, l = max(m, max(t)), l + sum(_exp(v) for v in t)
        steps.append((m, l))
    return steps


def _own_max_steps(row, tile: int):
    """What the old l rescaled plus the tile summed against its own max (not m_new) gives."""
    x = [float(v) for v in row]
    m, l, steps = NEG_INF, 0.0, []
    for start in range(0, len(x), tile):
        t = x[start:start + tile]
        m_new, t_max = max(m, max(t)), max(t)
        if m_new != NEG_INF:
            l = (l * math.exp(m - m_new) if m != NEG_INF else 0.0)
            l += 0.0 if t_max == NEG_INF else sum(math.exp(v - t_max) for v in t)
        m = m_new
        steps.append((m, l))
    return steps


def _update_problem(online_update, row, tile: int, pitfall: str = "") -> str:
    with quiet():
        got = run_online_update(online_update, row, tile)
    return _steps_problem(got, row, tile, pitfall)


def _steps_problem(got, row, tile: int, pitfall: str = "") -> str:
    """'' when the (m, l) after each tile are the row's running (max, sum), else the mistake they show."""
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
            if _close(l, _inverted_steps(row, tile)[k - 1][1]):
                return f"{where}: l = {l:.4f}, expected {l_ok:.4f} - {INVERTED}"
            if _close(l, _no_shift_steps(row, tile)[k - 1][1]):
                return f"{where}: l = {l:.4f}, expected {l_ok:.4f} - {NO_SHIFT}"
            if _close(l, _own_max_steps(row, tile)[k - 1][1]):
                return f"{where}: l = {l:.4f}, expected {l_ok:.4f} - {OWN_MAX}"
            # a case's pitfall is named only where it can be the cause: no rescale before the max has grown,
            # no -inf - (-inf) where nothing is NaN
            grew = k > 1 and want[k - 1][0] > want[k - 2][0]
            if pitfall == INF_TILE or (pitfall == RESCALE and not grew):
                pitfall = ""
            return f"{where}: l = {l:.4f}, expected {l_ok:.4f}" + (f" - {pitfall}" if pitfall else "")
    return ""


# The cases, read by the notebook check and by the grader's judge alike: (name, values, tile, the pitfall a FAIL
# names). Values: a literal row "[...]", or "random N" / "rising N" (sorted) / "large N" (around 1000) drawn from a
# fixed seed in the check and from the grader's seed in the judge, which adds JUDGE_FRESH fresh cases.
UPDATE_CASES = [
    ("seed example [1, 2 | 4, 0] (l = 1.368, then 1.203)", "[1, 2, 4, 0]", 2, RESCALE),
    ("max in the first tile [5, 4 | 3, 2]", "[5, 4, 3, 2]", 2, ""),
    ("rising row, 5 tiles of 4", "rising 20", 4, RESCALE),
    ("random row of 50, tiles of 7", "random 50", 7, RESCALE),
    ("first tile all -inf [-inf, -inf | 1, 2]", "[-inf, -inf, 1, 2]", 2, INF_TILE),
    ("large values around 1000, tiles of 2: no overflow", "large 5", 2, "the running max is not subtracted before exp"),
]
JUDGE_FRESH = 2  # fresh cases in every grader run, besides all the named ones
CHECK_SEED = 5


def case_row(values: str, rng: np.random.Generator) -> list[float]:
    """One case's row: the literal one, or drawn from ``rng`` (the check's fixed seed, or the grader's)."""
    if values.startswith("["):
        return [float(v) for v in values.strip("[]").split(",")]
    kind, n = values.split()
    row = rng.normal(0, 3, int(n))
    if kind == "rising":
        row = np.sort(row)
    elif kind == "large":
        row = 1000.0 + np.abs(row)
    return [float(v) for v in row]


def fresh_case(rng: np.random.Generator) -> tuple:
    """One random case like UPDATE_CASES', from the grader's seed."""
    n, tile = int(rng.integers(5, 60)), int(rng.integers(2, 8))
    return f"random row of {n}, tiles of {tile}", f"random {n}", tile, RESCALE


def check_online_update(online_update) -> Verdict:
    """Exercise ch05-online-update: ``online_update(m, l, tile) -> (m_new, l_new)``."""
    report = Report("ch05-online-update")
    rng = np.random.default_rng(CHECK_SEED)
    for name, values, tile, pitfall in UPDATE_CASES:
        row = case_row(values, rng)
        report.run(name, lambda row=row, tile=tile, pitfall=pitfall: _update_problem(online_update, row, tile,
                                                                                    pitfall))
    return Verdict(report.show())


def _update_calls(rng):
    """The grader's calls: every named case (rows drawn from its seed) and JUDGE_FRESH fresh ones, each row folded
    tile by tile in the sandbox; the (m, l) steps judged here like the check's."""
    def expect(row, tile, pitfall):
        def problem(value):
            if not isinstance(value, list) or not all(isinstance(s, list) and len(s) == 2 for s in value):
                return "expected a list of (m, l) steps"
            return _steps_problem([(float(m), float(l)) for m, l in value], row, tile, pitfall)
        return problem

    calls = []
    for name, values, tile, pitfall in UPDATE_CASES + [fresh_case(rng) for _ in range(JUDGE_FRESH)]:
        row = case_row(values, rng)
        calls.append(PCall(name, "online_update", [], expect(row, tile, pitfall), row, tile))
    return calls


JUDGES = {"ch05-online-update": PythonJudge(_update_calls)}
