"""Where kernels run: a CUDA GPU when there is one, otherwise the CPU through Triton's interpreter.

Triton decides interpreter-or-compiler when a function is decorated with ``@triton.jit``, by reading
``TRITON_INTERPRET``. So this module must run before any kernel is defined: ``import softmax_lab`` does it
first thing, and every kernel in notebooks and in this package is defined after that import.

``import softmax_lab`` itself stays light (no torch: the grader and the ``softmax-lab`` command do not need it):
it runs this module just before the first ``import triton`` (see ``softmax_lab/__init__.py``), or at once when
torch or triton is already imported, or when you read ``softmax_lab.DEVICE`` / ``ON_GPU`` / ``WHERE``.

Set ``SOFTMAX_LAB_DEVICE=cpu`` to force the interpreter on a GPU machine (handy to compare both).

On the CPU two things cannot wait for decoration time, so ``guard_interpreter()`` runs as soon as triton is
imported (before or after this module): a ``@triton.jit`` function decorated while ``TRITON_INTERPRET`` was unset
(triton imported before softmax_lab, e.g. by ``torch.compile``; Triton's own ``tl.max`` and ``tl.sum`` are such
functions) runs through the interpreter whenever ``TRITON_INTERPRET`` is set at call time; and launches run one at
a time, because the interpreter keeps its state (grid, patched ``triton.language``) in globals.
"""
import os
import sys
import threading

import torch


def _want_gpu() -> bool:
    forced = os.environ.get("SOFTMAX_LAB_DEVICE", "").strip().lower()
    if forced in ("cpu", "interpreter"):
        return False
    if forced in ("cuda", "gpu"):
        if not torch.cuda.is_available():
            raise RuntimeError("SOFTMAX_LAB_DEVICE=cuda but torch sees no CUDA GPU")
        return True
    return torch.cuda.is_available()


ON_GPU: bool = _want_gpu()

if ON_GPU:
    # A stale TRITON_INTERPRET=1 from the shell would silently run GPU tensors through the slow interpreter.
    os.environ.pop("TRITON_INTERPRET", None)
else:
    os.environ["TRITON_INTERPRET"] = "1"

DEVICE: torch.device = torch.device("cuda") if ON_GPU else torch.device("cpu")


def describe() -> str:
    """One line saying where kernels run, e.g. 'GPU: NVIDIA H200 (Triton 3.6.0)'."""
    import triton  # only after the switch above

    if ON_GPU:
        return f"GPU: {torch.cuda.get_device_name()} (Triton {triton.__version__}, torch {torch.__version__})"
    return f"CPU via Triton interpreter (Triton {triton.__version__}, torch {torch.__version__})"


_INTERPRETER_LOCK = threading.RLock()  # one interpreted launch at a time, in every thread


def guard_interpreter() -> None:
    """On the CPU, once triton is imported: interpreted launches take a lock, and ``@triton.jit`` functions made
    before ``TRITON_INTERPRET`` was set run interpreted while it is set; ints of parameters annotated ``tl.int64``
    arrive as 64 bits, as on a GPU (``interpreter_ints``). Idempotent; nothing on a GPU."""
    if ON_GPU or "triton" not in sys.modules:
        return
    from triton import knobs
    from triton.runtime import interpreter
    from triton.runtime.jit import JITFunction

    from . import interpreter_ints

    if getattr(interpreter.GridExecutor, "_softmax_lab_guarded", False):
        return
    launch = interpreter.GridExecutor.__call__

    def locked_launch(self, *args, **kwargs):
        with _INTERPRETER_LOCK:
            return launch(self, *args, **kwargs)

    untraced = []

    def untraced_launch(self, *args, **kwargs):
        # Under torch.compile, Dynamo would trace the interpreter's Python frames (a raw launcher in a compiled
        # function: KeyError(torch.uint64)); torch.compiler.disable makes the launch run as it is. Made on the first
        # launch after torch._dynamo is imported (Dynamo is never active before): Triton may be imported while
        # torch._dynamo is, when torch.compiler.disable cannot run yet.
        dynamo = sys.modules.get("torch._dynamo")
        if dynamo is None or not hasattr(dynamo, "disable"):
            return locked_launch(self, *args, **kwargs)
        if not untraced:
            untraced.append(torch.compiler.disable(locked_launch))
        return untraced[0](self, *args, **kwargs)

    interpreter.GridExecutor.__call__ = untraced_launch
    interpreter.GridExecutor._softmax_lab_guarded = True
    interpreter_ints.honour(interpreter)  # `stride: tl.int64` is 64 bits here too, as on a GPU

    compiled_run, compiled_call = JITFunction.run, JITFunction.__call__

    def interpreted(fn):
        twin = fn.__dict__.get("_softmax_lab_interpreted")
        if twin is None:
            twin = fn.__dict__["_softmax_lab_interpreted"] = interpreter.InterpretedFunction(fn.fn)
        return twin

    def run(self, *args, grid, warmup, **kwargs):  # kernel[grid](...) and kernel.warmup(...)
        if knobs.runtime.interpret:
            return interpreted(self).run(*args, grid=grid, warmup=warmup, **kwargs)
        return compiled_run(self, *args, grid=grid, warmup=warmup, **kwargs)

    def call(self, *args, **kwargs):  # a @triton.jit helper called from a kernel (tl.max is one)
        if knobs.runtime.interpret:
            return interpreted(self)(*args, **kwargs)
        return compiled_call(self, *args, **kwargs)

    JITFunction.run, JITFunction.__call__ = run, call


guard_interpreter()  # triton already imported; otherwise softmax_lab/__init__.py calls it right after `import triton`
