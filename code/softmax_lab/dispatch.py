"""The dispatcher behind ``softmax_lab.softmax``: the tuning policy, which kernel runs, and a fast launch path.

**The tuning policy** is every tuned number of the package, here and nowhere else, as small rule lists
``[(limit, value), ...]``: the first rule whose limit is >= the key gives the value (``None``: no limit).
Lists are per element size (4: fp32, 2: fp16/bf16). How they were tuned on an H200: ``results/README.md``.

* short rows: ``multirow`` with several rows per program (one row per program from about 1024 elements);
* rows that fit one block (up to 32768 elements): ``fused``, one row per program, more warps (fewer for rows a
  little longer than a power of two, whose blocks are up to half padding: 98.6% against 90.5% at 8192x4100
  fp32, 96.0% against 80.6% at 8192x5000 bf16, ``results/h200-padding.json``);
* 16-bit rows of 8,193-32,768 elements on a GPU: ``resident`` (``kernels/resident.py``, a Gluon kernel: the row
  sits in shared memory instead of registers, so several programs share a multiprocessor; with ``overlap``
  92.8% of copy against 79% at 2048x32768 bf16 and 96.4% against fused's 93.1% at 4096x16384,
  ``results/h200-overlap.json``; its shared memory sized to the row, 95.8% against 84% at 2048x24000,
  ``results/h200-clustered-b.json``), where rows start on 16 bytes on a Hopper GPU; otherwise (and on the
  CPU) ``fused`` or ``cooperative`` (``GLUON_FALLBACK``);
* fp32 rows of 16,385-28,672 elements: ``resident`` too, on the same conditions (otherwise ``fused``): 93.0%
  against fused's 77.2% at 2048x17000, 94.3% against 84.8% at 2048x20008; at 32768 fused stays, 95.3% against
  94.1% (``results/h200-padding*.json``);
* rows too long for one program's shared memory, 16-bit up to 131,072 elements and fp32 of 49,152-65,536:
  ``clustered`` (``kernels/clustered.py``: a row split over a cluster of 4 or 8 programs, each holding its
  slice in shared memory; 83.8% against cooperative's 76.5% at 1024x65536 bf16, 138% against 122% at
  4096x131072 bf16, 92.2% against 90.1% at 1024x65536 fp32, ``results/h200-clustered-b.json``; at 2048x40000
  fp32 cooperative stays: 92.4% against 90.1%, ``results/h200-boundaries-b.json``), on the same conditions;
* longer rows: ``cooperative``, each row shared by several programs that keep their chunk in registers and
  exchange their partial ``(m, l)``, so the row is read once (``kernels/cooperative.py``; for fp16/bf16 rows
  of 16385-65536 elements it took over from its pipelined form once both used ``fast_exp``: 79.2% of copy
  against 76.3% at 2048x32768 bf16, ``results/h200-issue15e-sweep.json``); for fp32 rows longer than
  1,048,576 elements the form that reads its chunk again from L2 instead of holding it in registers
  (``l2_reread.py``; 64.5% of copy against 59.1% at 8x4194304, equal at 16x1M, worse at 262144 and below:
  ``results/h200-issue15c.json``).

Rows that do not start on 16 bytes (odd widths like 50,257, odd strides, an odd first element) would be read one
element at a time by the register kernels; ``kernels/unaligned.py`` reads them in whole vectors from the boundary
before each row, where it measured faster (``UNALIGNED_FORWARD``, ``UNALIGNED_BACKWARD``, ``choose_unaligned``).

``choose(n_rows, n_cols, dtype)`` gives (kernel name, launcher, knobs) for rows on 16 bytes; ``softmax_2d(x)`` runs
what suits x itself (``_runnable``).

**The fast path.** On small inputs a call's cost is Python, not the GPU (a kernel of ~10 µs behind ~40 µs
of checks, choices and Triton's own launch code). ``plan_2d(x)`` does all of that once per kind of input
(shape, strides, dtype, device, pointer alignment) and returns a function that only allocates the output
and launches the compiled kernel (``kernels._launch.relauncher``); ``op.softmax`` keeps one per kind.

Any shape, any ``dim``, ``dtype=``, masks and autograd are the operator's job (``op.py``).
"""
from __future__ import annotations

import torch

from .device import ON_GPU


def pick(rules, key):
    """The value of the first ``(limit, value)`` rule with ``key <= limit`` (limit ``None``: any key)."""
    for limit, value in rules:
        if limit is None or key <= limit:
            return value
    raise ValueError(f"no rule for {key} in {rules}")


# --- Forward: (kernel, knobs) by row length. ROWS = rows per program. From the H200 sweeps.
# Limits between powers of two: rows a little longer than one (4,100 fp32) leave up to half a register
# kernel's lanes padding, and take fewer warps or the resident kernel (results/h200-padding*.json).
FORWARD = {
    4: [(128, ("multirow", dict(ROWS=8, num_warps=4))), (256, ("multirow", dict(ROWS=4, num_warps=4))),
        (512, ("multirow", dict(ROWS=2, num_warps=2))), (2048, ("multirow", dict(ROWS=1, num_warps=4))),
        (4096, ("fused", dict(num_warps=16))), (5120, ("fused", dict(num_warps=8))),
        (12288, ("fused", dict(num_warps=16))), (16384, ("fused", dict(num_warps=32))),
        (28672, ("resident", dict(num_warps=8, overlap=True))), (32768, ("fused", dict(num_warps=32))),
        (49151, ("cooperative", dict(BLOCK=8192, num_warps=4))),
        (65536, ("clustered", dict(parts=8, num_warps=2, vectors=2))),
        (262144, ("cooperative", dict(BLOCK=8192, num_warps=4))),
        (1048576, ("cooperative", dict(BLOCK=8192, num_warps=8))),
        (None, ("l2_reread", dict(BLOCK=8192, num_warps=8)))],
    2: [(128, ("multirow", dict(ROWS=8, num_warps=4))), (256, ("multirow", dict(ROWS=4, num_warps=2))),
        (896, ("multirow", dict(ROWS=2, num_warps=2))), (1024, ("multirow", dict(ROWS=2, num_warps=4))),
        (2048, ("multirow", dict(ROWS=1, num_warps=4))), (4096, ("fused", dict(num_warps=8))),
        (6144, ("fused", dict(num_warps=4))), (7680, ("fused", dict(num_warps=8))), (8192, ("fused", dict(num_warps=16))),
        (32768, ("resident", dict(num_warps=8, overlap=True))),
        (65536, ("clustered", dict(parts=4, num_warps=4, vectors=2))),
        (131072, ("clustered", dict(parts=4, num_warps=4, vectors=1))),
        (None, ("cooperative", dict(BLOCK=8192, num_warps=4)))],
}
# Where a Gluon kernel cannot run (the CPU interpreter, GPUs before Hopper, where they were not measured, rows
# that do not start on 16 bytes): the kernels they replaced, by element size and row length.
GLUON_KERNELS = ("resident", "clustered")
GLUON_FALLBACK = {4: [(32768, ("fused", dict(num_warps=32))), (None, ("cooperative", dict(BLOCK=8192, num_warps=4)))],
                  2: [(16384, ("fused", dict(num_warps=32))), (None, ("cooperative", dict(BLOCK=8192, num_warps=4)))]}
GLUON_CAPABILITY = (9, 0)  # the Gluon kernels were tuned on an H200 (9.0); resident runs from 8.0 (cp.async)
# Rows that do not start on 16 bytes (odd widths, odd strides, an odd first element): ``kernels/unaligned.py``
# reads each row from the vector boundary before it, a window of n_cols + VEC - 1 elements. Where it measured
# faster than the register kernels reading one element at a time (benchmarks/records/, docs/performance.md):
# fp32 rows that fit a tile (the rules above, keyed by the window, give rows per program and warps; windows up
# to 128: 8 rows and 2 warps, 98.5% of copy against multirow's 73% at 100000x77), 16-bit rows for cooperating
# programs (60.7% against 50.6% at 2048x50257 bf16), and every backward (70% against 52% at 2048x50257 bf16).
# 16-bit tiles and fp32 cooperative rows measured slower there, so they keep the register kernels.
# Rules by window length: (kernel, knobs); ("tile", None): the unaligned tile with FORWARD's rows and warps for
# that window; None: the register kernels. Backward: 16-bit windows up to ``short`` take ROWS rows and num_warps
# warps per tile; 16-bit rows for cooperating programs, BLOCK and cooperative_warps (else the launchers' defaults).
UNALIGNED_FORWARD = {4: [(128, ("unaligned", dict(ROWS=8, num_warps=2))), (32768, ("tile", None)), (None, None)],
                     2: [(16384, None), (None, ("unaligned_cooperative", dict(BLOCK=4096, num_warps=4)))]}
UNALIGNED_BACKWARD = {4: dict(), 2: dict(short=256, ROWS=8, num_warps=2, BLOCK=8192, cooperative_warps=4)}
# --- Backward: [ROWS, BLOCK] tiles of BACKWARD_TILE elements for rows up to BACKWARD_TILE_COLS; longer rows:
# cooperative programs holding COOPERATIVE_BACKWARD_BYTES of y and as much of dy each.
BACKWARD_TILE_COLS = 16384
BACKWARD_TILE = 4096
COOPERATIVE_BACKWARD_BYTES = 16384
CHUNKED_BACKWARD_BLOCK = 8192  # the older two-launch path (softmax_backward(..., chunks=...))

# --- Launcher defaults, when a learner calls a kernel without knobs.
WARPS_FOR_BLOCK = [(1024, 4), (4096, 8), (16384, 16), (None, 32)]  # ~8-16 elements per thread
MULTIROW_TILE = 4096  # elements per multirow program (ROWS = MULTIROW_TILE // BLOCK): bigger tiles spill
COOPERATIVE_BYTES = 32768  # input per cooperative program (8192 fp32, 16384 fp16/bf16)
COOPERATIVE_WARPS = [(1024, 1), (2048, 2), (4096, 4), (8192, 8), (None, 16)]  # 32 elements per thread
L2_REREAD_PROGRAMS_PER_SM = 4  # l2_reread: programs per SM (all resident at once)
L2_REREAD_BYTES = 24 << 20  # l2_reread: chunks in flight (read once, read again from the 60 MB L2) at most
STREAM_BLOCK = 4096  # the tile of online and split-row softmax (rows streamed through)
SPLIT_ROW_PROGRAMS_PER_SM = 4  # split-row: enough (row, chunk) programs to fill the GPU about 4 times


def element_size(dtype: torch.dtype) -> int:
    return 2 if dtype in (torch.float16, torch.bfloat16) else 4


def _launchers():
    # (kernels import this module, so not at the top)
    from .kernels import (cooperative_softmax, fused_softmax, l2_reread_softmax, multirow_softmax,
                          pipelined_softmax, resident_softmax, staged_softmax, clustered_softmax,
                          unaligned_cooperative_softmax, unaligned_softmax)
    return {"multirow": multirow_softmax, "fused": fused_softmax, "cooperative": cooperative_softmax,
            "pipelined": pipelined_softmax, "l2_reread": l2_reread_softmax, "staged": staged_softmax,
            "resident": resident_softmax, "clustered": clustered_softmax, "unaligned": unaligned_softmax,
            "unaligned_cooperative": unaligned_cooperative_softmax}


def choose_unaligned(n_cols: int, dtype: torch.dtype):
    """(kernel name, knobs) for rows of ``n_cols`` that do not start on 16 bytes (``kernels/unaligned.py``), or
    None where the register kernels keep them (``UNALIGNED_FORWARD``)."""
    size = element_size(dtype)
    width = n_cols + 16 // size - 1  # the row's window: up to VEC - 1 elements of the vector before it
    rule = pick(UNALIGNED_FORWARD[size], width)
    if rule is None or rule[1] is not None:
        return rule and (rule[0], dict(rule[1]))
    name, knobs = pick(FORWARD[size], width)  # "tile": the register kernels' rows per program and warps
    if name in GLUON_KERNELS:
        name, knobs = pick(GLUON_FALLBACK[size], width)
    if name == "multirow":
        return "unaligned", dict(ROWS=knobs["ROWS"], num_warps=knobs["num_warps"])
    if name == "fused":
        return "unaligned", dict(ROWS=1, num_warps=knobs["num_warps"])
    return None


def choose(n_rows: int, n_cols: int, dtype: torch.dtype):
    """(kernel name, launcher, keyword knobs) the dispatcher uses for a [n_rows, n_cols] input whose rows are
    contiguous and start on 16 bytes; ``softmax_2d`` sends other rows that would take a Gluon kernel
    (``resident``, ``clustered``) to ``GLUON_FALLBACK``."""
    name, knobs = pick(FORWARD[element_size(dtype)], n_cols)
    if name in GLUON_KERNELS and not _gluon_tuned():  # (Triton's CPU interpreter cannot run Gluon kernels at all)
        name, knobs = pick(GLUON_FALLBACK[element_size(dtype)], n_cols)
    return name, _launchers()[name], dict(knobs)


def _gluon_tuned() -> bool:
    """A GPU of the kind the Gluon kernels were tuned on (this process's current one): compute capability 9.0
    (H100, H200). Newer GPUs keep the register kernels until someone measures the Gluon ones there."""
    if not ON_GPU:
        return False
    from .kernels._launch import device_limits

    return device_limits(torch.device("cuda", torch.cuda.current_device()))[0] == GLUON_CAPABILITY


def softmax_2d(x2: torch.Tensor) -> torch.Tensor:
    """Softmax over the last dim of a 2-D tensor whose rows are contiguous, on the kernel ``choose`` picks."""
    name, knobs = _runnable(x2)
    return _launchers()[name](x2, **knobs)


def _runnable(x2: torch.Tensor) -> tuple[str, dict]:
    """``choose``'s kernel and knobs for ``x2``, or the register kernel it replaced (``GLUON_FALLBACK``) where a
    Gluon kernel cannot take x2: rows not on 16 bytes, a GPU without the room."""
    n_rows, n_cols = x2.shape
    name, _, knobs = choose(n_rows, n_cols, x2.dtype)
    if name in GLUON_KERNELS and _kernel_module(name).refusal(x2, **knobs):
        name, knobs = pick(GLUON_FALLBACK[element_size(x2.dtype)], n_cols)
    if name != "l2_reread" and _kernel_module("unaligned").takes(x2):  # rows off 16 bytes: unaligned.py
        name, knobs = choose_unaligned(n_cols, x2.dtype) or (name, knobs)
    return name, dict(knobs)


PLANNED = ("multirow", "fused", "resident", "clustered", "unaligned")  # the kernels with a relaunch plan (launch_setup)


def _kernel_module(name: str):
    """The module of kernel ``name`` (``kernels/<name>.py``): its ``launch_setup`` and, for Gluon ones, ``refusal``."""
    from . import kernels  # (its submodules are its attributes once it is imported)

    return getattr(kernels, name)


def plan_2d(x2: torch.Tensor):
    """``run(y2.data_ptr(), x2.data_ptr())`` for inputs like ``x2`` (2-D, contiguous rows, same shape, strides,
    dtype, device and 16-byte alignment): the chosen kernel, compiled, launched with no checks and no
    choices; ``y2`` is a contiguous output of the same shape. None when the kernel cannot be relaunched that
    way (the CPU interpreter compiles nothing; cooperative kernels need fresh counters every call). Rows that
    are not whole 16-byte vectors are planned on the register kernels: whether a Gluon kernel may take them
    depends on the memory after x, which the plan's key does not hold."""
    from .kernels._launch import relauncher

    if x2.device.type != "cuda" or x2.numel() == 0:
        return None
    n_rows, n_cols = x2.shape
    name, knobs = _runnable(x2)
    if name in GLUON_KERNELS and n_cols % (16 // x2.element_size()):
        name, knobs = pick(GLUON_FALLBACK[element_size(x2.dtype)], n_cols)
    if name not in PLANNED:
        return None
    y2 = torch.empty(x2.shape, dtype=x2.dtype, device=x2.device)
    kernel, grid, args, options = _kernel_module(name).launch_setup(y2, x2, **knobs)
    if name == "unaligned":  # its pointers are the windows' (rounded down to 16 bytes): shift each call's too
        run = relauncher(kernel, grid, args, **options)
        if run is None:
            return None
        back = x2.data_ptr() - args[1].data_ptr()  # (the same for every x of this plan: its key holds ptr & 15)
        return lambda out_ptr, in_ptr: run(out_ptr, in_ptr - back)
    if name != "clustered":
        return relauncher(kernel, grid, args, **options)
    run = relauncher(kernel, grid, args, per_call=3, **options)  # the partials: new memory each call (streams)
    size, device = args[2].numel(), x2.device

    def run_clustered(out_ptr, in_ptr):
        partials = torch.empty(size, dtype=torch.float32, device=device)
        run(out_ptr, in_ptr, partials.data_ptr())

    return run_clustered
