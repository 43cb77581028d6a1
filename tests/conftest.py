"""Shared test fixtures and helpers: repository paths, the exercise registry, exercise cells as modules, checks.

Plain helpers (import them: ``from conftest import exercise_source, load_exercise, run_check``) and the same as
fixtures (``registry``, ``exercise_module``). GPU-only tests carry ``@pytest.mark.gpu``: they are skipped
without CUDA (``make test-gpu`` runs them on a GPU machine).
"""
from __future__ import annotations

import contextlib
import importlib.util
import io
import itertools
import os
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
SOLUTIONS = ROOT / "solutions"
NOTEBOOKS = ROOT / "notebooks"
FIXTURES = ROOT / "tests" / "fixtures"
GRADING_FIXTURES = FIXTURES / "grading" / "solutions"
GRADING_REGISTRY = FIXTURES / "grading" / "exercises"

# What an exercise cell finds defined before it in its notebook (the first cells import these).
HEADER = """\
import softmax_lab
import math
import torch
import triton
import triton.language as tl
from softmax_lab import DEVICE
"""

_counter = itertools.count()

# Eager calls on small CUDA inputs can run PyTorch's kernel (softmax_lab.op.torch_is_quicker, off by default); the
# GPU tests compare the course's kernels' bits, so they keep every input on them (whatever the shell says). tests/
# op/test_eager_torch_route.py turns it on.
os.environ["SOFTMAX_LAB_TORCH_BELOW"] = "0"


# ------------------------------------------------------------------------------------------------ marks


def pytest_collection_modifyitems(config, items):
    """``@pytest.mark.gpu`` tests are skipped without a CUDA GPU."""
    if not any(item.get_closest_marker("gpu") for item in items):
        return
    import softmax_lab

    if softmax_lab.ON_GPU:
        return
    skip = pytest.mark.skip(reason="needs a CUDA GPU (make test-gpu)")
    for item in items:
        if item.get_closest_marker("gpu"):
            item.add_marker(skip)


# ---------------------------------------------------------------------------------------------- registry


def course_registry():
    """The course's exercise registry (``softmax_lab.course.registry``)."""
    from softmax_lab.course import registry

    return registry.load()


def solution_notebook(chapter: str, folder: Path = SOLUTIONS) -> Path:
    """The notebook of a chapter ("04" -> solutions/04_three_kernels_to_one.ipynb)."""
    found = sorted(folder.glob(f"{chapter}_*.ipynb"))
    assert len(found) == 1, f"expected one notebook {chapter}_*.ipynb in {folder}, found {found}"
    return found[0]


def exercise_notebook(ident: str, folder: Path = SOLUTIONS) -> Path:
    """The notebook holding exercise ``ident``, found through the registry's chapter."""
    from softmax_lab import course

    return solution_notebook(course.exercise(ident).chapter, folder)


@pytest.fixture(scope="session")
def registry():
    return course_registry()


# ------------------------------------------------------------------------------------- exercise cells


def exercise_source(ident: str, learner: bool = False, folder: Path = SOLUTIONS) -> str:
    """The source of exercise ``ident``'s cell in its solution notebook (``learner``: the blank version)."""
    from softmax_lab.course import build, notebook

    nb = notebook.read(exercise_notebook(ident, folder))
    if learner:
        nb = build.learner_notebook(nb)
    cells = [c for c in nb.cells if notebook.tag_value(c, notebook.EXERCISE) == ident]
    assert len(cells) == 1, f"exercise {ident}: expected one cell tagged exercise:{ident}, found {len(cells)}"
    return cells[0].source


def load_exercise(ident: str, source: str, tmp_path: Path, header: str = HEADER):
    """Import an exercise cell's ``source`` as a module (Triton needs a kernel's source in a real file)."""
    path = tmp_path / f"ex_{ident.replace('-', '_')}_{next(_counter)}.py"
    path.write_text(header + source + "\n")
    spec = importlib.util.spec_from_file_location(path.stem, path)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


@pytest.fixture
def exercise_module(tmp_path):
    """``exercise_module(ident, learner=False, source=None)``: the exercise cell as a module."""

    def make(ident: str, learner: bool = False, source: str | None = None):
        return load_exercise(ident, exercise_source(ident, learner) if source is None else source, tmp_path)

    return make


# ------------------------------------------------------------------------------------------- CUDA graphs


def captured(fn):
    """``fn()`` run once on a side stream (CUDA's warm-up before a capture), then captured in a CUDA graph:
    ``(graph, what the captured call returned)``; ``graph.replay()`` runs it again."""
    import torch

    stream = torch.cuda.Stream()
    stream.wait_stream(torch.cuda.current_stream())
    with torch.cuda.stream(stream):
        fn()
    torch.cuda.current_stream().wait_stream(stream)
    graph = torch.cuda.CUDAGraph()
    with torch.cuda.graph(graph):
        out = fn()
    return graph, out


# ------------------------------------------------------------------------------------------------ checks


def run_check(ident: str, *args) -> tuple[bool, str]:
    """Run exercise ``ident``'s check (the registry's ``check``) on ``args``: (its verdict, what it printed)."""
    from softmax_lab import checks, course

    out = io.StringIO()
    with contextlib.redirect_stdout(out):
        ok = getattr(checks, course.exercise(ident).check)(*args)
    return bool(ok), out.getvalue()


@pytest.fixture
def allow_package_code(monkeypatch):
    """For tests that hand a check the course's own kernels as a stand-in for a learner's (a correct one, or a
    known mutant): the check's guard would refuse them as 'softmax_lab's kernel, not yours'."""
    from softmax_lab.checks import guard

    monkeypatch.setattr(guard, "package_object", lambda args, kwargs: "")


# ------------------------------------------------------------------------------ feedback names no fix


@pytest.fixture(autouse=True)
def feedback_names_no_fix(request, monkeypatch):
    """In every mutant test (``tests/checks/*mutants*``): no FAIL message a check gives may quote a line of its
    exercise's solution (``tests/checks/feedback_fix.py``). The fix is the hint ladder's to give."""
    if "mutants" not in request.node.path.name:
        yield
        return
    from softmax_lab.checks import common
    from feedback_fix import quoted_fix

    said: list[tuple[str, str]] = []
    add = common.Report.add

    def recording_add(self, name, problem):
        if problem:
            said.append((self.exercise, problem))
        return add(self, name, problem)

    monkeypatch.setattr(common.Report, "add", recording_add)
    yield
    quoted = [f"{ex}: {problem!r} quotes the solution ({fix!r})" for ex, problem in said
              if (fix := quoted_fix(ex, problem))]
    assert not quoted, "feedback gives the fix, not the mistake:\n" + "\n".join(quoted)
