"""Bounded reads of whatever a sandbox hands back: pipes drained into capped buffers, files opened only as files.

Learner code controls every byte that comes out of a sandbox, so the grader never reads anything whole:

* a pipe is drained by a thread that keeps at most ``cap`` bytes (the rest is counted and dropped), so a flood
  costs the grader CPU time, never memory, and never blocks the writer;
* a file is opened with ``O_NOFOLLOW | O_NONBLOCK`` and checked to be a regular file before any read (a FIFO,
  a device or a symbolic link is refused without blocking), and read up to a cap.
"""
from __future__ import annotations

import os
import stat
import threading

CHUNK = 1 << 16


class NotAFile(OSError):
    """The path is a FIFO, a device, a socket, a symbolic link or a folder, or larger than allowed."""


def read_regular(path, cap: int) -> bytes:
    """The bytes of ``path`` when it is a regular file of at most ``cap`` bytes; NotAFile otherwise."""
    flags = os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK | getattr(os, "O_CLOEXEC", 0)
    try:
        fd = os.open(path, flags)
    except OSError as err:
        raise NotAFile(f"cannot open {os.path.basename(str(path))}: {err.strerror}") from None
    try:
        info = os.fstat(fd)
        if not stat.S_ISREG(info.st_mode):
            raise NotAFile(f"{os.path.basename(str(path))} is not a regular file")
        if info.st_size > cap:
            raise NotAFile(f"{os.path.basename(str(path))} is larger than {cap} bytes")
        parts, total = [], 0
        while total <= cap:
            piece = os.read(fd, min(CHUNK, cap + 1 - total))
            if not piece:
                break
            parts.append(piece)
            total += len(piece)
        if total > cap:
            raise NotAFile(f"{os.path.basename(str(path))} grew past {cap} bytes")
        return b"".join(parts)
    finally:
        os.close(fd)


class Drain:
    """A thread that reads a pipe to its end, keeping the first ``head`` bytes and the last ``tail`` bytes.

    ``total`` counts every byte read; ``over`` is set once more than ``head + tail`` bytes came."""

    def __init__(self, fd: int, head: int = 0, tail: int = 64 * 1024):
        self.fd, self.head_cap, self.tail_cap = fd, head, tail
        self.head = bytearray()
        self.tail = bytearray()
        self.total = 0
        self.over = threading.Event()
        self.thread = threading.Thread(target=self._run, daemon=True)
        self.thread.start()

    def _run(self) -> None:
        try:
            while True:
                piece = os.read(self.fd, CHUNK)
                if not piece:
                    break
                self.total += len(piece)
                room = self.head_cap - len(self.head)
                if room > 0:
                    self.head += piece[:room]
                    piece = piece[room:]
                if piece and self.tail_cap:
                    self.tail += piece
                    if len(self.tail) > 2 * self.tail_cap:
                        del self.tail[: len(self.tail) - self.tail_cap]
                if self.total > self.head_cap + self.tail_cap:
                    self.over.set()
        except OSError:
            pass
        finally:
            try:
                os.close(self.fd)
            except OSError:
                pass

    def join(self, timeout: float = 5.0) -> None:
        self.thread.join(timeout)

    def text(self) -> str:
        """The kept bytes as text (head, then the last ``tail`` bytes), with a note when some were dropped."""
        tail = bytes(self.tail[-self.tail_cap:]) if self.tail_cap else b""
        dropped = self.total - len(self.head) - len(tail)
        middle = f"\n... ({dropped} bytes left out) ...\n".encode() if dropped > 0 else b""
        return (bytes(self.head) + middle + tail).decode("utf-8", "replace")


def lines_of(data: bytes, max_line: int) -> list[str]:
    """Complete lines of ``data`` as text; lines longer than ``max_line`` bytes are dropped."""
    out = []
    for raw in data.split(b"\n"):
        if raw and len(raw) <= max_line:
            out.append(raw.decode("utf-8", "replace"))
    return out
