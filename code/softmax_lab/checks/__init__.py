"""Exercise checks, one module per chapter (``ch02.py`` ...), or one package per long chapter with one module per
exercise (``ch07/row_vector.py``): the registry's id names the module (``course.registry.check_module``), which
holds the exercise's case table, its notebook check and the grader's judge. Each public check prints verdict lines.

A notebook writes ``from softmax_lab.checks import check_masked_load``: the name is looked up when it is asked for
(the registry says which chapter checks it), and only that chapter is imported, so the grader, which imports one
exercise's module, loads nothing else. Each ``check_*`` function of a chapter is wrapped once, when the chapter is
first reached through this package, by ``guard.guarded`` (in its module too): it refuses an old definition, stops
a runaway kernel and answers an Interrupt in a few lines.
"""
import importlib
import pkgutil

from .common import Report, explain_exception
from .guard import guarded

__all__ = ["Report", "explain_exception"]
_WRAPPED: set[str] = set()  # chapters whose checks are wrapped


def _exercises_by_check() -> dict[str, list]:
    """check function name -> the exercises it checks (the course registry)."""
    found: dict[str, list] = {}
    try:
        from ..course import exercises

        for ex in exercises():
            found.setdefault(ex.check, []).append(ex)
    except Exception:
        return {}
    return found


def _chapter(name: str):
    """The chapter module ``chNN`` (a module or a package), its ``check_*`` functions wrapped once."""
    mod = importlib.import_module(f"{__name__}.{name}")
    if name not in _WRAPPED:
        _WRAPPED.add(name)
        ids = {check: [ex.id for ex in exs] for check, exs in _exercises_by_check().items()}
        for attr in getattr(mod, "__all__", []):
            obj = getattr(mod, attr)
            if attr.startswith("check_") and callable(obj) and not hasattr(obj, "__wrapped__"):
                setattr(mod, attr, guarded(obj, ids.get(attr, [])))
    return mod


def _chapters_to_search(name: str) -> list[str]:
    """Where ``name`` is: the chapter of the exercise it checks, else every chapter in order (a helper a notebook
    imports that no exercise names)."""
    named = [f"ch{ex.chapter}" for ex in _exercises_by_check().get(name, [])]
    every = sorted(m.name for m in pkgutil.iter_modules(__path__) if m.name.startswith("ch"))
    return list(dict.fromkeys(named + every))


def __getattr__(name: str):
    # A submodule (``from . import judging`` while it is not loaded yet) is the import system's to load: answering
    # here would import chapters in the middle of another chapter's import.
    if name.startswith("_") or any(m.name == name for m in pkgutil.iter_modules(__path__)):
        raise AttributeError(name)
    for chapter in _chapters_to_search(name):
        mod = _chapter(chapter)
        if name in getattr(mod, "__all__", ()):
            value = getattr(mod, name)
            globals()[name] = value
            return value
    raise AttributeError(f"softmax_lab.checks has no check or helper named {name!r}")
