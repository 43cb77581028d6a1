"""What the mutant tests of every chapter share: run a check, and assert it passes or fails naming the mistake."""
import triton

from check_helpers import check_output, exercise_source, load, run_check
from softmax_lab.checks import ch00, ch01, ch02, ch04
from softmax_lab.checks._pitfalls import softmax_problem


def run(check, *args, capsys):
    ok = check(*args)
    return bool(ok), capsys.readouterr().out


def fails_naming(check, args, exercise, words, capsys):
    ok, out = run(check, *args, capsys=capsys)
    assert not ok, out
    assert out.strip().splitlines()[-1].startswith(f"{exercise}: FAILED"), out
    fails = [ln for ln in out.splitlines() if ln.startswith("FAIL ")]
    for w in words:
        assert any(w in ln for ln in fails), f"no FAIL line mentions {w!r}:\n{out}"
    return out


def passes(check, args, exercise, capsys):
    ok, out = run(check, *args, capsys=capsys)
    assert ok and "FAIL " not in out, out
    assert out.strip().splitlines()[-1].startswith(f"{exercise}: PASSED"), out


def values_only(launch) -> list[str]:
    """What the chapter's kernel checks verified before: output values on contiguous boundary shapes
    (chapter 4's cases), output poisoned first. A mutant of the property passes this."""
    return [p for _, v, step in ch04.FUSED_CASES if step is None
            if (p := softmax_problem(launch, v, triton.next_power_of_2))]


# --------------------------------------------- a mutant of an exercise cell of a solution notebook (chapters 0-4)

# The cases each check had before it checked the property its chapter teaches (their names): a mutant that
# passes all of them passed the old check.
OLD_CASES = {
    "ch00-double": [f"vector of {n}" for n in ch00.SIZES],
    "ch01-stable-row": [name for name, _ in ch01.ROW_CASES if name != ch01.WIDE_ROW],
    "ch02-masked-load-store": [name for name, _ in ch02.MASK_CASES],
    "ch04-fused": [name for name, _, _ in ch04.FUSED_CASES],
}


def failing_line(text: str, case: str) -> str | None:
    return next((ln for ln in text.splitlines() if ln.startswith(f"FAIL  {case}:")), None)


def mutate(ex: str, edits) -> str:
    source = exercise_source(ex)
    for old, new in edits:
        assert old in source, f"the solution of {ex} no longer contains {old!r}: update this test"
        source = source.replace(old, new)
    return source


def mutant_passed_the_old_cases_and_is_killed_now(ex, mutant, edits, case, words, tmp_path):
    ok, text = run_check(ex, load(ex, mutate(ex, edits), tmp_path), grouped=False)
    assert not ok, text
    for old in OLD_CASES[ex]:  # today's check (these cases) passed it
        assert f"PASS  {old}" in text.splitlines(), f"{mutant}: old case {old!r} no longer passes:\n{text}"
    line = failing_line(text, case)
    assert line is not None and words in line, f"{mutant}: {case!r} should fail saying {words!r}:\n{text}"


def new_exercise_mutant_is_killed(ex, mutant, edits, case, words, tmp_path):
    ok, text = run_check(ex, load(ex, mutate(ex, edits), tmp_path), grouped=False)
    assert not ok, text
    line = failing_line(text, case)
    assert line is not None and words in line, f"{mutant}: {case!r} should fail saying {words!r}:\n{text}"


def named_pitfall_is_caught(ex, edits, case, words, tmp_path):
    ok, text = run_check(ex, load(ex, mutate(ex, edits), tmp_path), grouped=False)
    line = failing_line(text, case)
    assert not ok and line is not None and words in line, text


# ----------------------------------------------- a mutant of a stand-in for the learner's function (chapters 5-8)


def fail_lines(out):
    return [line for line in out.splitlines() if line.startswith("FAIL")]


def assert_only_new_cases_fail(check, fn, new_case_words, message_words, capsys):
    """The mutant fails, every FAIL line is one of the new cases (so the old check passed it), and the
    message names the mistake."""
    ok, out = check_output(check, fn, capsys)
    assert not ok, out
    fails = fail_lines(out)
    assert fails, out
    for line in fails:
        assert any(w in line for w in new_case_words), f"an old case failed too:\n{line}\n{out}"
    for w in message_words:
        assert any(w in line for line in fails), f"no FAIL line says {w!r}:\n{out}"


def assert_fails_saying(check, fn, message_words, capsys):
    ok, out = check_output(check, fn, capsys)
    assert not ok, out
    for w in message_words:
        assert any(w in line for line in fail_lines(out)), f"no FAIL line says {w!r}:\n{out}"


def assert_passes(check, fn, exercise, capsys):
    ok, out = check_output(check, fn, capsys)
    assert ok and "FAIL" not in out, out
    assert out.strip().splitlines()[-1].startswith(f"{exercise}: PASSED")


def assert_blank(check, fn, exercise, capsys):
    ok, out = check_output(check, fn, capsys)
    assert not ok
    assert all("not implemented yet" in line for line in fail_lines(out)), out
    assert out.strip().splitlines()[-1].startswith(f"{exercise}: FAILED (0/")
