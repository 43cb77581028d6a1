"""The hosted-notebook route as users take it: the wheel pip builds from this tree, installed for real
(not editable) into a fresh virtual environment with no checkout on the path, gives every hint level of every
exercise, chapter 9's recorded H200 cells exactly as the solution shows them, and a chapter's check.

The heavy dependencies (torch, triton, numba ...) are this environment's, seen through a path file, so the test
is fast and needs no network; softmax_lab itself comes only from the wheel."""
from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

from conftest import ROOT, SOLUTIONS

PACKAGE = ROOT / "code" / "softmax_lab"


@pytest.fixture(scope="module")
def installed(tmp_path_factory) -> Path:
    """The python of a fresh venv holding softmax_lab from its wheel, and this environment's other packages."""
    tmp = tmp_path_factory.mktemp("wheel")
    src = tmp / "src"  # a copy, so that setuptools' build/ and egg-info never land in the checkout
    shutil.copytree(PACKAGE, src / "code" / "softmax_lab", ignore=shutil.ignore_patterns("__pycache__"))
    for name in ("pyproject.toml", "README.md"):
        shutil.copy(ROOT / name, src / name)
    pip = [sys.executable, "-m", "pip", "--disable-pip-version-check", "-q"]
    built = subprocess.run([*pip, "wheel", "--no-deps", "--no-build-isolation", "-w", str(tmp), str(src)],
                           capture_output=True, text=True, timeout=300)
    assert built.returncode == 0, built.stderr[-2000:]
    (wheel,) = tmp.glob("softmax_lab-*.whl")
    venv = tmp / "venv"
    subprocess.run([sys.executable, "-m", "venv", "--without-pip", str(venv)], check=True, timeout=120)
    python = venv / "bin" / "python"
    site = next((venv / "lib").glob("python3*/site-packages"))
    ours = next(p for p in map(Path, sys.path) if p.name == "site-packages" and (p / "torch").is_dir())
    (site / "course-dependencies.pth").write_text(f"{ours}\n")  # the editable softmax_lab's own .pth is not read
    done = subprocess.run([*pip, "--python", str(python), "install", "--no-deps", "--no-index", str(wheel)],
                          capture_output=True, text=True, timeout=300, env=_clean_env())
    assert done.returncode == 0, done.stderr[-2000:]
    return python


def _clean_env() -> dict:
    return {k: v for k, v in os.environ.items() if k not in ("PYTHONPATH", "VIRTUAL_ENV", "SOFTMAX_LAB_SOURCE")}


def run_installed(python: Path, code: str, tmp_path: Path) -> subprocess.CompletedProcess:
    # A file, not -c: Triton reads a kernel's source from disk. Run in an empty folder: no checkout anywhere.
    script = tmp_path / "snippet.py"
    script.write_text(textwrap.dedent(code))
    return subprocess.run([str(python), str(script)], capture_output=True, text=True, timeout=600, cwd=tmp_path,
                          env=_clean_env())


def test_the_installed_package_is_the_wheel_and_its_data_is_there(installed, tmp_path):
    proc = run_installed(installed, """\
        import softmax_lab
        from softmax_lab import course, hints
        print(softmax_lab.__file__)
        print(course.data_file("nbval_sanitize.cfg").is_file(), hints._repo_solutions())
    """, tmp_path)
    assert proc.returncode == 0, proc.stderr[-3000:]
    where, data = proc.stdout.splitlines()
    assert str(installed.parent.parent) in where and "site-packages" in where, where
    assert data == "True None", "the sanitize config is installed, and no checkout is in reach"


def test_every_hint_level_of_every_exercise(installed, tmp_path):
    from softmax_lab.course import registry

    ids = [ex.id for ex in registry.load().exercises()]
    proc = run_installed(installed, f"""\
        import json, softmax_lab
        from softmax_lab import hints
        for ident in {ids!r}:
            for level in (1, 2, 3, 4):
                softmax_lab.hint(ident, level)  # what a learner calls; prints where no notebook displays it
                print(json.dumps(["LEVEL", ident, level, hints.level_text(ident, level)]))
    """, tmp_path)
    assert proc.returncode == 0, proc.stderr[-3000:]
    shown = [json.loads(ln) for ln in proc.stdout.splitlines() if ln.startswith('["LEVEL"')]
    assert len(shown) == 4 * len(ids) and len(ids) > 20
    for _, ident, level, text in shown:
        assert f"Hint {level}/4 for `{ident}`" in text and "no hint at this level" not in text, text
        if level == 4:
            assert "```python" in text and "no solution region" not in text, (ident, text)
    printed = [ln for ln in proc.stdout.splitlines() if ln.startswith("Hint ")]  # softmax_lab.hint's own output
    assert [ln.split(" (")[0] for ln in printed] == [f"Hint {lv}/4 for `{i}`" for _, i, lv, _ in shown]


def test_chapter_9_recorded_cells_print_what_the_solution_shows(installed, tmp_path):
    nb = json.loads((SOLUTIONS / "09_cuda_layer.ipynb").read_text(encoding="utf-8"))
    cells = [("".join(c["source"]), "".join("".join(o["text"]) for o in c["outputs"] if o.get("name") == "stdout"))
             for c in nb["cells"] if c["cell_type"] == "code" and "".join(c["source"]).startswith("recorded.show_")]
    assert len(cells) >= 4
    mark = "=== next cell ==="
    script = "from softmax_lab.cuda_layer import recorded\n" + "".join(f"{src}\nprint({mark!r})\n" for src, _ in cells)
    proc = run_installed(installed, script, tmp_path)
    assert proc.returncode == 0, proc.stderr[-3000:]
    printed = proc.stdout.split(mark + "\n")
    for (source, expected), got in zip(cells, printed):
        assert "not recorded" not in got, source
        assert got == expected, f"{source}: the installed package prints something else than the solution"


def test_a_chapter_check_passes_with_the_solution_and_the_command_answers(installed, tmp_path):
    """Chapter 0's check of its solved exercise, as the notebook runs it; `softmax-lab check` from the wheel."""
    nb = json.loads((SOLUTIONS / "00_setup.ipynb").read_text(encoding="utf-8"))
    tags = {t: "".join(c["source"]) for c in nb["cells"] for t in c["metadata"].get("tags", [])}
    setup = "import softmax_lab\nimport torch\nimport triton\nimport triton.language as tl\n"
    proc = run_installed(installed, setup + tags["exercise:ch00-double"] + "\n\n" + tags["check:ch00-double"] + "\n",
                         tmp_path)
    assert proc.returncode == 0, proc.stderr[-3000:]
    assert proc.stdout.strip().splitlines()[-1] == "ch00-double: PASSED (5/5 checks passed)", proc.stdout
    command = installed.parent / "softmax-lab"
    notebook = tmp_path / "00_setup.ipynb"
    shutil.copy(ROOT / "notebooks" / "00_setup.ipynb", notebook)
    answer = subprocess.run([str(command), "check", notebook.name], capture_output=True, text=True, cwd=tmp_path,
                            env=_clean_env(), timeout=120)
    assert answer.returncode == 2 and answer.stderr.strip().splitlines() == [
        "softmax-lab check: the course's solutions/ are not here (installed without the course checkout): run each "
        "exercise's check cell in the notebook, or pass --solutions DIR"], answer.stderr
