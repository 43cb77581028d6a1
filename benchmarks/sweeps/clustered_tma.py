"""The clustered forward with TMA copies and QuACK's exchange (partials into the partners' shared memory, signalled
on their mbarriers; QuACK itself copies with cp.async, quack/softmax.py at c8ec317), beside the library's kernel
(``kernels/clustered.py``: cp.async, a barrier.cluster; ``bench.compare`` times the dispatcher beside it) and QuACK,
on the widths where the library stops 8-10 points under QuACK (docs/performance.md, rounds 8-12). Written in
round 12; its first run faulted in every setting, and the fix (below, 4.) has not run yet. GPU machine
(sm_90), repository root, QuACK importable for its lines (``benchmarks/bench_with_peers.sh`` shows how):

    PYTHONPATH=code python3 benchmarks/sweeps/clustered_tma.py OUT.json

and, on any machine (no GPU: ptxas and cuobjdump come with Triton's wheel), each setting compiled for sm_90 with its
registers, shared memory and the SASS of its copies and barriers:

    PYTHONPATH=code python3 benchmarks/sweeps/clustered_tma.py --compile

and, on the GPU machine, each part of the kernel alone, each in its own subprocess (CUDA_LAUNCH_BLOCKING=1, the same
time limit), OK or the error, on four settings and the odd widths (``PART_SETTINGS``; the sweep runs the first two
on up to four failing settings by itself and records them in OUT.json, ``failed[i].parts_check``):

    PYTHONPATH=code python3 benchmarks/sweeps/clustered_tma.py --check-parts [PARTS.json]

'copy' (TMA into shared memory + the mbarrier wait, the slice stored back unchanged, no exchange; it also prints
where global_smem and the exchange's array lie, which must be multiples of 128), 'exchange' (the slice by plain
loads, the st.async/mbarrier exchange, no TMA), 'full' (the kernel as timed).

``tma_kernel``: one cluster of PARTS programs a row, as ``clustered.py``, program p taking columns [p·SLICE,
(p+1)·SLICE). Step by step, in each program:

1. thread 0 initialises the exchange's mbarrier (static shared memory, beside PARTS (max, sum) slots) and arms it for
   the PARTS·8 bytes its partners will send; ``fence.mbarrier_init.release.cluster``; every thread arrives (relaxed,
   not waiting) at the cluster barrier: the partners may signal this barrier once they have waited on that arrive;
2. the slice is copied global → shared by TMA (``cp.async.bulk.tensor``, 256-element boxes; one op of BIG =
   256·num_warps elements puts one box on each warp), every box counted on one mbarrier armed (``expect``) with
   exactly the bytes of the boxes issued: TMA counts a whole box, out-of-bounds part included, so no box is issued
   that lies wholly past the row (the programs whose slice reaches past the row take a copy plan of their own,
   known when compiling: the width N_COLS is a constexpr, as QuACK compiles per width);
3. wait on that mbarrier (phase 0); the slice read from shared memory once into registers, -inf past the row or
   the slice (TMA pads with zeros: the mask goes by column index); its max m (unscaled), then
   e = exp2((x - m)·log2 e) once an element, kept in registers, and their sum l;
4. the exchange (inline PTX, as ``kernels/cluster_exchange.py`` but mbarrier-signalled; its barrier and slots are
   static shared memory, padded to a multiple of 128 bytes: ptxas puts Triton's dynamic shared memory right after
   it, and TMA's shared destinations must lie on 128 bytes; the first H200 run, unpadded (72 bytes: global_smem at
   0x450) failed every setting with "misaligned address", this the likely cause): wait at the cluster barrier
   (the arrive of 1. is long past: it costs no idle time), then thread t < PARTS stores (m, l) into program t's slot
   for this program with ``st.async ... mbarrier::complete_tx`` on program t's barrier; wait on this program's
   barrier for the PARTS pairs; M = max m_i, L = sum l_i·exp2((m_i - M)·log2 e); no barrier.cluster after it;
5. y = e · exp2((m - M)·log2 e) / L, stored from registers (16-byte stores).

One read, one write, one exp an element; shared memory written by the TMA unit and read once. A slice is a
power-of-two tile and, where it is longer, a second, narrower one (``plan``), as ``clustered_registers.py``. All
-inf rows give NaN (as torch), slices of -inf only give 0 (m_i = -inf, l_i = 0), finite inputs near the float max
stay finite (max unscaled: exp2((x - m)·log2 e), never x·log2 e - m·log2 e).

Rows must start on 16 bytes and be whole 16-byte vectors (TMA's descriptor rules). Each setting is first checked in
a subprocess (``--check``), with a time limit: a wrong byte count or phase would hang the GPU, and the subprocess is
killed instead of the sweep; there, against float64, on hard rows (an all -inf row, -inf over half the row, rows near
-1000, values near the float max) of the timed width and, once per (dtype, parts, warps), of a few odd widths. Only
then is it timed with ``bench.compare`` (buffers past the L2 cache, checked before and after). A setting that fails
to compile or launch, hangs, or is wrong is recorded as such in OUT.json (``failed``), not timed.
"""
import json
import os
import subprocess
import sys
import time

import torch
from triton.experimental import gluon
from triton.experimental.gluon import language as gl
from triton.experimental.gluon.language.nvidia.hopper import fence_async_shared, mbarrier, tma
from triton.runtime.jit import constexpr_function

from softmax_lab.kernels.clustered import split_layout
from softmax_lab.kernels.clustered_tma import (SEND_REGS, _sub_tile, copy_plan, full_parts, init_asm, own_barrier,
                                               own_shared, plan_bytes, plan_op, send_and_wait, split_shared)

LOG2E_HEX = "0f3FB8AA3B"  # 1.4426950408889634 as a PTX float
BOX = 256  # elements in one TMA box (the most a box may have in a dimension)
CHECK_SECONDS = 150  # one setting's check in its subprocess: compiles and all, or it is taken for a hang
CHECK_PROCESSES = 8  # checks at once (each its own process and CUDA context)
MODES = {"full": 0, "copy": 1, "exchange": 2}  # tma_kernel's MODE (--check-parts): the whole kernel, or a part


# ---------------------------------------------------------------------------------------------- layouts and plans
# (Since round 14 the layouts, the copy plans, the sub-tiles and the exchange's set-up (``init_asm``, its array
# padded to 128 bytes) are the library's, ``kernels/clustered_tma.py``, which took them from here; the compiled
# kernels are the same, ``--compile`` before and after. The exchange below returns M too, for the probes; its sends
# and wait are the library's ``send_and_wait`` since round 15.)

@constexpr_function
def exchange_asm(parts):
    """$0 = exp2(($2 - M)·log2 e) / L (this program's scale), $1 = M, from each program's ($2, $3) = (max, sum of
    exp(x - max)) of its slice; $4 the barrier's address (``init_asm``)."""
    loads = "\n".join(f"    ld.shared.v2.f32 {{%m{i}, %l{i}}}, [%bar+{8 + 8 * i}];" for i in range(parts))
    maxes = "\n".join(f"    max.f32 %mx, %mx, %m{i};" for i in range(1, parts))
    sums = "\n".join(f"    sub.f32 %t, %m{i}, %mx;\n    mul.f32 %t, %t, {LOG2E_HEX};\n    ex2.approx.f32 %t, %t;\n"
                     f"    fma.rn.f32 %s, %l{i}, %t, %s;" for i in range(parts))
    return gl.constexpr(f"""{{
{SEND_REGS}
    .reg .f32 %m<{parts}>, %l<{parts}>, %mx, %t, %s;
{send_and_wait(parts, "$4", "{$2, $3}")}
{loads}
    mov.f32 %mx, %m0;
{maxes}
    mov.f32 %s, 0f00000000;
{sums}
    sub.f32 %t, $2, %mx;
    mul.f32 %t, %t, {LOG2E_HEX};
    ex2.approx.f32 %t, %t;
    div.rn.f32 $0, %t, %s;
    mov.f32 $1, %mx;
}}""")


@gluon.jit
def cluster_rank():
    return gl.inline_asm_elementwise("mov.u32 $0, %cluster_ctarank;", "=r", [], dtype=gl.int32, is_pure=True, pack=1)


# ---------------------------------------------------------------------------------------------- the kernel

@gluon.jit
def _copy(desc, bar, smem, row, start, INDEX: gl.constexpr, BASE: gl.constexpr):
    """One op of a copy plan: ``desc``'s block (a box, or a box a warp) into its place in ``smem``."""
    SIZE: gl.constexpr = desc.block_shape[1]
    view = smem._reinterpret(desc.dtype, [smem.shape[1] // SIZE, 1, SIZE], desc.layout).index(INDEX)
    tma.async_copy_global_to_shared(desc, [row, start + BASE + INDEX * SIZE], bar, view)


@gluon.jit
def _copies(big_desc, box_desc, bar, main_smem, tail_smem, row, start, PLAN: gl.constexpr, MAIN: gl.constexpr,
            BIG: gl.constexpr):
    """The TMA copies of ``PLAN`` (``copy_plan``), columns from ``start`` of the row, after arming ``bar``."""
    BYTES: gl.constexpr = plan_bytes(PLAN, BIG, box_desc.block_shape[1], box_desc.dtype.primitive_bitwidth // 8)
    mbarrier.expect(bar, BYTES)
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
def _tile(smem, part, START: gl.constexpr, SLICE: gl.constexpr, N_COLS: gl.constexpr, layout: gl.constexpr, src,
          FROM_GLOBAL: gl.constexpr):
    """A tile of each program's slice from shared memory (``FROM_GLOBAL``: plain loads from ``src``, the row, for
    the exchange-only check), as floats, -inf past the slice and the row."""
    TILE: gl.constexpr = smem.shape[1]
    offs = START + gl.arange(0, TILE, layout=gl.SliceLayout(0, layout))
    cols = part[:, None] * SLICE + offs[None, :]
    ok = offs[None, :] < gl.minimum(N_COLS - part * SLICE, SLICE)[:, None]  # (one compare a vector)
    if FROM_GLOBAL:
        x = gl.load(src + cols, mask=ok, other=float("-inf")).to(gl.float32)
    else:
        x = gl.where(ok, smem.load(layout).to(gl.float32), float("-inf"))
    return x, cols, ok


@gluon.jit
def _probe(probe_ptr, rank, xchg):
    """(copy check) Where this program's dynamic shared memory (global_smem, TMA's destinations) and the exchange's
    static array (``xchg``, from ``init_asm``) lie: probe[2·rank], probe[2·rank + 1] (shared addresses; both must be
    multiples of 128)."""
    base = gl.inline_asm_elementwise("mov.u32 $0, global_smem;", "=r", [], dtype=gl.int32, is_pure=True, pack=1)
    gl.store(probe_ptr + 2 * rank, base)
    gl.store(probe_ptr + 2 * rank + 1, xchg)


@gluon.jit
def tma_kernel(out_ptr, big_desc, box_desc, out_stride, x_ptr, probe_ptr, N_COLS: gl.constexpr, SLICE: gl.constexpr,
               MAIN: gl.constexpr, TAIL: gl.constexpr, PARTS: gl.constexpr, MODE: gl.constexpr = 0):
    """MODE 0: the softmax (``x_ptr``, ``probe_ptr`` unused). For ``--check-parts`` only: MODE 1, the copy alone
    (TMA, its mbarrier, the slice read from shared memory and stored unchanged; no exchange; the shared addresses
    into ``probe_ptr``); MODE 2, the exchange alone (the slice read by plain loads from ``x_ptr``, no TMA)."""
    LOG2E: gl.constexpr = 1.4426950408889634
    dtype: gl.constexpr = box_desc.dtype
    BITS: gl.constexpr = dtype.primitive_bitwidth
    VEC: gl.constexpr = 128 // BITS  # elements per 16 bytes
    BIG: gl.constexpr = big_desc.block_shape[1]
    TMA: gl.constexpr = MODE != 2
    layout: gl.constexpr = split_layout(VEC, gl.num_warps(), PARTS)
    part = gl.arange(0, PARTS, layout=gl.SliceLayout(1, layout))
    bar_xchg = gl.inline_asm_elementwise(init_asm(PARTS), "=r", [], dtype=gl.int32, is_pure=False, pack=1)  # 1.
    main_smem = gl.allocate_shared_memory(dtype, [PARTS, MAIN], split_shared(BITS, PARTS))
    if TAIL > 0:
        tail_smem = gl.allocate_shared_memory(dtype, [PARTS, TAIL], split_shared(BITS, PARTS))
    else:
        tail_smem = main_smem
    row = gl.program_id(0)  # (the cluster's number)
    rank = cluster_rank()
    src = x_ptr + row.to(gl.int64) * out_stride
    if TMA:
        bar = gl.allocate_shared_memory(gl.int64, [1], own_barrier(PARTS))
        mbarrier.init(bar, count=1)
        FULL: gl.constexpr = full_parts(N_COLS, SLICE, PARTS)
        if rank < FULL:  # 2. a slice wholly in the row
            _copies(big_desc, box_desc, bar, main_smem, tail_smem, row, rank * SLICE,
                    copy_plan(MAIN, TAIL, SLICE, BIG, box_desc.block_shape[1]), MAIN, BIG)
        for r in gl.static_range(FULL, PARTS):  # 2. a slice reaching past the row: its own plan
            if rank == r:
                _copies(big_desc, box_desc, bar, main_smem, tail_smem, row, r * SLICE,
                        copy_plan(MAIN, TAIL, N_COLS - r * SLICE, BIG, box_desc.block_shape[1]), MAIN, BIG)
        mbarrier.wait(bar, 0)  # 3.
    x, cols, ok = _tile(main_smem, part, 0, SLICE, N_COLS, layout, src, not TMA)
    if TAIL > 0:
        x_t, cols_t, ok_t = _tile(tail_smem, part, MAIN, SLICE, N_COLS, layout, src, not TMA)
    dst = out_ptr + row.to(gl.int64) * out_stride
    if MODE == 1:  # (copy check: the slice back out unchanged; the cluster barrier's wait for the arrive of 1.)
        gl.inline_asm_elementwise("barrier.cluster.wait.acquire.aligned;\nmov.u32 $0, 0;", "=r", [],
                                  dtype=gl.int32, is_pure=False, pack=1)
        _probe(probe_ptr, rank, bar_xchg)
        gl.store(dst + cols, x.to(out_ptr.dtype.element_ty), mask=ok)
        if TAIL > 0:
            gl.store(dst + cols_t, x_t.to(out_ptr.dtype.element_ty), mask=ok_t)
    else:
        if TAIL > 0:
            m = gl.maximum(gl.max(x, axis=1), gl.max(x_t, axis=1))
        else:
            m = gl.max(x, axis=1)
        shift = gl.where(m == float("-inf"), 0.0, m)[:, None]  # (a slice of -inf only: exps and sum 0)
        e = gl.exp2((x - shift) * LOG2E)
        total = gl.sum(e, axis=1)
        if TAIL > 0:
            e_t = gl.exp2((x_t - shift) * LOG2E)
            total += gl.sum(e_t, axis=1)
        bar_x = gl.full([PARTS], 0, gl.int32, gl.SliceLayout(1, layout)) + bar_xchg
        scale, m_row = gl.inline_asm_elementwise(exchange_asm(PARTS), "=f,=f,f,f,r", [m, total, bar_x],  # 4.
                                                 dtype=(gl.float32, gl.float32), is_pure=False, pack=1)
        gl.store(dst + cols, (e * scale[:, None]).to(out_ptr.dtype.element_ty), mask=ok)  # 5.
        if TAIL > 0:
            gl.store(dst + cols_t, (e_t * scale[:, None]).to(out_ptr.dtype.element_ty), mask=ok_t)


@gluon.jit
def stream_kernel(out_ptr, big_desc, box_desc, out_stride, dbg_ptr, copy_ptr, N_COLS: gl.constexpr,
                  SLICE: gl.constexpr, MAIN: gl.constexpr, TAIL: gl.constexpr, PARTS: gl.constexpr, SUB: gl.constexpr,
                  FIX: gl.constexpr = 0, DEBUG: gl.constexpr = False):
    """Round 13's 'stream' form: the same TMA copies and exchange as ``tma_kernel``, but the slice is not held in
    registers: it is read from shared memory in sub-tiles of SUB columns three times (its max, its sum of exps,
    the store), so a thread holds a few vectors, not its whole share of the slice, and shared memory alone decides
    how many programs share a multiprocessor. Two exps an element, three reads of shared memory.

    Race probes (round 14, ``tma_race.py --diagnose``): FIX 1/2 whole-cluster barriers (after the exchange, at the
    end); FIX 3 a proxy fence (``fence.proxy.async``) after the copies' mbarrier is initialised; FIX 4 a CTA barrier
    after the wait on it; FIX 5 the store pass reads the slice from global memory (x, passed as ``copy_ptr``), not
    shared memory; FIX 6 the mbarrier invalidated once waited on. DEBUG: each program's (m, l, M, scale) into
    ``dbg_ptr`` ([rows, PARTS, 4] fp32) and the slice as the store pass read it into ``copy_ptr`` (x's shape and
    dtype)."""
    LOG2E: gl.constexpr = 1.4426950408889634
    dtype: gl.constexpr = box_desc.dtype
    BITS: gl.constexpr = dtype.primitive_bitwidth
    BIG: gl.constexpr = big_desc.block_shape[1]
    layout: gl.constexpr = split_layout(128 // BITS, gl.num_warps(), PARTS)
    part = gl.arange(0, PARTS, layout=gl.SliceLayout(1, layout))
    bar_xchg = gl.inline_asm_elementwise(init_asm(PARTS), "=r", [], dtype=gl.int32, is_pure=False, pack=1)
    main_smem = gl.allocate_shared_memory(dtype, [PARTS, MAIN], split_shared(BITS, PARTS))
    if TAIL > 0:
        tail_smem = gl.allocate_shared_memory(dtype, [PARTS, TAIL], split_shared(BITS, PARTS))
    else:
        tail_smem = main_smem
    row = gl.program_id(0)
    rank = cluster_rank()
    bar = gl.allocate_shared_memory(gl.int64, [1], own_barrier(PARTS))
    mbarrier.init(bar, count=1)
    if FIX == 3:
        fence_async_shared()
    FULL: gl.constexpr = full_parts(N_COLS, SLICE, PARTS)
    if rank < FULL:
        _copies(big_desc, box_desc, bar, main_smem, tail_smem, row, rank * SLICE,
                copy_plan(MAIN, TAIL, SLICE, BIG, box_desc.block_shape[1]), MAIN, BIG)
    for r in gl.static_range(FULL, PARTS):
        if rank == r:
            _copies(big_desc, box_desc, bar, main_smem, tail_smem, row, r * SLICE,
                    copy_plan(MAIN, TAIL, N_COLS - r * SLICE, BIG, box_desc.block_shape[1]), MAIN, BIG)
    mbarrier.wait(bar, 0)
    if FIX == 4:
        gl.thread_barrier()
    if FIX == 6:
        mbarrier.invalidate(bar)
    S_M: gl.constexpr = min(SUB, MAIN)
    S_T: gl.constexpr = min(SUB, TAIL) if TAIL > 0 else 1
    mx = gl.full([PARTS, S_M], float("-inf"), gl.float32, layout)
    for k in range(MAIN // S_M):  # the max
        x, cols, ok = _sub_tile(main_smem, k, S_M, 0, part, SLICE, N_COLS, layout)
        mx = gl.maximum(mx, x)
    m = gl.max(mx, axis=1)
    if TAIL > 0:
        mt = gl.full([PARTS, S_T], float("-inf"), gl.float32, layout)
        for k in range(TAIL // S_T):
            x, cols, ok = _sub_tile(tail_smem, k, S_T, MAIN, part, SLICE, N_COLS, layout)
            mt = gl.maximum(mt, x)
        m = gl.maximum(m, gl.max(mt, axis=1))
    shift = gl.where(m == float("-inf"), 0.0, m)[:, None]
    acc = gl.zeros([PARTS, S_M], gl.float32, layout)
    for k in range(MAIN // S_M):  # the sum of exps
        x, cols, ok = _sub_tile(main_smem, k, S_M, 0, part, SLICE, N_COLS, layout)
        acc += gl.exp2((x - shift) * LOG2E)
    total = gl.sum(acc, axis=1)
    if TAIL > 0:
        acc_t = gl.zeros([PARTS, S_T], gl.float32, layout)
        for k in range(TAIL // S_T):
            x, cols, ok = _sub_tile(tail_smem, k, S_T, MAIN, part, SLICE, N_COLS, layout)
            acc_t += gl.exp2((x - shift) * LOG2E)
        total += gl.sum(acc_t, axis=1)
    bar_x = gl.full([PARTS], 0, gl.int32, gl.SliceLayout(1, layout)) + bar_xchg
    scale, m_row = gl.inline_asm_elementwise(exchange_asm(PARTS), "=f,=f,f,f,r", [m, total, bar_x],
                                             dtype=(gl.float32, gl.float32), is_pure=False, pack=1)
    c = gl.log2(scale)[:, None]
    if FIX == 1:  # (race probe: a whole-cluster barrier after the exchange)
        gl.inline_asm_elementwise("barrier.cluster.arrive.release.aligned;\nbarrier.cluster.wait.acquire.aligned;\n"
                                  "mov.u32 $0, 0;", "=r", [], dtype=gl.int32, is_pure=False, pack=1)
    dst = out_ptr + row.to(gl.int64) * out_stride
    if DEBUG:
        d = dbg_ptr + (row * PARTS + part) * 4
        gl.store(d, m)
        gl.store(d + 1, total)
        gl.store(d + 2, m_row)
        gl.store(d + 3, scale)
    src = copy_ptr + row.to(gl.int64) * out_stride  # (FIX 5: x, read with out's row stride)
    for k in range(MAIN // S_M):  # the store
        x, cols, ok = _sub_tile(main_smem, k, S_M, 0, part, SLICE, N_COLS, layout)
        if FIX == 5:
            x = gl.load(src + cols, mask=ok, other=float("-inf")).to(gl.float32)
        if DEBUG:
            gl.store(copy_ptr + row.to(gl.int64) * out_stride + cols, x.to(out_ptr.dtype.element_ty), mask=ok)
        gl.store(dst + cols, gl.exp2((x - shift) * LOG2E + c).to(out_ptr.dtype.element_ty), mask=ok)
    if TAIL > 0:
        for k in range(TAIL // S_T):
            x, cols, ok = _sub_tile(tail_smem, k, S_T, MAIN, part, SLICE, N_COLS, layout)
            if FIX == 5:
                x = gl.load(src + cols, mask=ok, other=float("-inf")).to(gl.float32)
            if DEBUG:
                gl.store(copy_ptr + row.to(gl.int64) * out_stride + cols, x.to(out_ptr.dtype.element_ty), mask=ok)
            gl.store(dst + cols, gl.exp2((x - shift) * LOG2E + c).to(out_ptr.dtype.element_ty), mask=ok)
    if FIX == 2:  # (race probe: a whole-cluster barrier before the programs leave)
        gl.inline_asm_elementwise("barrier.cluster.arrive.release.aligned;\nbarrier.cluster.wait.acquire.aligned;\n"
                                  "mov.u32 $0, 0;", "=r", [], dtype=gl.int32, is_pure=False, pack=1)


# ---------------------------------------------------------------------------------------------- host side

def _next_power_of_2(n: int) -> int:
    return 1 if n <= 1 else 1 << (n - 1).bit_length()


def plan(n_cols: int, parts: int, num_warps: int) -> dict:
    """The launch's constexprs: SLICE (a program's columns, whole boxes), MAIN, the largest power of two it holds,
    and TAIL, a power of two for the rest (0: none), as ``clustered_registers.tiles``; BIG, the elements of one
    big TMA op (a box a warp)."""
    slice_ = -(-n_cols // (parts * BOX)) * BOX
    main = 1 << (slice_.bit_length() - 1)
    tail = _next_power_of_2(slice_ - main) if slice_ > main else 0
    if main + tail >= _next_power_of_2(slice_):  # (one tile holds it as well)
        main, tail = _next_power_of_2(slice_), 0
    return dict(N_COLS=n_cols, SLICE=slice_, MAIN=main, TAIL=tail, PARTS=parts, BIG=BOX * num_warps)


def refusal(x: torch.Tensor) -> str:
    """Why the kernel cannot take ``x`` ('' when it can)."""
    if not (x.is_cuda and x.dim() == 2 and x.stride(1) == 1):
        return "a contiguous-row 2-D CUDA tensor only"
    if x.data_ptr() % 16 or (x.stride(0) * x.element_size()) % 16 or (x.shape[1] * x.element_size()) % 16:
        return "rows must start on 16 bytes and be whole 16-byte vectors (TMA)"
    if x.shape[0] >= 2**31:
        return "fewer than 2**31 rows"
    return ""


def descriptors(x: torch.Tensor, options: dict):
    """The TMA descriptors of ``x``: boxes of BOX elements, and ops of BIG elements (a box a warp)."""
    from triton.experimental.gluon.nvidia.hopper import TensorDescriptor

    layout = own_shared(x.element_size() * 8, options["PARTS"])
    shape, strides = list(x.shape), list(x.stride())
    return (TensorDescriptor(x, shape, strides, [1, options["BIG"]], layout),
            TensorDescriptor(x, shape, strides, [1, BOX], layout))


def tma_softmax(x: torch.Tensor, out: torch.Tensor | None = None, parts: int = 8, num_warps: int = 8,
                mode: str = "full", probe: torch.Tensor | None = None, fix: int = 0, debug=None):
    """Softmax over the last dim of ``x`` (2-D, CUDA, rows on 16 bytes and whole 16-byte vectors; Hopper).
    ``mode`` 'copy' or 'exchange' (``--check-parts``): a part of the kernel alone (``tma_kernel``'s MODE); 'copy'
    writes the shared addresses into ``probe`` (int32, 2·parts)."""
    why = refusal(x)
    if why:
        raise ValueError(f"tma_softmax: {why}")
    y = torch.empty_like(x, memory_format=torch.contiguous_format) if out is None else out
    if mode == "exchange" and x.stride(0) != y.stride(0):
        raise ValueError("tma_softmax: the exchange check reads x with y's row stride")
    options = plan(x.shape[1], parts, num_warps)
    big, box = descriptors(x, options)
    options = {k: v for k, v in options.items() if k != "BIG"}
    if mode == "stream":  # (round 13: the slice read from shared memory in sub-tiles of 2 vectors a thread)
        sub = 2 * 32 * num_warps * 16 // x.element_size()
        dbg, copy = debug if debug is not None else (y, x if fix == 5 else y)  # (stream_kernel's DEBUG, FIX 5)
        stream_kernel[(x.shape[0],)](y, big, box, y.stride(0), dbg, copy, **options, SUB=sub, FIX=fix,
                                     DEBUG=debug is not None, num_warps=num_warps, num_ctas=parts)
        return y
    if mode != "full":
        options["MODE"] = MODES[mode]
    tma_kernel[(x.shape[0],)](y, big, box, y.stride(0), x, y if probe is None else probe, **options,
                              num_warps=num_warps, num_ctas=parts)
    return y


# ---------------------------------------------------------------------------------------------- checking

def hard_rows(n_rows, n_cols, dtype):
    """Rows to check first: random, all -inf, -inf over the first half (whole slices), near -1000 with the mass
    on a few, near the dtype's largest finite value (an x·log2 e - m·log2 e would overflow there)."""
    x = 3 * torch.randn((n_rows, n_cols), device="cuda")
    x[1] = float("-inf")
    x[2, : n_cols // 2] = float("-inf")
    x[3] = -1000.0 - 3 * torch.rand(n_cols, device="cuda")
    x[3, :: max(1, n_cols // 5)] = -990.0
    big = torch.finfo(dtype).max
    x[4] = big * (1 - 0.01 * torch.rand(n_cols, device="cuda"))
    x[5, -1] = 50.0  # (the mass on the row's last column, in the last program's slice)
    return x.to(dtype)


def wrong(y, x) -> str:
    """'' when ``y`` is float64's softmax of ``x`` (NaN where torch gives NaN), else what is wrong."""
    tol = 1e-5 if x.dtype == torch.float32 else 1e-2
    ref = torch.softmax(x.double(), -1)
    if y.shape != x.shape or y.dtype != x.dtype:
        return f"shape/dtype {tuple(y.shape)} {y.dtype}"
    close = torch.isclose(y.double(), ref, atol=tol * 0.1, rtol=tol, equal_nan=True)
    if bool(close.all()):
        return ""
    bad = (~close).nonzero()
    r, c = bad[0].tolist()
    return f"{len(bad)} wrong, first [{r}, {c}]: {y[r, c].item()} (float64 {ref[r, c].item()})"


def copied_wrong(y, x) -> str:
    """'' when ``y`` is ``x`` exactly (the copy check), else what is wrong."""
    same = (y == x) | (y.isnan() & x.isnan())
    if bool(same.all()):
        return ""
    bad = (~same).nonzero()
    r, c = bad[0].tolist()
    return f"{len(bad)} not copied, first [{r}, {c}]: {y[r, c].item()} (x {x[r, c].item()})"


def check(parts, warps, dtype_name, widths, mode="full") -> dict:
    """{width: '' or what is wrong} (the body of ``--check``, in its own process); ``mode``: tma_softmax's."""
    dtype = getattr(torch, dtype_name)
    out = {}
    for n_cols in widths:
        x = hard_rows(8, n_cols, dtype)
        probe = torch.full((2 * parts,), -1, dtype=torch.int32, device="cuda")
        try:
            y = tma_softmax(x, torch.full_like(x, float("nan")), parts, warps, mode, probe)
            torch.cuda.synchronize()
            out[n_cols] = copied_wrong(y, x) if mode == "copy" else wrong(y, x)
        except Exception as error:
            out[n_cols] = f"{type(error).__name__}: {error}"[:400]
            break
        if mode == "copy":  # (where global_smem and the exchange's array lie: multiples of 128 wanted)
            addresses = probe.view(parts, 2).tolist()  # (-1: not written; a scalar store is made by rank 0 only)
            odd = sorted({a % 128 for pair in addresses for a in pair if a != -1} - {0})
            print(f"# width {n_cols}: (global_smem, xchg) of rank 0: {[hex(a) for a in addresses[0]]}"
                  f"{'' if not odd else f'; NOT ON 128 BYTES (mod 128: {odd})'}", flush=True)
            if odd:
                out[n_cols] = (out[n_cols] + "; " if out[n_cols] else "") + f"shared addresses mod 128: {odd}"
    return out


def checked_in_subprocess(parts, warps, dtype, widths, mode="full", notes=None) -> str:
    """'' when the setting is right on every width, checked in a subprocess killed after ``CHECK_SECONDS``
    (a hang costs that, not the sweep), else what went wrong; ``notes``, a list: the process's '#' lines go there.
    ``mode`` other than 'full': run with CUDA_LAUNCH_BLOCKING=1 (a fault is reported at its launch)."""
    name = str(dtype).removeprefix("torch.")
    command = [sys.executable, os.path.abspath(__file__), "--check", str(parts), str(warps), name,
               *map(str, widths)]
    env = dict(os.environ)
    if mode != "full":
        command[3:3] = ["--mode", mode]  # (after "--check")
        env["CUDA_LAUNCH_BLOCKING"] = "1"
    try:
        run = subprocess.run(command, capture_output=True, text=True, timeout=CHECK_SECONDS, env=env)
    except subprocess.TimeoutExpired:
        return f"timed out after {CHECK_SECONDS} s (a hang?)"
    if notes is not None:
        notes.extend(line for line in run.stdout.splitlines() if line.startswith("#"))
    lines = [line for line in run.stdout.splitlines() if line.startswith("{")]
    if run.returncode != 0 or not lines:
        return f"check process exited {run.returncode}: {run.stderr.strip()[-400:]}"
    return "; ".join(f"width {w}: {why}" for w, why in json.loads(lines[-1]).items() if why)


# ---------------------------------------------------------------------------------------------- the sweep

# (rows, columns, dtype): the settings (parts, num_warps) to try; the library's dispatcher and QuACK beside them.
# Round 12's first run (h200-clustered-tma-round12.json) faulted; round 13's first (h200-clustered-tma-round13.json)
# ran it on 1024x65536 / 128256 / 100000 bf16 at (4,8) (8,4) (8,8) (16,4) (16,8), 1024x65536 and 512x151936 fp32 at
# (8,8) (16,4) (16,8); its second (h200-clustered-tma-2-round13.json) the widths around the winners (the ranges the
# dispatcher now gives kernels/clustered_tma.py). These are its third: the 'stream' form (``stream_kernel``) where
# registers held too few rows at a time (16-bit rows past 81,920), a third element "stream" in a setting. It ran
# 95.2% of copy at 1024x128256 bf16 but gives a wrong row now and then (0.3-0.6% of rows, tma_race.py). Round 14
# found why: the copies' mbarrier is not invalidated before the reductions' scratch reuses its bytes. Here it stays
# so (FIX 0, as these records ran; FIX 6 invalidates it, ``tma_race.py --invalidated``); the library's kernel, both
# forms, invalidates it.
SETTINGS = {(1024, 128256, torch.bfloat16): [(8, 8), (8, 2, "stream"), (8, 4, "stream"), (8, 8, "stream")],
            (1024, 100000, torch.bfloat16): [(8, 2, "stream"), (8, 4, "stream")],
            (1024, 65536, torch.bfloat16): [(8, 4), (4, 4, "stream"), (8, 4, "stream")],
            (512, 151936, torch.float32): [(8, 8), (8, 4, "stream"), (16, 4, "stream")]}
# Odd widths (whole 16-byte vectors, not multiples of a slice), checked once per (dtype, parts, warps): a slice
# past the row's end, a program wholly past it (8,200 bf16 over 16), a row shorter than one box per program.
ODD_WIDTHS = {torch.bfloat16: [8200, 50264, 1000], torch.float32: [4100, 30004, 1000]}


# --check-parts: (dtype, timed width, parts, warps), each run three ways (MODES), the odd widths after the timed one.
PART_SETTINGS = [(torch.bfloat16, 65536, 8, 8), (torch.bfloat16, 128256, 16, 4), (torch.float32, 65536, 8, 8),
                 (torch.float32, 151936, 16, 8)]


def check_parts(settings, modes=("copy", "exchange", "full")) -> list:
    """Each setting (dtype, width, parts, warps) checked once per mode, each in its own subprocess
    (CUDA_LAUNCH_BLOCKING=1, killed after CHECK_SECONDS): 'copy' (TMA into shared memory + mbarrier wait, the
    slice stored back unchanged, no exchange; prints where global_smem and the exchange's array lie), 'exchange'
    (plain loads, the st.async/mbarrier exchange, no TMA), 'full' (the kernel as timed). One dict a run, with
    'why' ('' when right) and the process's notes."""
    from concurrent.futures import ThreadPoolExecutor

    runs = [(dtype, width, parts, warps, mode) for dtype, width, parts, warps in settings for mode in modes]

    def one(run):
        dtype, width, parts, warps, mode = run
        notes = []
        why = checked_in_subprocess(parts, warps, dtype, [width] + ODD_WIDTHS[dtype], mode, notes)
        return dict(dtype=str(dtype)[6:], width=width, parts=parts, num_warps=warps, mode=mode, why=why,
                    notes=notes)

    started = time.time()
    with ThreadPoolExecutor(CHECK_PROCESSES) as pool:
        results = list(pool.map(one, runs))
    for r in results:
        print(f"{r['mode']:8s} {r['dtype']} {r['width']} parts={r['parts']} warps={r['num_warps']}: "
              f"{'OK' if not r['why'] else 'ERROR: ' + r['why'][:300]}", flush=True)
        for note in r["notes"][:1]:
            print(f"         {note}", flush=True)
    print(f"{len(runs)} part checks in {time.time() - started:.0f} s", flush=True)
    return results


def main(path):
    from concurrent.futures import ThreadPoolExecutor

    from softmax_lab import bench

    quack = bench.peer_candidates()
    checks, odd_done = [], set()
    for (_, n_cols, dtype), settings in SETTINGS.items():
        for parts, warps, *form in settings:
            mode = form[0] if form else "full"
            widths = [n_cols] + ([] if (dtype, parts, warps, mode) in odd_done else ODD_WIDTHS[dtype])
            odd_done.add((dtype, parts, warps, mode))
            checks.append((parts, warps, dtype, widths, mode))
    started = time.time()
    with ThreadPoolExecutor(CHECK_PROCESSES) as pool:  # (the compiles dominate; a hang costs CHECK_SECONDS)
        verdicts = list(pool.map(lambda c: checked_in_subprocess(*c), checks))
    print(f"{len(checks)} settings checked in {time.time() - started:.0f} s", flush=True)
    cases, failed, verdicts = [], [], iter(verdicts)
    for (n_rows, n_cols, dtype), settings in SETTINGS.items():
        candidates = list(quack)
        for parts, warps, *form in settings:
            mode = form[0] if form else "full"
            why = next(verdicts)
            line = f"{n_rows}x{n_cols} {str(dtype)[6:]} parts={parts} warps={warps} {mode}"
            if why:
                print(f"{line}: NOT TIMED: {why}"[:400], flush=True)
                failed.append(dict(rows=n_rows, cols=n_cols, dtype=str(dtype)[6:], parts=parts, num_warps=warps,
                                   mode=mode, why=why))
                continue
            print(f"{line}: right on the hard rows", flush=True)

            def launch(x, out, parts=parts, warps=warps, mode=mode):
                return tma_softmax(x, out, parts, warps, mode)

            candidates.append((f"tma {parts}x{warps}{' stream' if mode == 'stream' else ''}", launch,
                               dict(num_warps=warps, **plan(n_cols, parts, warps))))
        cases.append((n_rows, n_cols, dtype, candidates))
    if failed:  # (which part fails: copy and exchange alone, on up to 4 of the failed settings)
        chosen = {}
        for f in failed:
            if f["mode"] == "full":
                chosen.setdefault((f["dtype"], f["parts"]), f)
        chosen = list(chosen.values())[:4]
        results = check_parts([(getattr(torch, f["dtype"]), f["cols"], f["parts"], f["num_warps"]) for f in chosen],
                              ("copy", "exchange"))
        for f, (copy, exchange) in zip(chosen, zip(results[::2], results[1::2])):
            f["parts_check"] = dict(copy=copy["why"] or "OK", exchange=exchange["why"] or "OK",
                                    notes=copy["notes"] + exchange["notes"])
    bench.sweep(path, cases, "PYTHONPATH=code python3 benchmarks/sweeps/clustered_tma.py OUT.json", failed=failed)


# ---------------------------------------------------------------------------------------------- compiling, no GPU

def compiled_for_h200(n_cols, dtype, parts, warps, mode="full"):
    """The kernel compiled as for an H200 (sm_90) for rows of ``n_cols`` (rows 16-byte aligned, as the descriptors
    need), without a GPU."""
    import triton
    from triton.backends.compiler import GPUTarget
    from triton.experimental.gluon._runtime import GluonASTSource
    from triton.runtime.jit import mangle_type

    x = torch.empty((2, n_cols), dtype=dtype)  # (on the CPU: only its dtype, shape and strides are used)
    options = plan(n_cols, parts, warps)
    big, box = descriptors(x, options)
    del options["BIG"]
    ty = {torch.bfloat16: "*bf16", torch.float16: "*fp16", torch.float32: "*fp32"}[dtype]
    if mode == "stream":
        options["SUB"] = 2 * 32 * warps * 16 // x.element_size()
        signature = {"out_ptr": ty, "big_desc": mangle_type(big), "box_desc": mangle_type(box), "out_stride": "i32",
                     "dbg_ptr": "*fp32", "copy_ptr": ty, **{k: "constexpr" for k in options}}
        source = GluonASTSource(fn=stream_kernel, signature=signature, constexprs=options,
                                attrs={(0,): [["tt.divisibility", 16]], (3,): [["tt.divisibility", 16]]})
        return triton.compile(source, target=GPUTarget("cuda", 90, 64), options=dict(num_warps=warps, num_ctas=parts))
    options["MODE"] = MODES[mode]
    signature = {"out_ptr": ty, "big_desc": mangle_type(big), "box_desc": mangle_type(box), "out_stride": "i32",
                 "x_ptr": ty, "probe_ptr": "*i32", **{k: "constexpr" for k in options}}
    source = GluonASTSource(fn=tma_kernel, signature=signature, constexprs=options,
                            attrs={(0,): [["tt.divisibility", 16]], (3,): [["tt.divisibility", 16]],
                                   (4,): [["tt.divisibility", 16]], (5,): [["tt.divisibility", 16]]})
    return triton.compile(source, target=GPUTarget("cuda", 90, 64), options=dict(num_warps=warps, num_ctas=parts))


def static_shared(compiled) -> int:
    """The bytes of the kernel's static shared section (``.nv.shared.<kernel>``: 0x400 reserved bytes and the
    exchange's array): Triton's dynamic shared memory, global_smem, begins there (as the SASS shows: on the H200 run
    before the fix, global_smem = 0x400 + 0x50)."""
    import re
    import tempfile
    from pathlib import Path

    import triton

    tool = Path(triton.__file__).parent / "backends" / "nvidia" / "bin" / "cuobjdump"
    with tempfile.TemporaryDirectory() as tmp:
        cubin = Path(tmp) / "kernel.cubin"
        cubin.write_bytes(compiled.asm["cubin"])
        elf = subprocess.run([str(tool), "-elf", str(cubin)], capture_output=True, text=True, check=True).stdout
    sizes = [int(m.group(1), 16) for m in re.finditer(r"^\s*\d+\s+[0-9a-f]+\s+([0-9a-f]+)\s.*NOBITS.*"
                                                         r"\.nv\.shared\.(?!reserved)\S+\s*$", elf, re.M)]
    if len(sizes) != 1:
        raise RuntimeError(f"no single .nv.shared section in the cubin: {sizes}")
    return sizes[0]


def compile_report():
    """Each setting of the sweep (and the odd widths) compiled for sm_90: registers, shared memory, SASS ops."""
    torch.cuda.is_available = lambda: True  # (compile as for a GPU; nothing is launched)
    os.environ.pop("TRITON_INTERPRET", None)  # (set by softmax_lab's import on a machine without a GPU)
    sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "..", "code"))
    from softmax_lab.machine_code import sass_ops

    rows = []
    for (_, n_cols, dtype), settings in SETTINGS.items():
        for parts, warps, *form in settings:
            for width in [n_cols] + ODD_WIDTHS[dtype]:
                c = compiled_for_h200(width, dtype, parts, warps, form[0] if form else "full")
                ops, registers = sass_ops(c)
                ptx = c.asm["ptx"]
                static = static_shared(c)
                if static % 128:
                    raise RuntimeError(f"global_smem at {static:#x}: TMA's destinations off 128 bytes")
                count = lambda prefix: sum(n for op, n in ops.items() if op.startswith(prefix))
                row = dict(width=width, dtype=str(dtype)[6:], parts=parts, warps=warps, registers=registers,
                           shared=c.metadata.shared, global_smem=hex(static), UTMALDG=count("UTMALDG"),
                           SYNCS=count("SYNCS"), BAR=count("BAR."), UCGABAR=count("UCGABAR"), STG128=count("STG.E.128"),
                           LDS128=count("LDS.128"), MUFU=count("MUFU.EX2"),
                           ptx_cluster_barriers=ptx.count("barrier.cluster"), st_async=ptx.count("st.async"),
                           **{k: v for k, v in plan(width, parts, warps).items() if k != "PARTS"})
                rows.append(row)
                print(json.dumps(row), flush=True)
    for dtype, width, parts, warps in PART_SETTINGS:  # (the --check-parts kernels compile too)
        for mode in ("copy", "exchange"):
            c = compiled_for_h200(width, dtype, parts, warps, mode)
            print(json.dumps(dict(mode=mode, width=width, dtype=str(dtype)[6:], parts=parts, warps=warps,
                                  global_smem=hex(static_shared(c)), tma_ops=c.asm["ptx"].count("cp.async.bulk"),
                                  st_async=c.asm["ptx"].count("st.async"))), flush=True)
    return rows


if __name__ == "__main__":
    if sys.argv[1] == "--check":  # --check [--mode MODE] PARTS WARPS DTYPE WIDTH...
        args, mode = sys.argv[2:], "full"
        if args[0] == "--mode":
            mode, args = args[1], args[2:]
        result = check(int(args[0]), int(args[1]), args[2], [int(w) for w in args[3:]], mode)
        print(json.dumps(result))
    elif sys.argv[1] == "--check-parts":  # --check-parts [OUT.json]
        found = check_parts(PART_SETTINGS)
        if len(sys.argv) > 2:
            with open(sys.argv[2], "w") as f:
                json.dump(found, f, indent=1)
    elif sys.argv[1] == "--compile":
        compile_report()
    elif sys.argv[1].startswith("-"):
        raise SystemExit(f"unknown option {sys.argv[1]} (--check, --check-parts, --compile or OUT.json)")
    else:
        main(sys.argv[1])
