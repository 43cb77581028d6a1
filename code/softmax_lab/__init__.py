"""Softmax Lab: fast, correct GPU softmax kernels in Triton.

``import softmax_lab`` first: it picks the device (CUDA GPU, or the CPU through Triton's interpreter) before
any ``@triton.jit`` kernel is defined, in this package or in your notebook.
"""
from .device import DEVICE, ON_GPU, describe  # noqa: F401  (must stay the first import)

__version__ = "0.1.0"
WHERE = describe()


def doctor(verbose: bool = True) -> bool:
    """Check the environment; print one line per check and the fix for each problem. True when all pass."""
    from .checkup import run_doctor

    return run_doctor(verbose=verbose)


def draw(launcher, x, title: str = "", **kwargs):
    """Your kernel, drawn: which program loaded and stored each element of a small 2-D ``x`` when
    ``launcher(x)`` runs (``softmax_lab.lanemap``); what looks wrong is printed. Returns a matplotlib Figure."""
    from .lanemap import draw as _draw

    return _draw(launcher, x, title, **kwargs)


def check(*notebooks: str) -> bool:
    """``softmax-lab check`` from Python: grade your own saved notebook(s) against the course's solutions, print
    each exercise's verdict, and return True when every exercise passes. Save the notebook first (Ctrl+S)::

        softmax_lab.check("01_scores_to_probabilities.ipynb")
    """
    if not notebooks:
        raise TypeError('name the notebook to check, e.g. softmax_lab.check("01_scores_to_probabilities.ipynb")')
    from .grade import check_main

    return check_main([str(n) for n in notebooks]) == 0


def __getattr__(name):
    # Heavier pieces load on first use so that `import softmax_lab` stays quick.
    if name == "softmax":  # the operator (softmax_lab/op.py); no submodule is named `softmax`, so nothing hides it
        from .op import softmax as fn

        globals()["softmax"] = fn
        return fn
    if name in ("hint", "hint_button"):  # softmax_lab/hints.py: the four-level hint ladder of every exercise
        import importlib

        return getattr(importlib.import_module(".hints", __name__), name)
    if name == "measure":  # softmax_lab/measure.py: honest GPU timing; the module itself is callable
        import importlib

        return importlib.import_module(".measure", __name__)
    if name in ("kernels", "reference", "testing", "checks", "dispatch", "op"):
        import importlib

        return importlib.import_module(f".{name}", __name__)
    raise AttributeError(f"module 'softmax_lab' has no attribute {name!r}")
