"""Chapter 2's exercise checks (masked loads and stores, the padding self-test): each exercise cell of the solution
notebook fails its check when blank ("not implemented"), passes as solved, and fails with a message naming the pitfall
when a mistake the chapter names is put in."""
import pytest

from check_helpers import (PITFALLS, blank_exercise_fails_with_not_implemented, chapter_exercises, chapter_rows,
                           one_case_table, pitfall_fails_naming_it, solution_passes)

CH02_PITFALLS = chapter_rows(PITFALLS, "ch02")


@pytest.mark.parametrize("ex", chapter_exercises("ch02"))
def test_blank_exercise_fails_with_not_implemented(ex, tmp_path):
    blank_exercise_fails_with_not_implemented(ex, tmp_path)


@pytest.mark.parametrize("ex", chapter_exercises("ch02"))
def test_solution_passes(ex, tmp_path):
    solution_passes(ex, tmp_path)


@pytest.mark.parametrize("ex,pitfall,edits,case,words", CH02_PITFALLS,
                         ids=[f"{p[0]}: {p[1]}" for p in CH02_PITFALLS])
def test_pitfall_fails_naming_it(ex, pitfall, edits, case, words, tmp_path):
    pitfall_fails_naming_it(ex, edits, case, words, tmp_path)


def test_check_and_judge_read_one_case_table(tmp_path):
    from softmax_lab.checks import ch02

    one_case_table("ch02-masked-load-store", [row[0] for row in ch02.MASK_TABLE], tmp_path, [ch02.TRAFFIC_CASE],
                   ch02.JUDGE_FRESH)
    one_case_table("ch02-padding-self-test", [name for name, _ in ch02.PADDINGS], tmp_path)
