"""Which bytes a warp's load touches: sectors and cache lines, from a kernel's own addresses.

A warp issues one load instruction for its 32 threads. The memory system serves it in **32-byte sectors**
(the unit DRAM and L2 move) grouped in **128-byte cache lines**. Thirty-two float32 values side by side are
128 bytes: 4 sectors, 1 line. The same 32 values one row apart (one thread per row) are 32 sectors in 32
lines, 8x the bytes moved for the same useful data.

``warp_loads(kernel, grid, block, args, record=i)`` runs a ``@cuda.jit`` kernel in numba's simulator (on any
machine) and records, for argument ``i``, the byte offset of every element each thread loads, numbered per
thread: a thread's k-th load, taken over the 32 lanes of a warp, is one load instruction of that warp. The
offsets count from the start of the tensor's storage, which CUDA allocates 256-byte aligned, so the sectors
and lines counted from them are the GPU's.
"""
from __future__ import annotations

import sys
import threading
from dataclasses import dataclass

import numpy as np
import torch

SECTOR = 32
LINE = 128
WARP = 32


def count_sectors(byte_addresses, access_bytes: int = 4) -> tuple[int, int]:
    """(32-byte sectors, 128-byte lines) touched by one warp load of ``access_bytes`` at each address."""
    sectors, lines = set(), set()
    for a in byte_addresses:
        a = int(a)
        for b in (a, a + access_bytes - 1):  # an access can straddle a boundary (misaligned data)
            sectors.add(b // SECTOR)
            lines.add(b // LINE)
    return len(sectors), len(lines)


class _RecordedGlobal:
    """A global array whose element loads are recorded as byte offsets from the tensor storage's start."""

    def __init__(self, arr: np.ndarray, strides, storage_offset: int, recorder: "WarpLoads"):
        self._arr, self._rec = arr, recorder
        self._strides, self._base = tuple(strides), storage_offset
        self.shape, self.dtype, self.ndim, self.size = arr.shape, arr.dtype, arr.ndim, arr.size

    def __len__(self):
        return len(self._arr)

    def _offset(self, idx) -> int:
        idx = idx if isinstance(idx, tuple) else (idx,)
        if any(isinstance(i, slice) for i in idx):
            raise TypeError("the address recorder follows single elements: index one element at a time")
        idx = tuple(int(i) % n for i, n in zip(idx, self.shape))
        return (self._base + sum(i * s for i, s in zip(idx, self._strides))) * self.dtype.itemsize

    def __getitem__(self, idx):
        value = self._arr[idx]
        self._rec._load(self._offset(idx))
        return value

    def __setitem__(self, idx, value):
        self._arr[idx] = value


@dataclass
class WarpLoad:
    block: int
    warp: int
    step: int                    # the thread's k-th load of the recorded array
    offsets: list                # byte offset per lane (None: the lane made no k-th load)

    @property
    def active(self) -> list:
        return [a for a in self.offsets if a is not None]

    def sectors_lines(self, access_bytes: int = 4) -> tuple[int, int]:
        return count_sectors(self.active, access_bytes)


class WarpLoads:
    """The recorded loads of one simulated launch, grouped into warp load instructions."""

    def __init__(self, itemsize: int):
        self.itemsize = itemsize
        self._lock = threading.Lock()
        self._by_thread: dict = {}  # (block, thread) -> [offset, ...]

    def _load(self, offset: int):
        t = threading.current_thread()
        key = (int(t.blockIdx.x), int(t.thread_id))
        with self._lock:
            self._by_thread.setdefault(key, []).append(offset)

    def threads(self, block: int = 0) -> dict:
        """thread -> list of byte offsets it loaded, in program order."""
        return {t: offs for (b, t), offs in sorted(self._by_thread.items()) if b == block}

    def warp_load(self, block: int = 0, warp: int = 0, step: int = 0) -> WarpLoad:
        offs = []
        for lane in range(WARP):
            mine = self._by_thread.get((block, warp * WARP + lane), [])
            offs.append(mine[step] if step < len(mine) else None)
        return WarpLoad(block, warp, step, offs)

    def warp_steps(self, block: int = 0, warp: int = 0) -> int:
        return max((len(self._by_thread.get((block, warp * WARP + lane), [])) for lane in range(WARP)), default=0)

    def all_warp_loads(self):
        keys = sorted({(b, t // WARP) for (b, t) in self._by_thread})
        for b, w in keys:
            for k in range(self.warp_steps(b, w)):
                yield self.warp_load(b, w, k)

    def totals(self) -> tuple[int, int, int]:
        """(warp load instructions, sectors, lines) summed over the whole launch."""
        n = s = ln = 0
        for wl in self.all_warp_loads():
            a, b = wl.sectors_lines(self.itemsize)
            n, s, ln = n + 1, s + a, ln + b
        return n, s, ln


def _as_numpy(v):
    if isinstance(v, torch.Tensor):
        return v.detach().cpu().numpy().copy()
    return v


def warp_loads(kernel, grid, block, args, record: int = 0, shared_bytes: int = 0) -> WarpLoads:
    """Run ``kernel[grid, block, 0, shared_bytes](*args)`` in the simulator; record the loads of ``args[record]``
    (a torch tensor, possibly a strided view). Outputs are written to copies: ``args`` are left untouched."""
    from .sim import simulated

    x = args[record]
    if not isinstance(x, torch.Tensor):
        raise TypeError("warp_loads records a torch tensor argument (args[record])")
    rec = WarpLoads(x.element_size())
    arr = x.detach().cpu().numpy()
    proxy = _RecordedGlobal(arr, x.stride(), x.storage_offset(), rec)
    call = [proxy if i == record else _as_numpy(a) for i, a in enumerate(args)]
    simulated(kernel)[grid, block, 0, shared_bytes](*call)
    return rec


__all__ = ["count_sectors", "warp_loads", "WarpLoads", "WarpLoad", "SECTOR", "LINE", "WARP"]
del sys
