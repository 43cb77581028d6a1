"""One writer at a time: the lock file `softmax-lab grade` takes beside its gradebook and `collect` takes in OUT.

The lock is a file made with O_EXCL holding ``<pid> <host> <date> <time>`` of the run that holds it. A second run
finds it and refuses with one line naming that run, changing nothing. A lock left by a run that died (its pid no
longer runs on this host: kill -9, a power cut) is taken over, with a line saying so. A lock from another host is
never taken over: that run may still be going; the line says which file to remove if it is gone.

While the lock is held, SIGTERM and SIGHUP (``kill``, a batch system's time limit, a closed terminal) stop the run as
Ctrl-C does: it stops its sandboxes, keeps what it has written and removes the lock on its way out.
"""
from __future__ import annotations

import os
import signal
import socket
import sys
import threading
import time
from pathlib import Path

from .sandbox import _alive


class LockError(Exception):
    """Another run holds the lock (the message names it); nothing was written."""


def holder(path: Path) -> tuple[str, str, str]:
    """(pid, host, since) written in the lock file at ``path`` ('?' for what cannot be read)."""
    try:
        words = path.read_text(errors="replace").split()
    except OSError:
        words = []
    pid, host, *since = (words + ["?", "?"])[:4]
    return pid, host, " ".join(w for w in since if w != "?") or "?"


class Lock:
    """``with Lock(path, what, doing):`` hold ``path`` while writing; ``what`` names the run for messages
    ("another collection", "another grade run"), ``doing`` what it is doing ("writing into OUT/")."""

    def __init__(self, path: Path, what: str, doing: str, program: str = "softmax-lab"):
        self.path, self.what, self.doing, self.program = Path(path), what, doing, program
        self.held = False
        self._handlers: dict = {}

    def __enter__(self):
        me = f"{os.getpid()} {socket.gethostname()} {time.strftime('%Y-%m-%d %H:%M:%S')}"
        for _ in range(3):
            try:
                fd = os.open(self.path, os.O_CREAT | os.O_EXCL | os.O_WRONLY, 0o600)
            except FileExistsError:
                pid, host, since = holder(self.path)
                if host == socket.gethostname() and pid.isdigit() and not _alive(int(pid)):
                    self._take_over(pid, host, since)
                    continue
                if not os.path.lexists(self.path):  # it finished between the open and the read: try again
                    continue
                raise LockError(f"{self.what} (process {pid} on {host}, since {since}) is {self.doing}: wait for it "
                                f"to finish, or remove {self.path} if it is gone") from None
            with os.fdopen(fd, "w") as f:
                f.write(me + "\n")
            self.held = True
            self._stop_on_term()
            return self
        raise LockError(f"cannot take {self.path}")

    def _take_over(self, pid: str, host: str, since: str) -> None:
        """Remove a dead run's lock. Two runs finding it at once take turns (a flock on a hidden file beside it), and
        each reads it again first, so the second never removes the lock the first has just made."""
        import fcntl

        guard = self.path.with_name(f".{self.path.name}.takeover")
        while True:
            with open(guard, "a") as g:
                fcntl.flock(g, fcntl.LOCK_EX)
                try:
                    if os.stat(guard).st_ino != os.fstat(g.fileno()).st_ino:
                        continue  # the run before us removed this guard file when it was done: take the new one
                except FileNotFoundError:
                    continue
                if holder(self.path)[:2] == (pid, host):
                    print(f"{self.program}: taking over {self.path}: left by process {pid} on {host} (since {since}), "
                          "which no longer runs", file=sys.stderr)
                    self.path.unlink(missing_ok=True)
                guard.unlink(missing_ok=True)  # while still held: a run waiting on it sees it gone and retries
                return

    def _stop_on_term(self) -> None:
        """SIGTERM and SIGHUP raise KeyboardInterrupt in the main thread while the lock is held (see the top)."""
        if threading.current_thread() is not threading.main_thread():
            return

        def stop(signum, frame):
            raise KeyboardInterrupt

        for sig in (signal.SIGTERM, signal.SIGHUP):
            try:
                self._handlers[sig] = signal.signal(sig, stop)
            except (ValueError, OSError):
                pass

    def __exit__(self, *exc):
        for sig, old in self._handlers.items():
            signal.signal(sig, old)
        self._handlers.clear()
        if self.held:
            self.path.unlink(missing_ok=True)
            self.held = False
