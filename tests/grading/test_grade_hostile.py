"""Attacks on `softmax-lab grade` from the second hostile review: each one harmed the class, the host or
the grade before, and fails now. Most are graded in ONE `grade --jobs 2` run of the fixture chapter 90 next to an
honest learner whose rows must come out exactly as when graded alone.

Each learner folder is one attack; the test named after it says what used to happen (the comments keep the review's
numbers).
"""
from __future__ import annotations

import contextlib
import hashlib
import io
import resource
import subprocess
import sys
import time
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).parent))
import test_grade as T
from test_grade import (CH90, DOUBLE_OK, FAST, FIXTURES, KERNEL_OK, check_main, ensure_bwrap, grade_main, pasted,
                        read_rows, save, set_exercise)
from test_grade import _sandbox_and_fixture_judges  # noqa: F401 - an autouse fixture: imported, it applies here too
from test_grade_dask import comparable, grade_cli
from test_grade_dask import dask_cluster  # noqa: F401 - a fixture this file's tests ask for

NB = "90_grading_fixture.ipynb"
IN_JUDGE = "if not os.path.exists('/opt/softmax-lab'):\n"  # the judge's sandbox has no softmax_lab package
FLOOD_MB = 150
MODEL_ANSWER = "keeps every exponent"   # from the fixture's answer cell
RUBRIC = "names the overflow"           # from its rubric cell


def _shadow_digest() -> str:
    try:
        return hashlib.sha256(Path("/etc/shadow").read_bytes()).hexdigest()[:16]
    except OSError:
        return "no-shadow-here"


ATTACKS = {
    # 1. A FIFO where the judge's results used to be read, then a clean exit: the grader blocked for ever.
    "fifo": DOUBLE_OK + "\n\nimport os\n" + IN_JUDGE + (
        "    for d in ('/grader-out', '/tmp/work', '/tmp', '.'):\n"
        "        try:\n"
        "            os.mkfifo(os.path.join(d, 'results.json'))\n"
        "        except OSError:\n"
        "            pass\n"
        "    os._exit(0)\n"),
    # 3. The notebook inside the sandbox read back: rubric and model answer printed as FAIL lines.
    "rubric": "import glob, json\n\ndef double(xs):\n"
              "    for p in glob.glob('/grader/*.ipynb') + glob.glob('/tmp/work/*.ipynb'):\n"
              "        for c in json.load(open(p))['cells']:\n"
              "            for line in ''.join(c['source']).splitlines():\n"
              "                print('FAIL  leak: ' + line)\n"
              "    return [2 * x for x in xs]\n",
    # 4. The host's /etc read as uid 0: a digest of /etc/shadow reached the feedback.
    "etc": "import os, hashlib\n\ndef double(xs):\n"
           "    try:\n        shadow = hashlib.sha256(open('/etc/shadow', 'rb').read()).hexdigest()[:16]\n"
           "    except OSError:\n        shadow = 'unreadable'\n"
           "    keys = sorted(os.listdir('/etc/ssh')) if os.path.isdir('/etc/ssh') else []\n"
           "    print(f'FAIL  uid={os.getuid()} shadow={shadow} ssh={keys}')\n"
           "    return [2 * x for x in xs]\n",
    # 5. Floods: the host's log through /proc/1/fd/1 and the judge's stderr (the grader read both whole).
    "flood": "import os\nblock = b'x' * 2**20\n"
             "for fd in ('/proc/1/fd/1', '/proc/1/fd/2'):\n"
             "    try:\n"
             "        with open(fd, 'wb') as f:\n"
             f"            for _ in range({FLOOD_MB}):\n"
             "                f.write(block)\n"
             "    except OSError:\n"
             "        pass\n\n"
             "def double(xs):\n"
             "    print('FAIL  fd1=' + os.readlink('/proc/1/fd/1'))\n"
             "    return [2 * x for x in xs]\n",
    "floodjudge": DOUBLE_OK + "\n\nimport os\n" + IN_JUDGE + f"    for _ in range({FLOOD_MB}):\n"
                  "        os.write(2, b'x' * 2**20)\n",
    # 6. /dev/shm without a size limit: 2 GB kept there grew the host's shared memory.
    "shm": DOUBLE_OK + "\n\nwith open('/dev/shm/hog', 'wb') as f:\n    for _ in range(1024):\n"
           "        f.write(b'x' * 2**20)\n",
    # 7. No task cap: thousands of threads.
    "threads": DOUBLE_OK + "\n\nimport threading, time\nstarted = []\ntry:\n    for _ in range(10000):\n"
               "        t = threading.Thread(target=time.sleep, args=(2,), daemon=True)\n"
               "        t.start()\n        started.append(t)\n"
               "except RuntimeError:\n    pass\n"
               "raise RuntimeError(f'threads started: {len(started)}')\n",
}
# 2. Python builtins reached from a @triton.jit function: torch.softmax through exec earned full points.
ESCAPE = KERNEL_OK.replace(
    "    tl.store(out_ptr, tl.max(x, axis=0))",
    "    tl.core.builtins.exec('import torch')\n    tl.store(out_ptr, tl.max(x, axis=0))")
assert ESCAPE != KERNEL_OK
# 9. Terminal escapes in names and answers: a forged green line and a retitled window.
ESC_NAME = "\x1b]0;pwned\x07\x1b[32mmallory\u202e"
ESC_ANSWER = "exp overflows\x1b[2J\r\x07 \u202eevil"


def make_class(folder: Path) -> None:
    save(pasted(), folder / "honest" / NB)
    for who, source in ATTACKS.items():
        save(set_exercise(pasted(), "fx-double", source), folder / who / NB)
    save(set_exercise(pasted(), "fx-kernel", ESCAPE), folder / "escape" / NB)
    nb = pasted()
    nb.cells[T.index_of(nb, "answer:", "fx-why")].source = ESC_ANSWER
    save(nb, folder / ESC_NAME / NB)
    # 11. JSON nested 100,000 deep: the grader's traceback (its checkout path) went into the feedback.
    (folder / "deep").mkdir(parents=True)
    (folder / "deep" / NB).write_text('{"cells": [' + "[" * 100_000 + "]" * 100_000 + "]}", encoding="utf-8")


def _shm_used() -> int:
    import shutil

    try:
        return shutil.disk_usage("/dev/shm").used
    except OSError:
        return 0


@pytest.fixture(scope="module")
def graded(tmp_path_factory):
    ensure_bwrap()
    from softmax_lab.grading import cgroup

    if cgroup.why_unavailable():
        pytest.skip(f"no cgroups here: {cgroup.why_unavailable()}")
    tmp = tmp_path_factory.mktemp("hostile")
    subs = tmp / "submissions"
    make_class(subs)
    out = tmp / "grades" / "gradebook.csv"
    argv = [str(subs), "--out", str(out), "--solutions", str(FIXTURES), "--jobs", "2", "--memory-mb", "3072", *FAST]
    shm_before, rss_before = _shm_used(), resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
    stdout = io.StringIO()
    t0 = time.monotonic()
    with contextlib.redirect_stdout(stdout):
        rc = grade_main(argv)
    honest_alone = tmp / "alone" / "gradebook.csv"
    save(pasted(), tmp / "alone-subs" / "honest" / NB)
    assert grade_main([str(tmp / "alone-subs"), "--out", str(honest_alone), "--solutions", str(FIXTURES),
                       "--memory-mb", "3072", *FAST]) == 0
    rows = read_rows(out)
    return {"rc": rc, "rows": rows, "out": out, "submissions": subs, "seconds": time.monotonic() - t0,
            "stdout": stdout.getvalue(),
            "shm_growth": _shm_used() - shm_before,
            "rss_growth_mb": (resource.getrusage(resource.RUSAGE_SELF).ru_maxrss - rss_before) / 1024,
            "alone": read_rows(honest_alone), "files": [p for p in out.parent.rglob("*") if p.is_file()]}


def _rows(g, who):
    return {r["exercise"]: r for r in g["rows"] if r["submission"].split("/")[0] == who}


def test_the_class_finishes_and_the_honest_rows_do_not_change(graded):
    assert graded["rc"] == 0
    honest = sorted((r["exercise"], r["points"], r["status"], r["message"]) for r in graded["rows"]
                    if r["submission"].startswith("honest/"))
    alone = sorted((r["exercise"], r["points"], r["status"], r["message"]) for r in graded["alone"])
    assert honest == alone and all(r[2] == "passed" for r in honest), (honest, alone)


def test_a_fifo_cannot_hang_the_grader(graded):
    r = _rows(graded, "fifo")
    assert r["fx-double"]["points"] == "0" and "no readable results" in r["fx-double"]["message"], r
    assert r["fx-kernel"]["status"] == "passed"  # before: the worker blocked for ever on the FIFO


def test_kernels_cannot_reach_python_builtins(graded):
    r = _rows(graded, "escape")["fx-kernel"]
    assert r["status"] == "failed" and r["points"] == "0", r  # before: torch.softmax via exec scored 2/2
    assert "leaves Triton's language API" in r["message"], r


def test_rubric_and_model_answer_are_not_in_the_sandbox(graded):
    text = "".join(p.read_text(encoding="utf-8") for p in graded["files"] if "manual" not in p.name)
    assert "leak:" in text  # the attack ran and printed the notebook it found
    assert MODEL_ANSWER not in text and RUBRIC not in text  # before: 21 lines of them reached the feedback


def test_the_host_etc_is_not_inside_and_the_uid_is_not_root(graded):
    msg = _rows(graded, "etc")["fx-double"]["message"]
    assert "uid=1000" in msg, msg                     # before: uid 0
    assert _shadow_digest() not in msg, msg           # before: the host's /etc/shadow digest
    assert "ssh=[]" in msg, msg                       # no host keys either


def test_floods_stay_inside(graded):
    r = _rows(graded, "flood")
    assert "fd1=pipe:" in r["fx-double"]["message"], r  # before: /proc/1/fd/1 was the host's pytest.log
    assert r["fx-kernel"]["status"] == "passed"
    assert _rows(graded, "floodjudge")["fx-double"]["status"] == "passed"  # only the end of its stderr was kept
    # The grader kept only capped tails: its memory did not grow by the floods (before: +1.1 GB each).
    assert graded["rss_growth_mb"] < FLOOD_MB, graded["rss_growth_mb"]


def test_dev_shm_is_capped(graded):
    r = _rows(graded, "shm")
    assert r["fx-double"]["status"] == "error" and "No space left" in r["fx-double"]["message"], r
    assert graded["shm_growth"] < 64 * 2**20  # before: the host's shared memory grew by 2 GB
    assert r["fx-kernel"]["status"] == "passed"


def test_tasks_are_capped(graded):
    r = _rows(graded, "threads")
    msg = r["fx-double"]["message"]
    n = int(msg.split("threads started: ")[1].split()[0].strip("'\")")) if "threads started: " in msg else -1
    assert 0 <= n < 4200, msg  # before: 3,038 threads, and as many as the host allowed
    assert r["fx-kernel"]["status"] == "passed"


def test_learner_text_is_data(graded):
    every = graded["stdout"] + "".join(p.read_text(encoding="utf-8") for p in graded["files"])
    for bad in ("\x1b", "\x07", "\u202e", "\r"):
        assert bad not in every, repr(bad)  # before: ESC, BEL and bidi reached stdout, the CSVs and feedback
    assert any("mallory" in r["submission"] for r in graded["rows"])
    assert "exp overflows" in "".join(p.read_text(encoding="utf-8") for p in graded["files"] if "manual" in p.name)


def test_deep_json_is_a_clear_row_without_a_traceback(graded):
    rows = [r for r in graded["rows"] if r["submission"].startswith("deep/")]
    assert rows and all("nested" in r["message"] and "Traceback" not in r["message"] for r in rows), rows
    text = "".join(p.read_text(encoding="utf-8") for p in graded["files"])
    assert str(T.ROOT) not in text  # before: the grader's traceback with the instructor's checkout path


def test_one_budget_covers_every_rerun(tmp_path):
    """10. Two hanging exercises: the reruns share --notebook-timeout (before: 111 s for a limit of 40)."""
    ensure_bwrap()
    nb = set_exercise(pasted(), "fx-double", "import time\ntime.sleep(1000)\n" + DOUBLE_OK)
    save(set_exercise(nb, "fx-kernel", "import time\ntime.sleep(1000)\n" + KERNEL_OK), tmp_path / "s" / "slow" / NB)
    out = tmp_path / "g.csv"
    t0 = time.monotonic()
    assert grade_main([str(tmp_path / "s"), "--out", str(out), "--solutions", str(FIXTURES), "--timeout", "30",
                       "--setup-timeout", "120", "--notebook-timeout", "40"]) == 0
    took = time.monotonic() - t0
    rows = {r["exercise"]: r for r in read_rows(out)}
    assert all(r["status"] == "timeout" for r in rows.values()), rows
    assert took < 40 + 35, took  # the budget, plus the judge and start-up


def test_cgroup_counts_tmpfs_files(tmp_path):
    """6. Files in the sandbox's tmpfs count against its memory: 300 MB in /tmp under a 200 MB cgroup."""
    ensure_bwrap()
    from softmax_lab.grading import cgroup, sandbox

    if cgroup.why_unavailable():
        pytest.skip(cgroup.why_unavailable())
    group = cgroup.create(memory_mb=200, tasks=64, cpus=1)
    try:
        cmd = sandbox.command(["/bin/sh", "-c", "head -c 300000000 /dev/zero > /tmp/fill; echo wrote"],
                              grader_dir=tmp_path, env=sandbox.base_env(), tmp_mb=1024)
        p = subprocess.run(cgroup.enter(group, cmd), capture_output=True, text=True, timeout=120)
        assert "wrote" not in p.stdout and group.oom_kills() >= 1, (p.returncode, p.stdout, p.stderr[-300:])
    finally:
        group.close()
    assert not group.dirs[0].exists()


@pytest.mark.parametrize("body", [
    "tl.core.builtins.exec('1')",
    "m = tl\n    m.core.builtins.exec('1')",
    "getattr(tl, 'core')",
    "x = tl.load(x_ptr)\n    x.handle.data.tofile('/tmp/x')",
    "s = tl.constexpr('{}')\n    s.value.format(1)",
    "tl.extra.pkgutil.get_data('os', 'x')",
    "triton.runtime.interpreter.InterpreterBuilder",
    "tl.load.__globals__",
    "f = [i for i in range(3)]",
])
def test_kernel_check_refuses_ways_out(body):
    """2. What the judge's syntax check refuses (each was a way from a kernel to Python or the judge)."""
    harness = _harness()
    source = f"@triton.jit\ndef k(x_ptr, BLOCK: tl.constexpr):\n    {body}\n"
    with pytest.raises(harness.SourceRejected):
        harness.define_kernels(source)


def test_kernel_check_accepts_every_course_kernel():
    """The same check accepts every @triton.jit function of the solutions' exercise cells."""
    import nbformat

    from softmax_lab.course.notebook import tag_value

    harness = _harness()
    n = 0
    for path in sorted(T.SOLUTIONS.glob("*.ipynb")) + [CH90]:
        for cell in nbformat.read(str(path), as_version=4).cells:
            if tag_value(cell, "exercise:") and "@triton.jit" in cell.source:
                src = "\n".join(ln for ln in cell.source.splitlines() if not ln.strip().startswith("###"))
                harness.define_kernels(src)
                n += 1
    assert n >= 5


def _harness():
    import importlib.util

    spec = importlib.util.spec_from_file_location("judge_harness_under_test",
                                                  Path(T.softmax_lab.__file__).parent / "grading" / "judge_harness.py")
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    return mod


def test_check_of_someone_elses_notebook_needs_the_sandbox(tmp_path, monkeypatch, capsys):
    """8. `check` of a notebook outside the user's workspace/ ran unsandboxed when bwrap could not work."""
    from softmax_lab.grading import sandbox

    monkeypatch.setattr(sandbox, "bwrap_path", lambda: None)
    marker = tmp_path / "written-by-learner"
    nb = set_exercise(pasted(), "fx-double", DOUBLE_OK + f"\n\nopen({str(marker)!r}, 'w').write('x')\n")
    sub = save(nb, tmp_path / "learner" / NB)
    with pytest.raises(SystemExit):
        check_main([str(sub), "--solutions", str(FIXTURES)])
    err = capsys.readouterr().err
    assert "bubblewrap" in err and "--unsafe-no-sandbox" in err and "workspace" in err, err
    assert not marker.exists()  # before: the learner's code wrote this file on the instructor's machine


def test_own_workspace_notebook_is_recognised(tmp_path, monkeypatch):
    from softmax_lab.course import notebook
    from softmax_lab.grading import options

    monkeypatch.setattr(notebook, "repo_root", lambda *a, **k: tmp_path)
    (tmp_path / "workspace").mkdir()
    mine = save(pasted(), tmp_path / "workspace" / NB)
    theirs = save(pasted(), tmp_path / "elsewhere" / NB)
    ns = type("Args", (), {})
    ns.notebooks = [mine]
    assert options._own_notebooks(ns)
    ns.notebooks = [mine, theirs]
    assert not options._own_notebooks(ns)


def test_grader_faults_go_to_the_instructor_not_the_feedback(monkeypatch, capsys):
    from softmax_lab.grading import grade
    from softmax_lab.grading.submissions import Submission

    def broken(*a, **k):
        raise RuntimeError(f"internal detail {T.ROOT}")

    monkeypatch.setattr(grade, "grade_notebook", broken)
    res = grade._grade_one(Submission(CH90, "x/" + NB, "x"), {}, None)
    assert "grader failed" in res.rows[0]["message"] and str(T.ROOT) not in res.rows[0]["message"]
    assert "Traceback" in capsys.readouterr().err


def test_without_cgroups_grade_refuses_unless_told(tmp_path, monkeypatch, capsys):
    from softmax_lab.grading import cgroup

    ensure_bwrap()
    monkeypatch.setitem(cgroup._BACKEND, "v", ("", None, "no cgroup here (test)"))
    sub = save(pasted(), tmp_path / "a" / NB)
    with pytest.raises(SystemExit):
        grade_main([str(sub.parent), "--out", str(tmp_path / "g.csv"), "--solutions", str(FIXTURES)])
    err = capsys.readouterr().err
    assert "--unsafe-no-cgroup" in err and "still hold" in err, err


def test_json_from_the_harness_is_parsed_strictly():
    from softmax_lab.grading.judge import parse_results

    for bad in [b"", b"[" * 100_000, b'{"results": {}, "files": [["../x.npy", 1]]}\nx',
                b'{"results": {}, "files": [["e0_c0_out.npy", 99]]}\nshort']:
        with pytest.raises(ValueError):
            parse_results(bad + (b"\n" if b"\n" not in bad else b""))
    assert parse_results(b'{"results": {"a": 1}, "files": [["e0_c0_out.npy", 2]]}\nab') == (
        {"a": 1}, {"e0_c0_out.npy": b"ab"})


def test_a_dask_cluster_grades_the_class_as_here(graded, dask_cluster, tmp_path):  # noqa: F811 - the fixture
    """`grade --dask` sends each notebook to a worker, which grades it in its own sandbox: the same rows as
    the local run above (sorted; a pipe's inode and the judge's random sizes masked), and a rerun resumes."""
    out, where = tmp_path / "gradebook.csv", ["--dask", dask_cluster.scheduler_address]
    argv = [graded["submissions"], "--out", out, "--solutions", FIXTURES, "--memory-mb", "3072", *FAST, *where]
    proc = grade_cli(argv)
    assert proc.returncode == 0, proc.stderr[-3000:]
    assert "2 worker(s)" in proc.stderr and "Traceback" not in proc.stderr, proc.stderr[-3000:]
    assert comparable(read_rows(out)) == comparable(graded["rows"])
    again = grade_cli(argv)
    assert again.returncode == 0 and "11 already graded" in again.stderr and "0 to grade" in again.stderr, again.stderr
    assert comparable(read_rows(out)) == comparable(graded["rows"])


def test_the_class_gets_totals_results_merged_points_and_html_feedback(graded, tmp_path):
    """The hostile class's gradebook as an instructor uses it: per-learner totals and pass/fail, the hand-graded
    points merged from the sheet, one escaped HTML page per learner (a copy of the gradebook, merged here)."""
    import csv
    import shutil

    grades = tmp_path / "grades"
    shutil.copytree(graded["out"].parent, grades)
    out = grades / "gradebook.csv"
    with open(out.with_name("gradebook.learners.csv"), newline="", encoding="utf-8") as f:
        results = {r["learner"]: r for r in csv.DictReader(f)}
    assert set(results) >= {"honest", "fifo", "escape", "deep"} and "deep" not in {
        r["learner"] for r in results.values() if r["result"] == "pass"}
    assert results["honest"]["points"] == "5" and results["honest"]["result"] == "pending"  # fx-why not graded yet
    sheet = list(csv.DictReader(open(out.with_name("gradebook.manual.csv"), newline="", encoding="utf-8")))
    for r in sheet:
        r["points"] = "1" if r["submission"].startswith("honest/") else "0"
    filled = tmp_path / "filled.csv"
    with open(filled, "w", newline="", encoding="utf-8") as f:
        w = csv.DictWriter(f, fieldnames=list(sheet[0]))
        w.writeheader()
        w.writerows(sheet)
    argv = [graded["submissions"], "--out", out, "--solutions", FIXTURES, "--jobs", "2", "--memory-mb", "3072", *FAST]
    assert grade_main([*argv, "--merge", filled]) == 0
    with open(out.with_name("gradebook.learners.csv"), newline="", encoding="utf-8") as f:
        results = {r["learner"]: r for r in csv.DictReader(f)}
    honest = results["honest"]
    assert (honest["result"], honest["points"], honest["max_points"], honest["manual_points"]) == ("pass", "6", "6",
                                                                                                    "1")
    assert results["fifo"]["result"] == "fail"
    pages = {p.stem for p in (grades / "gradebook.feedback").glob("*.html")}
    assert {"honest", "fifo", "escape", "deep"} <= pages
    page = (grades / "gradebook.feedback" / "honest.html").read_text(encoding="utf-8")
    assert "Passed: 6 of 6 points" in page and "1 of 1" in page
    for p in (grades / "gradebook.feedback").glob("*.html"):
        text = p.read_text(encoding="utf-8")
        assert "<script" not in text and "\x1b" not in text and "\u202e" not in text, p.name


def test_sigterm_mid_class_stops_as_ctrl_c_does(tmp_path):
    """`kill` (or a batch system's time limit) while `grade` runs: before, Python died on the spot and left the
    gradebook's lock behind (and the next run's takeover an empty .takeover file). Now it stops as Ctrl-C does:
    the rows graded so far kept, the lock removed, and a rerun grades the rest."""
    import signal

    ensure_bwrap()
    subs = tmp_path / "class"
    slow = DOUBLE_OK + "\n\nimport time\ntime.sleep(20)\n"
    for name in ("ann", "bob", "cat"):
        nb = pasted() if name == "ann" else set_exercise(pasted(), "fx-double", slow)
        save(nb, subs / name / NB)
    out = tmp_path / "grades" / "gradebook.csv"
    argv = [subs, "--out", out, "--solutions", FIXTURES, "--jobs", "1", *FAST]
    proc = grade_cli(argv, stdout=subprocess.PIPE, stderr=subprocess.PIPE)
    try:
        first = proc.stdout.readline()  # one notebook's summary line: the first notebook is graded
        assert first, proc.stderr.read()[-3000:]
        proc.send_signal(signal.SIGTERM)
        _, err = proc.communicate(timeout=120)
    finally:
        proc.kill()
    assert proc.returncode == 130, err[-3000:]
    assert "interrupted" in err and "Traceback" not in err, err[-3000:]
    assert sorted(p.name for p in out.parent.iterdir() if "lock" in p.name) == []
    graded = {r["submission"].split("/")[0] for r in read_rows(out)}
    assert graded and graded < {"ann", "bob", "cat"}, graded
    again = grade_cli(argv)
    assert again.returncode == 0 and "taking over" not in again.stderr, again.stderr[-3000:]
    assert {r["submission"].split("/")[0] for r in read_rows(out)} == {"ann", "bob", "cat"}
