"""The dispatcher behind ``softmax_lab.softmax``: which kernel runs for a 2-D input, and a fast launch path.

The tuned numbers are rule lists in ``kernels/tuning.py`` (``pick(rules, key)``: the first rule whose limit is
>= the key); this module only applies them, and imports every kernel it may launch at the top (``LAUNCHERS``),
so a tensor can be followed from ``softmax_2d`` into its kernel. The rules, by row length (``FORWARD``):

* short rows: ``multirow``, several rows per program; rows a little past a power of two (bf16 130, 1100, 8200;
  fp32 77, 130, 2050): its ``tail=True`` tiles, the power of two in one tile and the rest in a narrow second one
  (``TAIL_TILES``);
* rows that fit one block: ``fused``, one row per program, more warps for longer rows, fewer for rows a little
  longer than a power of two (their blocks are up to half padding);
* medium rows on a GPU: ``resident`` (a Gluon kernel: the row sits in shared memory instead of registers, so
  several programs share a multiprocessor);
* rows too long for one program's shared memory: ``clustered`` (a Gluon kernel: a row split over a cluster of
  programs, each holding its slice in shared memory), or, where it measured faster, ``clustered_tma`` (each slice
  copied by TMA, held in registers or streamed from shared memory: fp32 rows of 49,152-262,144, 16-bit rows of
  57,345-262,144);
* longer rows: ``cooperative``, each row shared by several programs that keep their chunk in registers and
  exchange their partial ``(m, l)``, so the row is read once; the longest fp32 rows: ``l2_reread``, which reads
  its chunk again from L2 instead of holding it in registers.

Where each range starts and ends, per element size, is in ``FORWARD`` (``kernels/tuning.py``); why, with the
measurements, in ``docs/performance.md``, "How the dispatcher chooses".

The Gluon kernels run only where they were tuned (a GPU of compute capability ``GLUON_CAPABILITY``), on rows
that start on 16 bytes and fit the GPU's shared memory; elsewhere, the CPU interpreter included, the register
kernels they replaced run (``GLUON_FALLBACK``). Rows that do not start on 16 bytes (odd widths like 50,257, odd
strides, an odd first element) would be read one element at a time by the register kernels;
``kernels/unaligned.py`` reads them in whole vectors from the boundary before each row, where that measured
faster (``UNALIGNED_FORWARD``, ``choose_unaligned``); on a GPU, rows whose window fits shared memory wait there
(``kernels/unaligned_resident.py``, a Gluon kernel; elsewhere ``UNALIGNED_GLUON_FALLBACK``). Why each limit sits
where it does: docs/performance.md, "How the dispatcher chooses".

``choose(n_rows, n_cols, dtype)`` gives (kernel name, launcher, knobs) for rows on 16 bytes; ``softmax_2d(x)`` runs
what suits x itself (``_runnable``).

**The fast path.** On small inputs a call's cost is Python, not the GPU (checks, choices and Triton's own launch
code take longer than the kernel). ``plan_2d(x)`` does all of that once per kind of input (shape, strides, dtype,
device, pointer alignment) and returns a function that only allocates the output and launches the compiled
kernel (``kernels._launch.relauncher``); ``op.softmax`` keeps one per kind.

Any shape, any ``dim``, ``dtype=``, masks and autograd are the operator's job (``op.py``).
"""
from __future__ import annotations

import torch

from .device import ON_GPU
from .kernels import (backward, clustered, clustered_tma, clustered_tma_backward, cooperative, fused, l2_reread,
                      multirow, pipelined, resident, staged, unaligned, unaligned_resident)
from .kernels._launch import (device_limits, next_power_of_2, part_vector, power_of_2_at_most, relauncher,
                              scratch_pointers)
# The policy this module applies (MULTIROW_TILE: also read here by chapter 7's checks).
from .kernels.tuning import (FORWARD, GLUON_CAPABILITY, GLUON_FALLBACK, GLUON_KERNELS, MULTIROW_TILE, TAIL_MAX,
                             TAIL_PART, TAIL_TILES, UNALIGNED_BACKWARD, UNALIGNED_FORWARD, UNALIGNED_GLUON_FALLBACK,
                             element_size, pick)

__all__ = ["FORWARD", "GLUON_CAPABILITY", "GLUON_FALLBACK", "GLUON_KERNELS", "LAUNCHERS", "MULTIROW_TILE", "PLANNED",
           "REFUSALS", "UNALIGNED_BACKWARD", "UNALIGNED_FORWARD", "choose", "choose_unaligned", "element_size", "pick",
           "plan_2d", "plan_backward_2d", "softmax_2d"]

# Every kernel the dispatcher may run, by the name the rule lists use.
LAUNCHERS = {"multirow": multirow.multirow_softmax, "fused": fused.fused_softmax,
             "cooperative": cooperative.cooperative_softmax, "pipelined": pipelined.pipelined_softmax,
             "l2_reread": l2_reread.l2_reread_softmax, "staged": staged.staged_softmax,
             "resident": resident.resident_softmax, "clustered": clustered.clustered_softmax,
             "clustered_tma": clustered_tma.clustered_tma_softmax, "unaligned": unaligned.unaligned_softmax,
             "unaligned_cooperative": unaligned.unaligned_cooperative_softmax,
             "unaligned_resident": unaligned_resident.unaligned_resident_softmax}
# Why a Gluon kernel cannot take an input ('' when it can): the GPU's room, the row's alignment.
REFUSALS = {"resident": resident.refusal, "clustered": clustered.refusal, "clustered_tma": clustered_tma.refusal}
# The kernels with a relaunch plan: ``launch_setup(y, x, **knobs)`` gives (kernel, grid, args, options).
PLANNED = {"multirow": multirow.launch_setup, "fused": fused.launch_setup, "resident": resident.launch_setup,
           "clustered": clustered.launch_setup, "unaligned": unaligned.launch_setup,
           "unaligned_resident": unaligned_resident.launch_setup}
# The kernels that make their own relaunch plan: ``plan(y, x, **knobs)`` gives ``run(out_ptr, in_ptr)`` (clustered_tma:
# its input goes in as TMA descriptors, which the plan moves to each call's x).
OWN_PLANS = {"clustered_tma": clustered_tma.plan}
# The cooperative kernels: ``launch_setup(y, x, **knobs)`` gives (kernel, grid, args, options, sizes, one), args[2:4]
# their scratch (``kernels._launch.scratch``: per stream, counters the kernels set back to 0 as they finish).
COOPERATIVE = {"cooperative": cooperative.launch_setup, "unaligned_cooperative": unaligned.cooperative_launch_setup,
               "l2_reread": l2_reread.launch_setup}
# The kernels whose launch_setup passes window pointers (rounded down to 16 bytes): a plan shifts each call's too.
WINDOWED = ("unaligned", "unaligned_resident")


def choose_unaligned(n_cols: int, dtype: torch.dtype, rules=None):
    """(kernel name, knobs) for rows of ``n_cols`` that do not start on 16 bytes (``kernels/unaligned.py``), or
    None where the register kernels keep them (``rules``: ``UNALIGNED_FORWARD``, or ``UNALIGNED_GLUON_FALLBACK``)."""
    size = element_size(dtype)
    width = n_cols + 16 // size - 1  # the row's window: up to VEC - 1 elements of the vector before it
    rule = pick((rules or UNALIGNED_FORWARD)[size], width)
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
    (``resident``, ``clustered``, ``clustered_tma``) to ``GLUON_FALLBACK``."""
    name, knobs = pick(FORWARD[element_size(dtype)], n_cols)
    tail = tail_knobs(n_cols, dtype)
    if tail:
        return "multirow", LAUNCHERS["multirow"], tail
    if name in GLUON_KERNELS and not _gluon_tuned():  # (Triton's CPU interpreter cannot run Gluon kernels at all)
        name, knobs = pick(GLUON_FALLBACK[element_size(dtype)], n_cols)
    return name, LAUNCHERS[name], dict(knobs)


def tail_knobs(n_cols: int, dtype: torch.dtype) -> dict | None:
    """``multirow``'s knobs with ``tail=True`` for rows a little past a power of two (``TAIL_TILES``), or None:
    16-bit rows, and fp32 rows that are not whole 16-byte vectors, whose part past the largest power of two they
    hold fits a tile of at most ``1 / TAIL_PART`` of it and ``TAIL_MAX`` elements."""
    if n_cols < 2:
        return None
    size = element_size(dtype)
    main = power_of_2_at_most(n_cols)
    tail = next_power_of_2(n_cols - main)
    if n_cols == main or tail > min(main // TAIL_PART[size], TAIL_MAX) or (size == 4 and n_cols % 4 == 0):
        return None
    tile = pick(TAIL_TILES[size], main)
    return tile and dict(ROWS=tile[0], num_warps=tile[1], tail=True)


def _line_costs_room(x2: torch.Tensor, knobs: dict) -> bool:
    """Whether ``unaligned_resident``'s window from a line before the row takes more shared memory than one from
    the vector before it (a chunk more: fewer programs a multiprocessor), or cannot run at all."""
    warps, size = knobs["num_warps"], x2.element_size()
    room = unaligned_resident.shared_window(x2.shape[1], size, warps, knobs["line"])[0]
    return room > unaligned_resident.shared_window(x2.shape[1], size, warps)[0] or bool(
        unaligned_resident.refusal(x2, None, **knobs))


def _gluon_tuned() -> bool:
    """A GPU of the kind the Gluon kernels were tuned on (this process's current one): compute capability 9.0
    (H100, H200). Newer GPUs keep the register kernels until someone measures the Gluon ones there."""
    if not ON_GPU:
        return False
    return device_limits(torch.device("cuda", torch.cuda.current_device()))[0] == GLUON_CAPABILITY


def softmax_2d(x2: torch.Tensor) -> torch.Tensor:
    """Softmax over the last dim of a 2-D tensor whose rows are contiguous, on the kernel ``choose`` picks."""
    name, knobs = _runnable(x2)
    return LAUNCHERS[name](x2, **knobs)


def _runnable(x2: torch.Tensor) -> tuple[str, dict]:
    """``choose``'s kernel and knobs for ``x2``, or the register kernel it replaced (``GLUON_FALLBACK``) where a
    Gluon kernel cannot take x2: rows not on 16 bytes, a GPU without the room."""
    n_rows, n_cols = x2.shape
    name, _, knobs = choose(n_rows, n_cols, x2.dtype)
    # 16-bit rows of whole 8-byte pieces that FORWARD gives a register kernel: it moves 8 bytes at a time there
    pieces = name in ("fused", "multirow") and x2.data_ptr() % 16 == 0 and part_vector(n_cols, x2) >= 4
    if name in GLUON_KERNELS and REFUSALS[name](x2, **knobs):
        name, knobs = pick(GLUON_FALLBACK[element_size(x2.dtype)], n_cols)
    if name != "l2_reread" and not pieces and not knobs.get("tail") and unaligned.takes(x2):  # rows off 16 bytes
        register = name, knobs
        name, knobs = choose_unaligned(n_cols, x2.dtype) or register
        if name == "unaligned_resident" and knobs.get("line", 16) != 16 and _line_costs_room(x2, knobs):
            knobs = dict(knobs, line=16)  # (a window from the vector before the row: less room)
        if name == "unaligned_resident" and (not _gluon_tuned() or unaligned_resident.refusal(x2, None, **knobs)):
            name, knobs = choose_unaligned(n_cols, x2.dtype, UNALIGNED_GLUON_FALLBACK) or register
    return name, dict(knobs)


def plan_cooperative(setup, tensors):
    """``run(*addresses)`` for a cooperative kernel's launch ``setup`` (``(kernel, grid, args, options, sizes,
    one)`` of a ``launch_setup``) made for ``tensors`` (forward: y, x; backward: dx, y, dy): the compiled kernel
    launched on new tensors like them, given as addresses, and this stream's scratch (``kernels._launch.scratch``:
    no allocation, no zeroing per call). None when one launch does not fit (its programs could not all wait at
    once) or nothing compiles (the CPU interpreter)."""
    kernel, grid, args, options, (n_floats, n_counts), one = setup
    if not one:
        return None
    options = {k: v for k, v in options.items() if k != "n_chunks"}
    n = len(tensors)
    run = relauncher(kernel, grid, args, per_call=n + 2, PUBLISH=True, FINISH=True, **options)
    if run is None:
        return None
    # The setup's pointers are the tensors', or those of the windows before them: each call's shift alike.
    backs = [t.data_ptr() - a.data_ptr() for t, a in zip(tensors, args)]
    device = tensors[0].device
    if n == 2:
        back_y, back_x = backs

        def run_forward(out_ptr, in_ptr):
            floats, counts, _buffers = scratch_pointers(device, n_floats, n_counts)
            run(out_ptr - back_y, in_ptr - back_x, floats, counts)

        return run_forward
    back_dx, back_y, back_dy = backs

    def run_backward(dx_ptr, y_ptr, dy_ptr):
        floats, counts, _buffers = scratch_pointers(device, n_floats, n_counts)
        run(dx_ptr - back_dx, y_ptr - back_y, dy_ptr - back_dy, floats, counts)

    return run_backward


def plan_2d(x2: torch.Tensor):
    """``run(y2.data_ptr(), x2.data_ptr())`` for inputs like ``x2`` (2-D, contiguous rows, same shape, strides,
    dtype, device and 16-byte alignment): the chosen kernel, compiled, launched with no checks and no
    choices; ``y2`` is a contiguous output of the same shape. None when the kernel cannot be relaunched that
    way (the CPU interpreter compiles nothing; a cooperative kernel whose row's programs do not all fit the GPU
    at once takes two launches and new counters). Rows that
    are not whole 16-byte vectors are planned on the register kernels: whether a Gluon kernel may take them
    depends on the memory after x, which the plan's key does not hold."""
    if x2.device.type != "cuda" or x2.numel() == 0:
        return None
    n_rows, n_cols = x2.shape
    name, knobs = _runnable(x2)
    if name in GLUON_KERNELS and n_cols % (16 // x2.element_size()):
        name, knobs = pick(GLUON_FALLBACK[element_size(x2.dtype)], n_cols)
    if name not in PLANNED and name not in COOPERATIVE and name not in OWN_PLANS:
        return None
    y2 = torch.empty(x2.shape, dtype=x2.dtype, device=x2.device)
    if name in OWN_PLANS:
        return OWN_PLANS[name](y2, x2, **knobs)
    if name in COOPERATIVE:
        return plan_cooperative(COOPERATIVE[name](y2, x2, **knobs), (y2, x2))
    kernel, grid, args, options = PLANNED[name](y2, x2, **knobs)
    if name in WINDOWED:  # its pointers are the windows' (rounded down to 16 bytes): shift each call's too
        run = relauncher(kernel, grid, args, **options)
        if run is None:
            return None
        back = x2.data_ptr() - args[1].data_ptr()  # (the same for every x of this plan: its key holds ptr & 15)
        return lambda out_ptr, in_ptr: run(out_ptr, in_ptr - back)
    if name != "clustered" or options["DSMEM"]:
        return relauncher(kernel, grid, args, **options)
    run = relauncher(kernel, grid, args, per_call=3, **options)  # the partials: new memory each call (streams)
    size, device = args[2].numel(), x2.device

    def run_clustered(out_ptr, in_ptr):
        partials = torch.empty(size, dtype=torch.float32, device=device)
        run(out_ptr, in_ptr, partials.data_ptr())

    return run_clustered


def plan_backward_2d(y2: torch.Tensor, dy2: torch.Tensor):
    """``run(dx.data_ptr(), y.data_ptr(), dy.data_ptr())`` for inputs like ``y2``, ``dy2`` (2-D, contiguous rows,
    same shapes, strides, dtype, device and 16-byte alignment; ``dx`` a new contiguous tensor): the kernel that
    ``softmax_backward`` launches with no knobs (``kernels.backward.launch_setup``), compiled, launched with no
    checks; ``plan_2d`` for the backward pass. None where that needs two launches, or on the CPU."""
    if y2.device.type != "cuda" or y2.numel() == 0:
        return None
    dx2 = torch.empty(y2.shape, dtype=y2.dtype, device=y2.device)
    knobs = backward.tma_knobs(y2, dy2, dx2)
    if knobs:  # (its TMA descriptors move to each call's y and dy: a plan of its own)
        return clustered_tma_backward.plan(dx2, y2, dy2, **knobs)
    setup = backward.launch_setup(dx2, y2, dy2)
    if setup[4] is not None:
        return plan_cooperative(setup, (dx2, y2, dy2))
    kernel, grid, args, options, _, _ = setup
    if options.get("DSMEM") is False:  # a clustered backward's parts in global memory would need a buffer per call
        return None
    run = relauncher(kernel, grid, args, per_call=3, **options)
    if run is None:
        return None
    back_dx, back_y, back_dy = [t.data_ptr() - a.data_ptr() for t, a in zip((dx2, y2, dy2), args)]
    if back_dx == back_y == back_dy == 0:
        return run
    return lambda dx_ptr, y_ptr, dy_ptr: run(dx_ptr - back_dx, y_ptr - back_y, dy_ptr - back_dy)
