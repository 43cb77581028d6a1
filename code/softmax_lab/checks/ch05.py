"""Checks for chapter 5, online softmax: the (m, l) update and the online kernel.

``check_online_update(online_update)`` tests one step of the recurrence, in plain Python/torch::

    m_new = max(m, max(tile))
    l_new = l * exp(m - m_new) + sum(exp(tile - m_new))

``check_online_softmax(online_softmax)`` runs a learner's launcher ``online_softmax(x, out, BLOCK=...)`` on rows
longer than one block, and on the traps: a later tile raising the max (l must be rescaled), and a whole tile
of -inf (exp(-inf - (-inf)) is NaN). It also asks what the chapter teaches, from ``memcount``'s count of the
kernel's own loads and stores: is it online (at most two reads of every element, one write)?

``check_combine(combine)`` tests the merge of two ``(m, l)`` summaries (exercise ``ch05-combine``): it must equal
the whole row's ``(max, sum)``, in any order and grouping (commutative, associative), with ``(-inf, 0)`` for an
empty chunk.

``check_long_row(long_row_softmax)`` runs one long 1-D row spread over several programs (``ch05-long-row``): a
first launch reduces each chunk to ``(m, l)``, the partials are combined, a second launch normalises; on tiny
rows and on a 500,000-element row, with its traffic counted.
"""
from __future__ import annotations

import math

import numpy as np
import torch

from ..device import DEVICE
from ..memcount import count_calls
from ..reference import softmax_ref
from ..testing import compare, poisoned_like, randn
from ._pitfalls import Verdict, quiet
from .common import Report, _returned, lane_map_of

__all__ = ["check_online_update", "check_online_softmax", "check_combine", "check_long_row"]

NEG_INF = float("-inf")

RESCALE = ("forgot to rescale l by exp(m - m_new): the old sum was counted against the old max, so when a "
           "later tile raises the max it must shrink")
INF_TILE = ("a tile of all -inf gives m_new = -inf and exp(-inf - (-inf)) = NaN: while the max is still -inf, "
            "shift by 0 instead (Python: 0.0 if m_new == -inf else m_new; Triton: tl.where(m_new == -inf, 0.0, m_new))")
BAD_MAX = "m must be the largest value seen so far: m_new = max(m, max(tile))"


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


NOT_ONLINE = ("that is not online: walk 1 must find the max and the sum together, with the (m, l) update, and "
              "walk 2 writes the outputs - at most 2 reads of every element (a max walk, a sum walk and a write "
              "walk make 3)")


def _per_element(count: int, n: int) -> str:
    """How many times per element, as a learner reads it: '3', '2.5'."""
    return f"{count / n:.3g}"


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
        return (f"your kernel wrote every output {_per_element(c.stores, n)} times: write each output once, in "
                "walk 2 (provisional outputs in walk 1 cost a write and a read more)")
    if c.stores < n:
        return "some outputs were never written: walk 2 must store every tile, masked"
    return ""


def check_online_softmax(online_softmax) -> Verdict:
    """Exercise ch05-online-kernel: ``online_softmax(x, out, BLOCK=...)`` for rows longer than one block."""
    report = Report("ch05-online-kernel", drawing=lane_map_of(lane_launch(online_softmax)))
    for name, x, block, pitfall in _cases():
        report.run(name, lambda x=x, block=block, pitfall=pitfall: online_problem(online_softmax, x, block,
                                                                                  pitfall))
    x = randn((2, 300), device=DEVICE, seed=57)
    report.run("is it online? 2x300, BLOCK=64: at most 2 reads and 1 write per element (memcount)",
               lambda: traffic_problem(online_softmax, x, 64))
    return Verdict(report.show())


# ---------------------------------------------------------------------------------- merging two (m, l) states

EMPTY_BOTH = ("two empty chunks (m = -inf on both sides) gave NaN: exp(-inf - (-inf)) is NaN - while the merged "
              "max is still -inf, shift by 0 instead (torch.where(m == -inf, 0.0, m)): the result is (-inf, 0)")
NO_RESCALE = ("the sums were added as they are: each l was counted against its own chunk's max, so rescale both "
              "to the merged max before adding, l = l1 * exp(m1 - m) + l2 * exp(m2 - m)")
ONE_SIDE = ("only one of the two sums was rescaled (it works when the max sits in that chunk): rescale both, "
            "l1 by exp(m1 - m) and l2 by exp(m2 - m)")
BAD_M = "m must be the larger of the two maxima: m = max(m1, m2)"
ELEMENTWISE = ("combine must work elementwise on tensors (many (m, l) pairs at once, as the partials of a long "
               "row are): use torch.maximum, torch.exp and torch.where, not max(), math.exp or an if")


def _stats(values) -> tuple[float, float]:
    """(max, sum of exp(v - max)) of a chunk in float64; (-inf, 0) for an empty or all -inf chunk."""
    vals = [float(v) for v in values]
    m = max(vals, default=NEG_INF)
    if m == NEG_INF:
        return NEG_INF, 0.0
    return m, math.fsum(math.exp(v - m) for v in vals)


def _as_pair(result):
    """The learner's (m, l) as two float64 tensors (CPU), or a reason why it is not a pair."""
    if not isinstance(result, (tuple, list)) or len(result) != 2:
        return None, f"combine must return the pair (m, l), got {type(result).__name__}"
    m, l = (torch.as_tensor(v).detach().to(torch.float64).cpu() for v in result)
    return (m, l), ""


def _scalars(*values):
    return [torch.tensor(float(v), dtype=torch.float64) for v in values]


def _state_problem(got, want, a, b) -> str:
    """'' when ``got`` (tensors) equals ``want`` (floats or tensors) elementwise; else the named mistake.
    ``a``, ``b`` are the two input states (float64 tensors), to recognise the classic mistakes."""
    (m, l), (m_ok, l_ok) = got, (torch.as_tensor(want[0], dtype=torch.float64), torch.as_tensor(want[1],
                                                                                                 dtype=torch.float64))
    if m.shape != m_ok.shape or l.shape != l_ok.shape:
        return f"(m, l) have shapes {tuple(m.shape)}, {tuple(l.shape)}; expected {tuple(m_ok.shape)} like the inputs"
    if bool(torch.isnan(m).any() | torch.isnan(l).any()):
        both_empty = (a[0] == NEG_INF) & (b[0] == NEG_INF)
        if bool(both_empty.any()):
            return EMPTY_BOTH
        return ("(m, l) came out NaN (inf / inf? an exp that overflowed): rescale by exp(m1 - m) and "
                "exp(m2 - m), which are at most 1, never by exp(m) itself")
    if not bool(torch.equal(m, m_ok)):
        return BAD_M
    if bool(torch.isinf(l).any()):
        return "l overflowed to inf: rescale by exp(m1 - m) and exp(m2 - m), which are at most 1, never by exp(m)"
    if torch.allclose(l, l_ok, rtol=1e-9, atol=1e-12):
        return ""
    (m1, l1), (m2, l2) = a, b
    if torch.allclose(l, l1 + l2, rtol=1e-9, atol=1e-12):
        return NO_RESCALE
    with quiet():
        safe = torch.where(m_ok == NEG_INF, torch.zeros_like(m_ok), m_ok)
        one_a = l1 * torch.exp(m1 - safe) + l2
        one_b = l1 + l2 * torch.exp(m2 - safe)
    if torch.allclose(l, one_a, rtol=1e-9, atol=1e-12) or torch.allclose(l, one_b, rtol=1e-9, atol=1e-12):
        return ONE_SIDE
    worst = float((l - l_ok).abs().max())
    return f"l differs from the whole chunk's sum of exp(x - m) (largest error {worst:.2e})"


def _merge_problem(combine, chunk_a, chunk_b) -> str:
    """combine(stats(a), stats(b)) must be stats(a + b)."""
    a, b = _stats(chunk_a), _stats(chunk_b)
    sa, sb = _scalars(*a), _scalars(*b)
    with quiet():
        got, why = _as_pair(combine(sa[0], sa[1], sb[0], sb[1]))
    return why or _state_problem(got, _stats(list(chunk_a) + list(chunk_b)), sa, sb)


def _orders_problem(combine, row, cuts) -> str:
    """Fold the chunks' states left to right, right to left and as a pairwise tree: all must equal the row's."""
    bounds = [0, *cuts, len(row)]
    states = [tuple(_scalars(*_stats(row[s:e]))) for s, e in zip(bounds, bounds[1:])]
    want = _stats(row)

    class NotAPair(Exception):
        pass

    def merge(p, q):
        got, why = _as_pair(combine(p[0], p[1], q[0], q[1]))
        if why:
            raise NotAPair(why)
        return got

    try:
        with quiet():
            left, right, tree = _fold_three_ways(states, merge)
    except NotAPair as err:
        return str(err)
    for name, got in (("left to right", left), ("right to left", right), ("as a tree", tree)):
        problem = _state_problem(got, want, states[0], states[-1])
        if problem:
            if problem in (BAD_M, NO_RESCALE, ONE_SIDE, EMPTY_BOTH):
                return f"merged {name}: {problem}"
            return (f"merged {name}, {len(states)} chunks: {problem} - the merge must not depend on the order "
                    "or the grouping (it is how tl.reduce and a tree of programs combine partials)")
    return ""


def _fold_three_ways(states, merge):
    """The states merged left to right, right to left, and as a pairwise tree."""
    left = states[0]
    for s in states[1:]:
        left = merge(left, s)
    right = states[-1]
    for s in reversed(states[:-1]):
        right = merge(s, right)
    level = states
    while len(level) > 1:
        level = [merge(level[i], level[i + 1]) if i + 1 < len(level) else level[i] for i in range(0, len(level), 2)]
    return left, right, level[0]


def _swap_problem(combine, chunk_a, chunk_b) -> str:
    a, b = _scalars(*_stats(chunk_a)), _scalars(*_stats(chunk_b))
    with quiet():
        ab, why = _as_pair(combine(a[0], a[1], b[0], b[1]))
        ba, why2 = _as_pair(combine(b[0], b[1], a[0], a[1]))
    if why or why2:
        return why or why2
    first = _state_problem(ab, _stats(list(chunk_a) + list(chunk_b)), a, b)
    if first:
        return first
    if not (torch.equal(ab[0], ba[0]) and torch.allclose(ab[1], ba[1], rtol=1e-12, atol=0.0)):
        return "combine(a, b) and combine(b, a) differ: the merge must be symmetric"
    return ""


def _vector_problem(combine, pairs) -> str:
    """Many pairs at once, as 1-D tensors: elementwise results."""
    a = [_stats(p) for p, _ in pairs]
    b = [_stats(q) for _, q in pairs]
    want = [_stats(list(p) + list(q)) for p, q in pairs]
    t = lambda vals: torch.tensor(vals, dtype=torch.float64)  # noqa: E731
    ma, la, mb, lb = t([s[0] for s in a]), t([s[1] for s in a]), t([s[0] for s in b]), t([s[1] for s in b])
    try:
        with quiet():
            got, why = _as_pair(combine(ma, la, mb, lb))
    except (RuntimeError, TypeError) as err:
        if "ambiguous" in str(err) or "only one element" in str(err) or "must be real number" in str(err) \
                or "converted to Python scalars" in str(err):
            return ELEMENTWISE
        raise
    if why:
        return why
    return _state_problem(got, (t([w[0] for w in want]), t([w[1] for w in want])), (ma, la), (mb, lb))


def check_combine(combine) -> Verdict:
    """Exercise ch05-combine: ``combine(m1, l1, m2, l2) -> (m, l)``, the summary of two chunks put together."""
    report = Report("ch05-combine")
    g = torch.Generator().manual_seed(55)
    row = (torch.randn(40, generator=g, dtype=torch.float64) * 3).tolist()
    cuts = sorted(torch.randperm(39, generator=g)[:6].add(1).tolist())
    report.run("two halves of [1, 2 | 3, 0]: (2, 1.368) and (3, 1.050) give (3, 1.553)",
               lambda: _merge_problem(combine, [1.0, 2.0], [3.0, 0.0]))
    report.run("the max in the second chunk, then in the first",
               lambda: _merge_problem(combine, [0.5, -1.0, 2.0], [4.0, 3.5]) or
               _merge_problem(combine, [4.0, 3.5], [0.5, -1.0, 2.0]))
    for k, cut in enumerate(cuts[:3]):
        report.run(f"a random row of 40 cut at {cut}: the merge equals the whole row's (max, sum)",
                   lambda cut=cut: _merge_problem(combine, row[:cut], row[cut:]))
    report.run("commutative: combine(a, b) == combine(b, a)", lambda: _swap_problem(combine, row[:13], row[13:]))
    report.run(f"associative: 7 chunks of the row merged left to right, right to left and as a tree",
               lambda: _orders_problem(combine, row, cuts))
    report.run("an empty chunk (-inf, 0) on either side changes nothing",
               lambda: _merge_problem(combine, [], [1.0, 2.0]) or _merge_problem(combine, [1.0, 2.0], []))
    report.run("two empty chunks give (-inf, 0), not NaN", lambda: _merge_problem(combine, [], []))
    report.run("a chunk of -inf (a masked stretch) next to a real one",
               lambda: _merge_problem(combine, [NEG_INF, NEG_INF], [0.5, 1.5]))
    report.run("large values [1000, 1001 | 1002]: no overflow",
               lambda: _merge_problem(combine, [1000.0, 1001.0], [1002.0]))
    report.run("elementwise: 5 pairs of states at once, as 1-D tensors",
               lambda: _vector_problem(combine, [([1.0, 2.0], [3.0]), ([], [0.0]), ([], []), ([5.0], [-2.0, 1.0]),
                                                 ([-1000.0], [-1001.0, -999.5])]))
    return Verdict(report.show())


# ----------------------------------------------------------------------------- one long row, several programs

def long_row_problem(fn, x: torch.Tensor, programs: int, block: int) -> str:
    """'' when ``fn(x, out, programs=..., BLOCK=...)`` gives the softmax of the 1-D row ``x``."""
    out = poisoned_like(x)
    with quiet():
        y = fn(x, out, programs=programs, BLOCK=block)
    y = out if y is None else y
    problem = compare(y, x)
    if not problem:
        return ""
    ref = softmax_ref(x)
    if y.shape == x.shape and torch.isnan(y).any() and not torch.isnan(ref).any():
        nan = torch.isnan(y).cpu()
        if bool(nan.all()):
            return (f"{problem} - every output is NaN: a chunk with nothing in it (past the end of the row, or all "
                    "-inf) must give (-inf, 0), and merging two such states must not make NaN (shift by 0 while "
                    "the max is -inf)")
        first = int(nan.nonzero()[0])
        if bool(nan[first:].all()):
            return (f"{problem} - the last outputs were never written (still NaN): the chunks must cover the whole "
                    "row, so round the chunk size up (triton.cdiv(n, programs)), not down")
        return f"{problem} - every program must write its whole chunk in the second launch"
    if y.shape == x.shape:
        s = float(y.to(torch.float64).sum())
        if abs(s - 1) > 1e-3:
            return (f"{problem} - the row does not sum to 1: normalise with the whole row's (M, L), the merge of "
                    "every program's (m, l), not with each chunk's own")
    return problem


def long_row_traffic_problem(fn, x: torch.Tensor, programs: int, block: int, per_program: bool) -> str:
    """Two launches; every element read once by one program in each, written once (memcount)."""
    n = x.numel()
    out = poisoned_like(x)
    with quiet():
        y, c = count_calls(fn, x, out, programs=programs, BLOCK=block)
    y = out if y is None else y
    problem = compare(y, x)
    if problem:
        return problem
    if c.launches != 2:
        return (f"the launcher started {c.launches} kernel launch(es): the design is two, one that reduces each "
                "chunk to (m, l) and one that normalises, with the merge of the partials in between")
    reads = c.loads_of.get("x_ptr", c.loads)  # the signature names it x_ptr; else every load
    if reads > 2 * n:
        return (f"every element was read {_per_element(reads, n)} times: each launch reads every element once, "
                "2 reads in all")
    writes = c.stores_of.get("y_ptr", c.stores - 2 * programs)  # else every store but the partials
    if writes != n:
        return f"every output was written {_per_element(writes, n)} times: write each output once, in launch 2"
    if per_program:
        for launch in (0, 1):
            seen = c.load_map("x_ptr", n, launch=launch)
            readers = int((seen.sum(axis=1) > 0).sum())
            if readers < min(programs, n):
                return (f"launch {launch + 1}: only {readers} of the {programs} programs read x - spread the row "
                        "over all of them, one chunk each")
            if bool((seen.sum(axis=0) != 1).any()):
                return (f"launch {launch + 1}: some elements were read by several programs (or none): each "
                        "program reads only its own chunk")
    return ""


def _long_cases(seed: int = 58):
    d = DEVICE
    yield "1 element on 2 programs: the second program's chunk is empty", randn((1,), device=d, seed=seed), 2, 32
    yield "37 elements on 3 programs, BLOCK=8", randn((37,), device=d, seed=seed + 1), 3, 8
    yield "a rising row of 1000 on 4 programs, BLOCK=32: the max is in the last chunk", \
        torch.linspace(-10.0, 10.0, 1000, device=d), 4, 32
    lead = randn((300,), device=d, seed=seed + 2)
    lead[:160] = NEG_INF
    yield "300 elements on 4 programs, the first two chunks all -inf", lead, 4, 16
    yield "all-negative row of 200 around -1000 on 3 programs", randn((200,), device=d, seed=seed + 3) - 1000.0, 3, 16
    yield "float16 row of 500 on 3 programs, BLOCK=64", randn((500,), torch.float16, device=d, seed=seed + 4), 3, 64


def check_long_row(long_row_softmax) -> Verdict:
    """Exercise ch05-long-row: ``long_row_softmax(x, out, programs=..., BLOCK=...)`` for one long 1-D row."""
    report = Report("ch05-long-row")
    for name, x, programs, block in _long_cases():
        report.run(name, lambda x=x, p=programs, b=block: long_row_problem(long_row_softmax, x, p, b))
    small = randn((1000,), device=DEVICE, seed=59)
    report.run("1000 elements on 4 programs: 2 launches, each program reads its own chunk once per launch",
               lambda: long_row_traffic_problem(long_row_softmax, small, 4, 32, per_program=True))
    big = randn((500_000,), device=DEVICE, seed=60)
    report.run("one row of 500,000 on 8 programs, BLOCK=4096: correct, 2 reads + 1 write per element",
               lambda: long_row_traffic_problem(long_row_softmax, big, 8, 4096, per_program=False))
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


def _combine_calls(rng):
    """combine on one pair at a time (1-element float64 tensors): fresh chunks, -inf states, large values."""
    from .judging import PCall

    def expect(a, b):
        m_ok, l_ok = _stats(list(a) + list(b))

        def problem(value):
            if not isinstance(value, list) or len(value) != 2:
                return "expected the pair (m, l)"
            m, l = (float(v) if isinstance(v, (int, float)) else math.nan for v in value)
            if math.isnan(m) or math.isnan(l):
                return "(m, l) came out NaN"
            if not (_close(m, m_ok) and _close(l, l_ok)):
                return f"(m, l) = ({m:.6g}, {l:.6g}), expected ({m_ok:.6g}, {l_ok:.6g})"
            return ""
        return problem

    def call(name, a, b):
        sa, sb = _stats(a), _stats(b)
        args = [{"tensor": [v]} for v in (*sa, *sb)]
        return PCall(name, "combine", args, expect(a, b))

    row = [float(v) for v in rng.normal(0, 3, 30)]
    cut = int(rng.integers(1, 29))
    big = [1000.0 + float(v) for v in rng.normal(0, 2, 6)]
    return [call(f"a random row of 30 cut at {cut}", row[:cut], row[cut:]),
            call("the same two chunks swapped", row[cut:], row[:cut]),
            call("the max in the second chunk", sorted(row[:10]), [max(row) + 1.0]),
            call("an empty chunk first", [], row[:7]),
            call("an empty chunk second", row[7:15], []),
            call("two empty chunks", [], []),
            call("large values", big[:3], big[3:])]


def _long_row_cases(rng):
    """The first launch of ch05-long-row: each program's chunk reduced to (m, l), with guard zones around the
    partials; chunks past the end of the row and chunks of -inf."""
    from .judging import GUARD, GUARD_LEN, Buf, KCase, cast

    def case(name, x, programs, block, whole_tiles=True):
        n = x.size
        chunk = math.ceil(n / programs)
        if whole_tiles:
            chunk = math.ceil(chunk / block) * block
        else:
            name += f" (CHUNK = {chunk}, not a multiple of BLOCK = {block})"
        x = cast(x, "float32")  # what the kernel reads
        stats = [_stats(x[c * chunk:(c + 1) * chunk]) for c in range(programs)]
        bufs = {"x": Buf(cast(np.concatenate([x, rng.normal(0, 3, GUARD_LEN)]), "float32"))}
        for name_, k in (("m", 0), ("l", 1)):
            storage = np.concatenate([np.full(programs, np.nan), np.full(GUARD_LEN, GUARD)])
            bufs[name_] = Buf(storage, "float32", output=True, shape=(programs,),
                              ref=np.array([s[k] for s in stats]))
        args = [("buf", "x"), ("buf", "m"), ("buf", "l"), ("int", n), ("int", chunk)]
        return KCase(name, (programs,), args, bufs, {"BLOCK": block})

    n1 = int(rng.integers(20, 60))
    lead = rng.normal(0, 3, 200)
    lead[:100] = -np.inf
    return [case("1 element on 2 programs", rng.normal(0, 3, 1), 2, 16),
            case(f"{n1} elements on 3 programs", rng.normal(0, 3, n1), 3, 8),
            case(f"{n1 + 40} elements on 4 programs", rng.normal(0, 3, n1 + 40), 4, 8, whole_tiles=False),
            case("200 elements on 4 programs, the first two chunks all -inf", lead, 4, 16),
            case("all-negative row of 90 on 3 programs", rng.normal(0, 3, 90) - 1000.0, 3, 16),
            case("500,000 elements on 8 programs", rng.normal(0, 3, 500_000), 8, 4096)]


def _judges():
    from .judging import KernelJudge, PythonJudge

    return {"ch05-online-update": PythonJudge(_update_calls),
            "ch05-online-kernel": KernelJudge("online_softmax_kernel", _kernel_cases, int64=True),
            "ch05-combine": PythonJudge(_combine_calls),
            "ch05-long-row": KernelJudge("chunk_stats_kernel", _long_row_cases)}


JUDGES = _judges()
