"""Each exercise lives in one module that its id names, and the checks stand below the grader.

Protects: the grader finding every judge by importing the one module the registry's id names (no scan), the
explicit list of exercises judged in the notebook only, chapter packages holding nothing but exercise
modules (plus ``_shared`` helpers), and the checks never importing ``softmax_lab.grading``.
"""
import ast
import importlib
import os
import subprocess
import sys

import pytest

from conftest import ROOT
from softmax_lab.course import exercises
from softmax_lab.course.registry import CHECKS, NOTEBOOK_ONLY, check_module

EXERCISES = exercises()


@pytest.mark.parametrize("ident", [e.id for e in EXERCISES])
def test_the_id_names_a_module_with_the_check_and_the_judge(ident):
    """``chNN-name`` -> ``checks.chNN.name`` (a chapter package) or ``checks.chNN``: that module defines the
    exercise's check function and ``JUDGES[ident]``, unless the exercise is listed as judged in the notebook only."""
    name = check_module(ident)
    assert name is not None, f"{ident}: no module checks/{ident.split('-')[0]}/... or checks/{ident.split('-')[0]}.py"
    mod = importlib.import_module(name)
    check = next(e.check for e in EXERCISES if e.id == ident)
    assert callable(getattr(mod, check, None)), f"{name} has no {check}"
    judges = getattr(mod, "JUDGES", {})
    if ident in NOTEBOOK_ONLY:
        assert ident not in judges, f"{ident} has a judge now: take it off NOTEBOOK_ONLY"
    else:
        assert ident in judges, f"{name} has no JUDGES[{ident!r}] (or list {ident} in registry.NOTEBOOK_ONLY)"


def test_notebook_only_lists_real_exercises():
    assert NOTEBOOK_ONLY <= {e.id for e in EXERCISES}


def test_the_grader_finds_exactly_the_registry_s_judges():
    """judge.judges() returns one judge per judged exercise, each from its own module."""
    from softmax_lab.grading import judge

    found = {k for k in judge.judges() if k in {e.id for e in EXERCISES}}
    assert found == {e.id for e in EXERCISES} - NOTEBOOK_ONLY


def test_chapter_packages_hold_one_module_per_exercise():
    """In a chapter package every public module is an exercise of that chapter; helpers start with ``_``."""
    for package in sorted(p for p in CHECKS.iterdir() if p.is_dir() and p.name.startswith("ch")):
        ids = {e.id.partition("-")[2].replace("-", "_") for e in EXERCISES if e.chapter == package.name[2:]}
        public = {p.stem for p in package.glob("*.py") if not p.stem.startswith("_")}
        assert public == ids, f"checks/{package.name}/: modules {sorted(public)} vs exercises {sorted(ids)}"


def _imported_modules(path, package: str) -> set[str]:
    tree = ast.parse(path.read_text(encoding="utf-8"))
    found = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            found |= {a.name for a in node.names}
        elif isinstance(node, ast.ImportFrom):
            if node.level:
                base = package.split(".")[: len(package.split(".")) - node.level + 1]
                found.add(".".join(base + ([node.module] if node.module else [])))
            else:
                found.add(node.module or "")
    return found


def test_checks_never_import_the_grader():
    """The grader imports the checks, never the other way round (it passes in what they need)."""
    for path in sorted(CHECKS.rglob("*.py")):
        rel = path.relative_to(CHECKS.parent.parent)
        package = ".".join(rel.with_suffix("").parts[:-1]) if path.name != "__init__.py" else ".".join(rel.parts[:-1])
        bad = {m for m in _imported_modules(path, package) if m.startswith("softmax_lab.grading")}
        assert not bad, f"{rel} imports {sorted(bad)}"
    code = ("import sys, softmax_lab.checks, softmax_lab.checks.judging; "
            "print(sorted(m for m in sys.modules if m.startswith('softmax_lab.grading')))")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=300,
                         env={**os.environ, "PYTHONPATH": str(ROOT / "code"), "SOFTMAX_LAB_DEVICE": "cpu"})
    assert out.returncode == 0, out.stderr[-2000:]
    assert out.stdout.strip() == "[]", out.stdout
