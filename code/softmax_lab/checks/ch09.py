"""Checks for chapter 9, the CUDA layer: numba ``@cuda.jit`` kernels, real CUDA on a GPU, the simulator on a CPU.

* ``check_block_tree(kernel)``: a one-block-per-row softmax ``kernel(x, y, n_cols)`` with shared-memory trees.
* ``check_reader_barrier(kernel)``: the library's buggy block kernel with its missing reader barrier added
  (only ``cuda.syncthreads()`` lines may be added to its body).
* ``check_shuffle_tail(warp_max, warp_sum, tail_softmax)``: warp-shuffle reductions and the kernel using them.
* ``check_sectors(sectors_and_lines)``: 32-byte sectors and 128-byte lines of one warp load.

Besides comparing outputs with the float64 reference, every kernel check runs the kernel once in numba's
simulator under the shared-memory race recorder (``softmax_lab.cuda_layer.record_races``), which is
deterministic, so a missing barrier fails on every run and on every machine, also when the output happened
to come out right. Named pitfalls: a missing barrier (by thread, address and line), a wrong stride in the
per-thread loop, a max that starts from 0 instead of -inf, a sector count that ignores where an access ends,
a shuffle of the wrong width (offset 32: a 64-lane wavefront's first step; 8: half a warp).

numba is imported only when a check runs (``import softmax_lab.checks`` stays light).
"""
from __future__ import annotations

import math
import types

import numpy as np
import torch

from ..device import DEVICE
from ..testing import randn
from ._pitfalls import Verdict, explain, quiet
from .common import Report, explain_exception

__all__ = ["check_block_tree", "check_reader_barrier", "check_shuffle_tail", "check_sectors"]

NOT_IMPLEMENTED = "not implemented yet - replace `raise NotImplementedError` with your code"
WRONG_STRIDE = ("each thread stepped by {step} columns instead of by the number of threads in the block "
                "({threads}), so {what}: loop with range(tid, n_cols, cuda.blockDim.x)")
MISSING_READER = ("the reader barrier is missing: add cuda.syncthreads() after every thread has read the max "
                  "from shared[0] and before shared[] is reused for the sum")
MISSING_WRITER = ("a barrier is missing between a write to shared memory and another thread's read of it: "
                  "cuda.syncthreads() after the writes (e.g. after shared[tid] = ...) and after each tree step")
DIVERGENT = ("a cuda.syncthreads() sits inside an `if` that not every thread takes: every thread of the block "
             "must reach every barrier (move it out of the if)")
SHARED_OOB = ("a thread indexed shared memory past its end: the tree must only let threads tid < stride "
              "combine shared[tid] and shared[tid + stride] (if tid < stride:), and the block gives one "
              "float32 per thread")


def _cl():
    from .. import cuda_layer
    from ..cuda_layer import kernels  # noqa: F401 - the checks launch with cuda_layer.kernels, imported or not

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
        return ("exp overflowed (the simulator raises OverflowError where a GPU gives inf): subtract the row "
                "max before exp")
    return explain_exception(err)


# ------------------------------------------------------------------------------------ emulated mistakes


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


# ------------------------------------------------------------------------------------- kernel checks


IDENTITY = ("a row of negative numbers came out wrong as if its max were 0: start the max from "
            "float32(-math.inf), not 0 - every thread, also one with no column, must contribute the identity "
            "(-inf for a max, 0 for a sum)")


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


def _race_problem(kernel, rows: int, cols: int, threads: int, seed: int) -> str:
    cl = _cl()
    x = randn((rows, cols), device="cpu", seed=seed).numpy()
    y = np.full_like(x, np.nan)
    with quiet(), cl.record_races() as rec:
        cl.simulated(kernel)[rows, threads, 0, threads * 4](x, y, cols)
    report = rec.report()
    if report.ok:
        return ""
    text, _ = report.grouped()[0]
    kinds = report.kinds()
    fix = (DIVERGENT if "divergent barrier" in kinds else MISSING_READER if "write-after-read" in kinds
           else MISSING_WRITER)
    return f"race: {text} - {fix}"


def _launcher(kernel, min_threads=32):
    cl = _cl()

    def launch(x, out, threads):
        return cl.kernels.launch_rows(kernel, x, out, threads, min_threads=min_threads)
    return launch


def _kernel_cases(seed: int):
    d = DEVICE
    shapes = [((1, 1), 32), ((2, 31), 32), ((3, 32), 32), ((4, 33), 64), ((2, 255), 64), ((3, 257), 128)]
    for i, (shape, threads) in enumerate(shapes):
        yield f"random {shape[0]}x{shape[1]}, {threads} threads", randn(shape, device=d, seed=seed + i), threads
    yield ("row shorter than the block (2x5, 64 threads: most threads have no column)",
           randn((2, 5), device=d, seed=seed + 10), 64)
    yield ("all-negative row [-1002, -1001, -1000], 32 threads",
           torch.tensor([[-1002.0, -1001.0, -1000.0]], device=d), 32)
    yield "large values [1000, 1001, 1002], 32 threads", torch.tensor([[1000.0, 1001.0, 1002.0]], device=d), 32
    big = randn((3, 130), device=d, seed=seed + 11)
    yield "strided view big[:, :100] of a 3x130 tensor, 64 threads", big[:, :100], 64


def _check_kernel(report: Report, kernel, launch, seed: int, race_shapes, min_threads: int = 32):
    if _not_implemented(kernel):
        report.add("your kernel", NOT_IMPLEMENTED)
        return
    if not _race_cases(report, kernel, race_shapes, seed):
        return
    for name, x, threads in _kernel_cases(seed):
        if threads < min_threads:
            continue
        report.run(name, lambda x=x, t=threads: _safe_output(launch, x, t))


RACY_OUTPUTS = ("outputs not checked: with a race they change from run to run (a test that passes "
                "once proves nothing) - fix the race first")


def _race_cases(report: Report, kernel, shapes, seed: int) -> bool:
    """Race-check ``kernel`` on each (rows, cols, threads); False (and a note) when a hazard was found."""
    ok = True
    for rows, cols, threads in shapes:
        ok &= report.run(f"race check in the simulator: {rows}x{cols}, {threads} threads (no hazard between "
                         "barriers)", lambda r=rows, c=cols, t=threads: _race(kernel, r, c, t, seed))
    if not ok:
        report.add("outputs", RACY_OUTPUTS)
    return ok


def _race(kernel, rows, cols, threads, seed):
    try:
        return _race_problem(kernel, rows, cols, threads, seed)
    except Exception as err:  # noqa: BLE001 - a learner error is a verdict
        return _explain_error(err)


def _safe_output(launch, x, threads):
    try:
        return _output_problem(launch, x, threads)
    except Exception as err:  # noqa: BLE001
        return _explain_error(err)


def check_block_tree(kernel) -> Verdict:
    """Exercise ch09-block-tree: ``kernel(x, y, n_cols)``, one block per row, trees in dynamic shared memory."""
    report = Report("ch09-block-tree")
    _check_kernel(report, kernel, _launcher(kernel), 90, [(2, 100, 64)])
    return Verdict(report.show())


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


# ---------------------------------------------------------------------------------------- warp shuffles


def _emulate_warp(vals: np.ndarray, op, mode: str, offsets, combine: bool = True) -> np.ndarray:
    v = vals.astype(np.float64).copy()
    lanes = np.arange(32)
    for off in offsets:
        b = off & 31
        src = {"down": lanes + b, "xor": lanes ^ b, "up": lanes - b}[mode]
        src = np.where((src >= 0) & (src < 32), src, lanes)
        other = v[src]
        v = op(v, other) if combine else other
    return v


def _shuffle_mistake(got0: float, vals: np.ndarray, op, kind: str) -> str:
    named = [
        ("xor", (32, 16, 8, 4, 2, 1), True, "the first step used offset 32, the first step of a 64-lane AMD "
         "wavefront: an NVIDIA warp has 32 lanes, and a shuffle keeps only the offset's low 5 bits, so offset 32 "
         "pairs each lane with itself (a sum doubles) - start at 16"),
        ("down", (32, 16, 8, 4, 2, 1), True, None),
        ("xor", (8, 4, 2, 1), True, "the shuffles started at offset 8, so they combined only 16 of the warp's 32 "
         "lanes - start at 16 (half the warp) and halve down to 1"),
        ("down", (8, 4, 2, 1), True, None),
        ("xor", (4, 2, 1), True, "the shuffles started at offset 4 (8 lanes) - start at 16 and halve down to 1"),
        ("down", (4, 2, 1), True, None),
        ("xor", (16, 8, 4, 2), True, "the last step (offset 1) is missing: each lane combined only every other "
         "lane - halve the offset down to 1"),
        ("down", (16, 8, 4, 2), True, None),
        ("up", (16, 8, 4, 2, 1), True, "shfl_up_sync sends values up to higher lanes, so lane 0 gets nothing: "
         "use shfl_down_sync (result in lane 0) or shfl_xor_sync (result in every lane)"),
        ("down", (16, 8, 4, 2, 1), False, "each step replaced the value by the neighbour's instead of combining "
         "them: v = op(v, shuffle(v, offset))"),
        ("xor", (16, 8, 4, 2, 1), False, None),
    ]
    last = ""
    for mode, offs, comb, text in named:
        last = text or last
        want = _emulate_warp(vals, op, mode, offs, comb)[0]
        if math.isclose(got0, want, rel_tol=1e-5, abs_tol=1e-6) and not math.isclose(
                got0, _emulate_warp(vals, op, "xor", (16, 8, 4, 2, 1))[0], rel_tol=1e-5, abs_tol=1e-6):
            return f"{kind}: {last}"
    return f"{kind}: lane 0 holds the wrong value"


_PROBE_SRC = '''
def probe(vals, out):
    lane = cuda.threadIdx.x
    out[lane] = fn(vals[lane])
'''


def _probe(fn):
    cl = _cl()
    ns = {"cuda": cl.cuda, "fn": fn}
    exec(compile(_PROBE_SRC, "<softmax_lab warp probe>", "exec"), ns)  # noqa: S102 - our own fixed source
    return cl.cuda.jit(ns["probe"])


def _run_probe(probe, vals: np.ndarray) -> np.ndarray:
    cl = _cl()
    out = np.full(32, np.nan, dtype=np.float32)
    if cl.SIMULATOR:
        probe[1, 32](vals, out)
        return out
    d_vals, d_out = cl.cuda.to_device(vals), cl.cuda.to_device(out)
    probe[1, 32](d_vals, d_out)
    return d_out.copy_to_host()


def _warp_cases():
    g = np.random.default_rng(93)
    lanes = np.arange(32, dtype=np.float32)
    one = np.full(32, -np.inf, dtype=np.float32)
    one[17] = 2.5
    yield "lanes hold 0, 1, ..., 31", lanes
    yield "random lane values", (g.standard_normal(32) * 3).astype(np.float32)
    yield "largest value in lane 31", (lanes - 40).astype(np.float32)
    yield "all -inf but lane 17 (max only)", one


def _warp_problem(probe, fn_name: str, vals: np.ndarray, op) -> str:
    with quiet():
        got = _run_probe(probe, vals)
        want = _emulate_warp(vals, op, "xor", (16, 8, 4, 2, 1))[0]
    if np.isnan(got[0]):
        return f"{fn_name}: lane 0 got NaN"
    if math.isclose(float(got[0]), float(want), rel_tol=1e-5, abs_tol=1e-5) or got[0] == want:
        return ""
    return _shuffle_mistake(float(got[0]), vals, op, fn_name)


def check_shuffle_tail(warp_max, warp_sum, tail_kernel) -> Verdict:
    """Exercise ch09-shuffle-tail: ``warp_max(v)``/``warp_sum(v)`` (device functions: lane 0 at least gets the
    warp's max/sum) and ``tail_kernel(x, y, n_cols)``, the block kernel whose trees end in them."""
    report = Report("ch09-shuffle-tail")
    if _not_implemented(warp_max, warp_sum):
        report.add("warp_max and warp_sum", NOT_IMPLEMENTED)
        return Verdict(report.show())
    for fn, fn_name, op in [(warp_max, "warp_max", np.maximum), (warp_sum, "warp_sum", np.add)]:
        try:
            probe = _probe(fn)
        except Exception as err:  # noqa: BLE001
            report.add(f"{fn_name} in one warp", _explain_error(err))
            continue
        for name, vals in _warp_cases():
            if op is np.add and np.isinf(vals).any():
                continue
            report.run(f"{fn_name} in one warp: {name}",
                       lambda p=probe, v=vals, f=fn_name, o=op: _warp_problem(p, f, v, o))
    if not _race_cases(report, tail_kernel, [(2, 100, 128)], 94):
        return Verdict(report.show())
    launch = _launcher(tail_kernel, min_threads=64)
    for name, x, threads in [("random 2x300, 64 threads", randn((2, 300), device=DEVICE, seed=95), 64),
                             ("random 3x257, 128 threads", randn((3, 257), device=DEVICE, seed=96), 128),
                             ("random 1x1, 64 threads", randn((1, 1), device=DEVICE, seed=97), 64),
                             ("all-negative row [-1002, -1001, -1000], 64 threads",
                              torch.tensor([[-1002.0, -1001.0, -1000.0]], device=DEVICE), 64)]:
        report.run(name, lambda x=x, t=threads: _safe_output(launch, x, t))
    return Verdict(report.show())


# ------------------------------------------------------------------------------------------- coalescing


def _sector_cases():
    """(name, byte addresses of one warp load, access bytes), from the course kernels' own loads."""
    cl = _cl()
    k = cl.kernels
    g = torch.Generator().manual_seed(98)
    x = torch.randn(32, 64, generator=g)
    serial = cl.warp_loads(k.row_serial_kernel, 1, 32, (x, torch.zeros_like(x), 32, 64))
    yield "one thread per row (row_serial_kernel, 32 rows of 64 floats)", serial.warp_load(0, 0, 0).active, 4
    row = torch.randn(1, 64, generator=g)
    block = cl.warp_loads(k.block_softmax_kernel, 1, 32, (row, torch.zeros_like(row), 64), shared_bytes=128)
    yield "one block per row (block_softmax_kernel, 1 row of 64 floats)", block.warp_load(0, 0, 0).active, 4
    chunk = torch.randn(1, 512, generator=g)
    chunked = cl.warp_loads(k.chunked_row_max_kernel, 1, 32, (chunk, torch.zeros(1), 512))
    yield "seed 004's chunks (thread t reads 16t, 16t+1, ...)", chunked.warp_load(0, 0, 0).active, 4
    big = torch.randn(1, 65, generator=g)
    view = big[:, 1:]
    shifted = cl.warp_loads(k.block_softmax_kernel, 1, 32, (view, torch.zeros(1, 64), 64), shared_bytes=128)
    yield "one block per row on the view big[:, 1:] (starts 4 bytes in)", shifted.warp_load(0, 0, 0).active, 4
    yield "16 lanes active (a row of 16 floats)", block.warp_load(0, 0, 0).active[:16], 4
    yield "32 float16 values side by side", [2 * i for i in range(32)], 2
    yield "every lane reads the same float (a broadcast)", [256] * 32, 4
    yield ("8-byte reads starting 4 bytes in (4 + 8 * lane): some straddle a sector boundary and touch two",
           [4 + 8 * lane for lane in range(32)], 8)


def _sectors_problem(fn, addresses, access_bytes: int) -> str:
    cl = _cl()
    want = cl.count_sectors(addresses, access_bytes)
    got = fn(list(addresses), access_bytes)
    try:
        got = (int(got[0]), int(got[1]))
    except (TypeError, ValueError, IndexError):
        return f"return a pair (sectors, lines), got {got!r}"
    if got == want:
        return ""
    n = len(addresses)
    if got[0] == n and want[0] != n:
        return "sectors: you counted one per lane, but lanes that fall in the same 32-byte sector share it"
    if got[0] == -(-n * access_bytes // 32) and want[0] != got[0]:
        return ("sectors: you divided the bytes the warp asked for by 32; that holds only for contiguous, "
                "aligned addresses - count the distinct sectors (address // 32) they fall in")
    if got == (want[1], want[0]):
        return "sectors and lines are swapped: return (sectors, lines)"
    first = (len({a // 32 for a in addresses}), len({a // 128 for a in addresses}))
    if got == first and first != want:
        return (f"you counted only the sector of each access's first byte: a read of {access_bytes} bytes at a "
                f"covers a .. a + {access_bytes - 1}, and when it straddles a boundary it touches the next sector "
                "(and line) too")
    if got[0] != want[0]:
        return f"sectors: {got[0]} is {'too many' if got[0] > want[0] else 'too few'}"
    return f"lines: {got[1]} is {'too many' if got[1] > want[1] else 'too few'} (a line is 128 bytes)"


def check_sectors(sectors_and_lines) -> Verdict:
    """Exercise ch09-sectors: ``sectors_and_lines(byte_addresses, access_bytes) -> (sectors, lines)``."""
    report = Report("ch09-sectors")
    try:
        sectors_and_lines([0], 4)
    except NotImplementedError:
        report.add("sectors_and_lines", NOT_IMPLEMENTED)
        return Verdict(report.show())
    except Exception:  # noqa: BLE001 - the cases below report it
        pass
    try:
        cases = list(_sector_cases())
    except Exception as err:  # noqa: BLE001 - our recorder failing is not the learner's fault, but say so
        report.add("recording the kernels' addresses", explain_exception(err))
        return Verdict(report.show())
    for name, addresses, nbytes in cases:
        report.run(name, lambda a=addresses, b=nbytes: _sectors_problem(sectors_and_lines, a, b))
    return Verdict(report.show())


del types
