"""`softmax-lab check` as a learner runs it: from the checkout root it finds workspace/NAME and says which
file it graded; each bad input gets one line naming the fix, before anything heavy loads, and nothing is written;
the doctor proves `check` works by running it on a tiny notebook.

The course here is the doctor's own one-exercise chapter (pure Python: no torch in the kernel), so a full check takes
a few seconds."""
from __future__ import annotations

import json
import shutil
import subprocess
import sys
import textwrap
import time
from pathlib import Path

import pytest

import softmax_lab
from softmax_lab import doctor

NAME = "99_doctor.ipynb"


@pytest.fixture
def course(tmp_path):
    """A course checkout (solutions/, Makefile, notebooks/) whose learner has a solved workspace/99_doctor.ipynb."""
    tiny = tmp_path / "tiny"
    solved = doctor.tiny_course(tiny)
    root = tmp_path / "course"
    shutil.copytree(tiny / "solutions", root / "solutions")
    (root / "Makefile").write_text("# a course checkout\n")
    (root / "notebooks").mkdir()
    shutil.copy(tiny / "solutions" / NAME, root / "notebooks" / NAME)  # stands in for the blank copy
    (root / "workspace").mkdir()
    shutil.copy(solved, root / "workspace" / NAME)
    return root


def softmax_lab_check(args, cwd: Path, probe: bool = False) -> subprocess.CompletedProcess:
    """`softmax-lab check ARGS --solutions ... --registry ...` in a fresh process, run from ``cwd``. With ``probe``,
    it also prints which heavy modules the command loaded."""
    argv = ["check", *map(str, args), "--solutions", str(cwd_root(cwd) / "solutions"),
            "--registry", str(cwd_root(cwd).parent / "tiny" / "exercises")]
    script = textwrap.dedent(f"""\
        import sys
        from softmax_lab import cli
        rc = cli.main({argv!r})
        print("loaded:", sorted(m for m in ("torch", "nbformat", "jsonschema") if m in sys.modules))
        sys.exit(rc)
    """) if probe else None
    cmd = [sys.executable, "-c", script] if probe else [sys.executable, "-m", "softmax_lab.cli", *argv]
    return subprocess.run(cmd, cwd=cwd, capture_output=True, text=True, timeout=300)


def cwd_root(cwd: Path) -> Path:
    return next(d for d in [cwd, *cwd.parents] if (d / "Makefile").is_file())


def snapshot(folder: Path) -> dict[str, bytes]:
    return {str(p.relative_to(folder)): p.read_bytes() for p in sorted(folder.rglob("*")) if p.is_file()}


def test_check_from_the_checkout_root_grades_workspace_and_names_the_file(course):
    before = snapshot(course / "workspace")
    proc = softmax_lab_check([NAME], course)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    graded = course / "workspace" / NAME
    assert f"checking {graded} (saved " in proc.stdout
    assert f"{NAME}: chapter 99 (the doctor's tiny chapter): 1/1 points" in proc.stdout
    assert snapshot(course / "workspace") == before, "checking writes nothing into workspace/"


def test_a_wrong_name_is_answered_at_once_in_one_line(course):
    start = time.monotonic()
    proc = softmax_lab_check(["99_docter.ipynb"], course, probe=True)
    seconds = time.monotonic() - start
    assert proc.returncode == 1
    assert proc.stderr.strip().splitlines() == [
        f"softmax-lab check: no notebook 99_docter.ipynb in {course} or {course / 'workspace'}: "
        f"did you mean {NAME}?"]
    # Fast because nothing heavy loads on this path (the wall time depends on the machine's load).
    assert "loaded: []" in proc.stdout, proc.stdout
    assert seconds < 30


def test_help_loads_nothing_heavy_and_shows_instructor_options_apart():
    script = ("import sys\nfrom softmax_lab import cli\ntry:\n    cli.main(['check', '--help'])\nexcept SystemExit:\n"
              "    pass\n"
              "print('loaded:', sorted(m for m in ('torch', 'nbformat', 'jsonschema') if m in sys.modules))\n")
    proc = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, timeout=120)
    assert "loaded: []" in proc.stdout, proc.stdout + proc.stderr
    assert proc.stdout.startswith("usage: softmax-lab check [-h] NOTEBOOK [NOTEBOOK ...] [instructor options]\n")
    learner, _, instructor = proc.stdout.partition("instructor options:")
    assert "NOTEBOOK" in learner and "workspace/" in learner and "--timeout" not in learner
    assert "--timeout" in instructor and "--unsafe-no-sandbox" in instructor


def test_every_bad_input_gets_one_line_naming_the_fix_and_nothing_is_touched(course):
    ws = course / "workspace"
    (ws / "01_broken.ipynb").write_text('{"cells": [ {"cell_type": "code", "sou')  # saved half-way
    other = json.loads((ws / NAME).read_text())
    other["metadata"]["softmax_lab"] = {"chapter": "42"}
    for cell in other["cells"]:
        cell["metadata"]["tags"] = []
    (ws / "notes.ipynb").write_text(json.dumps(other))  # another course's notebook
    untagged = json.loads((ws / NAME).read_text())
    untagged["cells"][1]["metadata"]["tags"] = []  # the exercise cell's tag removed
    (ws / "99_untagged.ipynb").write_text(json.dumps(untagged))
    before = snapshot(course)
    proc = softmax_lab_check(["01_broken.ipynb", "notes.ipynb", "99_untagged.ipynb", "notebooks/" + NAME, "workspace"],
                             course)
    assert proc.returncode == 1 and "checking" not in proc.stdout, proc.stdout
    lines = proc.stderr.strip().splitlines()
    assert all(ln.startswith("softmax-lab check: ") for ln in lines), lines
    said = "\n".join(lines)
    assert len(lines) == 5, said
    assert ("notebooks/99_doctor.ipynb is the course's blank copy, not your work: "
            "yours is workspace/99_doctor.ipynb") in said
    assert "workspace is a folder: name the notebook, e.g. softmax-lab check workspace/" in said
    # not a chapter's name here, so no fresh copy is promised; the JSON error reads as one phrase
    assert "01_broken.ipynb is not a readable notebook (invalid JSON: unterminated string starting at line 1" in said
    assert "re-download this one" in said and "softmax-lab workspace" not in said.split("01_broken")[1].split("\n")[0]
    assert "notes.ipynb is not a notebook of this course" in said
    assert "99_untagged.ipynb has no exercise cells" in said and "copy them back from notebooks/" in said
    assert snapshot(course) == before, "a bad input changes no file"


def test_a_deleted_workspace_is_named_with_its_fix(course):
    shutil.rmtree(course / "workspace")
    proc = softmax_lab_check([NAME], course)
    assert proc.returncode == 1
    assert proc.stderr.strip().splitlines() == [
        f"softmax-lab check: no notebook {NAME} here, and no {course / 'workspace'} "
        "(deleted? or `make lab` never ran): "
        "`softmax-lab workspace` copies the chapters there"]
    assert not (course / "workspace").exists(), "nothing is created behind the learner's back"


def test_check_from_python_returns_false_instead_of_exiting(course, monkeypatch, capsys):
    monkeypatch.chdir(course)
    assert softmax_lab.check("no-such.ipynb") is False
    assert softmax_lab.check(NAME, "--timeout", "soon") is False  # an argparse error: no SystemExit in the kernel
    assert "no notebook no-such.ipynb" in capsys.readouterr().err


# ---------------------------------------------------------------------------------------------- the doctor


def test_the_doctor_runs_check_on_a_tiny_notebook():
    (finding,) = doctor.TinyCheck().finish()
    assert finding.level == "ok" and "graded a tiny notebook: 1/1 points" in finding.what, finding.line()


def test_the_doctor_checks_as_a_learners_own_notebook_where_no_cgroup_can_be_made(monkeypatch):
    """A learner's account on the class hub can make no cgroup: `check` runs their own workspace notebooks without
    one, but refused the doctor's tiny notebook (a temporary folder), so every learner saw a FAIL (helper-74)."""
    from softmax_lab.grading import cgroup

    monkeypatch.setattr(cgroup, "why_unavailable", lambda: "cgroup v1 cpu hierarchy is not writable (run as root)")
    tiny = doctor.TinyCheck()
    assert "--unsafe-no-cgroup" in tiny.command
    (finding,) = tiny.finish()
    assert finding.level == "ok" and "without a cgroup" in finding.what and "as your own notebooks run here" in \
        finding.what, finding.line()


def test_the_doctor_says_whether_cgroups_can_be_made(monkeypatch):
    from softmax_lab.grading import cgroup

    (finding,) = doctor.check_cgroups()
    assert finding.level == ("info" if cgroup.why_unavailable() else "ok"), finding.line()
    monkeypatch.setattr(cgroup, "why_unavailable", lambda: "cgroup v1 cpu hierarchy is not writable (run as root)")
    (finding,) = doctor.check_cgroups()
    assert finding.level == "info" and "not writable" in finding.what and "--unsafe-no-cgroup" in finding.what


def test_the_doctor_names_the_install_when_check_cannot_run(monkeypatch, tmp_path):
    fake = tmp_path / "softmax-lab"
    fake.write_text("#!/bin/sh\necho \"ModuleNotFoundError: No module named 'nbval'\"\nexit 1\n")
    fake.chmod(0o755)
    monkeypatch.setattr(doctor, "_course_command", lambda: [str(fake)])
    (finding,) = doctor.TinyCheck().finish()
    assert finding.level == "FAIL" and "nbval is not installed" in finding.what
    assert "requirements/lab.txt" in finding.fix


def test_the_doctor_names_missing_learner_tools(monkeypatch):
    real = doctor.find_spec
    monkeypatch.setattr(doctor, "find_spec", lambda name: None if name == "pytest" else real(name))
    (finding,) = doctor.check_learner_tools()
    assert finding.level == "FAIL" and "pytest is not installed" in finding.what and "make lab" in finding.fix



def test_a_wrong_name_suggests_the_chapter_meant_or_nothing():
    from softmax_lab.grading.check import _nearest

    names = ["00_setup.ipynb", "02_masks_and_padding.ipynb", "03_naive_kernel.ipynb", "10_long_rows.ipynb"]
    assert _nearest("3", names) == ["03_naive_kernel.ipynb"]          # the chapter's number
    assert _nearest("ch02", names) == ["02_masks_and_padding.ipynb"]
    assert _nearest("10.ipynb", names) == ["10_long_rows.ipynb"]
    assert _nearest("02_masks_and_paddng.ipynb", names) == ["02_masks_and_padding.ipynb"]  # a typo
    assert _nearest("foo.ipynb", names) == [] and _nearest("11_missing.ipynb", names) == []  # nothing close


def test_check_from_a_deleted_folder_says_how_to_get_the_workspace_back(course):
    """A learner deletes ~/softmax-lab/workspace while their terminal is in it: one line, no traceback, naming
    the way back (on the hub: stop and start the server; docs/hub.md), and nothing is written."""
    gone = course / "workspace" / "gone"
    gone.mkdir()
    proc = subprocess.run(["bash", "-c", f'cd "{gone}" && rmdir "{gone}" && exec "$0" -m softmax_lab.cli check {NAME}',
                           sys.executable], capture_output=True, text=True, timeout=120)
    assert proc.returncode == 2 and proc.stdout == "", proc.stdout + proc.stderr
    assert proc.stderr.count("\n") == 1 and "Traceback" not in proc.stderr, proc.stderr
    assert "no longer exists" in proc.stderr and "Stop My Server" in proc.stderr and "softmax-lab workspace" in \
        proc.stderr


def test_check_in_the_class_edition_grades_against_check_notebooks(course):
    """The class edition (a class hub's ~/softmax-lab) has no solutions/: `check` finds check-notebooks/, the
    solution notebooks without their answers (`softmax-lab release`), and grades exactly as before."""
    from softmax_lab.course.build import check_notebook
    from softmax_lab.course.notebook import dumps, read

    (course / "check-notebooks").mkdir()
    for path in (course / "solutions").glob("*.ipynb"):
        (course / "check-notebooks" / path.name).write_text(dumps(check_notebook(read(path))))
    shutil.rmtree(course / "solutions")
    argv = ["check", NAME, "--registry", str(course.parent / "tiny" / "exercises")]
    proc = subprocess.run([sys.executable, "-m", "softmax_lab.cli", *argv], cwd=course / "workspace",
                          capture_output=True, text=True, timeout=300)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert f"{NAME}: chapter 99 (the doctor's tiny chapter): 1/1 points" in proc.stdout
