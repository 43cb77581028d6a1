"""The CUDA layer (chapter 9): real CUDA kernels written in Python with numba-cuda's ``@cuda.jit``.

One kernel source runs two ways, chosen like the rest of the course by ``softmax_lab.DEVICE``:

* on an NVIDIA GPU (``softmax_lab.ON_GPU``): compiled by numba to PTX and run as real CUDA;
* on the CPU: in numba's CUDA simulator, which runs every CUDA thread of a block as a Python thread, with
  shared memory, ``cuda.syncthreads()`` and atomics. The simulator lacks warp shuffles: ``sim.py`` adds them
  (a small shim used only there).

Numba reads ``NUMBA_ENABLE_CUDASIM`` once, when ``numba.cuda`` is first imported, so import this module
(or ``softmax_lab.cuda_layer``) *before* ``from numba import cuda``. Importing it after numba has already
picked the other mode raises a clear error instead of running the wrong one.

``sim.py`` also runs any kernel in the simulator on a GPU machine, for the deterministic checks that only the
simulator can do: the shared-memory race recorder and the address recorder (``memory.py``).
"""
from __future__ import annotations

import os
import sys

from ..device import ON_GPU

_WANT_SIM = not ON_GPU


def _numba_already_decided() -> bool | None:
    """True/False when numba.cuda was imported already in simulator/real mode; None when not imported."""
    mod = sys.modules.get("numba.cuda")
    if mod is None:
        return None
    try:
        from numba.cuda.core import config
    except ImportError:  # pragma: no cover - older layouts
        from numba import config
    return bool(config.ENABLE_CUDASIM)


_decided = _numba_already_decided()
# numba warns on stderr when a grid is small ("under-utilization"): the chapter's inputs are tiny on purpose,
# and stderr text would differ between machines in compared notebook outputs.
os.environ.setdefault("NUMBA_CUDA_LOW_OCCUPANCY_WARNINGS", "0")
if _decided is None:
    if _WANT_SIM:
        os.environ["NUMBA_ENABLE_CUDASIM"] = "1"
    else:
        os.environ.pop("NUMBA_ENABLE_CUDASIM", None)
elif _decided != _WANT_SIM:
    raise RuntimeError(
        "numba.cuda was imported before softmax_lab.cuda_layer, in "
        + ("simulator" if _decided else "real-CUDA") + " mode, but softmax_lab runs on "
        + ("the CPU (simulator needed)" if _WANT_SIM else "the GPU (real CUDA needed)")
        + ": restart the kernel and import softmax_lab.cuda_layer before `from numba import cuda`")

from numba import cuda  # noqa: E402 - only after the simulator-or-not decision above

try:
    from numba.cuda.core import config as _config

    _config.CUDA_LOW_OCCUPANCY_WARNINGS = 0
except (ImportError, AttributeError):  # pragma: no cover
    pass

SIMULATOR: bool = _WANT_SIM
"""True when kernels run in numba's CUDA simulator (no GPU), False when they run as real CUDA."""

# re-exported (``cuda_layer.sim``, ``cuda_layer.record_races``...); after numba.cuda, as the mode check above needs
from . import sim as sim  # noqa: E402
from .memory import count_sectors as count_sectors, warp_loads as warp_loads  # noqa: E402
from .sim import RaceReport as RaceReport, record_races as record_races, simulated as simulated  # noqa: E402


def versions() -> str:
    import numba

    try:
        from importlib.metadata import version

        nc = version("numba-cuda")
    except Exception:
        nc = "unknown"
    return f"numba {numba.__version__}, numba-cuda {nc}"


def describe() -> str:
    """One line: where @cuda.jit kernels run, e.g. 'real CUDA on NVIDIA H200 (numba ...)'."""
    if SIMULATOR:
        return f"numba's CUDA simulator on the CPU ({versions()})"
    try:
        name = cuda.get_current_device().name
        name = name.decode() if isinstance(name, bytes) else str(name)
    except Exception as err:
        return f"real CUDA, but numba cannot open the GPU: {type(err).__name__}: {str(err)[:200]}"
    return f"real CUDA on {name} ({versions()})"
