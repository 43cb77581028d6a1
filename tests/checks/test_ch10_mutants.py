"""Exercise ch10-schedule (will a launch of cooperating programs finish?): the solution passes in the notebook and in
the grader's judge; schedulers that ignore the room, the tickets or the order fail, saying where the launch
stops."""
from __future__ import annotations

import shutil

import pytest

from softmax_lab.checks import ch10

from conftest import exercise_source, load_exercise

EX = "ch10-schedule"


def finishes(tmp_path, *edits):
    source = exercise_source(EX)
    for old, new in edits:
        assert old in source, f"the solution of {EX} no longer holds {old!r}: update this test"
        source = source.replace(old, new)
    return load_exercise(EX, source, tmp_path).finishes, source


def run(fn, capsys):
    ok = ch10.check_schedule(fn)
    out = capsys.readouterr().out
    return bool(ok), out, [ln for ln in out.splitlines() if ln.startswith("FAIL")]


def test_the_cases_both_finish_and_hang():
    verdicts = {ch10.finishes_rule(r, g, o, t) for _, r, g, o, t in ch10.SCHEDULE_CASES}
    assert verdicts == {True, False}


def test_the_solution_passes(tmp_path, capsys):
    ok, out, _ = run(finishes(tmp_path)[0], capsys)
    assert ok, out


def test_a_blank_cell_scores_nothing(tmp_path, capsys):
    fn = load_exercise(EX, exercise_source(EX, learner=True), tmp_path).finishes
    ok, out, _ = run(fn, capsys)
    assert not ok and f"{EX}: FAILED (0/" in out, out


@pytest.mark.parametrize("edits, words", [
    ([("while to_start and len(running) < resident:", "while to_start:")], "said it finishes, but it hangs"),
    ([("item = n_started if tickets else pid", "item = pid")], "said it hangs, but every program finishes"),
    ([("while to_start and len(running) < resident:", "while to_start and len(running) <= resident:")],
     "said it finishes, but it hangs"),
    ([("            return False  # nobody can finish, and nobody new can start", "            return True")],
     "said it finishes, but it hangs"),
], ids=["no room limit", "tickets ignored", "one program too many", "a hang called finished"])
def test_a_wrong_scheduler_is_named(edits, words, tmp_path, capsys):
    ok, out, fails = run(finishes(tmp_path, *edits)[0], capsys)
    assert not ok, out
    assert any(words in ln for ln in fails), out


def test_a_hang_says_where_it_stops(tmp_path, capsys):
    fn, _ = finishes(tmp_path, ("while to_start and len(running) < resident:", "while to_start:"))
    _, out, fails = run(fn, capsys)
    assert any("every running program waits" in ln and "no room is left" in ln for ln in fails), out


def test_the_judge_runs_fresh_launches(tmp_path):
    if not shutil.which("bwrap"):
        pytest.skip("needs bubblewrap")
    from softmax_lab.grading import judge
    from softmax_lab.grading.runner import Limits

    good = judge.run("", {EX: exercise_source(EX)}, Limits(cell_timeout=60), seed=5)[EX]
    assert good.ok, good.text(EX)
    _, wrong = finishes(tmp_path, ("item = n_started if tickets else pid", "item = pid"))
    bad = judge.run("", {EX: wrong}, Limits(cell_timeout=60), seed=5)[EX]
    assert not bad.ok, bad.text(EX)


def test_a_rule_of_thumb_with_the_notebook_cases_learned_by_heart_fails_the_judge():
    """A reviewer's cheat: the chapter's launches from a table, otherwise 'tickets finish when a row fits; by
    program_id only a sorted order or room for everything'. The grader's fresh launches reject it for (almost)
    every seed."""
    import numpy as np

    table = {(r, g, tuple(o), t): ch10.finishes_rule(r, g, o, t) for _, r, g, o, t in ch10.SCHEDULE_CASES}

    def rule_of_thumb(r, g, o, t):
        if (r, g, tuple(o), t) in table:
            return table[(r, g, tuple(o), t)]
        return r >= g if t else (r >= len(o) or g == 1 or (r >= g and list(o) == sorted(o)))

    caught = sum(any(rule_of_thumb(r, g, o, t) != ch10.finishes_rule(r, g, o, t)
                     for _, r, g, o, t in ch10.fresh_cases(np.random.default_rng(seed))) for seed in range(200))
    assert caught >= 198, caught
