"""A local-process spawner that holds each learner's server (and its kernels) to the hub's CPU and memory limits.

JupyterHub's LocalProcessSpawner only passes ``mem_limit``/``cpu_limit`` on as environment variables; this one puts
the server into its own cgroup before it runs a line of the learner's code, on cgroup v2 (most machines today) or
v1: ``memory.max``/``memory.limit_in_bytes``, ``cpu.max``/``cpu.cfs_quota_us`` and a cap on processes. The hub must
run as root (it already must, to start servers as the learners' own accounts). SystemdSpawner (The Littlest
JupyterHub) and KubeSpawner (Zero to JupyterHub) enforce the same limits their own way.
"""
from __future__ import annotations

import os
from pathlib import Path

from jupyterhub.spawner import LocalProcessSpawner
from traitlets import Integer, Unicode

CGROUPS = Path("/sys/fs/cgroup")
PERIOD_US = 100_000


def cgroup_v2() -> bool:
    return (CGROUPS / "cgroup.controllers").exists()


def _write(path: Path, value: str) -> None:
    path.write_text(value)


def make_groups(name: str, mem_bytes: int | None, cpus: float | None, pids: int) -> list[Path]:
    """Create (or reset) the learner's cgroup(s) with the limits; returns the folders to join."""
    if cgroup_v2():
        top = CGROUPS / "softmax-lab"
        top.mkdir(exist_ok=True)
        for parent in (CGROUPS, top):  # let the groups below use the memory, cpu and pids controllers
            _write(parent / "cgroup.subtree_control", "+memory +cpu +pids")
        group = top / name
        group.mkdir(exist_ok=True)
        _write(group / "memory.max", str(mem_bytes) if mem_bytes else "max")
        _write(group / "cpu.max", f"{int(cpus * PERIOD_US)} {PERIOD_US}" if cpus else f"max {PERIOD_US}")
        _write(group / "pids.max", str(pids))
        return [group]
    groups = []
    for controller, limits in (("memory", {"memory.limit_in_bytes": mem_bytes or -1}),
                               ("cpu", {"cpu.cfs_period_us": PERIOD_US,
                                        "cpu.cfs_quota_us": int(cpus * PERIOD_US) if cpus else -1}),
                               ("pids", {"pids.max": pids})):
        group = CGROUPS / controller / "softmax-lab" / name
        group.mkdir(parents=True, exist_ok=True)
        for key, value in limits.items():
            _write(group / key, str(value))
        groups.append(group)
    return groups


class CgroupSpawner(LocalProcessSpawner):
    """LocalProcessSpawner + a cgroup per learner with ``mem_limit``, ``cpu_limit`` and ``pids_limit``."""

    pids_limit = Integer(1024, config=True, help="most processes and threads a learner's server may hold")
    cgroup_name = Unicode("{username}", config=True, help="the learner's cgroup under softmax-lab/")

    def make_preexec_fn(self, name):
        switch_user = super().make_preexec_fn(name)
        try:
            groups = make_groups(self.format_string(self.cgroup_name), self.mem_limit, self.cpu_limit, self.pids_limit)
        except OSError as err:
            raise RuntimeError(f"cannot hold {name}'s server to its limits ({err}): run the hub as root on a machine "
                               "whose cgroups it may write, or use SystemdSpawner (docs/hub.md)") from err

        def preexec():  # in the new process, still root: join the groups, then become the learner
            for group in groups:
                with open(group / "cgroup.procs", "w") as f:
                    f.write(str(os.getpid()))
            switch_user()

        return preexec
