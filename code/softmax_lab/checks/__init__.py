"""Exercise checks, one module per chapter (``ch02.py`` ...). Each public check prints verdict lines.

Every ``chNN`` module found here is imported, and its ``__all__`` re-exported, so a notebook can write
``from softmax_lab.checks import check_masked_load``.
"""
import importlib
import pkgutil

from .common import Report, explain_exception, softmax_case  # noqa: F401

__all__ = ["Report", "explain_exception", "softmax_case"]

for _info in sorted(pkgutil.iter_modules(__path__), key=lambda m: m.name):
    if _info.name.startswith("ch"):
        _mod = importlib.import_module(f".{_info.name}", __name__)
        for _name in getattr(_mod, "__all__", []):
            globals()[_name] = getattr(_mod, _name)
            __all__.append(_name)
