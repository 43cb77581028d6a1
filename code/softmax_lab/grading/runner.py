"""Run one grafted notebook under nbval in its own sandbox, with limits.

    bwrap ... -- pytest --nbval-lax --nbval-current-env --nbval-sanitize-with CFG NB   (+ nbval_plugin.py)

* Every run gets a fresh bubblewrap sandbox (``sandbox.py``): its own PID, network, IPC and mount namespaces,
  the code and venv read-only, a private tmpfs as working directory and ``HOME``, a minimal environment.
  When the run ends (or the grader dies) everything in it dies, daemons included.
* Limits: a timeout per cell (nbval interrupts the cell), a wall-clock limit for the whole run, a cgroup per
  run (``cgroup.py``: memory including the sandbox's tmpfs files, tasks, CPU), and a memory cap: on the CPU also
  as a data-size limit (``ulimit -d`` inside the sandbox: heap and private writable mappings, so
  allocations fail with MemoryError; not ``ulimit -v``, under which PyPI's CUDA build of torch cannot even be
  imported), and everywhere as a watchdog on the resident memory of the whole process tree.
* What the run prints goes to a pipe whose last bytes the grader keeps (never a file: a flood costs nothing).
  Cell results come back as JSON lines on a pipe held by the pytest process only; that process makes itself
  non-dumpable, so the kernel (the learner's code) cannot open it through ``/proc/<pid>/fd``. These records
  are still only *diagnostics*: the points come from the judge (``judge.py``), outside.
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

from . import cgroup, streams

try:  # psutil comes with IPython; without it we fall back to process groups and no RSS watchdog
    import psutil
except ImportError:  # pragma: no cover
    psutil = None

MAX_RECORD_BYTES = 8 * 2**20  # what the grader keeps of one run's cell records
LOG_BYTES = 64 * 1024          # what it keeps of the run's own output (the last bytes)

STOP = threading.Event()  # set on Ctrl-C: every running notebook is killed


@dataclass
class Limits:
    cell_timeout: float = 120.0    # seconds per cell from the first exercise on
    setup_timeout: float = 300.0   # seconds per cell before the first exercise (imports, helpers)
    wall_timeout: float = 900.0    # seconds for one run of the whole notebook
    memory_mb: int = 8192          # memory cap for the whole run (0: none)
    rlimit_as: bool | None = None  # the data-size limit (historical name); None: only when no GPU is visible
    keep_scratch: bool = False
    sandbox: bool = True           # False only with --unsafe-no-sandbox
    tmp_mb: int = 1024             # size of the sandbox's private /tmp (tmpfs)
    shm_mb: int = 256              # size of its /dev/shm (tmpfs)
    cgroup: bool = True            # a cgroup per run; False with --unsafe-no-cgroup or where none can be made
    tasks: int = 4096              # processes and threads per run (the cgroup's pids.max; chapter 9's CUDA
                                   # simulator runs one thread per simulated CUDA thread)
    cpus: float = 2.0              # CPU quota per run, in CPUs (the cgroup's cpu.max / cfs quota)


@dataclass
class RunResult:
    cells: dict[int, dict] = field(default_factory=dict)  # code-cell number -> the plugin's end record
    fatal: dict | None = None      # {"cell": n or None, "status": ..., "message": ...} when the run broke off
    seconds: float = 0.0
    log: str = ""                  # the tail of pytest's own output, for instructors
    oom_kills: int = 0             # processes the kernel killed for memory (the cgroup's count)


def gpu_visible() -> bool:
    """A GPU may be used (cheap test, without importing torch): CUDA reserves far more than the cap."""
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


PLUGIN = "softmax_lab.grading.nbval_plugin"  # pytest -p: imports no torch into the pytest process


def _write_config(scratch: Path, sanitize: str) -> tuple[Path, Path]:
    """pytest.ini and nbval's sanitize config, in the folder given."""
    ini = scratch / "pytest.ini"
    ini.write_text("[pytest]\naddopts =\n", encoding="utf-8")
    cfg = scratch / "nbval_sanitize.cfg"
    cfg.write_text(sanitize, encoding="utf-8")
    return ini, cfg


RECORD_STATUSES = ("passed", "mismatch", "raised", "timeout", "died", "grader-error", "setup-error", "skipped")


def _text(value, limit: int) -> str:
    """A record's text field: a str (anything else becomes ''), lone surrogates replaced, truncated."""
    if not isinstance(value, str):
        return ""
    return value.encode("utf-8", "replace").decode("utf-8", "replace")[:limit]


def _hints(value) -> list[tuple[str, int]]:
    """A record's hints field: (exercise, level) pairs, each validated like a notebook's hint output."""
    from .hints import hint_of

    pairs = value[:50] if isinstance(value, list) else []
    found = [hint_of({"output_type": "display_data", "metadata": {"softmax_lab": {"hint": {
        "exercise": p[0], "level": p[1]}}}}) for p in pairs if isinstance(p, list) and len(p) == 2]
    return [h for h in found if h]


def parse_record(line: str) -> dict | None:
    """One cell record from the plugin, validated field by field (None when it is not a valid record)."""
    try:
        rec = json.loads(line)
    except ValueError:
        return None
    if not isinstance(rec, dict):
        return None
    event = rec.get("event")
    if event == "finished":
        return {"event": "finished"}
    if event == "collect-error":
        return {"event": "collect-error", "message": _text(rec.get("message"), 500)}
    cell = rec.get("cell")
    if event not in ("start", "end") or not isinstance(cell, int) or isinstance(cell, bool) or not 0 <= cell < 10**6:
        return None
    if event == "start":
        return {"event": "start", "cell": cell}
    status = rec.get("status")
    if status not in RECORD_STATUSES:
        return None
    out = {"event": "end", "cell": cell, "status": status, "message": _text(rec.get("message"), 2000),
           "stdout": _text(rec.get("stdout"), 20000), "stderr": _text(rec.get("stderr"), 4000),
           "display": _text(rec.get("display"), 4000), "error": None, "hints": _hints(rec.get("hints"))}
    err = rec.get("error")
    if isinstance(err, dict):
        out["error"] = {"ename": _text(err.get("ename"), 200) or "Error", "evalue": _text(err.get("evalue"), 2000),
                        "traceback": _text(err.get("traceback"), 4000)}
    elif status == "raised":
        out["error"] = None
    return out


def code_cell_numbers(nb) -> dict[int, int]:
    """notebook cell index -> nbval's cell number (nbval counts code cells only)."""
    out, n = {}, 0
    for k, cell in enumerate(nb.cells):
        if cell.cell_type == "code":
            out[k] = n
            n += 1
    return out


def run_notebook(nb, limits: Limits, timeouts: dict[int, float] | None = None, sanitize: str | None = None,
                 env: dict | None = None, exercise_cells: list[int] | None = None) -> RunResult:
    """Run ``nb`` (a notebook node) under nbval in a fresh sandbox; see the module docstring.

    ``timeouts`` maps nbval cell numbers to per-cell timeouts (others get ``limits.cell_timeout``);
    ``exercise_cells``: nbval cell numbers of the learner's cells (nbval markers in them are ignored).
    """
    from . import sandbox
    from ..course import sanitize_config

    scratch = sandbox.new_scratch()
    grader_dir = scratch / "in"
    grader_dir.mkdir()
    # Lone surrogates (valid in JSON, not in UTF-8) become "?": the sandbox reads the notebook back as UTF-8.
    import nbformat  # here, not at the top: it takes a second to load (check --help must not wait)

    (grader_dir / "submission.ipynb").write_bytes(nbformat.writes(nb).encode("utf-8", "replace"))
    _write_config(grader_dir, sanitize_config() if sanitize is None else sanitize)

    group = cgroup.create(limits.memory_mb, limits.tasks, limits.cpus) if limits.cgroup else None
    rfd, wfd = os.pipe()
    config = {"fd": wfd, "timeouts": {str(k): v for k, v in (timeouts or {}).items()},
              "exercise_cells": list(exercise_cells or [])}
    rlimit_as = (not gpu_visible()) if limits.rlimit_as is None else limits.rlimit_as
    if limits.sandbox:
        child_env = sandbox.base_env({"SOFTMAX_LAB_GRADE_CONFIG": json.dumps(config),
                                      "PYTEST_DISABLE_PLUGIN_AUTOLOAD": "1"})
        child_env.update(env or {})
        inner = [sys.executable, "-m", "pytest", "-q", "-p", PLUGIN, "-p", "nbval.plugin",
                 "-p", "no:cacheprovider", "-c", "/grader/pytest.ini", "--rootdir", "/tmp",
                 "--nbval-lax", "--nbval-current-env", "--nbval-sanitize-with", "/grader/nbval_sanitize.cfg",
                 "--nbval-cell-timeout", str(limits.cell_timeout), "--nbval-kernel-startup-timeout", "120",
                 "/tmp/work/submission.ipynb"]
        cmd = sandbox.command(inner, grader_dir=grader_dir, env=child_env, tmp_mb=limits.tmp_mb,
                              shm_mb=limits.shm_mb, memory_mb=limits.memory_mb, rlimit_as=rlimit_as, cwd="/tmp",
                              prelude="cp /grader/submission.ipynb /tmp/work/ && mkdir -p /tmp/home/.config/matplotlib")
        cwd = "/"
        post_limit = False
    else:  # --unsafe-no-sandbox: the old separate process, for trusted notebooks only
        work, home = scratch / "work", scratch / "home"
        work.mkdir()
        home.mkdir()
        nb_path = work / "submission.ipynb"
        shutil.copy(grader_dir / "submission.ipynb", nb_path)
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
            "OMP_NUM_THREADS": os.environ.get("OMP_NUM_THREADS", "1"),
            "MKL_NUM_THREADS": os.environ.get("MKL_NUM_THREADS", "1"),
            "MALLOC_ARENA_MAX": os.environ.get("MALLOC_ARENA_MAX", "2"),
            "TRITON_CACHE_DIR": os.environ.get("TRITON_CACHE_DIR", str(real_home / ".triton" / "cache")),
            "MPLCONFIGDIR": os.environ.get("MPLCONFIGDIR", str(real_home / ".config" / "matplotlib")),
        })
        cmd = [sys.executable, "-m", "pytest", "-q", "-p", PLUGIN, "-p", "nbval.plugin",
               "-p", "no:cacheprovider", "-c", str(grader_dir / "pytest.ini"), "--rootdir", str(scratch),
               "--nbval-lax", "--nbval-current-env", "--nbval-sanitize-with", str(grader_dir / "nbval_sanitize.cfg"),
               "--nbval-cell-timeout", str(limits.cell_timeout), "--nbval-kernel-startup-timeout", "120",
               str(nb_path)]
        cwd = str(scratch)
        post_limit = True

    result = RunResult()
    t0 = time.monotonic()
    killed: tuple[str, str] | None = None
    log_r, log_w = os.pipe()
    try:
        proc = subprocess.Popen(cgroup.enter(group, cmd), cwd=cwd,
                                env=child_env if not limits.sandbox else {"PATH": "/usr/bin:/bin"},
                                stdin=subprocess.DEVNULL, stdout=log_w, stderr=log_w, pass_fds=(wfd,),
                                start_new_session=True)
    except BaseException:
        for fd in (rfd, log_r):
            os.close(fd)
        if group is not None:
            group.close()
        shutil.rmtree(scratch, ignore_errors=True)
        raise
    finally:
        os.close(wfd)
        os.close(log_w)

    # Both pipes are drained to their end with caps: a flood of output cannot exhaust the grader's memory.
    records = streams.Drain(rfd, head=MAX_RECORD_BYTES, tail=0)
    log = streams.Drain(log_r, head=0, tail=LOG_BYTES)
    _limit(proc.pid, limits.memory_mb, rlimit_as and post_limit)
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
        if group is not None:
            result.oom_kills = group.oom_kills()
            group.close()  # anything left in the cgroup dies with it
        records.join()
        log.join()
    result.seconds = round(time.monotonic() - t0, 2)
    result.log = log.text()[-6000:]
    if not limits.keep_scratch:
        shutil.rmtree(scratch, ignore_errors=True)
    else:
        result.log += f"\n(scratch directory kept: {scratch})"
    lines = streams.lines_of(bytes(records.head), 1 << 20)

    started: list[int] = []
    finished = False
    unreadable = None  # why pytest could not collect the notebook, if it could not
    for line in lines:
        rec = parse_record(line)
        if rec is None:
            continue
        if rec.get("event") == "start":
            started.append(rec["cell"])
        elif rec.get("event") == "end":
            result.cells[rec["cell"]] = rec
        elif rec.get("event") == "finished":
            finished = True
        elif rec.get("event") == "collect-error":
            unreadable = rec["message"] or "an error while collecting it"
    running = next((c for c in reversed(started) if c not in result.cells), None)
    broken = next((r for r in result.cells.values()
                   if r["status"] in ("died", "timeout", "grader-error", "setup-error")), None)
    if killed and killed[0] == "wall" and running is None and broken is not None:
        # the budget ran out while nbval was stopping after a cell's own timeout: that cell is the cause
        result.fatal = {"cell": broken["cell"], "status": broken["status"], "message": broken["message"]}
    elif killed:
        result.fatal = {"cell": running, "status": killed[0], "message": killed[1]}
    elif broken is not None:
        result.fatal = {"cell": broken["cell"], "status": broken["status"], "message": broken["message"]}
    elif unreadable is not None or (finished and not started and code_cell_numbers(nb)):
        why = unreadable or "pytest ran none of its cells (see the grader log)"
        result.fatal = {"cell": None, "status": "setup-error", "message": f"pytest could not read the notebook: {why}"}
    elif not finished:
        sig = -proc.returncode if proc.returncode and proc.returncode < 0 else None
        if limits.sandbox and proc.returncode and proc.returncode > 128:
            sig = proc.returncode - 128  # bwrap reports a child killed by a signal as 128 + signal
        how = f"was killed by signal {sig}" if sig else f"exited with status {proc.returncode}"
        result.fatal = {"cell": running, "status": "died", "message": f"the grading process {how}"}
    if result.oom_kills and result.fatal and result.fatal["status"] == "died":
        result.fatal = {**result.fatal, "status": "memory",
                        "message": f"used more than {limits.memory_mb} MB of memory, files in /tmp and /dev/shm "
                                   "included (the kernel's limit)"}
    return result
