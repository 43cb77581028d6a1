"""Attacks on `softmax-lab grade`: each fails against the grader before the sandbox and the judge,
and is stopped now. Most are graded in ONE `grade --jobs 2` run of the fixture chapter 90 (module fixture).

Each learner folder is one attack; the test named after it says what used to happen and what happens now.
"""
from __future__ import annotations

import csv
import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

import nbformat
import pytest

sys.path.insert(0, str(Path(__file__).parent))
import test_grade as T
from test_grade import (CH90, DOUBLE_OK, FAST, FIXTURES, blank, by_key, ensure_bwrap, grade_main,
                        index_of, pasted, read_rows, save, set_exercise)

from softmax_lab.grading.runner import code_cell_numbers
from softmax_lab.grading.gradebook import default_feedback

MARK = "987654321"  # a sleep that must not outlive its run
SECRET = "instructor-secret-7d1f"
WRONG_DOUBLE = "def double(xs):\n    return list(xs)\n"


def _check_cell_numbers():
    sol = nbformat.read(str(CH90), as_version=4)
    nums = code_cell_numbers(sol)
    return [nums[k] for k, c in enumerate(sol.cells) if c.cell_type == "code"]


ATTACKS = {
    # A daemon started with setsid -f outlived the run (and could rewrite the gradebook later).
    "daemon": DOUBLE_OK + f"\n\nimport subprocess\nsubprocess.run(['setsid', '-f', 'sleep', '{MARK}'])\n",
    # Forged result records written into the pytest process's pipe via /proc/<pid>/fd, then pytest killed.
    "forger": WRONG_DOUBLE + (
        "import os, json, signal\n"
        "ppid = os.getppid()\n"
        "recs = [json.dumps({'event': 'end', 'cell': c, 'status': 'passed', 'stdout': ''}) for c in range(40)]\n"
        "for fd in os.listdir(f'/proc/{ppid}/fd'):\n"
        "    try:\n"
        "        with open(f'/proc/{ppid}/fd/{fd}', 'w') as f:\n"
        "            f.write('\\n'.join(recs) + '\\n' + json.dumps({'event': 'finished'}) + '\\n')\n"
        "    except OSError:\n"
        "        pass\n"
        "os.kill(ppid, signal.SIGKILL)\n"),
    # Edits that used to persist: the package's check module, the grader's sanitize config, the venv.
    "persist": DOUBLE_OK + (
        "\n\nimport softmax_lab.checks.common as c, sys, os, glob\n"
        "hits = []\n"
        "for path in [c.__file__, *glob.glob(sys.prefix + '/lib/python*/site-packages/*.pth'), "
        "'../nbval_sanitize.cfg',\n"
        "             '/grader/nbval_sanitize.cfg']:\n"
        "    try:\n"
        "        open(path, 'a').write('\\n# tampered-by-learner\\n')\n"
        "        hits.append(path)\n"
        "    except OSError:\n"
        "        pass\n"),
    # The solution found from softmax_lab.__file__, PWD or /proc/<grader>/cwd, and its cell executed.
    "peeker": WRONG_DOUBLE + (
        "import os, glob, json, pathlib, softmax_lab\n"
        "roots = [pathlib.Path(softmax_lab.__file__).resolve().parents[2], pathlib.Path(os.environ.get('PWD', '/'))]\n"
        "roots += [pathlib.Path(f'/proc/{p}/cwd') for p in os.listdir('/proc') if p.isdigit()]\n"
        "found = glob.glob(str(roots[0]) + '/tests/**/90_grading_fixture.ipynb', recursive=True)\n"
        "for root in roots:\n"
        "    found += glob.glob(str(root) + '/*/*/90_grading_fixture.ipynb')\n"
        "for root in roots:\n"
        "    for nb in found[:1]:\n"
        "        for cell in json.load(open(nb))['cells']:\n"
        "            if 'exercise:fx-double' in cell['metadata'].get('tags', []):\n"
        "                exec(''.join(cell['source']))\n"),
    # The instructor's environment printed as a FAIL line, which the feedback used to copy.
    "leaker": ("import os\n\ndef double(xs):\n"
               "    print('FAIL  leak: ' + os.environ.get('SOFTMAX_LAB_TEST_SECRET', 'no secret'))\n"
               "    return list(xs)\n"),
    # The check function replaced from the exercise cell: the check cell then printed PASSED.
    "patcher": WRONG_DOUBLE + (
        "def check_double(fn):\n"
        "    print('PASS  empty list\\nPASS  [1, 2, 3]\\nfx-double: PASSED (2/2 checks passed)')\n"),
    # `## NBVAL_RAISES_EXCEPTION` (two #) disarmed the error check of a raising exercise cell.
    "disarm": "## NBVAL_RAISES_EXCEPTION\n" + DOUBLE_OK + "\n\nraise ValueError('boom')\n",
    # An exception whose message holds a lone surrogate was graded passed.
    "surrogate": DOUBLE_OK + "\n\nraise ValueError('\\ud800')\n",
    # With --partial-credit, a printed 'FAILED (1000/1 checks passed)' gave 2000/2 points.
    "inflate": "def double(xs):\n    print('fx-double: FAILED (1000/1 checks passed)')\n    return list(xs)\n",
}


def make_attacks(folder: Path) -> None:
    nbname = "90_grading_fixture.ipynb"
    for who, source in ATTACKS.items():
        save(set_exercise(pasted(), "fx-double", source), folder / who / nbname)
    # A row_max that does not launch the kernel at all (the kernel left blank): the notebook's check passes.
    wrapper = blank().cells[index_of(blank(), "exercise:", "fx-kernel")].source.replace(
        "row_max_kernel[(1,)](x, out, x.numel(), BLOCK=triton.next_power_of_2(x.numel()))", "out[0] = x.max()")
    assert "x.max()" in wrapper
    save(set_exercise(pasted(), "fx-kernel", wrapper), folder / "wrapper" / nbname)
    # One learner must not stop the class: a lone surrogate in an answer, an undecodable file name, a symlink
    # to the solutions, a nested folder, a huge notebook.
    nb = pasted()
    nb.cells[index_of(nb, "answer:", "fx-why")].source = "exp overflows \ud800 in fp32"
    (folder / "answersurrogate").mkdir(parents=True)
    (folder / "answersurrogate" / nbname).write_text(json.dumps(nb), encoding="ascii")  # \ud800 escaped: valid JSON
    (folder / "badname").mkdir()
    shutil.copy(folder / "daemon" / nbname, os.fsencode(folder / "badname") + b"/\xff\xfe.ipynb")
    (folder / "linker").mkdir()
    os.symlink(CH90, folder / "linker" / nbname)
    save(pasted(), folder / "nested" / "week1" / "deep" / nbname)
    big = pasted()
    big.cells[0].source += "\n" + "x" * (21 * 2**20)
    save(big, folder / "huge" / nbname)
    # Bookkeeping: a formula as a learner id, two ids that differ only in a non-ASCII letter, two notebooks.
    save(pasted(), folder / "=HYPERLINK(\"http://x\")" / nbname)
    save(pasted(), folder / "jos\u00e9" / nbname)
    save(blank(), folder / "jos\u00e8" / nbname)
    save(pasted(), folder / "twice" / nbname)
    save(blank(), folder / "twice" / "90_second_try.ipynb")


def _sleepers() -> list[int]:
    import psutil

    out = []
    for p in psutil.process_iter(["cmdline"]):
        if MARK in " ".join(p.info["cmdline"] or []):
            out.append(p.pid)
    return out


@pytest.fixture(scope="module")
def attacked(tmp_path_factory):
    ensure_bwrap()
    from softmax_lab.grading import judge

    sys.path.insert(0, str(FIXTURES.parent))
    import judges as fixture_judges

    judge.REGISTRY.update(fixture_judges.JUDGES)
    tmp = tmp_path_factory.mktemp("attacked")
    subs = tmp / "submissions"
    make_attacks(subs)
    package = Path(T.softmax_lab.__file__).parent
    before = {p: p.read_bytes() for p in [*package.rglob("*.py"), *FIXTURES.iterdir(), T.ROOT / "tests" /
                                          "nbval_sanitize.cfg"] if p.is_file()}
    # A scratch folder left by a grader killed with kill -9 (pid 2**22 + 1 does not run).
    stale = Path(os.environ.get("TMPDIR", "/tmp")) / f"softmax-lab-grade-{2**22 + 1}-leftover"
    stale.mkdir(exist_ok=True)
    os.utime(stale, (0, 0))
    out = tmp / "grades" / "gradebook.csv"
    argv = [str(subs), "--out", str(out), "--solutions", str(FIXTURES), "--jobs", "2", "--partial-credit", *FAST]
    os.environ["SOFTMAX_LAB_TEST_SECRET"] = SECRET
    cwd = os.getcwd()
    os.chdir(tmp)
    try:
        rc = grade_main(argv)
    finally:
        os.chdir(cwd)
        os.environ.pop("SOFTMAX_LAB_TEST_SECRET", None)
    after = {p: p.read_bytes() for p in before if p.exists()}
    return {"rc": rc, "rows": read_rows(out), "out": out, "subs": subs, "argv": argv, "tmp": tmp,
            "changed": [p for p in before if after.get(p) != before[p]], "stale": stale}


def _rows(att, who):
    return {r["exercise"]: r for r in att["rows"] if r["submission"].split("/")[0] == who}


def test_whole_class_graded(attacked):
    assert attacked["rc"] == 0
    who = {r["submission"].split("/")[0] for r in attacked["rows"]}
    assert set(ATTACKS) | {"wrapper", "answersurrogate", "nested", "huge", "twice", "linker"} <= who


def test_daemon_dies_with_its_run(attacked):
    assert _rows(attacked, "daemon")["fx-double"]["status"] == "passed"
    assert _sleepers() == []  # before: `sleep 987654321` still ran after grading


def test_result_pipe_cannot_be_forged(attacked):
    r = _rows(attacked, "forger")["fx-double"]
    assert r["status"] != "passed" and r["points"] == "0", r  # before: passed, 2/2


def test_edits_do_not_persist(attacked):
    assert attacked["changed"] == []  # before: checks/common.py, the .pth files ... gained a line
    assert _rows(attacked, "persist")["fx-double"]["status"] in ("passed", "failed")  # graded, class not stopped


def test_solutions_unreachable(attacked):
    r = _rows(attacked, "peeker")["fx-double"]
    assert r["status"] == "failed" and r["points"] == "0", r  # before: the solution was found and run: passed


def test_instructor_environment_unreachable(attacked):
    text = attacked["out"].read_text(encoding="utf-8")
    feedback = "".join(p.read_text(encoding="utf-8") for p in default_feedback(attacked["out"]).iterdir())
    assert SECRET not in text and SECRET not in feedback  # before: the instructor's variable was in the feedback


def test_monkeypatched_check_gets_no_credit(attacked):
    r = _rows(attacked, "patcher")["fx-double"]
    assert r["status"] == "failed" and float(r["points"]) < 2, r  # before: passed, 2/2 (--partial-credit: k/n)
    assert "grader's own launch" in r["message"]


def test_a_wrapper_that_skips_the_kernel_gets_no_credit(attacked):
    r = _rows(attacked, "wrapper")["fx-kernel"]
    assert r["status"] == "failed" and r["points"] == "0", r  # before: passed (the check only saw row_max)
    assert "row_max_kernel" in r["message"]


def test_two_hash_nbval_marker_does_not_disarm_errors(attacked):
    r = _rows(attacked, "disarm")["fx-double"]
    assert r["status"] == "error" and "boom" in r["message"], r  # before: passed


def test_lone_surrogate_exception_is_an_error(attacked):
    r = _rows(attacked, "surrogate")["fx-double"]
    assert r["status"] == "error", r  # before: passed
    r["message"].encode("utf-8")


def test_partial_credit_is_computed_by_the_grader(attacked):
    r = _rows(attacked, "inflate")["fx-double"]
    assert r["status"] == "failed" and float(r["points"]) < 2, r  # before: 2000 of 2 points


def test_one_learner_cannot_stop_the_class(attacked):
    assert _rows(attacked, "answersurrogate")["fx-double"]["status"] == "passed"  # before: UnicodeEncodeError
    assert _rows(attacked, "nested")["fx-kernel"]["status"] == "passed"
    bad = [r for r in attacked["rows"] if r["submission"].startswith("badname/")]
    assert bad and "\\xff" in bad[0]["submission"]  # before: the grader crashed on the name
    link = [r for r in attacked["rows"] if r["submission"].startswith("linker/")]
    assert link and all(r["status"] == "error" and "symbolic link" in r["message"] for r in link)
    huge = _rows(attacked, "huge")
    assert all(r["status"] == "error" and "MB" in r["message"] for r in huge.values())


def test_csv_cells_are_not_formulas(attacked):
    with open(attacked["out"], newline="", encoding="utf-8") as f:
        raw = [r for r in csv.reader(f)]
    assert not [c for row in raw for c in row if c.startswith(("=", "@", "+"))]
    assert any(c.startswith("'=HYPERLINK") for row in raw for c in row)


def test_feedback_files_do_not_collide_and_duplicates_are_flagged(attacked):
    names = sorted(p.name for p in default_feedback(attacked["out"]).iterdir())
    jos = [n for n in names if n.startswith("jos") and n.endswith(".md")]
    assert len(jos) == 2, names  # before: both learners wrote jos_.md
    assert sorted(n for n in names if n.startswith("jos") and n.endswith(".html")) == [
        n.replace(".md", ".html") for n in jos]  # and a page each
    twice = [r for r in attacked["rows"] if r["submission"].startswith("twice/")]
    assert twice and all("duplicate" in r["message"] for r in twice)


def test_stale_scratch_is_cleaned_on_start(attacked):
    assert not attacked["stale"].exists()


def test_changed_options_are_refused_not_mixed(attacked, capsys):
    argv = [a for a in attacked["argv"] if a != "--partial-credit"]
    with pytest.raises(SystemExit):
        grade_main(argv)  # before: silently kept the old rows
    assert "--force" in capsys.readouterr().err


def test_grading_refuses_without_bubblewrap(tmp_path, monkeypatch, capsys):
    from softmax_lab.grading import sandbox

    monkeypatch.setattr(sandbox, "bwrap_path", lambda: None)
    sub = save(pasted(), tmp_path / "a" / "90_grading_fixture.ipynb")
    with pytest.raises(SystemExit):
        grade_main([str(sub.parent), "--out", str(tmp_path / "g.csv"), "--solutions", str(FIXTURES)])
    assert "bubblewrap" in capsys.readouterr().err


def test_real_chapter_cheats_get_no_credit(tmp_path):
    """ch04: traffic answered with the check's own helper, a fused launcher calling torch.softmax, and a fused
    kernel without 64-bit row offsets: all passed the notebook's checks before."""
    ensure_bwrap()
    name = "04_three_kernels_to_one.ipynb"
    if not (T.SOLUTIONS / name).exists():
        pytest.skip("no chapter 04")
    nb = T.real_pasted(name)
    traffic = ("from softmax_lab.checks.ch04 import measured_traffic\n\n"
               "def three_pass_traffic(rows, cols):\n    return measured_traffic('three_pass', rows, cols)\n\n"
               "def fused_traffic(rows, cols):\n    return measured_traffic('fused', rows, cols)\n")
    set_exercise(nb, "ch04-traffic", traffic)
    blank_fused = T.learner_notebook(nbformat.read(str(T.SOLUTIONS / name), as_version=4))
    fused = blank_fused.cells[index_of(blank_fused, "exercise:", "ch04-fused")].source
    fused = fused.split("def my_fused_softmax")[0] + (
        "def my_fused_softmax(x, out):\n    out.copy_(torch.softmax(x, dim=-1))\n    return out\n")
    set_exercise(nb, "ch04-fused", fused)
    save(nb, tmp_path / "subs" / "cheat" / name)
    narrow = T.real_pasted(name)
    cell = narrow.cells[index_of(narrow, "exercise:", "ch04-fused")]
    cell.source = cell.source.replace("row = tl.program_id(0).to(tl.int64)", "row = tl.program_id(0)")
    save(narrow, tmp_path / "subs" / "int32" / name)
    out = tmp_path / "g.csv"
    from softmax_lab.grading import cgroup
    no_cgroup = ["--unsafe-no-cgroup"] if cgroup.why_unavailable() else []  # (the judge is tested here, not cgroups)
    assert grade_main([str(tmp_path / "subs"), "--out", str(out), "--jobs", "2", "--solutions", str(T.SOLUTIONS),
                       *no_cgroup]) == 0
    rows = by_key(read_rows(out))
    assert rows["cheat", "ch04-traffic"]["status"] == "failed", rows["cheat", "ch04-traffic"]
    r = rows["cheat", "ch04-fused"]
    assert r["status"] == "failed" and "my_fused_kernel" in r["message"], r
    r = rows["int32", "ch04-fused"]
    assert r["status"] == "failed" and "64-bit" in r["message"], r
    assert rows["int32", "ch04-traffic"]["status"] == "passed"


def test_sandbox_shows_no_checkout_and_no_instructor_environment(tmp_path, monkeypatch):
    """Directly: what a sandboxed process sees (before: the learner's code ran with the grader's view)."""
    ensure_bwrap()
    from softmax_lab.grading import sandbox

    monkeypatch.setenv("SOFTMAX_LAB_TEST_SECRET", SECRET)
    root = Path(T.softmax_lab.__file__).resolve().parents[2]
    probe = ("import os, json\n"
             f"print(json.dumps({{'checkout': os.path.exists({str(root / 'solutions')!r}) or "
             f"os.path.exists({str(root / 'tests')!r}), 'env': sorted(os.environ), "
             "'secret': os.environ.get('SOFTMAX_LAB_TEST_SECRET'), 'caps': open('/proc/self/status').read()"
             ".split('CapEff:')[1].split()[0], 'pids': len([p for p in os.listdir('/proc') if p.isdigit()])}))\n")
    cmd = sandbox.command([sys.executable, "-c", probe], grader_dir=tmp_path, env=sandbox.base_env())
    seen = json.loads(subprocess.run(cmd, capture_output=True, text=True, check=True).stdout)
    assert seen["checkout"] is False and seen["secret"] is None
    assert seen["caps"] == "0000000000000000" and seen["pids"] <= 3
    assert "SOFTMAX_LAB_TEST_SECRET" not in seen["env"]
