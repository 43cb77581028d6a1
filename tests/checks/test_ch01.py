"""Chapter 1's exercise checks (the stable row softmax, the shift trace, counting non-finite values): each exercise cell
of the solution notebook fails its check when blank ("not implemented"), passes as solved, and fails with a message
naming the pitfall when a mistake the chapter names is put in."""
import pytest

from check_helpers import (PITFALLS, blank_exercise_fails_with_not_implemented, chapter_exercises, chapter_rows,
                           one_case_table, pitfall_fails_naming_it, solution_passes)

CH01_PITFALLS = chapter_rows(PITFALLS, "ch01")


@pytest.mark.parametrize("ex", chapter_exercises("ch01"))
def test_blank_exercise_fails_with_not_implemented(ex, tmp_path):
    blank_exercise_fails_with_not_implemented(ex, tmp_path)


@pytest.mark.parametrize("ex", chapter_exercises("ch01"))
def test_solution_passes(ex, tmp_path):
    solution_passes(ex, tmp_path)


@pytest.mark.parametrize("ex,pitfall,edits,case,words", CH01_PITFALLS,
                         ids=[f"{p[0]}: {p[1]}" for p in CH01_PITFALLS])
def test_pitfall_fails_naming_it(ex, pitfall, edits, case, words, tmp_path):
    pitfall_fails_naming_it(ex, edits, case, words, tmp_path)


def _tables():
    from softmax_lab.checks import ch01

    return [("ch01-stable-row", [row[0] for row in ch01.ROW_TABLE], [ch01.TRAFFIC_CASE], ch01.JUDGE_FRESH),
            ("ch01-shift-trace", [row[0] for row in ch01.SHIFT_TABLE], [ch01.NUMBERS_CASE], 0),
            ("ch01-count-nonfinite", [row[0] for row in ch01.COUNT_TABLE], [ch01.NUMBERS_CASE], 0)]


@pytest.mark.parametrize("ex,names,check_only,fresh", _tables(), ids=[t[0] for t in _tables()])
def test_check_and_judge_read_one_case_table(ex, names, check_only, fresh, tmp_path):
    one_case_table(ex, names, tmp_path, check_only, fresh)


# ------------------------------------------------ predictions are numbers: what code_in_source lets through

NUMBERS = '''
def predicted(row):
    """A docstring."""
    table = {"a": [math.inf, -math.inf, float("nan"), float("-inf"), 1 / 3, -2000.0, True]}
    if row == "a" or row in ("b", "c"):
        return table[row]
    raise ValueError(f"no row {row}")
'''


@pytest.mark.parametrize("body, words", [
    ("return [float(torch.tensor(0.0).exp())]", "runs `float(torch.tensor(0.0).exp())`"),
    ("return [math.exp(0.0)]", "runs `math.exp(0.0)`"),
    ("return [v / 3 for v in (1.0, 1.0, 1.0)]", "runs `[v / 3 for v in (1.0, 1.0, 1.0)]`"),
    ("return ROWS[row]", "reads ROWS, a name from outside it"),
    ("import numpy\n    return [0.0]", "runs `import numpy`"),
    ("return [max(0.0, 1.0)]", "runs `max(0.0, 1.0)`"),
])
def test_code_in_a_prediction_is_refused(body, words):
    from softmax_lab.checks import ch01

    assert ch01.code_in_source(NUMBERS, "predicted") == ""
    said = ch01.code_in_source(f"def predicted(row):\n    {body}\n", "predicted")
    assert words in said and "must be numbers written inside the function" in said, said


def test_a_blank_prediction_is_not_implemented():
    from softmax_lab.checks import ch01

    with pytest.raises(NotImplementedError):
        ch01.code_in_source('def predicted(row):\n    raise NotImplementedError("exercise")\n', "predicted")
