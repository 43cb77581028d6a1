"""One process the grader starts for a run or a judge: its limits, its start in a cgroup, its tree of processes.

The grader watches each such process from outside and kills its whole tree (the kernel leaves the process's
session, so its members are remembered as they appear); ``STOP`` is set on Ctrl-C and every watcher stops.
"""
from __future__ import annotations

import os
import signal
import subprocess
import threading
from dataclasses import dataclass
from pathlib import Path

from . import cgroup

try:  # psutil comes with IPython; without it we fall back to process groups and no RSS watchdog
    import psutil
except ImportError:  # pragma: no cover
    psutil = None

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

    def data_limit(self) -> bool:
        """Whether the memory cap is also a data-size limit (``ulimit -d``): not where a GPU may be used."""
        return (not gpu_visible()) if self.rlimit_as is None else self.rlimit_as


def gpu_visible() -> bool:
    """A GPU may be used (cheap test, without importing torch): CUDA reserves far more than the cap."""
    if os.environ.get("SOFTMAX_LAB_DEVICE", "").strip().lower() in ("cpu", "interpreter"):
        return False
    return any(Path(p).exists() for p in ("/dev/nvidiactl", "/dev/nvidia0", "/dev/dxg"))


def start(cmd: list[str], limits: Limits, *, env: dict, cwd: str, out: int, err: int, pass_fds: tuple[int, ...] = (),
          read_ends: tuple[int, ...] = ()) -> Child:
    """Start ``cmd`` in its own session and, unless ``limits.cgroup`` is off, in a cgroup of its own. The write
    ends ``out``, ``err`` and ``pass_fds`` are the child's now and are closed here; ``read_ends`` too when it
    cannot start."""
    group = None
    try:
        group = cgroup.create(limits.memory_mb, limits.tasks, limits.cpus) if limits.cgroup else None
        proc = subprocess.Popen(cgroup.enter(group, cmd), cwd=cwd, env=env, stdin=subprocess.DEVNULL, stdout=out,
                                stderr=err, pass_fds=pass_fds, start_new_session=True)
    except BaseException:
        for fd in read_ends:
            os.close(fd)
        if group is not None:
            group.close()
        raise
    finally:
        for fd in {out, err, *pass_fds}:
            os.close(fd)
    return Child(proc, group)


class Child:
    """A process the grader started, its cgroup (or None) and the tree of processes it started."""

    def __init__(self, proc: subprocess.Popen, group):
        self.proc, self.group, self.tree = proc, group, Tree(proc.pid)

    def kill(self) -> None:
        """Kill the whole tree now and reap the process."""
        self.tree.kill()
        self.proc.wait()

    def finish(self) -> int:
        """Kill whatever is left of it, its cgroup too; return how many processes the kernel killed for memory."""
        if self.proc.poll() is None:
            self.kill()
        self.proc.wait()
        self.tree.kill(group=False)  # the kernel (own session) and anything it started, if still around
        if self.group is None:
            return 0
        oom = self.group.oom_kills()
        self.group.close()  # anything left in the cgroup dies with it
        return oom


def set_limits(pid: int, memory_mb: int, data_limit: bool) -> None:
    """Set the child's limits right after it starts (children inherit them; the kernel starts much later).
    prlimit instead of preexec_fn: preexec_fn is unsafe in a program with threads (--jobs)."""
    import resource

    try:
        resource.prlimit(pid, resource.RLIMIT_CORE, (0, 0))  # a segfault leaves no core file behind
        if data_limit and memory_mb > 0:
            cap = memory_mb * 2**20
            resource.prlimit(pid, resource.RLIMIT_DATA, (cap, cap))
    except (OSError, AttributeError, ValueError):  # not Linux, or the child is already gone
        pass


class Tree:
    """The processes started for one run, remembered as they appear (the kernel leaves our session)."""

    def __init__(self, pid: int):
        self.pid = pid
        self.seen: dict[int, object] = {}
        try:
            self.root = psutil.Process(pid) if psutil else None
        except Exception:
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
            except Exception:
                pass
