"""Exercise ch09-reader-barrier: the racy kernel of the notebook (built on ``block_max``/``block_sum``) with
``cuda.syncthreads()`` lines added, and only those."""
from __future__ import annotations

import ast
import math
import types

import numpy as np
import torch

from ...device import DEVICE
from ...testing import randn
from .._pitfalls import Verdict
from ..common import Report
from ..judging import NCase, NumbaJudge, output_problem, rows_input, rows_output, softmax64, view_of
from ._blocks import NOT_IMPLEMENTED, _cl, _launcher, _not_implemented, _race_cases, _safe_output, race_problem

BARRIER = "cuda.syncthreads()"

# The kernel the notebook gives (its cell defines it with exactly these lines): one block per row, built on the
# block reductions of ch09-block-tree, with the reader barrier missing.
RACY_KERNEL = '''@cuda.jit
def racy_kernel(x, y, n_cols):
    row = cuda.blockIdx.x
    tid = cuda.threadIdx.x
    threads = cuda.blockDim.x
    shared = cuda.shared.array(0, float32)
    m = float32(-math.inf)
    for col in range(tid, n_cols, threads):
        m = max(m, x[row, col])
    row_max = block_max(shared, m)
    total = float32(0.0)
    for col in range(tid, n_cols, threads):
        total += math.exp(x[row, col] - row_max)
    row_sum = block_sum(shared, total)
    for col in range(tid, n_cols, threads):
        y[row, col] = math.exp(x[row, col] - row_max) / row_sum
'''

# The block reductions the check and the grader put under the learner's kernel: one thread combines the block's
# values (slow, and not ch09-block-tree's tree), with the same shared-memory pattern: every thread writes
# shared[tid], and every thread reads the result from shared[0].
HELPERS = '''
@cuda.jit(device=True)
def block_max(shared, v):
    shared[cuda.threadIdx.x] = v
    cuda.syncthreads()
    if cuda.threadIdx.x == 0:
        for t in range(1, cuda.blockDim.x):
            shared[0] = max(shared[0], shared[t])
    cuda.syncthreads()
    return shared[0]


@cuda.jit(device=True)
def block_sum(shared, v):
    shared[cuda.threadIdx.x] = v
    cuda.syncthreads()
    if cuda.threadIdx.x == 0:
        for t in range(1, cuda.blockDim.x):
            shared[0] += shared[t]
    cuda.syncthreads()
    return shared[0]
'''

# The cases, read by the notebook check and the grader's judge alike: (name, rows, columns, threads, values, race
# check, the input's row step). Values: "random", or "negative" ([-1002, -1001, -1000]).
READER_CASES = [
    ("race check in the simulator: 2x100, 64 threads (no hazard between barriers)", 2, 100, 64, "random", True, None),
    ("race check in the simulator: 1x300, 128 threads (no hazard between barriers)", 1, 300, 128, "random", True,
     None),
    ("random 3x257, 128 threads", 3, 257, 128, "random", False, None),
    ("all-negative row [-1002, -1001, -1000], 32 threads", 1, 3, 32, "negative", False, None),
    ("strided view big[:, :100] of a 3x130 tensor, 64 threads", 3, 100, 64, "random", False, 130),
]

ONLY_BARRIERS = "your kernel's body is not the racy kernel's with cuda.syncthreads() lines added: {what}"


def body_lines(source: str, name: str | None = None) -> list[str] | None:
    """The code lines of function ``name``'s body in ``source`` (the first function when None): comments and blank
    lines dropped, spaces stripped; None when there is no such function."""
    try:
        tree = ast.parse(source)
    except SyntaxError:
        return None
    fn = next((n for n in ast.walk(tree) if isinstance(n, ast.FunctionDef) and name in (None, n.name)), None)
    if fn is None:
        return None
    lines = source.splitlines()[fn.body[0].lineno - 1: fn.end_lineno]
    lines = [line.split("#")[0].strip() for line in lines]
    return [line for line in lines if line]


RACY_BODY = body_lines(RACY_KERNEL)


def only_barriers_problem(mine: list[str] | None) -> str:
    """'' when ``mine`` is the racy kernel's body with one cuda.syncthreads() line added: the race has one
    hazard, and one barrier removes it (where it sits is for the race recorder to judge)."""
    if mine is None:
        return ONLY_BARRIERS.format(what="no kernel body was found")
    code, want = [ln for ln in mine if ln != BARRIER], [ln for ln in RACY_BODY if ln != BARRIER]
    for i, (got, expected) in enumerate(zip(code, want)):
        if got != expected:
            return ONLY_BARRIERS.format(what=f"its code line {i + 1} (barriers aside) is not the racy kernel's line "
                                        f"{i + 1}")
    if len(code) > len(want):
        return ONLY_BARRIERS.format(what=f"it has {len(code) - len(want)} code line(s) more than the racy kernel")
    if len(code) < len(want):
        return ONLY_BARRIERS.format(what=f"the racy kernel's line {len(code) + 1} is missing")
    added = mine.count(BARRIER) - RACY_BODY.count(BARRIER)
    if added <= 0:
        return ONLY_BARRIERS.format(what="no cuda.syncthreads() was added")
    if added > 1:
        return (f"you added {added} barriers where the race needs fewer: every cuda.syncthreads() makes every thread "
                f"of the block wait for the slowest, so {added - 1} of them cost each row a wait and protect nothing "
                "the race report names")
    return ""


def _source_problem(kernel) -> str:
    import inspect

    try:
        source = inspect.getsource(getattr(kernel, "py_func", kernel))
    except (OSError, TypeError):  # no source to compare (e.g. a kernel built with exec): the races decide
        return ""
    return only_barriers_problem(body_lines(source))


def with_course_helpers(kernel):
    """The learner's kernel calling the course's block_max/block_sum (HELPERS) instead of whatever those names hold
    where it was defined: the reader barrier is judged on its own, whatever state ch09-block-tree is in."""
    from numba import float32

    cl = _cl()
    ns = {"cuda": cl.cuda, "math": math, "float32": float32}
    exec(compile(HELPERS, "<softmax_lab course block reductions>", "exec"), ns)
    f = getattr(kernel, "py_func", kernel)
    g = dict(f.__globals__, block_max=ns["block_max"], block_sum=ns["block_sum"])
    return cl.cuda.jit(types.FunctionType(f.__code__, g, f.__name__, f.__defaults__, f.__closure__))


def _check_values(kind: str, rows: int, cols: int, step: int | None, seed: int) -> torch.Tensor:
    if kind == "negative":
        return torch.tensor([[-1002.0, -1001.0, -1000.0]], device=DEVICE)
    return randn((rows, step or cols), device=DEVICE, seed=seed)[:, :cols]


def check_reader_barrier(kernel) -> Verdict:
    """Exercise ch09-reader-barrier: the notebook's ``racy_kernel`` with its reader barrier back: its body plus
    one ``cuda.syncthreads()`` line, nothing else changed (when the kernel's source can be read), race-free in the
    simulator and correct, run on the course's own block reductions."""
    report = Report("ch09-reader-barrier")
    if _not_implemented(kernel):
        report.add("your kernel", NOT_IMPLEMENTED)
        return Verdict(report.show())
    report.run("the racy kernel's body with one barrier added, nothing else changed",
               lambda: _source_problem(kernel))
    fixed = with_course_helpers(kernel)
    races = [(rows, cols, threads) for _, rows, cols, threads, _, race, _ in READER_CASES if race]
    if not _race_cases(report, fixed, races, 91, lines=False):
        return Verdict(report.show())
    launch = _launcher(fixed)
    for i, (name, rows, cols, threads, kind, race, step) in enumerate(READER_CASES):
        if not race:
            x = _check_values(kind, rows, cols, step, 92 + i)
            report.run(name, lambda x=x, t=threads: _safe_output(launch, x, t))
    return Verdict(report.show())


def _judge_cases(rng: np.random.Generator) -> list:
    out = []
    for name, rows, cols, threads, kind, race, step in READER_CASES:
        x = np.array([[-1002.0, -1001.0, -1000.0]]) if kind == "negative" else rng.normal(0, 3, (rows, cols))
        xin = rows_input(rng, x, step)
        y = rows_output(softmax64(view_of(xin, xin.storage)), step)
        out.append(NCase(name.replace(" in the simulator", ""), "fixed_kernel", rows, threads, {"x": xin, "y": y},
                         [("buf", "x"), ("buf", "y"), ("int", cols)], race=race, shared_bytes=threads * 4))
    return out


def _judge_problem(case: NCase, outputs: dict, race: dict | None) -> str:
    if race is not None and not race["ok"]:
        return race_problem(race["kinds"], race["first"], lines=False)
    return output_problem(case.buffers["y"], outputs["y"])


def _judge_source(source: str) -> str:
    return only_barriers_problem(body_lines(source, "fixed_kernel"))


JUDGES = {"ch09-reader-barrier": NumbaJudge(("fixed_kernel",), _judge_cases, _judge_problem,
                                            source_problem=_judge_source, helpers=HELPERS)}
