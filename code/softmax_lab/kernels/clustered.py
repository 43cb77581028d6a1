"""Clustered softmax: a row too long for one program's shared memory is split over a cluster of programs.

``clustered_softmax_kernel(out_ptr, in_ptr, partial_ptr, n_cols, n_cols_v, in_stride_v, out_stride_v, SLICE,
CHUNK, PARTS, OUT_VEC, DSMEM, ONLINE)``
  one cluster of PARTS programs (CTAs) per row; program p of the cluster holds columns [p·SLICE, (p+1)·SLICE)
  of the row in its shared memory; partial_ptr: 2·PARTS floats a row, where the programs leave their (max, sum);
  DSMEM: the partials go through the partners' shared memory instead; ONLINE: each program's sum taken with its
  max as the chunks land (``chunk_state.py``); the other arguments as in ``resident.py``

A Hopper GPU launches programs in *clusters* that are guaranteed to run at the same time, on neighbouring
multiprocessors, and can wait for each other at a cluster barrier (``barrier.cluster``). So a row of 65,536
fp32 elements (256 KB, more than one multiprocessor's shared memory) is cut into PARTS slices, each copied
into one program's shared memory (``cp.async``, as in ``resident.py``); every program reduces its slice to a
partial (max m, sum l of exp(x - m)), writes it to global memory, waits at the cluster barrier, reads its
partners' partials and combines them (the rule of ``combine.py``), then writes its slice of the output from
shared memory. One read of the row and one write, like copying it; no program waits on another that is not
running, which is what a cooperative grid has to arrange by hand.

The layouts say which program holds what: the tensors are ``[PARTS, CHUNK]``, split over the cluster along
the first dim (``cga_layout``), so program p sees row p of them. (Triton 3.6 cannot yet reduce across a
cluster, or move a tensor between its programs, so the exchange goes through global memory, at a barrier; or, with
``DSMEM``, through the partners' shared memory in hand-written PTX, ``cluster_exchange.py``, which measured no
faster here: docs/performance.md, round 8.)
Written in Gluon, GPU only (Hopper: clusters); Triton's CPU interpreter cannot run it.

The dispatcher uses it for the rows too long for one program's shared memory and too short to share among
cooperating programs, on Hopper GPUs (``docs/performance.md`` has what it measured). What keeps it from the copy's
speed is the barrier: every program of the cluster idles there, its slice in shared memory and no copy in
flight, until the slowest has written its partial, so a row over two programs is slower than the same bytes
held by one (``resident.py``).
"""
import torch
from triton.experimental import gluon
from triton.experimental.gluon import language as gl
from triton.experimental.gluon.language.nvidia.ampere import async_copy as cp
from triton.runtime.jit import constexpr_function

from . import chunk_state
from .cluster_exchange import cluster_arrive, exchange_max_sum
from ._launch import cdiv, gluon_refusal, next_power_of_2, prepare_gluon, row_vector, whole_chunks

MAX_PARTS = 16  # programs in a cluster: 8 on every Hopper GPU, 16 on H100/H200 (Triton allows it there)
PORTABLE_PARTS = 8
MAX_CHUNKS = 32  # chunks per slice: a commit group each (the wait-group count stops at 63)


@constexpr_function
def split_layout(vec, num_warps, parts):
    """``[parts, CHUNK]`` with row p in program p of the cluster, 16-byte vectors a thread."""
    cluster = [[1 << i, 0] for i in range(parts.bit_length() - 1)]  # program bit i: row 2**i
    return gl.BlockedLayout([1, vec], [1, 32], [1, num_warps], [1, 0], cluster)


@constexpr_function
def shared_layout(parts):
    """Shared memory ``[chunks, parts, CHUNK]``: each program keeps its own part."""
    return gl.SwizzledSharedLayout(1, 1, 1, [1, 0], [[1 << i, 0] for i in range(parts.bit_length() - 1)])


@constexpr_function
def whole_cluster_layout(num_warps, parts):
    """``[parts]`` held whole by every program of the cluster."""
    return gl.BlockedLayout([1], [32], [num_warps], [0], [[0] for i in range(parts.bit_length() - 1)])


@gluon.jit
def cluster_barrier():
    """Every thread of every program in the cluster arrives; their writes before it are seen after it."""
    gl.inline_asm_elementwise("barrier.cluster.arrive.release.aligned;\nbarrier.cluster.wait.acquire.aligned;\n"
                              "mov.u32 $0, 0;", "=r", [], dtype=gl.int32, is_pure=False, pack=1)


@gluon.jit
def clustered_softmax_kernel(out_ptr, in_ptr, partial_ptr, n_cols, n_cols_v, in_stride_v, out_stride_v,
                             SLICE: gl.constexpr, CHUNK: gl.constexpr, PARTS: gl.constexpr, OUT_VEC: gl.constexpr = 1,
                             DSMEM: gl.constexpr = False, ONLINE: gl.constexpr = False):
    VEC: gl.constexpr = 128 // in_ptr.dtype.element_ty.primitive_bitwidth  # elements per 16 bytes
    N: gl.constexpr = SLICE // CHUNK
    layout: gl.constexpr = split_layout(VEC, gl.num_warps(), PARTS)
    row_smem = gl.allocate_shared_memory(in_ptr.dtype.element_ty, [N, PARTS, CHUNK], shared_layout(PARTS))
    row = gl.program_id(0).to(gl.int64)  # (the cluster's number)
    part = gl.arange(0, PARTS, layout=gl.SliceLayout(1, layout))
    cols = part[:, None] * SLICE + gl.arange(0, CHUNK, layout=gl.SliceLayout(0, layout))[None, :]
    src = in_ptr + row * (in_stride_v * VEC)  # (row: 64-bit; the stride fits 32 bits, see _launch.vector_refusal)
    for c in gl.static_range(N):  # 1. this program's slice on its way, a commit group per chunk
        cp.async_copy_global_to_shared(row_smem.index(c), src + c * CHUNK + cols,
                                       mask=c * CHUNK + cols < n_cols_v * VEC)
        cp.commit_group()
    if DSMEM:
        cluster_arrive()  # (the partners may write into this program's shared memory once all have arrived)
    m = gl.full([PARTS, CHUNK], float("-inf"), gl.float32, layout)
    m_t, l_t = chunk_state.start_parts(PARTS, CHUNK, VEC)
    for c in gl.static_range(N):  # 2. the slice's max, chunk by chunk as they land
        cp.wait_group(N - 1 - c)
        x = row_smem.index(c).load(layout).to(gl.float32)
        x = gl.where(c * CHUNK + cols < n_cols, x, float("-inf"))
        if ONLINE:  # the sum too (chunk_state.py)
            m_t, l_t = chunk_state.fold_parts(m_t, l_t, x, VEC)
        else:
            m = gl.maximum(m, x)
    if ONLINE:
        m_part, l_part = chunk_state.finish_parts(m_t, l_t, gl.SliceLayout(1, layout))
    else:
        m_part = gl.max(m, axis=1)
        shift = gl.where(m_part == float("-inf"), 0.0, m_part)  # (a slice of -inf only: its sum is 0)
        total = gl.zeros([PARTS, CHUNK], gl.float32, layout)
        for c in range(N):  # 3. the slice's sum of exp(x - its max)
            x = row_smem.index(c).load(layout).to(gl.float32)
            total += gl.where(c * CHUNK + cols < n_cols, chunk_state.exp_minus(x, shift[:, None]), 0.0)
    if DSMEM:  # 4. the partials into the partners' shared memory, combined (cluster_exchange.py)
        m_all, r_all = exchange_max_sum(m_part, l_part if ONLINE else gl.sum(total, axis=1), PARTS)
        m_row = m_all[:, None]
        scale = r_all[:, None]
    else:  # 4. the partials out, the barrier, everyone's partials in, combined
        mine = partial_ptr + row * (2 * PARTS) + part * 2
        gl.store(mine, m_part)
        gl.store(mine + 1, l_part if ONLINE else gl.sum(total, axis=1))  # (summed here, as the measured kernel did)
        cluster_barrier()
        every = gl.arange(0, PARTS, layout=whole_cluster_layout(gl.num_warps(), PARTS))
        theirs = partial_ptr + row * (2 * PARTS) + every * 2
        m_all = gl.load(theirs, volatile=True)  # (volatile: from L2, never a stale L1 line)
        l_all = gl.load(theirs + 1, volatile=True)
        m_row = gl.max(m_all, axis=0)
        scale = 1.0 / gl.sum(l_all * chunk_state.exp_minus(m_all, m_row), axis=0)
    dst = out_ptr + row * (out_stride_v * OUT_VEC)  # (this order, not (row * stride) * VEC: it measured
    # faster; its product is 32-bit, so the launcher refuses rows 2**31 or more elements apart)
    if OUT_VEC == VEC:  # whole vectors: the compiler sees it, and stores 16 bytes at a time
        end = n_cols_v * VEC
    else:
        end = n_cols
    log2_scale = gl.log2(scale)
    for c in range(N):  # 5. exp again, scaled, stored
        x = row_smem.index(c).load(layout).to(gl.float32)
        y = chunk_state.exp_minus_times(x, m_row, log2_scale)
        gl.store(dst + c * CHUNK + cols, y.to(out_ptr.dtype.element_ty), mask=c * CHUNK + cols < end)


def slices(n_cols: int, element_size: int, parts=None, num_warps=None, vectors=None) -> dict:
    """The launch's constexprs for a row: each program's slice is whole chunks of ``vectors`` 16-byte vectors a
    thread, at most ``MAX_CHUNKS`` of them. Defaults: ``parts``, the fewest programs (up to 8, the cluster
    size every Hopper GPU launches) whose slices are at most 64 KB, so that three fit a multiprocessor;
    ``num_warps`` 4; ``vectors``, the fewest that keep a slice to ``MAX_CHUNKS`` chunks."""
    num_warps = num_warps or 4
    parts = parts or min(PORTABLE_PARTS, next_power_of_2(cdiv(n_cols * element_size, 65536)))
    if parts > MAX_PARTS:
        raise ValueError(f"parts must be at most {MAX_PARTS} (programs in a cluster), got {parts}")
    vectors = vectors or next_power_of_2(cdiv(cdiv(n_cols, parts), MAX_CHUNKS * 32 * num_warps * 16 // element_size))
    chunk = 32 * num_warps * vectors * 16 // element_size
    chunks = whole_chunks(cdiv(n_cols, parts), chunk)
    if chunks > MAX_CHUNKS:
        raise ValueError(f"each program's slice would be {chunks} chunks of {chunk} elements; at most {MAX_CHUNKS}: "
                         "use more parts, warps or vectors")
    return dict(SLICE=chunks * chunk, CHUNK=chunk, PARTS=parts, num_warps=num_warps, num_ctas=parts)


def refusal(x: torch.Tensor, parts=None, num_warps=None, vectors=None, dsmem=False, online=False) -> str:
    """Why this GPU or ``x`` cannot take the kernel (``gluon_refusal``), or ''."""
    options = slices(x.shape[1], x.element_size(), parts, num_warps, vectors)
    if x.shape[0] * options["PARTS"] >= 2**31:  # (the launch's grid is rows × parts programs, a 32-bit int)
        return "clustered_softmax: at most 2**31 programs (rows × parts); use cooperative_softmax"
    return gluon_refusal(x, "clustered_softmax", row_bytes=options["SLICE"] * x.element_size(), clusters=True)


def launch_setup(y, x, parts=None, num_warps=None, vectors=None, dsmem=False, online=False):
    """(kernel, grid, args, options) of one launch (the dispatcher's fast path reuses it); args[2] is the
    partials' buffer, 2·PARTS floats a row (with ``dsmem``, one float, unused)."""
    n_rows, n_cols = x.shape
    vec = 16 // x.element_size()
    options = slices(n_cols, x.element_size(), parts, num_warps, vectors)
    options["OUT_VEC"] = out_vec = row_vector(n_cols, y)
    options["DSMEM"] = bool(dsmem)
    options["ONLINE"] = bool(online)
    size = 1 if dsmem else n_rows * 2 * options["PARTS"]
    partials = torch.empty(size, dtype=torch.float32, device=x.device)
    args = (y, x, partials, n_cols, cdiv(n_cols, vec), x.stride(0) // vec, y.stride(0) // out_vec)
    return clustered_softmax_kernel, (n_rows,), args, options


def cluster_refusal(kernel, grid, args, options) -> str:
    """A cluster of more than ``PORTABLE_PARTS`` programs must fit one group of multiprocessors (a GPC) of this
    GPU with its shared memory: asked of the driver for the compiled kernel (``cuOccupancyMaxActiveClusters``)."""
    from triton.runtime import driver

    compiled = kernel.warmup(*args, grid=grid, **options)
    compiled._init_handles()
    parts = options["PARTS"]
    if driver.active.utils.cuOccupancyMaxActiveClusters(compiled.function, compiled.metadata.shared, parts) < 1:
        return (f"clustered_softmax: this GPU cannot run a cluster of {parts} programs with "
                f"{compiled.metadata.shared} bytes of shared memory each; use parts={PORTABLE_PARTS} or fewer "
                "(with more warps or vectors), or cooperative_softmax")
    return ""


def clustered_softmax(x: torch.Tensor, out: torch.Tensor | None = None, parts: int | None = None,
                      num_warps: int | None = None, vectors: int | None = None, dsmem: bool = False,
                      online: bool = False) -> torch.Tensor:
    """Softmax over the last dim of 2-D ``x`` (Hopper GPU; rows starting on 16 bytes, up to 16 shared memories
    long: 1,048,576 fp16/bf16 or 524,288 fp32 elements). Knobs: ``parts`` (programs per row, a power of two
    up to 16; 16 only where the GPU can launch such clusters, e.g. H100/H200 SXM; default: slices of at most
    64 KB, up to 8 programs), ``num_warps`` (default 4), ``vectors`` (16-byte vectors a thread copies per
    chunk; default: the fewest that keep a slice to 32 chunks), ``dsmem`` (the programs' partials go into each
    other's shared memory, ``cluster_exchange.py``; default: through global memory), ``online`` (each program's sum
    taken with its max as the chunks land, ``chunk_state.py``; default: a pass of its own)."""
    x, y = prepare_gluon(x, out, "clustered_softmax", lambda x: refusal(x, parts, num_warps, vectors), MAX_PARTS,
                         parts=parts, num_warps=num_warps, vectors=vectors)
    if x.numel() == 0:
        return y
    kernel, grid, args, options = launch_setup(y, x, parts, num_warps, vectors, dsmem, online)
    why = cluster_refusal(kernel, grid, args, options) if options["PARTS"] > PORTABLE_PARTS else ""
    if why:
        raise ValueError(why)
    kernel[grid](*args, **options)
    return y
