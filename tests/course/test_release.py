"""The class edition (`softmax-lab release OUT`): built from a clean clone of this checkout as an instructor does,
it holds the learner notebooks, the package and hints 1-3, no answer anywhere (every file, the wheel's members and
every notebook cell searched with test_no_answers' normalisation), its chapters run, and its tools work."""
from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import nbformat
import pytest

from conftest import ROOT, SOLUTIONS, course_registry
from test_no_answers import normalise, significant
from softmax_lab.course import notebook
from softmax_lab.course.release import texts

# Lines of one chapter's answer that another chapter's learner notebook gives as its starting code (the release
# lists them in EDITION.json's "in_another_chapter"): none.
GIVEN_BY_ANOTHER_CHAPTER: set = set()


def cli(*args, cwd=None, env=None, timeout=600):
    return subprocess.run([sys.executable, "-m", "softmax_lab.cli", *map(str, args)], capture_output=True,
                          text=True, cwd=cwd, env=env, timeout=timeout)


def in_edition(edition: Path, script: str, cwd: Path | None = None) -> subprocess.CompletedProcess:
    """Python in the edition, importing its own package (what `make lab`'s editable install gives)."""
    env = {**os.environ, "PYTHONPATH": str(edition / "code")}
    return subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, cwd=cwd or edition,
                          env=env, timeout=300)


@pytest.fixture(scope="module")
def source(tmp_path_factory):
    """A clean clone of this checkout's last commit: what an instructor releases from."""
    if subprocess.run(["git", "-C", str(ROOT), "rev-parse", "HEAD"], capture_output=True).returncode != 0:
        pytest.skip("not a git checkout: the class edition is built from one")
    src = tmp_path_factory.mktemp("source") / "course"
    subprocess.run(["git", "clone", "-q", "--local", str(ROOT), str(src)], check=True, timeout=300)
    return src


@pytest.fixture(scope="module")
def edition(source, tmp_path_factory):
    out = tmp_path_factory.mktemp("class") / "edition"
    proc = cli("release", out, "--root", source)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert "none found" in proc.stdout
    # no chapter's learner notebook hands out another chapter's answer (chapter 2 once gave chapter 1's last line)
    assert "another chapter's learner notebook gives away" not in proc.stdout, proc.stdout
    return out


def test_the_edition_holds_the_learner_material_and_no_answer_material(edition, source):
    names = {p.relative_to(edition).as_posix() for p in edition.rglob("*") if p.is_file()}
    assert not any(n.startswith(("solutions/", "tests/", "docs/", ".ci/")) for n in names)
    assert {p.name for p in (edition / "notebooks").glob("*.ipynb")} == {p.name for p in SOLUTIONS.glob("*.ipynb")}
    for must in ("Makefile", "pyproject.toml", "requirements/lab.txt", "tools/install.sh",
                 "benchmarks/records/h200-bench-all-kernels.json", "code/softmax_lab/kernels/fused.py",
                 "code/softmax_lab/course/exercises/ch04.toml"):
        assert must in names, must
    assert not any(n.startswith("benchmarks/") and n.endswith((".py", ".log", ".sh", ".txt")) for n in names)
    assert "**Class edition**" in (edition / "README.md").read_text().split("\n## ")[0]
    manifest = json.loads((edition / "EDITION.json").read_text())
    head = subprocess.run(["git", "-C", str(source), "rev-parse", "HEAD"], capture_output=True, text=True).stdout
    assert manifest["built_from"] == head.strip() and manifest["uncommitted"] == []
    assert manifest["answer_search"]["found"] == [] and manifest["answer_search"]["lines"] > 300
    for path in (edition / "code/softmax_lab/data/hints").glob("ch*.json"):
        data = json.loads(path.read_text())
        assert data["edition"] == "class"
        assert all(set(e) == {"chapter", "points", "hints"} and len(e["hints"]) == 3
                   for e in data["exercises"].values())
    for path in (edition / "notebooks").glob("*.ipynb"):
        nb = notebook.read(path)
        assert not [c for c in nb.cells if notebook.tag_value(c, notebook.RUBRIC)], path.name
        assert not any(notebook.has_solution(c.source) for c in nb.cells), path.name
        assert not any(c.get("outputs") for c in nb.cells if c.cell_type == "code"), path.name
        # the same learner notebooks as notebooks/ of the source (tests/course/test_build.py keeps those up to date)
        assert path.read_text() == (ROOT / "notebooks" / path.name).read_text(), path.name
    # check-notebooks/: what `softmax-lab check` grades against on a class hub, with no answer in it (the search
    # above covers every file): no solution region, rubric or exercise output, the check cells' verdicts kept
    checks = edition / "check-notebooks"
    assert {p.name for p in checks.glob("*.ipynb")} == {p.name for p in SOLUTIONS.glob("*.ipynb")}
    assert "deploy/start-learner" in names and "deploy/jupyterhub_config.py" in names
    kept = 0
    for path in (edition / "check-notebooks").glob("*.ipynb"):
        nb = notebook.read(path)
        assert not [c for c in nb.cells if notebook.tag_value(c, notebook.RUBRIC)], path.name
        assert not any(notebook.has_solution(c.source) for c in nb.cells), path.name
        assert not any(c.get("outputs") for c in nb.cells if notebook.tag_value(c, "exercise:") is not None)
        kept += sum(1 for c in nb.cells if c.cell_type == "code" and c.get("outputs"))
    assert kept > 20, "the check cells' recorded outputs (what nbval compares) must stay"


def answer_lines() -> dict[str, str]:
    """Every significant line (test_no_answers' rule) of every solution region, model answer and rubric: line ->
    (its notebook, where)."""
    found = {}
    for path in sorted(SOLUTIONS.glob("*.ipynb")):
        for cell in notebook.read(path).cells:
            if notebook.tag_value(cell, notebook.RUBRIC):
                lines = cell.source.split("\n")
            else:
                lines, inside = [], False
                for raw in cell.source.split("\n"):
                    if raw.strip() in (notebook.BEGIN, notebook.END):
                        inside = raw.strip() == notebook.BEGIN
                    elif inside and not raw.strip().startswith(notebook.HINT):
                        lines.append(raw)
            for line in map(normalise, lines):
                if significant(line):
                    found.setdefault(line, path.name)
    return found


def normalised(text: str) -> str:
    return "\n".join(normalise(line) for line in text.split("\n"))


def search(folder: Path, lines: dict[str, str]) -> set[tuple[str, str]]:
    hits = set()
    for path in sorted(p for p in folder.rglob("*") if p.is_file()):
        for name, text in texts(path.relative_to(folder).as_posix(), path.read_bytes()):
            blob = normalised(text)
            hits |= {(name.split("!")[0], line) for line in lines if line in blob}
    return hits


def test_no_line_of_any_answer_is_anywhere_in_the_edition(edition, tmp_path):
    package = "\n".join(normalised(p.read_text()) for p in (edition / "code/softmax_lab").rglob("*.py"))
    hints = "\n".join(normalised(h.replace("`", "")) for ex in course_registry().exercises() for h in ex.hints)
    every = answer_lines()
    lines = {line: nb for line, nb in every.items() if line not in package and line not in hints}
    assert len(lines) > 300, "too few answer lines: is the rule finding the solution regions?"
    found = search(edition, lines)
    assert (found - GIVEN_BY_ANOTHER_CHAPTER) == set(), sorted(found)
    assert all(Path(name).name != lines[line] for name, line in found), "a notebook gives its own answer away"
    # The search finds what it looks for: the source edition's level-4 hint data holds the answers.
    assert len(search(ROOT / "code/softmax_lab/data/hints", lines)) > 50


def test_learner_tools_work_and_level_four_is_not_in_this_edition(edition):
    ex = course_registry().exercise("ch04-fused")
    script = (
        "import softmax_lab, softmax_lab.hints as h, json\n"
        "print(json.dumps([h.level_text('ch04-fused', k) for k in (1, 2, 3, 4)]))\n"
        "h._publish = lambda data, metadata=None: print(json.dumps(metadata))\n"
        "h.hint('ch04-fused', 4)\n")
    proc = in_edition(edition, script)
    assert proc.returncode == 0, proc.stderr
    levels, recorded = proc.stdout.splitlines()
    levels = json.loads(levels)
    for k in (1, 2, 3):
        assert ex.hints[k - 1] in levels[k - 1]
    assert "not in this edition" in levels[3] and "```" not in levels[3]
    assert json.loads(recorded)["softmax_lab"]["hint"]["level"] == 3  # showed nothing: caps nothing
    proc = cli("workspace", cwd=edition, env={**os.environ, "PYTHONPATH": str(edition / "code")})
    assert proc.returncode == 0, proc.stderr
    assert {p.name for p in (edition / "workspace").glob("*.ipynb")} == {p.name for p in SOLUTIONS.glob("*.ipynb")}
    # `make lab` runs `softmax-lab lab` at the edition's root: it finds it (and only then checks the port)
    proc = cli("lab", "--port", "0", cwd=edition / "notebooks", env={**os.environ, "PYTHONPATH": str(edition / "code")})
    assert proc.returncode == 2 and "port 0 is not a TCP port" in proc.stderr, proc.stderr
    proc = cli("build", cwd=edition, env={**os.environ, "PYTHONPATH": str(edition / "code")})
    assert proc.returncode == 2 and "class edition" in proc.stderr and "Traceback" not in proc.stderr


def test_the_wheel_installs_with_hints_one_to_three(edition, tmp_path):
    (wheel,) = (edition / "dist").glob("softmax_lab-*.whl")
    target = tmp_path / "site"
    subprocess.run([sys.executable, "-m", "pip", "install", "-q", "--no-deps", "--disable-pip-version-check",
                    "--target", str(target), str(wheel)], check=True, capture_output=True, timeout=300)
    env = {**os.environ, "PYTHONPATH": str(target)}
    script = ("import softmax_lab.hints as h\nassert h.__file__.startswith(%r), h.__file__\n"
              "print(h.level_text('ch01-stable-row', 3))\nprint(h.level_text('ch01-stable-row', 4))\n" % str(target))
    proc = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, cwd=tmp_path, env=env,
                          timeout=300)
    assert proc.returncode == 0, proc.stderr
    assert "tl.exp(x - m)" in proc.stdout and "not in this edition" in proc.stdout


def test_a_blank_chapter_runs_in_the_edition(edition, tmp_path):
    """Chapter 0 as a learner opens it: every cell runs; the check says 'not implemented yet'."""
    ran = tmp_path / "ran.ipynb"
    script = (
        "import nbformat, nbclient\n"
        "nb = nbformat.read('notebooks/00_setup.ipynb', as_version=4)\n"
        "nbclient.NotebookClient(nb, kernel_name='python3', allow_errors=True, timeout=300,\n"
        "                        resources={'metadata': {'path': 'notebooks'}}).execute()\n"
        f"nbformat.write(nb, {str(ran)!r})\n")
    proc = in_edition(edition, script)
    assert proc.returncode == 0, proc.stderr[-2000:]
    nb = nbformat.read(str(ran), as_version=4)
    errors = [(k, o.ename) for k, c in enumerate(nb.cells) if c.cell_type == "code"
              for o in c.outputs if o.output_type == "error"]
    assert errors == []
    checks = [c for c in nb.cells if notebook.tag_value(c, notebook.CHECK)]
    assert checks and all("not implemented yet" in "".join(o.get("text", "") for o in c.outputs) for c in checks)


def test_a_finished_chapter_passes_nbval_in_the_edition(edition, tmp_path):
    """Chapter 2 of the edition with a learner's finished exercises (the solutions' code) matches the solutions'
    outputs under nbval, run with the edition's package and recorded data."""
    name = "02_masks_and_padding.ipynb"
    solved = {c.get("id"): c for c in notebook.read(SOLUTIONS / name).cells}
    nb = notebook.read(edition / "notebooks" / name)
    for cell in nb.cells:
        done = solved.get(cell.get("id"))
        if cell.cell_type != "code" or done is None:
            continue
        if notebook.tag_value(cell, notebook.EXERCISE):
            cell.source = done.source
        cell.outputs, cell.execution_count = done.outputs, done.execution_count
    path = edition / "workspace" / f"finished_{name}"
    path.parent.mkdir(exist_ok=True)
    nbformat.write(nb, str(path))
    env = {**os.environ, "PYTHONPATH": str(edition / "code")}
    proc = subprocess.run([sys.executable, "-m", "pytest", "-p", "no:cacheprovider", "-q", "--nbval-lax",
                           "--nbval-current-env", "--nbval-sanitize-with",
                           str(edition / "code/softmax_lab/data/nbval_sanitize.cfg"), str(path)],
                          capture_output=True, text=True, cwd=edition, env=env, timeout=600)
    assert proc.returncode == 0, proc.stdout[-3000:]


def test_a_dirty_source_is_refused_and_nothing_is_written(source, tmp_path):
    scratch = source / "solutions" / "notes.txt"
    scratch.write_text("draft")
    try:
        proc = cli("release", tmp_path / "out", "--root", source)
        assert proc.returncode == 2 and "uncommitted changes (solutions/notes.txt)" in proc.stderr
        assert "--allow-dirty" in proc.stderr and not (tmp_path / "out").exists()
        proc = cli("release", tmp_path / "out", "--root", source, "--allow-dirty", "--no-wheel")
        assert proc.returncode == 0, proc.stderr
        assert "uncommitted" in proc.stderr
        assert json.loads((tmp_path / "out" / "EDITION.json").read_text())["uncommitted"] == ["solutions/notes.txt"]
    finally:
        scratch.unlink()


def test_an_occupied_or_nested_out_folder_is_refused_and_kept(source, tmp_path):
    out = tmp_path / "busy"
    out.mkdir()
    (out / "grades.csv").write_text("mine")
    proc = cli("release", out, "--root", source)
    assert proc.returncode == 2 and "not an empty folder" in proc.stderr and "deleted" in proc.stderr
    assert [p.name for p in out.iterdir()] == ["grades.csv"] and (out / "grades.csv").read_text() == "mine"
    proc = cli("release", source / "class", "--root", source)
    assert proc.returncode == 2 and "inside the source tree" in proc.stderr and not (source / "class").exists()
