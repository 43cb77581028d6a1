"""`softmax-lab grade` / `softmax-lab check`: the grader against a tiny fixture chapter, hostile submissions
included, and against real chapters once they exist.

Fixture chapters (tests/fixtures/grading/solutions, regenerate with make_fixtures.py there): chapter 90 has a
pure-Python exercise (fx-double, 2 points), a free-text question, and a tiny Triton kernel with a masked load
(fx-kernel, 3 points); chapter 91 has one exercise. The submissions are made here, from the learner version
that `softmax-lab build` makes, so each test says exactly what the learner did.

Most hostile cases are graded in ONE `grade --jobs 2` run (module fixture): besides each verdict, that shows
that no submission takes another one down. Short timeouts keep it to about a minute on 2 CPU cores.
"""
from __future__ import annotations

import csv
import os
import time
from pathlib import Path

import nbformat
import pytest

import softmax_lab

from conftest import GRADING_FIXTURES as FIXTURES, GRADING_REGISTRY, ROOT
from softmax_lab import cli
from softmax_lab.grading.gradebook import default_feedback
from softmax_lab.course import registry
from softmax_lab.course.build import learner_notebook
from softmax_lab.course.notebook import tag_value
from softmax_lab.grading.rows import COLUMNS
from softmax_lab.grading.runner import Limits, run_notebook

CH90 = FIXTURES / "90_grading_fixture.ipynb"
CH91 = FIXTURES / "91_other_fixture.ipynb"
FAST = ["--timeout", "10", "--setup-timeout", "120", "--notebook-timeout", "240"]


def _with_registry(argv) -> list[str]:
    """Solutions other than the course's (the fixture chapters) come with the fixtures' registry."""
    argv = [str(a) for a in argv]
    if "--solutions" in argv and "--registry" not in argv and Path(argv[argv.index("--solutions") + 1]) != SOLUTIONS:
        argv += ["--registry", str(GRADING_REGISTRY)]
    return argv


def grade_main(argv) -> int:
    """`softmax-lab grade ARGV`."""
    return cli.main(["grade", *_with_registry(argv)])


def check_main(argv) -> int:
    """`softmax-lab check ARGV`."""
    return cli.main(["check", *_with_registry(argv)])


def fixture_chapters(solutions: Path):
    from softmax_lab.grading.chapters import load_chapters

    return load_chapters(solutions, registry.load(GRADING_REGISTRY))


def ensure_bwrap() -> None:
    """The grader runs every submission in bubblewrap: install Debian's package when missing (as root, like
    tests/ui installs chromium); elsewhere skip with the command to run."""
    import shutil
    import subprocess

    if shutil.which("bwrap"):
        return
    if os.geteuid() == 0 and shutil.which("apt-get"):
        import fcntl

        env = dict(os.environ, DEBIAN_FRONTEND="noninteractive")
        with open("/tmp/softmax-lab-bwrap-install.lock", "w") as lock:  # pytest-xdist workers: one at a time
            fcntl.flock(lock, fcntl.LOCK_EX)
            if not shutil.which("bwrap"):
                install = ["apt-get", "install", "-y", "-q", "bubblewrap"]
                if subprocess.run(install, env=env, capture_output=True).returncode:  # a bare image: lists first
                    subprocess.run(["apt-get", "update", "-q"], env=env, capture_output=True)
                    subprocess.run(install, env=env, capture_output=True)
    if not shutil.which("bwrap"):
        pytest.skip("bubblewrap is not installed (apt-get install -y bubblewrap)")
    from softmax_lab.grading import sandbox

    try:
        sandbox.check_works()
    except sandbox.SandboxMissing as err:  # e.g. a container without user or mount namespaces
        pytest.skip(str(err))


@pytest.fixture(scope="module", autouse=True)
def _sandbox_and_fixture_judges():
    ensure_bwrap()
    import sys

    from softmax_lab.grading import judge

    sys.path.insert(0, str(FIXTURES.parent))
    import judges as fixture_judges

    judge.REGISTRY.update(fixture_judges.JUDGES)


# ------------------------------------------------------------------------------------------------ helpers


def solution(path=CH90):
    return nbformat.read(str(path), as_version=4)


def blank(path=CH90):
    return learner_notebook(solution(path))


def index_of(nb, prefix, ident):
    return next(k for k, c in enumerate(nb.cells) if tag_value(c, prefix) == ident)


def paste_solutions(nb, sol):
    """Copy each exercise and answer cell's source from the solution ``sol`` into the learner ``nb``."""
    for cell in nb.cells:
        for prefix in ("exercise:", "answer:"):
            ident = tag_value(cell, prefix)
            if ident:
                cell.source = sol.cells[index_of(sol, prefix, ident)].source
    return nb


def pasted(path=CH90):
    """The learner notebook with the solutions pasted into its exercise cells."""
    return paste_solutions(blank(path), solution(path))


def set_exercise(nb, ident, source):
    nb.cells[index_of(nb, "exercise:", ident)].source = source
    return nb


def solution_source(ident, path=CH90):
    sol = solution(path)
    return sol.cells[index_of(sol, "exercise:", ident)].source


def save(nb, path: Path) -> Path:
    path.parent.mkdir(parents=True, exist_ok=True)
    nbformat.write(nb, str(path))
    return path


def read_rows(path: Path) -> list[dict]:
    with open(path, newline="", encoding="utf-8") as f:
        reader = csv.DictReader(f)
        assert reader.fieldnames == COLUMNS
        return list(reader)


def by_key(rows):
    return {(r["submission"].split("/")[0], r["exercise"]): r for r in rows}


# -------------------------------------------------------------------------------------- the hostile folder

KERNEL_OK = solution_source("fx-kernel")
DOUBLE_OK = solution_source("fx-double")
PITFALL = KERNEL_OK.replace('other=float("-inf")', "other=0.0")
assert PITFALL != KERNEL_OK


def hint_output(ident: str, level: int):
    """The output a shown hint leaves in the notebook (softmax_lab.hints; metadata as grading/hints.py reads)."""
    return nbformat.v4.new_output("display_data", data={"text/markdown": f"**Hint {level}** for {ident}"},
                                  metadata={"softmax_lab": {"hint": {"exercise": ident, "level": level}}})


def make_submissions(folder: Path) -> None:
    """One folder per learner, each holding a notebook named like the chapter (the documented layout)."""
    nbname = "90_grading_fixture.ipynb"
    save(pasted(), folder / "good" / nbname)
    save(blank(), folder / "blank" / nbname)
    # An exercise that raises, and the seed pitfall (pad with 0 instead of -inf) in the other.
    nb = set_exercise(pasted(), "fx-double", 'raise ValueError("boom")')
    save(set_exercise(nb, "fx-kernel", PITFALL), folder / "raises" / nbname)
    # An endless loop: fx-double times out; fx-kernel is still graded (rerun without the culprit).
    save(set_exercise(pasted(), "fx-double", "while True:\n    pass"), folder / "loop" / nbname)
    # Killing the kernel: os._exit in one exercise, a segfault through ctypes in the other.
    nb = set_exercise(pasted(), "fx-double", "import os\nos._exit(3)")
    save(set_exercise(nb, "fx-kernel", KERNEL_OK + "\n\nimport ctypes\nctypes.string_at(0)"),
         folder / "crash" / nbname)
    # Memory without bound (fails against the data-size cap with MemoryError).
    # The hog is a function's local, so the memory comes back once MemoryError ends it and the next exercise can
    # run (a hog kept in a global leaves the kernel with nothing, and later cells fail for want of memory).
    # bytes(n) is calloc'd and never touched: the cap counts it at once, so MemoryError comes in milliseconds
    # however loaded the machine is (bytearray(n) writes every page: 3 GB of page faults took past the 10 s cell
    # timeout on a busy 2-core CI host). Touched memory: test_memory_watchdog_without_address_space_limit.
    save(set_exercise(pasted(), "fx-double",
                      "def grow():\n    hog = []\n    while True:\n        hog.append(bytes(2**27))\n\ngrow()"),
         folder / "memory" / nbname)
    # Deletes and overwrites everything in its working directory and the folder above.
    vandal = DOUBLE_OK + (
        "\n\nimport os, shutil\n"
        "for f in os.listdir('.'):\n"
        "    shutil.rmtree(f, ignore_errors=True) if os.path.isdir(f) else os.remove(f)\n"
        "for f in os.listdir('..'):\n"
        "    if os.path.isfile(os.path.join('..', f)):\n"
        "        os.remove(os.path.join('..', f))\n"
        "for f in ('gradebook.csv', '../gradebook.csv', '../conftest.py', 'submission.ipynb', '../pytest.log'):\n"
        "    open(f, 'w').write('overwritten')\n")
    save(set_exercise(pasted(), "fx-double", vandal), folder / "vandal" / nbname)
    # Wrong answers, with the check cells edited to print PASSED (fx-double) and deleted (fx-kernel).
    nb = set_exercise(set_exercise(blank(), "fx-double", "def double(xs):\n    return xs"), "fx-kernel", PITFALL)
    check = nb.cells[index_of(nb, "check:", "fx-double")]
    check.source = 'print("PASS  empty list\\nPASS  [1, 2, 3]\\nfx-double: PASSED (2/2 checks passed)")'
    del nb.cells[index_of(nb, "check:", "fx-kernel")]
    save(nb, folder / "tampered" / nbname)
    # Exercise cells reordered (fx-kernel moved to the end) and fx-double deleted.
    nb = pasted()
    k = index_of(nb, "exercise:", "fx-kernel")
    nb.cells.append(nb.cells.pop(k))
    del nb.cells[index_of(nb, "exercise:", "fx-double")]
    save(nb, folder / "reordered" / nbname)
    # Hangs only in the demonstration cell after fx-kernel, on an input the checks do not use: blamed first on
    # fx-kernel (the exercise just before), then, as blanking that did not help, on fx-double.
    save(set_exercise(pasted(), "fx-double", DOUBLE_OK.replace(
        "    ### BEGIN SOLUTION", "    while xs == [0.5]:\n        pass\n    ### BEGIN SOLUTION")),
        folder / "demohang" / nbname)
    # Invalid JSON (a truncated upload).
    text = nbformat.writes(pasted())
    (folder / "badjson").mkdir(parents=True)
    (folder / "badjson" / nbname).write_text(text[: len(text) // 2], encoding="utf-8")
    # A notebook from another chapter handed in for chapter 90.
    save(pasted(CH91), folder / "otherchapter" / "91_other_fixture.ipynb")
    # No softmax_lab metadata (e.g. copied into a fresh notebook): matched by its exercise ids, and said so.
    nb = pasted()
    del nb.metadata["softmax_lab"]
    save(nb, folder / "nometa" / "Untitled.ipynb")
    # Hints: fx-double's complete answer (level 4) and fx-kernel's level 2 were shown and saved in the
    # notebook; fx-kernel's exercise cell also shows its level 4 when the grader runs it (the executed copy).
    nb = pasted()
    nb.cells[index_of(nb, "check:", "fx-double")].outputs = [hint_output("fx-double", 4)]
    nb.cells[index_of(nb, "exercise:", "fx-kernel")].outputs = [hint_output("fx-kernel", 2)]
    shows = ("\n\nfrom IPython.display import display\ndisplay({'text/plain': 'the answer'}, raw=True, "
             "metadata={'softmax_lab': {'hint': {'exercise': 'fx-kernel', 'level': 4}}})\n")
    save(set_exercise(nb, "fx-kernel", KERNEL_OK + shows), folder / "hinted" / nbname)
    # Kills the grading process that drives its kernel; fx-kernel still graded.
    save(set_exercise(pasted(), "fx-double", "import os, signal\nos.kill(os.getppid(), signal.SIGKILL)"),
         folder / "killer" / nbname)


@pytest.fixture(scope="module")
def hostile(tmp_path_factory):
    tmp = tmp_path_factory.mktemp("hostile")
    subs = tmp / "submissions"
    make_submissions(subs)
    before = {p.name: p.read_bytes() for p in FIXTURES.iterdir()}
    out = tmp / "grades" / "gradebook.csv"
    roster = tmp / "roster.csv"
    roster.write_text("learner,name\n" + "".join(f"{d.name},{d.name.title()}\n" for d in sorted(subs.iterdir()))
                      + "absent,Absent Learner\n", encoding="utf-8")
    argv = [str(subs), "--out", str(out), "--solutions", str(FIXTURES), "--jobs", "2", "--chapter", "90",
            "--roster", str(roster), "--memory-mb", "3000", *FAST]
    t0 = time.monotonic()
    cwd = os.getcwd()
    os.chdir(tmp)  # the grader's own cwd holds nothing a submission may touch either
    try:
        rc = grade_main(argv)
    finally:
        os.chdir(cwd)
    seconds = time.monotonic() - t0
    return {"rc": rc, "out": out, "rows": by_key(read_rows(out)), "subs": subs, "argv": argv, "tmp": tmp,
            "before": before, "seconds": seconds}


def test_hostile_run_completes(hostile):
    assert hostile["rc"] == 0
    rows = hostile["rows"]
    learners = {k[0] for k in rows}
    assert learners == {d.name for d in hostile["subs"].iterdir()} | {"absent"}
    for r in rows.values():
        assert r["status"] in ("passed", "failed", "error", "timeout", "missing")
    print(f"hostile grading run: {hostile['seconds']:.1f} s")


def test_solutions_pasted_score_full_marks(hostile):
    rows = hostile["rows"]
    assert rows["good", "fx-double"]["status"] == "passed" and rows["good", "fx-double"]["points"] == "2"
    assert rows["good", "fx-kernel"]["status"] == "passed" and rows["good", "fx-kernel"]["points"] == "3"
    assert rows["good", "fx-kernel"]["max_points"] == "3"


def test_blank_notebook_scores_zero_not_implemented(hostile):
    for ex in ("fx-double", "fx-kernel"):
        r = hostile["rows"]["blank", ex]
        assert (r["status"], r["points"]) == ("failed", "0")
        assert "not implemented" in r["message"]


def test_exercise_that_raises_and_seed_pitfall(hostile):
    r = hostile["rows"]["raises", "fx-double"]
    assert r["status"] == "error" and "ValueError: boom" in r["message"]
    r = hostile["rows"]["raises", "fx-kernel"]
    assert (r["status"], r["points"]) == ("failed", "0")
    assert "FAIL  all-negative row of 5" in r["message"] and "-inf" in r["message"]
    assert "fx-kernel: FAILED (2/3 checks passed)" in r["message"]


def test_endless_loop_times_out_other_exercise_still_graded(hostile):
    r = hostile["rows"]["loop", "fx-double"]
    assert r["status"] == "timeout" and "10 s" in r["message"] and r["points"] == "0"
    assert hostile["rows"]["loop", "fx-kernel"]["status"] == "passed"


def test_killing_the_kernel_os_exit_and_segfault(hostile):
    for ex in ("fx-double", "fx-kernel"):
        r = hostile["rows"]["crash", ex]
        assert r["status"] == "error" and "kernel died" in r["message"], r


def test_unbounded_memory(hostile):
    r = hostile["rows"]["memory", "fx-double"]
    assert r["status"] == "error" and "3000 MB" in r["message"]
    # The data-size cap turns it into a MemoryError (a GPU machine has no such cap: there glibc ends up touching
    # the pages as its heap grows, and the resident-memory watchdog or the cgroup stops it: "out of memory").
    assert "MemoryError" in r["message"] or (softmax_lab.ON_GPU and "out of memory" in r["message"])
    row = hostile["rows"]["memory", "fx-kernel"]
    assert row["status"] == "passed", row["message"]


def test_vandal_cannot_touch_solutions_or_gradebook(hostile):
    assert hostile["rows"]["vandal", "fx-double"]["status"] == "passed"
    assert hostile["rows"]["vandal", "fx-kernel"]["status"] == "passed"
    assert {p.name: p.read_bytes() for p in FIXTURES.iterdir()} == hostile["before"]
    assert hostile["out"].read_text(encoding="utf-8").startswith(",".join(COLUMNS))
    assert not (hostile["tmp"] / "gradebook.csv").exists()


def test_edited_or_deleted_check_cells_cannot_pass(hostile):
    r = hostile["rows"]["tampered", "fx-double"]
    assert r["status"] == "failed" and "FAIL  [1, 2, 3]" in r["message"]
    r = hostile["rows"]["tampered", "fx-kernel"]
    assert r["status"] == "failed" and "-inf" in r["message"]


def test_reordered_and_deleted_exercise_cells(hostile):
    assert hostile["rows"]["reordered", "fx-kernel"]["status"] == "passed"
    r = hostile["rows"]["reordered", "fx-double"]
    assert r["status"] == "missing" and "exercise:fx-double" in r["message"]


def test_invalid_json(hostile):
    for ex in ("fx-double", "fx-kernel"):
        r = hostile["rows"]["badjson", ex]
        assert r["status"] == "error" and "invalid JSON" in r["message"]


def test_notebook_from_another_chapter(hostile):
    for ex in ("fx-double", "fx-kernel"):
        r = hostile["rows"]["otherchapter", ex]
        assert r["status"] == "missing" and "chapter 91" in r["message"] and r["chapter"] == "90"


def test_hang_in_a_demonstration_cell_is_blamed_on_the_right_exercise(hostile):
    r = hostile["rows"]["demohang", "fx-double"]
    assert r["status"] == "timeout" and "after the exercise" in r["message"], r
    assert hostile["rows"]["demohang", "fx-kernel"]["status"] == "passed"


def test_killing_the_grading_process(hostile):
    r = hostile["rows"]["killer", "fx-double"]
    assert r["status"] == "error" and "grading process was killed by signal 9" in r["message"], r
    assert hostile["rows"]["killer", "fx-kernel"]["status"] == "passed"


def test_hints_used_are_listed_and_the_complete_answer_caps_points(hostile):
    rows = hostile["rows"]
    double, kernel = rows["hinted", "fx-double"], rows["hinted", "fx-kernel"]
    assert (double["status"], double["hints"], double["points"], double["max_points"]) == ("passed", "4", "1", "2")
    assert "counts at most 50% of its points (1/2)" in double["message"]
    # level 2 saved in the notebook, level 4 shown while the grader ran the cell: the highest counts
    assert (kernel["status"], kernel["hints"], kernel["points"]) == ("passed", "4", "1.5")
    assert rows["good", "fx-double"]["hints"] == "" and rows["good", "fx-double"]["points"] == "2"
    fb = (default_feedback(hostile["out"]) / "hinted.md").read_text(encoding="utf-8")
    assert "| fx-double | 1 / 2 | passed | up to level 4 (the complete answer) |" in fb
    good = (default_feedback(hostile["out"]) / "good.md").read_text(encoding="utf-8")
    assert "| fx-double | 2 / 2 | passed | none |" in good


def test_hint_records_are_validated():
    from softmax_lab.grading import hints
    from softmax_lab.grading.runner import parse_record

    nb = blank()
    nb.cells[0].outputs = [hint_output("fx-double", 2), hint_output("fx-double", 1), hint_output("fx-kernel", 3)]
    nb.cells[1].outputs = [hint_output("fx-double", 9), hint_output("fx-kernel", True), hint_output("", 4),
                           nbformat.v4.new_output("stream", text="x")]
    assert hints.levels_used(nb) == {"fx-double": 2, "fx-kernel": 3}
    assert hints.capped(3, 3, 4, 0.25) == (0.75, hints.capped(3, 3, 4, 0.25)[1])
    assert hints.capped(0, 3, 4, 0.5)[0] == 0 and hints.capped(3, 3, 3, 0.5) == (3, "")
    rec = parse_record('{"event": "end", "cell": 1, "status": "passed", '
                       '"hints": [["fx-double", 4], ["fx-kernel", 7], "junk", ["x", "4"]]}')
    assert rec["hints"] == [("fx-double", 4)]


def test_answer_hint_cap_option_and_course_config(tmp_path, capsys):
    from softmax_lab.grading.options import course_hint_cap

    sol = tmp_path / "solutions"
    sol.mkdir()
    assert course_hint_cap(sol) == 0.5
    (tmp_path / "softmax-lab.toml").write_text("[grading]\nanswer_hint_cap = 0.25\n")
    assert course_hint_cap(sol) == 0.25
    (tmp_path / "softmax-lab.toml").write_text("[grading]\nanswer_hint_cap = 2\n")
    with pytest.raises(cli.UsageError, match="between 0 and 1"):
        course_hint_cap(sol)
    with pytest.raises(SystemExit):
        grade_main([str(tmp_path), "--solutions", str(FIXTURES), "--answer-hint-cap", "1.5"])
    assert "1.5 is not between 0 and 1" in capsys.readouterr().err


def test_roster_learner_without_submission(hostile):
    for ex in ("fx-double", "fx-kernel"):
        assert hostile["rows"]["absent", ex]["status"] == "missing"


def test_feedback_and_manual_grading_files(hostile):
    grades = default_feedback(hostile["out"]).parent
    fb = (default_feedback(hostile["out"]) / "raises.md").read_text(encoding="utf-8")
    assert "FAIL  all-negative row of 5" in fb and "ValueError: boom" in fb and "fx-why" in fb
    good = (default_feedback(hostile["out"]) / "good.md").read_text(encoding="utf-8")
    assert "5 / 5 points" in good and "```" not in good
    with open(grades / "gradebook.manual.csv", newline="", encoding="utf-8") as f:
        manual = {r["submission"].split("/")[0]: r for r in csv.DictReader(f)}
    assert manual["good"]["question"] == "fx-why" and "overflow" in manual["good"]["answer"]
    assert manual["blank"]["answer"] == ""
    md = (grades / "gradebook.manual.md").read_text(encoding="utf-8")
    assert "names the overflow of exp" in md  # the rubric, for the instructor only
    assert "names the overflow of exp" not in fb


def test_resume_skips_graded_and_regrades_changed(hostile, tmp_path):
    """A rerun grades nothing new; a changed submission is regraded; the gradebook is never left half-written."""
    out = hostile["out"]
    before = out.read_text(encoding="utf-8")
    t0 = time.monotonic()
    assert grade_main(hostile["argv"]) == 0
    assert time.monotonic() - t0 < 20  # nothing ran
    assert out.read_text(encoding="utf-8") == before
    # The instructor grades a free-text answer by hand; then the learner "blank" resubmits the solution:
    # only that notebook is regraded, and the hand-entered points survive.
    manual = out.with_name("gradebook.manual.csv")
    with open(manual, newline="", encoding="utf-8") as f:
        entries = list(csv.DictReader(f))
    next(e for e in entries if e["submission"].startswith("good/"))["points"] = "1"
    with open(manual, "w", newline="", encoding="utf-8") as f:
        w = csv.DictWriter(f, fieldnames=list(entries[0]))
        w.writeheader()
        w.writerows(entries)
    save(pasted(), hostile["subs"] / "blank" / "90_grading_fixture.ipynb")
    assert grade_main(hostile["argv"]) == 0
    with open(manual, newline="", encoding="utf-8") as f:
        assert next(e for e in csv.DictReader(f) if e["submission"].startswith("good/"))["points"] == "1"
    rows = by_key(read_rows(out))
    assert rows["blank", "fx-double"]["status"] == "passed"
    assert rows["loop", "fx-double"]["status"] == "timeout"  # untouched
    assert not [p for p in out.parent.iterdir() if p.name.endswith(".tmp")]


# ------------------------------------------------------------------------------------------ smaller pieces


def test_metadata_missing_matched_by_exercise_ids(hostile):
    for ex in ("fx-double", "fx-kernel"):
        r = hostile["rows"]["nometa", ex]
        assert r["status"] == "passed" and "matched to chapter 90 by its exercise ids" in r["message"]


def test_memory_watchdog_without_address_space_limit(tmp_path):
    """On a GPU the address-space limit is off (CUDA maps huge ranges): the RSS watchdog ends the run."""
    nb = nbformat.v4.new_notebook(cells=[nbformat.v4.new_code_cell(
        "import time\nhog = []\nwhile True:\n    hog.append(bytearray(2**25))\n    time.sleep(0.02)")])
    res = run_notebook(nb, Limits(cell_timeout=60, memory_mb=600, rlimit_as=False))
    assert res.fatal and res.fatal["status"] == "memory" and res.fatal["cell"] == 0
    assert res.seconds < 40


def test_runner_reports_cells(tmp_path):
    nb = nbformat.v4.new_notebook(cells=[nbformat.v4.new_code_cell("print('hi')"),
                                         nbformat.v4.new_code_cell("1/0")])
    res = run_notebook(nb, Limits(cell_timeout=30))
    assert res.fatal is None
    assert res.cells[0]["status"] == "passed" and res.cells[0]["stdout"] == "hi\n"
    assert res.cells[1]["status"] == "raised" and res.cells[1]["error"]["ename"] == "ZeroDivisionError"


# ------------------------------------------------------------------------------------------- real chapters
#
# For each chapter below: the blank learner notebook (notebooks/) scores 0 with "not implemented"; the learner
# notebook with the solutions pasted in scores full marks; a seed pitfall put into the solution loses the
# points with a message naming it. Chapters 01 and 02 are checked in detail below; the last test grades blank,
# pasted and pitfall notebooks of every chapter in one run (about two minutes on 2 CPU cores; set
# SOFTMAX_LAB_GRADE_FAST=1 to skip it while iterating).

SOLUTIONS = ROOT / "solutions"
NOTEBOOKS = ROOT / "notebooks"

# chapter file -> (exercise id, text in its solution, the pitfall's replacement, words the message must contain)
PITFALLS = {
    "01_scores_to_probabilities.ipynb": ("ch01-stable-row", "p = tl.exp(x - m)", "p = tl.exp(x)",
                                         "exp overflowed to inf"),
    "02_masks_and_padding.ipynb": ("ch02-masked-load-store", 'other=float("-inf")', "other=0.0",
                                    "padding lanes read 0"),
}

# The other chapters' seed pitfalls, graded in the every-chapter test.
SLOW_PITFALLS = {
    "03_naive_kernel.ipynb": ("ch03-naive-normalize", "return rows * cols * (2 * cols + 1)",
                              "return rows * cols * 2 * cols", "one load per program short"),
    "04_three_kernels_to_one.ipynb": ("ch04-fused", "row * in_row_stride + cols", "row * n_cols + cols",
                                      "row stride"),
    "05_online_softmax.ipynb": ("ch05-online-kernel", 'shift = tl.where(m_new == -float("inf"), 0.0, m_new)',
                                "shift = m_new", "poisons the running sum"),
    "06_half_precision_and_attention.ipynb": ("ch06-masked", "y = e / tl.where(total == 0.0, 1.0, total)",
                                              "y = e / total", "fully masked row"),
    "07_performance.ipynb": ("ch07-bandwidth", "return 2 * M * N *", "return M * N *", "also written"),
    "08_backward.ipynb": ("ch08-backward", "dx = y * (dy - dot)", "dx = y * dy", "shared denominator is missing"),
}


def real_blank(name):
    """The learner version, built from solutions/ with the build functions (not read from notebooks/)."""
    sol = SOLUTIONS / name
    if not sol.exists():
        pytest.skip(f"{name} not in solutions/ yet")
    return learner_notebook(solution(sol))


def real_pasted(name):
    return paste_solutions(real_blank(name), solution(SOLUTIONS / name))


def real_pitfall(name):
    ident, right, wrong, _ = {**PITFALLS, **SLOW_PITFALLS}[name]
    nb = real_pasted(name)
    cell = nb.cells[index_of(nb, "exercise:", ident)]
    assert right in cell.source, f"{name}: the pitfall test expects {right!r} in the solution of {ident}"
    cell.source = cell.source.replace(right, wrong)
    return nb


@pytest.fixture(scope="module")
def real(tmp_path_factory):
    names = [n for n in PITFALLS if (SOLUTIONS / n).exists()]
    if not names:
        pytest.skip("no real chapters yet")
    subs = tmp_path_factory.mktemp("real") / "submissions"
    for n in names:
        save(real_blank(n), subs / "blank" / n)
        save(real_pasted(n), subs / "pasted" / n)
        save(real_pitfall(n), subs / "pitfall" / n)
    out = subs.parent / "gradebook.csv"
    t0 = time.monotonic()
    assert grade_main([str(subs), "--out", str(out), "--jobs", "2", "--solutions", str(SOLUTIONS),
                       "--partial-credit"]) == 0
    print(f"real chapters {names}: {time.monotonic() - t0:.1f} s")
    return {"rows": read_rows(out), "names": names}


def _real_rows(real, who, name):
    rows = [r for r in real["rows"] if r["submission"] == f"{who}/{name}"]
    assert rows, (who, name)
    return rows


@pytest.mark.parametrize("name", list(PITFALLS))
def test_real_chapter_blank_scores_zero(real, name):
    if name not in real["names"]:
        pytest.skip(f"{name} not there yet")
    for r in _real_rows(real, "blank", name):
        assert (r["status"], r["points"]) == ("failed", "0"), r
        assert "not implemented" in r["message"]


@pytest.mark.parametrize("name", list(PITFALLS))
def test_real_chapter_solutions_pasted_full_marks(real, name):
    if name not in real["names"]:
        pytest.skip(f"{name} not there yet")
    for r in _real_rows(real, "pasted", name):
        assert r["status"] == "passed" and r["points"] == r["max_points"] != "0", r


@pytest.mark.parametrize("name", list(PITFALLS))
def test_real_chapter_seed_pitfall_loses_points(real, name):
    if name not in real["names"]:
        pytest.skip(f"{name} not there yet")
    ident, _, _, words = PITFALLS[name]
    r = next(r for r in _real_rows(real, "pitfall", name) if r["exercise"] == ident)
    assert r["status"] == "failed" and "FAIL" in r["message"], r
    assert 0 <= float(r["points"]) < float(r["max_points"]), r  # --partial-credit: k/n of the points
    assert words in r["message"], r["message"]


def test_check_command_for_learners(tmp_path, capsys):
    name = "02_masks_and_padding.ipynb"
    path = save(real_pitfall(name), tmp_path / name)
    rc = check_main([str(path), "--solutions", str(SOLUTIONS)])
    out = capsys.readouterr().out
    assert rc == 1
    assert "ch02-masked-load-store" in out and "failed" in out and "FAIL" in out and "padding lanes read 0" in out
    assert "graded by your instructor" in out


@pytest.mark.skipif(bool(os.environ.get("SOFTMAX_LAB_GRADE_FAST")), reason="SOFTMAX_LAB_GRADE_FAST=1 skips it")
def test_every_real_chapter_blank_pasted_pitfall(tmp_path):
    """Every chapter: blank -> 0 "not implemented", pasted -> full marks, its seed pitfall -> loses points."""
    subs = tmp_path / "submissions"
    names = sorted(p.name for p in SOLUTIONS.glob("*.ipynb"))
    pitfalls = {**PITFALLS, **SLOW_PITFALLS}
    for n in names:
        save(real_blank(n), subs / "blank" / n)
        save(real_pasted(n), subs / "pasted" / n)
        if n in pitfalls:
            save(real_pitfall(n), subs / "pitfall" / n)
    out = tmp_path / "gradebook.csv"
    assert grade_main([str(subs), "--out", str(out), "--jobs", "2", "--solutions", str(SOLUTIONS)]) == 0
    for r in read_rows(out):
        who, name = r["submission"].split("/")
        if who == "blank":
            assert r["status"] == "failed" and "not implemented" in r["message"], r
        elif who == "pasted" or r["exercise"] != pitfalls[name][0]:
            assert r["status"] == "passed", r
        elif registry.load().exercise(r["exercise"]).parts:  # seed 002's split: the pitfall loses a part at least
            assert r["status"] == "failed" and float(r["points"]) < float(r["max_points"]), r
            assert pitfalls[name][3] in r["message"] and "parts (the course's rubric): " in r["message"], r
        else:
            assert r["status"] == "failed" and r["points"] == "0" and pitfalls[name][3] in r["message"], r


# ------------------------------------------------------------------------------------------------- nbgrader


def test_nbgrader_source_conversion(capsys):
    from softmax_lab.course.nbgrader import convert, wrap_check

    nb = convert(solution(), registry.load(GRADING_REGISTRY))
    meta = {c.metadata["nbgrader"]["grade_id"]: c.metadata["nbgrader"] for c in nb.cells if "nbgrader" in c.metadata}
    assert meta["fx-double"]["solution"] and not meta["fx-double"]["grade"]
    assert meta["check-fx-kernel"]["grade"] and meta["check-fx-kernel"]["locked"]
    assert meta["check-fx-kernel"]["points"] == 3
    assert meta["fx-why"]["solution"] and meta["fx-why"]["grade"] and meta["fx-why"]["points"] == 1
    assert not [c for c in nb.cells if tag_value(c, "rubric:")]  # never released to learners
    for c in nb.cells:
        if c.cell_type == "code":
            compile(c.source, "cell", "exec")
    # nbgrader awards a test cell's points when it does not raise: the wrapped check raises on FAIL.
    src = wrap_check("check(fn);", "fx-double")
    ns = {"fn": None, "check": lambda fn: print("PASS  a\nfx-double: PASSED (1/1 checks passed)")}
    exec(src, ns)
    ns["check"] = lambda fn: print("FAIL  a: wrong\nfx-double: FAILED (0/1 checks passed)")
    with pytest.raises(AssertionError):
        exec(src, ns)
    assert "FAIL  a: wrong" in capsys.readouterr().out


def test_check_messages_for_output_that_is_not_fail_lines():
    from softmax_lab.grading.statuses import check_message as _check_message

    expected = "PASS  a\nfx-double: PASSED (1/1 checks passed)\n"
    extra = {"status": "mismatch", "stdout": "debug 42\n" + expected, "stderr": ""}
    status, msg = _check_message(extra, expected, 100)
    assert status == "failed" and "remove print()" in msg and "debug 42" in msg
    warned = {"status": "mismatch", "stdout": expected, "stderr": "UserWarning: careful\n"}
    status, msg = _check_message(warned, expected, 100)
    assert status == "failed" and "stderr" in msg and "UserWarning" in msg
    raised = {"status": "raised", "stdout": "",
              "error": {"ename": "NameError", "evalue": "name 'double' is not defined"}}
    status, msg = _check_message(raised, expected, 100)
    assert status == "error" and "NameError" in msg and "rename or delete" in msg
    # the cell's time limit interrupted the check (nobody else presses Interrupt in the grader): a timeout, with the
    # check's own lines on where (before: "error: the check raised CheckInterrupted")
    cut = {"status": "raised", "stdout": "", "error": {"ename": "CheckInterrupted", "evalue": (
        "Interrupted during the case '3 columns' (fx-double).\n  your code was at line 19: while True:\n"
        "Run the exercise cell and the check again when it is fixed.")}}
    status, msg = _check_message(cut, expected, 100)
    assert status == "timeout" and msg.splitlines() == [
        "timed out: the check ran past the grader's time limit for a cell (an endless loop?)",
        "Interrupted during the case '3 columns' (fx-double).", "  your code was at line 19: while True:"], msg
    # output that differs: the first line where it departs, whole (up to 500 characters, cut at a word), beside the
    # solution check's line there (before: the first line printed, cut at 200 characters mid-word)
    long = "PASS  a but " + "then a long explanation " * 15
    differs = {"status": "mismatch", "stdout": "PASS  a\n" + long + "\n", "stderr": ""}
    status, msg = _check_message(differs, "PASS  a\nPASS  b\nfx-double: PASSED (2/2 checks passed)\n", 100)
    assert status == "failed" and "from its line 2 on" in msg and long.strip() in msg and "'PASS  b'" in msg, msg
    status, msg = _check_message({"status": "mismatch", "stdout": "", "stderr": ""}, expected, 100)
    assert "it printed nothing where the solution's check printed 'PASS  a'" in msg, msg
    # the check's own time limit stopped the learner's code (checks/guard.py): failed, in plain words (its other
    # cases may earn partial credit); a learner's own line that starts "STOPPED" is not taken for it
    stopped = {"status": "mismatch", "stderr": "", "stdout": "PASS  a\nFAIL  b: wrong\nSTOPPED  after 60 s during the "
               "case 'c': your code was still running\n  line 3 of your predicted_counts: while True\n"
               "fx-double: FAILED (stopped: one case ran past the check's 60 s limit)\n"}
    status, msg = _check_message(stopped, expected, 100)
    assert status == "failed" and msg.splitlines() == [
        "FAIL  b: wrong", "STOPPED  after 60 s during the case 'c': your code was still running",
        "  line 3 of your predicted_counts: while True"], msg
    debug = {"status": "mismatch", "stderr": "", "stdout": "STOPPED early at row 3\n" + expected}
    status, msg = _check_message(debug, expected, 100)
    assert status == "failed" and "remove print()" in msg, msg
    flood = {"status": "mismatch", "stdout": "word " * 300 + "\n", "stderr": ""}
    status, msg = _check_message(flood, expected, 100)
    assert "more characters]" in msg and "wor [" not in msg and len(msg) < 800, msg


def test_grader_environment_failure_is_not_blamed_on_the_learner(tmp_path):
    """A kernel that cannot start (here: a memory cap far too low) is reported as the grader's problem."""
    from softmax_lab.grading.grader import Options, grade_notebook

    path = save(pasted(), tmp_path / "mine.ipynb")
    # 60 MB: less than a Python kernel needs to start (the data-size cap, RLIMIT_DATA, or the watchdog stops it).
    # The cell timeout is generous so that only the memory cap can stop it, also on a loaded 2-core machine.
    opts = Options(limits=Limits(cell_timeout=60, memory_mb=60, rlimit_as=True))
    res = grade_notebook(path, "mine.ipynb", fixture_chapters(FIXTURES), opts)
    assert [r["status"] for r in res.rows] == ["error", "error"], res.rows
    assert all("not because of your code" in r["message"] and
               ("--memory-mb" in r["message"] or "60 MB" in r["message"]) for r in res.rows), res.rows


def test_a_cap_that_strikes_in_a_different_cell_each_run_is_not_blamed_on_the_learner(tmp_path, monkeypatch):
    """A memory cap too low for the kernel itself may kill it in an exercise cell on one run and in another cell on
    the next. Once the same break happens with the blamed code taken out, the earlier blame is withdrawn."""
    from softmax_lab.grading import blanking, grader
    from softmax_lab.grading.rows import GRADER_TROUBLE
    from softmax_lab.grading.runner import RunResult

    calls = []

    def breaks_somewhere(nb, limits, timeouts, sanitize, exercise_cells):
        calls.append(exercise_cells)
        # 1st run: dies in exercise 1; 2nd (exercise 1 blanked): in exercise 2; 3rd (both blanked): in exercise 1.
        cell = exercise_cells[[0, 1, 0][min(len(calls), 3) - 1]]
        return RunResult(fatal={"cell": cell, "status": "memory", "message": "used more than 60 MB"})

    monkeypatch.setattr(blanking, "run_notebook", breaks_somewhere)
    path = save(pasted(), tmp_path / "mine.ipynb")
    res = grader.grade_notebook(path, "mine.ipynb", fixture_chapters(FIXTURES),
                                grader.Options(limits=Limits(memory_mb=60)))
    assert len(calls) == 3
    assert [r["status"] for r in res.rows] == ["error", "error"]
    for r in res.rows:
        assert GRADER_TROUBLE in r["message"] and "not because of your code" in r["message"], r["message"]
        assert "60 MB" in r["message"], r["message"]


def test_a_later_break_after_learner_code_ran_withdraws_no_blame(tmp_path, monkeypatch):
    """Exercise 1 runs out of memory; with it blanked, exercise 2's cell runs to its end and the kernel dies
    between cells (a thread it left behind, say). Exercise 1 keeps its own verdict: only a break with no learner
    code run withdraws a blame."""
    from softmax_lab.grading import blanking, grader
    from softmax_lab.grading.rows import GRADER_TROUBLE
    from softmax_lab.grading.runner import RunResult

    calls = []

    def breaks(nb, limits, timeouts, sanitize, exercise_cells):
        calls.append(exercise_cells)
        if len(calls) == 1:
            return RunResult(fatal={"cell": exercise_cells[0], "status": "memory", "message": "used more than 60 MB"})
        done = {"event": "end", "cell": exercise_cells[1], "status": "passed", "message": "", "stdout": "",
                "stderr": "", "display": "", "error": None, "hints": []}
        return RunResult(cells={exercise_cells[1]: done},
                         fatal={"cell": None, "status": "memory", "message": "used more than 60 MB"})

    monkeypatch.setattr(blanking, "run_notebook", breaks)
    path = save(pasted(), tmp_path / "mine.ipynb")
    res = grader.grade_notebook(path, "mine.ipynb", fixture_chapters(FIXTURES),
                                grader.Options(limits=Limits(memory_mb=60)))
    assert len(calls) == 2
    first, second = res.rows
    assert first["status"] == "error" and "out of memory" in first["message"], first
    assert GRADER_TROUBLE not in first["message"], first["message"]
    assert second["status"] == "error" and GRADER_TROUBLE in second["message"], second


def test_broken_setup_cell_is_not_blamed_on_the_learner(tmp_path):
    """A setup cell of the solution that raises here (a missing package, say) is the grader's problem too."""
    from softmax_lab.grading.grader import Options, grade_notebook
    from softmax_lab.grading.rows import GRADER_TROUBLE

    sol = solution()
    sol.cells[1].source += "\nimport softmax_lab_no_such_module"
    save(sol, tmp_path / "solutions" / CH90.name)
    path = save(pasted(), tmp_path / "mine.ipynb")
    res = grade_notebook(path, "mine.ipynb", fixture_chapters(tmp_path / "solutions"),
                         Options(limits=Limits(cell_timeout=10)))
    assert [r["status"] for r in res.rows] == ["error", "error"]
    assert all(GRADER_TROUBLE in r["message"] and "ModuleNotFoundError" in r["message"] for r in res.rows)


def test_nbgrader_round_trip_keeps_hints_and_drops_widget_state():
    """nbgrader replaces a whole solution region: the hints must sit outside it."""
    import re

    from softmax_lab.course.nbgrader import convert

    sol = solution(SOLUTIONS / "00_setup.ipynb")
    sol.metadata["widgets"] = {"application/vnd.jupyter.widget-state+json": {"state": {"x": 1}}}
    nb = convert(sol, registry.load(GRADING_REGISTRY))
    assert "widgets" not in nb.metadata
    cell = next(c for c in nb.cells if tag_value(c, "exercise:"))
    # What `nbgrader generate_assignment` does to a solution region.
    released = re.sub(r"[ \t]*### BEGIN SOLUTION.*?### END SOLUTION",
                      "    # YOUR CODE HERE\n    raise NotImplementedError()", cell.source, flags=re.S)
    hints = [ln.strip() for ln in solution_source("ch00-double", SOLUTIONS / "00_setup.ipynb").splitlines()
             if ln.strip().startswith("# HINT:")]
    assert hints and all(h in released for h in hints)
    compile(released, "cell", "exec")


def test_chapter_on_nbgrader_layout_skips_other_assignments(tmp_path, capsys):
    """submitted/<learner>/<assignment>/<notebook>: with --chapter 90 the chapter 91 assignment is not listed."""
    subs = tmp_path / "submitted"
    save(pasted(), subs / "alice" / "softmax-lab-90" / CH90.name)
    save(pasted(CH91), subs / "alice" / "softmax-lab-91" / CH91.name)
    out = tmp_path / "g.csv"
    assert grade_main([str(subs), "--out", str(out), "--solutions", str(FIXTURES), "--chapter", "90", *FAST]) == 0
    rows = read_rows(out)
    assert {r["submission"] for r in rows} == {f"alice/softmax-lab-90/{CH90.name}"}
    assert all(r["status"] == "passed" for r in rows)
    captured = capsys.readouterr()
    assert "5/5 points" in captured.out and "wrote " in captured.out  # results on stdout
    assert "wrote " not in captured.err and "to grade with" in captured.err  # diagnostics on stderr


def test_a_notebook_pytest_cannot_collect_is_the_graders_problem():
    """The plugin reports a collection error (MemoryError reading the notebook under a tiny cap); the runner turns it
    into a break before any cell, which the grader then reports as its own trouble, not as 'not run'."""
    from softmax_lab.grading.runner import parse_record

    assert parse_record('{"event": "collect-error", "message": "MemoryError"}') == {
        "event": "collect-error", "message": "MemoryError"}
    assert parse_record('{"event": "collect-error", "message": 7}')["message"] == ""


def test_check_says_why_the_complete_answer_halved_the_points(capsys):
    # `softmax-lab check` printed "1/2 passed (hints used: up to level 4)" with no reason; `grade` had the note.
    from pathlib import Path

    from softmax_lab.grading import hints
    from softmax_lab.grading.check import print_check
    from softmax_lab.grading.grader import SubmissionResult

    points, note = hints.capped(2, 2, hints.ANSWER_LEVEL, 0.5)
    row = dict(exercise="fx-double", points=f"{points:g}", max_points="2", status="passed", hints="4",
               message="fx-double: PASSED (3/3 checks passed)\n" + note)
    print_check(Path("mine.ipynb"), SubmissionResult("mine.ipynb", None, [row]))
    out = capsys.readouterr().out
    assert "1/2    passed  (hints used: up to level 4)" in out
    assert "note: you were shown the complete answer (hint level 4): this exercise counts at most 50% of its " \
           "points (1/2)" in out
    assert "PASSED (3/3" not in out
