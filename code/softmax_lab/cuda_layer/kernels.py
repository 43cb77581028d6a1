"""Chapter 9's CUDA kernels, written with numba-cuda's ``@cuda.jit`` (real CUDA on a GPU, the simulator on a CPU).

Every kernel takes 2-D float32 arrays ``x`` (input) and ``y`` (output), indexed ``x[row, col]`` (numba
applies the row stride, so views like ``big[:, :1000]`` work), and the row length ``n_cols``.

* ``three_kernel_softmax``: the HIP baseline of seed 000 §10.5.1: one thread per row for the max, one thread
  per row for exp and the sum (writing a buffer as big as x), one thread per element to normalise.
* ``row_serial_softmax``: one thread per row, three walks over its row (seed 004's starting point).
* ``block_softmax``: one block per row; threads stride over the row (thread t reads t, t + T, t + 2T...), a
  shared-memory tree for the max, the **reader barrier**, the same shared memory reused for the sum.
* ``block_softmax_missing_barrier_kernel``: the same without the reader barrier (the bug of seed 000).
* ``shuffle_tail_softmax``: the tree stops at 64 values; warp 0 finishes with 5 warp shuffles, no barriers.
* ``warp_softmax``: one warp per row, shuffles only, no shared memory and no block barrier.

Launchers check their arguments: a block size the kernel cannot use, or too little shared memory, is a
``ValueError`` that says what to change (on a GPU a bad launch could otherwise fail late, or hang).
"""
from __future__ import annotations

import math

import torch
from numba import cuda, float32

from . import SIMULATOR

if SIMULATOR:
    from numba.cuda.simulator.cudadrv.devicearray import FakeCUDAArray

FULL_MASK = 0xFFFFFFFF
MAX_THREADS = 1024
MAX_SHARED_BYTES = 48 * 1024  # what a block may use without opting in to more


# ---------------------------------------------------------------------------------- the 3-kernel baseline


@cuda.jit
def row_max_serial_kernel(x, row_max, n_rows, n_cols):
    row = cuda.grid(1)  # one thread per row
    if row < n_rows:
        m = float32(-math.inf)
        for col in range(n_cols):
            m = max(m, x[row, col])
        row_max[row] = m


@cuda.jit
def exp_sum_serial_kernel(x, row_max, buf, row_sum, n_rows, n_cols):
    row = cuda.grid(1)  # one thread per row; the exponentials go to a buffer as big as x
    if row < n_rows:
        total = float32(0.0)
        for col in range(n_cols):
            e = math.exp(x[row, col] - row_max[row])
            buf[row, col] = e
            total += e
        row_sum[row] = total


@cuda.jit
def normalize_kernel(buf, row_sum, y, n_rows, n_cols):
    i = cuda.grid(1)  # one thread per element
    if i < n_rows * n_cols:
        row = i // n_cols
        col = i - row * n_cols
        y[row, col] = buf[row, col] / row_sum[row]


# ----------------------------------------------------------------------------------- one thread per row


@cuda.jit
def row_serial_kernel(x, y, n_rows, n_cols):
    row = cuda.grid(1)
    if row < n_rows:
        m = float32(-math.inf)
        for col in range(n_cols):          # walk 1: the max
            m = max(m, x[row, col])
        total = float32(0.0)
        for col in range(n_cols):          # walk 2: the sum of exponentials
            total += math.exp(x[row, col] - m)
        for col in range(n_cols):          # walk 3: normalise
            y[row, col] = math.exp(x[row, col] - m) / total


# ----------------------------------------------------------------------------------- one block per row


@cuda.jit
def block_softmax_kernel(x, y, n_cols):
    row = cuda.blockIdx.x
    tid = cuda.threadIdx.x
    threads = cuda.blockDim.x
    shared = cuda.shared.array(0, float32)  # `threads` floats, sized at launch
    # 1. Each thread's max over its columns tid, tid + threads, ...; then a tree over the block.
    m = float32(-math.inf)
    for col in range(tid, n_cols, threads):
        m = max(m, x[row, col])
    shared[tid] = m
    cuda.syncthreads()
    stride = threads // 2
    while stride > 0:
        if tid < stride:
            shared[tid] = max(shared[tid], shared[tid + stride])
        cuda.syncthreads()
        stride //= 2
    row_max = shared[0]
    cuda.syncthreads()  # the reader barrier: every thread has read the max before shared[] is reused
    # 2. The same shared memory, now for the sum.
    total = float32(0.0)
    for col in range(tid, n_cols, threads):
        total += math.exp(x[row, col] - row_max)
    shared[tid] = total
    cuda.syncthreads()
    stride = threads // 2
    while stride > 0:
        if tid < stride:
            shared[tid] += shared[tid + stride]
        cuda.syncthreads()
        stride //= 2
    row_sum = shared[0]
    # 3. Third walk: exp again, divide, store.
    for col in range(tid, n_cols, threads):
        y[row, col] = math.exp(x[row, col] - row_max) / row_sum


@cuda.jit
def block_softmax_missing_barrier_kernel(x, y, n_cols):
    row = cuda.blockIdx.x
    tid = cuda.threadIdx.x
    threads = cuda.blockDim.x
    shared = cuda.shared.array(0, float32)
    m = float32(-math.inf)
    for col in range(tid, n_cols, threads):
        m = max(m, x[row, col])
    shared[tid] = m
    cuda.syncthreads()
    stride = threads // 2
    while stride > 0:
        if tid < stride:
            shared[tid] = max(shared[tid], shared[tid + stride])
        cuda.syncthreads()
        stride //= 2
    row_max = shared[0]
    # (no barrier here: thread 0 may overwrite shared[0] below before another warp has read the max)
    total = float32(0.0)
    for col in range(tid, n_cols, threads):
        total += math.exp(x[row, col] - row_max)
    shared[tid] = total
    cuda.syncthreads()
    stride = threads // 2
    while stride > 0:
        if tid < stride:
            shared[tid] += shared[tid + stride]
        cuda.syncthreads()
        stride //= 2
    row_sum = shared[0]
    for col in range(tid, n_cols, threads):
        y[row, col] = math.exp(x[row, col] - row_max) / row_sum


# ------------------------------------------------------------------------------------- warp shuffles


@cuda.jit(device=True)
def warp_max(v):
    offset = 16  # 32 lanes: 16, 8, 4, 2, 1 (a 64-lane AMD wavefront needs one more step, 32)
    while offset > 0:
        v = max(v, cuda.shfl_xor_sync(FULL_MASK, v, offset))
        offset //= 2
    return v  # every lane holds the warp's max (butterfly)


@cuda.jit(device=True)
def warp_sum(v):
    offset = 16
    while offset > 0:
        v += cuda.shfl_xor_sync(FULL_MASK, v, offset)
        offset //= 2
    return v


@cuda.jit
def shuffle_tail_kernel(x, y, n_cols):
    row = cuda.blockIdx.x
    tid = cuda.threadIdx.x
    threads = cuda.blockDim.x
    shared = cuda.shared.array(0, float32)
    m = float32(-math.inf)
    for col in range(tid, n_cols, threads):
        m = max(m, x[row, col])
    shared[tid] = m
    cuda.syncthreads()
    stride = threads // 2
    while stride > 32:  # the tree stops at 64 values...
        if tid < stride:
            shared[tid] = max(shared[tid], shared[tid + stride])
        cuda.syncthreads()
        stride //= 2
    if tid < 32:        # ...warp 0 folds them to 32 and finishes in registers
        v = warp_max(max(shared[tid], shared[tid + 32]))
        if tid == 0:
            shared[0] = v
    cuda.syncthreads()
    row_max = shared[0]
    cuda.syncthreads()  # reader barrier, as before
    total = float32(0.0)
    for col in range(tid, n_cols, threads):
        total += math.exp(x[row, col] - row_max)
    shared[tid] = total
    cuda.syncthreads()
    stride = threads // 2
    while stride > 32:
        if tid < stride:
            shared[tid] += shared[tid + stride]
        cuda.syncthreads()
        stride //= 2
    if tid < 32:
        v = warp_sum(shared[tid] + shared[tid + 32])
        if tid == 0:
            shared[0] = v
    cuda.syncthreads()
    row_sum = shared[0]
    for col in range(tid, n_cols, threads):
        y[row, col] = math.exp(x[row, col] - row_max) / row_sum


@cuda.jit
def warp_softmax_kernel(x, y, n_cols):
    row = cuda.blockIdx.x  # one warp (32 threads) per row: no shared memory, no block barrier
    lane = cuda.threadIdx.x
    m = float32(-math.inf)
    for col in range(lane, n_cols, 32):
        m = max(m, x[row, col])
    m = warp_max(m)
    total = float32(0.0)
    for col in range(lane, n_cols, 32):
        total += math.exp(x[row, col] - m)
    total = warp_sum(total)
    for col in range(lane, n_cols, 32):
        y[row, col] = math.exp(x[row, col] - m) / total


@cuda.jit
def chunked_row_max_kernel(x, row_max, n_cols):
    # Seed 004's first "one wavefront per row" loop: thread t takes the chunk t*per, ..., t*per + per - 1.
    row = cuda.blockIdx.x
    tid = cuda.threadIdx.x
    per = (n_cols + cuda.blockDim.x - 1) // cuda.blockDim.x
    m = float32(-math.inf)
    for i in range(per):
        col = tid * per + i
        if col < n_cols:
            m = max(m, x[row, col])
    if tid == 0:
        row_max[row] = m  # (thread 0's chunk only: this kernel is here for its addresses)


# -------------------------------------------------------------------------------------------- launching


def _stream():
    return 0 if SIMULATOR else cuda.external_stream(torch.cuda.current_stream().cuda_stream)


def as_array(t: torch.Tensor):
    """A torch tensor as a kernel argument: a numpy view on the CPU (simulator), a device array on a GPU."""
    if SIMULATOR:
        if t.device.type != "cpu":
            raise ValueError("the CUDA simulator runs on the CPU: pass CPU tensors (device=softmax_lab.DEVICE)")
        # Wrapped as a (simulated) device array: no copy, and strided views stay views.
        return FakeCUDAArray(t.detach().numpy())
    if t.device.type != "cuda":
        raise ValueError("real CUDA kernels need GPU tensors: create them with device=softmax_lab.DEVICE")
    return cuda.as_cuda_array(t.detach(), sync=False)


def check_block(threads: int, shared_bytes: int | None, min_threads: int = 32, per_thread_bytes: int = 4) -> int:
    """The shared memory to launch with, or a ValueError that says what is wrong with the block."""
    if not isinstance(threads, int) or isinstance(threads, bool):
        raise ValueError(f"threads must be an int, got {threads!r}")
    if threads < min_threads or threads > MAX_THREADS or threads & (threads - 1):
        raise ValueError(
            f"a block of {threads} threads does not work here: the tree halves the block at every step, so it "
            f"needs a power of two from {min_threads} to {MAX_THREADS} threads (a warp is 32 threads"
            + (", and the shuffle tail starts from 64 values" if min_threads == 64 else "") + ")")
    need = threads * per_thread_bytes
    shared_bytes = need if shared_bytes is None else shared_bytes
    if shared_bytes < need:
        raise ValueError(
            f"shared memory too small: the tree needs one float32 per thread, {threads} x 4 = {need} bytes, "
            f"but the launch gives {shared_bytes} bytes (pass shared_bytes >= {need}, or use fewer threads)")
    if shared_bytes > MAX_SHARED_BYTES:
        raise ValueError(f"{shared_bytes} bytes of shared memory is more than a block gets without opting in "
                         f"({MAX_SHARED_BYTES} bytes)")
    return shared_bytes


def check_tensors(x: torch.Tensor, out: torch.Tensor | None) -> torch.Tensor:
    if not isinstance(x, torch.Tensor) or x.dim() != 2:
        raise ValueError("x must be a 2-D torch tensor (rows x columns)")
    if x.dtype != torch.float32:
        raise ValueError(f"these kernels are written for float32, got {x.dtype}")
    out = torch.empty_like(x, memory_format=torch.contiguous_format) if out is None else out
    if out.shape != x.shape or out.dtype != x.dtype or out.device != x.device:
        raise ValueError(f"out must be float32 {tuple(x.shape)} on {x.device}, got {out.dtype} "
                         f"{tuple(out.shape)} on {out.device}")
    return out


def launch_rows(kernel, x: torch.Tensor, out: torch.Tensor | None = None, threads: int = 256,
                shared_bytes: int | None = None, min_threads: int = 32) -> torch.Tensor:
    """Launch a one-block-per-row kernel ``kernel(x, y, n_cols)``: grid = rows, block = ``threads``,
    ``shared_bytes`` of dynamic shared memory (default: one float32 per thread)."""
    out = check_tensors(x, out)
    shared_bytes = check_block(threads, shared_bytes, min_threads)
    if x.numel() == 0:
        return out
    kernel[x.shape[0], threads, _stream(), shared_bytes](as_array(x), as_array(out), x.shape[1])
    return out


def block_softmax(x, out=None, threads=256, shared_bytes=None):
    return launch_rows(block_softmax_kernel, x, out, threads, shared_bytes)


def shuffle_tail_softmax(x, out=None, threads=256, shared_bytes=None):
    return launch_rows(shuffle_tail_kernel, x, out, threads, shared_bytes, min_threads=64)


def warp_softmax(x, out=None):
    out = check_tensors(x, out)
    if x.numel():
        warp_softmax_kernel[x.shape[0], 32, _stream(), 0](as_array(x), as_array(out), x.shape[1])
    return out


def row_serial_softmax(x, out=None, threads_per_block=128):
    out = check_tensors(x, out)
    n_rows, n_cols = x.shape
    if x.numel():
        grid = (n_rows + threads_per_block - 1) // threads_per_block
        row_serial_kernel[grid, threads_per_block, _stream(), 0](as_array(x), as_array(out), n_rows, n_cols)
    return out


def three_kernel_softmax(x, out=None, threads_per_block=128, return_buffer=False):
    """The 3-kernel baseline; ``return_buffer=True`` also returns the float32 buffer of exponentials."""
    out = check_tensors(x, out)
    n_rows, n_cols = x.shape
    buf = torch.empty_like(out)
    if x.numel():
        row_max = torch.empty(n_rows, dtype=torch.float32, device=x.device)
        row_sum = torch.empty_like(row_max)
        s, tpb = _stream(), threads_per_block
        a = as_array
        row_max_serial_kernel[(n_rows + tpb - 1) // tpb, tpb, s, 0](a(x), a(row_max), n_rows, n_cols)
        exp_sum_serial_kernel[(n_rows + tpb - 1) // tpb, tpb, s, 0](a(x), a(row_max), a(buf), a(row_sum),
                                                                    n_rows, n_cols)
        n = n_rows * n_cols
        normalize_kernel[(n + tpb - 1) // tpb, tpb, s, 0](a(buf), a(row_sum), a(out), n_rows, n_cols)
    return (out, buf) if return_buffer else out


ALL = {
    "three_kernel": three_kernel_softmax,
    "row_serial": row_serial_softmax,
    "block_tree": block_softmax,
    "shuffle_tail": shuffle_tail_softmax,
    "warp_per_row": warp_softmax,
}
