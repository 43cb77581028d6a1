"""Exercise ch05-combine: the merge of two ``(m, l)`` summaries must equal the whole row's ``(max, sum)``, in any
order and grouping (commutative, associative), with ``(-inf, 0)`` for an empty chunk."""
from __future__ import annotations

import numpy as np
import torch

from .._pitfalls import Verdict, quiet
from ..common import Report
from ..judging import PCall, PythonJudge
from ._online import NEG_INF, _stats


EMPTY_BOTH = ("two empty chunks (m = -inf on both sides) gave NaN: shifting by the merged max computes "
              "exp(-inf - (-inf)) = NaN, where the merge of two empty chunks is (-inf, 0)")


NO_RESCALE = ("the sums were added as they are: each l was counted against its own chunk's max, and the two "
              "maxima differ")


ONE_SIDE = ("only one of the two sums was rescaled to the merged max: right when the max sits in the other "
            "chunk, wrong otherwise")


BAD_M = "the merged m is not the larger of the two maxima"


ELEMENTWISE = ("combine failed on tensors of many (m, l) pairs at once (as the partials of a long row are): it "
               "works one pair at a time, with Python's max(), math.exp or an if on a tensor")


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
        return ("(m, l) came out NaN (inf / inf? an exp that overflowed): a rescaling factor grew past what a "
                "float holds")
    if not bool(torch.equal(m, m_ok)):
        return BAD_M
    if bool(torch.isinf(l).any()):
        return "l overflowed to inf: a rescaling factor grew past what a float holds"
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
    t = lambda vals: torch.tensor(vals, dtype=torch.float64)
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


# The cases, read by the notebook check and by the grader's judge alike: (name, kind, chunk a, chunk b). Kinds:
# "merge" (combine(a, b) is the (max, sum) of a + b), "swap" (and combine(b, a) too), "orders" (chunk a cut into
# chunk b pieces, merged in three orders), "vector" (every "merge" pair of the table at once, as 1-D tensors).
# Chunks: a literal "[...]", or "random N" / "large N" (around 1000) drawn from a fixed seed in the check and from
# the grader's seed in the judge, which adds JUDGE_FRESH fresh pairs.
COMBINE_CASES = [
    ("two halves of [1, 2 | 4, 0]: (2, 1.368) and (4, 1.018) give (4, 1.203)", "merge", "[1, 2]", "[4, 0]"),
    ("the max in the second chunk", "merge", "[0.5, -1, 2]", "[4, 3.5]"),
    ("the max in the first chunk", "merge", "[4, 3.5]", "[0.5, -1, 2]"),
    ("two random chunks of 17 and 23", "merge", "random 17", "random 23"),
    ("two random chunks of 5 and 35", "merge", "random 5", "random 35"),
    ("commutative: combine(a, b) == combine(b, a)", "swap", "random 13", "random 27"),
    ("associative: a random row of 40 in 7 chunks, merged left to right, right to left and as a tree", "orders",
     "random 40", "7"),
    ("an empty chunk (-inf, 0) first changes nothing", "merge", "[]", "[1, 2]"),
    ("an empty chunk (-inf, 0) second changes nothing", "merge", "[1, 2]", "[]"),
    ("two empty chunks give (-inf, 0), not NaN", "merge", "[]", "[]"),
    ("a chunk of -inf (a masked stretch) next to a real one", "merge", "[-inf, -inf]", "[0.5, 1.5]"),
    ("large values around 1000: no overflow", "merge", "large 2", "large 1"),
    ("elementwise: every pair above at once, as 1-D tensors", "vector", "", ""),
]
JUDGE_FRESH = 2  # fresh pairs in every grader run, besides all the named ones
CHECK_SEED = 55


def chunk(values: str, rng: np.random.Generator) -> list[float]:
    """One chunk of a case: the literal one, or drawn from ``rng`` (the check's fixed seed, or the grader's)."""
    if values.startswith("["):
        return [float(v) for v in values.strip("[]").split(",") if v.strip()]
    kind, n = values.split()
    row = rng.normal(0, 3, int(n))
    return [float(v) for v in (1000.0 + np.abs(row) if kind == "large" else row)]


def draw_cases(rng: np.random.Generator, fresh: int = 0) -> list[tuple]:
    """COMBINE_CASES with their chunks drawn (orders: the row and its cut points; vector: the merge pairs), and
    ``fresh`` random pairs more."""
    out, pairs = [], []
    table = COMBINE_CASES[:-1] + [(f"fresh random chunks {i + 1}", "merge", f"random {int(rng.integers(1, 30))}",
                                   f"random {int(rng.integers(1, 30))}") for i in range(fresh)] + COMBINE_CASES[-1:]
    for name, kind, a, b in table:
        if kind == "orders":
            row = chunk(a, rng)
            cuts = sorted(int(c) + 1 for c in rng.permutation(len(row) - 1)[:int(b) - 1])
            out.append((name, kind, row, cuts))
        elif kind == "vector":
            out.append((name, kind, pairs, None))
        else:
            pair = (chunk(a, rng), chunk(b, rng))
            pairs.append(pair)
            out.append((name, kind, *pair))
    return out


def check_combine(combine) -> Verdict:
    """Exercise ch05-combine: ``combine(m1, l1, m2, l2) -> (m, l)``, the summary of two chunks put together."""
    report = Report("ch05-combine")
    problems = {"merge": _merge_problem, "swap": _swap_problem, "orders": _orders_problem,
                "vector": lambda f, pairs, _: _vector_problem(f, pairs)}
    for name, kind, a, b in draw_cases(np.random.default_rng(CHECK_SEED)):
        report.run(name, lambda k=kind, a=a, b=b: problems[k](combine, a, b))
    return Verdict(report.show())


def _expect_pair(a_states, b_states, want):
    """The judge's verdict on the pair (m, l) the sandbox sent back (floats, or lists for 1-D tensors)."""
    def problem(value):
        if not isinstance(value, list) or len(value) != 2:
            return "combine must return the pair (m, l)"
        try:
            got = tuple(torch.tensor(v, dtype=torch.float64) for v in value)
        except (TypeError, ValueError):
            return f"combine returned {str(value)[:60]}, not two numbers or tensors"
        return _state_problem(got, want, a_states, b_states)
    return problem


def _combine_calls(rng):
    """The grader's calls: every case of the table, chunks drawn from its seed, each merge judged like the check's
    (orders: each merge of the left-to-right fold, from exact states)."""
    calls = []

    def merge(name, a, b):
        sa, sb = _stats(a), _stats(b)
        states = tuple(_scalars(*sa)), tuple(_scalars(*sb))
        args = [{"tensor": [v]} for v in (*sa, *sb)]
        calls.append(PCall(name, "combine", args, _expect_pair(*states, _stats(list(a) + list(b)))))

    for name, kind, a, b in draw_cases(rng, JUDGE_FRESH):
        if kind == "merge":
            merge(name, a, b)
        elif kind == "swap":
            merge(f"{name}: combine(a, b)", a, b)
            merge(f"{name}: combine(b, a)", b, a)
        elif kind == "orders":
            bounds = [0, *b, len(a)]
            for k in range(1, len(bounds) - 1):
                merge(f"{name}: merge {k} of {len(bounds) - 2}", a[:bounds[k]], a[bounds[k]:bounds[k + 1]])
        else:  # vector: every merge pair at once
            sa, sb = [_stats(p) for p, _ in a], [_stats(q) for _, q in a]
            t = lambda vals: torch.tensor(vals, dtype=torch.float64)
            states = ((t([s[0] for s in sa]), t([s[1] for s in sa])), (t([s[0] for s in sb]), t([s[1] for s in sb])))
            want = [_stats(list(p) + list(q)) for p, q in a]
            args = [{"tensor": [s[0] for s in sa]}, {"tensor": [s[1] for s in sa]},
                    {"tensor": [s[0] for s in sb]}, {"tensor": [s[1] for s in sb]}]
            calls.append(PCall(name, "combine", args,
                               _expect_pair(*states, (t([w[0] for w in want]), t([w[1] for w in want])))))
    return calls


JUDGES = {"ch05-combine": PythonJudge(_combine_calls)}
