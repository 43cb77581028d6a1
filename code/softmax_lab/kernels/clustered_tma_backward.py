"""The clustered backward with TMA copies: dx = y·(dy - Σ dy·y) over a row split across a cluster of programs,
each program's slices of y and dy copied by the Tensor Memory Accelerator, the partial dots sent into the partners'
shared memory (the forward's machinery: ``clustered_tma.py``).

``clustered_tma_backward_kernel(dx_ptr, y_big, y_box, dy_big, dy_box, y_ptr, dy_ptr, dx_stride_v, y_stride_v,
dy_stride_v, N_COLS, SLICE, MAIN, TAIL, PARTS, OUT_VEC, HELD)``: one cluster of PARTS programs per row, program p
taking columns [p·SLICE, (p+1)·SLICE) of y and dy (their TMA descriptors, a box a warp and one box, as the
forward's); dx through a pointer; y and dy through pointers too for HELD columns (below). In each program:

1. thread 0 sets up the exchange's mbarrier (PARTS floats to come); every thread arrives at the cluster barrier;
2. the slices of y and dy copied into shared memory by TMA, every copy counted on one mbarrier (with HELD, the
   columns past MAIN loaded into registers meanwhile, below);
3. wait on it, invalidate it (its bytes may become the reductions' scratch: the forward's race, round 14);
   the slice's Σ dy·y, read from shared memory a sub-tile at a time (and from the held registers);
4. thread t < PARTS sends it into program t's slot (``st.async``); each program waits for the PARTS parts and adds
   them up in rank order (so every program gets the same sum);
5. dx = y·(dy - s) from shared memory (and the held registers), stored.

A slice longer than a power of two takes a MAIN tile and a TAIL tile (``tiles``): 151,936 fp32 columns on 16
programs, 9,728 a slice, 8,192 + 2,048 of y and of dy, 80 KB, two programs a multiprocessor. With HELD (the
launcher's ``held=True``) the columns past MAIN are loaded by the threads into registers instead (plain 16-byte
loads, issued before the wait of step 3 so they travel with the copies): 64 KB, three programs a multiprocessor.

Rows that are not whole 16-byte vectors have no row stride TMA takes: their descriptors are flat (the rows laid
end to end as one line, ``is_flat``), and since a box must start on 16 bytes (one that did not stopped the GPU with
an illegal instruction), each program's copy starts on the vector before its slice, ``lead`` elements early: its
tiles hold a box more and its reads shift by ``lead``. dx, flat too, is stored where the copy's elements came
from: the vectors wholly this program's 16 bytes at a time, the two it shares with its neighbours an element at a
time (all of it an element at a time ran 16-bit rows at 38-41% of copy: docs/performance.md, round 15). The
dispatcher takes it where ``tuning.TMA_BACKWARD_FLAT`` says so.

``clustered_backward.py`` does the same with ``cp.async`` copies (one instruction per 16-byte vector) and a
barrier of the whole cluster for the exchange. Hopper GPUs only (TMA, clusters); y, dy and dx of one dtype, rows
that start on 16 bytes, and rows one after another where they are not whole vectors; dx may be y or dy itself
(each program reads its slices whole, the held columns too, before it sends its part, so before any program of
the cluster writes; a flat copy also reads up to a vector of the programs before and after it, which they may
have overwritten, but those elements are never used: ``_sub_tile`` zeroes them and the stores leave them out).
"""
import torch
from triton.experimental import gluon
from triton.experimental.gluon import language as gl
from triton.experimental.gluon.language.nvidia.hopper import mbarrier
from triton.runtime.jit import constexpr_function

from ._launch import backward_inputs, device_limits, device_refusal, row_vector, vector_refusal
from .clustered import MAX_PARTS, PORTABLE_PARTS, split_layout
from .clustered_tma import (BOX, _issue, _sub_tile, _sub_tiles, cluster_fits, copy_plan, descriptors, full_parts,
                            init_asm, own_barrier, plan_bytes, send_and_wait, split_shared, tiles)
from .clustered_tma import SEND_REGS
from .clustered_tma import _Descriptor

NAME = "clustered_tma_backward"
MAX_HELD = 64  # held=True: elements of y and dy a thread keeps in registers, at most (bf16 98,304 on 2 programs of 4
# warps holds 256: 255 registers and spills; the dispatcher's fp32 151,936 on 16 of 8 holds 16, 40 registers)


@constexpr_function
def sum_exchange_asm(parts):
    """Step 4: $0 = the sum over the cluster of each program's $2; $1 the exchange's mbarrier (``init_asm``, one
    float a slot)."""
    adds = "\n".join(f"    ld.shared.f32 %t, [%bar+{8 + 4 * i}];\n    add.f32 $0, $0, %t;" for i in range(1, parts))
    return gl.constexpr(f"""{{
{SEND_REGS}
    .reg .f32 %t;
{send_and_wait(parts, "$1", "$2", words=1)}
    ld.shared.f32 $0, [%bar+8];
{adds}
}}""")


@gluon.jit
def _copies_of_both(y_big, y_box, dy_big, dy_box, bar, y_main, y_tail, dy_main, dy_tail, row, start,
                    PLAN: gl.constexpr, MAIN: gl.constexpr):
    """Step 2: arm ``bar`` with the bytes of both plans (one arrival), then the copies of y and of dy."""
    BYTES: gl.constexpr = plan_bytes(PLAN, y_big.block_shape[-1], y_box.block_shape[-1],
                                     y_box.dtype.primitive_bitwidth // 8)
    mbarrier.expect(bar, 2 * BYTES)
    _issue(y_big, y_box, bar, y_main, y_tail, row, start, PLAN, MAIN)
    _issue(dy_big, dy_box, bar, dy_main, dy_tail, row, start, PLAN, MAIN)


@gluon.jit
def _dot(y_smem, dy_smem, n, part, lead, SUB: gl.constexpr, START: gl.constexpr, SLICE: gl.constexpr,
         N_COLS: gl.constexpr, layout: gl.constexpr):
    """Σ dy·y over the first n sub-tiles of a tile of y and dy, per program (0 past the slice; ``lead``: a flat
    copy's elements before it, or None, ``_sub_tile``)."""
    acc = gl.full([y_smem.shape[0], SUB], 0.0, gl.float32, layout)
    for k in range(n):
        y = _sub_tile(y_smem, k, SUB, START, part, SLICE, N_COLS, layout, 0.0, lead)[0]
        acc += y * _sub_tile(dy_smem, k, SUB, START, part, SLICE, N_COLS, layout, 0.0, lead)[0]
    return gl.sum(acc, axis=1)


@gluon.jit
def _store_dx(y_smem, dy_smem, s, n, dst, part, lead, SUB: gl.constexpr, START: gl.constexpr, SLICE: gl.constexpr,
              N_COLS: gl.constexpr, layout: gl.constexpr, FLAT: gl.constexpr, valid):
    """Step 5 over the first n sub-tiles of a tile: dx = y·(dy - s). Flat: ``dst`` is where each program's copy
    starts in dx (on 16 bytes), ``valid`` this program's tile elements up to its last column (``lead`` + its
    columns)."""
    for k in range(n):
        y, cols, ok = _sub_tile(y_smem, k, SUB, START, part, SLICE, N_COLS, layout, 0.0, lead)
        d = _sub_tile(dy_smem, k, SUB, START, part, SLICE, N_COLS, layout, 0.0, lead)[0]
        dx = (y * (d - s)).to(dst.dtype.element_ty)
        if FLAT:
            _store_flat(dst, dx, ok, k, lead, SUB, START, part, SLICE, N_COLS, layout, valid)
        else:
            gl.store(dst + cols, dx, mask=ok)


@gluon.jit
def _store_flat(dst, dx, ok, k, lead, SUB: gl.constexpr, START: gl.constexpr, part, SLICE: gl.constexpr,
                N_COLS: gl.constexpr, layout: gl.constexpr, valid):
    """A flat sub-tile of dx stored where element i of the tile goes: dst + i. The 16-byte vectors wholly this
    program's as vectors (an element at a time, a 16-bit row ran at 38-41% of copy: round 15); the vectors that
    hold its first and its last columns, shared with the programs before and after it (of its cluster, or of the
    row before or after), an element at a time, in the sub-tiles that hold them."""
    VEC: gl.constexpr = 128 // dst.dtype.element_ty.primitive_bitwidth
    i = (START + k * SUB + gl.arange(0, SUB, layout=gl.SliceLayout(0, layout)))[None, :]
    first = (lead + VEC - 1) // VEC * VEC  # (its first whole vector and the end of its last, in tile elements)
    end = (lead + gl.minimum(N_COLS - part * SLICE, SLICE)) // VEC * VEC
    whole = (i >= first[:, None]) & (i < end[:, None])
    gl.store(dst + i, dx, mask=whole)
    at = START + k * SUB
    own_end = valid // VEC * VEC  # (end, for this program: where its last, shared vector starts)
    if (at == 0) | ((at <= own_end) & (own_end < at + SUB)):
        gl.store(dst + i, dx, mask=ok & ~whole)


@gluon.jit
def clustered_tma_backward_kernel(dx_ptr, y_big, y_box, dy_big, dy_box, y_ptr, dy_ptr, dx_stride_v, y_stride_v,
                                  dy_stride_v, N_COLS: gl.constexpr, SLICE: gl.constexpr, MAIN: gl.constexpr,
                                  TAIL: gl.constexpr, PARTS: gl.constexpr, OUT_VEC: gl.constexpr,
                                  HELD: gl.constexpr = 0):
    dtype: gl.constexpr = y_box.dtype
    VEC: gl.constexpr = 128 // dtype.primitive_bitwidth
    SUB: gl.constexpr = 32 * gl.num_warps() * VEC  # (a 16-byte vector of y and one of dy a thread at a time)
    FLAT: gl.constexpr = len(y_box.block_shape) == 1  # (rows laid end to end: ``is_flat``)
    layout: gl.constexpr = split_layout(VEC, gl.num_warps(), PARTS)
    part = gl.arange(0, PARTS, layout=gl.SliceLayout(1, layout))
    xchg = gl.inline_asm_elementwise(init_asm(PARTS, 1), "=r", [], dtype=gl.int32, is_pure=False, pack=1)  # 1.
    shared: gl.constexpr = split_shared(dtype.primitive_bitwidth, PARTS)
    y_main = gl.allocate_shared_memory(dtype, [PARTS, MAIN], shared)
    dy_main = gl.allocate_shared_memory(dtype, [PARTS, MAIN], shared)
    if TAIL > 0:
        y_tail = gl.allocate_shared_memory(dtype, [PARTS, TAIL], shared)
        dy_tail = gl.allocate_shared_memory(dtype, [PARTS, TAIL], shared)
    else:
        y_tail, dy_tail = y_main, dy_main
    row = gl.program_id(0)  # (the cluster's number)
    rank = gl.inline_asm_elementwise("mov.u32 $0, %cluster_ctarank;", "=r", [], dtype=gl.int32, is_pure=True,
                                     pack=1)
    bar = gl.allocate_shared_memory(gl.int64, [1], own_barrier(PARTS))
    mbarrier.init(bar, count=1)
    if FLAT:  # the slice's first element in the whole, and the vector before it, where its copies start
        first = row * N_COLS + rank * SLICE
        start = first // VEC * VEC
        lead = first - start
        firsts = row * N_COLS + part * SLICE  # (the same in the layout's rows, one a program)
        starts = firsts // VEC * VEC
        leads = firsts - starts
    else:
        start = rank * SLICE
        lead = 0
        leads = None  # (the tiles start on the slices: ``_sub_tile``)
    ROOM: gl.constexpr = VEC - 1 if FLAT else 0  # (a flat copy's elements before the slice, at most)
    BIG: gl.constexpr = y_big.block_shape[-1]  # (the copies' sizes: a box a warp, and one box)
    BOX_: gl.constexpr = y_box.block_shape[-1]
    FULL: gl.constexpr = full_parts(N_COLS, SLICE, PARTS)
    if rank < FULL:  # 2. slices wholly in the row
        _copies_of_both(y_big, y_box, dy_big, dy_box, bar, y_main, y_tail, dy_main, dy_tail, row, start,
                        copy_plan(MAIN, TAIL, SLICE + ROOM, BIG, BOX_), MAIN)
    for r in gl.static_range(FULL, PARTS):  # 2. slices reaching past the row's end: plans of their own
        if rank == r:
            _copies_of_both(y_big, y_box, dy_big, dy_box, bar, y_main, y_tail, dy_main, dy_tail, row, start,
                            copy_plan(MAIN, TAIL, N_COLS - r * SLICE + ROOM, BIG, BOX_), MAIN)
    if HELD > 0:  # 2. the slice's columns past MAIN loaded into registers, on their way during the copies
        h_offs = MAIN + gl.arange(0, HELD, layout=gl.SliceLayout(0, layout))
        h_cols = (part * SLICE)[:, None] + h_offs[None, :]
        h_ok = h_offs[None, :] < gl.minimum(N_COLS - part * SLICE, SLICE)[:, None]
        y_h = gl.load(y_ptr + row.to(gl.int64) * (y_stride_v * VEC) + h_cols, mask=h_ok, other=0.0)
        dy_h = gl.load(dy_ptr + row.to(gl.int64) * (dy_stride_v * VEC) + h_cols, mask=h_ok, other=0.0)
    mbarrier.wait(bar, 0)  # 3.
    mbarrier.invalidate(bar)
    S_M: gl.constexpr = min(SUB, MAIN)  # (the sub-tiles of the two tiles)
    S_T: gl.constexpr = min(SUB, TAIL) if TAIL > 0 else 1
    valid = gl.minimum(N_COLS - rank * SLICE, SLICE) + lead  # (the tiles' elements up to this program's last
    # column: the loops stop past them)
    n_main = _sub_tiles(valid, 0, MAIN, S_M)
    n_tail = _sub_tiles(valid, MAIN, TAIL, S_T)
    total = _dot(y_main, dy_main, n_main, part, leads, S_M, 0, SLICE, N_COLS, layout)
    if TAIL > 0:
        total += _dot(y_tail, dy_tail, n_tail, part, leads, S_T, MAIN, SLICE, N_COLS, layout)
    if HELD > 0:
        total += gl.sum(y_h.to(gl.float32) * dy_h.to(gl.float32), axis=1)  # (kept in their dtype till used)
    xchg_p = gl.full([PARTS], 0, gl.int32, gl.SliceLayout(1, layout)) + xchg
    s = gl.inline_asm_elementwise(sum_exchange_asm(PARTS), "=f,r,f", [xchg_p, total], dtype=gl.float32,  # 4.
                                  is_pure=False, pack=1)[:, None]
    if FLAT:  # (dx flat too, on 16 bytes: refusal)
        dst = dx_ptr + starts[:, None]
    else:
        dst = dx_ptr + row.to(gl.int64) * (dx_stride_v * OUT_VEC)
    _store_dx(y_main, dy_main, s, n_main, dst, part, leads, S_M, 0, SLICE, N_COLS, layout, FLAT, valid)  # 5.
    if TAIL > 0:
        _store_dx(y_tail, dy_tail, s, n_tail, dst, part, leads, S_T, MAIN, SLICE, N_COLS, layout, FLAT, valid)
    if HELD > 0:
        dx_h = y_h.to(gl.float32) * (dy_h.to(gl.float32) - s)
        gl.store(dst + h_cols, dx_h.to(dst.dtype.element_ty), mask=h_ok)


def refusal(y: torch.Tensor, dy: torch.Tensor, dx: torch.Tensor, parts: int | None = None,
            num_warps: int | None = None, held: bool = False) -> str:
    """Why this GPU, these tensors or the knobs cannot take the kernel, or '' (knobs None: the defaults, 8 and 4)."""
    parts, num_warps = parts or 8, num_warps or 4
    if not y.dtype == dy.dtype == dx.dtype:
        return (f"{NAME} takes y, dy and dx of one dtype; got {y.dtype}, {dy.dtype} and {dx.dtype}: use "
                "softmax_backward")
    if not 2 <= parts <= MAX_PARTS:
        return f"{NAME}: parts must be 2 to {MAX_PARTS} (programs in a cluster), got {parts}"
    if num_warps not in (4, 8):
        return (f"{NAME}: num_warps must be 4 or 8, got {num_warps} (with fewer, the unrolled copies spill "
                "registers; more were not measured)")
    if y.numel() == 0:
        return ""
    flat = is_flat(y)
    if flat and held:
        return (f"{NAME}: held=True is for rows of whole 16-byte vectors; a row of {y.shape[1]} elements is copied "
                "as one line (flat): leave held False")
    options = tiles(y.shape[1], parts, num_warps, BOX if flat else 0)
    if held:
        per_thread = 2 * options["TAIL"] // (32 * num_warps)
        if per_thread > MAX_HELD:
            return (f"{NAME}: held=True would keep {per_thread} elements of y and dy a thread in registers, at most "
                    f"{MAX_HELD} (more spill): use more parts or warps, or held=False")
    if y.device.type != "cuda":
        return f"{NAME} needs a GPU: it is a Gluon kernel, which Triton's CPU interpreter cannot run"
    if y.shape[0] * parts >= 2**31:
        return f"{NAME}: at most 2**31 programs (rows × parts); use softmax_backward"
    if flat:  # rows that are not whole 16-byte vectors: copied as one line of elements (flat descriptors)
        n_rows, n_cols = y.shape
        why = ""
        for name, t in (("y", y), ("dy", dy), ("out (dx)", dx)):
            if t.data_ptr() % 16 or (n_rows > 1 and t.stride(0) != n_cols):
                why = (f"{NAME} copies and stores rows that are not whole 16-byte vectors ({n_cols} elements) as one "
                       f"line, so {name} must start on 16 bytes with its rows one after another (make it contiguous); "
                       "use softmax_backward")
                break
        if not why and n_rows * n_cols + parts * BOX >= 2**31:
            why = (f"{NAME} copies rows that are not whole 16-byte vectors as one line, whose elements it counts in "
                   f"32 bits: {n_rows} rows of {n_cols} are too many; use softmax_backward")
        if not why and box_past_end(n_rows, n_cols, y.element_size(), parts, num_warps):
            why = (f"{NAME}: at {n_rows} rows of {n_cols} elements on {parts} programs, the last row's last copy "
                   "would start past the end of y (a box TMA has not been tried on: not run); use other parts or "
                   "softmax_backward")
    else:
        why = (vector_refusal(y, NAME, "y") or vector_refusal(dy, NAME, "dy")
               or vector_refusal(dx, NAME, "out (dx)"))
    if not why:
        capability, shared = device_limits(y.device)
        tile = options["MAIN"] + (0 if held else options["TAIL"])
        why = device_refusal(NAME, capability, shared, 2 * tile * y.element_size(), True)
    if not why and parts > PORTABLE_PARTS:
        why = clusters_fit(y, dy, parts, num_warps, held)
    return why.replace("cooperative_softmax", "softmax_backward")


def clusters_fit(y, dy, parts, num_warps, held=False) -> str:
    """``clustered_tma.cluster_fits`` for this kernel's launch on one row of y and dy (flat or not, as y's rows)."""
    return cluster_fits(NAME, (y.device.index, y.dtype, y.shape[1], parts, num_warps, held),
                        lambda: launch_setup(torch.empty_like(y[:1]), y[:1], dy[:1], parts, num_warps, held))


def box_past_end(n_rows: int, n_cols: int, element_size: int, parts: int, num_warps: int) -> bool:
    """Whether a flat launch would issue, in the last row, a box that starts at or past the end of the rows laid end
    to end (its plan copies up to VEC - 1 elements past each slice, for the start on the vector before it). TMA
    zero-fills a box's part past the end, but a box wholly past it was not tried on a GPU: such launches are
    refused."""
    vec = 16 // element_size
    o = tiles(n_cols, parts, num_warps, BOX)
    slice_, main, end = o["SLICE"], o["MAIN"], n_rows * n_cols
    big = BOX * num_warps
    for r in range(parts):
        columns = min(slice_, n_cols - r * slice_)  # (as the kernel's plans: none, or a box, where it is <= 0)
        first = (n_rows - 1) * n_cols + r * slice_
        start = first - first % vec
        for buffer, whole, index in copy_plan(main, o["TAIL"], columns + vec - 1, big, BOX):
            if start + (main if buffer else 0) + index * (big if whole else BOX) >= end:
                return True
    return False


def is_flat(y) -> bool:
    """Whether y's rows are copied as one line of elements (flat descriptors): rows that are not whole 16-byte
    vectors, whose row stride TMA cannot take. Each program's copy then starts on the vector before its slice."""
    return y.shape[1] % (16 // y.element_size()) != 0


def launch_setup(dx, y, dy, parts=8, num_warps=4, held=False):
    """(kernel, grid, args, options) of one launch; args[1:5] are the TMA descriptors of y and dy (flat ones for
    rows that are not whole 16-byte vectors, ``is_flat``: then the tiles hold a box more than the slice), args[5:7]
    y and dy themselves (the held columns' loads); ``held``: the slice's columns past MAIN in registers (HELD)."""
    flat = is_flat(y)
    options = dict(tiles(y.shape[1], parts, num_warps, BOX if flat else 0), HELD=0)  # (every constexpr: the plan
    # passes them all)
    if held and not flat:
        options["HELD"], options["TAIL"] = options["TAIL"], 0
    options["OUT_VEC"] = out_vec = row_vector(y.shape[1], dx)
    vec = 16 // y.element_size()
    return (clustered_tma_backward_kernel, (y.shape[0],),
            (dx, *descriptors(y, parts, num_warps, flat), *descriptors(dy, parts, num_warps, flat), y, dy,
             dx.stride(0) // out_vec, y.stride(0) // vec, dy.stride(0) // vec), options)


def plan(dx, y, dy, parts=8, num_warps=4, held=False):
    """``run(dx_ptr, y_ptr, dy_ptr)`` for tensors like these (the dispatcher's fast path): the compiled kernel
    launched again with the descriptors and y's and dy's pointers moved to the new addresses. None on the CPU."""
    from ._launch import relauncher

    kernel, grid, args, options = launch_setup(dx, y, dy, parts, num_warps, held)
    run = relauncher(kernel, grid, args, per_call=7, **options)
    if run is None:
        return None
    y_desc, dy_desc = [(list(d.shape), list(d.strides), d.padding) for d in (args[1], args[3])]

    def run_tma(dx_ptr, y_ptr, dy_ptr):
        y_d, dy_d = _Descriptor(y_ptr, *y_desc), _Descriptor(dy_ptr, *dy_desc)
        run(dx_ptr, y_d, y_d, dy_d, dy_d, y_ptr, dy_ptr)

    return run_tma


def clustered_tma_backward(y: torch.Tensor, dy: torch.Tensor, out: torch.Tensor | None = None,
                           parts: int | None = None, num_warps: int | None = None, held: bool = False
                           ) -> torch.Tensor:
    """dx = y·(dy - Σ dy·y) over the last dim of 2-D ``y`` and ``dy`` of one dtype (Hopper GPU; rows on 16 bytes,
    one after another where they are not whole 16-byte vectors, dx's too; each program's slices of y and dy in its
    shared memory). Knobs: ``parts`` (programs per row, a power of two from 2 to 16; 16 only where the GPU can
    launch such clusters; default 8), ``num_warps`` (4 or 8, default 4), ``held`` (rows of whole vectors: the
    slice's columns past its largest power of two loaded into registers rather than copied into a second shared
    tile, so more programs share a multiprocessor). ``out`` may be y or dy itself. One kernel is compiled per row
    length."""
    for name, value, most in (("parts", parts, MAX_PARTS), ("num_warps", num_warps, 32)):
        if value is not None and (type(value) is not int or value < 1 or value > most or value & (value - 1)):
            raise ValueError(f"{NAME}: {name} must be a power of two up to {most}, got {value!r}")
    y, dy, dx = backward_inputs(y, dy, out)
    why = refusal(y, dy, dx, parts, num_warps, held)
    if why:
        raise ValueError(why)
    if y.numel() == 0:
        return dx
    kernel, grid, args, options = launch_setup(dx, y, dy, parts or 8, num_warps or 4, held)
    kernel[grid](*args, **options)
    return dx


__all__ = ["clustered_tma_backward"]
