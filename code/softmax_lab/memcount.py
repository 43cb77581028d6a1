"""Count the memory traffic a Triton kernel really does: elements loaded and stored, per argument.

    from softmax_lab.memcount import count_memory, count_calls
    c = count_memory(naive_softmax_kernel, (rows * n,), y, x, x.stride(0), y.stride(0), n, BLOCK=16)
    c.loads, c.stores, c.loads_of["in_ptr"]          # elements whose mask was true
    y, c = count_calls(three_pass_softmax, x)         # every kernel launched by a Python function

How: the kernel's Python function (``kernel.fn``) runs through Triton's interpreter on CPU copies of the
tensors, with the interpreter's load and store wrapped so each one adds up the lanes whose mask is true. The
numbers come from the kernel's own memory operations, so they are the same on a laptop and on a GPU machine
(where the kernel is not compiled for this: it is interpreted, slowly, so keep the sizes tiny).

These are *logical* element accesses, as the kernel's code asks for them; caches and the hardware's memory
transactions are not modelled. This uses internals of Triton 3.6's interpreter (``interpreter_builder``);
tests/test_memcount.py guards it.
"""
from __future__ import annotations

import contextlib
import inspect
from dataclasses import dataclass, field
from typing import Callable

import numpy as np
import torch

from . import device  # noqa: F401 - before triton: picks the device (the interpreter on a CPU)
import triton.language as tl
from triton.runtime import interpreter as _interp
from triton.runtime.jit import JITFunction

# The interpreter's own launch, kept before count_calls patches launches (which would otherwise recurse).
_INTERPRETED_RUN = _interp.InterpretedFunction.run
_JIT_RUN = JITFunction.run


@dataclass
class MemoryCount:
    """Elements (and bytes) actually loaded and stored; ``*_of`` split them by kernel argument name."""
    loads: int = 0
    stores: int = 0
    load_bytes: int = 0
    store_bytes: int = 0
    load_ops: int = 0  # tl.load calls executed, summed over programs
    store_ops: int = 0
    programs: int = 0
    launches: int = 0
    loads_of: dict = field(default_factory=dict)
    stores_of: dict = field(default_factory=dict)
    _loaded_addresses: list = field(default_factory=list, repr=False)
    _load_log: list = field(default_factory=list, repr=False)  # (launch, program, argument, element indices)
    _store_log: list = field(default_factory=list, repr=False)  # the same for stores
    _outside_log: list = field(default_factory=list, repr=False)  # (launch, program, "load"/"store", lanes)
    _storage_of: dict = field(default_factory=dict, repr=False)  # (launch, argument) -> the caller's data_ptr

    @property
    def distinct_loads(self) -> int:
        """How many different elements were loaded (re-reads of the same address counted once)."""
        if not self._loaded_addresses:
            return 0
        return int(np.unique(np.concatenate(self._loaded_addresses)).size)

    def load_map(self, argument: str, numel: int, launch: int = 0) -> np.ndarray:
        """How often each program loaded each element of ``argument``: an int array [programs, numel]
        (programs in launch order, elements by their offset from the start of the argument's storage)."""
        programs = sorted({p for l, p, a, _ in self._load_log if l == launch})
        row = {p: i for i, p in enumerate(programs)}
        counts = np.zeros((len(programs), numel), dtype=np.int64)
        for l, p, a, idx in self._load_log:
            if l == launch and a == argument:
                np.add.at(counts[row[p]], idx[idx < numel], 1)
        return counts

    def __str__(self) -> str:
        return (f"{self.loads} elements loaded ({self.distinct_loads} distinct), {self.stores} stored, "
                f"in {self.launches} launch(es) of {self.programs} program(s)")


def _active(ptrs, mask):
    """The addresses a masked load/store really touches (mask true), how many, and how many bytes."""
    active = np.broadcast_to(np.asarray(mask.data, dtype=bool), np.shape(ptrs.data))
    addresses = np.asarray(ptrs.data)[active].astype(np.uint64)
    n = int(addresses.size)
    return addresses, n, n * max(1, ptrs.get_element_ty().primitive_bitwidth // 8)


class _Recorder:
    """Wraps the interpreter's masked load/store while a count is running. With ``guard``, lanes whose address
    lies outside every tensor of the launch are logged and masked off, so a wrong kernel being drawn cannot read
    or write memory it does not own."""

    def __init__(self, count: MemoryCount, guard: bool = False):
        self.count = count
        self.guard = guard
        self.ranges: list[tuple[int, int, str]] = []  # (start, end, argument name) of each host storage
        self.starts: list[tuple[int, int, str, int]] = []  # (first element's address, end, name, itemsize)

    def owner(self, addresses: np.ndarray) -> dict[str, int]:
        found = {}
        for start, end, name in self.ranges:
            n = int(((addresses >= start) & (addresses < end)).sum())
            if n:
                found[name] = found.get(name, 0) + n
        return found

    def _program(self):
        builder = _interp.interpreter_builder
        return tuple(builder.grid_idx) if builder.grid_idx is not None else (0, 0, 0)

    def _log(self, log, addresses):
        c = self.count
        for start, end, name, itemsize in self.starts:
            inside = addresses[(addresses >= start) & (addresses < end)]
            if inside.size:
                log.append((c.launches, self._program(), name, ((inside - start) // itemsize).astype(np.int64)))

    def _guarded(self, ptrs, mask, kind):
        """The mask with lanes outside every tensor switched off (logged), when guarding."""
        if not self.guard:
            return mask
        ptr = np.asarray(ptrs.data).astype(np.uint64)
        active = np.broadcast_to(np.asarray(mask.data, dtype=bool), ptr.shape)
        inside = np.zeros(ptr.shape, dtype=bool)
        for start, end, _ in self.ranges:
            inside |= (ptr >= start) & (ptr < end)
        outside = active & ~inside
        if not outside.any():
            return mask
        self.count._outside_log.append((self.count.launches, self._program(), kind, int(outside.sum())))
        return _interp.TensorHandle(active & inside, mask.dtype)

    def load(self, original):
        def create_masked_load(ptrs, mask, other, *rest):
            mask = self._guarded(ptrs, mask, "load")
            addresses, n, nbytes = _active(ptrs, mask)
            c = self.count
            c.loads += n
            c.load_bytes += nbytes
            c.load_ops += 1
            c._loaded_addresses.append(addresses)
            self._log(c._load_log, addresses)
            for name, k in self.owner(addresses).items():
                c.loads_of[name] = c.loads_of.get(name, 0) + k
            return original(ptrs, mask, other, *rest)

        return create_masked_load

    def store(self, original):
        def create_masked_store(ptrs, value, mask, *rest):
            mask = self._guarded(ptrs, mask, "store")
            addresses, n, nbytes = _active(ptrs, mask)
            c = self.count
            c.stores += n
            c.store_bytes += nbytes
            c.store_ops += 1
            self._log(c._store_log, addresses)
            for name, k in self.owner(addresses).items():
                c.stores_of[name] = c.stores_of.get(name, 0) + k
            return original(ptrs, value, mask, *rest)

        return create_masked_store


def _host_args(fn, args, kwargs, recorder: _Recorder):
    """CPU tensors sharing storage like the originals do, plus the address range of each (for attribution)."""
    names = list(inspect.signature(fn).parameters)
    storages: dict[int, torch.UntypedStorage] = {}
    back: list[tuple[torch.Tensor, torch.Tensor]] = []

    def to_host(arg, name):
        if not isinstance(arg, torch.Tensor):
            return arg
        key = arg.untyped_storage().data_ptr()
        if key not in storages:
            storages[key] = arg.untyped_storage() if arg.device.type == "cpu" else arg.untyped_storage().cpu()
            host = storages[key]
            recorder.ranges.append((host.data_ptr(), host.data_ptr() + host.nbytes(), name))
            recorder.starts.append((host.data_ptr(), host.data_ptr() + host.nbytes(), name, arg.element_size()))
            recorder.count._storage_of[(recorder.count.launches, name)] = key
            if arg.device.type != "cpu":
                back.append((arg, host))
        t = arg.new_empty(0, device="cpu")
        t.set_(storages[key], arg.storage_offset(), arg.size(), arg.stride())
        return t

    host_args = [to_host(a, names[i] if i < len(names) else f"arg{i}") for i, a in enumerate(args)]
    host_kwargs = {k: to_host(v, k) for k, v in kwargs.items()}

    def copy_back():
        for dev, host in back:
            dev.untyped_storage().copy_(host)

    return host_args, host_kwargs, copy_back


_AS_DEVICE_FUNCTION: dict = {}


def _call_interpreted(self, *args, **kwargs):
    """JITFunction.__call__ while counting: run a compiled-mode @triton.jit helper as interpreted code.

    Like InterpretedFunction.__call__, but it undoes its patches of triton.language afterwards: left in place,
    they break every later *compiled* kernel in the process (Triton 3.6 never undoes them, which is harmless
    only when everything is interpreted)."""
    if self.fn not in _AS_DEVICE_FUNCTION:
        _AS_DEVICE_FUNCTION[self.fn] = _interp.InterpretedFunction(self.fn)
    scope = _interp._patch_lang(self.fn)
    try:
        return _AS_DEVICE_FUNCTION[self.fn].rewrite()(*args, **kwargs)
    finally:
        scope.restore()


@contextlib.contextmanager
def _interpreted_helpers(fn):
    """On a GPU machine every @triton.jit function is a compiled JITFunction, the kernel's own helpers and
    Triton's (tl.max, tl.sum, ... are @jit functions too). While counting, calls to them run interpreted."""
    from .kernels import fast_exp  # its inline PTX has no interpreted form: tl.exp while counting

    original, ptx = JITFunction.__call__, fast_exp.PTX
    JITFunction.__call__ = _call_interpreted
    fast_exp.PTX = tl.constexpr(False)
    try:
        yield
    finally:
        JITFunction.__call__, fast_exp.PTX = original, ptx


def _run(fn, grid, args, kwargs, count: MemoryCount, guard: bool = False) -> None:
    recorder = _Recorder(count, guard)
    host_args, host_kwargs, copy_back = _host_args(fn, args, kwargs, recorder)
    builder = _interp.interpreter_builder
    load, store = builder.create_masked_load, builder.create_masked_store
    builder.create_masked_load = recorder.load(load)
    builder.create_masked_store = recorder.store(store)
    try:
        with _interpreted_helpers(fn):
            executor = _interp.InterpretedFunction(fn)
            if callable(grid):  # grid(meta) -> tuple, as with kernel[lambda meta: ...]
                sig = inspect.signature(fn)
                bound = sig.bind_partial(*host_args, **{k: v for k, v in host_kwargs.items() if k in sig.parameters})
                grid = grid(dict(bound.arguments, **host_kwargs))
            grid = tuple(grid) + (1,) * (3 - len(tuple(grid)))
            _INTERPRETED_RUN(executor, *host_args, grid=grid, warmup=False, **host_kwargs)
    finally:
        builder.create_masked_load, builder.create_masked_store = load, store
    count.programs += grid[0] * grid[1] * grid[2]
    count.launches += 1
    copy_back()


def kernel_function(kernel) -> Callable:
    """The plain Python function behind a @triton.jit kernel (JITFunction or interpreted), or the function."""
    while hasattr(kernel, "fn"):  # JITFunction, InterpretedFunction, Autotuner/Heuristics wrappers
        kernel = kernel.fn
    return kernel


def count_memory(kernel, grid, *args, **kwargs) -> MemoryCount:
    """Launch ``kernel[grid](*args, **kwargs)`` through the interpreter and count its loads and stores.

    Launch options the interpreter has no use for (``num_warps``, ``num_stages``) are accepted and ignored.
    Tensors may live on the GPU: they are copied to the CPU and the results copied back.
    """
    count = MemoryCount()
    _run(kernel_function(kernel), grid, args, kwargs, count)
    return count


def count_calls(fn: Callable, *args, _guard: bool = False, **kwargs):
    """Call ``fn(*args, **kwargs)`` (e.g. a launcher like ``three_pass_softmax(x)``) with every Triton kernel it
    launches run through the counting interpreter. Returns ``(fn's result, MemoryCount)`` summed over launches.
    ``_guard=True`` (for ``softmax_lab.lanemap``) switches off, and logs, lanes outside every tensor of a launch;
    the underscore keeps the name out of the way of ``fn``'s own keyword arguments."""
    count = MemoryCount()

    def counted_run(self, *a, grid, warmup=False, **kw):
        if warmup:
            return None
        _run(kernel_function(self), grid, a, kw, count, guard=_guard)
        return None

    patched = [(JITFunction, "run", _JIT_RUN), (_interp.InterpretedFunction, "run", _INTERPRETED_RUN)]
    try:
        for cls, name, _ in patched:
            setattr(cls, name, counted_run)
        result = fn(*args, **kwargs)
    finally:
        for cls, name, original in patched:
            setattr(cls, name, original)
    return result, count


__all__ = ["MemoryCount", "count_memory", "count_calls", "kernel_function"]
