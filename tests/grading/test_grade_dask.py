"""`softmax-lab grade --dask ADDRESS` on a real Dask cluster (a LocalCluster of two worker processes, one
notebook each at a time): a worker killed mid-notebook costs a retry, not a row; a scheduler that does not answer, or
goes away mid-class, is one line and loses no row. tests/test_grade_hostile.py grades its hostile class on such a
cluster and compares the rows with its local run's.

The workers are separate processes, as on a cluster: they import the package, sandbox each notebook with bubblewrap
and cgroups themselves, and learn the fixture chapter's judges from a preload script (a course's own judges come
with its package).
"""
from __future__ import annotations

import contextlib
import io
import os
import re
import signal
import subprocess
import sys
import time
import tomllib
import types
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).parent))
from test_grade import (DOUBLE_OK, FAST, FIXTURES, ROOT, _sandbox_and_fixture_judges,  # noqa: F401 - a fixture
                        _with_registry, grade_main, pasted, read_rows, save, set_exercise)
from test_install import LOCKS, lock_pins

from softmax_lab.grading.rows import GRADER_TROUBLE

from distributed import Client, LocalCluster

NB = "90_grading_fixture.ipynb"
MEMORY = ["--memory-mb", "3072"]
PRELOAD = f"""\
import sys
sys.path.insert(0, {str(FIXTURES.parent)!r})
import judges
from softmax_lab.grading import judge
judge.REGISTRY.update(judges.JUDGES)
"""
# Differ between any two runs, local ones too: a pipe's inode number, the threads a cgroup let start, the sizes the
# judge drew from each notebook's fresh seed.
VARYING = [(re.compile(r"pipe:\[\d+\]"), "pipe:[N]"), (re.compile(r"threads started: \d+"), "threads started: N"),
           (re.compile(r"(FAIL  .*?)\b\d+( integers|:)"), r"\1N\2"), (re.compile(r"(FAIL  .*? of )\d+"), r"\1N")]


def _preload(tmp: Path) -> str:
    path = tmp / "fixture_judges_preload.py"
    path.write_text(PRELOAD, encoding="utf-8")
    return str(path)


@pytest.fixture(scope="module")
def dask_cluster(tmp_path_factory):
    """Two worker processes, one notebook each at a time (tests/test_grade_hostile.py grades its class here too)."""
    from softmax_lab.grading import cgroup

    if cgroup.why_unavailable():
        pytest.skip(f"no cgroups here: {cgroup.why_unavailable()}")
    # allowed_failures=1: a notebook is tried again once after its worker died, and gets a row the second time.
    # The workers are spawned processes, which re-run this process's __main__ from its file; in a pytest-xdist
    # worker that may be whatever module an earlier test ran as a script, so they see a __main__ without a file,
    # as under `dask worker`.
    with pytest.MonkeyPatch.context() as mp:
        mp.setitem(sys.modules, "__main__", types.ModuleType("__main__"))
        with LocalCluster(n_workers=2, threads_per_worker=1, processes=True, dashboard_address=None,
                          preload=[_preload(tmp_path_factory.mktemp("preload"))], silence_logs=40,
                          scheduler_kwargs={"allowed_failures": 1}) as lc:
            yield lc


def grade_cli(argv, timeout=300, **popen) -> subprocess.Popen | subprocess.CompletedProcess:
    """`softmax-lab grade ARGV` in its own process, as an instructor runs it."""
    cmd = [sys.executable, "-m", "softmax_lab.cli", "grade", *_with_registry(argv)]
    env = dict(os.environ, PYTHONPATH=str(ROOT / "code"))
    if popen:
        return subprocess.Popen(cmd, env=env, text=True, **popen)
    return subprocess.run(cmd, env=env, capture_output=True, text=True, timeout=timeout)


def comparable(rows: list[dict]) -> list[tuple]:
    """Rows sorted, with what differs between any two runs masked."""
    out = []
    for r in rows:
        msg = r["message"]
        for pattern, same in VARYING:
            msg = pattern.sub(same, msg)
        out.append(tuple(msg if k == "message" else v for k, v in r.items()))
    return sorted(out)


def _worker_running(client: Client, prefix: str, proc: subprocess.Popen, patience: float = 900) -> str:
    """The address of the worker that runs a task whose key starts with ``prefix``: waited for as long as the
    grading process ``proc`` is alive (on a loaded machine its start, the workers' check and the first sandbox took
    more than two minutes); ``patience`` is only a backstop against a hang."""
    deadline = time.monotonic() + patience
    while proc.poll() is None and time.monotonic() < deadline:
        for worker, keys in client.processing().items():
            if any(str(k).startswith(prefix) for k in keys):
                return worker
        time.sleep(0.2)
    ended = ""
    if proc.poll() is not None:  # say why: the grader's own last lines
        _, err = proc.communicate()
        ended = f" (the grader ended with {proc.returncode}: {(err or '')[-1500:]})"
    raise AssertionError(f"no worker started {prefix}{ended}")


def test_a_worker_killed_mid_notebook_costs_a_retry_not_a_row(dask_cluster, tmp_path):
    slow = set_exercise(pasted(), "fx-double", "import time\ntime.sleep(6)\n" + DOUBLE_OK)
    save(slow, tmp_path / "s" / "slow" / NB)
    out = tmp_path / "g.csv"
    proc = grade_cli([tmp_path / "s", "--out", out, "--solutions", FIXTURES, "--dask", dask_cluster.scheduler_address,
                      *MEMORY, *FAST], stdout=subprocess.PIPE, stderr=subprocess.PIPE)
    with Client(dask_cluster.scheduler_address, set_as_default=False) as client:
        worker = _worker_running(client, "grade-slow/", proc)
        time.sleep(3)  # inside the notebook's run: its sandbox is up, the exercise sleeps
        pid = client.run(os.getpid, workers=[worker])[worker]
        os.kill(pid, signal.SIGKILL)
        stdout, stderr = proc.communicate(timeout=900)
        assert worker not in client.scheduler_info(n_workers=-1)["workers"]  # it died mid-notebook (its nanny
        #                                                                       started a new one)
    assert proc.returncode == 0, stderr[-3000:]
    rows = read_rows(out)
    assert sorted((r["exercise"], r["status"], r["points"]) for r in rows) == [
        ("fx-double", "passed", "2"), ("fx-kernel", "passed", "3")], rows
    assert "slow/" in stdout and "Traceback" not in stderr, stderr


def test_a_notebook_whose_workers_keep_dying_gets_a_row_graded_again_next_time(dask_cluster, tmp_path):
    doomed = set_exercise(pasted(), "fx-double", "import time\ntime.sleep(6)\n" + DOUBLE_OK)
    save(doomed, tmp_path / "s" / "doomed" / NB)
    out = tmp_path / "g.csv"
    proc = grade_cli([tmp_path / "s", "--out", out, "--solutions", FIXTURES, "--dask", dask_cluster.scheduler_address,
                      *MEMORY, *FAST], stdout=subprocess.PIPE, stderr=subprocess.PIPE)
    with Client(dask_cluster.scheduler_address, set_as_default=False) as client:
        for _ in range(2):  # its first worker, then the one it was retried on
            worker = _worker_running(client, "grade-doomed/", proc)
            time.sleep(2)
            os.kill(client.run(os.getpid, workers=[worker])[worker], signal.SIGKILL)
            while worker in client.scheduler_info(n_workers=-1)["workers"]:
                time.sleep(0.1)
        stdout, stderr = proc.communicate(timeout=900)
    assert proc.returncode == 1, stderr[-3000:]  # a row the grader could not make: not a finished run
    assert "run the same command again to grade them" in stderr.strip().splitlines()[-1], stderr[-2000:]
    [row] = read_rows(out)
    assert row["status"] == "error" and row["points"] == "0", row
    assert row["message"].startswith(GRADER_TROUBLE) and "grading cluster failed" in row["message"], row
    assert "127.0.0.1" not in row["message"]  # the details (worker addresses) go to the instructor only
    assert "the cluster could not grade doomed/" in stderr and "kept dying" in stderr, stderr[-2000:]


def test_a_scheduler_that_does_not_answer_is_one_line(tmp_path):
    save(pasted(), tmp_path / "s" / "a" / NB)
    out = tmp_path / "g.csv"
    proc = grade_cli([tmp_path / "s", "--out", out, "--solutions", FIXTURES, "--dask", "tcp://127.0.0.1:9", *FAST],
                     timeout=60)
    lines = proc.stderr.strip().splitlines()
    assert proc.returncode == 1 and "Traceback" not in proc.stderr, proc.stderr
    assert lines[-1].startswith("softmax-lab grade: no Dask scheduler answers at tcp://127.0.0.1:9"), lines
    assert [ln for ln in lines if "notebook(s)" not in ln] == lines[-1:], lines  # only the status line before
    assert not out.exists() and not list(tmp_path.glob("g.*")) and not (tmp_path / "g.feedback").exists(), \
        "a start that failed leaves no file (it says nothing changed)"


def test_the_cluster_extra_is_locked_for_the_tests():
    extras = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]["optional-dependencies"]
    test_lock = lock_pins(LOCKS["test"])
    for req in extras["cluster"]:
        name, version = req.split("==")
        assert req in extras["test"] and test_lock.get(name) == version, (req, test_lock.get(name))


@pytest.fixture
def own_cluster(tmp_path_factory):
    """A cluster of its own for the test that closes its scheduler: two fresh workers, not the module cluster's
    nanny-restarted ones (on a loaded machine those took more than two minutes to come back), and the module's
    cluster stays whole whatever order the tests run in."""
    from softmax_lab.grading import cgroup

    if cgroup.why_unavailable():
        pytest.skip(f"no cgroups here: {cgroup.why_unavailable()}")
    with pytest.MonkeyPatch.context() as mp:
        mp.setitem(sys.modules, "__main__", types.ModuleType("__main__"))
        with LocalCluster(n_workers=2, threads_per_worker=1, processes=True, dashboard_address=None,
                          preload=[_preload(tmp_path_factory.mktemp("preload"))], silence_logs=40) as lc:
            wait_for_workers(lc, 2)
            yield lc


def wait_for_workers(cluster, n: int, patience: float = 900) -> None:
    """Until ``n`` workers are connected to ``cluster``'s scheduler: the real condition, checked every few seconds
    for as long as a loaded machine needs to start them (``patience`` is only a backstop against a hang)."""
    from distributed.core import Status

    deadline = time.monotonic() + patience
    with Client(cluster.scheduler_address, set_as_default=False) as client:
        while len(client.scheduler_info(n_workers=-1)["workers"]) < n:
            starting = [w for w in cluster.workers.values() if getattr(w, "status", None) not in (Status.closed,
                                                                                                   Status.failed)]
            assert len(starting) >= n, f"only {len(starting)} worker processes left of the {n} the test needs"
            assert time.monotonic() < deadline, f"{n} workers did not connect in {patience:g} s"
            time.sleep(2)


def test_a_scheduler_that_goes_away_mid_class_loses_no_row(own_cluster, tmp_path):
    """The scheduler is closed while the class is being graded: every row kept, none twice, the rerun grades the
    rest."""
    for who in ("a", "b"):
        save(pasted(), tmp_path / "s" / who / NB)
    slow = set_exercise(pasted(), "fx-double", "import time\ntime.sleep(2)\n" + DOUBLE_OK)
    save(slow, tmp_path / "s" / "slow" / NB)
    out = tmp_path / "g.csv"
    argv = [tmp_path / "s", "--out", out, "--solutions", FIXTURES, *MEMORY, *FAST]
    proc = grade_cli(argv + ["--dask", own_cluster.scheduler_address], stdout=subprocess.PIPE, stderr=subprocess.PIPE)
    backstop = time.monotonic() + 900  # only against a hang: the condition is the first row, however long it takes
    while not (out.exists() and read_rows(out)) and proc.poll() is None and time.monotonic() < backstop:
        time.sleep(0.2)
    own_cluster.sync(own_cluster.scheduler.close)  # the scheduler alone: its workers are left behind
    _, stderr = proc.communicate(timeout=600)
    lines = [ln for ln in stderr.splitlines() if ln.strip() and "notebook(s)" not in ln and "Dask cluster at" not in ln]
    assert proc.returncode == 1 and len(lines) == 1 and "Traceback" not in stderr, stderr
    assert "went away: the gradebook holds every notebook graded so far; run the same command again" in lines[0]
    graded = {r["submission"] for r in read_rows(out)}
    # mid-class: some notebooks graded, not all (which ones depends on the load: the workers race), each row once
    assert 0 < len(graded) < 3 and len(read_rows(out)) == 2 * len(graded), read_rows(out)
    # The same command again (here on this machine: the cluster is gone) grades the rest, nothing twice.
    with contextlib.redirect_stdout(io.StringIO()), contextlib.redirect_stderr(io.StringIO()) as err:
        assert grade_main(argv) == 0
    assert f"{len(graded)} already graded" in err.getvalue(), err.getvalue()
    rows = read_rows(out)
    assert sorted((r["submission"].split("/")[0], r["exercise"], r["status"]) for r in rows) == [
        (who, ex, "passed") for who in ("a", "b", "slow") for ex in ("fx-double", "fx-kernel")], rows


def test_a_worker_with_another_grader_is_refused_at_every_notebook():
    # The first check asks the workers present at the start; a worker that joins later is checked by each task.
    from types import SimpleNamespace

    from softmax_lab.grading import cluster

    opts = SimpleNamespace(limits=SimpleNamespace(sandbox=False, cgroup=False))
    with pytest.raises(cluster.WorkerUnfit, match="another grader") as refused:
        cluster.grade_on_worker(None, "a/x.ipynb", "x.ipynb", b"{}", "a", {}, opts, "not-this-grader")
    # a worker started before the checkout changed: the line says to restart the workers, not only to install
    assert "restart the workers" in str(refused.value) and "fingerprint" in str(refused.value)


def test_an_unfit_late_worker_stops_the_run_with_one_line():
    # In the instructor's process, a task refused by its worker ends the run (one line, rows kept), not a row.
    import concurrent.futures
    import threading
    from types import SimpleNamespace

    from softmax_lab.grading import cluster

    class Refused:
        key = "task-1"

        def result(self, timeout=None):
            raise cluster.WorkerUnfit("bwrap is not installed")

    pool = object.__new__(cluster.GradingOnDask)
    pool.address, pool._closed, pool._lock = "tcp://10.0.0.5:8786", False, threading.Lock()
    done = concurrent.futures.Future()
    pool._pending = {"task-1": done}
    pool._finished(Refused(), SimpleNamespace(name="a/x.ipynb"), {})
    err = done.exception()
    assert isinstance(err, cluster.ClusterError) and "\n" not in str(err)
    assert "cannot grade like this machine: bwrap is not installed" in str(err) and "run the same command" in str(err)


def test_an_unfit_worker_is_named_and_its_check_runs_off_the_event_loop():
    # The workers' names (dask worker --name) are what an instructor knows them by; the check itself is a coroutine
    # that probes in a thread, so the worker's event loop (its heartbeats) never waits for it.
    import asyncio
    from types import SimpleNamespace

    from softmax_lab.grading import cluster

    assert asyncio.iscoroutinefunction(cluster.probe_off_loop)

    class Client:
        def scheduler_info(self, n_workers=-1):
            return {"workers": {"tcp://10.0.0.7:40000": {"name": "gpu-node-3", "nthreads": 2}}}

        def run(self, fn, *args, on_error="return"):
            assert fn is cluster.probe_off_loop
            return {"tcp://10.0.0.7:40000": {"problem": "bwrap is not installed", "fingerprint": "", "versions": {}}}

    pool = object.__new__(cluster.GradingOnDask)
    pool.address, pool.client = "tcp://10.0.0.5:8786", Client()
    pool.opts = SimpleNamespace(limits=SimpleNamespace(sandbox=True, cgroup=True))
    with pytest.raises(cluster.ClusterError, match=r"worker gpu-node-3 \(tcp://10.0.0.7:40000\): bwrap is not"):
        pool._check_workers()
