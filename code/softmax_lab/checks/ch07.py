"""Checks for chapter 7, performance: bandwidth arithmetic, rows per program, the multi-row and persistent
kernels written from scratch, one knob at a time, occupancy, and two performance targets.

The arithmetic exercises are plain Python, so their checks are exact and need no GPU:

* ``check_bandwidth(bytes_moved, achieved_gbps)``: a softmax reads every element once and writes it once, so
  ``bytes_moved(M, N, dtype) = 2 * M * N * bytes_per_element`` and ``achieved_gbps(M, N, dtype, ms)`` is that
  over the time, in GB/s (10^9 bytes per second). The seed figures are the test cases.
* ``check_choose_rows(choose_rows)``: ``choose_rows(M, N, n_sms)`` picks rows per program for short rows
  (the rule is in the chapter and in ``rows_rule`` below). Besides the chapter's named shapes it tries a fresh
  set of random shapes every run (one verdict line for all of them), so a table of the named answers fails.
* ``check_multirow(my_multirow_softmax)``: the learner's ``[ROWS, BLOCK]`` kernel, written from scratch:
  boundary shapes with padding rows, all-negative rows, strided inputs and outputs, and from ``memcount``
  the property taught: one read and one write per element, ``cdiv(n_rows, ROWS)`` programs.
* ``check_persistent(my_persistent_softmax)``: Triton's persistent ``tl.range`` loop: correct, the grid does
  not grow with the rows, every row read once and written exactly once.
* ``check_warps(values_per_thread, one_knob_sweeps, predict_spill)``: counts behind ``BLOCK``/``num_warps``;
  the spill prediction is checked against what the H200 compiler really did (``benchmarks/records/h200-cuda-layer.md``).
* ``check_occupancy(programs_per_sm)``: how many programs of a kernel fit one SM (registers, threads, shared
  memory, the block limit), as the official tutorial sizes its persistent grid.
* ``check_row_vector(row_vector)``: ``row_vector(n_cols, *tensors)``, the ``VEC`` a register kernel may take its
  ints in (16-byte vectors when the row length and every tensor's row stride are whole vectors, else 1). Each
  case also launches the package's fused kernel with the learner's VEC through the interpreter: a VEC that does
  not divide a stride reads or writes the wrong rows, and the case says so. Fresh random cases every run.
* ``check_targets(target_knobs, my_multirow_softmax, my_persistent_softmax)``: two performance targets. The
  verdict lines printed are the same on every machine (nbval compares them): the proxy (legal knobs; target 1:
  a tile of at most ``MAX_TILE`` elements and 64 values per thread, at least ``PROGRAMS_PER_SM`` programs per SM;
  target 2: programs that fit an SM's threads and hold at least half of them; and from ``memcount`` one read and
  one write per element). On a GPU the check also times both kernels with
  ``softmax_lab.measure`` and adds a FAIL line when a target is missed; it prints no timing.
"""
from __future__ import annotations

import math

import torch
import triton

from ..device import DEVICE, ON_GPU
from ..reference import softmax_ref
from ._pitfalls import Verdict, explain, quiet, random_rows
from .common import Report, explain_exception

__all__ = ["check_bandwidth", "check_choose_rows", "check_multirow", "check_persistent", "check_warps",
           "check_occupancy", "check_row_vector", "check_targets"]

from ..kernels._launch import row_vector as vector_rule  # ch07-row-vector's rule: what the launchers use
from ..dispatch import MULTIROW_TILE as MAX_TILE  # elements per program: bigger [ROWS, BLOCK] tiles spill registers
PROGRAMS_PER_SM = 4  # keep at least this many programs per SM, so every SM has work and can hide latency


def rows_rule(M: int, N: int, n_sms: int) -> int:
    """The chapter's rule: the largest power of two ROWS with ROWS * next_power_of_2(N) <= MAX_TILE and
    cdiv(M, ROWS) >= PROGRAMS_PER_SM * n_sms; 1 when even ROWS = 2 breaks either condition."""
    block = triton.next_power_of_2(N)
    rows = 1
    while rows * 2 * block <= MAX_TILE and triton.cdiv(M, rows * 2) >= PROGRAMS_PER_SM * n_sms:
        rows *= 2
    return rows


# ------------------------------------------------------------------------------------------------ bandwidth

# (what, M, N, dtype, ms): the seeds' measured figures (the write-up's naive and final kernels, the book's Triton
# kernel), one made-up bf16 time, and one element.
BANDWIDTH_CASES = [
    ("attention 4x32x512x512 fp16, naive kernel", 4 * 32 * 512, 512, torch.float16, 2.34),
    ("attention 4x32x512x512 fp16, final kernel", 4 * 32 * 512, 512, torch.float16, 0.62),
    ("book 4096x1024 fp32, Triton kernel", 4096, 1024, torch.float32, 0.038361),
    ("4096x1024 bf16", 4096, 1024, torch.bfloat16, 0.02),
    ("one fp32 element", 1, 1, torch.float32, 1.0),
]


def _bytes_problem(bytes_moved, M, N, dtype) -> str:
    want = 2 * M * N * torch.tensor([], dtype=dtype).element_size()
    got = bytes_moved(M, N, dtype)
    if got is None:
        return "bytes_moved returned None"
    if got == want:
        return ""
    ratio = got / want
    if math.isclose(ratio, 0.5):
        also = (" (or you took 2 bytes per element: a float32 element is 4 bytes, x.element_size())"
                if dtype == torch.float32 else "")
        return (f"bytes_moved = {got}, expected {want}: you counted only the reads - each element is also written "
                f"once{also}")
    if math.isclose(ratio, 1.5):
        return (f"bytes_moved = {got}, expected {want}: that is three passes over the tensor; the minimum is one "
                "read and one write per element")
    if math.isclose(ratio, 2.0) and dtype != torch.float32:
        size = torch.tensor([], dtype=dtype).element_size()
        return (f"bytes_moved = {got}, expected {want}: a {str(dtype).replace('torch.', '')} element is {size} "
                "bytes (x.element_size())")
    if math.isclose(ratio, 8.0):
        return f"bytes_moved = {got}, expected {want}: that is bits; count bytes"
    return f"bytes_moved = {got}, expected {want} = 2 * M * N * bytes per element (read once, write once)"


def _gbps_problem(achieved_gbps, M, N, dtype, ms) -> str:
    want = 2 * M * N * torch.tensor([], dtype=dtype).element_size() / (ms * 1e-3) / 1e9
    got = achieved_gbps(M, N, dtype, ms)
    if got is None:
        return "achieved_gbps returned None"
    got = float(got)
    if math.isclose(got, want, rel_tol=1e-6):
        return ""
    ratio = got / want
    if math.isclose(ratio, 1e9 / 2 ** 30, rel_tol=1e-6):
        return f"got {got:.4g}, expected {want:.4g} GB/s: GB/s means 10^9 bytes per second, not 2^30 (GiB)"
    if math.isclose(ratio, 1e3, rel_tol=1e-6) or math.isclose(ratio, 1e-3, rel_tol=1e-6):
        return f"got {got:.4g}, expected {want:.4g} GB/s: the time is in milliseconds (1 ms = 1e-3 s)"
    if math.isclose(ratio, 0.5, rel_tol=1e-6):
        return f"got {got:.4g}, expected {want:.4g} GB/s: count the bytes written as well as the bytes read"
    return f"got {got:.4g}, expected {want:.4g} GB/s = bytes_moved / seconds / 1e9"


def check_bandwidth(bytes_moved, achieved_gbps) -> Verdict:
    """Exercise ch07-bandwidth: ``bytes_moved(M, N, dtype)`` and ``achieved_gbps(M, N, dtype, ms)``."""
    report = Report("ch07-bandwidth")
    seen = set()
    for what, M, N, dtype, ms in BANDWIDTH_CASES:
        if (M, N, dtype) not in seen:
            seen.add((M, N, dtype))
            report.run(f"bytes moved: {what.split(',')[0]}",
                       lambda M=M, N=N, dt=dtype: _bytes_problem(bytes_moved, M, N, dt))
    for what, M, N, dtype, ms in BANDWIDTH_CASES:
        report.run(f"GB/s: {what}, {ms:g} ms", lambda M=M, N=N, dt=dtype, ms=ms: _gbps_problem(achieved_gbps, M, N, dt, ms))
    return Verdict(report.show())


# --------------------------------------------------------------------------------------------- rows per program

# (M, N, n_sms): short rows on an H200 (132 SMs), the edges of the rule, and a small GPU.
ROWS_CASES = [
    (65536, 128, 132),   # many short rows: the tile cap decides
    (65536, 512, 132),   # the 4x32x512x512 attention rows
    (2048, 256, 132),    # the grid decides
    (1000, 1000, 132),   # ROWS = 2 would leave too few programs
    (1055, 64, 132),     # cdiv, not floor: 1055 rows in pairs is 528 programs
    (1024, 65536, 132),  # one row is already bigger than a tile
    (32, 16, 132),       # too few rows to fill the GPU at all
    (100000, 100, 20),   # a small GPU
]


def _rows_problem(choose_rows, M, N, n_sms) -> str:
    want = rows_rule(M, N, n_sms)
    got = choose_rows(M, N, n_sms)
    if got is None:
        return "choose_rows returned None"
    if not isinstance(got, int) or isinstance(got, bool):
        if isinstance(got, float) and got.is_integer():
            got = int(got)
        else:
            return f"choose_rows returned {got!r}; ROWS must be an int (it becomes a tl.constexpr)"
    if got == want:
        return ""
    block = triton.next_power_of_2(N)
    if got < 1 or got & (got - 1):
        return f"ROWS = {got}: tl.arange needs a power of two (expected {want})"
    if got * block > MAX_TILE and got > 1:
        return (f"ROWS = {got}: a {got}x{block} tile holds {got * block} values, more than {MAX_TILE} - it would "
                f"spill registers (expected {want})")
    programs = triton.cdiv(M, got)
    if programs < PROGRAMS_PER_SM * n_sms and got > 1:
        return (f"ROWS = {got}: only {programs} program{'s' if programs != 1 else ''} for {n_sms} SMs (fewer than {PROGRAMS_PER_SM} per SM) - "
                f"some SMs sit idle (expected {want})")
    if got < want:
        if triton.cdiv(M, want) >= PROGRAMS_PER_SM * n_sms > M // want:
            return (f"ROWS = {got}, expected {want}: count programs with cdiv(M, ROWS) - the last program takes "
                    "the leftover rows")
        return (f"ROWS = {got}, expected {want}: ROWS = {want} still keeps {triton.cdiv(M, want)} programs "
                f"(>= {PROGRAMS_PER_SM} per SM) and a tile of {want * block} values - take the largest")
    return f"ROWS = {got}, expected {want}"


def check_choose_rows(choose_rows) -> Verdict:
    """Exercise ch07-rows: ``choose_rows(M, N, n_sms)`` follows the chapter's rule."""
    report = Report("ch07-rows")
    for M, N, n_sms in ROWS_CASES:
        report.run(f"{M} rows of {N}, {n_sms} SMs", lambda M=M, N=N, s=n_sms: _rows_problem(choose_rows, M, N, s))
    report.run(f"{FRESH_SHAPES} fresh random shapes (new ones every run)", lambda: _fresh_rows(choose_rows))
    return Verdict(report.show())


FRESH_SHAPES = 24


def _fresh_rows(choose_rows) -> str:
    """The rule on shapes drawn now (not a fixed list): a table of the named cases' answers fails here."""
    rng = np.random.default_rng()
    for _ in range(FRESH_SHAPES):
        M, N, sms = int(rng.integers(1, 300000)), int(2 ** rng.uniform(0, 16)), int(rng.integers(8, 160))
        problem = _rows_problem(choose_rows, M, N, sms)
        if problem:
            return f"{M} rows of {N}, {sms} SMs: {problem}"
    return ""


# ------------------------------------------------------------------------------ kernels written from scratch

STRIDE_OUT = ("the output rows landed {where}: step output rows with out_row_stride (out.stride(0)), not with "
              "{what} - a strided output (a view into a bigger tensor) has its own row stride")
GAP_WRITE = ("the kernel wrote into the gap between output rows (or past the last row): mask the store, and "
             "step output rows with out_row_stride")
OUT_GUARD = 12345.0


def _strided_buffers(values: torch.Tensor, in_step: int, out_step: int, seed: int):
    """x (a view with rows ``in_step`` apart, random values in the gaps) and out (rows ``out_step`` apart:
    NaN where the results go, OUT_GUARD in the gaps and after the end), both on DEVICE, with their buffers."""
    rows, n = values.shape
    g = torch.Generator().manual_seed(seed)
    flat_in = (torch.randn(rows * in_step + 64, generator=g) * 3).to(values.dtype).to(DEVICE)
    x = flat_in[: rows * in_step].view(rows, in_step)[:, :n]
    x.copy_(values.to(DEVICE))
    flat_out = torch.full((rows * out_step + 64,), OUT_GUARD, dtype=values.dtype, device=DEVICE)
    out = flat_out[: rows * out_step].view(rows, out_step)[:, :n]
    out.fill_(float("nan"))
    return x, out, flat_in, flat_out


def _rows_at(flat: torch.Tensor, rows: int, n: int, step: int) -> torch.Tensor | None:
    if (rows - 1) * step + n > flat.numel():
        return None
    return torch.stack([flat[r * step: r * step + n] for r in range(rows)])


def _kernel_problem(launch, values: torch.Tensor, in_step: int | None = None, out_step: int | None = None,
                    seed: int = 0) -> str:
    """Run ``launch(x, out)`` on ``values`` laid out with the given row steps; '' or the named mistake."""
    rows, n = values.shape
    in_step, out_step = in_step or n, out_step or n
    x, out, flat_in, flat_out = _strided_buffers(values, in_step, out_step, seed)
    with quiet():
        launch(x, out)
        flat = flat_out.cpu()
        got = flat[: rows * out_step].view(rows, out_step)[:, :n]
        ref = softmax_ref(values)
        gaps = torch.ones(flat.numel(), dtype=torch.bool)
        gaps[: rows * out_step].view(rows, out_step)[:, :n] = False
        if not bool((flat[gaps] == OUT_GUARD).all()):
            for what, step in (("n_cols", n), ("the input's row stride", in_step)):
                if step != out_step:
                    moved = _rows_at(flat, rows, n, step)
                    if moved is not None and torch.allclose(moved.double(), ref, atol=1e-5, rtol=1e-4):
                        return STRIDE_OUT.format(where=f"{step} elements apart", what=what)
            return GAP_WRITE
        host_in = flat_in.cpu()
        xc = host_in[: rows * in_step].view(rows, in_step)[:, :n]
        return explain(got, xc, triton.next_power_of_2(n), flat=host_in, row_step=in_step)


def _counted(launch, x: torch.Tensor, **kw):
    from ..memcount import count_calls

    out = torch.full_like(x, float("nan"))
    with quiet():
        _, c = count_calls(lambda: launch(x, out, **kw))
    return c, out


def _per_element(log, argument: str, numel: int) -> np.ndarray:
    """How often each element of ``argument`` was touched, over every launch and program (memcount's log)."""
    counts = np.zeros(numel, dtype=np.int64)
    for _, _, name, idx in log:
        if name == argument:
            np.add.at(counts, idx[idx < numel], 1)
    return counts


def _traffic_problem(c, numel: int) -> str:
    """One read of every input element and one write of every output element, nothing else."""
    reads = _per_element(c._load_log, "in_ptr", numel)
    writes = _per_element(c._store_log, "out_ptr", numel)
    extra = c.loads + c.stores - int(reads.sum()) - int(writes.sum())
    if writes.max(initial=0) > 1:
        return (f"some outputs were written {int(writes.max())} times: every row must be stored by exactly one "
                "program, once")
    if (writes == 0).any():
        return f"{int((writes == 0).sum())} of {numel} outputs were never written"
    if reads.max(initial=0) > 1:
        return (f"some input elements were read {int(reads.max())} times: load the tile once and keep it in "
                "registers for the max, the exponentials and the sum (one read per element)")
    if (reads == 0).any():
        return f"{int((reads == 0).sum())} of {numel} input elements were never read"
    if extra:
        return (f"{extra} loads or stores of other buffers: the softmax needs no scratch memory, the reductions "
                "stay in registers")
    return ""


def _not_implemented(launch, x) -> bool:
    try:
        with quiet():
            launch(x, torch.empty_like(x))
    except NotImplementedError:
        return True
    except Exception as err:  # noqa: BLE001 - other errors are reported by the cases
        return "NotImplementedError" in f"{type(err).__name__}: {err}"
    return False


NOT_IMPLEMENTED = "not implemented yet - replace `raise NotImplementedError` with your code"

# (name, values, ROWS, input row step, output row step)
MULTIROW_CASES = [
    ("random 1x1, ROWS = 2 (one padding row)", random_rows((1, 1), 700), 2, None, None),
    ("random 2x31, ROWS = 4 (two padding rows)", random_rows((2, 31), 701), 4, None, None),
    ("random 3x32, ROWS = 2 (last program has one row)", random_rows((3, 32), 702), 2, None, None),
    ("random 4x33, ROWS = 4", random_rows((4, 33), 703), 4, None, None),
    ("random 2x255, ROWS = 1", random_rows((2, 255), 704), 1, None, None),
    ("random 3x257, ROWS = 2", random_rows((3, 257), 705), 2, None, None),
    ("random 9x20, ROWS = 4 (3 programs)", random_rows((9, 20), 706), 4, None, None),
    ("all-negative rows (-1000 and below), 3x3, ROWS = 4", -1000.0 - random_rows((3, 3), 707).abs(), 4, None,
     None),
    ("large values [1000, 1001, 1002], ROWS = 2", torch.tensor([[1000.0, 1001.0, 1002.0]]), 2, None, None),
    ("strided input big[:, :20] of 5x27, ROWS = 2", random_rows((5, 20), 708), 2, 27, None),
    ("strided output: out rows 31 apart, 5x20, ROWS = 2", random_rows((5, 20), 709), 2, None, 31),
    ("strided input and output, 6x10 (rows 16 and 13 apart), ROWS = 4", random_rows((6, 10), 710), 4, 16, 13),
]


def _programs_problem(c, want: int, what: str) -> str:
    if c.launches != 1:
        return f"{c.launches} launches: one launch does it"
    if c.programs != want:
        return f"{c.programs} programs, expected {want} ({what})"
    return ""


def check_multirow(my_multirow_softmax) -> Verdict:
    """Exercise ch07-multirow: ``my_multirow_softmax(x, out, ROWS)`` launches the learner's
    ``my_multirow_kernel``, ROWS rows per program as one [ROWS, BLOCK] tile."""
    report = Report("ch07-multirow")
    if _not_implemented(lambda x, out: my_multirow_softmax(x, out, ROWS=2), random_rows((2, 4), 1).to(DEVICE)):
        report.add("your kernel and launcher", NOT_IMPLEMENTED)
        return Verdict(report.show())
    for i, (name, values, rows, s_in, s_out) in enumerate(MULTIROW_CASES):
        report.run(name, lambda v=values, r=rows, a=s_in, b=s_out, i=i: _kernel_problem(
            lambda x, out: my_multirow_softmax(x, out, ROWS=r), v, a, b, seed=720 + i))

    def traffic() -> str:
        x = random_rows((6, 40), 730).to(DEVICE)
        c, _ = _counted(my_multirow_softmax, x, ROWS=4)
        return _traffic_problem(c, x.numel())

    def programs() -> str:
        x = random_rows((9, 16), 731).to(DEVICE)
        for rows in (1, 2, 4, 8, 16):
            c, _ = _counted(my_multirow_softmax, x, ROWS=rows)
            problem = _programs_problem(c, triton.cdiv(9, rows), f"cdiv(9, {rows}): one program per {rows} rows"
                                        + (", the last one partly padding" if 9 % rows else ""))
            if problem:
                if c.programs == 9 and rows > 1:
                    problem += " - one program per row: the grid is cdiv(n_rows, ROWS)"
                elif c.programs == 9 // rows:
                    problem += " - floor division drops the last rows: use triton.cdiv"
                return f"ROWS = {rows}: {problem}"
        return ""

    report.run("memcount 6x40, ROWS = 4: each element read once and written once, nothing else", traffic)
    report.run("memcount 9x16, ROWS = 1, 2, 4, 8, 16: cdiv(n_rows, ROWS) programs in one launch", programs)
    return Verdict(report.show())


PERSISTENT_CASES = [
    ("random 1x1, 2 programs asked for", random_rows((1, 1), 740), 2, None, None),
    ("random 2x31, 3 programs", random_rows((2, 31), 741), 3, None, None),
    ("random 3x32, 2 programs", random_rows((3, 32), 742), 2, None, None),
    ("random 4x33, 3 programs", random_rows((4, 33), 743), 3, None, None),
    ("random 2x255, 1 program", random_rows((2, 255), 744), 1, None, None),
    ("random 3x257, 2 programs", random_rows((3, 257), 745), 2, None, None),
    ("random 11x20, 4 programs (rows per program differ)", random_rows((11, 20), 746), 4, None, None),
    ("all-negative rows (-1000 and below), 5x3, 2 programs", -1000.0 - random_rows((5, 3), 747).abs(), 2, None,
     None),
    ("large values [1000, 1001, 1002], 2 programs", torch.tensor([[1000.0, 1001.0, 1002.0]]), 2, None, None),
    ("strided input and output, 7x10 (rows 16 and 13 apart), 3 programs", random_rows((7, 10), 748), 3, 16, 13),
]


def check_persistent(my_persistent_softmax) -> Verdict:
    """Exercise ch07-persistent: ``my_persistent_softmax(x, out, n_programs)`` launches
    ``min(n_programs, n_rows)`` programs of the learner's ``my_persistent_kernel``, each looping over rows."""
    report = Report("ch07-persistent")
    if _not_implemented(lambda x, out: my_persistent_softmax(x, out, n_programs=2), random_rows((3, 4), 1).to(DEVICE)):
        report.add("your kernel and launcher", NOT_IMPLEMENTED)
        return Verdict(report.show())
    for i, (name, values, progs, s_in, s_out) in enumerate(PERSISTENT_CASES):
        report.run(name, lambda v=values, p=progs, a=s_in, b=s_out, i=i: _kernel_problem(
            lambda x, out: my_persistent_softmax(x, out, n_programs=p), v, a, b, seed=750 + i))

    def grid() -> str:
        for n_rows in (3, 8, 21):
            x = random_rows((n_rows, 8), 760 + n_rows).to(DEVICE)
            c, _ = _counted(my_persistent_softmax, x, n_programs=3)
            problem = _programs_problem(c, 3, "min(n_programs, n_rows) = 3, whatever the number of rows")
            if problem:
                if c.programs == n_rows:
                    problem += " - that is one program per row: launch n_programs and let each loop over rows"
                return f"{n_rows} rows: {problem}"
        return ""

    def once() -> str:
        x = random_rows((10, 24), 770).to(DEVICE)
        c, _ = _counted(my_persistent_softmax, x, n_programs=3)
        problem = _traffic_problem(c, x.numel())
        if problem.startswith("some outputs were written"):
            problem += (" (the loop's step is the number of programs, tl.num_programs(0): program p takes rows p, "
                        "p + step, p + 2 step, ...)")
        return problem

    report.run("memcount 3, 8 and 21 rows, 3 programs asked for: the grid does not grow with the rows", grid)
    report.run("memcount 10x24, 3 programs: every row read once and written exactly once", once)
    return Verdict(report.show())


# ------------------------------------------------------------------------------------- one knob at a time

WARPS = (1, 2, 4, 8, 16)
REGS_PER_SM = 65536      # 32-bit registers per SM (H100/H200, sm_90)
MAX_REGS_PER_THREAD = 255
THREADS_PER_SM = 2048
BLOCKS_PER_SM = 32
SHARED_PER_SM = 228 * 1024
REG_OVERHEAD = 24        # the chapter's rough model: registers = values per thread + about 24

# The fused kernel compiled on the H200 (benchmarks/records/h200-cuda-layer.md): (BLOCK, num_warps, values/thread, n_regs, spills)
H200_REGISTERS = [(1024, 4, 8, 22, 0), (2048, 8, 8, 22, 0), (4096, 8, 16, 34, 0), (8192, 16, 16, 38, 0),
                  (16384, 16, 32, 57, 0), (32768, 32, 32, 53, 0), (65536, 32, 64, 64, 48)]


def values_rule(block: int, num_warps: int) -> int:
    return max(1, block // (32 * num_warps))


def spill_rule(block: int, num_warps: int) -> bool:
    cap = min(MAX_REGS_PER_THREAD, REGS_PER_SM // (32 * num_warps))
    return values_rule(block, num_warps) + REG_OVERHEAD > cap


def _values_problem(values_per_thread, block, warps) -> str:
    want, got = values_rule(block, warps), values_per_thread(block, warps)
    if got == want:
        return ""
    if got == block // warps:
        return f"got {got}: a warp is 32 threads, so a program has 32 * num_warps threads to share the BLOCK values"
    if got == 0 or (isinstance(got, float) and got < 1):
        return (f"got {got}: with more threads than values ({32 * warps} threads, BLOCK = {block}) every thread "
                "still holds 1 value (Triton repeats the small block across the threads)")
    return f"got {got!r}, expected {want}"


def _sweeps_problem(one_knob_sweeps, n_cols) -> str:
    block = triton.next_power_of_2(n_cols)
    got = one_knob_sweeps(n_cols)
    try:
        warps_sweep, block_sweep = [list(map(tuple, s)) for s in got]
    except (TypeError, ValueError):
        return "return two lists of (BLOCK, num_warps) pairs: (the num_warps sweep, the BLOCK sweep)"
    if len({b for b, _ in warps_sweep}) != 1 or len({w for _, w in warps_sweep}) < 2:
        return "the first sweep must keep BLOCK fixed and change num_warps only (one knob at a time)"
    if len({w for _, w in block_sweep}) != 1 or len({b for b, _ in block_sweep}) < 2:
        return "the second sweep must keep num_warps fixed and change BLOCK only (one knob at a time)"
    if warps_sweep != [(block, w) for w in WARPS]:
        return f"num_warps sweep: expected BLOCK = {block} (next_power_of_2({n_cols})) with num_warps 1, 2, 4, 8, 16"
    if block_sweep != [(block * k, 4) for k in (1, 2, 4)]:
        return f"BLOCK sweep: expected num_warps = 4 with BLOCK = {block}, {2 * block}, {4 * block}"
    return ""


def _spill_problem(predict_spill, block, warps, record=None) -> str:
    want = spill_rule(block, warps) if record is None else record > 0
    got = predict_spill(block, warps)
    if not isinstance(got, (bool, np.bool_)):
        return f"predict_spill returned {got!r}: return True or False"
    if bool(got) == want:
        return ""
    need = values_rule(block, warps) + REG_OVERHEAD
    cap = min(MAX_REGS_PER_THREAD, REGS_PER_SM // (32 * warps))
    if not want and got:
        return f"predicted a spill, but {need} registers fit under the cap of {cap} per thread"
    if cap < MAX_REGS_PER_THREAD:
        return (f"predicted no spill: a program of {32 * warps} threads that must fit one SM can give each at most "
                f"{REGS_PER_SM} / {32 * warps} = {cap} registers (less than 255), and it needs about {need}")
    return f"predicted no spill, but about {need} registers are needed and a thread may use at most 255"


def check_warps(values_per_thread, one_knob_sweeps, predict_spill) -> Verdict:
    """Exercise ch07-warps: the counts behind BLOCK and num_warps, and a spill prediction checked against the
    registers the H200 compiler really gave the fused kernel."""
    report = Report("ch07-warps")
    try:
        values_per_thread(1024, 4)
    except NotImplementedError:
        report.add("values_per_thread", NOT_IMPLEMENTED)
        return Verdict(report.show())
    except Exception:  # noqa: BLE001 - reported by the cases below
        pass
    for block, warps in ((1024, 4), (2048, 8), (1024, 16), (4096, 2), (65536, 32), (128, 4), (32, 1)):
        report.run(f"values per thread, BLOCK = {block}, num_warps = {warps}",
                   lambda b=block, w=warps: _values_problem(values_per_thread, b, w))
    for n in (1000, 128, 4097):
        report.run(f"one knob at a time, rows of {n}", lambda n=n: _sweeps_problem(one_knob_sweeps, n))
    report.run("spill predicted as the H200 compiler did, on the 7 recorded settings (benchmarks/records/h200-cuda-layer.md)",
               lambda: next((f"BLOCK = {b}, num_warps = {w}: " + p for b, w, _, _, s in H200_REGISTERS
                             if (p := _spill_problem(predict_spill, b, w, s))), ""))
    for block, warps in ((65536, 16), (4096, 1), (8192, 1), (1024, 32)):
        report.run(f"spill predicted by the model, BLOCK = {block}, num_warps = {warps}",
                   lambda b=block, w=warps: _spill_problem(predict_spill, b, w))
    return Verdict(report.show())


# ------------------------------------------------------------------------------------------------ occupancy

def occupancy_rule(n_regs: int, num_warps: int, shared_bytes: int = 0) -> int:
    threads = 32 * num_warps
    fits = [REGS_PER_SM // (n_regs * threads), THREADS_PER_SM // threads, BLOCKS_PER_SM]
    if shared_bytes:
        fits.append(SHARED_PER_SM // shared_bytes)
    return max(0, min(fits))


OCCUPANCY_CASES = [(22, 4, 0), (64, 32, 0), (16, 1, 0), (40, 8, 0), (22, 4, 65536), (128, 4, 0), (255, 8, 0),
                   (32, 2, 1024), (24, 4, 100000)]


def _occupancy_problem(programs_per_sm, n_regs, warps, shared) -> str:
    want = occupancy_rule(n_regs, warps, shared)
    got = programs_per_sm(n_regs, warps, shared)
    if isinstance(got, float) and got.is_integer():
        got = int(got)
    if got == want:
        return ""
    threads = 32 * warps
    by = {"registers": REGS_PER_SM // (n_regs * threads), "threads": THREADS_PER_SM // threads,
          "block limit": BLOCKS_PER_SM, "shared memory": SHARED_PER_SM // shared if shared else 10**9}
    if not isinstance(got, int) or isinstance(got, bool):
        return f"got {got!r}: a number of programs is an int (use //)"
    if got == REGS_PER_SM // (n_regs * warps) or got == min(REGS_PER_SM // (n_regs * warps), BLOCKS_PER_SM):
        return f"got {got}: registers are per thread, and a program has 32 * num_warps threads"
    limit = min(by, key=by.get)
    return (f"got {got}, expected {want}: here the {limit} decide" +
            {"threads": f" ({THREADS_PER_SM} threads per SM / {threads} per program)",
             "block limit": f" (at most {BLOCKS_PER_SM} programs per SM, however small)",
             "shared memory": f" ({SHARED_PER_SM} bytes per SM / {shared} per program)",
             "registers": f" ({REGS_PER_SM} registers / ({n_regs} x {threads} threads))"}[limit])


def _not_written(report: Report, name: str, call) -> bool:
    """True, with the verdict line, when ``call()`` still raises the blank exercise's NotImplementedError (any
    other error is left to the cases, which name it)."""
    try:
        call()
    except NotImplementedError:
        report.add(name, NOT_IMPLEMENTED)
        return True
    except Exception:  # noqa: BLE001 - reported by the cases
        pass
    return False


def check_occupancy(programs_per_sm) -> Verdict:
    """Exercise ch07-occupancy: ``programs_per_sm(n_regs, num_warps, shared_bytes)`` on the H200's limits."""
    report = Report("ch07-occupancy")
    if _not_written(report, "programs_per_sm", lambda: programs_per_sm(22, 4, 0)):
        return Verdict(report.show())
    for n_regs, warps, shared in OCCUPANCY_CASES:
        report.run(f"{n_regs} registers, {warps} warp{'s' if warps > 1 else ''}, {shared} bytes of shared memory",
                   lambda r=n_regs, w=warps, s=shared: _occupancy_problem(programs_per_sm, r, w, s))
    return Verdict(report.show())


# ------------------------------------------------------------------------------------- rows in vectors

def _rows_of(n_rows: int, n_cols: int, row_step: int, dtype, start: int = 0) -> torch.Tensor:
    """An [n_rows, n_cols] view whose rows are ``row_step`` elements apart, ``start`` elements into its memory
    (zeros), on the device the kernels run on."""
    base = torch.zeros(start + n_rows * row_step, dtype=dtype, device=DEVICE)
    return base.as_strided((n_rows, n_cols), (row_step, 1), start)


BF, F16, F32 = torch.bfloat16, torch.float16, torch.float32
# (case, n_cols, [(n_rows, row step, dtype, start) for the input, then the output])
VECTOR_CASES = [
    ("rows of 1000 fp32, contiguous", 1000, [(3, 1000, F32, 0), (3, 1000, F32, 0)]),
    ("rows of 1000 bf16, contiguous", 1000, [(3, 1000, BF, 0), (3, 1000, BF, 0)]),
    ("rows of 1004 fp16 (not whole vectors)", 1004, [(3, 1004, F16, 0), (3, 1004, F16, 0)]),
    ("x = big[:, :1000] of rows of 1002 fp32", 1000, [(3, 1002, F32, 0), (3, 1000, F32, 0)]),
    ("x = big[:, 8:1008] of rows of 1024 fp32 (its start is the pointer's business)", 1000,
     [(3, 1024, F32, 8), (3, 1000, F32, 0)]),
    ("a contiguous input, an output with rows 1001 apart", 1000, [(3, 1000, F32, 0), (3, 1001, F32, 0)]),
    ("rows of 24 bf16 into an fp32 output", 24, [(3, 24, BF, 0), (3, 24, F32, 0)]),
]
FRESH_VECTOR_CASES = 40


def _fused_with(vec, tensors) -> str:
    """'' when ``vec`` divides the row length and every row stride; else which it does not, and what the fused
    kernel does on the first two tensors (input, output) when its launcher passes their ints divided by ``vec``
    (run here, with VEC=vec)."""
    from ..kernels.fused import fused_softmax_kernel

    if isinstance(vec, bool) or not isinstance(vec, int) or vec < 1:
        return f"row_vector returned {vec!r}; VEC is a whole number of elements, at least 1"
    x, y = tensors[0], tensors[1]
    n_rows, n_cols = x.shape
    names = ["the input's", "the output's"] + [f"tensor {k + 1}'s" for k in range(2, len(tensors))]
    bad = [f"the row length ({n_cols})"] if n_cols % vec else []
    bad += [f"{name} row stride ({t.stride(0)})" for name, t in zip(names, tensors) if t.stride(0) % vec and n_rows > 1]
    if not bad:
        return ""
    x.copy_(torch.randn(x.shape, generator=torch.Generator().manual_seed(7)).to(x.dtype))
    y.fill_(OUT_GUARD)
    with quiet():
        fused_softmax_kernel[(n_rows,)](y, x, *[i // vec for i in (x.stride(0), y.stride(0), n_cols)],
                                        BLOCK=triton.next_power_of_2(n_cols), VEC=vec)
    wrong = int((~torch.isclose(y.double(), softmax_ref(x), atol=1e-2, rtol=1e-2).all(dim=1)).sum())
    shown = f"the fused kernel, given the ints // {vec}, got {wrong} of {n_rows} rows wrong" if wrong else \
        "its ints // VEC * VEC lose the remainder"
    return f"VEC = {vec} does not divide {' and '.join(bad)}: {shown} - VEC must divide the row length and every row stride"


def _vector_problem(row_vector, n_cols, tensors) -> str:
    got, want = row_vector(n_cols, *tensors), vector_rule(n_cols, *tensors)
    if isinstance(got, bool) or not isinstance(got, int):
        return f"row_vector returned {got!r}; VEC must be an int (it becomes a tl.constexpr)"
    if got == want:
        return ""
    wrong = _fused_with(got, tensors)
    if wrong:
        return wrong
    if got < want:
        return (f"VEC = {got}, expected {want}: every row here is whole 16-byte vectors, so the kernel may take "
                f"its ints in {want}-element pieces and move 16 bytes at a time")
    widest = max(t.element_size() for t in tensors)
    return (f"VEC = {got}, expected {want}: VEC is 1 or the elements of one 16-byte vector of the widest dtype "
            f"here ({widest} bytes an element: {16 // widest})")


def _fresh_vectors(row_vector) -> str:
    rng = np.random.default_rng()
    for _ in range(FRESH_VECTOR_CASES):
        dtypes = [[F32, F16, BF][int(rng.integers(3))] for _ in range(int(rng.integers(2, 4)))]
        n_cols = int(rng.choice([int(rng.integers(1, 3000)), 8 * int(rng.integers(1, 400))]))
        rows = int(rng.integers(2, 5))  # (one row: its stride never matters, and either answer is safe)
        tensors = [_rows_of(rows, n_cols, n_cols + int(rng.choice([0, 0, 1, 2, 4, 8, int(rng.integers(0, 32))])),
                            d) for d in dtypes]
        problem = _vector_problem(row_vector, n_cols, tensors)
        if problem:
            shapes = ", ".join(f"{str(t.dtype)[6:]} rows {t.stride(0)} apart" for t in tensors)
            return f"{rows} row(s) of {n_cols} ({shapes}): {problem}"
    return ""


def check_row_vector(row_vector) -> Verdict:
    """Exercise ch07-row-vector: ``row_vector(n_cols, *tensors)`` gives the widest VEC that every row allows."""
    report = Report("ch07-row-vector")
    if _not_written(report, "row_vector", lambda: row_vector(8, torch.empty(2, 8))):
        return Verdict(report.show())
    for name, n_cols, specs in VECTOR_CASES:
        tensors = [_rows_of(r, n_cols, step, d, start) for r, step, d, start in specs]
        report.run(name, lambda n=n_cols, t=tensors: _vector_problem(row_vector, n, t))
    report.run(f"{FRESH_VECTOR_CASES} fresh random cases (new ones every run)", lambda: _fresh_vectors(row_vector))
    return Verdict(report.show())


# ------------------------------------------------------------------------------------- performance targets

H200_SMS = 132
# (key, kernel, shape, dtype, % of copy to reach on a GPU)
TARGETS = [("multirow", "multi-row kernel", (65536, 128), torch.float32, 90.0),
           ("persistent", "persistent kernel", (32768, 1024), torch.float32, 80.0)]
MIN_THREADS_PER_SM = THREADS_PER_SM // 2  # the persistent proxy: its programs keep at least half an SM's threads


def _knobs(target_knobs, key, names):
    knobs = target_knobs.get(key) if isinstance(target_knobs, dict) else None
    if not isinstance(knobs, dict) or set(knobs) != set(names):
        raise ValueError(f"target_knobs()[{key!r}] must be a dict with the keys {', '.join(names)}")
    for k, v in knobs.items():
        if not isinstance(v, int) or isinstance(v, bool):
            raise ValueError(f"target_knobs()[{key!r}][{k!r}] must be an int, got {v!r}")
    return knobs


def _power_of_two(v: int) -> bool:
    return v >= 1 and not v & (v - 1)


def _multirow_proxy(target_knobs, launch) -> str:
    k = _knobs(target_knobs, "multirow", ("ROWS", "num_warps"))
    rows, warps = k["ROWS"], k["num_warps"]
    M, N = TARGETS[0][2]
    block = triton.next_power_of_2(N)
    if not _power_of_two(rows) or warps not in WARPS:
        return "ROWS must be a power of two and num_warps one of 1, 2, 4, 8, 16"
    if rows * block > MAX_TILE:
        return f"a {rows}x{block} tile holds {rows * block} values, more than {MAX_TILE}: it spills registers"
    if triton.cdiv(M, rows) < PROGRAMS_PER_SM * H200_SMS:
        return (f"{triton.cdiv(M, rows)} programs for {H200_SMS} SMs: fewer than {PROGRAMS_PER_SM} per SM, "
                "some SMs sit idle")
    if values_rule(rows * block, warps) > 64:
        return f"{values_rule(rows * block, warps)} values per thread: too few threads for the tile"
    x = random_rows((2 * rows + 1, N), 780).to(DEVICE)  # the same program shape, three programs
    c, out = _counted(launch, x, ROWS=rows, num_warps=warps)
    return (_programs_problem(c, 3, f"cdiv({2 * rows + 1}, {rows})") or _traffic_problem(c, x.numel())
            or explain(out, x))


def _persistent_proxy(target_knobs, launch) -> str:
    k = _knobs(target_knobs, "persistent", ("programs_per_sm", "num_warps", "num_stages"))
    per_sm, warps, stages = k["programs_per_sm"], k["num_warps"], k["num_stages"]
    if warps not in WARPS or not 1 <= stages <= 4:
        return "num_warps must be one of 1, 2, 4, 8, 16 and num_stages 1 to 4"
    if not 1 <= per_sm <= THREADS_PER_SM // (32 * warps):
        return (f"{per_sm} programs of {32 * warps} threads per SM: an SM holds at most {THREADS_PER_SM} threads "
                f"({THREADS_PER_SM // (32 * warps)} such programs)")
    if per_sm * 32 * warps < MIN_THREADS_PER_SM:
        return (f"{per_sm} programs of {32 * warps} threads per SM keep only {per_sm * 32 * warps} of its "
                f"{THREADS_PER_SM} threads busy (fewer than {MIN_THREADS_PER_SM}): too few loads in flight to hide "
                "the memory's latency - ask programs_per_sm how many of your kernel fit")
    x = random_rows((7, TARGETS[1][2][1]), 781).to(DEVICE)  # rows of the target's length, 3 programs
    c, out = _counted(launch, x, n_programs=3, num_warps=warps, num_stages=stages)
    return (_programs_problem(c, 3, "3 programs asked for") or _traffic_problem(c, x.numel())
            or explain(out, x))


def _timed_problem(key, launch, target_knobs, shape, dtype, target) -> str:
    """GPU only: the learner's kernel timed with softmax_lab.measure against the copy of the same bytes."""
    from ..measure import measure

    if key == "multirow":
        k = target_knobs["multirow"]
        fn = lambda x: launch(x, torch.empty_like(x), ROWS=k["ROWS"], num_warps=k["num_warps"])  # noqa: E731
    else:
        k = target_knobs["persistent"]
        sms = torch.cuda.get_device_properties(0).multi_processor_count
        fn = lambda x: launch(x, torch.empty_like(x), n_programs=sms * k["programs_per_sm"],  # noqa: E731
                              num_warps=k["num_warps"], num_stages=k["num_stages"])
    with quiet():
        r = measure(fn, lambda: torch.randn(*shape, device=DEVICE, dtype=dtype), name=key)
    if not r.ok:
        return r.problem
    if r.pct_of_copy < target:
        return f"timed at {r.pct_of_copy:.0f}% of copy on this GPU, below the target of {target:.0f}%"
    return ""


def check_targets(target_knobs, my_multirow_softmax, my_persistent_softmax) -> Verdict:
    """Exercise ch07-targets: ``target_knobs()`` (or the dict it returns) gives the knobs of the two targets. Every machine prints the same lines: the memcount proxy of each target (knobs,
    programs per SM, one read and one write per element). On a GPU each kernel is also timed with
    ``softmax_lab.measure``; a missed target adds a FAIL line (the cell after the check prints the timings)."""
    report = Report("ch07-targets")
    if callable(target_knobs):
        try:
            target_knobs = target_knobs()
        except Exception as err:  # noqa: BLE001 - a blank or broken cell is a verdict
            report.add("target_knobs()", explain_exception(err))
            return Verdict(report.show())
    launches = {"multirow": my_multirow_softmax, "persistent": my_persistent_softmax}
    proxies = {"multirow": _multirow_proxy, "persistent": _persistent_proxy}
    for i, (key, what, (M, N), dtype, target) in enumerate(TARGETS, start=1):
        ok = report.run(f"target {i}: {what} at {M}x{N} fp32, >= {target:.0f}% of copy on a GPU - proxy "
                        "(knobs, programs per SM, memcount traffic), the same on every machine",
                        lambda k=key: proxies[k](target_knobs, launches[k]))
        if ok and ON_GPU:
            problem = ""
            try:
                problem = _timed_problem(key, launches[key], target_knobs, (M, N), dtype, target)
            except Exception as err:  # noqa: BLE001
                problem = explain_exception(err)
            if problem:
                report.add(f"target {i} timed on this GPU (softmax_lab.measure)", problem)
    return Verdict(report.show())


# ------------------------------------------------------------------------------- what the grader launches

def _bandwidth_calls(rng):
    from .judging import PCall, expect_equal

    calls = []
    for dtype, size in (("float16", 2), ("float32", 4), ("bfloat16", 2)):
        M, N = int(rng.integers(1, 100000)), int(rng.integers(1, 5000))
        ms = float(np.round(rng.uniform(0.01, 5.0), 4))
        want = 2 * M * N * size
        calls.append(PCall(f"bytes_moved({M}, {N}, {dtype})", "bytes_moved", [M, N, {"dtype": dtype}],
                           expect_equal(want)))
        calls.append(PCall(f"achieved_gbps({M}, {N}, {dtype}, {ms})", "achieved_gbps",
                           [M, N, {"dtype": dtype}, ms], expect_equal(want / (ms * 1e-3) / 1e9)))
    return calls


def _rows_calls(rng):
    from .judging import PCall, expect_equal

    calls = []
    for _ in range(8):
        M, N, sms = int(rng.integers(1, 200000)), int(rng.integers(1, 70000)), int(rng.integers(8, 160))
        calls.append(PCall(f"choose_rows({M}, {N}, {sms})", "choose_rows", [M, N, sms],
                           expect_equal(rows_rule(M, N, sms))))
    for M, N, sms in ((65536, 128, 132), (1055, 64, 132)):
        calls.append(PCall(f"choose_rows({M}, {N}, {sms})", "choose_rows", [M, N, sms],
                           expect_equal(rows_rule(M, N, sms))))
    return calls


def _multirow_cases(rng):
    from .judging import BIG_STEP, INT64_HINT, gpu_scale, np2, softmax_case, softmax_rows

    out = []
    for (R, C), rows in zip([(1, 1), (2, 31), (3, 32), (5, 33), (2, int(rng.integers(100, 255))), (7, 257)],
                            [2, 4, 2, 4, 1, int(rng.choice([2, 4, 8]))]):
        args = ["out", "x", "x_stride", "out_stride", ("int", R), "n"]
        out.append(softmax_case(rng, f"{R}x{C}, ROWS = {rows}", softmax_rows(rng, (R, C)), args, np2(C),
                                (triton.cdiv(R, rows),), constexprs={"ROWS": rows}))
    for R, C, rows in [(6, int(rng.integers(5, 60)), 4), (5, int(rng.integers(200, 300)), 2)]:
        args = ["out", "x", "x_stride", "out_stride", ("int", R), "n"]
        out.append(softmax_case(rng, f"strided input and output {R}x{C}, ROWS = {rows}", softmax_rows(rng, (R, C)),
                                args, np2(C), (triton.cdiv(R, rows),), strided=True, constexprs={"ROWS": rows}))
    args = ["out", "x", "x_stride", "out_stride", ("int", 3), "n"]
    out.append(softmax_case(rng, "64-bit row offsets", softmax_rows(rng, (3, 7)), args, 8, (2,), strided=True,
                            int64=True, hint=INT64_HINT, constexprs={"ROWS": 2}))
    if gpu_scale():  # last: a fault here may spoil the GPU context for later launches
        out.append(softmax_case(rng, "rows 2**30 apart: offsets past 2**31 elements", softmax_rows(rng, (3, 37)),
                                args, 64, (2,), hint=INT64_HINT, big_step=BIG_STEP, constexprs={"ROWS": 2}))
    return out


def _persistent_cases(rng):
    from .judging import np2, softmax_case, softmax_rows

    out = []
    for R, C, progs, strided in [(1, 1, 1, False), (2, 31, 1, False), (5, 32, 2, False), (7, 33, 3, False),
                                 (4, int(rng.integers(100, 255)), 3, False), (9, 257, 4, False),
                                 (6, int(rng.integers(5, 60)), 4, True), (5, int(rng.integers(200, 300)), 2, True)]:
        args = ["out", "x", "x_stride", "out_stride", ("int", R), "n"]
        name = f"{'strided input and output ' if strided else ''}{R}x{C}, {progs} program{'s' if progs > 1 else ''}"
        out.append(softmax_case(rng, name, softmax_rows(rng, (R, C)), args, np2(C), (progs,), strided=strided,
                                constexprs={"NUM_STAGES": 2}))
    return out


def _expect_sweeps(n_cols):
    block = triton.next_power_of_2(n_cols)
    want = [[[block, w] for w in WARPS], [[block * k, 4] for k in (1, 2, 4)]]

    def problem(value) -> str:
        return "" if value == want else f"expected {want}"
    return problem


def _expect_bool(want: bool):
    return lambda value: "" if value is want else f"got {value!r}, expected {want}"


def _warps_calls(rng):
    from .judging import PCall, expect_equal

    calls = []
    for _ in range(4):
        b, w = int(2 ** rng.integers(4, 17)), int(rng.choice(WARPS + (32,)))
        calls.append(PCall(f"values_per_thread({b}, {w})", "values_per_thread", [b, w], expect_equal(values_rule(b, w))))
        calls.append(PCall(f"predict_spill({b}, {w})", "predict_spill", [b, w], _expect_bool(spill_rule(b, w))))
    for b, w, _, _, spills in H200_REGISTERS:
        calls.append(PCall(f"predict_spill({b}, {w})", "predict_spill", [b, w], _expect_bool(spills > 0)))
    n = int(rng.integers(2, 9000))
    calls.append(PCall(f"one_knob_sweeps({n})", "one_knob_sweeps", [n], _expect_sweeps(n)))
    return calls


def _occupancy_calls(rng):
    from .judging import PCall, expect_equal

    calls = []
    for _ in range(6):
        r, w = int(rng.integers(16, 256)), int(rng.choice(WARPS))
        shared = int(rng.choice([0, 0, int(rng.integers(256, 120000))]))
        calls.append(PCall(f"programs_per_sm({r}, {w}, {shared})", "programs_per_sm", [r, w, shared],
                           expect_equal(occupancy_rule(r, w, shared))))
    for r, w, shared in ((22, 4, 0), (16, 1, 0), (22, 4, 65536)):
        calls.append(PCall(f"programs_per_sm({r}, {w}, {shared})", "programs_per_sm", [r, w, shared],
                           expect_equal(occupancy_rule(r, w, shared))))
    return calls


def _vector_calls(rng):
    from .judging import PCall, expect_equal

    calls = []
    for _ in range(10):
        n_cols, rows = int(rng.choice([int(rng.integers(1, 3000)), 8 * int(rng.integers(1, 400))])), int(rng.integers(2, 4))
        dtypes = [str(rng.choice(["float32", "float16", "bfloat16"])) for _ in range(int(rng.integers(2, 4)))]
        steps = [n_cols + int(rng.choice([0, 0, 1, 2, 4, 8])) for _ in dtypes]
        tensors = [torch.empty_strided((rows, n_cols), (st, 1), dtype=getattr(torch, d), device="meta")
                   for st, d in zip(steps, dtypes)]
        args = [{"strided": {"shape": [rows, n_cols], "stride": [st, 1], "dtype": d}} for st, d in zip(steps, dtypes)]
        calls.append(PCall(f"row_vector({n_cols}, rows {steps} apart, {'/'.join(dtypes)})", "row_vector",
                           [n_cols, *args], expect_equal(vector_rule(n_cols, *tensors))))
    return calls


def _judges():
    from .judging import KernelJudge, PythonJudge

    return {"ch07-bandwidth": PythonJudge(_bandwidth_calls), "ch07-rows": PythonJudge(_rows_calls),
            "ch07-multirow": KernelJudge("my_multirow_kernel", _multirow_cases, int64=True),
            "ch07-persistent": KernelJudge("my_persistent_kernel", _persistent_cases),
            "ch07-warps": PythonJudge(_warps_calls), "ch07-occupancy": PythonJudge(_occupancy_calls),
            "ch07-row-vector": PythonJudge(_vector_calls)}


import numpy as np  # noqa: E402

JUDGES = _judges()
