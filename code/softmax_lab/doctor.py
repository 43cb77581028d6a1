"""`softmax-lab doctor` / `softmax_lab.doctor()`: check the environment, name the fix for each problem.

The module itself is callable: ``softmax_lab.doctor()`` is ``run_doctor()`` (and stays so after
``import softmax_lab.doctor``, which makes the package attribute this module).

Each check prints one line: ``ok``, ``info`` or ``FAIL`` with what to do. The learner's commands are proven by
running them: ``softmax-lab check`` grades a tiny one-exercise notebook (in a fresh process, started first so that
it runs while the other checks do), ``softmax_lab.hint`` reads a hint, and a tiny real Triton kernel (a masked row
max and a store) is launched and its result checked, which catches the interpreter's quiet failures: storing
nothing, returning zeros, or filling masked lanes with 0.
"""
from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
import time
import types
from dataclasses import dataclass
from importlib import metadata
from importlib.util import find_spec
from pathlib import Path

NUMPY_FIX = 'pip install "numpy<2.4"   (Triton 3.6.0\'s interpreter breaks on numpy 2.4)'
INSTALL_FIX = "make lab (it installs requirements/lab.txt), or: pip install -r requirements/lab.txt"


@dataclass
class Finding:
    level: str  # "ok", "info" or "FAIL"
    what: str
    fix: str = ""

    def line(self) -> str:
        text = f"[{self.level:>4}] {self.what}"
        return f"{text}\n       fix: {self.fix}" if self.fix else text


def _define_row_max_kernel():
    """The tiny kernel, defined on first use: torch and triton load only when the doctor runs (after .device,
    which switches the interpreter on when needed)."""
    from . import device  # noqa: F401 - before triton: picks the device (the interpreter on a CPU)
    import triton
    import triton.language as tl

    @triton.jit
    def _row_max_kernel(x_ptr, out_ptr, n_cols, BLOCK: tl.constexpr):
        # One program, one row of n_cols < BLOCK values: padding lanes must be -inf, not 0.
        offs = tl.arange(0, BLOCK)
        x = tl.load(x_ptr + offs, mask=offs < n_cols, other=float("-inf"))
        tl.store(out_ptr + offs, x, mask=offs < n_cols)
        tl.store(out_ptr + n_cols, tl.max(x, axis=0))

    return _row_max_kernel


def __getattr__(name):
    if name == "_row_max_kernel":
        globals()[name] = _define_row_max_kernel()
        return globals()[name]
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")


def _on_gpu() -> bool:
    from .device import ON_GPU

    return ON_GPU


def check_versions() -> list[Finding]:
    from . import device  # noqa: F401 - before triton: picks the device (the interpreter on a CPU)
    import torch
    import triton

    found = [Finding("info",
                     f"python {sys.version.split()[0]}, torch {torch.__version__}, triton {triton.__version__}")]
    try:
        wanted = [r for r in (metadata.requires("torch") or []) if r.replace(" ", "").startswith("triton==")]
    except metadata.PackageNotFoundError:
        wanted = []
    if wanted:
        want = wanted[0].split(";")[0].split("==")[1].strip()
        if want != triton.__version__:
            found.append(Finding("FAIL",
                                 f"torch {torch.__version__} was built for triton {want}, found {triton.__version__}",
                                 f'pip install "triton=={want}" '
                                 f"(or the torch release made for triton {triton.__version__})"))
        else:
            found.append(Finding("ok", f"torch and triton match (triton {want})"))
    else:
        found.append(Finding("ok", "torch does not pin triton (CPU build); the course pins triton 3.6.0"))
    import numpy

    major_minor = tuple(int(p) for p in numpy.__version__.split(".")[:2])
    if major_minor < (2, 4):
        found.append(Finding("ok", f"numpy {numpy.__version__} works with the interpreter"))
    elif _on_gpu():  # kernels compile; only the load/store counting of chapters 3 and 7 uses the interpreter
        found.append(Finding("info",
                             f"numpy {numpy.__version__}: counting loads/stores (chapters 3, 7) needs numpy<2.4",
                             NUMPY_FIX))
    else:
        found.append(Finding("FAIL", f"numpy {numpy.__version__} breaks Triton's interpreter", NUMPY_FIX))
    return found


def check_device() -> list[Finding]:
    from .device import ON_GPU, describe

    found = [Finding("info" if not ON_GPU else "ok", f"kernels run on: {describe()}")]
    if not ON_GPU:
        found.append(Finding("info",
                             "no CUDA GPU: every kernel runs in Triton's interpreter (slow, but the same code); "
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
    return [Finding("FAIL",
                    "Jupyter kernel 'softmax-lab' is not registered, so notebooks cannot find the course's Python",
                    "run `make lab` once, or: python -m ipykernel install --sys-prefix --name softmax-lab")]


def check_tiny_kernel() -> list[Finding]:
    import torch

    from .device import DEVICE

    kernel = sys.modules[__name__]._row_max_kernel  # (tests put a broken one here)
    row = torch.tensor([-1002.0, -1001.0, -1000.0], device=DEVICE)
    out = torch.full((4,), float("nan"), device=DEVICE)  # poisoned: NaN means "never stored"
    try:
        kernel[(1,)](row, out, 3, BLOCK=4)
    except TypeError as err:
        if "0-dimensional" in str(err):
            return [Finding("FAIL", f"the interpreter failed: {err}", NUMPY_FIX)]
        return [Finding("FAIL", f"a tiny kernel failed to run: {type(err).__name__}: {err}")]
    except Exception as err:
        return [Finding("FAIL", f"a tiny kernel failed to run: {type(err).__name__}: {str(err)[:300]}")]
    got = out.cpu().tolist()
    if all(v != v for v in got):
        return [Finding("FAIL", "the tiny kernel stored nothing (output still NaN)",
                        "if TRITON_INTERPRET was set after kernels were defined, "
                        "restart and `import softmax_lab` first")]
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
    what = (f"`softmax-lab` on PATH is {found}, not this environment's {mine}" if found else
            f"no `softmax-lab` command on PATH (this environment's is {mine})")
    return [Finding("info", what,
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
        if not (root / "notebooks").is_dir():
            return []  # not a course checkout with learner notebooks (an installed wheel, say)
        return [Finding("info", f"no workspace/ in {root} (deleted?): your chapters live there",
                        "softmax-lab workspace   (copies the chapters you do not have; never overwrites)")]
    names = changed(root)
    if not names:
        return [Finding("ok", f"your workspace ({root / 'workspace'}) has the current version of every chapter")]
    return [Finding("info", f"the course changed {name} since you copied it into workspace/",
                    "softmax-lab workspace --update   (puts the new version beside yours; yours is kept)")
            for name in names]


def check_cuda_layer() -> list[Finding]:
    """Chapter 9's CUDA kernels: real CUDA (numba-cuda on a GPU) or numba's CUDA simulator on the CPU, and a tiny
    @cuda.jit kernel run."""
    try:
        from . import cuda_layer  # (here, not at the top: numba loads only when the doctor runs this check)
    except Exception as err:
        return [Finding("FAIL", f"chapter 9's CUDA layer cannot load: {type(err).__name__}: {str(err)[:200]}",
                        'pip install "numba-cuda==0.30.4"')]
    try:
        where = cuda_layer.describe()
    except Exception as err:
        return [Finding("FAIL", f"numba-cuda is not usable: {type(err).__name__}: {err}",
                        'pip install "numba-cuda==0.30.4"')]
    found = [Finding("info" if cuda_layer.SIMULATOR else "ok", f"chapter 9's @cuda.jit kernels run in: {where}")]
    try:
        import numpy as np
        import torch

        from .cuda_layer.kernels import row_serial_softmax
        from .device import DEVICE

        x = torch.tensor([[-1002.0, -1001.0, -1000.0]], device=DEVICE)
        y = row_serial_softmax(x)
        want = np.array([0.09003057, 0.24472847, 0.66524096])
        if not np.allclose(y.cpu().numpy()[0], want, atol=1e-6):
            found.append(Finding("FAIL", f"a tiny @cuda.jit kernel computed {y.cpu().tolist()}",
                                 "reinstall numba-cuda==0.30.4; on a GPU, check that numba finds the CUDA driver"))
        else:
            found.append(Finding("ok", "a tiny @cuda.jit softmax kernel ran and matched"))
    except Exception as err:
        found.append(Finding("FAIL", f"a tiny @cuda.jit kernel failed: {type(err).__name__}: {str(err)[:300]}",
                             "reinstall numba-cuda==0.30.4 (pip); on a GPU, numba needs the CUDA driver "
                             "(and cuda-bindings)"))
    return found


# --------------------------------------------------------------------------- the learner's own commands

TINY_ID = "doctor-add-one"
TINY_TIMEOUT = 120  # seconds; a healthy machine needs a few


def _notebook(cells: list[dict]) -> dict:
    return {"nbformat": 4, "nbformat_minor": 5, "cells": cells, "metadata": {
        "kernelspec": {"display_name": "Softmax Lab (Python 3)", "language": "python", "name": "softmax-lab"},
        "language_info": {"name": "python"}, "softmax_lab": {"chapter": "99", "title": "the doctor's tiny chapter"}}}


def _cell(ident: str, source: str, tags: list[str], output: str = "") -> dict:
    if ident == "title":
        return {"cell_type": "markdown", "id": ident, "metadata": {}, "source": source}
    outputs = [{"name": "stdout", "output_type": "stream", "text": output}] if output else []
    return {"cell_type": "code", "id": ident, "metadata": {"tags": tags}, "source": source,
            "execution_count": 1 if output else None, "outputs": outputs}


def tiny_course(folder: Path) -> Path:
    """A one-exercise course in ``folder`` (solutions/99_doctor.ipynb, exercises/ch99.toml) and a learner's
    solved copy of its notebook, whose path is returned. Pure Python: no kernel, no torch, so it is quick."""
    check = ('print("PASS  add_one(1) == 2" if add_one(1) == 2 else "FAIL  add_one(1) is not 2")\n'
             f'print("{TINY_ID}: PASSED (1/1 checks passed)")')
    expected = f"PASS  add_one(1) == 2\n{TINY_ID}: PASSED (1/1 checks passed)\n"
    cells = [_cell("title", "# The doctor's tiny chapter", []),
             _cell("exercise", "def add_one(x):\n    ### BEGIN SOLUTION\n    return x + 1\n    ### END SOLUTION",
                   [f"exercise:{TINY_ID}"]),
             _cell("check", check, [f"check:{TINY_ID}", "nbval-check-output"], expected)]
    for sub in ("solutions", "exercises", "learner"):
        (folder / sub).mkdir(parents=True, exist_ok=True)
    (folder / "solutions" / "99_doctor.ipynb").write_text(json.dumps(_notebook(cells)), encoding="utf-8")
    (folder / "exercises" / "ch99.toml").write_text(f'[[exercise]]\nid = "{TINY_ID}"\npoints = 1\ncheck = "add_one"\n',
                                                    encoding="utf-8")
    cells[1]["source"] = "def add_one(x):\n    return x + 1"  # what a learner wrote
    cells[2]["outputs"], cells[2]["execution_count"] = [], None
    learner = folder / "learner" / "99_doctor.ipynb"
    learner.write_text(json.dumps(_notebook(cells)), encoding="utf-8")
    return learner


def _course_command() -> list[str]:
    """`softmax-lab` of this environment (the console script), else the same through this Python."""
    script = Path(sys.executable).parent / "softmax-lab"
    return [str(script)] if script.exists() else [sys.executable, "-m", "softmax_lab.cli"]


class TinyCheck:
    """`softmax-lab check` of the tiny notebook, in its own process: start() it, do other things, finish()."""

    def __init__(self):
        self.tmp = tempfile.TemporaryDirectory(prefix="softmax-lab-doctor-")
        folder = Path(self.tmp.name)
        learner = tiny_course(folder)
        self.command = [*_course_command(), "check", str(learner), "--solutions", str(folder / "solutions"),
                        "--registry", str(folder / "exercises"), "--timeout", "60", "--setup-timeout", "60",
                        "--notebook-timeout", str(TINY_TIMEOUT), *self.as_own_notebook()]
        self.started = time.monotonic()
        self.proc = subprocess.Popen(self.command, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True,
                                     cwd=folder, stdin=subprocess.DEVNULL)

    def as_own_notebook(self) -> list[str]:
        """The options under which `check` runs a learner's own workspace notebook here: without a cgroup where none
        can be made (a learner's account on the class hub), without bubblewrap where it cannot work (a laptop). The
        tiny notebook is in a temporary folder, not a workspace, so `check` would otherwise refuse it there."""
        from .grading import cgroup, sandbox

        self.without, options = [], []
        if cgroup.why_unavailable():
            self.without.append("a cgroup")
            options.append("--unsafe-no-cgroup")
        try:
            sandbox.check_works()
        except sandbox.SandboxMissing:
            self.without.append("a sandbox")
            options.append("--unsafe-no-sandbox")
        return options

    def finish(self) -> list[Finding]:
        try:
            out, _ = self.proc.communicate(timeout=TINY_TIMEOUT + 30)
        except subprocess.TimeoutExpired:
            self.proc.kill()
            self.proc.communicate()
            return [Finding("FAIL", f"`softmax-lab check` of a one-line notebook ran past {TINY_TIMEOUT + 30} s",
                            "is the machine overloaded? `softmax-lab check --keep-scratch NOTEBOOK` keeps its log")]
        finally:
            self.tmp.cleanup()
        seconds = time.monotonic() - self.started
        if self.proc.returncode == 0 and "1/1 points" in out:
            how = ("without " + " or ".join(self.without) + ", as your own notebooks run here" if self.without
                   else "in the bubblewrap sandbox")
            return [Finding("ok", f"`softmax-lab check` graded a tiny notebook: 1/1 points ({how}, {seconds:.1f} s)")]
        lines = [ln.strip() for ln in out.splitlines() if ln.strip() and not ln.startswith("checking ")]
        missing = next((m for m in ("pytest", "nbval", "ipykernel", "nbformat") if f"No module named {m}" in out
                        or f"No module named '{m}'" in out), None)
        if missing:
            return [Finding("FAIL", f"`softmax-lab check` cannot run notebooks: {missing} is not installed",
                            INSTALL_FIX)]
        detail = "; ".join(lines[-3:])[:400] or f"exit status {self.proc.returncode}, no output"
        return [Finding("FAIL", f"`softmax-lab check` failed on a tiny notebook that is correct: {detail}",
                        "make lab (reinstalls the course's packages); if it still fails, show these lines to your "
                        "instructor")]


def check_learner_tools() -> list[Finding]:
    """What the learner's commands load: JupyterLab (`make lab`), pytest and nbval (`softmax-lab check`)."""
    found = []
    for module, package, used_by in (("jupyterlab", "jupyterlab", "make lab"),
                                     ("pytest", "pytest", "softmax-lab check"),
                                     ("nbval", "nbval", "softmax-lab check")):
        if find_spec(module) is None:
            found.append(Finding("FAIL", f"{package} is not installed; `{used_by}` needs it", INSTALL_FIX))
    if not found:
        found.append(Finding("ok", "jupyterlab, pytest and nbval are installed (make lab, softmax-lab check)"))
    return found


def check_cgroups() -> list[Finding]:
    """`softmax-lab grade` caps each run with a cgroup of its own; a learner's own `check` runs without one where
    none can be made (a learner's account on the class hub)."""
    from .grading import cgroup

    why = cgroup.why_unavailable()
    if why:
        return [Finding("info", f"no per-run cgroups here ({why}): `softmax-lab check` runs your own notebooks "
                                "without one; `softmax-lab grade` (instructors) refuses without --unsafe-no-cgroup",
                        "instructors: grade as root on a machine with cgroups (docs/grading.md)")]
    return [Finding("ok", "per-run cgroups can be made here (memory, tasks and CPU of each graded notebook)")]


def check_sandbox() -> list[Finding]:
    """`softmax-lab check` runs notebooks in bubblewrap when it works here, else without it (one line says so)."""
    from .grading import sandbox

    try:
        sandbox.check_works()
    except sandbox.SandboxMissing:
        return [Finding("info", "no bubblewrap sandbox here: `softmax-lab check` runs your own notebook without one "
                                "(instructors grading others' work need it)",
                        f"optional, Debian/Ubuntu: sudo apt-get install -y {sandbox.APT_PACKAGE}")]
    return [Finding("ok", "the grader's bubblewrap sandbox works here")]


def check_hints() -> list[Finding]:
    """`softmax_lab.hint(...)`: the ladder of the first exercise reads at level 1 (sources or packaged data)."""
    try:
        from . import hints

        first = sorted(hints.table())[0]
        text = hints.level_text(first, 1)
    except Exception as err:
        return [Finding("FAIL", f"softmax_lab.hint() cannot read the hints: {type(err).__name__}: {str(err)[:200]}",
                        "reinstall the course: pip install --force-reinstall --no-deps softmax-lab (or make lab)")]
    return [Finding("ok", f"softmax_lab.hint() reads the hints ({len(hints.table())} exercises)")] if text else []


def findings() -> list[Finding]:
    tiny = TinyCheck()  # runs while the checks below do
    try:
        found = (check_versions() + check_device() + check_kernel_registered() + check_course_command()
                 + check_learner_tools() + check_cgroups() + check_sandbox() + check_hints() + check_workspace()
                 + check_cuda_layer() + check_tiny_kernel())
    except BaseException:
        tiny.proc.kill()
        tiny.finish()
        raise
    return found + tiny.finish()


def run_doctor(verbose: bool = True) -> bool:
    started = time.monotonic()
    found = findings()
    if verbose:
        for f in found:
            print(f.line())
        bad = sum(f.level == "FAIL" for f in found)
        took = f" ({time.monotonic() - started:.1f} s)"
        print(("All checks passed." if not bad else f"{bad} problem(s) found: see the fixes above.") + took)
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
