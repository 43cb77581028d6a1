"""Checks for chapter 4 (three kernels to one): predicted memory traffic, and the fused kernel.

``check_traffic(three_pass_traffic, fused_traffic)`` compares the learner's formulas ``f(rows, cols) ->
(elements loaded, elements stored)`` with the counts of the library kernels' real loads and stores
(``softmax_lab.memcount``) on a few small shapes. A wrong formula is told which term is wrong (per element, per
row, per column, constant; too large or too small), never the expected totals: those would let a learner fit
the formula to the feedback.

``check_fused(fused_softmax)`` runs the learner's launcher ``fused_softmax(x, out)`` on the boundary shapes,
all-negative rows, large values, identical values, strided views of the input (rows further apart than their
length) and of the output, and checks the properties the chapter teaches on the learner's own kernel: it is a
Triton kernel (not ``torch.softmax`` in the launcher), it reads each element once and writes each once (counted
by memcount), and its row offsets are 64-bit (a probe in the interpreter that flags a 32-bit offset derived from
the program id, then the kernel run in the interpreter as rows numbered past 2**31 / stride, where a product
formed in 32 bits and widened afterwards wraps around; on a GPU also a real launch on rows 2**30 elements apart,
past 2**31 elements in all).
"""
from __future__ import annotations

import contextlib
import numbers

import numpy as np
import torch
import triton

from ..device import DEVICE, ON_GPU
from ..testing import BOUNDARY_SHAPES
from ._pitfalls import (OUTSIDE, Verdict, case_values, counted, explain, guarded_input, no_launch, quiet,
                        random_rows, softmax_problem, traffic_problem)
from .common import GUARD, GUARD_LEN, Report, _returned, guarded, lane_map_of
from . import judging
from .judging import (BIG_STEP, INT64_HINT, KernelJudge, PCall, PythonJudge, fresh_values, np2, softmax_case,
                      softmax_rows)

__all__ = ["check_fused", "check_traffic", "check_find_the_bug", "check_rows_read_right", "measured_traffic",
           "FUSED_CASES", "FIND_TABLE", "WRAP_TABLE", "pid_offset_probe"]

# ch04-fused's cases, read by the notebook check and by the grader's judge alike: (name, (rows, columns), values
# (see _pitfalls.case_values), the check's seed, the input's row step, the output's row step: None = contiguous).
# The check draws the values from the fixed seeds; the judge from the grader's seed, plus JUDGE_FRESH fresh cases
# strided in and out.
FUSED_TABLE = [
    *[(f"random {r}x{c}", (r, c), "random", 60 + i, None, None) for i, (r, c) in enumerate(BOUNDARY_SHAPES)],
    ("all-negative row [-1002, -1001, -1000]", (1, 3), "[-1002, -1001, -1000]", 0, None, None),
    ("large values [1000, 1001, 1002]", (1, 3), "[1000, 1001, 1002]", 0, None, None),
    ("identical values 2x37", (2, 37), "sevens", 0, None, None),
    ("strided view big[:, :1000] of a 4x1100 tensor", (4, 1000), "random", 70, 1100, None),
    ("strided view big[:, :5] of a 3x64 tensor", (3, 5), "random", 71, 64, None),
    ("strided output: a contiguous 3x5 input into rows 7 apart", (3, 5), "random", 72, None, 7),
    ("strided input and output: 4x6, input rows 9 apart, output rows 8 apart", (4, 6), "random", 73, 9, 8),
]
JUDGE_FRESH = 2  # fresh cases in every grader run, besides all the named ones
# The check's: (name, values, input row step) into a contiguous output, and (name, values, input row step, output
# row step) into a strided one
FUSED_CASES = [(name, case_values(kind, shape, seed), step) for name, shape, kind, seed, step, out in FUSED_TABLE
               if out is None]
STRIDED_OUT_CASES = [(name, case_values(kind, shape, seed), step, out)
                     for name, shape, kind, seed, step, out in FUSED_TABLE if out is not None]

# ch04-traffic's cases: (name, the kernel, the learner's function that counts its traffic, (rows, columns)). The
# check compares with the library kernel's counted traffic (memcount), the judge with the same counts in closed
# form (``traffic_counts``; tests/checks/test_ch04.py checks they agree), on these shapes and JUDGE_FRESH fresh ones.
# Padded lanes (5, 33 columns) and a row longer than the launchers' widest block (4,100 > 4,096 lanes: two
# chunks, the second mostly masked off) besides the small exact ones.
TRAFFIC_SHAPES = [(1, 4), (3, 5), (2, 16), (4, 33), (2, 4100)]
TRAFFIC_FUNCTIONS = {"three_pass": "three_pass_traffic", "fused": "fused_traffic"}
TRAFFIC_TABLE = [(f"{kernel} on {r}x{c}", kernel, fn, (r, c))
                 for kernel, fn in TRAFFIC_FUNCTIONS.items() for r, c in TRAFFIC_SHAPES]


def measured_traffic(kernel_name: str, rows: int, cols: int) -> tuple[int, int]:
    """(elements loaded, elements stored) by a library kernel on a rows x cols input, counted, not computed."""
    from ..kernels import ALL
    from ..memcount import count_calls

    x = random_rows((rows, cols), 0).to(DEVICE)
    with quiet():
        _, c = count_calls(ALL[kernel_name], x)
    return c.loads, c.stores


FIT_SHAPES = [(1, 1), (2, 1), (1, 2), (2, 2)]  # enough to read off the four terms of a count
TERMS = ("per-element (rows * cols)", "per-row (rows)", "per-column (cols)", "constant")


def terms_of(count) -> tuple[int, int, int, int] | None:
    """(a, b, d, c) with count(rows, cols) == a*rows*cols + b*rows + d*cols + c, read off at FIT_SHAPES and
    confirmed at two more shapes; None when the count is not of that form."""
    f11, f21, f12, f22 = (count(r, c) for r, c in FIT_SHAPES)
    a = f22 - f21 - f12 + f11
    b, d = f21 - f11 - a, f12 - f11 - a
    c = f11 - a - b - d
    for r, k in ((3, 5), (7, 2)):
        if count(r, k) != a * r * k + b * r + d * k + c:
            return None
    return a, b, d, c


def _counts_of(formula):
    def pair(rows, cols):
        got = formula(rows, cols)
        return int(got[0]), int(got[1])
    return pair


# What a wrong term means, as a mistake and its consequence (never the missing transfer itself).
TERM_HINTS = {
    ("three_pass", 0): "at least one of the three launches moves a different number of elements per row element "
                       "than you counted",
    ("three_pass", 1): "the elements a program moves once for its whole row, apart from x and y, are miscounted",
    ("fused", 0): "the fused kernel moves a different number of elements per row element than you counted",
    ("fused", 1): "your count has the fused program moving a different number of elements once per row than it does",
}
OTHER_TERMS_HINT = ("a count of unmasked lanes has no term that grows with the columns alone or is paid once per "
                    "launch: masked-off lanes move nothing")


def term_feedback(kernel_name: str, quantity: str, got, want) -> str:
    """Which term of the learner's count is wrong, in words (too large / too small), never the expected totals."""
    if got is None:
        return (f"{quantity}: your formula does not grow like a count of elements (a*rows*cols + b*rows + ...): "
                "work out a 1x1 and a 2x2 input by hand")
    wrong = [k for k in range(4) if got[k] != want[k]]
    if wrong and all(got[k] == 4 * want[k] for k in wrong) and any(want[k] for k in wrong):
        return f"{quantity}: 4x too many - count elements, not bytes"
    parts = [f"the {TERMS[k]} term is too {'large' if got[k] > want[k] else 'small'}" for k in wrong]
    hints = [TERM_HINTS[(kernel_name, k)] for k in wrong if (kernel_name, k) in TERM_HINTS]
    if any(k >= 2 for k in wrong):
        hints.append(OTHER_TERMS_HINT)
    return f"{quantity}: " + ", ".join(parts) + (f" ({'; '.join(hints)})" if hints else "")


def _traffic_problem(formula, kernel_name: str, rows: int, cols: int) -> str:
    want = measured_traffic(kernel_name, rows, cols)
    try:
        got = _counts_of(formula)(rows, cols)
    except (TypeError, IndexError, ValueError):
        return "return a pair (elements loaded, elements stored)"
    if got == want:
        return ""
    measured = _measured_terms(kernel_name)
    problems = []
    for k, quantity in enumerate(("loads", "stores")):
        if got[k] != want[k]:
            try:
                mine = terms_of(lambda r, c, k=k: _counts_of(formula)(r, c)[k])
            except (TypeError, IndexError, ValueError):
                mine = None
            problems.append(term_feedback(kernel_name, quantity, mine, measured[k]))
    return "; ".join(problems)


_MEASURED: dict = {}


def _measured_terms(kernel_name: str):
    """The terms of the library kernel's counted loads and stores (memcount on the FIT_SHAPES), cached."""
    if kernel_name not in _MEASURED:
        counts = {shape: measured_traffic(kernel_name, *shape) for shape in FIT_SHAPES + [(3, 5), (7, 2)]}
        _MEASURED[kernel_name] = tuple(terms_of(lambda r, c, k=k: counts[(r, c)][k]) for k in range(2))
    return _MEASURED[kernel_name]


def check_traffic(three_pass_traffic, fused_traffic) -> Verdict:
    """Print PASS/FAIL per (kernel, shape) and a summary line; True when all pass."""
    report = Report("ch04-traffic")
    formulas = {"three_pass_traffic": three_pass_traffic, "fused_traffic": fused_traffic}
    for name, kernel, fn, (rows, cols) in TRAFFIC_TABLE:
        report.run(name, lambda f=formulas[fn], k=kernel, r=rows, c=cols: _traffic_problem(f, k, r, c))
    return Verdict(report.show())


def lane_launch(fused_softmax):
    """How the lane map (shown after a FAIL) runs the learner's launcher on one small strided input, into an
    output whose rows are 2 elements further apart than the row is long (so that either row stride shows)."""
    def launch(x):
        out = torch.empty(x.shape[0], x.shape[1] + 2, device=x.device)[:, :x.shape[1]]
        return _returned(fused_softmax(x, out), out)

    return launch


lane_input = None  # the default: 4 rows of 10 inside rows of 14


STRIDED_OUT = "the kernel wrote into the gaps between the output's rows (or past its end)"
OUT_STRIDE = ("memory this output does not own was overwritten: its rows were placed at a spacing that is not the "
              "output's own row stride, or lanes past a row's end were stored")
TRAFFIC_CASE = "your own Triton kernel reads each element once and writes each once (counted by memcount)"
INT64_CASE = "64-bit row offsets (row * row_stride past 2**31 elements)"


def strided_output(rows: int, n: int, step: int, dtype=torch.float32) -> tuple[torch.Tensor, torch.Tensor]:
    """A NaN-filled (rows, n) view with rows ``step`` apart, GUARD in the gaps and after the end."""
    flat = guarded(rows * step, dtype, DEVICE)
    out = flat[: rows * step].view(rows, step)[:, :n]
    out.fill_(float("nan"))
    return out, flat


def _strided_out_problem(fn, values: torch.Tensor, in_step: int | None, out_step: int) -> str:
    rows, n = values.shape
    x, flat_in, step = guarded_input(values.to(DEVICE), in_step)
    out, flat = strided_output(rows, n, out_step)
    with quiet():
        y = _returned(fn(x, out), out)
    inside = torch.zeros(flat.numel(), dtype=torch.bool, device=DEVICE)
    inside[: rows * out_step].view(rows, out_step)[:, :n] = True
    if bool((flat[~inside] != GUARD).any()):
        return f"{STRIDED_OUT}: {OUT_STRIDE}"
    # Nothing landed outside the output's rows, so its stride is not to blame: name what the values say.
    return explain(y, x, triton.next_power_of_2(n), flat=flat_in, row_step=step)


@contextlib.contextmanager
def pid_offset_probe():
    """While active, Triton's interpreter tags every value computed from tl.program_id and records each pointer
    offset that is such a value in fewer than 64 bits (``row * stride`` in int32 wraps past 2**31 elements).
    Yields the list of recorded offsets' dtypes. (The grader's harness uses the same probe.)"""
    import numpy as np
    from triton.runtime import interpreter as it

    class FromPid(np.ndarray):
        """A numpy array derived from tl.program_id (numpy carries the subclass through arithmetic)."""

    B = it.InterpreterBuilder
    names = ("create_get_program_id", "create_addptr", "create_splat", "create_broadcast")
    saved = {n: getattr(B, n) for n in names}
    narrow: list[str] = []

    def get_pid(self, axis):
        h = saved["create_get_program_id"](self, axis)
        h.data = h.data.view(FromPid)
        return h

    def addptr(self, ptr, offset):
        if isinstance(offset.data, FromPid) and offset.data.dtype.itemsize < 8:
            narrow.append(str(offset.data.dtype))
        return saved["create_addptr"](self, ptr, offset)

    def tagged(h, src):
        if isinstance(src.data, FromPid) and not isinstance(h.data, FromPid):
            h.data = np.asarray(h.data).view(FromPid)
        return h

    B.create_get_program_id, B.create_addptr = get_pid, addptr
    B.create_splat = lambda self, ret_ty, arg: tagged(saved["create_splat"](self, ret_ty, arg), arg)
    B.create_broadcast = lambda self, arg, shape: tagged(saved["create_broadcast"](self, arg, shape), arg)
    try:
        yield narrow
    finally:
        for n, f in saved.items():
            setattr(B, n, f)


# The shifted launch: its programs run as these rows of a tensor (2**31 // 7 + 1: with rows 7 or 8 elements
# apart, row * stride is past 2**31 elements, so in 32 bits it wraps around).
FAR_ROW = 2**31 // 7 + 1
WIDENED_LATE = ("row * stride was multiplied in 32 bits and only then made 64-bit: run as rows {first:,} to "
                "{last:,} of tensors whose rows are 8 (input) and 7 (output) elements apart, past 2**31 elements, "
                "the 32-bit product wrapped around before it was widened, so {what} at wrong addresses")
WRAPPED = {frozenset({"load"}): "the input's rows were read", frozenset({"store"}): "the output's rows were written",
           frozenset(): "the rows were read or written"}


@contextlib.contextmanager
def far_rows_probe(first_row: int = FAR_ROW):
    """While active, Triton's interpreter runs program r as row ``first_row + r``: tl.program_id(0) returns
    ``first_row`` more, and every 2-D tensor argument's pointer is moved back by ``first_row`` rows (its own row
    stride), so a kernel whose row offsets are right in 64 bits lands on the tensor's real rows. Only addresses
    change: no memory is allocated that far out. A 32-bit product that wraps lands outside every tensor, where
    memcount's guard (``counted``) switches its lanes off and logs them."""
    from triton.runtime import interpreter as it

    B = it.InterpreterBuilder
    get_pid, cvt = B.create_get_program_id, it._implicit_cvt

    def far_pid(self, axis):
        h = get_pid(self, axis)
        return it.TensorHandle(h.data + np.int32(first_row), h.dtype) if axis == 0 else h

    def far_pointer(arg):
        t = cvt(arg)
        if isinstance(arg, torch.Tensor) and arg.dim() == 2:
            back = first_row * arg.stride(0) * arg.element_size()
            if 0 < back < arg.data_ptr():
                t.handle.data = t.handle.data - np.uint64(back)
        return t

    B.create_get_program_id, it._implicit_cvt = far_pid, far_pointer
    try:
        yield
    finally:
        B.create_get_program_id, it._implicit_cvt = get_pid, cvt


def _int64_problem(fn) -> str:
    """The probe on a small strided launch (interpreted everywhere), then the same launch run as rows past 2**31
    elements (``far_rows_probe``: a product formed in 32 bits and widened afterwards wraps there); on a GPU with
    the memory, also real rows 2**30 + 64 elements apart, so that the last row starts past 2**31 elements."""
    x = torch.randn(3, 8, generator=torch.Generator().manual_seed(5)).to(DEVICE)[:, :5]
    out, _ = strided_output(3, 5, 7)
    with pid_offset_probe() as narrow:
        y, c = counted(fn, x, out)
    if c.launches == 0:
        return no_launch("my_fused_kernel")
    if c._outside_log:
        return OUTSIDE
    if narrow:
        return INT64_HINT
    if explain(y, x):  # wrong already on these small rows (the strided cases say why): far rows would blame 64 bits
        return ""
    out, _ = strided_output(3, 5, 7)
    with far_rows_probe():
        y, c = counted(fn, x, out)
    if c._outside_log or explain(y, x):
        what = WRAPPED.get(frozenset(kind for _, _, kind, _ in c._outside_log), "the rows were read and written")
        return WIDENED_LATE.format(first=FAR_ROW, last=FAR_ROW + x.shape[0] - 1, what=what)
    return _big_rows_problem(fn) if ON_GPU else ""


def _big_rows_problem(fn, rows: int = 3, cols: int = 37) -> str:
    """The real thing on a GPU: input and output rows BIG_STEP elements apart (about 8.6 GB each in float32).
    Skipped (nothing to say) when the GPU lacks the memory; runs last, since a fault spoils the GPU context."""
    size = (rows - 1) * BIG_STEP + cols + GUARD_LEN
    if torch.cuda.mem_get_info()[0] < 2 * 4 * size + 2**31:
        return ""
    big_x = torch.empty(size, device=DEVICE)
    big_y = torch.empty(size, device=DEVICE)
    try:
        x = big_x.as_strided((rows, cols), (BIG_STEP, 1))
        y = big_y.as_strided((rows, cols), (BIG_STEP, 1))
        x.copy_(random_rows((rows, cols), 74).to(DEVICE))
        after = big_y.as_strided((rows, GUARD_LEN), (BIG_STEP, 1), cols)
        after.fill_(GUARD)
        y.fill_(float("nan"))
        with quiet():
            fn(x, y)
            torch.cuda.synchronize()
        if bool((after != GUARD).any()):
            return f"{UNMASKED_AFTER_ROW} - {INT64_HINT}"
        wrong = explain(y.clone(), x.clone())
        return f"{wrong} - {INT64_HINT}" if wrong else ""
    finally:
        del big_x, big_y
        torch.cuda.empty_cache()


UNMASKED_AFTER_ROW = "the kernel wrote past the end of a row"


def check_fused(fused_softmax) -> Verdict:
    """Print PASS/FAIL per case and a summary line; True when all pass."""
    report = Report("ch04-fused", drawing=lane_map_of(lane_launch(fused_softmax)))
    for name, values, step in FUSED_CASES:
        report.run(name, lambda v=values, s=step: softmax_problem(fused_softmax, v, triton.next_power_of_2,
                                                                  strided_cols=s))
    for name, values, in_step, out_step in STRIDED_OUT_CASES:
        report.run(name, lambda v=values, a=in_step, b=out_step: _strided_out_problem(fused_softmax, v, a, b))
    x = random_rows((3, 8), 75).to(DEVICE)[:, :5]
    report.run(TRAFFIC_CASE, lambda: traffic_problem(
        fused_softmax, x, x.numel(), x.numel(),
        "load each element of x once and store each element of y once: max, exponentials and sum stay in registers",
        out=torch.full((3, 5), float("nan"), device=DEVICE), kernel="my_fused_kernel"))
    report.run(INT64_CASE, lambda: _int64_problem(fused_softmax))
    return Verdict(report.show())


# ------------------------------------------- predict it: how many rows does an int32 offset still get right?

# ch04-wrapped-rows' cases, read by the notebook check and by the grader's judge alike: (name, rows, row stride in
# elements). The judge adds JUDGE_FRESH fresh launches whose row count sits next to the first row that wraps.
WRAP_TABLE = [
    ("a 4096 x 1024 tensor", 4096, 1024),
    ("32 heads of 8192 x 8192 scores (2**31 elements)", 32 * 8192, 8192),
    ("one row more: 32 * 8192 + 1 rows of 8192", 32 * 8192 + 1, 8192),
    ("64 heads of 8192 x 8192 scores", 64 * 8192, 8192),
    ("10**6 rows of 5000", 10**6, 5000),
    ("3 rows 2**30 + 64 elements apart (a strided view)", 3, 2**30 + 64),
]
INT32_MAX = 2**31 - 1


def rows_right(rows: int, stride: int) -> int:
    """How many rows start at the right element when row * stride is computed in int32 (row counts from 0)."""
    return min(rows, -(-(INT32_MAX + 1) // stride))  # the first row to wrap is the first with row * stride >= 2**31


def wrap_problem(value, rows: int, stride: int) -> str:
    """'' when ``value`` is the number of rows of (rows, stride) whose int32 offset is right, else the mistake."""
    if isinstance(value, bool) or not isinstance(value, numbers.Integral):
        return (f"return a whole number (an int): how many of the rows start at the right element (got a "
                f"{type(value).__name__})")
    value = int(value)
    want = rows_right(rows, stride)
    if value == want:
        return ""
    if abs(value - want) == 1:
        return ("your count is one row off: a row is right only when its whole start offset row * row_stride "
                "fits in an int32, and rows are numbered from 0")
    if value == -(-2**32 // stride) < rows:
        return ("your count is too high: int32 is signed, so the product wraps around past 2**31 - 1, not past "
                "2**32 - 1")
    if value > want:
        return ("your count is too high: some of the rows you count start past 2**31 - 1, where the int32 product "
                "has already wrapped around")
    return ("your count is too low: some of the rows you count as wrapped still start below 2**31, where the int32 "
            "product is exact (a row is wrong only when its own start offset does not fit)")


def check_rows_read_right(rows_read_right) -> Verdict:
    """Print PASS/FAIL per launch of WRAP_TABLE and a summary line; True when all pass."""
    report = Report("ch04-wrapped-rows")
    for name, rows, stride in WRAP_TABLE:
        report.run(name, lambda r=rows, s=stride: wrap_problem(rows_read_right(r, s), r, s))
    return Verdict(report.show())


def _wrap_calls(rng):
    """WRAP_TABLE's launches and JUDGE_FRESH fresh ones, their row count next to the first row that wraps."""
    fresh = []
    for _ in range(JUDGE_FRESH):
        stride = int(rng.integers(1000, 200_000))
        rows = max(1, -(-(INT32_MAX + 1) // stride) + int(rng.integers(-2, 3)))
        fresh.append((f"{rows} rows of stride {stride} (fresh)", rows, stride))
    return [PCall(name, "rows_read_right", [rows, stride], lambda value, r=rows, s=stride: wrap_problem(value, r, s))
            for name, rows, stride in WRAP_TABLE + fresh]


# ------------------------------------------------------- find the bug: three suspects that pass a quick test

# ch04-find-the-bug's cases, read by the notebook check and by the grader's judge alike: (name, what the learner's
# catching_layout is asked for, the suspects that layout must catch). The check runs the real suspects
# (checks/suspects.py: row kernels with one bug each) on random values, the judge simulates them on values from its
# seed.
FIND_TABLE = [
    ("your layout for suspect A makes it go wrong", "A", ["A"]),
    ("your layout for suspect B makes it go wrong", "B", ["B"]),
    ("your layout for suspect C makes it go wrong", "C", ["C"]),
    ("your one layout for all three makes each of them go wrong", "all", ["A", "B", "C"]),
]
MAX_ROWS, MAX_COLS, MAX_STEP = 8, 64, 128


def layout_problem(layout) -> str:
    """'' when ``layout`` is a test layout (rows, cols, input row step, output row step) the check can run."""
    if not isinstance(layout, (list, tuple)) or len(layout) != 4 or not all(
            isinstance(v, numbers.Integral) and not isinstance(v, bool) for v in layout):
        return "return a layout (rows, cols, input row step, output row step): four whole numbers"
    rows, cols, in_step, out_step = (int(v) for v in layout)
    if not (1 <= rows <= MAX_ROWS and 1 <= cols <= MAX_COLS):
        return f"a layout has 1 to {MAX_ROWS} rows of 1 to {MAX_COLS} columns"
    if not (cols <= in_step <= MAX_STEP and cols <= out_step <= MAX_STEP):
        return (f"rows of a tensor never overlap: each row step is at least the number of columns (and at most "
                f"{MAX_STEP} here)")
    return ""


def _layout_name(layout) -> str:
    rows, cols, in_step, out_step = layout
    return f"{rows}x{cols}, input rows {in_step} apart, output rows {out_step} apart"


def find_problem(layout, suspects, goes_wrong) -> str:
    """'' when every suspect of ``suspects`` goes wrong on ``layout`` (``goes_wrong(name, layout) -> bool``)."""
    bad = layout_problem(layout)
    if bad:
        return bad
    layout = tuple(int(v) for v in layout)
    missed = [s for s in suspects if not goes_wrong(s, layout)]
    if not missed:
        return ""
    who = f"suspect {missed[0]}" if len(missed) == 1 else f"suspects {', '.join(missed[:-1])} and {missed[-1]}"
    them = "it" if len(missed) == 1 else "them"
    return (f"{who} computed every output right on your layout ({_layout_name(layout)}): the mistake changes "
            f"nothing there, so a test with this layout would let {them} through")


def _runs_wrong(name: str, layout) -> bool:
    """The real suspect on ``layout`` (random values, poisoned output, guard zones): does it go wrong?"""
    from .suspects import goes_wrong

    with quiet():
        return goes_wrong(name, layout)


def check_find_the_bug(catching_layout) -> Verdict:
    """Run each suspect on the learner's layouts; True when each layout makes the suspects it names go wrong."""
    report = Report("ch04-find-the-bug")
    for name, which, suspects in FIND_TABLE:
        report.run(name, lambda w=which, s=suspects: find_problem(catching_layout(w), s, _runs_wrong))
    return Verdict(report.show())


def _find_calls(rng):
    """FIND_TABLE's calls; the suspects simulated on values from the grader's seed."""
    from .suspects import simulate

    seed = int(rng.integers(1 << 30))
    return [PCall(name, "catching_layout", [which],
                  lambda value, s=suspects: find_problem(
                      value, s, lambda n, lay: simulate(n, lay, np.random.default_rng(seed))))
            for name, which, suspects in FIND_TABLE]


# ------------------------------------------------------------------------------- what the grader launches

def three_pass_counts(rows: int, cols: int) -> tuple[int, int]:
    """What the library's three_pass_softmax loads and stores (elements); tests/checks/test_ch04.py checks
    it against the counted traffic (memcount)."""
    return 3 * rows * cols + 2 * rows, 2 * rows * cols + 2 * rows


def expect_counts(want: tuple[int, int]):
    """The grader's verdict on one (loads, stores) answer: which of the two is too high or too low, never the
    expected totals."""
    def problem(value) -> str:
        if not isinstance(value, list) or len(value) != 2 or not all(
                isinstance(v, (int, float)) and not isinstance(v, bool) for v in value):
            return "return a pair (elements loaded, elements stored)"
        words = [f"{q} too {'high' if v > w else 'low'}" for q, v, w in zip(("loads", "stores"), value, want) if v != w]
        return "; ".join(words)
    return problem


def traffic_counts(kernel: str, rows: int, cols: int) -> tuple[int, int]:
    """What a library kernel of ch04-traffic moves, in closed form (the judge cannot count: it has no kernels)."""
    return three_pass_counts(rows, cols) if kernel == "three_pass" else (rows * cols, rows * cols)


def _traffic_calls(rng):
    """TRAFFIC_TABLE's cases, and JUDGE_FRESH fresh shapes per kernel from the grader's seed."""
    fresh = [(f"{kernel} on {r}x{c} (fresh)", kernel, fn, (r, c)) for kernel, fn in TRAFFIC_FUNCTIONS.items()
             for r, c in ((int(rng.integers(1, 50)), int(rng.integers(1, 3000))) for _ in range(JUDGE_FRESH))]
    return [PCall(name, fn, [r, c], expect_counts(traffic_counts(kernel, r, c)))
            for name, kernel, fn, (r, c) in TRAFFIC_TABLE + fresh]


def _fused_cases(rng):
    """The grader's launches: every named case with values from its seed, JUDGE_FRESH fresh strided ones, then the
    64-bit offsets (counted in the interpreter; on a GPU, real rows 2**30 apart)."""
    args = ["out", "x", "x_stride", "out_stride", "n"]
    out = []
    for name, (R, C), kind, _, step, out_step in FUSED_TABLE:
        out.append(softmax_case(rng, name, fresh_values(rng, kind, (R, C)), args, np2(C), (R,),
                                steps=(step, out_step)))
    for _ in range(JUDGE_FRESH):
        R, C = int(rng.integers(2, 5)), int(rng.integers(5, 300))
        out.append(softmax_case(rng, f"strided input and output {R}x{C}", softmax_rows(rng, (R, C)), args, np2(C),
                                (R,), strided=True))
    x = softmax_rows(rng, (3, 7))
    out.append(softmax_case(rng, "64-bit row offsets", x, args, 8, (3,), strided=True, int64=True,
                            hint=INT64_HINT))
    if judging.gpu_scale():  # last: a fault here may spoil the GPU context for later launches
        out.append(softmax_case(rng, "rows 2**30 apart: offsets past 2**31 elements", softmax_rows(rng, (3, 37)),
                                args, 64, (3,), hint=INT64_HINT, big_step=judging.BIG_STEP))
    return out


def _judges():
    return {"ch04-traffic": PythonJudge(_traffic_calls),
            "ch04-fused": KernelJudge("my_fused_kernel", _fused_cases, int64=True),
            "ch04-find-the-bug": PythonJudge(_find_calls),
            "ch04-wrapped-rows": PythonJudge(_wrap_calls)}


JUDGES = _judges()
