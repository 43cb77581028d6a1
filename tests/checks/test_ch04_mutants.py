"""Mutants of chapter 4's solutions: wrong answers a learner could write, each failing its check with a message that
names the mistake.

``MISSED_BEFORE`` are wrong answers the check used to pass: for each, every case the old check had still
passes, and only a case that checks the property the chapter teaches kills it. ``CAUGHT`` holds the pitfalls
the chapter names (caught by value), so that every named pitfall has a mutant.
"""
import re

import pytest

from check_helpers import PITFALLS, chapter_rows, exercise_source, load, run_check
from mutant_helpers import failing_line, mutant_passed_the_old_cases_and_is_killed_now, mutate, named_pitfall_is_caught
from softmax_lab.checks import ch04

LAUNCH_CH04 = """    my_fused_kernel[(n_rows,)](out, x, x.stride(0), out.stride(0), n_cols, BLOCK=BLOCK,
                               num_warps=4 if BLOCK <= 1024 else 8)  # simpler than default_num_warps"""


ROW64, IN_OFFSET, OUT_OFFSET = "row = tl.program_id(0).to(tl.int64)", "in_ptr + row * in_row_stride", \
    "out_ptr + row * out_row_stride"

# Wrong answers the check used to pass, before it checked the property the chapter teaches:
# (exercise, mutant, (old, new) edits of the solution, the case that must fail, words its line must hold)
MISSED_BEFORE = [
    ("ch04-fused", "32-bit row offsets", [("tl.program_id(0).to(tl.int64)", "tl.program_id(0)")],
     ch04.INT64_CASE, "computed in 32 bits, not 64-bit"),
    # the review (2026-12-02): widened to 64 bits after a 32-bit multiply passed on the CPU (only the offset's
    # width where it met the pointer was probed); run as rows past 2**31 / stride, the product wraps
    ("ch04-fused", "(row * stride).to(tl.int64): widened after the 32-bit multiply",
     [(ROW64, "row = tl.program_id(0)"), (IN_OFFSET, "in_ptr + (row * in_row_stride).to(tl.int64)"),
      (OUT_OFFSET, "out_ptr + (row * out_row_stride).to(tl.int64)")],
     ch04.INT64_CASE, "multiplied in 32 bits and only then made 64-bit"),
    ("ch04-fused", "tl.cast(row * stride, tl.int64): widened after the 32-bit multiply",
     [(ROW64, "row = tl.program_id(0)"), (IN_OFFSET, "in_ptr + tl.cast(row * in_row_stride, tl.int64)"),
      (OUT_OFFSET, "out_ptr + tl.cast(row * out_row_stride, tl.int64)")],
     ch04.INT64_CASE, "the rows were read and written at wrong addresses"),
    ("ch04-fused", "only the output's offset widened after the multiply",
     [(ROW64, "row = tl.program_id(0)"), (IN_OFFSET, "in_ptr + row.to(tl.int64) * in_row_stride"),
      (OUT_OFFSET, "out_ptr + (row * out_row_stride).to(tl.int64)")],
     ch04.INT64_CASE, "so the output's rows were written at wrong addresses"),
    ("ch04-fused", "ignores out_row_stride (assumes a contiguous output)",
     [("out_ptr + row * out_row_stride", "out_ptr + row * n_cols")], ch04.STRIDED_OUT_CASES[0][0],
     "not the output's own row stride"),
    ("ch04-fused", "torch.softmax inside the wrapper", [(LAUNCH_CH04, "    out.copy_(torch.softmax(x, dim=-1))")],
     ch04.TRAFFIC_CASE, "never launched my_fused_kernel"),
    ("ch04-fused", "reads the row twice (not fused)",
     [("    x = x - tl.max(x, axis=0)",
       '    x = x - tl.max(tl.load(in_ptr + row * in_row_stride + cols, mask=mask, other=float("-inf")), axis=0)')],
     ch04.TRAFFIC_CASE, "load each element of x once"),
]

# The pitfalls the chapter names (check_helpers.PITFALLS), and more caught by value (same format)
CAUGHT = chapter_rows(PITFALLS, "ch04") + [
    ("ch04-fused", "store without mask", [("tl.store(out_ptr + row * out_row_stride + cols, y, mask=mask)",
                                           "tl.store(out_ptr + row * out_row_stride + cols, y)")],
     "random 2x31", "the store is not masked"),
    ("ch04-fused", "load without mask", [('mask=mask, other=float("-inf"))', ")")], "random 2x31",
     "the load is not masked"),
]


@pytest.mark.parametrize("ex,mutant,edits,case,words", MISSED_BEFORE, ids=[f"{m[0]}: {m[1]}" for m in MISSED_BEFORE])
def test_mutant_passed_the_old_cases_and_is_killed_now(ex, mutant, edits, case, words, tmp_path):
    mutant_passed_the_old_cases_and_is_killed_now(ex, mutant, edits, case, words, tmp_path)


@pytest.mark.parametrize("ex,pitfall,edits,case,words", CAUGHT, ids=[f"{p[0]}: {p[1]}" for p in CAUGHT])
def test_named_pitfall_is_caught(ex, pitfall, edits, case, words, tmp_path):
    """The pitfalls the chapter names that the checks caught before too (by value)."""
    named_pitfall_is_caught(ex, edits, case, words, tmp_path)


TRAFFIC_MUTANTS = [
    ("bytes, not elements (fused)",
     [("loads, stores = rows * cols, rows * cols", "loads, stores = 4 * rows * cols, 4 * rows * cols")],
     "fused on 3x5", "count elements, not bytes"),
    ("forgot the per-row max and sum",
     [("loads = rows * cols + (rows * cols + rows) + (rows * cols + rows)", "loads = 3 * rows * cols"),
      ("stores = rows + (rows * cols + rows) + rows * cols", "stores = 2 * rows * cols")],
     "three_pass on 3x5", "the per-row (rows) term is too small"),
    ("x read once in the three-pass kernels", [("loads = rows * cols + (rows * cols + rows) + (rows * cols + rows)",
                                                "loads = rows * cols + rows + (rows * cols + rows)")],
     "three_pass on 3x5", "the per-element (rows * cols) term is too small"),
    ("fused stores the max and the sum",
     [("loads, stores = rows * cols, rows * cols", "loads, stores = rows * cols, rows * cols + 2 * rows")],
     "fused on 2x16", "stores: the per-row (rows) term is too large"),
    ("counts padded lanes", [("loads, stores = rows * cols, rows * cols",
                              "loads, stores = rows * triton.next_power_of_2(cols), rows * cols")],
     "fused on 3x5", "does not grow like a count of elements"),
    ("counts every lane of each block, masked or not",
     [("loads = rows * cols + (rows * cols + rows) + (rows * cols + rows)",
       "lanes = triton.cdiv(cols, 4096) * min(triton.next_power_of_2(cols), 4096)\n"
       "    loads = rows * lanes + (rows * lanes + rows) + (rows * lanes + rows)")],
     "three_pass on 2x4100", "does not grow like a count of elements"),
]
# what the library kernels move on 1x4, 3x5, 2x16, 4x33, 2x4100
EXPECTED_TOTALS = {14, 10, 51, 36, 100, 68, 15, 32, 404, 272, 132, 24604, 16404, 8200}


@pytest.mark.parametrize("mutant,edits,case,words", TRAFFIC_MUTANTS, ids=[m[0] for m in TRAFFIC_MUTANTS])
def test_traffic_feedback_names_the_wrong_term_and_no_expected_total(mutant, edits, case, words, tmp_path):
    """The old check printed "you said 45, the kernels loaded 51": a learner could fit the formula to that."""
    ex = "ch04-traffic"
    ok, text = run_check(ex, load(ex, mutate(ex, edits), tmp_path), grouped=False)
    line = failing_line(text, case)
    assert not ok and line is not None and words in line, text
    for ln in text.splitlines():
        if ln.startswith("FAIL"):
            reason = ln.split(": ", 1)[1]
            assert not EXPECTED_TOTALS & {int(n) for n in re.findall(r"\b\d+\b", reason)}, ln


def test_traffic_judge_says_too_high_or_low_without_totals():
    expect = ch04.expect_counts((51, 36))
    assert expect([51, 36]) == ""
    assert expect([45, 36]) == "loads too low"
    assert expect([51, 144]) == "stores too high"
    assert "pair" in expect([1]) and "pair" in expect("x")


def test_int64_probe_sees_pid_derived_32_bit_offsets_only(tmp_path):
    """The probe flags `row * stride` in int32 but not the int64 version, nor 32-bit offsets that do not come from
    the program id (cols)."""
    good = load("ch04-fused", exercise_source("ch04-fused"), tmp_path)
    bad = load("ch04-fused", mutate("ch04-fused", [("tl.program_id(0).to(tl.int64)", "tl.program_id(0)")]), tmp_path)
    assert ch04._int64_problem(good.my_fused_softmax) == ""
    assert "64-bit" in ch04._int64_problem(bad.my_fused_softmax)


ANNOTATED = "def my_fused_kernel(out_ptr, in_ptr, in_row_stride, out_row_stride, n_cols"


@pytest.mark.parametrize("edits", [
    [(ROW64, "row = tl.program_id(0)"), (IN_OFFSET, "in_ptr + row.to(tl.int64) * in_row_stride"),
     (OUT_OFFSET, "out_ptr + tl.cast(row, tl.int64) * out_row_stride")],
    [(ROW64, "row = tl.program_id(0)"), (IN_OFFSET, "in_ptr + row * in_row_stride.to(tl.int64)"),
     (OUT_OFFSET, "out_ptr + row * tl.cast(out_row_stride, tl.int64)")],
    [(ROW64, "row = tl.program_id(0)"),
     (ANNOTATED, ANNOTATED.replace("in_row_stride, out_row_stride",
                                   "in_row_stride: tl.int64, out_row_stride: tl.int64"))],
], ids=["row widened before the multiply", "stride widened before the multiply", "strides annotated tl.int64"])
def test_far_rows_pass_64_bit_products(edits, tmp_path):
    """Run as rows past 2**31 / stride (no memory that far out: only addresses move), a product formed in 64 bits
    lands on the real rows, however the learner widens it (a parameter annotated ``tl.int64`` is 64 bits in the
    interpreter too, as on a GPU: ``softmax_lab.interpreter_ints``); the notebook check passes it whole, and so
    does the grader's judge."""
    right = load("ch04-fused", mutate("ch04-fused", edits), tmp_path)
    assert ch04._int64_problem(right.my_fused_softmax) == ""
    if "tl.int64, out_row_stride" in mutate("ch04-fused", edits):
        import shutil

        from softmax_lab.grading import judge
        from softmax_lab.grading.runner import Limits

        ok, text = run_check("ch04-fused", right, grouped=False)
        assert ok, text
        if shutil.which("bwrap"):
            v = judge.run("", {"ch04-fused": mutate("ch04-fused", edits)}, Limits(cell_timeout=60), seed=7)
            assert v["ch04-fused"].ok, v["ch04-fused"].text("ch04-fused")


def test_far_rows_do_not_blame_64_bits_for_a_wrong_stride(tmp_path):
    """A kernel already wrong on the small rows (the input stepped by the output's stride) is the strided cases'
    to name: the far rows would land outside the input for that reason, not a wrap."""
    wrong = load("ch04-fused", mutate("ch04-fused", [(IN_OFFSET, "in_ptr + row * out_row_stride")]), tmp_path)
    assert ch04._int64_problem(wrong.my_fused_softmax) == ""


# ch04-find-the-bug: wrong layouts a learner could give, (mutant, (old, new) edits of the solution, the cases that
# must fail, words each failing line must hold). The judge (the suspects simulated) fails the same cases.
FIND_MUTANTS = [
    ("the quick test's own layout everywhere",
     [('"A": (1, 3, 3, 3)', '"A": (4, 16, 16, 16)'), ('"B": (2, 4, 6, 4)', '"B": (4, 16, 16, 16)'),
      ('"C": (2, 4, 4, 6)', '"C": (4, 16, 16, 16)'), ('"all": (2, 5, 9, 7)', '"all": (4, 16, 16, 16)')],
     ["A", "B", "C", "all"], "computed every output right on your layout (4x16"),
    ("one row cannot show a row step", [('"all": (2, 5, 9, 7)', '"all": (1, 5, 9, 7)')], ["all"],
     "suspects B and C computed every output right"),
    ("a power-of-two row leaves no lane past it", [('"A": (1, 3, 3, 3)', '"A": (2, 4, 6, 6)')], ["A"],
     "suspect A computed every output right"),
    ("input rows exactly n_cols apart", [('"B": (2, 4, 6, 4)', '"B": (2, 5, 5, 7)')], ["B"],
     "suspect B computed every output right"),
    ("input and output rows equally far apart", [('"C": (2, 4, 4, 6)', '"C": (2, 5, 7, 7)')], ["C"],
     "suspect C computed every output right"),
    ("B's and C's layouts swapped",
     [('"B": (2, 4, 6, 4)', '"B": (2, 4, 4, 6)'), ('"C": (2, 4, 4, 6)', '"C": (2, 4, 6, 4)')], ["B"],
     "suspect B computed every output right"),
    ("overlapping rows", [('"all": (2, 5, 9, 7)', '"all": (2, 5, 3, 7)')], ["all"], "rows of a tensor never overlap"),
    ("three numbers, not a layout", [('"all": (2, 5, 9, 7)', '"all": (2, 5, 9)')], ["all"], "four whole numbers"),
]


@pytest.mark.parametrize("mutant,edits,failing,words", FIND_MUTANTS, ids=[m[0] for m in FIND_MUTANTS])
def test_find_the_bug_mutants_fail_the_check_and_the_judge(mutant, edits, failing, words, tmp_path):
    import numpy as np

    ex = "ch04-find-the-bug"
    module = load(ex, mutate(ex, edits), tmp_path)
    ok, text = run_check(ex, module, grouped=False)
    assert not ok, text
    names = {which: name for name, which, _ in ch04.FIND_TABLE}
    for which, name in names.items():
        line = failing_line(text, name)
        if which in failing:
            assert line is not None and words in line, f"{mutant}: {name!r} should fail saying {words!r}:\n{text}"
        else:
            assert f"PASS  {name}" in text.splitlines(), f"{mutant}: {name!r} should pass:\n{text}"
    # the grader's judge gives the same verdicts on the same answers
    for call in ch04.JUDGES[ex].calls(np.random.default_rng(3)):
        value = module.catching_layout(call.args[0])
        verdict = call.expect(list(value))
        assert bool(verdict) == (call.args[0] in failing), (mutant, call.name, verdict)


# ch04-wrapped-rows: wrong predictions, (mutant, (old, new) edits of the solution, {failing case: words its line must
# hold}); every other case passes. The judge fails the same cases.
FIRST = "first_wrapped = -(-2**31 // row_stride)"
ONE_MORE, HEADS_64 = "one row more: 32 * 8192 + 1 rows of 8192", "64 heads of 8192 x 8192 scores"
ROWS_5000, VIEW = "10**6 rows of 5000", "3 rows 2**30 + 64 elements apart (a strided view)"
WRAP_MUTANTS = [
    ("floor, not ceiling", [(FIRST, "first_wrapped = 2**31 // row_stride")],
     {ROWS_5000: "one row off", VIEW: "one row off"}),
    ("a start of exactly 2**31 counted as right", [(FIRST, "first_wrapped = 2**31 // row_stride + 1")],
     {ONE_MORE: "one row off", HEADS_64: "one row off"}),
    ("int32 taken as unsigned", [(FIRST, "first_wrapped = -(-2**32 // row_stride)")],
     {ONE_MORE: "one row off", HEADS_64: "too high", ROWS_5000: "int32 is signed", VIEW: "one row off"}),
    ("every row right", [("return min(rows, first_wrapped)", "return rows")],
     {ONE_MORE: "one row off", HEADS_64: "too high", ROWS_5000: "too high", VIEW: "one row off"}),
    ("the whole tensor's size decides",
     [("return min(rows, first_wrapped)", "return rows if rows * row_stride <= 2**31 else 0")],
     {ONE_MORE: "too low", HEADS_64: "too low", ROWS_5000: "too low", VIEW: "too low"}),
    ("a float, not a count", [("return min(rows, first_wrapped)", "return float(min(rows, first_wrapped))")],
     {name: "return a whole number (an int)" for name, _, _ in ch04.WRAP_TABLE}),
]


@pytest.mark.parametrize("mutant,edits,failing", WRAP_MUTANTS, ids=[m[0] for m in WRAP_MUTANTS])
def test_wrapped_rows_mutants_fail_the_check_and_the_judge(mutant, edits, failing, tmp_path):
    import numpy as np

    ex = "ch04-wrapped-rows"
    module = load(ex, mutate(ex, edits), tmp_path)
    ok, text = run_check(ex, module, grouped=False)
    assert not ok, text
    for name, _, _ in ch04.WRAP_TABLE:
        line = failing_line(text, name)
        if name in failing:
            assert line is not None and failing[name] in line, f"{mutant}: {name!r}: {failing[name]!r}?\n{text}"
        else:
            assert f"PASS  {name}" in text.splitlines(), f"{mutant}: {name!r} should pass:\n{text}"
    for call in ch04.JUDGES[ex].calls(np.random.default_rng(5)):
        if call.name in failing:  # the named launches: the judge's verdict is the check's
            assert failing[call.name] in call.expect(module.rows_read_right(*call.args)), (mutant, call.name)


# The review's wrong diagnoses (2026-12-02): (mutant, edits, case, words its line must hold, words it must not).
DIAGNOSES = [
    ("output stepped by the input's stride, store masked",
     [("out_ptr + row * out_row_stride", "out_ptr + row * in_row_stride")],
     "strided view big[:, :1000] of a 4x1100 tensor", "placed further apart than this output's rows",
     "not masked"),
    ("padding 0 with the right strides, strided input and output",
     [('other=float("-inf")', "other=0.0")],
     "strided input and output: 4x6, input rows 9 apart, output rows 8 apart", "padding lanes read 0", "stride"),
    ("padding 0 with the right strides, strided output",
     [('other=float("-inf")', "other=0.0")],
     "strided output: a contiguous 3x5 input into rows 7 apart", "padding lanes read 0", "stride"),
]


@pytest.mark.parametrize("mutant,edits,case,words,never", DIAGNOSES, ids=[d[0] for d in DIAGNOSES])
def test_fused_feedback_blames_the_real_mistake(mutant, edits, case, words, never, tmp_path):
    ok, text = run_check("ch04-fused", load("ch04-fused", mutate("ch04-fused", edits), tmp_path), grouped=False)
    line = failing_line(text, case)
    assert not ok and line is not None, text
    reason = line.split(": ", 1)[1]  # after the case's name (which may say "strided")
    assert words in reason and never not in reason, text
