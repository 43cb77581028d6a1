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


def __getattr__(name):
    # Heavier pieces load on first use so that `import softmax_lab` stays quick.
    if name == "softmax":  # the operator (softmax_lab/op.py); no submodule is named `softmax`, so nothing hides it
        from .op import softmax as fn

        globals()["softmax"] = fn
        return fn
    if name in ("kernels", "reference", "testing", "checks", "dispatch", "op"):
        import importlib

        return importlib.import_module(f".{name}", __name__)
    raise AttributeError(f"module 'softmax_lab' has no attribute {name!r}")
