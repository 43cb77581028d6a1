"""Where kernels run: a CUDA GPU when there is one, otherwise the CPU through Triton's interpreter.

Triton decides interpreter-or-compiler when a function is decorated with ``@triton.jit``, by reading
``TRITON_INTERPRET``. So this module must run before any kernel is defined: ``import softmax_lab`` does it
first thing, and every kernel in notebooks and in this package is defined after that import.

``import softmax_lab`` itself stays light (no torch: the grader and the ``softmax-lab`` command do not need it):
it runs this module just before the first ``import triton`` (see ``softmax_lab/__init__.py``), or at once when
torch or triton is already imported, or when you read ``softmax_lab.DEVICE`` / ``ON_GPU`` / ``WHERE``.

Set ``SOFTMAX_LAB_DEVICE=cpu`` to force the interpreter on a GPU machine (handy to compare both).
"""
import os

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
