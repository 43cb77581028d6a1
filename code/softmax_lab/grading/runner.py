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

``run_notebook``'s steps: ``write_scratch`` (the notebook and configs), ``sandboxed_command`` (or
``unsandboxed_command``), ``process.start`` (in a cgroup of its own), ``supervise`` and ``watch`` (limits,
Ctrl-C, leftovers killed, pipes drained), ``read_records`` and ``fatal_of`` (why the run broke off, if it did).
"""
from __future__ import annotations

import json
import os
import shutil
import time
from dataclasses import dataclass, field
from pathlib import Path

from . import streams
from .process import STOP, Child, Limits, gpu_visible, set_limits, start

__all__ = ["run_notebook", "RunResult", "Limits", "STOP", "gpu_visible", "parse_record", "code_cell_numbers"]

MAX_RECORD_BYTES = 8 * 2**20  # what the grader keeps of one run's cell records
LOG_BYTES = 64 * 1024          # what it keeps of the run's own output (the last bytes)
PLUGIN = "softmax_lab.grading.nbval_plugin"  # pytest -p: imports no torch into the pytest process


@dataclass
class RunResult:
    cells: dict[int, dict] = field(default_factory=dict)  # code-cell number -> the plugin's end record
    fatal: dict | None = None      # {"cell": n or None, "status": ..., "message": ...} when the run broke off
    seconds: float = 0.0
    log: str = ""                  # the tail of pytest's own output, for instructors
    oom_kills: int = 0             # processes the kernel killed for memory (the cgroup's count)


def run_notebook(nb, limits: Limits, timeouts: dict[int, float] | None = None, sanitize: str | None = None,
                 env: dict | None = None, exercise_cells: list[int] | None = None) -> RunResult:
    """Run ``nb`` (a notebook node) under nbval in a fresh sandbox; see the module docstring.

    ``timeouts`` maps nbval cell numbers to per-cell timeouts (others get ``limits.cell_timeout``);
    ``exercise_cells``: nbval cell numbers of the learner's cells (nbval markers in them are ignored).
    """
    scratch, grader_dir = write_scratch(nb, sanitize, limits.keep_scratch)
    rfd, wfd = os.pipe()
    config = {"fd": wfd, "timeouts": {str(k): v for k, v in (timeouts or {}).items()},
              "exercise_cells": list(exercise_cells or [])}
    if limits.sandbox:
        cmd, cwd, popen_env = sandboxed_command(grader_dir, limits, config, env)
    else:
        cmd, cwd, popen_env = unsandboxed_command(scratch, grader_dir, limits, config, env)
    result, t0 = RunResult(), time.monotonic()
    log_r, log_w = os.pipe()
    try:
        child = start(cmd, limits, env=popen_env, cwd=cwd, out=log_w, err=log_w, pass_fds=(wfd,),
                      read_ends=(rfd, log_r))
    except BaseException:
        shutil.rmtree(scratch, ignore_errors=True)
        raise
    # Both pipes are drained to their end with caps: a flood of output cannot exhaust the grader's memory.
    records = streams.Drain(rfd, head=MAX_RECORD_BYTES, tail=0)
    log = streams.Drain(log_r, head=0, tail=LOG_BYTES)
    set_limits(child.proc.pid, limits.memory_mb, limits.data_limit() and not limits.sandbox)
    killed = supervise(child, (records, log), limits, t0, result)
    result.seconds = round(time.monotonic() - t0, 2)
    result.log = log.text()[-6000:]
    if not limits.keep_scratch:
        shutil.rmtree(scratch, ignore_errors=True)
    else:
        result.log += f"\n(scratch directory kept: {scratch})"
    started, finished, unreadable = read_records(result, streams.lines_of(bytes(records.head), 1 << 20))
    result.fatal = fatal_of(result, started, finished, unreadable, killed, child.proc.returncode, limits,
                            has_code=bool(code_cell_numbers(nb)))
    return result


def write_scratch(nb, sanitize: str | None, keep: bool = False) -> tuple[Path, Path]:
    """A fresh scratch folder whose ``in/`` holds the notebook, pytest.ini and nbval's sanitize config (``keep``:
    one that no grader's clean-up removes, ``sandbox.new_scratch``)."""
    from . import sandbox
    from ..course import sanitize_config

    scratch = sandbox.new_scratch(keep)
    grader_dir = scratch / "in"
    grader_dir.mkdir()
    # Lone surrogates (valid in JSON, not in UTF-8) become "?": the sandbox reads the notebook back as UTF-8.
    import nbformat  # here, not at the top: it takes a second to load (check --help must not wait)

    (grader_dir / "submission.ipynb").write_bytes(nbformat.writes(nb).encode("utf-8", "replace"))
    (grader_dir / "pytest.ini").write_text("[pytest]\naddopts =\n", encoding="utf-8")
    text = sanitize_config() if sanitize is None else sanitize
    (grader_dir / "nbval_sanitize.cfg").write_text(text, encoding="utf-8")
    return scratch, grader_dir


def pytest_command(ini: str, rootdir: str, sanitize_cfg: str, cell_timeout: float, notebook: str) -> list[str]:
    """pytest running one notebook under nbval with the grader's plugin."""
    from . import sandbox

    return [sandbox.python(), "-m", "pytest", "-q", "-p", PLUGIN, "-p", "nbval.plugin",
            "-p", "no:cacheprovider", "-c", ini, "--rootdir", rootdir,
            "--nbval-lax", "--nbval-current-env", "--nbval-sanitize-with", sanitize_cfg,
            "--nbval-cell-timeout", str(cell_timeout), "--nbval-kernel-startup-timeout", "120", notebook]


def sandboxed_command(grader_dir: Path, limits: Limits, config: dict, env: dict | None) -> tuple[list, str, dict]:
    """(command, cwd, environment) of the run in a fresh bubblewrap sandbox."""
    from . import sandbox

    data_limit = limits.data_limit()
    child_env = sandbox.base_env({"SOFTMAX_LAB_GRADE_CONFIG": json.dumps(config),
                                  "PYTEST_DISABLE_PLUGIN_AUTOLOAD": "1",
                                  "SOFTMAX_LAB_CHECK_SECONDS": check_seconds(limits.cell_timeout)})
    child_env.update(env or {})
    inner = pytest_command("/grader/pytest.ini", "/tmp", "/grader/nbval_sanitize.cfg", limits.cell_timeout,
                           "/tmp/work/submission.ipynb")
    cmd = sandbox.command(inner, grader_dir=grader_dir, env=child_env, tmp_mb=limits.tmp_mb,
                          shm_mb=limits.shm_mb, memory_mb=limits.memory_mb, rlimit_as=data_limit, cwd="/tmp",
                          prelude="cp /grader/submission.ipynb /tmp/work/ && mkdir -p /tmp/home/.config/matplotlib")
    return cmd, "/", {"PATH": "/usr/bin:/bin"}


def check_seconds(cell_timeout: float) -> str:
    """The checks' own limit per case (checks/guard.py) for a run whose cells get ``cell_timeout``: half of it, from
    30 s to the learner's 60, so that a case that never ends is stopped by the check (a STOPPED line naming the
    learner's line) before the cell's limit interrupts the whole check (with --timeout 60 both struck at once)."""
    return f"{min(60.0, max(30.0, cell_timeout / 2)):g}"


def unsandboxed_command(scratch: Path, grader_dir: Path, limits: Limits, config: dict,
                        env: dict | None) -> tuple[list, str, dict]:
    """(command, cwd, environment) of the run as a plain process: --unsafe-no-sandbox, trusted notebooks only."""
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
    child_env.setdefault("SOFTMAX_LAB_CHECK_SECONDS", check_seconds(limits.cell_timeout))  # (the caller's kept)
    cmd = pytest_command(str(grader_dir / "pytest.ini"), str(scratch), str(grader_dir / "nbval_sanitize.cfg"),
                         limits.cell_timeout, str(nb_path))
    return cmd, str(scratch), child_env


def supervise(child: Child, drains, limits: Limits, t0: float, result: RunResult) -> tuple[str, str] | None:
    """Watch the run to its end, then kill whatever is left of it and read its pipes to their end."""
    try:
        return watch(child, limits, t0)
    finally:
        result.oom_kills = child.finish()
        for drain in drains:
            drain.join()


def watch(child: Child, limits: Limits, t0: float) -> tuple[str, str] | None:
    """Wait for the run to end; kill it past its memory or wall-clock limit or on Ctrl-C: (why, words), or None."""
    killed = None
    next_scan = 0.0
    while child.proc.poll() is None:
        now = time.monotonic()
        if now >= next_scan:
            rss = child.tree.scan()
            next_scan = now + 0.5
            if limits.memory_mb > 0 and rss > limits.memory_mb * 2**20:
                killed = ("memory", f"used more than {limits.memory_mb} MB of memory (the grader's limit)")
        if now - t0 > limits.wall_timeout:
            killed = ("wall", f"the whole notebook ran longer than {limits.wall_timeout:g} s")
        if STOP.is_set():
            killed = ("stopped", "grading was interrupted")
        if killed:
            child.kill()
            break
        time.sleep(0.1)
    return killed


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


def read_records(result: RunResult, lines: list[str]) -> tuple[list[int], bool, str | None]:
    """Fill ``result.cells`` from the plugin's lines: (cells started, whether pytest finished, why it could not
    collect the notebook or None)."""
    started: list[int] = []
    finished = False
    unreadable = None
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
    return started, finished, unreadable


def fatal_of(result: RunResult, started: list[int], finished: bool, unreadable: str | None,
             killed: tuple[str, str] | None, returncode: int | None, limits: Limits, has_code: bool) -> dict | None:
    """Why the run broke off ({"cell", "status", "message"}), or None when it ran to its end."""
    running = next((c for c in reversed(started) if c not in result.cells), None)
    broken = next((r for r in result.cells.values()
                   if r["status"] in ("died", "timeout", "grader-error", "setup-error")), None)
    fatal = None
    if killed and killed[0] == "wall" and running is None and broken is not None:
        # the budget ran out while nbval was stopping after a cell's own timeout: that cell is the cause
        fatal = {"cell": broken["cell"], "status": broken["status"], "message": broken["message"]}
    elif killed:
        fatal = {"cell": running, "status": killed[0], "message": killed[1]}
    elif broken is not None:
        fatal = {"cell": broken["cell"], "status": broken["status"], "message": broken["message"]}
    elif unreadable is not None or (finished and not started and has_code):
        why = unreadable or "pytest ran none of its cells (see the grader log)"
        fatal = {"cell": None, "status": "setup-error", "message": f"pytest could not read the notebook: {why}"}
    elif not finished:
        sig = -returncode if returncode and returncode < 0 else None
        if limits.sandbox and returncode and returncode > 128:
            sig = returncode - 128  # bwrap reports a child killed by a signal as 128 + signal
        how = f"was killed by signal {sig}" if sig else f"exited with status {returncode}"
        fatal = {"cell": running, "status": "died", "message": f"the grading process {how}"}
    if result.oom_kills and fatal and fatal["status"] == "died":
        fatal = {**fatal, "status": "memory", "message": f"used more than {limits.memory_mb} MB of memory, files in "
                 "/tmp and /dev/shm included (the kernel's limit)"}
    return fatal


def code_cell_numbers(nb) -> dict[int, int]:
    """notebook cell index -> nbval's cell number (nbval counts code cells only)."""
    out, n = {}, 0
    for k, cell in enumerate(nb.cells):
        if cell.cell_type == "code":
            out[k] = n
            n += 1
    return out
