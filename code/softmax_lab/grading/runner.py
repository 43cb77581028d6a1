"""Run one grafted notebook under nbval in its own process, in a scratch directory, with limits.

    pytest --nbval-lax --nbval-current-env --nbval-sanitize-with CFG NB   (+ nbval_plugin.py as conftest.py)

* The notebook sits alone in a fresh scratch directory, which is the kernel's working directory; HOME points
  into the scratch directory too. Deleting or overwriting files there harms nothing.
* Limits: a timeout per cell (nbval interrupts the cell), a wall-clock limit for the whole run, and a memory
  cap: on the CPU as a data-size limit (``RLIMIT_DATA``: heap and private writable mappings, so allocations
  fail with MemoryError; not ``RLIMIT_AS``, which PyPI's CUDA build of torch cannot even be imported under), and
  everywhere as a watchdog on the resident memory of the whole process tree. Either limit, or a crash, ends
  only this process tree (the pytest process, the kernel in its own session, and their children).
* Cell results come back as JSON lines on a pipe the kernel does not inherit (see ``nbval_plugin``).
"""
from __future__ import annotations

import json
import os
import shutil
import signal
import subprocess
import sys
import tempfile
import threading
import time
from dataclasses import dataclass, field
from pathlib import Path

import nbformat

try:  # psutil comes with IPython; without it we fall back to process groups and no RSS watchdog
    import psutil
except ImportError:  # pragma: no cover
    psutil = None

# The same patterns as tests/nbval_sanitize.cfg (used when the checkout's copy cannot be found).
DEFAULT_SANITIZE = """\
[timestamps]
regex: \\d+(\\.\\d+)? ?(ms|s|us|µs)\\b
replace: TIME

[addresses]
regex: 0x[0-9a-f]{6,}
replace: ADDR
"""

STOP = threading.Event()  # set on Ctrl-C: every running notebook is killed


@dataclass
class Limits:
    cell_timeout: float = 120.0    # seconds per cell from the first exercise on
    setup_timeout: float = 300.0   # seconds per cell before the first exercise (imports, helpers)
    wall_timeout: float = 900.0    # seconds for one run of the whole notebook
    memory_mb: int = 8192          # memory cap for the whole run (0: none)
    rlimit_as: bool | None = None  # address-space limit; None: only when no GPU is visible
    keep_scratch: bool = False


@dataclass
class RunResult:
    cells: dict[int, dict] = field(default_factory=dict)  # code-cell number -> the plugin's end record
    fatal: dict | None = None      # {"cell": n or None, "status": ..., "message": ...} when the run broke off
    seconds: float = 0.0
    log: str = ""                  # the tail of pytest's own output, for instructors


def gpu_visible() -> bool:
    """A GPU may be used (cheap test, without importing torch): RLIMIT_AS would break CUDA's mappings."""
    if os.environ.get("SOFTMAX_LAB_DEVICE", "").strip().lower() in ("cpu", "interpreter"):
        return False
    return any(Path(p).exists() for p in ("/dev/nvidiactl", "/dev/nvidia0", "/dev/dxg"))


def _limit(pid: int, memory_mb: int, rlimit_as: bool) -> None:
    """Set the child's limits right after it starts (children inherit them; the kernel starts much later).
    prlimit instead of preexec_fn: preexec_fn is unsafe in a program with threads (--jobs)."""
    import resource

    try:
        resource.prlimit(pid, resource.RLIMIT_CORE, (0, 0))  # a segfault leaves no core file behind
        if rlimit_as and memory_mb > 0:
            cap = memory_mb * 2**20
            resource.prlimit(pid, resource.RLIMIT_DATA, (cap, cap))
    except (OSError, AttributeError, ValueError):  # not Linux, or the child is already gone
        pass


class _Tree:
    """The processes started for one run, remembered as they appear (the kernel leaves our session)."""

    def __init__(self, pid: int):
        self.pid = pid
        self.seen: dict[int, object] = {}
        try:
            self.root = psutil.Process(pid) if psutil else None
        except Exception:  # noqa: BLE001 - already gone
            self.root = None

    def scan(self) -> int:
        """Refresh the process list; return the total resident memory in bytes."""
        if self.root is None:
            return 0
        total = 0
        try:
            procs = [self.root] + self.root.children(recursive=True)
        except psutil.Error:
            procs = []
        for p in procs:
            self.seen.setdefault(p.pid, p)
        for p in list(self.seen.values()):
            try:
                total += p.memory_info().rss
            except psutil.Error:
                pass
        return total

    def kill(self, group: bool = True) -> None:
        """Kill every process seen; ``group``: also the root's process group (only while the root is not yet
        reaped: afterwards its number may belong to someone else)."""
        self.scan()
        if group:
            try:
                os.killpg(self.pid, signal.SIGKILL)
            except OSError:
                pass
        for p in self.seen.values():
            try:
                p.kill()  # psutil checks the create time: a reused pid is never hit
            except Exception:  # noqa: BLE001
                pass


def _write_config(scratch: Path, sanitize: str) -> tuple[Path, Path]:
    ini = scratch / "pytest.ini"
    ini.write_text("[pytest]\naddopts =\n", encoding="utf-8")
    # The plugin goes in as the run's conftest.py rather than `-p softmax_lab...`: importing the package
    # would import torch into the pytest process (seconds per submission, for nothing).
    plugin = Path(__file__).with_name("nbval_plugin.py").read_text(encoding="utf-8")
    (scratch / "conftest.py").write_text(plugin, encoding="utf-8")
    cfg = scratch / "nbval_sanitize.cfg"
    cfg.write_text(sanitize, encoding="utf-8")
    return ini, cfg


def code_cell_numbers(nb) -> dict[int, int]:
    """notebook cell index -> nbval's cell number (nbval counts code cells only)."""
    out, n = {}, 0
    for k, cell in enumerate(nb.cells):
        if cell.cell_type == "code":
            out[k] = n
            n += 1
    return out


def run_notebook(nb, limits: Limits, timeouts: dict[int, float] | None = None, sanitize: str = DEFAULT_SANITIZE,
                 env: dict | None = None) -> RunResult:
    """Run ``nb`` (a notebook node) under nbval in a separate process; see the module docstring.

    ``timeouts`` maps nbval cell numbers to per-cell timeouts (others get ``limits.cell_timeout``).
    """
    scratch = Path(tempfile.mkdtemp(prefix="softmax-lab-grade-"))
    work, home = scratch / "work", scratch / "home"
    work.mkdir()
    home.mkdir()
    nb_path = work / "submission.ipynb"
    nbformat.write(nb, str(nb_path))
    ini, cfg = _write_config(scratch, sanitize)
    log_path = scratch / "pytest.log"

    rfd, wfd = os.pipe()
    config = {"fd": wfd, "timeouts": {str(k): v for k, v in (timeouts or {}).items()}}
    child_env = dict(os.environ if env is None else env)
    real_home = Path.home()
    child_env.update({
        "SOFTMAX_LAB_GRADE_CONFIG": json.dumps(config),
        "HOME": str(home),
        "IPYTHONDIR": str(home / ".ipython"),
        "JUPYTER_RUNTIME_DIR": str(scratch / "runtime"),
        "PYTEST_DISABLE_PLUGIN_AUTOLOAD": "1",
        "PYTHONDONTWRITEBYTECODE": "1",
        "MPLBACKEND": "Agg",
        # Small thread pools and malloc arenas: several submissions share the CPUs (--jobs), and every thread
        # arena reserves memory that RLIMIT_DATA counts.
        "OMP_NUM_THREADS": os.environ.get("OMP_NUM_THREADS", "1"),
        "MKL_NUM_THREADS": os.environ.get("MKL_NUM_THREADS", "1"),
        "MALLOC_ARENA_MAX": os.environ.get("MALLOC_ARENA_MAX", "2"),
        # Keep compiled-kernel and font caches where they were: rebuilding them per submission costs seconds.
        "TRITON_CACHE_DIR": os.environ.get("TRITON_CACHE_DIR", str(real_home / ".triton" / "cache")),
        "MPLCONFIGDIR": os.environ.get("MPLCONFIGDIR", str(real_home / ".config" / "matplotlib")),
    })
    cmd = [sys.executable, "-m", "pytest", "-q", "-p", "nbval.plugin",
           "-p", "no:cacheprovider", "-c", str(ini), "--rootdir", str(scratch),
           "--nbval-lax", "--nbval-current-env", "--nbval-sanitize-with", str(cfg),
           "--nbval-cell-timeout", str(limits.cell_timeout), "--nbval-kernel-startup-timeout", "120",
           str(nb_path)]
    rlimit_as = (not gpu_visible()) if limits.rlimit_as is None else limits.rlimit_as

    lines: list[str] = []
    result = RunResult()
    t0 = time.monotonic()
    killed: tuple[str, str] | None = None
    log = open(log_path, "wb")
    try:
        proc = subprocess.Popen(cmd, cwd=str(scratch), env=child_env, stdin=subprocess.DEVNULL, stdout=log,
                                stderr=subprocess.STDOUT, pass_fds=(wfd,), start_new_session=True)
    except BaseException:
        os.close(rfd)
        log.close()
        shutil.rmtree(scratch, ignore_errors=True)
        raise
    finally:
        os.close(wfd)

    def read_pipe():
        with os.fdopen(rfd, "r", encoding="utf-8", errors="replace") as f:
            for line in f:
                lines.append(line)

    _limit(proc.pid, limits.memory_mb, rlimit_as)
    reader = threading.Thread(target=read_pipe, daemon=True)
    reader.start()
    tree = _Tree(proc.pid)
    try:
        next_scan = 0.0
        while proc.poll() is None:
            now = time.monotonic()
            if now >= next_scan:
                rss = tree.scan()
                next_scan = now + 0.5
                if limits.memory_mb > 0 and rss > limits.memory_mb * 2**20:
                    killed = ("memory", f"used more than {limits.memory_mb} MB of memory (the grader's limit)")
            if now - t0 > limits.wall_timeout:
                killed = ("wall", f"the whole notebook ran longer than {limits.wall_timeout:g} s")
            if STOP.is_set():
                killed = ("stopped", "grading was interrupted")
            if killed:
                tree.kill()
                proc.wait()
                break
            time.sleep(0.1)
    finally:
        if proc.poll() is None:
            tree.kill()
            proc.wait()
        tree.kill(group=False)  # the kernel (own session) and anything it started, if still around
        reader.join(timeout=5)
        log.close()
    result.seconds = round(time.monotonic() - t0, 2)
    try:
        result.log = log_path.read_text(encoding="utf-8", errors="replace")[-6000:]
    except OSError:
        result.log = ""
    if not limits.keep_scratch:
        shutil.rmtree(scratch, ignore_errors=True)
    else:
        result.log += f"\n(scratch directory kept: {scratch})"

    started: list[int] = []
    finished = False
    for line in lines:
        try:
            rec = json.loads(line)
        except json.JSONDecodeError:
            continue
        if rec.get("event") == "start":
            started.append(rec["cell"])
        elif rec.get("event") == "end":
            result.cells[rec["cell"]] = rec
        elif rec.get("event") == "finished":
            finished = True
    running = next((c for c in reversed(started) if c not in result.cells), None)
    broken = next((r for r in result.cells.values()
                   if r["status"] in ("died", "timeout", "grader-error", "setup-error")), None)
    if killed:
        result.fatal = {"cell": running, "status": killed[0], "message": killed[1]}
    elif broken is not None:
        result.fatal = {"cell": broken["cell"], "status": broken["status"], "message": broken["message"]}
    elif not finished:
        sig = -proc.returncode if proc.returncode and proc.returncode < 0 else None
        how = f"was killed by signal {sig}" if sig else f"exited with status {proc.returncode}"
        result.fatal = {"cell": running, "status": "died", "message": f"the grading process {how}"}
    return result
