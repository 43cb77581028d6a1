"""Softmax Lab: fast, correct GPU softmax kernels in Triton.

``import softmax_lab`` first: it picks the device (CUDA GPU, or the CPU through Triton's interpreter) before
any ``@triton.jit`` kernel is defined, in this package or in your notebook.

How: a kernel needs ``import triton``, so the device is picked (``softmax_lab.device``) just before triton is
first imported, or right away when torch or triton already is. Until then nothing heavy is loaded, so the
``softmax-lab`` command, the course tools (``softmax_lab.course``) and the grader (``softmax_lab.grading``)
never import torch.
"""
import sys as _sys

__version__ = "0.1.0"
_DEVICE_NAMES = ("DEVICE", "ON_GPU", "WHERE", "describe")


class _DeviceAroundTriton:
    """An import hook (on ``sys.meta_path``) for the first ``import triton``: it runs ``softmax_lab.device`` before
    (so ``TRITON_INTERPRET`` is decided when Triton decorates its own library) and ``device.guard_interpreter()``
    after (the CPU interpreter's launch lock), then steps aside."""

    def find_spec(self, name, path=None, target=None):
        if name != "triton" or self not in _sys.meta_path:
            return None
        _sys.meta_path.remove(self)
        from . import device  # (torch only; it does not import triton)

        import importlib.util

        spec = importlib.util.find_spec("triton")  # the ordinary finders' spec (this hook is off the list now)
        if spec is not None and spec.loader is not None and hasattr(spec.loader, "exec_module"):
            spec.loader = _ThenGuard(spec.loader, device.guard_interpreter)
        return spec


class _ThenGuard:
    """A loader that runs ``loader`` and then ``after()``, and puts ``loader`` back on the module."""

    def __init__(self, loader, after):
        self.loader, self.after = loader, after

    def create_module(self, spec):
        return self.loader.create_module(spec)

    def exec_module(self, module):
        module.__loader__ = module.__spec__.loader = self.loader
        self.loader.exec_module(module)
        self.after()

    def __getattr__(self, name):  # anything else a loader offers (resource readers...)
        return getattr(self.loader, name)


if "IPython" in _sys.modules:  # in a notebook: record each cell's run, so a check knows what it was given
    from . import cells as _cells

    _cells.watch()

if "triton" in _sys.modules or "torch" in _sys.modules:
    from . import device  # noqa: F401 - importing it picks the device, now
if "triton" not in _sys.modules:
    _sys.meta_path.insert(0, _DeviceAroundTriton())


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
    from .cli import main

    try:
        return main(["check", *[str(n) for n in notebooks]]) == 0
    except SystemExit:  # a usage error, already printed: a False here, not an exception in the notebook
        return False


def __getattr__(name):
    # Heavier pieces load on first use so that `import softmax_lab` stays quick.
    if name == "doctor":  # softmax_lab.doctor(): the module softmax_lab/doctor.py is callable
        import importlib

        return importlib.import_module(".doctor", __name__)
    if name in _DEVICE_NAMES:
        from . import device

        values = {"DEVICE": device.DEVICE, "ON_GPU": device.ON_GPU, "describe": device.describe}
        values["WHERE"] = device.describe()
        globals().update(values)
        return values[name]
    if name in ("softmax", "softmax_backward"):  # the operators (softmax_lab/op.py); no submodule has these names
        from . import op

        fn = globals()[name] = getattr(op, name)
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
