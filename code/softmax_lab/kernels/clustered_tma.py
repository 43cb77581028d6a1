"""The clustered softmax with TMA copies: each program's slice copied by the Tensor Memory Accelerator, the
partials sent into the partners' shared memory; the slice held in registers, or streamed from shared memory.

``clustered_tma_kernel(out_ptr, big_desc, box_desc, out_stride_v, N_COLS, SLICE, MAIN, TAIL, PARTS, OUT_VEC, STREAM)``
  one cluster of PARTS programs per row, as ``clustered.py``: program p takes columns [p·SLICE, (p+1)·SLICE).
  big_desc, box_desc: TMA descriptors of the input (host side: base, shape, strides), copying BIG elements (a box
  of 256 on each warp) or one box of 256; N_COLS: the row length, known when compiling (one kernel per width, as
  QuACK compiles); MAIN, TAIL: the slice as a power-of-two tile and, where it is longer, a second, narrower one;
  STREAM: which of the two forms below.

In each program, step by step:

1. thread 0 sets up the exchange's mbarrier, which counts the PARTS·8 bytes the partners will send; every thread
   arrives at the cluster barrier without waiting (a partner may write here once it has seen that arrive);
2. the slice is copied into shared memory by TMA (``cp.async.bulk.tensor``): a handful of instructions, not one
   16-byte copy per thread per vector as ``cp.async`` needs; each copy counts its bytes on a second mbarrier, armed
   with exactly the bytes of the copies issued (TMA counts a whole box, its part past the row included, so no box
   is issued that lies wholly past the row);
3. wait on that mbarrier, then invalidate it (PTX asks for that before its bytes serve anything else, and Triton
   puts the reductions' scratch there: without it, program 0's max or sum was now and then overwritten by the
   barrier's state, 0.3-0.6% of rows wrong, round 14); the slice's max m and sum l of exp(x - m) (-inf past the
   row: TMA fills zeros there);
4. the exchange (PTX below): thread t < PARTS stores (m, l) into program t's slot for this program
   (``st.async``, which completes its bytes on program t's mbarrier); each program waits on its own mbarrier for
   the PARTS pairs and combines them (the rule of ``combine.py``): no barrier for the whole cluster after it;
5. y = exp(x - m) · exp(m - M) / L, stored.

Held (``_held``): the slice read from shared memory once into registers, e = exp(x - m) kept there, one exp an
element, as QuACK does. Then registers decide how many programs share a multiprocessor, and so how many bytes are
on their way: a thread holding 64 values leaves room for two programs of 8 warps, too few for 16-bit rows past
73,728 (60-74% of copy at 128,256). Streamed (``_streamed``, STREAM): the slice read from shared memory two
vectors a thread at a time, three times (max, sum, store), two exps an element, 40 registers: shared memory alone
decides, 6 programs of a 16-bit row of 128,256 share a multiprocessor (95.2% against the held form's 69 and
``clustered.py``'s 87.5). The dispatcher takes each where it measured faster (docs/performance.md, rounds 13-14).

Written in Gluon with inline PTX; Hopper GPUs only (TMA, clusters). Rows must start on 16 bytes and be whole
16-byte vectors (TMA's rules for the descriptor). Finite inputs near the float max stay finite: every exp is taken
from x - max, never x·log2 e - max·log2 e (chunk_state.py has the trap).
"""
import torch
from triton.experimental import gluon
from triton.experimental.gluon import language as gl
from triton.experimental.gluon.language.nvidia.hopper import mbarrier, tma
from triton.runtime.jit import constexpr_function

from .clustered import MAX_PARTS, PORTABLE_PARTS, cluster_refusal, split_layout
from .chunk_state import LOG2E
from .cluster_exchange import LOG2E_HEX
from ._launch import cdiv, device_limits, device_refusal, next_power_of_2, prepare_gluon, row_vector

BOX = 256  # elements in one TMA box (the most a box may have in a dimension)
MAX_PER_THREAD = 128  # a program's tiles, elements a thread, at most (fewer with 16 or 32 warps: shape_refusal)
# The exchange's static shared memory lies before Triton's dynamic shared memory, and TMA's shared destinations
# must lie on 128 bytes: the static array is a whole number of 128 bytes. (Unpadded, 72 bytes, every setting
# faulted with "misaligned address" on the H200: round 12.)
XCHG_ALIGN = 128


@constexpr_function
def split_shared(bits, parts):
    """``[parts, TILE]`` in shared memory, unswizzled (as TMA writes it), row p in program p."""
    return gl.NVMMASharedLayout(swizzle_byte_width=0, element_bitwidth=bits, rank=2,
                                cga_layout=[[1 << i, 0] for i in range(parts.bit_length() - 1)])


def own_shared(bits, parts, rank=2):
    """A TMA box's layout: each program its own copy (a unicast copy into this program); ``rank`` 1 for the boxes
    of a flat descriptor (``descriptors(..., flat=True)``)."""
    return gl.NVMMASharedLayout(swizzle_byte_width=0, element_bitwidth=bits, rank=rank,
                                cga_layout=[[0] * rank for i in range(parts.bit_length() - 1)])


@constexpr_function
def own_barrier(parts):
    """An mbarrier of each program's own (set up, armed and waited on in each program)."""
    return mbarrier.MBarrierLayout(cga_layout=[[0] for i in range(parts.bit_length() - 1)])


@constexpr_function
def copy_plan(main, tail, valid, big, box):
    """The TMA copies of a slice whose first ``valid`` columns lie in the row: ``((buffer, big, index), ...)``,
    buffer 0 the MAIN tile, 1 the TAIL tile, ``big``: one copy of ``big`` elements (else one box), at element
    index·size of its buffer. Whole big copies first, then single boxes; none starts at or past ``valid``."""
    ops = []
    for buffer, base, size in ((0, 0, main), (1, main, tail)):
        p = 0
        while p < size and base + p < valid:
            if big <= size and p + big <= size and base + p + big <= valid:
                ops.append((buffer, True, p // big))
                p += big
            else:
                ops.append((buffer, False, p // box))
                p += box
    return tuple(ops)


@constexpr_function
def plan_op(plan, i, field):
    return plan[i][field]


@constexpr_function
def plan_bytes(plan, big, box, element_bytes):
    """The bytes TMA will count for ``plan``: whole boxes, their part past the row included."""
    return sum(big if op[1] else box for op in plan) * element_bytes


@constexpr_function
def full_parts(n_cols, slice_, parts):
    """How many programs of the cluster have their whole slice in the row."""
    return min(n_cols // slice_, parts)


@constexpr_function
def xchg_bytes(parts):
    """The exchange's static shared memory: its mbarrier and PARTS slots (8 bytes each at most: a (max, sum) pair, or
    one float in the backward's), padded to 128 bytes."""
    return -(-8 * (1 + parts) // XCHG_ALIGN) * XCHG_ALIGN


@constexpr_function
def init_asm(parts, words=2):
    """Step 1: thread 0 sets up the exchange's mbarrier (one arrival, its own, expecting PARTS·words·4 bytes: a
    (max, sum) pair from each program, or one float: ``clustered_tma_backward.py``); the fence makes it visible to
    the cluster; every thread arrives at the cluster barrier (relaxed) and gets the mbarrier's shared address (the
    PARTS slots follow it)."""
    return gl.constexpr(f"""{{
    .reg .pred %p;
    .reg .b32 %t;
    .shared .align {XCHG_ALIGN} .b8 xchg[{xchg_bytes(parts)}];
    mov.u32 %t, %tid.x;
    setp.eq.u32 %p, %t, 0;
    @%p mbarrier.init.shared::cta.b64 [xchg], 1;
    @%p mbarrier.arrive.expect_tx.shared::cta.b64 _, [xchg], {4 * words * parts};
    fence.mbarrier_init.release.cluster;
    barrier.cluster.arrive.relaxed.aligned;
    mov.u32 $0, xchg;
}}""")


SEND_REGS = """    .reg .pred %p, %done;
    .reg .b32 %bar, %tx, %rank, %a, %ra, %rb;"""  # (what ``send_and_wait`` uses, declared by its caller)


@constexpr_function
def send_and_wait(parts, bar, values, words=2):
    """Step 4's first half, PTX (registers ``SEND_REGS``): wait at the cluster barrier (step 1 arrived long before,
    so every partner runs); thread t < PARTS stores ``values`` (``words`` floats, e.g. "{$2, $3}") into program t's
    slot for this program with ``st.async``, which counts its bytes on program t's mbarrier; then wait on this
    program's own mbarrier (``bar``, an operand such as "$1", from ``init_asm``) until all PARTS parts are in."""
    return f"""    mov.u32 %bar, {bar};
    barrier.cluster.wait.acquire.aligned;
    mov.u32 %tx, %tid.x;
    mov.u32 %rank, %cluster_ctarank;
    setp.lt.u32 %p, %tx, {parts};
    mad.lo.u32 %a, %rank, {4 * words}, %bar;
    add.u32 %a, %a, 8;
    @%p mapa.shared::cluster.u32 %ra, %a, %tx;
    @%p mapa.shared::cluster.u32 %rb, %bar, %tx;
    @%p st.async.shared::cluster.mbarrier::complete_tx::bytes.{"v2." if words == 2 else ""}f32 [%ra], {values}, [%rb];
xchgWait:
    mbarrier.try_wait.parity.shared::cta.b64 %done, [%bar], 0;
    @!%done bra.uni xchgWait;"""


@constexpr_function
def exchange_asm(parts):
    """Step 4: $0 = exp(($2 - M)) / L (this program's scale), from each program's ($2, $3) = (max, sum of
    exp(x - max)) of its slice; $1 the exchange's mbarrier (``init_asm``). The wait at the cluster barrier finds
    the arrive of step 1 long past."""
    loads = "\n".join(f"    ld.shared.v2.f32 {{%m{i}, %l{i}}}, [%bar+{8 + 8 * i}];" for i in range(parts))
    maxes = "\n".join(f"    max.f32 %mx, %mx, %m{i};" for i in range(1, parts))
    sums = "\n".join(f"    sub.f32 %t, %m{i}, %mx;\n    mul.f32 %t, %t, {LOG2E_HEX};\n    ex2.approx.f32 %t, %t;\n"
                     f"    fma.rn.f32 %s, %l{i}, %t, %s;" for i in range(parts))
    return gl.constexpr(f"""{{
{SEND_REGS}
    .reg .f32 %m<{parts}>, %l<{parts}>, %mx, %t, %s;
{send_and_wait(parts, "$1", "{$2, $3}")}
{loads}
    mov.f32 %mx, %m0;
{maxes}
    mov.f32 %s, 0f00000000;
{sums}
    sub.f32 %t, $2, %mx;
    mul.f32 %t, %t, {LOG2E_HEX};
    ex2.approx.f32 %t, %t;
    div.rn.f32 $0, %t, %s;
}}""")


@gluon.jit
def _copy(desc, bar, smem, row, start, INDEX: gl.constexpr, BASE: gl.constexpr):
    """One copy of a plan: ``desc``'s block (a box, or a box a warp) into its place in ``smem``. A flat descriptor
    (rank 1: the rows laid end to end) takes ``start`` as an element of the whole, on 16 bytes, and ignores row."""
    SIZE: gl.constexpr = desc.block_shape[-1]
    if len(desc.block_shape) == 2:
        view = smem._reinterpret(desc.dtype, [smem.shape[1] // SIZE, 1, SIZE], desc.layout).index(INDEX)
        tma.async_copy_global_to_shared(desc, [row, start + BASE + INDEX * SIZE], bar, view)
    else:
        view = smem._reinterpret(desc.dtype, [smem.shape[1] // SIZE, SIZE], desc.layout).index(INDEX)
        tma.async_copy_global_to_shared(desc, [start + BASE + INDEX * SIZE], bar, view)


@gluon.jit
def _copies(big_desc, box_desc, bar, main_smem, tail_smem, row, start, PLAN: gl.constexpr, MAIN: gl.constexpr):
    """Step 2: arm ``bar`` with the plan's bytes, then its copies, columns from ``start`` of the row."""
    mbarrier.expect(bar, plan_bytes(PLAN, big_desc.block_shape[1], box_desc.block_shape[1],
                                    box_desc.dtype.primitive_bitwidth // 8))
    _issue(big_desc, box_desc, bar, main_smem, tail_smem, row, start, PLAN, MAIN)


@gluon.jit
def _issue(big_desc, box_desc, bar, main_smem, tail_smem, row, start, PLAN: gl.constexpr, MAIN: gl.constexpr):
    """The plan's copies, counted on ``bar`` (armed by the caller)."""
    for i in gl.static_range(len(PLAN)):
        if plan_op(PLAN, i, 0) == 0:
            if plan_op(PLAN, i, 1):
                _copy(big_desc, bar, main_smem, row, start, plan_op(PLAN, i, 2), 0)
            else:
                _copy(box_desc, bar, main_smem, row, start, plan_op(PLAN, i, 2), 0)
        else:
            if plan_op(PLAN, i, 1):
                _copy(big_desc, bar, tail_smem, row, start, plan_op(PLAN, i, 2), MAIN)
            else:
                _copy(box_desc, bar, tail_smem, row, start, plan_op(PLAN, i, 2), MAIN)


@gluon.jit
def _tile(smem, part, START: gl.constexpr, SLICE: gl.constexpr, N_COLS: gl.constexpr, layout: gl.constexpr):
    """A tile of each program's slice, as floats, -inf past the slice and the row; its columns and mask."""
    offs = START + gl.arange(0, smem.shape[1], layout=gl.SliceLayout(0, layout))
    cols = part[:, None] * SLICE + offs[None, :]
    ok = offs[None, :] < gl.minimum(N_COLS - part * SLICE, SLICE)[:, None]
    return gl.where(ok, smem.load(layout).to(gl.float32), float("-inf")), cols, ok


@constexpr_function
def sub_tiles_shared(parts):
    """A tile ``[PARTS, TILE]`` seen as ``[TILE // SUB, PARTS, SUB]``: ``.index(k)`` is sub-tile k, row p in
    program p. (Not a layout whose CTA bases are all zero, each program its own: Triton takes such a tensor as the
    same in every program and lets program 0 alone store it, as round 13's first stream run found.)"""
    return gl.SwizzledSharedLayout(1, 1, 1, [1, 0], [[1 << i, 0] for i in range(parts.bit_length() - 1)])


@gluon.jit
def _sub_tile(smem, k, SUB: gl.constexpr, START: gl.constexpr, part, SLICE: gl.constexpr, N_COLS: gl.constexpr,
              layout: gl.constexpr, FILL: gl.constexpr = float("-inf"), lead=None):
    """Sub-tile ``k`` (SUB columns) of each program's tile ``smem``, whose first column is START of the slice, as
    floats, FILL (-inf: nothing to a max) past the slice and the row; its columns and mask. ``lead`` (per program):
    the tile starts that many elements before the slice (a flat copy, ``clustered_tma_backward.py``), FILL there too."""
    PARTS: gl.constexpr = smem.shape[0]
    view = smem._reinterpret(smem.dtype, [smem.shape[1] // SUB, PARTS, SUB], sub_tiles_shared(PARTS)).index(k)
    offs = START + k * SUB + gl.arange(0, SUB, layout=gl.SliceLayout(0, layout))
    columns = gl.minimum(N_COLS - part * SLICE, SLICE)[:, None]
    if lead is None:
        at = offs[None, :]
        ok = at < columns
    else:
        at = offs[None, :] - lead[:, None]
        ok = (at >= 0) & (at < columns)
    return gl.where(ok, view.load(layout).to(gl.float32), FILL), part[:, None] * SLICE + at, ok


@gluon.jit
def _sub_tiles(valid, START: gl.constexpr, TILE: gl.constexpr, SUB: gl.constexpr):
    """How many sub-tiles of a tile starting at START hold some of the ``valid`` columns of this program's slice."""
    return (gl.minimum(gl.maximum(valid - START, 0), TILE) + SUB - 1) // SUB


@gluon.jit
def _held(main_smem, tail_smem, part, SLICE: gl.constexpr, N_COLS: gl.constexpr, MAIN: gl.constexpr,
          TAIL: gl.constexpr, xchg, dst, layout: gl.constexpr):
    """Steps 3-5 with the slice held in registers: one read of shared memory, one exp an element."""
    x, cols, ok = _tile(main_smem, part, 0, SLICE, N_COLS, layout)
    m = gl.max(x, axis=1)
    if TAIL > 0:
        x_t, cols_t, ok_t = _tile(tail_smem, part, MAIN, SLICE, N_COLS, layout)
        m = gl.maximum(m, gl.max(x_t, axis=1))
    shift = gl.where(m == float("-inf"), 0.0, m)[:, None]  # (a slice of -inf only: its exps and sum are 0)
    e = gl.exp2((x - shift) * LOG2E)
    total = gl.sum(e, axis=1)
    if TAIL > 0:
        e_t = gl.exp2((x_t - shift) * LOG2E)
        total += gl.sum(e_t, axis=1)
    scale = gl.inline_asm_elementwise(exchange_asm(main_smem.shape[0]), "=f,r,f,f", [xchg, m, total],  # 4.
                                      dtype=gl.float32, is_pure=False, pack=1)
    gl.store(dst + cols, (e * scale[:, None]).to(dst.dtype.element_ty), mask=ok)  # 5.
    if TAIL > 0:
        gl.store(dst + cols_t, (e_t * scale[:, None]).to(dst.dtype.element_ty), mask=ok_t)


@gluon.jit
def _streamed(main_smem, tail_smem, part, rank, SLICE: gl.constexpr, N_COLS: gl.constexpr, MAIN: gl.constexpr,
              TAIL: gl.constexpr, SUB: gl.constexpr, xchg, dst, layout: gl.constexpr):
    """Steps 3-5 with the slice streamed from shared memory, SUB columns at a time (two 16-byte vectors a thread),
    three times: its max, its sum of exps, the store. Two exps an element, but a thread holds two vectors, not its
    whole share: shared memory alone decides how many programs share a multiprocessor."""
    PARTS: gl.constexpr = main_smem.shape[0]
    S_M: gl.constexpr = min(SUB, MAIN)
    S_T: gl.constexpr = min(SUB, TAIL) if TAIL > 0 else 1
    valid = gl.minimum(N_COLS - rank * SLICE, SLICE)  # (this program's columns: the loops stop past them)
    n_main = _sub_tiles(valid, 0, MAIN, S_M)
    n_tail = _sub_tiles(valid, MAIN, TAIL, S_T)
    mx = gl.full([PARTS, S_M], float("-inf"), gl.float32, layout)
    for k in range(n_main):  # 3. the max
        mx = gl.maximum(mx, _sub_tile(main_smem, k, S_M, 0, part, SLICE, N_COLS, layout)[0])
    m = gl.max(mx, axis=1)
    if TAIL > 0:
        mx_t = gl.full([PARTS, S_T], float("-inf"), gl.float32, layout)
        for k in range(n_tail):
            mx_t = gl.maximum(mx_t, _sub_tile(tail_smem, k, S_T, MAIN, part, SLICE, N_COLS, layout)[0])
        m = gl.maximum(m, gl.max(mx_t, axis=1))
    shift = gl.where(m == float("-inf"), 0.0, m)[:, None]
    acc = gl.full([PARTS, S_M], 0.0, gl.float32, layout)
    for k in range(n_main):  # 3. the sum of exps
        acc += gl.exp2((_sub_tile(main_smem, k, S_M, 0, part, SLICE, N_COLS, layout)[0] - shift) * LOG2E)
    total = gl.sum(acc, axis=1)
    if TAIL > 0:
        acc_t = gl.full([PARTS, S_T], 0.0, gl.float32, layout)
        for k in range(n_tail):
            acc_t += gl.exp2((_sub_tile(tail_smem, k, S_T, MAIN, part, SLICE, N_COLS, layout)[0] - shift) * LOG2E)
        total += gl.sum(acc_t, axis=1)
    scale = gl.inline_asm_elementwise(exchange_asm(PARTS), "=f,r,f,f", [xchg, m, total],  # 4.
                                      dtype=gl.float32, is_pure=False, pack=1)
    log2_scale = gl.log2(scale)[:, None]  # (the scale inside the exp: 2^((x - m)·log2 e + log2 scale))
    for k in range(n_main):  # 5.
        x, cols, ok = _sub_tile(main_smem, k, S_M, 0, part, SLICE, N_COLS, layout)
        gl.store(dst + cols, gl.exp2((x - shift) * LOG2E + log2_scale).to(dst.dtype.element_ty), mask=ok)
    if TAIL > 0:
        for k in range(n_tail):
            x, cols, ok = _sub_tile(tail_smem, k, S_T, MAIN, part, SLICE, N_COLS, layout)
            gl.store(dst + cols, gl.exp2((x - shift) * LOG2E + log2_scale).to(dst.dtype.element_ty), mask=ok)


@gluon.jit
def clustered_tma_kernel(out_ptr, big_desc, box_desc, out_stride_v, N_COLS: gl.constexpr, SLICE: gl.constexpr,
                         MAIN: gl.constexpr, TAIL: gl.constexpr, PARTS: gl.constexpr, OUT_VEC: gl.constexpr,
                         STREAM: gl.constexpr = False):
    dtype: gl.constexpr = box_desc.dtype
    VEC: gl.constexpr = 128 // dtype.primitive_bitwidth
    layout: gl.constexpr = split_layout(VEC, gl.num_warps(), PARTS)
    part = gl.arange(0, PARTS, layout=gl.SliceLayout(1, layout))
    xchg = gl.inline_asm_elementwise(init_asm(PARTS), "=r", [], dtype=gl.int32, is_pure=False, pack=1)  # 1.
    main_smem = gl.allocate_shared_memory(dtype, [PARTS, MAIN], split_shared(dtype.primitive_bitwidth, PARTS))
    if TAIL > 0:
        tail_smem = gl.allocate_shared_memory(dtype, [PARTS, TAIL], split_shared(dtype.primitive_bitwidth, PARTS))
    else:
        tail_smem = main_smem
    row = gl.program_id(0)  # (the cluster's number)
    rank = gl.inline_asm_elementwise("mov.u32 $0, %cluster_ctarank;", "=r", [], dtype=gl.int32, is_pure=True,
                                     pack=1)
    bar = gl.allocate_shared_memory(gl.int64, [1], own_barrier(PARTS))
    mbarrier.init(bar, count=1)
    FULL: gl.constexpr = full_parts(N_COLS, SLICE, PARTS)
    BIG: gl.constexpr = big_desc.block_shape[1]
    BOX_: gl.constexpr = box_desc.block_shape[1]
    if rank < FULL:  # 2. a slice wholly in the row
        _copies(big_desc, box_desc, bar, main_smem, tail_smem, row, rank * SLICE,
                copy_plan(MAIN, TAIL, SLICE, BIG, BOX_), MAIN)
    for r in gl.static_range(FULL, PARTS):  # 2. a slice reaching past the row's end: a plan of its own
        if rank == r:
            _copies(big_desc, box_desc, bar, main_smem, tail_smem, row, r * SLICE,
                    copy_plan(MAIN, TAIL, N_COLS - r * SLICE, BIG, BOX_), MAIN)
    mbarrier.wait(bar, 0)  # 3.
    mbarrier.invalidate(bar)  # (before its bytes are used again: the reductions' scratch may lie on them)
    xchg_p = gl.full([PARTS], 0, gl.int32, gl.SliceLayout(1, layout)) + xchg
    dst = out_ptr + row.to(gl.int64) * (out_stride_v * OUT_VEC)
    if STREAM:
        _streamed(main_smem, tail_smem, part, rank, SLICE, N_COLS, MAIN, TAIL, 2 * 32 * gl.num_warps() * VEC,
                  xchg_p, dst, layout)
    else:
        _held(main_smem, tail_smem, part, SLICE, N_COLS, MAIN, TAIL, xchg_p, dst, layout)


def tiles(n_cols: int, parts: int, num_warps: int, room: int = 0) -> dict:
    """The launch's constexprs: SLICE (a program's columns, whole boxes), MAIN, the largest power of two it holds,
    and TAIL, a power of two for the rest (0: none; one tile where it holds the slice as well); ``room``: elements
    the tiles hold beyond the slice (a flat copy starts up to a vector before its slice, and copies whole boxes: the
    backward passes a box)."""
    slice_ = cdiv(n_cols, parts * BOX) * BOX
    size = slice_ + room
    main = 1 << (size.bit_length() - 1)
    tail = next_power_of_2(size - main) if size > main else 0
    if main + tail >= next_power_of_2(size):
        main, tail = next_power_of_2(size), 0
    return dict(N_COLS=n_cols, SLICE=slice_, MAIN=main, TAIL=tail, PARTS=parts, num_warps=num_warps, num_ctas=parts)


def refusal(x: torch.Tensor, parts: int | None = None, num_warps: int | None = None, stream: bool = False) -> str:
    """Why this GPU, ``x`` or the knobs cannot take the kernel, or '' (knobs None: the defaults, 8 and 4)."""
    parts, num_warps = parts or 8, num_warps or 4
    if x.device.type != "cuda":
        return (f"{NAME} needs a GPU: it is a Gluon kernel, which Triton's CPU interpreter cannot run; "
                "use cooperative_softmax")
    if x.numel() == 0:
        return ""
    why = shape_refusal(*x.shape, x.stride(0), x.data_ptr(), x.element_size(), parts, num_warps, stream)
    if why:
        return why
    options = tiles(x.shape[1], parts, num_warps)
    capability, shared = device_limits(x.device)
    why = device_refusal(NAME, capability, shared, (options["MAIN"] + options["TAIL"]) * x.element_size(), True)
    if why:
        return why
    if parts > PORTABLE_PARTS:
        return clusters_fit(x, parts, num_warps, stream)
    return ""


NAME = "clustered_tma_softmax"
REGISTERS = 65536  # 32-bit registers of a multiprocessor: a program of w warps has at most 65536 / (32·w) a thread
SPARE_REGISTERS = 48  # what a thread needs besides its slice (addresses, masks, the exchange), as compiled


def shape_refusal(n_rows: int, n_cols: int, row_stride: int, data_ptr: int, element_size: int, parts: int,
                  num_warps: int, stream: bool = False) -> str:
    """The half of ``refusal`` that needs no GPU: the knobs, the slice a thread holds, the rows' alignment."""
    if not 2 <= parts <= MAX_PARTS:
        return (f"{NAME}: parts must be 2 to {MAX_PARTS} (programs in a cluster), got {parts}; a row in one "
                "program's shared memory: resident_softmax")
    options = tiles(n_cols, parts, num_warps)
    per_thread = (options["MAIN"] + options["TAIL"]) // (32 * num_warps)
    most = min(MAX_PER_THREAD, min(255, REGISTERS // (32 * num_warps)) - SPARE_REGISTERS)
    if per_thread > most and not stream:
        return (f"{NAME}: each thread would hold {per_thread} elements of its slice in registers, at most {most} "
                f"with {num_warps} warps (more would spill): use more parts, more warps (up to 8), or stream=True")
    vec = 16 // element_size
    if n_rows > 1 and row_stride < n_cols:
        return (f"{NAME}: x's rows overlap (row stride {row_stride}, rows of {n_cols}, e.g. after expand()): "
                "make x contiguous first, or use cooperative_softmax")
    if n_cols % vec:
        return (f"{NAME} copies rows with TMA in whole 16-byte vectors: a row of {n_cols} elements is not a multiple "
                f"of {vec}; use clustered_softmax (where the memory after the row allows) or cooperative_softmax")
    if data_ptr % 16 or (n_rows > 1 and row_stride % vec):
        return (f"{NAME} copies rows with TMA, which needs every row of x to start on 16 bytes (a row stride that is "
                f"a multiple of {vec} elements); use cooperative_softmax")
    if n_rows * parts >= 2**31 or row_stride * element_size >= 2**40:
        return (f"{NAME}: at most 2**31 programs (rows × parts) and rows less than 2**40 bytes apart; use "
                "cooperative_softmax")
    return ""


_CLUSTERS: dict = {}


def cluster_fits(name: str, key: tuple, setup) -> str:
    """``clustered.cluster_refusal`` of the launch ``setup()`` gives, in ``name``'s words: a cluster of more than 8
    programs must fit one group of multiprocessors with its shared memory. Asked of the driver once per ``key``
    (the GPU, dtype, row length and knobs that decide it)."""
    key = (name, *key)
    if key not in _CLUSTERS:
        why = cluster_refusal(*setup())
        _CLUSTERS[key] = why.replace("clustered_softmax", name).replace(" (with more warps or vectors)", "")
    return _CLUSTERS[key]


def clusters_fit(x: torch.Tensor, parts: int, num_warps: int, stream: bool) -> str:
    """``cluster_fits`` for this kernel's launch on one row of x."""
    one = x[:1]
    return cluster_fits(NAME, (x.device.index, x.dtype, x.shape[1], parts, num_warps, stream),
                        lambda: launch_setup(torch.empty_like(one), one, parts, num_warps, stream))


class _Descriptor:
    """What Triton's launcher reads of a host-side TMA descriptor (``base.data_ptr()``, shape, strides, padding):
    a plan's descriptor moved to another tensor's address without building a TensorDescriptor (and its checks)."""
    __slots__ = ("base", "shape", "strides", "padding")

    def __init__(self, address: int, shape, strides, padding):
        self.base, self.shape, self.strides, self.padding = _Address(address), shape, strides, padding


class _Address:
    __slots__ = ("address",)

    def __init__(self, address: int):
        self.address = address

    def data_ptr(self) -> int:
        return self.address


def descriptors(x: torch.Tensor, parts: int, num_warps: int, flat: bool = False):
    """The TMA descriptors of ``x``: copies of a box a warp (BOX·num_warps elements), and of one box. ``flat``: of
    x's rows laid end to end (rows one after another, x starting on 16 bytes), as one line of elements: TMA asks a
    row stride of whole 16-byte vectors, which rows that are not whole vectors lack. A box must still start on 16
    bytes (one that did not stopped the H200 with an illegal instruction, round 15): a flat copy starts on the
    vector before the slice (``clustered_tma_backward.py``)."""
    from triton.experimental.gluon.nvidia.hopper import TensorDescriptor

    if flat:
        layout = own_shared(x.element_size() * 8, parts, rank=1)
        shape, strides = [x.shape[0] * x.shape[1]], [1]
        return (TensorDescriptor(x, shape, strides, [BOX * num_warps], layout),
                TensorDescriptor(x, shape, strides, [BOX], layout))
    layout = own_shared(x.element_size() * 8, parts)
    shape = list(x.shape)
    strides = [x.stride(0) if x.shape[0] > 1 else x.shape[1], 1]  # (one row: any stride; the descriptor's whole)
    return (TensorDescriptor(x, shape, strides, [1, BOX * num_warps], layout),
            TensorDescriptor(x, shape, strides, [1, BOX], layout))


def launch_setup(y, x, parts=8, num_warps=4, stream=False):
    """(kernel, grid, args, options) of one launch; args[1:3] are x's TMA descriptors (a plan moves them)."""
    options = tiles(x.shape[1], parts, num_warps)
    options["STREAM"] = bool(stream)
    options["OUT_VEC"] = out_vec = row_vector(x.shape[1], y)
    big, box = descriptors(x, parts, num_warps)
    return clustered_tma_kernel, (x.shape[0],), (y, big, box, y.stride(0) // out_vec), options


def plan(y, x, parts=8, num_warps=4, stream=False):
    """``run(out_ptr, in_ptr)`` for inputs like ``x`` (the dispatcher's fast path): the compiled kernel launched
    again with x's descriptors moved to the new address (Triton's launcher encodes them at each launch). None on
    the CPU."""
    from ._launch import relauncher

    kernel, grid, args, options = launch_setup(y, x, parts, num_warps, stream)
    run = relauncher(kernel, grid, args, per_call=3, **options)
    if run is None:
        return None
    shape, strides, padding = list(args[1].shape), list(args[1].strides), args[1].padding  # (not x: a plan lives on)

    def run_tma(out_ptr, in_ptr):
        run(out_ptr, _Descriptor(in_ptr, shape, strides, padding), _Descriptor(in_ptr, shape, strides, padding))

    return run_tma


def clustered_tma_softmax(x: torch.Tensor, out: torch.Tensor | None = None, parts: int | None = None,
                          num_warps: int | None = None, stream: bool = False) -> torch.Tensor:
    """Softmax over the last dim of 2-D ``x`` (Hopper GPU; rows on 16 bytes and whole 16-byte vectors). Knobs:
    ``parts`` (programs per row, a power of two from 2 to 16; 16 only where the GPU can launch such clusters;
    default 8), ``num_warps`` (default 4); together they must leave each thread at most 128 elements of its slice
    (fewer with 16 or 32 warps: ``shape_refusal``), unless ``stream`` (the slice read from shared memory a few
    vectors at a time, three times, instead of held in registers: any slice that fits shared memory). One kernel
    is compiled per row length."""
    if not isinstance(stream, bool):
        raise ValueError(f"{NAME}: stream must be True or False, got {stream!r}")
    x, y = prepare_gluon(x, out, NAME, lambda x: refusal(x, parts, num_warps, stream), MAX_PARTS, parts=parts,
                         num_warps=num_warps)
    if x.numel() == 0:
        return y
    kernel, grid, args, options = launch_setup(y, x, parts or 8, num_warps or 4, stream)
    kernel[grid](*args, **options)
    return y
