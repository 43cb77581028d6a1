"""Exercise ch05-online-update: one step of the recurrence, in plain Python/torch::

    m_new = max(m, max(tile))
    l_new = l * exp(m - m_new) + sum(exp(tile - m_new))
"""
from __future__ import annotations

import math

import numpy as np
import torch

from .._pitfalls import Verdict, quiet
from ..common import Report
from ..judging import PCall, PythonJudge
from ._online import INF_TILE, NEG_INF, RESCALE, _close


BAD_MAX = "m must be the largest value seen so far: m_new = max(m, max(tile))"


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


def _update_calls(rng):
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


JUDGES = {"ch05-online-update": PythonJudge(_update_calls)}
