"""Exercise checks, one module per chapter (``ch02.py`` ...), or one package per long chapter with one module per
exercise (``ch07/row_vector.py``): the registry's id names the module (``course.registry.check_module``), which
holds the exercise's case table, its notebook check and the grader's judge. Each public check prints verdict lines.

Every ``chNN`` module or package found here is imported, and its ``__all__`` re-exported, so a notebook can write
``from softmax_lab.checks import check_masked_load``. Each ``check_*`` function is wrapped once, here, by
``guard.guarded`` (in its module too): it refuses an old definition, stops a runaway kernel and answers an
Interrupt in a few lines.
"""
import importlib
import pkgutil

from .common import Report, explain_exception
from .guard import guarded


def _exercises_by_check() -> dict[str, list[str]]:
    """check function name -> the ids of the exercises it checks (the course registry)."""
    found: dict[str, list[str]] = {}
    try:
        from ..course import exercises

        for ex in exercises():
            found.setdefault(ex.check, []).append(ex.id)
    except Exception:
        return {}
    return found


__all__ = ["Report", "explain_exception"]
_CHECKED = _exercises_by_check()

for _info in sorted(pkgutil.iter_modules(__path__), key=lambda m: m.name):
    if _info.name.startswith("ch"):
        _mod = importlib.import_module(f".{_info.name}", __name__)
        for _name in getattr(_mod, "__all__", []):
            _obj = getattr(_mod, _name)
            if _name.startswith("check_") and callable(_obj) and not hasattr(_obj, "__wrapped__"):
                _obj = guarded(_obj, _CHECKED.get(_name, []))
                setattr(_mod, _name, _obj)
            globals()[_name] = _obj
            __all__.append(_name)
