"""What chapter 9's checks share: launch a learner's numba kernel one block per row, name the classic mistakes
(wrong thread stride, a max started from 0, a missing or divergent barrier, a read past shared memory), and catch
races with the simulator's race recorder (deterministic: the same verdict on every run)."""
from __future__ import annotations

import re
import types

import numpy as np
import torch

from ...testing import randn
from .._pitfalls import explain, quiet
from ..common import Report, explain_exception


NOT_IMPLEMENTED = "not implemented yet - replace `raise NotImplementedError` with your code"


WRONG_STRIDE = ("each thread stepped by {step} columns while the block has {threads} threads, so {what}")


MISSING_READER = ("write-after-read race on shared memory: a thread overwrote a shared value that other threads had "
                  "not read yet, with no barrier between their read and its write, so what they read depends on "
                  "which warp runs first")


MISSING_WRITER = ("read-after-write race on shared memory: a thread read a shared value in the same barrier "
                  "interval as another thread's write of it, so it may read the old value")


DIVERGENT = ("some threads of the block passed a cuda.syncthreads() that others skipped (a barrier inside a branch "
             "not every thread takes): undefined behaviour in CUDA, a GPU can hang there")


SHARED_OOB = ("a thread indexed shared memory past its end (the block gives one float32 per thread): a tree step "
              "paired a thread with an element beyond the last one")


def race_problem(kinds, first: str, lines: bool = True) -> str:
    """The FAIL text for a race report: its first hazard and the mistake its kind names. Lines by number only (the
    code quoted would be the learner's own answer); none at all when ``lines`` is False (the course's helpers ran
    too, whose line numbers mean nothing to the learner)."""
    kinds = set(kinds)
    what = (DIVERGENT if "divergent barrier" in kinds else MISSING_READER if "write-after-read" in kinds
            else MISSING_WRITER)
    first = re.sub(r": `[^`]*`", "", str(first))
    if not lines:
        first = re.sub(r" \(line \d+\)", "", first)
    return f"race: {first} - {what}"


def widest_interval(cells: dict) -> int:
    """The most shared elements one thread touched between two barriers (a race recorder's ``cells``): 2 or 3
    for a step of a tree, one per value for a serial loop."""
    count: dict = {}
    for (block, _, _, epoch), cell in cells.items():
        for tid in set(cell["r"]) | set(cell["w"]):
            count[(block, tid, epoch)] = count.get((block, tid, epoch), 0) + 1
    return max(count.values(), default=0)


def _cl():
    from ... import cuda_layer
    from ...cuda_layer import kernels  # noqa: F401 - loads the submodule, so cuda_layer.kernels exists

    return cuda_layer


def _not_implemented(*fns) -> bool:
    for fn in fns:
        f = getattr(fn, "py_func", fn)
        code = getattr(f, "__code__", None)
        if code is not None and "NotImplementedError" in code.co_names:
            return True
    return False


def _explain_error(err: BaseException) -> str:
    text = f"{type(err).__name__}: {err}"
    if "out of bounds" in text and ("shared" in text or "size" in text):
        return SHARED_OOB
    if isinstance(err, OverflowError):  # the simulator's math.exp raises where the GPU's gives inf
        return ("exp overflowed (the simulator raises OverflowError where a GPU gives inf): the kernel passed exp a "
                "value above 88.7, past what float32 can hold, so on a GPU the sum would be inf and the outputs 0 or "
                "NaN")
    return explain_exception(err)


def _coverage(n_cols: int, threads: int, step: int) -> np.ndarray:
    """How many threads visit each column when thread t loops range(t, n_cols, step)."""
    c = np.zeros(n_cols, dtype=np.int64)
    for t in range(threads):
        c[t:n_cols:step] += 1
    return c


def _strided_softmax(x64: np.ndarray, threads: int, step: int) -> np.ndarray:
    out = np.full_like(x64, np.nan)
    c = _coverage(x64.shape[1], threads, step)
    seen = c > 0
    for r, row in enumerate(x64):
        m = row[seen].max()
        e = np.exp(row - m)
        s = (c * e)[seen].sum()
        out[r, seen] = e[seen] / s
    return out


def _wrong_stride(y: torch.Tensor, x: torch.Tensor, threads: int) -> str:
    x64 = x.detach().double().cpu().numpy()
    y64 = y.detach().double().cpu().numpy()
    for step in sorted({1, 32, threads // 2, 2 * threads, 128, 256, 1024} - {threads, 0}):
        want = _strided_softmax(x64, threads, step)
        if np.allclose(np.nan_to_num(y64, nan=-7.0), np.nan_to_num(want, nan=-7.0), rtol=1e-4, atol=1e-6):
            c = _coverage(x.shape[1], threads, step)
            what = ("some columns were counted by several threads" if (c > 1).any() else
                    "some columns were never visited")
            return WRONG_STRIDE.format(step=step, threads=threads, what=what)
    return ""


IDENTITY = ("a row of negative numbers came out as if its max were 0: a running max started above every value "
            "of the row (every thread, also one with no column, must start from the identity of max)")


def _max_from_zero(y: torch.Tensor, x: torch.Tensor) -> bool:
    """Does y look like a softmax whose max started from 0 (rows of negative numbers go wrong)?"""
    x64, y64 = x.detach().double().cpu(), y.detach().double().cpu()
    neg = x64.amax(dim=-1) < 0
    if not bool(neg.any()):
        return False
    e = torch.exp(x64 - x64.amax(dim=-1, keepdim=True).clamp(min=0))
    want = e / e.sum(dim=-1, keepdim=True)
    return bool(torch.allclose(torch.nan_to_num(y64[neg], nan=-7.0), torch.nan_to_num(want[neg], nan=-7.0),
                               rtol=1e-4, atol=1e-6))


def _output_problem(launch, x: torch.Tensor, threads: int) -> str:
    out = torch.full(x.shape, float("nan"), dtype=x.dtype, device=x.device)
    with quiet():
        y = launch(x, out, threads)
        y = out if y is None else y
        problem = explain(y, x)
        if problem:
            if _max_from_zero(y, x):
                return IDENTITY
            stride = _wrong_stride(y, x, threads)
            return stride or problem
    return ""


def _race_problem(kernel, rows: int, cols: int, threads: int, seed: int, lines: bool = True) -> str:
    cl = _cl()
    x = randn((rows, cols), device="cpu", seed=seed).numpy()
    y = np.full_like(x, np.nan)
    with quiet(), cl.record_races() as rec:
        cl.simulated(kernel)[rows, threads, 0, threads * 4](x, y, cols)
    report = rec.report()
    if report.ok:
        return ""
    return race_problem(report.kinds(), report.grouped()[0][0], lines)


def _launcher(kernel, min_threads=32):
    cl = _cl()

    def launch(x, out, threads):
        return cl.kernels.launch_rows(kernel, x, out, threads, min_threads=min_threads)
    return launch


RACY_OUTPUTS = ("outputs not checked: with a race they change from run to run (a test that passes "
                "once proves nothing) - fix the race first")


def _race_cases(report: Report, kernel, shapes, seed: int, lines: bool = True) -> bool:
    """Race-check ``kernel`` on each (rows, cols, threads); False (and a note) when a hazard was found."""
    ok = True
    for rows, cols, threads in shapes:
        ok &= report.run(f"race check in the simulator: {rows}x{cols}, {threads} threads (no hazard between "
                         "barriers)", lambda r=rows, c=cols, t=threads: _race(kernel, r, c, t, seed, lines))
    if not ok:
        report.add("outputs", RACY_OUTPUTS)
    return ok


def _race(kernel, rows, cols, threads, seed, lines=True):
    try:
        return _race_problem(kernel, rows, cols, threads, seed, lines)
    except Exception as err:
        return _explain_error(err)


def _safe_output(launch, x, threads):
    try:
        return _output_problem(launch, x, threads)
    except Exception as err:
        return _explain_error(err)


del types
