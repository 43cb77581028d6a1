"""`softmax-lab doctor` / `softmax_lab.doctor()`: check the environment, name the fix for each problem.

The module itself is callable: ``softmax_lab.doctor()`` is ``run_doctor()`` (and stays so after
``import softmax_lab.doctor``, which makes the package attribute this module).

Each check prints one line: ``ok``, ``info`` or ``FAIL`` with what to do. The last check launches a tiny real
Triton kernel (a masked row max and a store) and checks its result, which catches the interpreter's quiet
failures: storing nothing, returning zeros, or filling masked lanes with 0.
"""
from __future__ import annotations

import argparse
import os
import sys
import types
from dataclasses import dataclass
from importlib import metadata

import torch

from .device import DEVICE, ON_GPU, describe
import triton  # noqa: E402  (after .device, which switches the interpreter on when needed)
import triton.language as tl  # noqa: E402

NUMPY_FIX = 'pip install "numpy<2.4"   (Triton 3.6.0\'s interpreter breaks on numpy 2.4)'


@dataclass
class Finding:
    level: str  # "ok", "info" or "FAIL"
    what: str
    fix: str = ""

    def line(self) -> str:
        text = f"[{self.level:>4}] {self.what}"
        return f"{text}\n       fix: {self.fix}" if self.fix else text


@triton.jit
def _row_max_kernel(x_ptr, out_ptr, n_cols, BLOCK: tl.constexpr):
    # One program, one row of n_cols < BLOCK values: padding lanes must be -inf, not 0.
    offs = tl.arange(0, BLOCK)
    x = tl.load(x_ptr + offs, mask=offs < n_cols, other=float("-inf"))
    tl.store(out_ptr + offs, x, mask=offs < n_cols)
    tl.store(out_ptr + n_cols, tl.max(x, axis=0))


def check_versions() -> list[Finding]:
    found = [Finding("info", f"python {sys.version.split()[0]}, torch {torch.__version__}, triton {triton.__version__}")]
    try:
        wanted = [r for r in (metadata.requires("torch") or []) if r.replace(" ", "").startswith("triton==")]
    except metadata.PackageNotFoundError:
        wanted = []
    if wanted:
        want = wanted[0].split(";")[0].split("==")[1].strip()
        if want != triton.__version__:
            found.append(Finding("FAIL", f"torch {torch.__version__} was built for triton {want}, found {triton.__version__}",
                                 f'pip install "triton=={want}" (or the torch release made for triton {triton.__version__})'))
        else:
            found.append(Finding("ok", f"torch and triton match (triton {want})"))
    else:
        found.append(Finding("ok", "torch does not pin triton (CPU build); the course pins triton 3.6.0"))
    import numpy

    major_minor = tuple(int(p) for p in numpy.__version__.split(".")[:2])
    if major_minor < (2, 4):
        found.append(Finding("ok", f"numpy {numpy.__version__} works with the interpreter"))
    elif ON_GPU:  # kernels compile; only the load/store counting of chapters 3 and 7 uses the interpreter
        found.append(Finding("info", f"numpy {numpy.__version__}: counting loads/stores (chapters 3, 7) needs numpy<2.4",
                             NUMPY_FIX))
    else:
        found.append(Finding("FAIL", f"numpy {numpy.__version__} breaks Triton's interpreter", NUMPY_FIX))
    return found


def check_device() -> list[Finding]:
    found = [Finding("info" if not ON_GPU else "ok", f"kernels run on: {describe()}")]
    if not ON_GPU:
        found.append(Finding("info", "no CUDA GPU: every kernel runs in Triton's interpreter (slow, but the same code); "
                                     "timings and benchmarks need a GPU"))
        if os.environ.get("TRITON_INTERPRET") != "1":
            found.append(Finding("FAIL", "TRITON_INTERPRET is not 1 although no GPU is in use",
                                 "import softmax_lab before defining any kernel; do not unset TRITON_INTERPRET"))
    return found


def check_kernel_registered() -> list[Finding]:
    try:
        from jupyter_client.kernelspec import KernelSpecManager
    except ImportError:
        return [Finding("info", "jupyter_client not installed: skipping the Jupyter kernel check")]
    specs = KernelSpecManager().find_kernel_specs()
    if "softmax-lab" in specs:
        return [Finding("ok", f"Jupyter kernel 'softmax-lab' registered ({specs['softmax-lab']})")]
    return [Finding("FAIL", "Jupyter kernel 'softmax-lab' is not registered, so notebooks cannot find the course's Python",
                    "run `make lab` once, or: python -m ipykernel install --sys-prefix --name softmax-lab")]


def check_tiny_kernel() -> list[Finding]:
    row = torch.tensor([-1002.0, -1001.0, -1000.0], device=DEVICE)
    out = torch.full((4,), float("nan"), device=DEVICE)  # poisoned: NaN means "never stored"
    try:
        _row_max_kernel[(1,)](row, out, 3, BLOCK=4)
    except TypeError as err:
        if "0-dimensional" in str(err):
            return [Finding("FAIL", f"the interpreter failed: {err}", NUMPY_FIX)]
        return [Finding("FAIL", f"a tiny kernel failed to run: {type(err).__name__}: {err}")]
    except Exception as err:  # noqa: BLE001 - report anything, the doctor must not crash
        return [Finding("FAIL", f"a tiny kernel failed to run: {type(err).__name__}: {str(err)[:300]}")]
    got = out.cpu().tolist()
    if all(v != v for v in got):
        return [Finding("FAIL", "the tiny kernel stored nothing (output still NaN)",
                        "if TRITON_INTERPRET was set after kernels were defined, restart and `import softmax_lab` first")]
    if got[:3] == [0.0, 0.0, 0.0]:
        return [Finding("FAIL", "the tiny kernel returned zeros instead of its input",
                        "restart the kernel and `import softmax_lab` before defining kernels; check numpy<2.4")]
    if got[3] == 0.0:
        return [Finding("FAIL", "masked lanes were read as 0, not -inf (row max of an all-negative row became 0)",
                        "upgrade/downgrade to the pinned triton 3.6.0")]
    if got != [-1002.0, -1001.0, -1000.0, -1000.0]:
        return [Finding("FAIL", f"the tiny kernel computed {got}, expected [-1002, -1001, -1000, -1000]")]
    return [Finding("ok", "a tiny Triton kernel ran and computed the right masked row max (-1000)")]


def check_course_command() -> list[Finding]:
    """`!softmax-lab check ...` in a cell runs whatever `softmax-lab` the server's PATH finds first."""
    import shutil
    from pathlib import Path

    mine = Path(sys.executable).parent / "softmax-lab"
    found = shutil.which("softmax-lab")
    if found and mine.exists() and Path(found).resolve() == mine.resolve():
        return [Finding("ok", f"the softmax-lab command is this environment's ({mine})")]
    api = 'from Python: softmax_lab.check("NN_chapter.ipynb")'
    if not mine.exists():
        return [Finding("info", "the softmax-lab command is not installed in this environment",
                        f"pip install --no-deps -e . in the checkout, or {api}")]
    return [Finding("info", f"`softmax-lab` on PATH is {found or 'missing'}, not this environment's {mine}",
                    f"start JupyterLab with `make lab` (it puts .venv/bin first on PATH), or {api}")]


def check_workspace() -> list[Finding]:
    """Chapters the course changed since the learner copied them into workspace/ (make lab)."""
    from .course.notebook import BuildError, repo_root
    from .lab import changed

    try:
        root = repo_root(learner=True)
    except BuildError:
        return []
    if not (root / "workspace").is_dir():
        return []
    names = changed(root)
    if not names:
        return [Finding("ok", f"your workspace ({root / 'workspace'}) has the current version of every chapter")]
    return [Finding("info", f"the course changed {name} since you copied it into workspace/",
                    "softmax-lab workspace --update   (puts the new version beside yours; yours is kept)")
            for name in names]


def check_cuda_layer() -> list[Finding]:
    """Chapter 9's CUDA kernels: real CUDA (numba-cuda on a GPU) or numba's CUDA simulator on the CPU."""
    try:
        from .cuda_layer import doctor_findings

        return doctor_findings()
    except Exception as err:  # noqa: BLE001 - the doctor reports, it does not crash
        return [Finding("FAIL", f"chapter 9's CUDA layer cannot load: {type(err).__name__}: {str(err)[:200]}",
                        'pip install "numba-cuda==0.30.4"')]


def findings() -> list[Finding]:
    return (check_versions() + check_device() + check_kernel_registered() + check_course_command()
            + check_workspace() + check_cuda_layer() + check_tiny_kernel())


def run_doctor(verbose: bool = True) -> bool:
    found = findings()
    if verbose:
        for f in found:
            print(f.line())
        bad = sum(f.level == "FAIL" for f in found)
        print("All checks passed." if not bad else f"{bad} problem(s) found: see the fixes above.")
    return all(f.level != "FAIL" for f in found)


def add_arguments(ap: argparse.ArgumentParser) -> None:
    """`softmax-lab doctor` takes no options."""


def run(args: argparse.Namespace) -> int:
    return 0 if run_doctor() else 1


class _CallableModule(types.ModuleType):
    def __call__(self, verbose: bool = True) -> bool:
        """Check the environment; print one line per check and the fix for each problem. True when all pass."""
        return run_doctor(verbose=verbose)


sys.modules[__name__].__class__ = _CallableModule
