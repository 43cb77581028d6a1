"""The course as authors see it: the exercise registry, the notebook format, the build, execution, exports.

* ``registry``  ``exercises/chNN.toml``: every exercise (id, chapter, points, check, hints) and question
* ``notebook``  the solution notebooks' format: tags, solution markers, validation (also against the registry)
* ``build``     learner notebooks from solutions/ (a pipeline of nbconvert preprocessors; ``softmax-lab build``)
* ``execute``   re-running solutions in place with reproducible outputs (``softmax-lab build --execute``)
* ``nbgrader``  solution notebooks -> nbgrader source notebooks (``softmax-lab nbgrader``)
* ``../data/``  the package data read at run time, ``nbval_sanitize.cfg`` among it (grading, ``make test-notebooks``)

Everything here needs the standard library, nbformat and nbconvert only: never torch. The author's guide is
docs/authoring.md.
"""
from __future__ import annotations

from importlib import resources
from pathlib import Path

from .registry import Exercise, Question, load as load_registry
from .registry import Registry as Registry, RegistryError as RegistryError  # re-exported


def chapters() -> list[str]:
    """The chapter numbers the registry declares ("00", "01", ...)."""
    return sorted(load_registry().chapters)


def exercises(chapter: str | None = None) -> list[Exercise]:
    """Every exercise of the course (or of one chapter), in chapter and file order."""
    return load_registry().exercises(chapter)


def questions(chapter: str | None = None) -> list[Question]:
    """Every free-text question of the course (or of one chapter)."""
    return load_registry().questions(chapter)


def exercise(ident: str) -> Exercise:
    """One exercise by id (KeyError naming the id when the registry does not declare it)."""
    found = load_registry().exercise(ident)
    if found is None:
        raise KeyError(f"no exercise {ident!r} in the course registry (softmax_lab/course/exercises/)")
    return found


def data_file(name: str) -> Path:
    """A file of the package's one data folder, ``softmax_lab/data/`` (installed with the wheel)."""
    path = Path(str(resources.files(__name__.rpartition(".")[0]).joinpath("data", name)))
    if not path.is_file():
        raise FileNotFoundError(f"package data {name} is missing from {path.parent}")
    return path


def sanitize_config() -> str:
    """nbval's output sanitizer (timings and addresses masked), as text: what grading and tests compare with."""
    return data_file("nbval_sanitize.cfg").read_text(encoding="utf-8")
