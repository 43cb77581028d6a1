"""Mutants of chapters 0-4's solutions: each is a wrong answer a learner could write, and each must fail its check
with a message that names the mistake.

``MISSED_BEFORE`` are the wrong answers the checks used to pass (issue 13: a kernel without int64 offsets, one
that ignores ``out_row_stride``, ``torch.softmax`` inside the launcher, a kernel that reads its row twice ...):
for those the test also shows that every case the old check had still passes, i.e. only the new cases, which
check the property the chapter teaches, kill them. ``CAUGHT`` lists the other pitfalls the chapters name
(already caught before, by value), so that every named pitfall has a mutant in one place.
"""
from __future__ import annotations

import re

import pytest

from softmax_lab.checks import ch00, ch01, ch02, ch03, ch04

from test_checks_ch00_04 import PITFALLS, exercise_source, load, run_check

LAUNCH_CH04 = """    my_fused_kernel[(n_rows,)](out, x, x.stride(0), out.stride(0), n_cols, BLOCK=BLOCK,
                               num_warps=4 if BLOCK <= 1024 else 8)  # simpler than default_num_warps"""

# The cases each check had before issue 13 (their names): a mutant that passes all of them passed the old check.
OLD_CASES = {
    "ch00-double": [f"vector of {n}" for n in ch00.SIZES],
    "ch01-stable-row": [name for name, _ in ch01.ROW_CASES],
    "ch02-masked-load-store": [name for name, _ in ch02.MASK_CASES],
    "ch03-naive-normalize": [name for name, _ in ch03.NAIVE_CASES],
    "ch04-fused": [name for name, _, _ in ch04.FUSED_CASES],
}

# (exercise, mutant, (old, new) edits of the solution, the case that must fail, words its line must hold)
MISSED_BEFORE = [
    ("ch00-double", "the launcher computes 2 * x with torch",
     [("    double_kernel[grid](out, x, x.numel(), BLOCK=BLOCK)", "    out.copy_(2 * x)")],
     ch00.TRAFFIC_CASE, "never launched double_kernel"),
    ("ch00-double", "loads its block twice",
     [("tl.store(out_ptr + offs, 2 * x, mask=mask)",
       "tl.store(out_ptr + offs, x + tl.load(in_ptr + offs, mask=mask), mask=mask)")],
     ch00.TRAFFIC_CASE, "load each element of x once"),
    ("ch01-stable-row", "torch.softmax inside the launcher",
     [("    softmax_row_kernel[(1,)](out, x, x.numel(), BLOCK=BLOCK)", "    out.copy_(torch.softmax(x, dim=-1))")],
     ch01.TRAFFIC_CASE, "never launched softmax_row_kernel"),
    ("ch02-masked-load-store", "torch.softmax inside the launcher",
     [("    softmax_rows_kernel[(n_rows,)](out, x, n_cols, BLOCK=triton.next_power_of_2(n_cols))",
       "    out.copy_(torch.softmax(x, dim=-1))")], ch02.TRAFFIC_CASE, "never launched softmax_rows_kernel"),
    ("ch03-naive-normalize", "torch.softmax inside the launcher",
     [("    my_naive_kernel[(n_rows * n_cols,)](out, x, n_cols, BLOCK=BLOCK)",
       "    out.copy_(torch.softmax(x, dim=-1))")],
     ch03.TRAFFIC_CASE, "never launched my_naive_kernel"),
    ("ch03-naive-normalize", "reloads its own element instead of using `mine`",
     [("y = tl.exp(mine - row_max) / total", "y = tl.exp(tl.load(row_start + col) - row_max) / total")],
     ch03.TRAFFIC_CASE, "walk the row twice and load its own element once"),
    ("ch04-fused", "32-bit row offsets", [("tl.program_id(0).to(tl.int64)", "tl.program_id(0)")],
     ch04.INT64_CASE, "make the row index 64-bit"),
    ("ch04-fused", "ignores out_row_stride (assumes a contiguous output)",
     [("out_ptr + row * out_row_stride", "out_ptr + row * n_cols")], ch04.STRIDED_OUT_CASES[0][0], "out_row_stride"),
    ("ch04-fused", "torch.softmax inside the wrapper", [(LAUNCH_CH04, "    out.copy_(torch.softmax(x, dim=-1))")],
     ch04.TRAFFIC_CASE, "never launched my_fused_kernel"),
    ("ch04-fused", "reads the row twice (not fused)",
     [("    x = x - tl.max(x, axis=0)",
       '    x = x - tl.max(tl.load(in_ptr + row * in_row_stride + cols, mask=mask, other=float("-inf")), axis=0)')],
     ch04.TRAFFIC_CASE, "load each element of x once"),
]

# New exercises: (exercise, mutant, edits, failing case, words)
NEW_EXERCISES = [
    ("ch01-shift-trace", "says nothing changes", [("return [True, False, False, False, False]",
                                                   "return [False, False, False, False, False]")],
     "which steps change between the two rows", "side by side"),
    ("ch01-shift-trace", "says everything changes", [("return [True, False, False, False, False]",
                                                      "return [True, True, True, True, True]")],
     "which steps change between the two rows", "side by side"),
    ("ch01-shift-trace", "predicts overflow for [1000, 1000, 1000]",
     [("return [1000.0, [0.0, 0.0, 0.0], [1.0, 1.0, 1.0], 3.0, [0.3333, 0.3333, 0.3333]]",
       "return [1000.0, [0.0, 0.0, 0.0], [1.0, 1.0, 1.0], 3.0, [0.0, 0.0, 0.0]]")],
     "your trace of [1000, 1000, 1000]", "not what the stable softmax computes at: y"),
    ("ch01-shift-trace", "forgets the shift",
     [("return [1000.0, [0.0, 0.0, 0.0]", "return [1000.0, [1000.0, 1000.0, 1000.0]")],
     "your trace of [1000, 1000, 1000]", "x - max"),
    ("ch01-count-nonfinite", "computes in float64",
     [("for row in (x, x + 1000, x - 1000):", "for row in (x.double(), x.double() + 1000, x.double() - 1000):")],
     "a wide row [0, 100, -100]", "compute in float32"),
    ("ch01-count-nonfinite", "stable formula without the max", [("torch.exp(row - row.max())", "torch.exp(row)")],
     "the chapter's row [2, 1, 0, -1.5]", "your stable count is wrong for x + 1000, x - 1000"),
    ("ch01-count-nonfinite", "counts only inf, not NaN", [("(~torch.isfinite(textbook))", "torch.isinf(textbook)")],
     "the chapter's row [2, 1, 0, -1.5]", "your textbook count is wrong"),
    ("ch02-padding-self-test", "only the seed's [0, 0, 0, 0]",
     [("        [[0.0, 0.0, 0.0], [1 / 3, 1 / 3, 1 / 3]],",
       "        [[0.0, 0.0, 0.0, 0.0], [0.25, 0.25, 0.25, 0.25]],"),
      ("        [[-1002.0, -1001.0, -1000.0], [0.0900, 0.2447, 0.6652]],", "")],
     ch02.PADDINGS[1][0], "none of your rows leaves a padding lane"),
    ("ch02-padding-self-test", "no all-negative row",
     [("        [[-1002.0, -1001.0, -1000.0], [0.0900, 0.2447, 0.6652]],", "")],
     ch02.PADDINGS[3][0], "which row would -1000 break"),
    ("ch02-padding-self-test", "expects what a 0-padding kernel gives",
     [("[1 / 3, 1 / 3, 1 / 3]", "[0.25, 0.25, 0.25]")],
     ch02.PADDINGS[0][0], "the correct kernel fails your case 1"),
]


def failing_line(text: str, case: str) -> str | None:
    return next((ln for ln in text.splitlines() if ln.startswith(f"FAIL  {case}:")), None)


def mutate(ex: str, edits) -> str:
    source = exercise_source(ex)
    for old, new in edits:
        assert old in source, f"the solution of {ex} no longer contains {old!r}: update this test"
        source = source.replace(old, new)
    return source


@pytest.mark.parametrize("ex,mutant,edits,case,words", MISSED_BEFORE, ids=[f"{m[0]}: {m[1]}" for m in MISSED_BEFORE])
def test_mutant_passed_the_old_cases_and_is_killed_now(ex, mutant, edits, case, words, tmp_path):
    ok, text = run_check(ex, load(ex, mutate(ex, edits), tmp_path), grouped=False)
    assert not ok, text
    for old in OLD_CASES[ex]:  # today's check (these cases) passed it
        assert f"PASS  {old}" in text.splitlines(), f"{mutant}: old case {old!r} no longer passes:\n{text}"
    line = failing_line(text, case)
    assert line is not None and words in line, f"{mutant}: {case!r} should fail saying {words!r}:\n{text}"


@pytest.mark.parametrize("ex,mutant,edits,case,words", NEW_EXERCISES, ids=[f"{m[0]}: {m[1]}" for m in NEW_EXERCISES])
def test_new_exercise_mutant_is_killed(ex, mutant, edits, case, words, tmp_path):
    ok, text = run_check(ex, load(ex, mutate(ex, edits), tmp_path), grouped=False)
    assert not ok, text
    line = failing_line(text, case)
    assert line is not None and words in line, f"{mutant}: {case!r} should fail saying {words!r}:\n{text}"


# More pitfalls the chapters name, caught by value before and now (same format as PITFALLS)
CAUGHT_MORE = [
    ("ch00-double", "the grid does not cover the vector", [("triton.cdiv(x.numel(), BLOCK)", "x.numel() // BLOCK")],
     "vector of 100", "does the grid cover the whole vector?"),
    ("ch04-fused", "store without mask", [("tl.store(out_ptr + row * out_row_stride + cols, y, mask=mask)",
                                           "tl.store(out_ptr + row * out_row_stride + cols, y)")],
     "random 2x31", "mask the store"),
    ("ch04-fused", "load without mask", [('mask=mask, other=float("-inf"))', ")")], "random 2x31", "mask the load"),
]


@pytest.mark.parametrize("ex,pitfall,edits,case,words", PITFALLS + CAUGHT_MORE,
                         ids=[f"{p[0]}: {p[1]}" for p in PITFALLS + CAUGHT_MORE])
def test_named_pitfall_is_caught(ex, pitfall, edits, case, words, tmp_path):
    """The pitfalls the chapters name that the checks caught before too (tests/checks/test_checks_ch00_04.py's list)."""
    ok, text = run_check(ex, load(ex, mutate(ex, edits), tmp_path), grouped=False)
    line = failing_line(text, case)
    assert not ok and line is not None and words in line, text


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
]
EXPECTED_TOTALS = {14, 10, 51, 36, 100, 68, 15, 32}  # what the library kernels move on 1x4, 3x5, 2x16


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


JUDGED = {  # exercise -> a mutant the grader's own judge (fresh inputs, outside the notebook) must fail
    "ch01-shift-trace": [("return [True, False, False, False, False]", "return [True, True, True, True, True]")],
    "ch01-count-nonfinite": [("torch.exp(row - row.max())", "torch.exp(row)")],
    "ch02-padding-self-test": [("        [[-1002.0, -1001.0, -1000.0], [0.0900, 0.2447, 0.6652]],", "")],
    "ch04-traffic": [("loads = rows * cols + (rows * cols + rows) + (rows * cols + rows)", "loads = 3 * rows * cols")],
}


def test_grader_judges_the_new_exercises():
    """The grader calls the learner's functions itself (judges): solutions pass, mutants fail, and the traffic
    judge's feedback holds no expected total."""
    import shutil

    from softmax_lab.grading import judge
    from softmax_lab.grading.runner import Limits

    if not shutil.which("bwrap"):
        pytest.skip("needs bubblewrap")
    good = judge.run("", {ex: exercise_source(ex) for ex in JUDGED}, Limits(cell_timeout=60), seed=3)
    assert all(good[ex].ok for ex in JUDGED), {ex: good[ex].text(ex) for ex in JUDGED}
    bad = judge.run("", {ex: mutate(ex, edits) for ex, edits in JUDGED.items()}, Limits(cell_timeout=60), seed=3)
    for ex in JUDGED:
        assert not bad[ex].ok, bad[ex].text(ex)
    assert all(ln.endswith("loads too low") for ln in bad["ch04-traffic"].lines if "three_pass" in ln), \
        bad["ch04-traffic"].lines
