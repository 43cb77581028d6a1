"""Clustered backward: a row's y and dy too long for one program's shared memory, split over a cluster of programs.

dx = y·(dy - Σ dy·y) reads y and dy once and writes dx once, if both stay on chip between the dot and the store.
A row of 128,256 bf16 elements is 501 KB of y and dy, more than one multiprocessor holds, so ``backward.py`` shares
it out to cooperating programs, which read y and dy twice. Here, as ``clustered.py`` does for the forward, a
cluster of PARTS programs takes the row: program p copies its slice of y and dy into shared memory (``cp.async``),
takes its part of Σ dy·y as the chunks land, the cluster adds the parts up, and each program writes its slice of
dx from shared memory. The parts go through global memory and the cluster barrier (``DSMEM=False``), or straight
into the partners' shared memory (``cluster_exchange.py``).

``clustered_backward_kernel(dx_ptr, y_ptr, dy_ptr, partial_ptr, n_cols_v, y_stride_v, dy_stride_v, dx_stride_v,
SLICE, CHUNK, PARTS, DSMEM)``: rows of whole 16-byte vectors starting on 16 bytes (``n_cols_v`` vectors, strides
in vectors); ``partial_ptr``: PARTS floats a row (unused with DSMEM). GPU only (Hopper: clusters).
"""
import torch
from triton.experimental import gluon
from triton.experimental.gluon import language as gl
from triton.experimental.gluon.language.nvidia.ampere import async_copy as cp

from ._launch import (backward_inputs, cdiv, check_knobs, device_limits, device_refusal, next_power_of_2,
                      vector_refusal)
from .cluster_exchange import cluster_arrive, exchange_sum
from .clustered import MAX_PARTS, PORTABLE_PARTS, cluster_barrier, cluster_refusal, shared_layout, slices
from .clustered import split_layout, whole_cluster_layout


@gluon.jit
def clustered_backward_kernel(dx_ptr, y_ptr, dy_ptr, partial_ptr, n_cols_v, y_stride_v, dy_stride_v, dx_stride_v,
                              SLICE: gl.constexpr, CHUNK: gl.constexpr, PARTS: gl.constexpr, DSMEM: gl.constexpr):
    VEC: gl.constexpr = 128 // y_ptr.dtype.element_ty.primitive_bitwidth
    N: gl.constexpr = SLICE // CHUNK
    layout: gl.constexpr = split_layout(VEC, gl.num_warps(), PARTS)
    y_smem = gl.allocate_shared_memory(y_ptr.dtype.element_ty, [N, PARTS, CHUNK], shared_layout(PARTS))
    dy_smem = gl.allocate_shared_memory(dy_ptr.dtype.element_ty, [N, PARTS, CHUNK], shared_layout(PARTS))
    row = gl.program_id(0).to(gl.int64)  # (the cluster's number)
    part = gl.arange(0, PARTS, layout=gl.SliceLayout(1, layout))
    cols = part[:, None] * SLICE + gl.arange(0, CHUNK, layout=gl.SliceLayout(0, layout))[None, :]
    end = n_cols_v * VEC  # (whole vectors: the row's last element ends one)
    y_src = y_ptr + row * (y_stride_v * VEC)
    dy_src = dy_ptr + row * (dy_stride_v * VEC)
    for c in gl.static_range(N):  # 1. this program's slices of y and dy on their way, a commit group per chunk
        cp.async_copy_global_to_shared(y_smem.index(c), y_src + c * CHUNK + cols, mask=c * CHUNK + cols < end)
        cp.async_copy_global_to_shared(dy_smem.index(c), dy_src + c * CHUNK + cols, mask=c * CHUNK + cols < end)
        cp.commit_group()
    if DSMEM:
        cluster_arrive()
    total = gl.zeros([PARTS, CHUNK], gl.float32, layout)
    for c in gl.static_range(N):  # 2. the slice's Σ dy·y, chunk by chunk as they land
        cp.wait_group(N - 1 - c)
        y = y_smem.index(c).load(layout).to(gl.float32)
        d = dy_smem.index(c).load(layout).to(gl.float32)
        total += gl.where(c * CHUNK + cols < end, y * d, 0.0)
    if DSMEM:  # 3. the cluster's sum, through the partners' shared memory
        s = exchange_sum(gl.sum(total, axis=1), PARTS)[:, None]
    else:  # 3. the parts out, the barrier, everyone's parts in
        gl.store(partial_ptr + row * PARTS + part, gl.sum(total, axis=1))
        cluster_barrier()
        every = gl.arange(0, PARTS, layout=whole_cluster_layout(gl.num_warps(), PARTS))
        s = gl.sum(gl.load(partial_ptr + row * PARTS + every, volatile=True), axis=0)
    dst = dx_ptr + row * (dx_stride_v * VEC)
    for c in range(N):  # 4. dx = y·(dy - s) from shared memory (dx may be dy or y itself: this slice is read)
        y = y_smem.index(c).load(layout).to(gl.float32)
        d = dy_smem.index(c).load(layout).to(gl.float32)
        gl.store(dst + c * CHUNK + cols, (y * (d - s)).to(dx_ptr.dtype.element_ty), mask=c * CHUNK + cols < end)


def backward_slices(n_cols: int, element_size: int, parts=None, num_warps=None, vectors=None) -> dict:
    """``clustered.slices`` for two tensors a program: default ``parts``, the fewest (up to 8) whose slices of y
    and dy together are at most 64 KB (three programs a multiprocessor, as the forward's)."""
    parts = parts or min(PORTABLE_PARTS, next_power_of_2(cdiv(2 * n_cols * element_size, 65536)))
    return slices(n_cols, element_size, parts, num_warps, vectors)


def refusal(y, dy, dx, parts=None, num_warps=None, vectors=None) -> str:
    """Why this GPU or these tensors cannot take the kernel, or ''."""
    if not y.dtype == dy.dtype == dx.dtype:
        return (f"clustered_backward takes y, dy and dx of one dtype; got {y.dtype}, {dy.dtype} and {dx.dtype}: "
                "use softmax_backward")
    vec = 16 // y.element_size()
    if y.shape[1] % vec:
        return (f"clustered_backward takes rows of whole 16-byte vectors (a multiple of {vec} elements), got "
                f"{y.shape[1]}: use softmax_backward")
    options = backward_slices(y.shape[1], y.element_size(), parts, num_warps, vectors)
    if y.device.type != "cuda":
        return "clustered_backward needs a GPU: it is a Gluon kernel, which Triton's CPU interpreter cannot run"
    capability, shared = device_limits(y.device)
    why = (device_refusal("clustered_backward", capability, shared, 2 * options["SLICE"] * y.element_size(), True)
           or vector_refusal(y, "clustered_backward", "y") or vector_refusal(dy, "clustered_backward", "dy")
           or vector_refusal(dx, "clustered_backward", "out (dx)"))
    return why.replace("cooperative_softmax", "softmax_backward")


def launch_setup(dx, y, dy, parts=None, num_warps=None, vectors=None, dsmem=False):
    """(kernel, grid, args, options) of one launch; args[3] is the parts' buffer, PARTS floats a row (with
    ``dsmem``, one float, unused)."""
    n_rows, n_cols = y.shape
    vec = 16 // y.element_size()
    options = backward_slices(n_cols, y.element_size(), parts, num_warps, vectors)
    options["DSMEM"] = bool(dsmem)
    partials = torch.empty(1 if dsmem else n_rows * options["PARTS"], dtype=torch.float32, device=y.device)
    args = (dx, y, dy, partials, n_cols // vec, *[t.stride(0) // vec for t in (y, dy, dx)])
    return clustered_backward_kernel, (n_rows,), args, options


def clustered_backward(y: torch.Tensor, dy: torch.Tensor, out: torch.Tensor | None = None, parts: int | None = None,
                       num_warps: int | None = None, vectors: int | None = None, dsmem: bool = False) -> torch.Tensor:
    """dx = y·(dy - Σ dy·y) over the last dim of 2-D ``y`` and ``dy`` of one dtype (Hopper GPU; rows of whole
    16-byte vectors starting on 16 bytes, each program's slices of y and dy in its shared memory). Knobs as
    ``clustered_softmax``'s: ``parts`` (default: slices of y and dy of at most 64 KB together, up to 8 programs),
    ``num_warps`` (4), ``vectors``, ``dsmem``. ``out`` may be y or dy itself."""
    check_knobs(num_warps=num_warps, parts=parts, vectors=vectors)
    y, dy, dx = backward_inputs(y, dy, out)
    if y.numel() == 0:
        return dx
    why = refusal(y, dy, dx, parts, num_warps, vectors)
    if why:
        raise ValueError(why)
    kernel, grid, args, options = launch_setup(dx, y, dy, parts, num_warps, vectors, dsmem)
    why = cluster_refusal(kernel, grid, args, options) if options["PARTS"] > PORTABLE_PARTS else ""
    if why:
        raise ValueError(why.replace("clustered_softmax", "clustered_backward").replace("cooperative_softmax",
                                                                                         "softmax_backward"))
    kernel[grid](*args, **options)
    return dx


__all__ = ["MAX_PARTS", "clustered_backward"]
