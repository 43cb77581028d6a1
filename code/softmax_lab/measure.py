"""Honest timing for the course's timing cells: ``softmax_lab.measure(fn, make_inputs)``.

    r = softmax_lab.measure(fused_softmax, lambda: (torch.randn(4096, 1024, device=DEVICE),))
    print(r)            # the median time, GB/s, % of a copy of the same bytes, the spread ...
    r.gbps, r.pct_of_copy, r.median_ms, r.spread_ms, r.sets

What makes it honest (chapter 7 explains each point):

* **Past the cache.** ``make_inputs()`` is called until the input sets together hold at least twice the GPU's
  L2 cache (its size is asked from the device), and the timed loop walks through them in turn, so every call
  reads its input from DRAM, not from a cache left warm by the previous call.
* **GPU time, not Python time.** All the calls of one pass are captured in a CUDA graph and replayed (launch
  overhead from Python is gone); a function that cannot be captured falls back to a loop timed with CUDA
  events, and the result says so.
* **Correct, before and after.** The output of the first and the last input set is checked before timing
  (``check(out, *inputs)`` returning True / '' when right, or ``reference(*inputs)``: a float64 result it must
  match; the default reference is softmax over the last dim), and again from the timed runs' own outputs.
  A wrong output is reported instead of a time.
* **Median and spread** over ``reps`` replays, and beside it the **bandwidth of a plain copy** of the same number
  of bytes, measured the same way: "% of copy" is the figure that compares across GPUs.

On the CPU (Triton's interpreter) nothing is timed: the result says so in one line and, with ``proxy_inputs=``
(small inputs), carries a proxy counted by ``softmax_lab.memcount`` (programs and bytes moved), labelled as such.
"""
from __future__ import annotations

import math
import statistics
import sys
import types
from dataclasses import dataclass, field
from typing import Callable

import torch

from .device import ON_GPU

MAX_SETS = 1024          # more input sets than this would make a huge graph: the result then notes the cache
TOL = {torch.float32: (1e-5, 1e-6), torch.float16: (1e-2, 1e-3), torch.bfloat16: (4e-2, 8e-3),
       torch.float64: (1e-10, 1e-12)}


@dataclass
class Measurement:
    """One ``measure()`` result. ``text`` is the one-line summary (also ``str(result)``)."""
    name: str
    timed: bool = False
    ok: bool = True                  # False: the output was wrong (``problem`` says how); nothing was timed
    problem: str = ""
    median_ms: float = math.nan
    spread_ms: tuple = (math.nan, math.nan)   # (25th, 75th percentile) of the per-call time
    reps: int = 0
    sets: int = 0                    # input sets rotated through
    bytes_per_call: int = 0
    l2_bytes: int = 0
    gbps: float = math.nan
    copy_ms: float = math.nan
    copy_gbps: float = math.nan
    pct_of_copy: float = math.nan
    method: str = ""                 # "CUDA graph" or "loop timed with CUDA events"
    note: str = ""
    proxy: dict = field(default_factory=dict)  # CPU: {"programs", "launches", "load_bytes", "store_bytes"}

    @property
    def text(self) -> str:
        if not self.ok:
            return f"{self.name}: NOT TIMED - {self.problem}"
        if not self.timed:
            line = f"{self.name}: not timed on the CPU (the interpreter's speed says nothing about a GPU)"
            if self.proxy:
                p = self.proxy
                line += (f"; proxy, counted by memcount, not a timing: {p['programs']} program(s) in "
                         f"{p['launches']} launch(es), {p['load_bytes']} bytes loaded, {p['store_bytes']} stored")
            return line
        us = 1e3 * self.median_ms
        lo, hi = (1e3 * v for v in self.spread_ms)
        line = (f"{self.name}: {us:.1f} us median ({lo:.1f}-{hi:.1f} us, {self.reps} runs), {self.gbps:.0f} GB/s = "
                f"{self.pct_of_copy:.0f}% of copy ({self.copy_gbps:.0f} GB/s); {self.sets} input sets of "
                f"{self.bytes_per_call / 2**20:.1f} MiB rotated past the {self.l2_bytes / 2**20:.0f} MiB L2, "
                f"{self.method}, output checked before and after")
        return line + (f"; {self.note}" if self.note else "")

    def __str__(self) -> str:
        return self.text

    def _repr_pretty_(self, p, cycle) -> None:
        p.text(self.text)


# ----------------------------------------------------------------------------------------------- pieces


def rotation_count(bytes_per_set: int, l2_bytes: int, factor: int = 2, cap: int = MAX_SETS) -> int:
    """How many input sets to rotate through so that together they hold at least ``factor`` x the L2 cache
    (at least 2, so that no call ever finds its own input left in the cache by the call before it)."""
    if bytes_per_set <= 0:
        raise ValueError("the inputs hold no bytes")
    return max(2, min(cap, math.ceil(factor * l2_bytes / bytes_per_set)))


def l2_cache_bytes(device=None) -> int:
    """The L2 cache size of a CUDA device, asked from the device (e.g. 60 MiB on an H200)."""
    return int(torch.cuda.get_device_properties(device or torch.cuda.current_device()).L2_cache_size)


def _as_tuple(inputs) -> tuple:
    return tuple(inputs) if isinstance(inputs, (tuple, list)) else (inputs,)


def _nbytes(obj) -> int:
    if isinstance(obj, torch.Tensor):
        return obj.numel() * obj.element_size()
    if isinstance(obj, (tuple, list)):
        return sum(_nbytes(o) for o in obj)
    return 0


def softmax_reference(x, *rest):
    """The default reference: softmax over the last dim, in float64."""
    from .reference import softmax_ref

    return softmax_ref(x)


def output_problem(out, inputs: tuple, check=None, reference=None) -> str:
    """'' when ``out`` is right for ``inputs``, else what is wrong (``check`` first, else ``reference``)."""
    if check is not None:
        verdict = check(out, *inputs)
        if verdict is True or verdict is None or verdict == "":
            return ""
        return verdict if isinstance(verdict, str) else "the check said the output is wrong"
    ref = (reference or softmax_reference)(*inputs)
    if not isinstance(out, torch.Tensor) or tuple(out.shape) != tuple(ref.shape):
        return "the output's shape differs from the reference's"
    rtol, atol = TOL.get(out.dtype, (1e-5, 1e-6))
    a, b = out.detach().double().cpu(), ref.detach().double().cpu()
    if not torch.allclose(a, b, rtol=rtol, atol=atol, equal_nan=True):
        bad = int((~torch.isclose(a, b, rtol=rtol, atol=atol, equal_nan=True)).sum())
        return f"{bad} of {a.numel()} outputs differ from the float64 reference"
    return ""


class _Cuda:
    """Times passes over the input sets on a CUDA GPU: a CUDA graph of one pass, replayed (or a plain loop)."""

    def l2(self) -> int:
        return l2_cache_bytes()

    def sync(self) -> None:
        torch.cuda.synchronize()

    def prepare(self, calls: list[Callable]):
        """-> (run one pass, outputs of the last pass (a list filled by the run), method)."""
        outs: list = [None] * len(calls)
        try:
            stream = torch.cuda.Stream()
            stream.wait_stream(torch.cuda.current_stream())
            with torch.cuda.stream(stream):  # warm-up on a side stream, as torch.cuda.graphs asks
                for c in calls:
                    c()
            torch.cuda.current_stream().wait_stream(stream)
            graph = torch.cuda.CUDAGraph()
            with torch.cuda.graph(graph):
                for k, c in enumerate(calls):
                    outs[k] = c()
            return graph.replay, outs, "CUDA graph"
        except Exception:
            torch.cuda.synchronize()

            def loop():
                for k, c in enumerate(calls):
                    outs[k] = c()
            return loop, outs, "loop timed with CUDA events (not capturable in a CUDA graph)"

    def time(self, run: Callable[[], None], reps: int) -> list[float]:
        run()
        torch.cuda.synchronize()
        times = []
        for _ in range(reps):
            start, stop = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
            start.record()
            run()
            stop.record()
            stop.synchronize()
            times.append(start.elapsed_time(stop))
        return times


def _percentile(values: list[float], q: float) -> float:
    s = sorted(values)
    pos = q * (len(s) - 1)
    lo, hi = math.floor(pos), math.ceil(pos)
    return s[lo] + (s[hi] - s[lo]) * (pos - lo)


def _timed_passes(backend, calls, reps):
    run, outs, method = backend.prepare(calls)
    per_call = [t / len(calls) for t in backend.time(run, reps)]
    return per_call, outs, method


# ----------------------------------------------------------------------------------------------- measure


def measure(fn: Callable, make_inputs: Callable, *, check: Callable | None = None,
            reference: Callable | None = None, name: str | None = None, reps: int = 25,
            bytes_per_call: int | None = None, proxy_inputs: Callable | None = None,
            _backend=None) -> Measurement:
    """Time ``fn(*make_inputs())`` honestly (see the module's docstring) and return a ``Measurement``.

    ``make_inputs()`` returns a tensor or a tuple of tensors, fresh at each call. ``bytes_per_call``: the bytes
    one call must move at least (default: every input once plus the output once). On the CPU nothing is timed;
    ``proxy_inputs()`` (small inputs) then gives a memcount proxy."""
    name = name or getattr(fn, "__name__", "fn")
    if reps < 3:
        raise ValueError("reps must be at least 3 (a median and a spread need several runs)")
    if _backend is None and not ON_GPU:
        result = Measurement(name)
        if proxy_inputs is not None:
            from .memcount import count_calls

            _, c = count_calls(fn, *_as_tuple(proxy_inputs()))
            result.proxy = {"programs": c.programs, "launches": c.launches, "load_bytes": c.load_bytes,
                            "store_bytes": c.store_bytes}
        return result
    backend = _backend or _Cuda()
    first = _as_tuple(make_inputs())
    out0 = fn(*first)
    moved = bytes_per_call or (_nbytes(first) + _nbytes(out0))
    l2 = backend.l2()
    n = rotation_count(_nbytes(first) + _nbytes(out0), l2)
    sets = [first] + [_as_tuple(make_inputs()) for _ in range(n - 1)]
    result = Measurement(name, sets=n, bytes_per_call=moved, l2_bytes=l2, reps=reps)
    if n * (_nbytes(first) + _nbytes(out0)) < 2 * l2:
        result.note = (f"only {n} sets fit the limit: together they are smaller than twice the L2, "
                       "so the cache serves part of the traffic")
    for k in (0, n - 1):  # before timing (this also compiles the kernels)
        problem = output_problem(out0 if k == 0 else fn(*sets[k]), sets[k], check, reference)
        if problem:
            result.ok, result.problem = False, f"wrong output before timing (input set {k + 1} of {n}): {problem}"
            return result
    calls = [lambda s=s: fn(*s) for s in sets]
    per_call, outs, result.method = _timed_passes(backend, calls, reps)
    backend.sync()
    for k in (0, n - 1):  # after: the timed runs' own outputs
        problem = output_problem(outs[k], sets[k], check, reference)
        if problem:
            result.ok, result.problem = False, f"wrong output after timing (input set {k + 1} of {n}): {problem}"
            return result
    # the copy of the same bytes, rotated and timed the same way
    half = max(1, moved // 2)
    pairs = [(torch.empty(half, dtype=torch.uint8, device=first[0].device).random_(0, 255),
              torch.empty(half, dtype=torch.uint8, device=first[0].device)) for _ in range(n)]
    copy_times, _, _ = _timed_passes(backend, [lambda s=s, d=d: d.copy_(s) for s, d in pairs], reps)
    result.timed = True
    result.median_ms = statistics.median(per_call)
    result.spread_ms = (_percentile(per_call, 0.25), _percentile(per_call, 0.75))
    result.copy_ms = statistics.median(copy_times)
    result.gbps = moved / result.median_ms / 1e6
    result.copy_gbps = 2 * half / result.copy_ms / 1e6
    result.pct_of_copy = 100 * result.gbps / result.copy_gbps
    return result


class _CallableModule(types.ModuleType):
    """``softmax_lab.measure`` is this module; calling it calls ``measure()`` (so both spellings work)."""

    def __call__(self, *args, **kwargs):
        return measure(*args, **kwargs)


sys.modules[__name__].__class__ = _CallableModule

__all__ = ["measure", "Measurement", "rotation_count", "l2_cache_bytes", "output_problem"]
