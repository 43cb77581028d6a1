"""Exercise ch09-reader-barrier: the buggy kernel with ``cuda.syncthreads()`` lines added, and only those."""
from __future__ import annotations

import torch

from ...device import DEVICE
from ...testing import randn
from .._pitfalls import Verdict
from ..common import Report
from ._blocks import NOT_IMPLEMENTED, _cl, _launcher, _not_implemented, _race_cases, _safe_output


BARRIER = "cuda.syncthreads()"


ONLY_BARRIERS = ("start from the buggy kernel's body and add cuda.syncthreads() lines only: {what} (the rest "
                 "of the kernel is already right; the race report says where a barrier is missing)")


def _body_lines(fn) -> list[str] | None:
    """The code lines of a kernel's body (comments and blank lines dropped, spaces stripped); None without source."""
    import inspect

    try:
        source = inspect.getsource(getattr(fn, "py_func", fn))
    except (OSError, TypeError):
        return None
    lines = [line.split("#")[0].strip() for line in source.splitlines()]
    lines = [line for line in lines if line]
    start = next((i for i, line in enumerate(lines) if line.startswith("def ")), None)
    if start is None:
        return None
    end = next((i for i in range(start, len(lines)) if lines[i].endswith(":")), None)
    return None if end is None else lines[end + 1:]


def _only_barriers_added(kernel) -> str:
    """'' when the kernel's body is the buggy kernel's with cuda.syncthreads() lines added (or moved)."""
    mine, buggy = _body_lines(kernel), _body_lines(_cl().kernels.block_softmax_missing_barrier_kernel)
    if mine is None or buggy is None:  # no source to compare (e.g. a kernel built with exec): the races decide
        return ""
    code, want = [ln for ln in mine if ln != BARRIER], [ln for ln in buggy if ln != BARRIER]
    for got, expected in zip(code, want):
        if got != expected:
            return ONLY_BARRIERS.format(what=f"`{got}` stands where the buggy kernel has `{expected}`")
    if len(code) > len(want):
        return ONLY_BARRIERS.format(what=f"`{code[len(want)]}` is not in the buggy kernel")
    if len(code) < len(want):
        return ONLY_BARRIERS.format(what=f"`{want[len(code)]}` of the buggy kernel is missing")
    if mine.count(BARRIER) <= buggy.count(BARRIER):
        return ONLY_BARRIERS.format(what="no cuda.syncthreads() was added")
    return ""


def check_reader_barrier(kernel) -> Verdict:
    """Exercise ch09-reader-barrier: the buggy block kernel (``K.block_softmax_missing_barrier_kernel``) with
    its reader barrier back: its body plus ``cuda.syncthreads()`` lines, nothing else changed (when the kernel's
    source can be read), race-free in the simulator and correct."""
    report = Report("ch09-reader-barrier")
    if _not_implemented(kernel):
        report.add("your kernel", NOT_IMPLEMENTED)
        return Verdict(report.show())
    report.run("the buggy kernel's body with cuda.syncthreads() added, nothing else changed",
               lambda: _only_barriers_added(kernel))
    if not _race_cases(report, kernel, [(2, 100, 64), (1, 300, 128)], 91):
        return Verdict(report.show())
    launch = _launcher(kernel)
    for name, x, threads in [("random 3x257, 128 threads", randn((3, 257), device=DEVICE, seed=92), 128),
                             ("all-negative row [-1002, -1001, -1000], 32 threads",
                              torch.tensor([[-1002.0, -1001.0, -1000.0]], device=DEVICE), 32)]:
        report.run(name, lambda x=x, t=threads: _safe_output(launch, x, t))
    return Verdict(report.show())
