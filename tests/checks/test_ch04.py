"""Chapter 4's exercise checks (counting the traffic, the fused kernel): each exercise cell of the solution notebook
fails its check when blank ("not implemented"), passes as solved, and fails with a message naming the pitfall when a
mistake the chapter names is put in."""
import pytest

from check_helpers import (PITFALLS, blank_exercise_fails_with_not_implemented, chapter_exercises, chapter_rows,
                           exercise_source, load, one_case_table, pitfall_fails_naming_it, run_check, solution_passes)

CH04_PITFALLS = chapter_rows(PITFALLS, "ch04")


@pytest.mark.parametrize("ex", chapter_exercises("ch04"))
def test_blank_exercise_fails_with_not_implemented(ex, tmp_path):
    blank_exercise_fails_with_not_implemented(ex, tmp_path)


@pytest.mark.parametrize("ex", chapter_exercises("ch04"))
def test_solution_passes(ex, tmp_path):
    solution_passes(ex, tmp_path)


@pytest.mark.parametrize("ex,pitfall,edits,case,words", CH04_PITFALLS,
                         ids=[f"{p[0]}: {p[1]}" for p in CH04_PITFALLS])
def test_pitfall_fails_naming_it(ex, pitfall, edits, case, words, tmp_path):
    pitfall_fails_naming_it(ex, edits, case, words, tmp_path)


def test_check_output_has_no_raw_floats_or_timings(tmp_path):
    """Checks print verdicts, not numbers that could differ between CPU and GPU."""
    import re

    source = exercise_source("ch04-fused").replace('other=float("-inf")', "other=0.0")
    _, text = run_check("ch04-fused", load("ch04-fused", source, tmp_path))
    assert not re.search(r"\d\.\d{3,}", text), text


@pytest.mark.parametrize("rows,cols", [(1, 4), (3, 5), (2, 16), (4, 33)])
def test_judge_traffic_formula_matches_the_counted_traffic(rows, cols):
    """The ch04 judge answers with a closed form (its sandbox has no memcount): it must equal the counts."""
    from softmax_lab.checks.ch04 import measured_traffic, three_pass_counts

    assert three_pass_counts(rows, cols) == measured_traffic("three_pass", rows, cols)
    assert (rows * cols, rows * cols) == measured_traffic("fused", rows, cols)


def _tables():
    from softmax_lab.checks import ch04

    return [("ch04-traffic", [row[0] for row in ch04.TRAFFIC_TABLE], [], 2 * ch04.JUDGE_FRESH),
            ("ch04-fused", [row[0] for row in ch04.FUSED_TABLE], [ch04.TRAFFIC_CASE, ch04.INT64_CASE],
             ch04.JUDGE_FRESH),
            ("ch04-find-the-bug", [row[0] for row in ch04.FIND_TABLE], [], 0),
            ("ch04-wrapped-rows", [row[0] for row in ch04.WRAP_TABLE], [], ch04.JUDGE_FRESH)]


@pytest.mark.parametrize("ex,names,check_only,fresh", _tables(), ids=[t[0] for t in _tables()])
def test_check_and_judge_read_one_case_table(ex, names, check_only, fresh, tmp_path):
    one_case_table(ex, names, tmp_path, check_only, fresh)


def test_the_judges_traffic_counts_are_the_counted_traffic():
    """The judge's closed-form counts (no kernels in the grader's sandbox) are what memcount counts."""
    from softmax_lab.checks.ch04 import TRAFFIC_TABLE, measured_traffic, traffic_counts

    for _, kernel, _, (rows, cols) in TRAFFIC_TABLE:
        assert traffic_counts(kernel, rows, cols) == measured_traffic(kernel, rows, cols)


def test_the_suspects_pass_the_quick_test_and_a_fixed_kernel_passes_every_layout():
    """The premise of ch04-find-the-bug: each suspect passes its author's quick test, and a layout can only catch a
    real bug (the suspects' kernel with its one line fixed goes wrong on no valid layout)."""
    import numpy as np
    import triton
    import triton.language as tl

    from softmax_lab.checks import suspects

    for name in suspects.SUSPECTS:
        assert "passes the quick test" in suspects.quick_test(name)

    @triton.jit
    def fixed_kernel(out_ptr, in_ptr, in_row_stride, out_row_stride, n_cols, BLOCK: tl.constexpr):
        r = tl.program_id(0).to(tl.int64)
        k = tl.arange(0, BLOCK)
        inside = k < n_cols
        v = tl.load(in_ptr + r * in_row_stride + k, mask=inside, other=0.0)
        total = tl.sum(tl.abs(v), axis=0)
        tl.store(out_ptr + r * out_row_stride + k, v / total, mask=inside)

    rng = np.random.default_rng(0)
    saved = dict(suspects.SUSPECTS)
    suspects.SUSPECTS["fixed"] = fixed_kernel
    try:
        for _ in range(12):
            cols = int(rng.integers(1, 40))
            layout = (int(rng.integers(1, 5)), cols, cols + int(rng.integers(0, 9)), cols + int(rng.integers(0, 9)))
            assert not suspects.goes_wrong("fixed", layout), layout
    finally:
        suspects.SUSPECTS.clear()
        suspects.SUSPECTS.update(saved)


def test_the_judge_simulates_what_the_suspects_do():
    """Check (the real suspects) and judge (their float64 simulation) agree on every layout tried: the corners that
    decide each bug (one row or two, a power of two or not, steps equal or not) and random ones."""
    import numpy as np

    from softmax_lab.checks import suspects

    rng = np.random.default_rng(1)
    layouts = [(rows, cols, cols + gap_in, cols + gap_out) for rows in (1, 2) for cols in (3, 4)
               for gap_in in (0, 2) for gap_out in (0, 3)]
    for _ in range(8):
        cols = int(rng.integers(1, 65))
        layouts.append((int(rng.integers(1, 9)), cols, cols + int(rng.integers(0, 5)), cols + int(rng.integers(0, 5))))
    for layout in layouts:
        for name in suspects.SUSPECTS:
            assert suspects.goes_wrong(name, layout) == suspects.simulate(name, layout, rng), (name, layout)


def test_the_wrapped_row_count_is_what_int32_arithmetic_gives():
    """ch04-wrapped-rows' truth (a closed form, for the judge) against int32 arithmetic itself, on the table's
    launches and on launches whose last row sits right at the boundary."""
    import torch

    from softmax_lab.checks.ch04 import WRAP_TABLE, rows_right

    launches = [(rows, stride) for _, rows, stride in WRAP_TABLE]
    launches += [(-(-2**31 // s) + d, s) for s in (1000, 8191, 8192, 2**20 + 1) for d in (-1, 0, 1)]
    for rows, stride in launches:
        row = torch.arange(rows, dtype=torch.int32)
        exact = (row * torch.tensor(stride, dtype=torch.int32)).to(torch.int64) == row.to(torch.int64) * stride
        assert rows_right(rows, stride) == int(exact.sum()), (rows, stride)
