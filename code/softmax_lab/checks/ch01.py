"""Checks for chapter 1 (scores to probabilities): stable softmax of one row in one program.

``check_stable_row(softmax_row)`` runs the learner's launcher ``softmax_row(x, out)`` on 1-D rows: the
[2, 1, 0] example, the [1000, 1001, 1002] trace, an all-negative row, a wide row [0, 100, -100] (a shift by
anything but the max overflows there), identical values and random rows of several lengths. A wrong answer is
explained (overflow, only the denominator shifted, not normalized, ...).
``check_shift_trace`` and ``check_count_nonfinite`` grade predictions (numbers written before the cells that
compute them run) against what float32 computes, and refuse predictions that code computes (``code_in_prediction``:
the function's body may hold numbers, lists and choices between them, nothing that calls or reads other code).
"""
from __future__ import annotations

import ast
import inspect
import math
import textwrap
import types

import torch

from ..device import DEVICE
from ._pitfalls import Verdict, case_values, quiet, random_rows, softmax_problem, traffic_problem
from .common import Report
from .judging import KernelJudge, PCall, PythonJudge, fresh_values, np2, softmax_case

__all__ = ["check_stable_row", "ROW_TABLE", "ROW_CASES", "check_shift_trace", "SHIFT_TABLE", "check_count_nonfinite",
           "COUNT_TABLE", "COUNT_ROWS", "STEPS", "WIDE_ROW", "NUMBERS_CASE", "code_in_prediction",
           "code_in_source"]

# Each exercise has one case table, read by the notebook check and by the grader's judge alike.

# ch01-stable-row: (name, row length, values (see _pitfalls.case_values), the check's seed). The check draws the
# values from the fixed seeds; the judge from the grader's seed, plus JUDGE_FRESH fresh rows.
ROW_TABLE = [
    ("[2, 1, 0]", 3, "[2, 1, 0]", 0),
    ("large values [1000, 1001, 1002]", 3, "[1000, 1001, 1002]", 0),
    ("all-negative row [-1002, -1001, -1000]", 3, "[-1002, -1001, -1000]", 0),
    (WIDE_ROW := "wide row [0, 100, -100]", 3, "[0, 100, -100]", 0),  # its mean is 0: a mean shift overflows
    ("identical values [7, 7, 7, 7]", 4, "sevens", 0),
    ("one value [5]", 1, "[5]", 0),
    ("random row of 16", 16, "random", 1),
    ("random row of 100", 100, "random", 2),
]
JUDGE_FRESH = 3  # fresh rows in every grader run: two random lengths, one row below -1000
ROW_CASES = [(name, case_values(kind, (1, n), seed).reshape(-1)) for name, n, kind, seed in ROW_TABLE]  # the check's


TRAFFIC_CASE = "your own Triton kernel loads each element once and stores each once (counted by memcount)"


def check_stable_row(softmax_row) -> Verdict:
    """Print PASS/FAIL per row and a summary line; True when all pass."""
    report = Report("ch01-stable-row")
    for name, values in ROW_CASES:
        report.run(name, lambda v=values: softmax_problem(softmax_row, v))
    x = random_rows((16,), 3).to(DEVICE)
    report.run(TRAFFIC_CASE, lambda: traffic_problem(
        softmax_row, x, 16, 16, "load each element of the row once and store each output once",
        kernel="softmax_row_kernel"))
    return Verdict(report.show())


# ------------------------------------------------------------------------------- what the grader launches

def _judge_cases(rng):
    """The grader's launches: every named row with values from its seed, and JUDGE_FRESH fresh rows."""
    lengths = (int(rng.integers(2, 32)), int(rng.integers(33, 130)))
    fresh = [(f"fresh random row of {n}", n, "random", 0) for n in lengths]
    fresh.append((f"fresh row of {(n := int(rng.integers(3, 20)))} below -1000", n, "below -1000", 0))
    return [softmax_case(rng, name, fresh_values(rng, kind, (1, n)), ["out", "x", "n"], np2(n), (1,))
            for name, n, kind, _ in ROW_TABLE + fresh]


# ------------------------------------- [0, 0, 0] versus [1000, 1000, 1000], and [1000, -1000, 1000], predicted

STEPS = ["max", "x - max", "exp(x - max)", "sum", "y"]
TRACE_ROWS = {"zeros": [0.0, 0.0, 0.0], "thousands": [1000.0, 1000.0, 1000.0], "tie": [1000.0, -1000.0, 1000.0]}
TRACE_TOL = 1e-3  # predictions written with 4 decimals are fine


def true_trace(values) -> list:
    """The stable softmax's steps for one row, in float32 (as a kernel computes them): one entry per STEPS."""
    x = torch.tensor(values, dtype=torch.float32)
    m = x.max()
    p = torch.exp(x - m)
    s = p.sum()
    return [float(m), (x - m).tolist(), p.tolist(), float(s), (p / s).tolist()]


def _number(v) -> bool:
    return isinstance(v, (int, float)) and not isinstance(v, bool)


def trace_mistakes(got, want) -> list[str] | str:
    """The names of the steps where ``got`` differs from ``want`` (a list), or what is malformed (a str)."""
    if not isinstance(got, (list, tuple)) or len(got) != len(STEPS):
        return f"your trace is not a list of {len(STEPS)} values, one per entry of STEPS ({', '.join(STEPS)})"
    wrong = []
    for name, g, w in zip(STEPS, got, want):
        if isinstance(w, list):
            if (not isinstance(g, (list, tuple)) or len(g) != len(w) or not all(_number(v) for v in g)):
                return f"the step {name!r} is a row of {len(w)} numbers, and your value for it is not"
            if not all(abs(a - b) <= TRACE_TOL for a, b in zip(g, w)):  # (a NaN is never close)
                wrong.append(name)
        elif not _number(g):
            return f"the step {name!r} is one number, and your value for it is not"
        elif not abs(g - w) <= TRACE_TOL * max(1.0, abs(w)):
            wrong.append(name)
    return wrong


def changes_problem(flags) -> str:
    """'' when ``flags`` says, for each step, correctly whether it differs between the two rows."""
    truth = [a != b for a, b in zip(true_trace(TRACE_ROWS["zeros"]), true_trace(TRACE_ROWS["thousands"]))]
    if not isinstance(flags, (list, tuple)) or len(flags) != len(STEPS) or not all(
            isinstance(f, bool) for f in flags):
        return f"your verdict is not a list of {len(STEPS)} booleans, one per entry of STEPS (True where it changes)"
    if list(flags) == truth:
        return ""
    said = [n for n, f in zip(STEPS, flags) if f] or ["nothing"]
    wrong = sum(f != t for f, t in zip(flags, truth))
    return (f"you say {', '.join(said)} change(s) between the rows: float32's two traces disagree with your verdict "
            f"at {wrong} of the {len(STEPS)} steps")


def trace_problem(value, row: str) -> str:
    """'' when ``value`` is the stable softmax's trace of TRACE_ROWS[row], else the steps it gets wrong."""
    got = trace_mistakes(value, true_trace(TRACE_ROWS[row]))
    if isinstance(got, str):
        return got
    if not got:
        return ""
    return (f"your trace differs from what float32 computes at the step(s): {', '.join(got)}"
            + (f" (the first of them, {got[0]}, feeds every step after it)" if len(got) > 1 else ""))


# ------------------------------------------------- predictions are numbers: what a prediction's body may hold

NUMBERS_CASE = "your predictions are numbers written inside the functions, not computed by code"
# A prediction's body may hold numbers and the lists, tuples and dicts around them, arithmetic between numbers,
# choices between them by its own arguments (if row == "zeros": ...), names it assigns itself, raise, and the ways
# of writing inf and NaN: math.inf, math.nan, float("inf"), float("nan").
_PLAIN = (ast.Return, ast.If, ast.IfExp, ast.Compare, ast.BoolOp, ast.Constant, ast.List, ast.Tuple, ast.Dict,
          ast.UnaryOp, ast.BinOp, ast.Subscript, ast.Slice, ast.Assign, ast.Expr, ast.Pass, ast.Load, ast.Store,
          ast.operator, ast.unaryop, ast.cmpop, ast.boolop)
_INF_NAN = {"inf", "-inf", "infinity", "-infinity", "nan"}


def _spelled_number(node: ast.AST) -> bool:
    """math.inf / math.nan, or float("inf") / float("nan"): inf and NaN written out, not computed."""
    if isinstance(node, ast.Attribute):
        return isinstance(node.value, ast.Name) and node.value.id == "math" and node.attr in ("inf", "nan")
    return (isinstance(node, ast.Call) and isinstance(node.func, ast.Name) and node.func.id == "float"
            and len(node.args) == 1 and not node.keywords and isinstance(node.args[0], ast.Constant)
            and str(node.args[0].value).strip().lower() in _INF_NAN)


def _code_in(fn_node: ast.FunctionDef | ast.Lambda) -> ast.AST | None:
    """The first node of the function (its decorators, its arguments' defaults, then its body) that is code rather
    than a written number (None when there is none)."""
    args = fn_node.args
    own = {a.arg for a in args.args + args.kwonlyargs + args.posonlyargs}
    body = fn_node.body if isinstance(fn_node.body, list) else [fn_node.body]
    own |= {n.id for stmt in body for n in ast.walk(stmt) if isinstance(n, ast.Name) and isinstance(n.ctx, ast.Store)}
    before = [*getattr(fn_node, "decorator_list", []), *args.defaults, *[d for d in args.kw_defaults if d is not None]]
    todo = list(reversed(before + body))  # depth first, in the order the code reads
    while todo:
        node = todo.pop()
        if isinstance(node, ast.Raise):  # a blank cell's NotImplementedError, or a refusal of an unknown row
            if "NotImplementedError" in ast.unparse(node):
                raise NotImplementedError("exercise not written yet")
            continue
        if _spelled_number(node):
            continue
        if isinstance(node, ast.Name):
            if node.id not in own:
                return node
            continue
        if not isinstance(node, _PLAIN):
            return node
        todo.extend(reversed(list(ast.iter_child_nodes(node))))
    return None


WHY_NUMBERS = ("a prediction here must be numbers written inside the function, where the check can see that no "
               "code computed them - the exercise is to work out what float32 does before anything runs it")


def _written(tree: ast.AST, name: str) -> ast.FunctionDef | ast.Lambda | None:
    """``def name`` or ``name = lambda ...`` in ``tree`` (``<lambda>``: the first lambda, as inspect shows one)."""
    if name == "<lambda>":
        return next((n for n in ast.walk(tree) if isinstance(n, ast.Lambda)), None)
    for n in ast.walk(tree):
        if isinstance(n, ast.FunctionDef) and n.name == name:
            return n
        if (isinstance(n, ast.Assign) and isinstance(n.value, ast.Lambda)
                and any(isinstance(t, ast.Name) and t.id == name for t in n.targets)):
            return n.value
    return None


def not_written(name: str) -> str:
    return (f"{name} is not a def (or a lambda) written in the exercise cell, so nothing shows how it was made: "
            + WHY_NUMBERS)


def code_in_source(source: str, name: str) -> str:
    """'' when function ``name`` (``def name`` or ``name = lambda``) in ``source`` holds only numbers written out
    (see _PLAIN), else the first piece of code in it (or that there is no such function), with why that fails the
    exercise. Raises NotImplementedError on a blank body. The grader judges a whole exercise cell with it."""
    try:
        tree = ast.parse(textwrap.dedent(source))
    except (SyntaxError, IndentationError):
        return ""  # what runs decides (a cell that does not parse fails before this)
    node = _written(tree, name)
    if node is None:
        return not_written(name)
    code = _code_in(node)
    if code is None:
        return ""
    text = ast.unparse(code).splitlines()[0]
    text = text if len(text) <= 40 else text[:37] + "..."
    what = f"reads {text}, a name from outside it" if isinstance(code, ast.Name) else f"runs `{text}`"
    return f"{name} {what}: {WHY_NUMBERS}"


def code_in_prediction(fn, name: str) -> str:
    """``code_in_source`` on the learner's function ``name``; refused when it is not a Python function whose source
    can be read (a dict's ``__getitem__``, a partial, a function built by exec)."""
    if not isinstance(fn, types.FunctionType):
        return not_written(name)
    try:
        source = inspect.getsource(fn)
    except (OSError, TypeError):
        return not_written(name)
    return code_in_source(source, fn.__name__)

# ch01-shift-trace: (name, the learner's function, its arguments, the verdict on what it returns)
SHIFT_TABLE = [
    ("your trace of [0, 0, 0]", "predicted_trace", ["zeros"], lambda value: trace_problem(value, "zeros")),
    ("your trace of [1000, 1000, 1000]", "predicted_trace", ["thousands"],
     lambda value: trace_problem(value, "thousands")),
    ("your trace of [1000, -1000, 1000]", "predicted_trace", ["tie"], lambda value: trace_problem(value, "tie")),
    ("which steps change between the two rows", "steps_that_change", [], changes_problem),
]


def check_shift_trace(predicted_trace, steps_that_change) -> Verdict:
    """Print PASS/FAIL for each predicted trace and for the list of steps that change; True when all pass."""
    report = Report("ch01-shift-trace")
    fns = {"predicted_trace": predicted_trace, "steps_that_change": steps_that_change}
    for name, fn, args, problem in SHIFT_TABLE:
        report.run(name, lambda fn=fn, args=args, problem=problem: problem(fns[fn](*args)))
    report.run(NUMBERS_CASE, lambda: next(filter(None, (code_in_prediction(f, n) for n, f in fns.items())), ""))
    return Verdict(report.show())


# --------------------------------------------------- x, x + 1000, x - 1000: predict what is not finite, then run

# ch01-count-nonfinite: (name, the row's key in COUNT_ROWS). The learner predicts the counts as numbers for these
# rows (the exercise's own: nothing to draw); the check and the judge compare them with what float32 computes.
COUNT_ROWS = {
    "chapter": [2.0, 1.0, 0.0, -1.5],
    "wide": [0.0, 100.0, -100.0],
    "near 1000": [950.0, 1000.0],
    "with inf": [math.inf, 0.0],
}
COUNT_TABLE = [
    ("your counts for the chapter's row [2, 1, 0, -1.5]", "chapter"),
    ("your counts for a wide row [0, 100, -100]", "wide"),
    ("your counts for a row near 1000 [950, 1000]", "near 1000"),
    ("your counts for a row holding inf [inf, 0]", "with inf"),
]
SHIFTS = ("x", "x + 1000", "x - 1000")
FORMULAS = ("textbook", "stable")


def nonfinite_counts(values, dtype=torch.float32) -> list[list[int]]:
    """[[textbook, stable] non-finite outputs for x, x + 1000, x - 1000], computed in ``dtype``."""
    x = torch.tensor(values, dtype=dtype)
    out = []
    for row in (x, x + 1000, x - 1000):
        with quiet():
            textbook = torch.exp(row) / torch.exp(row).sum()
            p = torch.exp(row - row.max())
            stable = p / p.sum()
        out.append([int((~torch.isfinite(textbook)).sum()), int((~torch.isfinite(stable)).sum())])
    return out


def _whole(v) -> bool:
    return _number(v) and math.isfinite(v) and float(v) == int(v)


def counts_problem(got, key: str) -> str:
    """'' when ``got`` is float32's counts for COUNT_ROWS[key]; else which predictions are wrong, and how."""
    values = COUNT_ROWS[key]
    want = nonfinite_counts(values)
    if not isinstance(got, (list, tuple)) or len(got) != 3 or not all(
            isinstance(p, (list, tuple)) and len(p) == 2 and all(_whole(v) for v in p) for p in got):
        return ("your prediction is not three pairs of whole numbers [textbook count, stable count], for x, "
                "x + 1000 and x - 1000")
    got = [[int(a), int(b)] for a, b in got]
    if got == want:
        return ""
    if got == nonfinite_counts(values, torch.float64):
        return ("these are float64's counts, not float32's: float64's exp overflows only past 709.8, float32's "
                "already past 88.72")
    n = len(values)
    wrong = []
    for shift, g, w in zip(SHIFTS, got, want):
        for formula, a, b in zip(FORMULAS, g, w):
            if a != b:
                how = "more than the row has outputs" if a > n else ("too many" if a > b else "too few")
                wrong.append(f"{formula} on {shift} ({how})")
    why = []
    textbook_wrong = any(g[0] != w[0] for g, w in zip(got, want))
    stable_wrong = any(g[1] != w[1] for g, w in zip(got, want))
    if textbook_wrong:
        why.append("the textbook formula divides every exp by one shared sum: each output follows from what that "
                   "sum is (inf, 0 or an ordinary number) and from its own exp")
    if stable_wrong:
        why.append("the stable formula exponentiates x - max, never x itself: look at what the shift leaves "
                   "of each entry")
    return f"wrong prediction(s): {', '.join(wrong)}; " + "; ".join(why)


def check_count_nonfinite(predicted_counts) -> Verdict:
    """Print PASS/FAIL per row of COUNT_TABLE and a summary line; True when all pass."""
    report = Report("ch01-count-nonfinite")
    for name, key in COUNT_TABLE:
        report.run(name, lambda k=key: counts_problem(predicted_counts(k), k))
    report.run(NUMBERS_CASE, lambda: code_in_prediction(predicted_counts, "predicted_counts"))
    return Verdict(report.show())


# ------------------------------------------------------------------------------------------- their judges

def _shift_calls(rng):
    """SHIFT_TABLE's calls (the two rows are the exercise's own: nothing to draw)."""
    return [PCall(name, fn, list(args), problem) for name, fn, args, problem in SHIFT_TABLE]


def _count_calls(rng):
    """COUNT_TABLE's calls (the rows are the exercise's own: nothing to draw)."""
    return [PCall(name, "predicted_counts", [key], lambda value, k=key: counts_problem(value, k))
            for name, key in COUNT_TABLE]


def _numbers_in_cell(*names):
    """The judge's NUMBERS_CASE: ``code_in_source`` on each function of the exercise cell (a blank one: not
    implemented)."""
    def problem(source: str) -> str:
        try:
            return next(filter(None, (code_in_source(source, n) for n in names)), "")
        except NotImplementedError:
            return "not implemented yet"
    return problem


def _judges():
    return {"ch01-stable-row": KernelJudge("softmax_row_kernel", _judge_cases),
            "ch01-shift-trace": PythonJudge(_shift_calls, _numbers_in_cell("predicted_trace", "steps_that_change"),
                                            NUMBERS_CASE),
            "ch01-count-nonfinite": PythonJudge(_count_calls, _numbers_in_cell("predicted_counts"), NUMBERS_CASE)}


JUDGES = _judges()
