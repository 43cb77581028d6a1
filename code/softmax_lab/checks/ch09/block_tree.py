"""Exercise ch09-block-tree: ``block_max(shared, v)`` and ``block_sum(shared, v)``, device functions that reduce one
value per thread as a tree in shared memory and hand the result to every thread of the block."""
from __future__ import annotations

import numpy as np

from .._pitfalls import Verdict, quiet
from ..common import Report
from ..judging import NCase, NumbaJudge, rows_input, rows_output, view_of
from ._blocks import NOT_IMPLEMENTED, _cl, _explain_error, _not_implemented, race_problem, widest_interval

# The grader's probe (the judge's and the check's): every thread hands its value to the learner's function and
# writes what it gets back, so each thread's result is seen.
PROBE = '''
def probe(vals, out):
    shared = cuda.shared.array(0, float32)
    out[cuda.blockIdx.x, cuda.threadIdx.x] = fn(shared, vals[cuda.blockIdx.x, cuda.threadIdx.x])
'''

# The cases, read by the notebook check and the grader's judge alike: (name, function, blocks, threads per block,
# values, race check). Values per thread: "random"; "rising" (the largest in the last thread); "negative" (all below
# -1000); "half -inf" / "half zero" (the upper half of the threads holds the identity, as threads with no column do).
# The check draws them from fixed seeds, the judge from the grader's seed. A race check runs the probe under the
# shared-memory race recorder (deterministic) and checks its output too.
TREE_CASES = [
    ("block_max, race check: 1 block of 64 threads", "block_max", 1, 64, "random", True),
    ("block_max, race check: 2 blocks of 128 threads", "block_max", 2, 128, "random", True),
    ("block_max, 1 block of 32 threads", "block_max", 1, 32, "random", False),
    ("block_max, 3 blocks of 64 threads, the largest value in the last thread", "block_max", 3, 64, "rising", False),
    ("block_max, 2 blocks of 128 threads, all values below -1000", "block_max", 2, 128, "negative", False),
    ("block_max, 64 threads, the upper half -inf (threads with no column)", "block_max", 1, 64, "half -inf", False),
    ("block_sum, race check: 2 blocks of 128 threads", "block_sum", 2, 128, "random", True),
    ("block_sum, 1 block of 32 threads", "block_sum", 1, 32, "random", False),
    ("block_sum, 2 blocks of 64 threads, the largest value in the last thread", "block_sum", 2, 64, "rising", False),
    ("block_sum, 128 threads, the upper half 0 (threads with no column)", "block_sum", 1, 128, "half zero", False),
]

OPS = {"block_max": ("max", np.max), "block_sum": ("sum", np.sum)}

SERIAL = ("one thread combined {n} shared values between two barriers: that is a serial loop, not a tree (in a tree "
          "each thread combines two values per step, and the steps halve)")


def case_values(kind: str, blocks: int, threads: int, rng: np.random.Generator) -> np.ndarray:
    """Each thread's value, (blocks, threads), float64."""
    v = rng.normal(0, 3, (blocks, threads))
    if kind == "rising":
        v = np.sort(v, axis=1)
    elif kind == "negative":
        v = -1000.0 - np.abs(v)
    elif kind == "half -inf":
        v[:, threads // 2:] = -np.inf
    elif kind == "half zero":
        v[:, threads // 2:] = 0.0
    return v


def _close(got: np.ndarray, want: np.ndarray) -> np.ndarray:
    scale = np.maximum(1.0, np.abs(np.where(np.isfinite(want), want, 0.0)))
    return np.isclose(got, want, rtol=1e-5, atol=0.0) | (np.abs(got - want) <= 1e-5 * scale) | (got == want)


def tree_problem(function: str, vals: np.ndarray, got: np.ndarray, race: dict | None) -> str:
    """'' when every thread got its block's max/sum (and, for a race check, no hazard and a tree's shape)."""
    word, op = OPS[function]
    if race is not None:
        if not race["ok"]:
            return race_problem(race["kinds"], race["first"])
        if race["widest"] > 4:
            return SERIAL.format(n=race["widest"])
    vals = vals.astype(np.float32).astype(np.float64)
    want = op(vals, axis=1, keepdims=True)
    ok = _close(got, np.broadcast_to(want, got.shape))
    if ok.all():
        return ""
    blocks, threads = vals.shape
    if np.isnan(got).any():
        return f"{int(np.isnan(got).sum())} of {got.size} threads got NaN from {function}"
    if ok[:, 0].all():
        return (f"thread 0 got the block's {word}, but {int((~ok).sum())} other threads got something else: those "
                f"threads would go on with a wrong {word} for their own elements")
    first = got[:, :1]
    k = 1
    while k < threads:
        if k > 1 and _close(first, op(vals[:, :k], axis=1, keepdims=True)).all():
            return (f"the {word} combines only the first {k} of the {threads} threads' values: the tree's first "
                    "step did not reach the upper part of the block")
        k *= 2
    for s in (2, 4, 8):
        if s < threads and _close(first, op(vals[:, ::s], axis=1, keepdims=True)).all():
            return (f"the {word} combines only one thread's value in every {s}: the tree stopped "
                    f"{s.bit_length() - 1} step(s) before its last one")
    return f"{int((~ok).sum())} of {got.size} threads returned a wrong {word}"


def _probe(fn):
    """PROBE as a kernel calling ``fn`` (the same source the judge's harness launches)."""
    from numba import float32

    cl = _cl()
    ns = {"cuda": cl.cuda, "float32": float32, "fn": fn}
    exec(compile(PROBE, "<softmax_lab block probe>", "exec"), ns)
    return cl.cuda.jit(ns["probe"])


def race_summary(rec) -> dict:
    """What a race recorder saw, as the judge's harness sends it back."""
    report = rec.report()
    groups = report.grouped()
    return {"ok": report.ok, "kinds": sorted(report.kinds()), "barriers": report.barriers,
            "first": groups[0][0] if groups else "", "widest": widest_interval(rec.cells)}


def _run(fn, vals: np.ndarray, race: bool) -> tuple[np.ndarray, dict | None]:
    cl = _cl()
    probe = _probe(fn)
    blocks, threads = vals.shape
    x = vals.astype(np.float32)
    out = np.full(x.shape, np.nan, dtype=np.float32)
    summary = None
    with quiet():
        if race:
            with cl.record_races() as rec:
                cl.simulated(probe)[blocks, threads, 0, threads * 4](x, out)
            summary = race_summary(rec)
        elif cl.SIMULATOR:
            probe[blocks, threads, 0, threads * 4](x, out)
        else:
            d_out = cl.cuda.to_device(out)
            probe[blocks, threads, 0, threads * 4](cl.cuda.to_device(x), d_out)
            out = d_out.copy_to_host()
    return out.astype(np.float64), summary


def _case(fns: dict, function: str, vals: np.ndarray, race: bool) -> str:
    try:
        got, summary = _run(fns[function], vals, race)
    except Exception as err:
        return _explain_error(err)
    return tree_problem(function, vals, got, summary)


def check_block_tree(block_max, block_sum) -> Verdict:
    """Exercise ch09-block-tree: ``block_max(shared, v)`` / ``block_sum(shared, v)``, device functions: every thread
    of the block passes its value and gets the block's max / sum back, by a tree in shared memory."""
    report = Report("ch09-block-tree")
    if _not_implemented(block_max, block_sum):
        report.add("block_max and block_sum", NOT_IMPLEMENTED)
        return Verdict(report.show())
    fns = {"block_max": block_max, "block_sum": block_sum}
    for i, (name, function, blocks, threads, kind, race) in enumerate(TREE_CASES):
        vals = case_values(kind, blocks, threads, np.random.default_rng(900 + i))
        report.run(name, lambda f=function, v=vals, r=race: _case(fns, f, v, r))
    return Verdict(report.show())


def _judge_cases(rng: np.random.Generator) -> list:
    out = []
    for name, function, blocks, threads, kind, race in TREE_CASES:
        vals = case_values(kind, blocks, threads, rng)
        xin = rows_input(rng, vals, threads)
        res = rows_output(np.zeros_like(vals), threads)
        out.append(NCase(name, function, blocks, threads, {"vals": xin, "out": res}, [("buf", "vals"), ("buf", "out")],
                         probe=PROBE, race=race, shared_bytes=threads * 4, spec={"function": function}))
    return out


def _judge_problem(case: NCase, outputs: dict, race: dict | None) -> str:
    vals = view_of(case.buffers["vals"], case.buffers["vals"].storage)
    got = view_of(case.buffers["out"], outputs["out"])
    return tree_problem(case.spec["function"], vals, got, race)


JUDGES = {"ch09-block-tree": NumbaJudge(("block_max", "block_sum"), _judge_cases, _judge_problem)}
