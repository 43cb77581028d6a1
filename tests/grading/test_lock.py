"""One writer per gradebook (and per collection folder): a second `softmax-lab grade` into the same gradebook, local
or --dask, refuses with one line naming the run that holds it and changes nothing; a lock left by a dead run on this
host is taken over with a line (grading/lock.py)."""
from __future__ import annotations

import os
import socket
import subprocess
import sys

import pytest

from conftest import GRADING_FIXTURES, GRADING_REGISTRY
from softmax_lab import cli
from softmax_lab.grading.grade import lock_path
from softmax_lab.grading.lock import Lock, LockError

HOST = socket.gethostname()


def _grade(*argv) -> int:
    return cli.main(["grade", *map(str, argv), "--solutions", str(GRADING_FIXTURES), "--registry",
                     str(GRADING_REGISTRY)])


def _snapshot(folder):
    return {p.name: p.read_bytes() for p in folder.iterdir()}


@pytest.mark.parametrize("dask", [False, True])
def test_second_grade_run_into_the_same_gradebook_is_refused(tmp_path, capsys, dask):
    subs = tmp_path / "sub"
    subs.mkdir()
    out = tmp_path / "grades" / "book.csv"
    out.parent.mkdir()
    out.write_text("learner,points\nann,3\n")  # a gradebook the other run is writing
    holder = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(60)"])
    try:
        lock_path(out).write_text(f"{holder.pid} {HOST} 2026-12-02 10:00:00\n")
        before = _snapshot(out.parent)
        extra = ["--dask", "tcp://127.0.0.1:9"] if dask else []
        rc = _grade(subs, "--out", out, "--chapter", "90", *extra)
        err = capsys.readouterr().err
        assert rc == 1
        assert err.count("\n") == 1, err
        assert f"another grade run (process {holder.pid} on {HOST}, since 2026-12-02 10:00:00)" in err
        assert str(out) in err
        assert _snapshot(out.parent) == before  # nothing written, the other run's lock kept
    finally:
        holder.kill()
        holder.wait()


def test_stale_lock_of_a_dead_run_is_taken_over_with_a_line(tmp_path, capsys):
    subs = tmp_path / "sub"
    subs.mkdir()
    out = tmp_path / "book.csv"
    dead = subprocess.Popen([sys.executable, "-c", "pass"])
    dead.wait()
    lock_path(out).write_text(f"{dead.pid} {HOST} 2026-12-02 10:00:00\n")
    rc = _grade(subs, "--out", out, "--chapter", "90")
    err = capsys.readouterr().err
    assert f"taking over {lock_path(out)}: left by process {dead.pid} on {HOST}" in err
    assert rc == 0 and out.exists() and not lock_path(out).exists()
    assert not [p for p in tmp_path.iterdir() if "lock" in p.name]  # nor an empty .takeover file


def test_lock_of_another_host_is_never_taken_over(tmp_path):
    path = tmp_path / "x.lock"
    path.write_text("1 some-other-host 2026-12-02 10:00:00\n")
    with pytest.raises(LockError, match="process 1 on some-other-host, since 2026-12-02 10:00:00"):
        with Lock(path, "another grade run", "writing x"):
            pass
    assert path.read_text().startswith("1 some-other-host")


def test_lock_is_released_and_private(tmp_path):
    path = tmp_path / "x.lock"
    with Lock(path, "another grade run", "writing x"):
        assert path.read_text().split()[:2] == [str(os.getpid()), HOST]
        assert path.stat().st_mode & 0o777 == 0o600
        with pytest.raises(LockError, match=f"process {os.getpid()} on {HOST}"):
            with Lock(path, "another grade run", "writing x"):
                pass
        assert path.exists()  # the refused one did not remove the holder's lock
    assert not path.exists()


def test_two_runs_finding_the_same_dead_lock_at_once_never_both_hold_it(tmp_path):
    path = tmp_path / "book.csv.lock"
    dead = subprocess.Popen([sys.executable, "-c", "pass"])
    dead.wait()
    path.write_text(f"{dead.pid} {HOST} 2026-12-02 10:00:00\n")
    script = (f"import sys, time\nfrom softmax_lab.grading.lock import Lock, LockError\n"
              f"try:\n    with Lock({str(path)!r}, 'another grade run', 'writing x'):\n"
              f"        print('held', flush=True); time.sleep(3)\nexcept LockError:\n    print('refused')\n")
    env = dict(os.environ, PYTHONPATH=os.pathsep.join(sys.path))
    runs = [subprocess.Popen([sys.executable, "-c", script], stdout=subprocess.PIPE, stderr=subprocess.DEVNULL,
                             text=True, env=env) for _ in range(4)]
    said = sorted(r.communicate(timeout=60)[0].strip() for r in runs)
    assert said == ["held", "refused", "refused", "refused"], said
    assert not path.exists()
    assert os.listdir(tmp_path) == []  # no .takeover file either


def test_sigterm_while_held_removes_the_lock(tmp_path):
    path = tmp_path / "book.csv.lock"
    script = (f"import time\nfrom softmax_lab.grading.lock import Lock\n"
              f"try:\n    with Lock({str(path)!r}, 'another grade run', 'writing x'):\n"
              f"        print('held', flush=True); time.sleep(60)\nexcept KeyboardInterrupt:\n    print('stopped')\n")
    env = dict(os.environ, PYTHONPATH=os.pathsep.join(sys.path))
    run = subprocess.Popen([sys.executable, "-c", script], stdout=subprocess.PIPE, text=True, env=env)
    assert run.stdout.readline().strip() == "held" and path.exists()
    run.terminate()
    assert run.communicate(timeout=30)[0].strip() == "stopped"
    assert os.listdir(tmp_path) == []


def test_a_stop_while_the_class_is_read_is_one_line(tmp_path, capsys, monkeypatch):
    """SIGTERM (or Ctrl-C) after the lock is taken but before grading starts (the gradebook opened, the copy check
    running: seconds on a large class) printed a traceback; now one line, exit 130, no lock left, nothing written."""
    from softmax_lab.grading import grade

    def stopped(*a, **k):
        raise KeyboardInterrupt

    monkeypatch.setattr(grade, "open_gradebook", stopped)
    subs = tmp_path / "sub"
    subs.mkdir()
    out = tmp_path / "grades" / "book.csv"
    assert _grade(subs, "--out", out, "--chapter", "90") == 130
    err = capsys.readouterr().err
    assert err == "interrupted before grading anything: nothing changed\n", err
    assert list(out.parent.iterdir()) == []
