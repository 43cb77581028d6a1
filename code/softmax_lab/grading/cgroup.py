"""Limits the kernel enforces on one sandbox: a cgroup of its own for memory, tasks and CPU, on cgroup v2 or v1.

    group = cgroup.create(memory_mb=8192, tasks=512, cpus=2)   # None when cgroups cannot be used here
    cmd = cgroup.enter(group, bwrap_cmd)                       # the sandbox starts inside the group
    ... run ...
    group.close()                                              # every task in it killed, the group removed

* memory: everything the sandbox's processes use, the files they keep in its tmpfs folders (``/tmp``,
  ``/dev/shm``) included, and no swap; past the limit the kernel's OOM killer stops the largest process;
* tasks: processes and threads together (a fork or thread bomb gets EAGAIN);
* CPU: a quota of ``cpus`` CPUs, and the same weight as every other sandbox, so a submission that spins gets
  its share and no more.

cgroup v2 (most Linux machines today) needs a delegated subtree: run as root, or inside
``systemd-run --user --scope -p Delegate=yes``. cgroup v1 needs writable memory, pids and cpu hierarchies (root).
``why_unavailable()`` says what is missing; the grader then refuses unless told ``--unsafe-no-cgroup``.
"""
from __future__ import annotations

import errno
import itertools
import os
import signal
import threading
import time
from dataclasses import dataclass
from pathlib import Path

PREFIX = "softmax-lab"
_COUNTER = itertools.count()
_LOCK = threading.Lock()
_BACKEND: dict = {}


def _mounts() -> list[tuple[str, str, str, list[str]]]:
    """(mount point, root, fs type, super options) of every cgroup mount."""
    out = []
    try:
        text = Path("/proc/self/mountinfo").read_text()
    except OSError:
        return out
    for line in text.splitlines():
        left, _, right = line.partition(" - ")
        fields, rest = left.split(), right.split()
        if len(fields) >= 5 and len(rest) >= 3 and rest[0] in ("cgroup", "cgroup2"):
            out.append((fields[4].replace("\\040", " "), fields[3], rest[0], rest[2].split(",")))
    return out


def _own_paths() -> dict[str, str]:
    """controller (or '' for v2) -> this process's cgroup path, from /proc/self/cgroup."""
    out = {}
    try:
        text = Path("/proc/self/cgroup").read_text()
    except OSError:
        return out
    for line in text.splitlines():
        parts = line.split(":", 2)
        if len(parts) == 3:
            for c in (parts[1].split(",") if parts[1] else [""]):
                out[c] = parts[2]
    return out


def _join(mount: str, root: str, path: str) -> Path:
    if root != "/" and (path == root or path.startswith(root.rstrip("/") + "/")):
        path = path[len(root):]
    return Path(mount) / path.lstrip("/")


def _write(path: Path, value: str) -> None:
    with open(path, "w") as f:
        f.write(value)


def _v1() -> tuple[dict[str, Path] | None, str]:
    own = _own_paths()
    found = {}
    for mount, root, fstype, opts in _mounts():
        if fstype != "cgroup":
            continue
        for c in ("memory", "pids", "cpu"):
            if c in opts and c not in found and c in own:
                found[c] = _join(mount, root, own[c])
    missing = [c for c in ("memory", "pids", "cpu") if c not in found]
    if missing:
        return None, f"no cgroup v1 hierarchy for {', '.join(missing)}"
    for c, base in found.items():
        if not os.access(base, os.W_OK):
            return None, f"cgroup v1 {c} hierarchy {base} is not writable (run as root)"
    return found, ""


def _v2() -> tuple[Path | None, str]:
    own = _own_paths().get("")
    mount = next(((m, r) for m, r, t, _ in _mounts() if t == "cgroup2"), None)
    if own is None or mount is None:
        return None, "no cgroup v2 mount"
    base = _join(mount[0], mount[1], own)
    try:
        controllers = (base / "cgroup.controllers").read_text().split()
    except OSError:
        return None, f"cannot read {base}/cgroup.controllers"
    if not {"memory", "pids"} <= set(controllers):
        return None, (f"the memory and pids controllers are not delegated to {base} "
                      f"(it has: {' '.join(controllers) or 'none'})")
    if not os.access(base, os.W_OK):
        return None, (f"{base} is not writable: run the grader as root or in a delegated scope "
                      "(systemd-run --user --scope -p Delegate=yes softmax-lab grade ...)")
    want = [c for c in ("memory", "pids", "cpu") if c in controllers]
    enabled = set((base / "cgroup.subtree_control").read_text().split())
    if not set(want) <= enabled:
        try:
            _write(base / "cgroup.subtree_control", " ".join(f"+{c}" for c in want))
        except OSError as err:
            if err.errno != errno.EBUSY:
                return None, f"cannot enable controllers in {base}: {err.strerror}"
            # v2 allows controllers only below groups without processes: move the grader into a leaf of its own.
            leaf = base / f"{PREFIX}-grader-{os.getpid()}"
            try:
                leaf.mkdir(exist_ok=True)
                for pid in (base / "cgroup.procs").read_text().split():
                    try:
                        _write(leaf / "cgroup.procs", pid)
                    except OSError:
                        pass
                _write(base / "cgroup.subtree_control", " ".join(f"+{c}" for c in want))
            except OSError as err2:
                return None, f"cannot enable controllers in {base}: {err2.strerror} (other processes share its cgroup)"
    return base, ""


def backend() -> tuple[str, object, str]:
    """('v2', base) or ('v1', {controller: base}) or ('', None, why not); decided once per process."""
    with _LOCK:
        if not _BACKEND:
            if os.environ.get("SOFTMAX_LAB_NO_CGROUP"):  # tests: a machine without delegation
                _BACKEND["v"] = ("", None, "cgroups switched off (SOFTMAX_LAB_NO_CGROUP)")
            else:
                base, why2 = _v2()
                if base is not None:
                    _BACKEND["v"] = ("v2", base, "")
                else:
                    bases, why1 = _v1()
                    _BACKEND["v"] = ("v1", bases, "") if bases else ("", None, f"{why2}; {why1}")
        return _BACKEND["v"]


def why_unavailable() -> str:
    """'' when per-sandbox cgroups work here, else why not."""
    return backend()[2]


WITHOUT = ("without cgroups these limits still hold: the time limits, the sandbox's size-capped tmpfs folders, the "
           "grader's memory watchdog (resident memory of the sandbox's processes, polled twice a second) and, on "
           "the CPU, a data-size rlimit; these do NOT: a hard memory limit that counts files in /tmp and /dev/shm, "
           "a cap on processes and threads, a fair share of the CPU between submissions")


@dataclass
class Group:
    """One sandbox's cgroup(s): v2 one folder, v1 one per controller."""
    version: str
    dirs: list[Path]
    memory: Path | None = None  # the folder with the memory controller's files

    def procs_files(self) -> list[str]:
        return [str(d / "cgroup.procs") for d in self.dirs]

    def oom_kills(self) -> int:
        """How many processes the kernel killed for memory in this group."""
        try:
            name = "memory.events" if self.version == "v2" else "memory.oom_control"
            for line in (self.memory / name).read_text().splitlines() if self.memory else []:
                k, _, v = line.partition(" ")
                if k == "oom_kill":
                    return int(v)
            return 0
        except (OSError, ValueError):
            return 0

    def pids(self) -> list[int]:
        out = set()
        for d in self.dirs:
            try:
                out.update(int(p) for p in (d / "cgroup.procs").read_text().split())
            except (OSError, ValueError):
                pass
        return sorted(out)

    def kill(self) -> None:
        """Kill every task in the group (repeatedly: a fork bomb may still be forking)."""
        if self.version == "v2" and (self.dirs[0] / "cgroup.kill").exists():
            try:
                _write(self.dirs[0] / "cgroup.kill", "1")
            except OSError:
                pass
        for _ in range(50):
            pids = self.pids()
            if not pids:
                return
            for p in pids:
                try:
                    os.kill(p, signal.SIGKILL)
                except OSError:
                    pass
            time.sleep(0.02)

    def close(self) -> None:
        """Kill what is left and remove the group's folders."""
        self.kill()
        for d in self.dirs:
            for _ in range(50):
                try:
                    d.rmdir()
                    break
                except FileNotFoundError:
                    break
                except OSError:
                    time.sleep(0.05)


def create(memory_mb: int, tasks: int, cpus: float) -> Group | None:
    """A fresh cgroup with these limits (0: that limit off), or None when cgroups are not available here."""
    version, base, _ = backend()
    if not version:
        return None
    name = f"{PREFIX}-{os.getpid()}-{next(_COUNTER)}"
    period = 100_000
    if version == "v2":
        d = base / name
        d.mkdir()
        group = Group("v2", [d], d)
        try:
            if memory_mb > 0:
                _write(d / "memory.max", str(memory_mb * 2**20))
                if (d / "memory.swap.max").exists():
                    _write(d / "memory.swap.max", "0")
            if tasks > 0:
                _write(d / "pids.max", str(tasks))
            if cpus > 0 and (d / "cpu.max").exists():
                _write(d / "cpu.max", f"{int(cpus * period)} {period}")
        except OSError:
            group.close()
            raise
        return group
    dirs = {c: base[c] / name for c in ("memory", "pids", "cpu")}
    group = Group("v1", [], dirs["memory"])
    try:
        for d in dirs.values():
            d.mkdir()
            group.dirs.append(d)
        mem = dirs["memory"]
        if memory_mb > 0:
            _write(mem / "memory.limit_in_bytes", str(memory_mb * 2**20))
            if (mem / "memory.memsw.limit_in_bytes").exists():
                _write(mem / "memory.memsw.limit_in_bytes", str(memory_mb * 2**20))
            elif (mem / "memory.swappiness").exists():
                try:
                    _write(mem / "memory.swappiness", "0")
                except OSError:
                    pass
        if tasks > 0:
            _write(dirs["pids"] / "pids.max", str(tasks))
        if cpus > 0:
            _write(dirs["cpu"] / "cpu.cfs_period_us", str(period))
            _write(dirs["cpu"] / "cpu.cfs_quota_us", str(int(cpus * period)))
    except OSError:
        group.close()
        raise
    return group


# The sandbox enters its group before it starts (a moved process's children would escape: it may fork at once).
_ENTER = 'for f; do shift; [ "$f" = -- ] && break; echo $$ > "$f" || exit 125; done; exec "$@"'


def enter(group: Group | None, cmd: list[str]) -> list[str]:
    """``cmd`` started inside ``group`` (unchanged when there is no group)."""
    if group is None:
        return cmd
    return ["/bin/sh", "-c", _ENTER, "sh", *group.procs_files(), "--", *cmd]


def clean_stale() -> None:
    """Remove empty groups left by graders that no longer run (killed with kill -9)."""
    version, base, _ = backend()
    if not version:
        return
    bases = [base] if version == "v2" else list(base.values())
    for b in bases:
        try:
            entries = list(b.iterdir())
        except OSError:
            continue
        for d in entries:
            rest = d.name[len(PREFIX) + 1:] if d.name.startswith(PREFIX + "-") else ""
            pid = rest.split("-", 1)[0]
            if d.is_dir() and pid.isdigit() and int(pid) != os.getpid() and not Path(f"/proc/{pid}").exists():
                g = Group(version, [d])
                g.close()
