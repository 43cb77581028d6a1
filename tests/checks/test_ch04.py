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
             ch04.JUDGE_FRESH)]


@pytest.mark.parametrize("ex,names,check_only,fresh", _tables(), ids=[t[0] for t in _tables()])
def test_check_and_judge_read_one_case_table(ex, names, check_only, fresh, tmp_path):
    one_case_table(ex, names, tmp_path, check_only, fresh)


def test_the_judges_traffic_counts_are_the_counted_traffic():
    """The judge's closed-form counts (no kernels in the grader's sandbox) are what memcount counts."""
    from softmax_lab.checks.ch04 import TRAFFIC_TABLE, measured_traffic, traffic_counts

    for _, kernel, _, (rows, cols) in TRAFFIC_TABLE:
        assert traffic_counts(kernel, rows, cols) == measured_traffic(kernel, rows, cols)
