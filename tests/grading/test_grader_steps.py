"""The grader's named steps, each on its own and fast: no sandbox and no kernel, nbval's runs replaced by the
records they would leave (the fixture chapter 90: fx-double in cell 3, its check in 4; fx-kernel in 9, its check
in 10; a demonstration cell 11 that uses both). tests/test_grade*.py grade real notebooks end to end."""
from __future__ import annotations

import ast
import os
import sys
import threading
import time
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))
import test_grade as T

from softmax_lab.grading import blanking, grader, judge, process, runner, scoring, statuses
from softmax_lab.grading.blanking import Runs, run_once, run_with_blanking
from softmax_lab.grading.runner import Limits, RunResult

GRADING = Path(grader.__file__).parent
CHAPTERS = T.fixture_chapters(T.FIXTURES)
CH = CHAPTERS["90"]
# nbval numbers code cells only: solution cell index -> nbval's cell number
SETUP, DOUBLE, DOUBLE_CHECK, KERNEL, KERNEL_CHECK, DEMO = range(6)
EXPECTED = {DOUBLE_CHECK: "PASS  empty list\nPASS  [1, 2, 3]\nfx-double: PASSED (2/2 checks passed)\n",
            KERNEL_CHECK: "".join(o.get("text", "") for o in CH.nb.cells[10].outputs)}


def end(cell: int, status: str = "passed", stdout: str = "", error: dict | None = None, hints=()) -> dict:
    """The record the nbval plugin leaves for a cell that ran to its end."""
    return {"event": "end", "cell": cell, "status": status, "message": "", "stdout": stdout, "stderr": "",
            "display": "", "error": error, "hints": list(hints)}


def clean_run(**changed) -> RunResult:
    """Every cell passed, checks printing the solution's output; ``changed``: cell number -> another record."""
    cells = {n: end(n, stdout=EXPECTED.get(n, "")) for n in range(6)}
    cells.update({int(k[1:]): v for k, v in changed.items()})
    return RunResult(cells=cells, seconds=1.5, log="pytest log")


class FakeRuns:
    """Stands in for runner.run_notebook: hands out the given results in turn and remembers each call."""

    def __init__(self, *results: RunResult):
        self.results, self.calls = list(results), []

    def __call__(self, nb, limits, timeouts, sanitize, exercise_cells):
        self.calls.append({"nb": nb, "limits": limits, "timeouts": timeouts, "exercise_cells": exercise_cells})
        return self.results.pop(0)


def opts(**kw) -> grader.Options:
    kw = {"judge": False, "seed": 7, **kw}
    return grader.Options(limits=Limits(cell_timeout=10, setup_timeout=30, wall_timeout=100), **kw)


def runs_of(monkeypatch, *results, blank=()) -> Runs:
    fake = FakeRuns(*results)
    monkeypatch.setattr(blanking, "run_notebook", fake)
    return run_once(CH, T.pasted(), set(blank), opts(), 100.0)


# ------------------------------------------------------------------------------------------ match the submission


def test_match_submission_returns_the_notebook_and_its_chapter(tmp_path):
    path = T.save(T.pasted(), tmp_path / "alice.ipynb")
    nb, chapter, notes = grader.match_submission(path, "alice.ipynb", CHAPTERS, opts())
    assert chapter is CH and notes == [] and len(nb.cells) > 5


def test_match_submission_finishes_an_unreadable_file_at_once(tmp_path):
    path = tmp_path / "90_grading_fixture.ipynb"
    path.write_text('{"cells": [', encoding="utf-8")
    res = grader.match_submission(path, "bob", CHAPTERS, opts(expected_chapter="90"))
    assert [(r["exercise"], r["status"], r["points"]) for r in res.rows] == [("fx-double", "error", "0"),
                                                                             ("fx-kernel", "error", "0")]


def test_match_submission_another_chapter_is_missing(tmp_path):
    path = T.save(T.pasted(T.CH91), tmp_path / "91_other_fixture.ipynb")
    res = grader.match_submission(path, "carol", CHAPTERS, opts(expected_chapter="90"))
    assert res.chapter is CH and {r["status"] for r in res.rows} == {"missing"}
    assert res.rows[0]["message"] == (f"this notebook is {CHAPTERS['91'].label()}, not {CH.label()}: hand in the "
                                      f"notebook of {CH.label()}")


# ----------------------------------------------------------------------------------------- run with blanking


def test_run_once_grafts_the_learner_cells_with_per_cell_timeouts(monkeypatch):
    runs = runs_of(monkeypatch, clean_run())
    call = blanking.run_notebook.calls[0]
    assert call["exercise_cells"] == [DOUBLE, KERNEL]
    assert call["timeouts"][SETUP] == 30 and call["timeouts"][DOUBLE] == 10  # setup cells get the longer one
    assert call["limits"].wall_timeout == 100.0
    assert runs.count == 1 and runs.seconds == 1.5 and runs.numbers[3] == DOUBLE and not runs.graft.missing


def test_a_hanging_exercise_is_blamed_blanked_and_the_rest_rerun(monkeypatch):
    hang = RunResult(fatal={"cell": DOUBLE, "status": "timeout", "message": ""}, seconds=10.0)
    fake = FakeRuns(hang, clean_run())
    monkeypatch.setattr(blanking, "run_notebook", fake)
    runs = run_with_blanking(CH, T.pasted(), opts())
    assert runs.count == 2 and runs.seconds == 11.5
    assert runs.verdicts["fx-double"][0] == "timeout" and "the exercise cell ran longer than 10 s" in \
        runs.verdicts["fx-double"][1]
    assert "NotImplementedError" in fake.calls[1]["nb"].cells[3].source  # blanked in the rerun
    assert fake.calls[1]["limits"].wall_timeout == 90.0  # what is left of the one budget


def test_a_break_in_a_demonstration_cell_blames_the_exercises_before_it_in_turn(monkeypatch):
    demo = {"cell": DEMO, "status": "died", "message": "the kernel died"}
    fake = FakeRuns(RunResult(fatal=dict(demo)), RunResult(fatal=dict(demo)), clean_run())
    monkeypatch.setattr(blanking, "run_notebook", fake)
    runs = run_with_blanking(CH, T.pasted(), opts())
    # fx-kernel (the latest before cell 11) first; still broken without it, so it is cleared and fx-double blamed
    assert runs.count == 3 and set(runs.verdicts) == {"fx-double"}
    assert "cell 11, after the exercise" in runs.verdicts["fx-double"][1]
    assert "NotImplementedError" not in fake.calls[2]["nb"].cells[9].source


def test_a_break_no_learner_code_explains_is_the_graders_trouble(monkeypatch):
    setup = RunResult(fatal={"cell": SETUP, "status": "died", "message": "the kernel died"}, log="a\nb\nlast line")
    monkeypatch.setattr(blanking, "run_notebook", FakeRuns(setup))
    runs = run_with_blanking(CH, T.pasted(), opts())
    assert runs.count == 1
    for status, msg in runs.verdicts.values():
        assert status == "error" and msg.startswith(blanking.GRADER_TROUBLE) and "grader log: last line" in msg


def test_the_checks_stop_a_case_before_the_cells_limit_strikes():
    """--timeout 60 gave the checks' own limit (60 s a case) and the cell's at once: the check was interrupted."""
    assert [runner.check_seconds(t) for t in (120, 300, 60, 10)] == ["60", "60", "30", "30"]
    T.ensure_bwrap()
    cmd, _, _ = runner.sandboxed_command(Path("/tmp"), Limits(cell_timeout=60), {}, None)
    at = cmd.index("SOFTMAX_LAB_CHECK_SECONDS")
    assert cmd[at - 1:at + 2] == ["--setenv", "SOFTMAX_LAB_CHECK_SECONDS", "30"]


def test_a_module_the_sandbox_lacks_is_named_not_the_memory_cap(monkeypatch):
    """pytest could not load the grader's plugin (nbval missing in the sandbox: the wheel's site-packages was once
    left out): the rows name the module, not a memory cap too low."""
    log = ('ImportError: Error importing plugin "softmax_lab.grading.nbval_plugin": No module named \'nbval\'')
    broken = RunResult(fatal={"cell": None, "status": "died", "message": "the grading process exited with status 1"},
                       log=log)
    monkeypatch.setattr(blanking, "run_notebook", FakeRuns(broken))
    runs = run_with_blanking(CH, T.pasted(), opts())
    for status, msg in runs.verdicts.values():
        assert status == "error" and msg.startswith(blanking.GRADER_TROUBLE), msg
        assert "could not import a module it needs" in msg and "'nbval'" in msg and "memory" not in msg, msg


def test_one_budget_covers_the_reruns(monkeypatch):
    slow = RunResult(fatal={"cell": DOUBLE, "status": "timeout", "message": ""}, seconds=99.5)
    fake = FakeRuns(slow)
    monkeypatch.setattr(blanking, "run_notebook", fake)
    runs = run_with_blanking(CH, T.pasted(), opts())
    assert len(fake.calls) == 1  # 0.5 s left: no rerun
    assert runs.verdicts["fx-kernel"] == ("timeout", "not graded: the runs of this notebook used up its time budget "
                                                     "(100 s for all runs together)")


def test_ctrl_c_in_a_run_records_nothing(monkeypatch):
    monkeypatch.setattr(blanking, "run_notebook", FakeRuns(RunResult(fatal={"cell": None, "status": "stopped",
                                                                            "message": ""})))
    with pytest.raises(KeyboardInterrupt):
        run_with_blanking(CH, T.pasted(), opts())


# ----------------------------------------------------------------------------------------- decide from cells


def test_decide_from_cells_passed_failed_and_not_implemented(monkeypatch):
    fails = "PASS  empty list\nFAIL  [1, 2, 3]: got [1, 2, 3]\nfx-double: FAILED (1/2 checks passed)\n"
    nie = {"ename": "NotImplementedError", "evalue": "", "traceback": ""}
    runs = runs_of(monkeypatch, clean_run(n2=end(DOUBLE_CHECK, "mismatch", fails),
                                          n3=end(KERNEL, "raised", error=nie), n4=end(KERNEL_CHECK, "raised")))
    decided = statuses.decide_from_cells(CH, runs, 100)
    status, msg, ck = decided["fx-double"]
    assert status == "failed" and msg == "FAIL  [1, 2, 3]: got [1, 2, 3]\nfx-double: FAILED (1/2 checks passed)"
    assert ck is runs.run.cells[DOUBLE_CHECK]  # kept for --partial-credit
    assert decided["fx-kernel"][:2] == ("error", "the exercise cell raised not implemented yet - replace `raise "
                                                 "NotImplementedError` with your code")


def test_decide_from_cells_runs_verdicts_and_setup_trouble_come_first(monkeypatch):
    boom = {"ename": "ModuleNotFoundError", "evalue": "No module named 'x'", "traceback": ""}
    runs = runs_of(monkeypatch, clean_run(n0=end(SETUP, "raised", error=boom)))
    runs.verdicts = {"fx-double": ("timeout", "timed out")}
    decided = statuses.decide_from_cells(CH, runs, 100)
    assert decided["fx-double"] == ("timeout", "timed out", None)
    assert decided["fx-kernel"][0] == "error" and "setup cell 1 failed: ModuleNotFoundError" in decided["fx-kernel"][1]


def test_decide_from_cells_missing_exercise(monkeypatch):
    nb = T.pasted()
    del nb.cells[T.index_of(nb, "exercise:", "fx-kernel")]
    monkeypatch.setattr(blanking, "run_notebook", FakeRuns(clean_run()))
    runs = run_once(CH, nb, set(), opts(), 100.0)
    assert statuses.decide_from_cells(CH, runs, 100)["fx-kernel"][0] == "missing"


# ------------------------------------------------------------------------------------------- judge and score


def test_judge_exercises_only_when_asked_and_always_with_a_seed(monkeypatch):
    runs = runs_of(monkeypatch, clean_run())
    decided = statuses.decide_from_cells(CH, runs, 100)
    assert scoring.judge_exercises(CH, runs, decided, opts()) == ({}, 7)
    seen = {}
    monkeypatch.setattr(judge, "judges", lambda chapter=None: {"fx-kernel": object()})
    monkeypatch.setattr(judge, "run", lambda ch, wanted, limits, seed: seen.update(wanted) or {})
    scoring.judge_exercises(CH, runs, decided, opts(judge=True))
    assert list(seen) == ["fx-kernel"] and "row_max_kernel" in seen["fx-kernel"]  # the learner's source


def test_score_the_judge_takes_points_away_and_hints_cap_them(monkeypatch):
    runs = runs_of(monkeypatch, clean_run(n1=end(DOUBLE, hints=[("fx-double", 4)])))
    decided = statuses.decide_from_cells(CH, runs, 100)
    wrong = judge.Verdict()
    wrong.add("all-negative row of 3", "max 0.0, expected -97.1")
    rows = scoring.score("alice", CH, T.pasted(), runs, decided, {"fx-kernel": wrong}, ["a note"], opts())
    double, kernel = rows
    assert (double["status"], double["points"], double["hints"]) == ("passed", "1", "4")  # half after the answer
    assert "note: a note" in double["message"]
    assert (kernel["status"], kernel["points"]) == ("failed", "0")
    assert "grader's own launch" in kernel["message"] and "FAIL  all-negative row of 3" in kernel["message"]


def test_partial_credit_from_the_judge_or_the_checks_last_line():
    half = judge.Verdict()
    half.add("a", "")
    half.add("b", "wrong")
    assert scoring.partial_fraction(half, None, "fx-kernel") == 0.5
    ck = {"stdout": "FAIL  x\nfx-kernel: FAILED (2/3 checks passed)\n"}
    assert scoring.partial_fraction(None, ck, "fx-kernel") == pytest.approx(2 / 3)
    assert scoring.partial_fraction(None, {"stdout": ck["stdout"] + "print after\n"}, "fx-kernel") == 0.0
    assert scoring.partial_fraction(None, {"stdout": "fx-kernel: FAILED (3/3 checks passed)"}, "fx-kernel") == 0.99


def test_grade_notebook_is_the_steps_in_order(monkeypatch, tmp_path):
    monkeypatch.setattr(blanking, "run_notebook", FakeRuns(clean_run()))
    path = T.save(T.pasted(), tmp_path / "alice.ipynb")
    res = grader.grade_notebook(path, "alice", CHAPTERS, opts())
    assert [(r["exercise"], r["status"], r["points"]) for r in res.rows] == [("fx-double", "passed", "2"),
                                                                             ("fx-kernel", "passed", "3")]
    assert (res.runs, res.seconds, res.seed, res.log) == (1, 1.5, 7, "pytest log") and "fx-why" in res.answers


# --------------------------------------------------------------------------------------------- run_notebook


def test_fatal_of_names_why_a_run_broke_off():
    limits = Limits(memory_mb=64)
    res = RunResult(cells={2: end(2, "timeout")})
    assert runner.fatal_of(res, [2], False, None, ("wall", "too long"), None, limits, True)["cell"] == 2
    assert runner.fatal_of(RunResult(), [1], False, None, ("memory", "used"), None, limits, True) == {
        "cell": 1, "status": "memory", "message": "used"}
    died = runner.fatal_of(RunResult(), [3], False, None, None, 137, limits, True)
    assert died == {"cell": 3, "status": "died", "message": "the grading process was killed by signal 9"}
    oom = runner.fatal_of(RunResult(oom_kills=1), [3], False, None, None, 137, limits, True)
    assert oom["status"] == "memory" and "64 MB" in oom["message"]
    assert runner.fatal_of(RunResult(), [], True, "bad json", None, 1, limits, True)["status"] == "setup-error"
    assert runner.fatal_of(RunResult(), [], True, None, None, 0, limits, False) is None


def test_read_records_skips_what_is_not_a_record():
    res = RunResult()
    lines = ['{"event": "start", "cell": 0}', "garbage", '{"event": "end", "cell": 0, "status": "passed"}',
             '{"event": "start", "cell": 1}', '{"event": "end", "cell": 1, "status": "owned"}',
             '{"event": "finished"}']
    assert runner.read_records(res, lines) == ([0, 1], True, None)
    assert list(res.cells) == [0]


def test_watch_kills_a_run_past_its_wall_clock_limit():
    r, w = os.pipe()
    limits = Limits(wall_timeout=0.3, memory_mb=0, cgroup=False)
    child = process.start(["sleep", "30"], limits, env={"PATH": "/usr/bin:/bin"}, cwd="/", out=w, err=w)
    t0 = time.monotonic()
    killed = runner.watch(child, limits, t0)
    os.close(r)
    assert killed == ("wall", "the whole notebook ran longer than 0.3 s") and child.proc.returncode is not None
    assert child.finish() == 0
    assert time.monotonic() - t0 < 5


def test_the_sandboxed_and_plain_commands_run_the_same_pytest(tmp_path):
    limits = Limits(sandbox=False)
    scratch, grader_dir = tmp_path, tmp_path / "in"
    grader_dir.mkdir()
    (grader_dir / "submission.ipynb").write_text("{}")
    cmd, cwd, env = runner.unsandboxed_command(scratch, grader_dir, limits, {"fd": 5}, {"PATH": "/usr/bin"})
    assert cmd[1:3] == ["-m", "pytest"] and "--nbval-lax" in cmd and cwd == str(scratch)
    assert env["HOME"] == str(tmp_path / "home") and '"fd": 5' in env["SOFTMAX_LAB_GRADE_CONFIG"]


# --------------------------------------------------------------------------------------------- judge harness


def test_harness_watch_stops_a_harness_past_its_time():
    r, w = os.pipe()
    e_r, e_w = os.pipe()
    child = process.start(["sleep", "30"], Limits(cgroup=False), env={"PATH": "/usr/bin:/bin"}, cwd="/", out=w,
                          err=e_w)
    out = type("Drain", (), {"over": threading.Event()})()
    trouble = judge._watch_harness(child, out, 0.2, 2**20)
    child.finish()
    for fd in (r, e_r):
        os.close(fd)
    assert trouble == "the grader's run of your code took longer than 0.2 s"


def test_harness_trouble_after_it_ended():
    out = type("Drain", (), {"over": threading.Event()})()
    limits = Limits(memory_mb=64)
    assert judge._harness_trouble(0, 0, out, None, limits, 2**20) == ""
    assert judge._harness_trouble(0, 1, out, None, limits, 2**20).endswith("more than 64 MB of memory")
    assert judge._harness_trouble(3, 0, out, None, limits, 2**20).endswith("ended with status 3")
    out.over.set()
    assert judge._harness_trouble(0, 0, out, None, limits, 2**20).endswith("sent back more than 2 MB")


# ------------------------------------------------------------------------------------------------ the layout


def _functions():
    for path in sorted(GRADING.glob("*.py")):
        for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
            if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)):
                yield path.name, node


def test_no_function_in_grading_is_over_60_lines():
    long = [f"{name}:{node.lineno} {node.name} ({node.end_lineno - node.lineno + 1} lines)"
            for name, node in _functions() if node.end_lineno - node.lineno + 1 > 60]
    assert not long, long


STEPS = {"grader.py": ["grade_notebook", "match_submission"],
         "blanking.py": ["run_with_blanking", "run_once", "blame_for_break"],
         "statuses.py": ["decide_from_cells", "exercise_status"], "scoring.py": ["judge_exercises", "score"],
         "runner.py": ["run_notebook", "write_scratch", "sandboxed_command", "unsandboxed_command", "supervise",
                       "watch", "read_records", "fatal_of"],
         "judge.py": ["_run_group", "_write_inputs", "_case_spec", "_harness_command", "_run_harness",
                      "_watch_harness", "_harness_trouble"]}


def test_every_step_is_short_and_says_what_it_does():
    found = {(name, node.name): node for name, node in _functions()}
    for module, names in STEPS.items():
        for step in names:
            node = found[module, step]
            doc = ast.get_docstring(node) or ""
            assert doc and len(doc.splitlines()[0]) <= 120, (module, step)
            assert node.end_lineno - node.lineno + 1 <= 50, (module, step)


def test_the_grader_names_this_python_without_dot_dot(monkeypatch):
    # `cd workspace && ../.venv/bin/python -c "...check(...)"`: the sandbox does not bind workspace/, so a path
    # through it was "not found" there (exit 127, blamed on the grader). The venv's own path, symlinks kept.
    import os
    import sys

    from softmax_lab.grading import sandbox
    from softmax_lab.grading.runner import pytest_command

    real = sys.executable
    monkeypatch.setattr(sys, "executable", os.path.join(os.path.dirname(real), "..", "bin", os.path.basename(real)))
    assert sandbox.python() == os.path.abspath(real) and ".." not in sandbox.python()
    assert pytest_command("ini", "root", "cfg", 10, "nb.ipynb")[0] == sandbox.python()


def test_kept_scratch_folders_outlive_other_graders_clean_up(tmp_path, monkeypatch):
    """--keep-scratch: a kept folder, even of a grader that has ended, is not swept by the next grader's start."""
    from softmax_lab.grading import sandbox

    monkeypatch.setattr(sandbox, "scratch_parent", lambda: tmp_path)
    kept, plain = sandbox.new_scratch(keep=True), sandbox.new_scratch()
    dead = 2 ** 22 + 12345  # (a pid no process has: the grader that made them is gone)
    for folder in (kept, plain):
        folder.rename(folder.with_name(folder.name.replace(f"-{os.getpid()}-", f"-{dead}-")))
    old = time.time() - 60
    for folder in tmp_path.iterdir():
        os.utime(folder, (old, old))
    assert sandbox.clean_stale_scratch() == 1
    assert [p.name.startswith(f"{sandbox.SCRATCH_PREFIX}kept-{dead}-") for p in tmp_path.iterdir()] == [True]


def test_answers_and_model_answers_without_the_templates_lead_line():
    """Every answer cell starts with "**Your answer:**" (the template): the manual-grading sheets showed it before
    every learner's answer and every model answer (helper-74)."""
    import nbformat

    from softmax_lab.course import registry
    from softmax_lab.grading.chapters import answers, load_chapters
    from softmax_lab.grading.report import _strip_markers

    chapter = load_chapters(T.SOLUTIONS, registry.load())["01"]
    q = chapter.questions[0]
    assert q.model_answer.lstrip().startswith("**Your answer:**")
    cell = nbformat.v4.new_markdown_cell("**Your answer:**\n\nThe max is subtracted first.")
    cell.metadata["tags"] = [f"answer:{q.id}"]
    assert answers(chapter, nbformat.v4.new_notebook(cells=[cell]))[q.id] == "The max is subtracted first."
    assert not _strip_markers(q.model_answer).startswith("**Your answer:**") and _strip_markers(q.model_answer)


def test_the_manual_sheet_follows_the_notebook_and_says_when_nothing_is_asked():
    """helper-76: questions came in alphabetical order, each heading twice ("**Question**" above the prompt's own
    "**Question.**"), and a chapter without questions gave a sheet with nothing to say."""
    from softmax_lab.course import registry
    from softmax_lab.grading.chapters import load_chapters
    from softmax_lab.grading.report import manual_markdown

    chapters = load_chapters(T.SOLUTIONS, registry.load())
    ids = [q.id for q in chapters["02"].questions]
    entries = [dict(chapter="02", question=qid, submission="ann/02_masks_and_padding.ipynb", max_points=1,
                    answer="mine") for qid in sorted(ids, reverse=True)]
    sheet = manual_markdown(entries, chapters)
    assert [sheet.index(f"## {qid} ") for qid in ids] == sorted(sheet.index(f"## {qid} ") for qid in ids)
    assert "**Question**\n\n**Question." not in sheet and "**Rubric**\n\n**Rubric" not in sheet
    assert "No free-text answers to grade" in manual_markdown([], chapters) and "No free-text" not in sheet
    q = next(q for ch in chapters.values() for q in ch.questions if q.prompt.startswith("#"))  # chapters 05-10
    late = manual_markdown([dict(chapter=q.id[2:4], question=q.id, submission="ann/x.ipynb", max_points=1,
                                 answer="")], chapters)
    assert "\n#" not in late.replace("\n## ", "").replace("\n### ann", "") and "**Question" in late


def test_points_entered_before_the_lead_line_was_taken_out_still_count(tmp_path):
    """Sheets written before answers lost their "**Your answer:**" line keep their hand-graded points (helper-77)."""
    import csv as csv_module

    from softmax_lab.grading.chapters import without_lead
    from softmax_lab.grading.gradebook import read_manual_points

    sheet = tmp_path / "g.manual.csv"
    with open(sheet, "w", newline="", encoding="utf-8") as f:
        w = csv_module.writer(f)
        w.writerow(["submission", "chapter", "question", "points", "max_points", "answer", "veto"])
        w.writerow(["ann/01.ipynb", "01", "ch01-q", "1", "1", "**Your answer:**\n\nThe max goes first.", ""])
    points, _ = read_manual_points(sheet)
    assert points == {("ann/01.ipynb", "ch01-q", "The max goes first."): "1"}
    assert without_lead("**Your answer:**\nYOUR ANSWER HERE") == "YOUR ANSWER HERE" and without_lead(" x ") == "x"
