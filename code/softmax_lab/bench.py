"""``softmax-lab bench``: time every kernel, ``softmax_lab.softmax``, ``torch.softmax`` and peers on the GPU.

Two timers for every implementation and shape, both medians:

* **GPU time** (``ms``): ``triton.testing.do_bench_cudagraph``; the calls are replayed from a CUDA graph, so
  Python's launch overhead is not timed (``--timer plain`` uses ``do_bench`` instead);
* **eager time** (``eager_ms``): a Python loop of back-to-back calls, as an eager PyTorch model makes them.

Every call gets the next of several input (and output) buffers, together bigger than the L2 cache, so no
call is served by the cache. Bandwidth counts the bytes read once plus written once (backward: y and dy read,
dx written), and is compared with a device-to-device copy of the same bytes timed the same way: the ceiling
for a memory-bound kernel. Peers: ``--peers`` times Liger-Kernel and QuACK (forward and backward) in the same
process with the same timer, when importable (the JSON says why not, and which peer refused which shape and
why); ``--compile`` times torch.compile's softmax. ``--lm-widths``: odd widths and LM vocabularies only.
Each result is checked against a float64 softmax before and after it is timed.

Writes a JSON file (device, versions, date, command, every timing) and a PNG plot of % of copy against row
length; prints a table. ``--sweep`` also times the dispatcher's candidate settings (rows per program, warps,
tiles, chunks, cooperative blocks, L2 re-read programs).

Scripts that weigh a few settings on a few shapes (``benchmarks/sweeps/``) call ``compare``: the same buffers,
copy, timer and checks as here. ``--record FILE...`` prints the current-record table from saved runs (newest
run first for each shape; no GPU needed): ``benchmarks/README.md``'s table is its output. ``--rounds K`` times each
shape's implementations K times in turn (medians; every round's times in the JSON, which is saved after every
shape); ``--scorecard RUN.json [--since EARLIER.json]`` and ``--history RUN.json ...`` read saved runs with no GPU
(``scorecard.py``: the goal line by line; each line's ratio to QuACK across runs).
"""
from __future__ import annotations

import argparse
import datetime
import json
import math
import os
import platform
import random
import statistics
import sys
import time

import torch

from softmax_lab import kernels
from softmax_lab.device import ON_GPU
from softmax_lab.dispatch import _runnable, element_size
from softmax_lab.kernels import ALL, softmax_backward
from softmax_lab.kernels._launch import SHARED_BYTES, next_power_of_2, num_sms, shared_memory_cols
from softmax_lab.kernels.clustered import MAX_PARTS, slices as clustered_slices
from softmax_lab.scorecard import DTYPE_SHORT, speedup

F32, F16, BF16 = torch.float32, torch.float16, torch.bfloat16
# (rows, cols, dtype): the shapes of issues 3 and 15.
SHAPES = [(4096, 1024, F32), (65536, 512, F16), (65536, 512, BF16), (32768, 1000, F32), (65536, 128, F32),
          (32768, 2048, F16), (16384, 4096, F32), (8192, 8192, BF16), (4096, 16384, F32), (2048, 32768, BF16),
          (1024, 65536, F32), (1024, 65536, BF16), (4096, 131072, BF16), (256, 262144, F32), (16, 1048576, F32),
          (8, 4194304, F32)]
BACKWARD_SHAPES = [(4096, 1024, F32), (65536, 512, F16), (16384, 4096, F32), (1024, 65536, F32),
                   (16, 1048576, F32)]
# --sweep adds these, to tune the dispatcher between the shapes above.
SWEEP_EXTRA = [(65536, 256, F32), (65536, 512, F32), (65536, 128, F16), (65536, 1024, F16), (65536, 4096, F16),
               (16384, 2048, F32), (32768, 8192, F32), (2048, 32768, F32), (64, 262144, F32)]
QUICK_SHAPES = [(4096, 1024, F32), (65536, 128, F32), (16, 1048576, F32)]
# --lm-widths: odd widths (rows that are not whole 16-byte vectors), LM vocabularies, long rows.
ISSUE_SHAPES = [(2048, 50257, BF16), (100000, 77, F32), (65536, 130, BF16), (1024, 128256, BF16),
                (512, 151936, F32), (1024, 65536, BF16), (2048, 32768, BF16), (16, 1048576, F32), (2048, 32000, BF16),
                (1024, 128256, F32), (3, 500000, F32), (1, 128, F32), (32, 1024, F32), (4096, 1024, F32),
                (65536, 130, F32), (16384, 2050, F32), (8192, 8200, BF16)]  # (the last three: a little past 2**k)
ISSUE_BACKWARD_SHAPES = [(512, 151936, F32), (1024, 65536, F32), (2048, 50257, BF16), (4096, 1024, F32),
                         (1024, 128256, BF16)]
DTYPE_NAMES = {F32: "float32", F16: "float16", BF16: "bfloat16"}
ROTATE_BYTES = 512 * 2**20  # inputs+outputs cycled per timing: several times the 60 MiB L2
EAGER_MS = 20  # Python-launched loop: about this many ms of calls per repeat


def _progress(items, desc):
    try:
        from tqdm import tqdm

        return tqdm(items, desc=desc, file=sys.stdout, mininterval=5, dynamic_ncols=False, ncols=100)
    except ImportError:  # the GPU machine may lack tqdm: a plain loop that prints every step
        def plain():
            for i, item in enumerate(items):
                print(f"[{desc} {i + 1}/{len(items)}] {item[0] if isinstance(item, tuple) else item}", flush=True)
                yield item
        return plain()


def _buffers(shape, dtype, count):
    return [torch.randn(shape, device="cuda", dtype=torch.float32).mul_(3).to(dtype) for _ in range(count)]


def _time(fn, n_buffers, rep_ms, timer="graph"):
    """Median ms of one fn(i), i cycling through the buffers.

    timer="graph" (default): ``triton.testing.do_bench_cudagraph``: the calls, one per buffer in turn, are
    captured in a CUDA graph and replayed, so Python's launch overhead (tens of µs a call, more than a whole
    kernel on the small shapes) is not timed, only the GPU's work. timer="plain": ``triton.testing.do_bench``,
    which launches from Python each time (and flushes L2 between calls).
    """
    import triton.testing

    state = {"i": 0}

    def call():
        state["i"] = (state["i"] + 1) % n_buffers
        fn(state["i"])

    call()
    torch.cuda.synchronize()
    if timer == "graph":
        return triton.testing.do_bench_cudagraph(call, rep=rep_ms, return_mode="median")
    return triton.testing.do_bench(call, warmup=max(5, rep_ms // 4), rep=rep_ms, return_mode="median")


def _time_eager(fn, n_buffers, gpu_ms, repeats=5):
    """Median ms per call of a Python loop of back-to-back calls (what an eager PyTorch model does): each
    call pays its Python/launch cost, overlapped with the GPU's work on the calls before it."""
    calls = max(10, min(2000, math.ceil(EAGER_MS / max(gpu_ms, 1e-3))))
    for i in range(3):
        fn(i % n_buffers)
    torch.cuda.synchronize()
    times = []
    for _ in range(repeats):
        start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        start.record()
        for i in range(calls):
            fn(i % n_buffers)
        end.record()
        end.synchronize()
        times.append(start.elapsed_time(end) / calls)
    return sorted(times)[len(times) // 2]


def _check(y, x, kind="forward", dy=None):
    """'' when y matches a float64 softmax (backward: its gradient) on a few rows, else what is wrong."""
    from softmax_lab.testing import tolerance

    if not isinstance(y, torch.Tensor) or y.shape != x.shape:
        return f"wrong result: {type(y).__name__} {getattr(y, 'shape', '')}"
    rows = sorted({0, x.shape[0] // 2, x.shape[0] - 1})
    atol, rtol = tolerance(x.dtype)
    if kind == "forward":
        ref = torch.softmax(x[rows].double(), -1)
    else:  # x is y here: dx = y (dy - sum dy y)
        yd, dyd = x[rows].double(), dy[rows].double()
        ref = yd * (dyd - (dyd * yd).sum(-1, keepdim=True))
        atol *= 10
    try:
        torch.testing.assert_close(y[rows].double(), ref, atol=atol, rtol=rtol)
    except AssertionError as err:
        return "wrong result: " + str(err).splitlines()[0][:200]
    return ""


def peers(with_compile=False, with_libraries=True):
    """Other softmax implementations to time: ``({name: (forward(x), backward(y, dy) or None)}, {name: why not})``.
    torch.compile's with ``with_compile``; Liger-Kernel and QuACK with ``with_libraries``, when importable (the
    second dict says why one is not)."""
    out, missing = {}, {}
    if with_compile:
        for name in ("recompile_limit", "cache_size_limit"):  # one compile per shape: allow many
            if hasattr(torch._dynamo.config, name):
                setattr(torch._dynamo.config, name, max(getattr(torch._dynamo.config, name), 64))
        out["torch.compile"] = (torch.compile(lambda t: torch.softmax(t, -1), dynamic=False), None)
    if not with_libraries:
        return out, missing
    try:
        from liger_kernel.ops.softmax import LigerSoftmaxFunction, _softmax_backward
        from liger_kernel.ops.utils import calculate_settings

        def liger_backward(y, dy):
            block, warps = calculate_settings(y.shape[-1])
            return _softmax_backward(dy, y, block, warps, y.shape[-1] > block)

        out["liger"] = (LigerSoftmaxFunction.apply, liger_backward)
    except Exception as err:  # not installed (it is not on the course's GPU machine)
        missing["liger"] = f"{type(err).__name__}: {err}"[:200]
    try:
        from quack.softmax import softmax_bwd, softmax_fwd

        out["quack"] = (softmax_fwd, lambda y, dy: softmax_bwd(dy, y))  # (QuACK takes dy first)
    except Exception as err:
        missing["quack"] = f"{type(err).__name__}: {err}"[:200]
    return out, missing


def peer_candidates(names=("quack",)) -> list:
    """``compare``'s ``(name, fn, None)`` for the forward of each peer named that imports here (``peers``), for
    the sweeps; prints why one does not (the sweep runs without it)."""
    found, missing = peers()
    for name in names:
        if name in missing:
            print(f"{name} not importable: {missing[name]}")
    return [(name, lambda x, out, forward=found[name][0]: forward(x), None) for name in names if name in found]


def _kernel_fits(name, n_rows, n_cols):
    """Skip what a kernel cannot take, or would take minutes for (naive is O(N²); row-serial is one lane)."""
    limit = kernels.MAX_COLS[name]
    if limit and n_cols > limit:
        return False
    if name == "naive":
        return n_cols <= 1024
    if name == "row_serial":
        return n_cols <= 4096
    return True


def _forward_candidates(n_rows, n_cols, dtype):
    """(kernel, knobs) settings that --sweep times for one shape."""
    block = next_power_of_2(n_cols)
    out = []
    if block <= 4096:
        for tile in (1024, 2048, 4096, 8192, 16384):
            if tile >= block:
                for warps in (2, 4, 8, 16):
                    if 2 <= tile // (32 * warps) <= 64:
                        out.append(("multirow", dict(ROWS=tile // block, BLOCK=block, num_warps=warps)))
    if 1024 <= block <= 65536:
        for warps in (4, 8, 16, 32):
            if 2 <= block // (32 * warps) <= 128:
                out.append(("fused", dict(num_warps=warps)))
    sms = num_sms(torch.device("cuda"))
    if block >= 16384:
        for tile, warps in ((8192, 16), (8192, 32), (16384, 32)):
            for programs in (None, sms):
                if programs is None or programs < n_rows:
                    out.append(("online", dict(BLOCK=tile, num_warps=warps, programs=programs)))
    size = element_size(dtype)
    if block >= 8192:  # cooperative: tile and warps; tiles per program for very long rows; 16-bit e
        for tile, warps in ((2048, 2), (4096, 4), (4096, 8), (8192, 4), (8192, 8), (16384, 8), (16384, 16),
                            (32768, 16)):
            if tile < block and (size == 2 or tile <= 16384):
                out.append(("cooperative", dict(BLOCK=tile, num_warps=warps)))
                if size == 2:
                    out.append(("cooperative", dict(BLOCK=tile, num_warps=warps, keep_16=True)))
                if tile <= 8192:  # pipelined: two chunks held per program, so tiles up to half as large
                    out.append(("pipelined", dict(BLOCK=tile, num_warps=warps)))
                    if size == 2:
                        out.append(("pipelined", dict(BLOCK=tile, num_warps=warps, keep_16=True)))
                if block >= 262144 and tile in (4096, 8192):
                    for tiles in (2, 4):
                        out.append(("cooperative", dict(BLOCK=tile, num_warps=warps, tiles=tiles)))
    if 16384 <= block and block * size <= 65536:  # staged: rows in shared memory, warps
        for stages in (1, 2, 3):
            for warps in (16, 32):
                if stages * block * size <= SHARED_BYTES and block // (32 * warps) <= 64:
                    out.append(("staged", dict(STAGES=stages, num_warps=warps)))
    if 2048 <= block and block * size <= SHARED_BYTES:  # resident: the row in shared memory, warps
        for warps in (4, 8, 16):
            for overlap in (False, True):
                out.append(("resident", dict(num_warps=warps, overlap=overlap)))
    for parts in (2, 4, 8, 16):  # clustered: the row split over a cluster of programs' shared memories
        for warps, vectors in ((2, 2), (4, 1), (4, 2), (8, 1)):
            try:  # the kernel's own sizing (whole chunks, at most MAX_CHUNKS a slice)
                s = clustered_slices(n_cols, size, parts, warps, vectors)
            except ValueError:
                continue
            if s["CHUNK"] <= -(-n_cols // parts) and s["SLICE"] * size <= SHARED_BYTES:
                out.append(("clustered", dict(parts=parts, num_warps=warps, vectors=vectors)))
    if block >= 262144:  # l2_reread: tile, warps, programs per SM (tiles per chunk: its L2-budget default)
        for tile, warps, per_sm in ((4096, 8, 4), (8192, 8, 4), (2048, 4, 8)):
            out.append(("l2_reread", dict(BLOCK=tile, num_warps=warps, programs=per_sm * sms)))
    if block >= 65536:
        row_bytes = n_cols * size
        for group_mb in (None, 16, 32):
            group = None if group_mb is None else max(1, (group_mb << 20) // row_bytes)
            if group is not None and group >= n_rows:
                continue
            for per_sm in (1, 2, 4):
                for tile, warps in ((4096, 16), (8192, 16), (8192, 32)):
                    chunks = max(1, math.ceil(per_sm * sms / (group or n_rows)))
                    out.append(("split_row", dict(chunks=chunks, BLOCK=tile, num_warps=warps, rows_per_launch=group)))
    return out


def _backward_candidates(n_rows, n_cols):
    """(launcher, knobs) settings that --sweep times for one backward shape."""
    block = next_power_of_2(n_cols)
    out = []
    for rows_tile, warps in ((2048, 4), (4096, 8), (8192, 8), (8192, 16), (16384, 16)):
        if block <= 16384 and rows_tile >= block:
            out.append(("backward", dict(ROWS=rows_tile // block, num_warps=warps)))
    if block > 16384:
        for tile, warps in ((2048, 2), (2048, 4), (4096, 4), (4096, 8), (8192, 8), (8192, 16)):
            out.append(("cooperative_backward", dict(BLOCK=tile, num_warps=warps)))
    return out


def run(shapes, backward_shapes, rep_ms, sweep, with_kernels, timer="graph", eager=False, with_peers=False,
        check=True, sweep_only=(), with_compile=False, rounds=1, on_shape=None):
    """Time every shape; returns a list of records (one per implementation and shape).

    Each record has ``ms`` (GPU time, CUDA graph; see ``_time``) and, with ``eager``, ``eager_ms`` (a
    Python-launched loop, ``_time_eager``). With ``check``, every implementation's result is compared with a
    float64 softmax before and after it is timed (``checked``: "ok" or what was wrong). ``rounds``: each shape's
    implementations timed that many times in turn (``_measure_all``). ``on_shape(records)``: called after each
    shape with the records so far (``main`` saves them)."""
    from softmax_lab.op import softmax
    from softmax_lab.op import softmax_backward as softmax_lab_backward
    from softmax_lab.kernels import GPU_ONLY, LONG_ROWS, clustered_tma, cooperative_backward

    others, _ = peers(with_compile, with_peers) if (with_peers or with_compile) else ({}, {})
    records = []
    tasks = [("forward", s) for s in shapes] + [("backward", s) for s in backward_shapes]
    for kind, (n_rows, n_cols, dtype) in _progress(tasks, "bench"):
        size = element_size(dtype)
        moved = (2 if kind == "forward" else 3) * n_rows * n_cols * size
        n_buf = max(2, min(16, math.ceil(ROTATE_BYTES / moved)))
        xs = _buffers((n_rows, n_cols), dtype, n_buf)
        outs = [torch.empty_like(xs[0]) for _ in range(n_buf)]
        base = dict(kind=kind, rows=n_rows, cols=n_cols, dtype=DTYPE_NAMES[dtype], bytes=moved, buffers=n_buf)
        if kind == "backward":
            ys = [torch.softmax(x.float(), -1).to(dtype) for x in xs]
            xs = None
            dys = _buffers((n_rows, n_cols), dtype, n_buf)

        def verdict(fn, i):
            if not check:
                return ""
            y = fn(i)
            return _check(y, xs[i]) if kind == "forward" else _check(y, ys[i], "backward", dys[i])

        entries = []

        def add(impl, fn, knobs=None, correct=True):  # (timed below, all of the shape's in turn)
            rec = dict(base, impl=impl, knobs=knobs)
            entries.append((rec, fn, (lambda i: verdict(fn, i)) if correct and check else None))
            return rec

        if kind == "forward":
            add("copy", lambda i: outs[i].copy_(xs[i]), correct=False)
            add("torch.softmax", lambda i: torch.softmax(xs[i], -1))
            from softmax_lab.op import torch_is_quicker

            ran = _ran(xs[0])  # (as it ran; eager calls routed to torch's kernel, SOFTMAX_LAB_TORCH_BELOW, say so)
            ran += " (eager: torch's kernel)" if torch_is_quicker(xs[0], 1) else ""
            add("softmax_lab.softmax", lambda i: softmax(xs[i]))["choice"] = ran
            for name, (f, _) in others.items():
                add(name, lambda i, f=f: f(xs[i]))
            if with_kernels:
                for name, f in dict(ALL, **LONG_ROWS).items():
                    if name in LONG_ROWS or _kernel_fits(name, n_rows, n_cols):
                        add(name, lambda i, f=f: f(xs[i], out=outs[i]))
                for name, f in GPU_ONLY.items():  # the Gluon kernels: a row's copy fits shared memory (or 16)
                    if name == "clustered_tma":  # (rows of whole 16-byte vectors, at most 128 elements a thread)
                        fits = not clustered_tma.refusal(xs[0])
                    else:
                        fits = n_cols <= shared_memory_cols(dtype) * (MAX_PARTS if name == "clustered" else 1)
                    if fits:
                        add(name, lambda i, f=f: f(xs[i], out=outs[i]))
            if sweep:
                for name, knobs in _forward_candidates(n_rows, n_cols, dtype):
                    if sweep_only and name not in sweep_only:
                        continue
                    f = LONG_ROWS.get(name) or GPU_ONLY.get(name) or ALL[name]
                    add(f"sweep:{name}", lambda i, f=f, k=knobs: f(xs[i], out=outs[i], **k), knobs)
        else:
            # a copy of the same bytes: read 2 tensors, write 1
            add("copy", lambda i: torch.add(ys[i], dys[i], out=outs[i]), correct=False)
            add("torch.softmax", lambda i: torch._softmax_backward_data(dys[i], ys[i], -1, dtype))
            # the operator's backward, which allocates dx like torch's and the peers' calls (its eager plan)
            add("softmax_lab.softmax", lambda i: softmax_lab_backward(ys[i], dys[i]))
            for name, (_, f) in others.items():
                if f is not None:
                    add(name, lambda i, f=f: f(ys[i], dys[i]))
            if sweep:
                for name, k in _backward_candidates(n_rows, n_cols):
                    if sweep_only and name not in sweep_only:
                        continue
                    if name == "backward":
                        f = lambda i, k=k: softmax_backward(ys[i], dys[i], out=outs[i], **k)
                    else:
                        f = lambda i, k=k: cooperative_backward(ys[i], dys[i], outs[i], **k)
                    add(f"sweep:{name}", f, k)
        records += _relative(_measure_all(entries, n_buf, rep_ms, timer, eager, rounds))
        xs = ys = dys = outs = None
        torch.cuda.empty_cache()
        if on_shape is not None:
            on_shape(records)
    return records


def _measure_all(entries, n_buffers, rep_ms, timer="graph", eager=False, rounds=1):
    """Check, time, check again: fill each record with its implementation's GPU time (and eager time) and
    ``checked``. ``entries``: ``(rec, fn, verdict)`` for the implementations of one shape.

    ``fn(i)`` runs the implementation on buffer ``i``; ``verdict(i)`` runs it on buffer ``i`` and returns '' when
    the result is right, else what is wrong (None: not checked, as for the copy). Each is checked on the first
    buffer, then all are timed ``rounds`` times, the first round in the list's order and each later one in an
    order shuffled from the round's number (the same every run), so that which comes first and which follows
    which change between rounds; then each is checked on the last buffer, so a result written by an earlier call cannot
    pass for this one. With ``rounds > 1`` a record keeps every round's times (``ms_rounds``, ``eager_ms_rounds``)
    and their medians as ``ms`` and ``eager_ms``: the clock and the GPU drift between rounds, and ratios taken
    round by round (``scorecard.speedup``) show how much. A setting that does not compile or fit, or a peer that
    refuses the shape, is recorded with its ``error`` (and the rounds it was timed in before), not raised, and is
    not timed again. Returns the records."""
    def failed(rec, err):
        rec["error"] = f"{type(err).__name__}: {err}"[:300]
        for key in ("ms", "gbps", "eager_ms", "eager_gbps"):
            rec.pop(key, None)
        if not rec.get("checked"):
            rec.pop("checked", None)
        if torch.cuda.is_available():
            torch.cuda.synchronize()

    live = []
    for rec, fn, verdict in entries:
        try:
            rec["checked"] = verdict(0) if verdict else ""
            live.append((rec, fn, verdict))
        except Exception as err:
            failed(rec, err)
    for r in range(rounds):
        round_order = [e for e in live if "error" not in e[0]]
        if r:
            random.Random(r).shuffle(round_order)
        for rec, fn, _ in round_order:
            try:
                ms = _time(fn, n_buffers, rep_ms, timer)
                rec.setdefault("ms_rounds", []).append(ms)
                if eager:
                    rec.setdefault("eager_ms_rounds", []).append(_time_eager(fn, n_buffers, ms))
            except Exception as err:
                failed(rec, err)
    for rec, _, verdict in live:
        for key in ("ms", "eager_ms"):
            if f"{key}_rounds" in rec and "error" not in rec:
                rec[key] = statistics.median(rec[f"{key}_rounds"])
                rec[key.replace("ms", "gbps")] = rec["bytes"] / rec[key] / 1e6
            if rounds == 1:
                rec.pop(f"{key}_rounds", None)
        if "error" in rec:
            continue
        try:
            bad = rec["checked"] or (verdict(n_buffers - 1) if verdict else "")
            rec["checked"] = bad or ("ok" if verdict else "not checked")
        except Exception as err:
            failed(rec, err)
    return [rec for rec, _, _ in entries]


def _ran(x2) -> str:
    """The kernel the dispatcher runs for ``x2``, with the knob that changes what it does: 'multirow (tail tiles)',
    'unaligned_resident (line=128)'."""
    name, knobs = _runnable(x2)
    return name + (" (tail tiles)" if knobs.get("tail") else f" (line={knobs['line']})" if knobs.get("line") else "")


def compare(n_rows, n_cols, dtype, candidates, kind="forward", rep_ms=20, eager=False, timer="graph",
            with_torch=True, view_pad=0, rounds=1):
    """Time a few implementations of one shape as ``softmax-lab bench`` does; returns one record each.

    ``candidates``: ``(name, fn, knobs)`` triples. A forward ``fn(x, out)`` returns the softmax of ``x`` (it may
    write it into ``out``); a backward ``fn(y, dy, out)`` returns dx. Every call gets the next of several
    buffers, together past the L2 cache; a copy of the same bytes is timed alike (the first record, ``copy``),
    then ``torch.softmax`` (``with_torch``), ``softmax_lab.softmax`` as the dispatcher runs it (its record's
    ``choice`` names the kernel), then the candidates. Each result is checked against float64 before and after
    it is timed; each record gets ``pct_copy`` and, beside torch, ``vs_torch``. ``view_pad``: forward inputs
    are views one element into rows ``n_cols + view_pad`` long (rows that do not start on 16 bytes). ``rounds``: all
    timed in turn that many times (``_measure_all``)."""
    from softmax_lab.op import softmax

    moved = (2 if kind == "forward" else 3) * n_rows * n_cols * element_size(dtype)
    n_buf = max(2, min(16, math.ceil(ROTATE_BYTES / moved)))
    base = dict(kind=kind, rows=n_rows, cols=n_cols, dtype=DTYPE_NAMES[dtype], bytes=moved, buffers=n_buf)
    if view_pad:
        base["view_pad"] = view_pad
    outs = [torch.empty((n_rows, n_cols), device="cuda", dtype=dtype) for _ in range(n_buf)]
    if kind == "forward":
        if view_pad:
            xs = [b[:, 1:1 + n_cols] for b in _buffers((n_rows, n_cols + view_pad), dtype, n_buf)]
        else:
            xs = _buffers((n_rows, n_cols), dtype, n_buf)
        args = lambda i: (xs[i], outs[i])
        verdict = lambda f: lambda i: _check(f(i), xs[i])
        runs = [("copy", lambda x, out: out.copy_(x), None)]
        runs += [("torch.softmax", lambda x, out: torch.softmax(x, -1), None)] if with_torch else []
        runs += [("softmax_lab.softmax", lambda x, out: softmax(x), None)]
    else:
        ys = [torch.softmax(x.float(), -1).to(dtype) for x in _buffers((n_rows, n_cols), dtype, n_buf)]
        dys = _buffers((n_rows, n_cols), dtype, n_buf)
        args = lambda i: (ys[i], dys[i], outs[i])
        verdict = lambda f: lambda i: _check(f(i), ys[i], "backward", dys[i])
        runs = [("copy", lambda y, dy, out: torch.add(y, dy, out=out), None)]
        runs += [("torch.softmax", lambda y, dy, out: torch._softmax_backward_data(dy, y, -1, dtype), None)
                 ] if with_torch else []
        runs += [("softmax_lab.softmax", lambda y, dy, out: softmax_backward(y, dy, out=out), None)]
    entries = []
    for name, f, knobs in runs + list(candidates):
        fn = lambda i, f=f: f(*args(i))
        entries.append((dict(base, impl=name, knobs=knobs), fn, None if name == "copy" else verdict(fn)))
        if name == "softmax_lab.softmax" and kind == "forward":
            entries[-1][0]["choice"] = _ran(xs[0])  # (as it ran: rows off 16 bytes take the unaligned kernels)
    return _relative(_measure_all(entries, n_buf, rep_ms, timer, eager, rounds))


def save(path, records, command, started=None, **more):
    """Write ``records`` as ``softmax-lab bench`` does: JSON with ``meta`` (device, versions, date, command)."""
    import triton

    props = torch.cuda.get_device_properties(0)
    meta = dict(device=torch.cuda.get_device_name(), sms=props.multi_processor_count, torch=torch.__version__,
                triton=triton.__version__, cuda=torch.version.cuda, python=platform.python_version(),
                date=datetime.datetime.now(datetime.timezone.utc).isoformat(timespec="seconds"), command=command,
                timing=f"median of triton.testing.do_bench_cudagraph, rotating through buffers of "
                       f"{ROTATE_BYTES >> 20} MiB or more in all; % of a copy of the same bytes timed alike",
                correctness="each result compared with a float64 softmax on 3 rows, before and after timing", **more)
    if started is not None:
        meta["seconds"] = round(time.time() - started, 1)
    os.makedirs(os.path.dirname(os.path.abspath(path)), exist_ok=True)
    save_run(path, meta, records)


def save_run(path, meta, records, partial=None):
    """Write a run's JSON as ``softmax-lab bench`` does, whole or not at all: into a file beside it, then renamed
    over it, so that a run stopped while writing (``timeout``) leaves the last shape's file, not half of one.
    ``partial``: why the run is not complete (``meta.partial``; ``scorecard.report`` says so)."""
    meta = dict(meta, partial=partial) if partial else meta
    with open(path + ".tmp", "w") as fh:
        json.dump(dict(meta=meta, records=records), fh, indent=1)
    os.replace(path + ".tmp", path)


def sweep(path, cases, script, kind="forward", line=None, **more):
    """Time each of ``cases`` with ``compare`` and save all records to ``path`` after each shape (a sweep cut
    short keeps what it measured), printing a line a record. ``cases``: ``(n_rows, n_cols, dtype, candidates)``,
    or ``(..., candidates, compare's keyword arguments)``; ``script``: the command line, for the record's meta;
    ``line(rec)``: what to print after the shape (default: the kernel or knobs, % of copy, the verdict)."""
    started, records = time.time(), []
    line = line or (lambda rec: f"{rec['impl']:22s} {rec.get('choice') or rec['knobs'] or ''} "
                                f"{rec.get('pct_copy', 0):6.1f}% {rec.get('checked') or rec.get('error')}")
    for n_rows, n_cols, dtype, candidates, *options in cases:
        options = dict(dict(kind=kind), **(options[0] if options else {}))
        for rec in compare(n_rows, n_cols, dtype, candidates, **options):
            records.append(rec)
            print(f"{options['kind']:8s} {n_rows}x{n_cols} {rec['dtype']:9s} {line(rec)}", flush=True)
        torch.cuda.empty_cache()
        save(path, records, script, started, **more)
    return records


def record_table(paths) -> str:
    """The current record: for each (pass, shape, dtype), ``softmax_lab.softmax`` in the newest of the saved runs
    ``paths`` that timed it (by each file's ``meta.date``), beside ``torch.softmax`` of the same run."""
    runs = []
    for path in paths:
        with open(path) as fh:
            data = json.load(fh)
        runs.append((data["meta"].get("date", ""), os.path.basename(path), data["records"]))
    latest = {}
    for _, name, records in sorted(runs, reverse=True):
        for r in records:
            key = (r["kind"], r["rows"], r["cols"], r["dtype"])
            if r["impl"] == "softmax_lab.softmax" and "pct_copy" in r and key not in latest:
                torch_ = next((q for q in records if q["impl"] == "torch.softmax" and "ms" in q
                               and (q["kind"], q["rows"], q["cols"], q["dtype"]) == key), {})
                latest[key] = (name, r, torch_)
    lines = ["| pass | shape | dtype | kernel | % of copy | torch, % of copy | vs torch | eager µs (torch) | run |",
             "| --- | --- | --- | --- | ---: | ---: | ---: | ---: | --- |"]
    for key in sorted(latest, key=lambda k: (k[0] != "forward", k[1] * k[2], k[2], k[3])):
        name, r, t = latest[key]
        both = "eager_ms" in r and "eager_ms" in t
        eager = f"{r['eager_ms'] * 1e3:.1f} ({t['eager_ms'] * 1e3:.1f})" if both else "–"
        vs = f"{r['vs_torch']:.2f}×" if "vs_torch" in r else "–"
        torch_pct = f"{t['pct_copy']:.1f}" if "pct_copy" in t else "–"
        lines.append(f"| {key[0]} | {key[1]}×{key[2]} | {DTYPE_SHORT.get(key[3], key[3])} | {r.get('choice') or ''} | "
                     f"{r['pct_copy']:.1f} | {torch_pct} | {vs} | {eager} | `{name}` |")
    return "\n".join(lines)


def _relative(records):
    """Add % of copy bandwidth and the speed ratio to torch (torch time / this time) to every record, for
    GPU time (``pct_copy``, ``vs_torch``) and eager time (``eager_pct_copy``, ``eager_vs_torch``); with rounds,
    the median of the rounds' ratios. Returns the records."""
    groups = {}
    for r in records:
        groups.setdefault((r["kind"], r["rows"], r["cols"], r["dtype"]), []).append(r)
    for same in groups.values():
        copy = next((o for o in same if o["impl"] == "copy" and "ms" in o), None)
        torch_ = next((o for o in same if o["impl"] == "torch.softmax" and "ms" in o), None)
        for r in same:
            for t, pct, vs in (("ms", "pct_copy", "vs_torch"), ("eager_ms", "eager_pct_copy", "eager_vs_torch")):
                if t in r and copy and t in copy:
                    r[pct] = 100 * speedup(copy, r, t)[0]
                if t in r and torch_ and t in torch_:
                    r[vs] = speedup(torch_, r, t)[0]
    return records


def table(records, impls=("copy", "torch.softmax", "torch.compile", "liger", "quack", "softmax_lab.softmax")) -> str:
    lines = ["| pass | shape | dtype | impl | kernel | GPU µs | GB/s | % of copy | vs torch | eager µs | "
             "eager % of copy | eager vs torch | checked |",
             "| --- | --- | --- | --- | --- | ---: | ---: | ---: | ---: | ---: | ---: | ---: | --- |"]
    for r in records:
        if r["impl"] in impls and "ms" in r:
            eager = (f"{r['eager_ms'] * 1e3:.1f} | {r.get('eager_pct_copy', 0):.1f} | "
                     f"{r.get('eager_vs_torch', 0):.2f}x" if "eager_ms" in r else "- | - | -")
            lines.append(f"| {r['kind']} | {r['rows']}x{r['cols']} | {r['dtype']} | {r['impl']} | "
                         f"{r.get('choice', '')} | {r['ms'] * 1e3:.1f} | {r['gbps']:.0f} | "
                         f"{r.get('pct_copy', 0):.1f} | "
                         f"{r.get('vs_torch', 0):.2f}x | {eager} | {r.get('checked', '')} |")
        elif r["impl"] in impls:
            lines.append(f"| {r['kind']} | {r['rows']}x{r['cols']} | {r['dtype']} | {r['impl']} | | "
                         f"error: {r.get('error', '?')[:60]} | | | | | | | |")
    return "\n".join(lines)


def best_settings(records) -> str:
    """For --sweep: the fastest setting per shape."""
    out = []
    groups = {}
    for r in records:
        if r["impl"].startswith("sweep:") and "ms" in r:
            groups.setdefault((r["kind"], r["rows"], r["cols"], r["dtype"]), []).append(r)
    for key, rs in groups.items():
        rs.sort(key=lambda r: r["ms"])
        top = ", ".join(f"{r['impl'][6:]} {r['knobs']} {r['pct_copy']:.0f}%" for r in rs[:4])
        out.append(f"{key}: {top}")
    return "\n".join(out)


def plot(records, path) -> bool:
    """% of copy against row length, one line per implementation: forward GPU time, forward eager time
    (launched from Python), backward GPU time."""
    try:
        import matplotlib

        matplotlib.use("Agg")
        import matplotlib.pyplot as plt
    except ImportError:
        print("matplotlib is missing: no plot (make it later from the JSON with softmax_lab.bench.plot_json)")
        return False
    impls = [i for i in ("torch.softmax", "torch.compile", "liger", "quack", "softmax_lab.softmax")
             if any(r["impl"] == i for r in records)]
    markers = {"float32": "o", "float16": "s", "bfloat16": "^"}
    panels = [("forward", "pct_copy", "forward, GPU time (CUDA graph)"),
              ("forward", "eager_pct_copy", "forward, eager (Python loop)"),
              ("backward", "pct_copy", "backward, GPU time (CUDA graph)")]
    fig, axes = plt.subplots(1, 3, figsize=(18, 5.5), sharey=True)
    for ax, (kind, key, title) in zip(axes, panels):
        for j, impl in enumerate(impls):
            # one line for fp32 (solid) and one for fp16/bf16 (dashed); markers tell the dtype
            for wide, style in ((True, "-"), (False, "--")):
                rs = sorted((r for r in records if r["kind"] == kind and r["impl"] == impl and key in r
                             and (r["dtype"] == "float32") == wide), key=lambda r: (r["cols"], r["dtype"]))
                if not rs:
                    continue
                ax.plot([r["cols"] for r in rs], [r[key] for r in rs], color=f"C{j}", ls=style, lw=1, alpha=0.6)
                for r in rs:
                    ax.scatter(r["cols"], r[key], color=f"C{j}", marker=markers.get(r["dtype"], "o"), s=25,
                               label=impl if wide and r is rs[0] or (not wide and r is rs[0] and not any(
                                   q["dtype"] == "float32" for q in records if q["impl"] == impl
                                   and q["kind"] == kind and key in q)) else None)
        ax.axhline(100, color="gray", lw=1)
        ax.axhline(67, color="gray", ls=":", lw=1)
        ax.set_xscale("log", base=2)
        ax.set_xlabel("row length N (o fp32, solid; s fp16, ^ bf16, dashed)")
        ax.set_title(title)
        ax.grid(alpha=0.3)
    axes[0].set_ylabel("% of device-to-device copy (same bytes, same timer)")
    axes[0].set_ylim(0, 125)
    axes[0].legend(loc="lower left", fontsize=8)
    meta = records[0].get("_device", "") if records else ""
    fig.suptitle(f"Softmax on {meta}: read once + write once, medians, rotating buffers past the L2 cache "
                 "(dotted: 67%, the two-read cap)")
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    return True


def main(argv=None) -> int:
    p = argparse.ArgumentParser(prog="softmax-lab bench", description=__doc__.splitlines()[0])
    p.add_argument("--out", default="benchmarks/records",
                   help="folder for the JSON and the plot (default: benchmarks/records, which chapter 7 reads)")
    p.add_argument("--name", default="bench", help="file name stem (default: bench)")
    p.add_argument("--quick", action="store_true", help="three shapes only")
    p.add_argument("--sweep", action="store_true", help="also time the dispatcher's candidate settings")
    p.add_argument("--no-kernels", action="store_true", help="only copy, torch.softmax and softmax_lab.softmax")
    p.add_argument("--no-backward", action="store_true")
    p.add_argument("--only", default="", help="only these shapes, e.g. 16x1048576,1024x65536 (any dtype)")
    p.add_argument("--rep", type=int, default=100, help="ms of timed repeats per measurement (do_bench rep)")
    p.add_argument("--rounds", type=int, default=1,
                   help="time each shape's implementations this many times in turn; medians, and every round's "
                        "times in the JSON (--scorecard gives the ratios' range)")
    p.add_argument("--timer", choices=["graph", "plain"], default="graph",
                   help="graph: do_bench_cudagraph (GPU time only; default); plain: do_bench from Python")
    p.add_argument("--sweep-only", default="",
                   help="with --sweep: only these kernels' settings, e.g. cooperative,fused")
    p.add_argument("--no-eager", action="store_true", help="skip the second timer (a Python-launched loop)")
    p.add_argument("--lm-widths", "--issue", dest="issue", action="store_true",
                   help="only the odd widths and LM vocabularies (GPT-2, Llama, Qwen) and a few long rows")
    p.add_argument("--peers", action="store_true",
                   help="also time QuACK and Liger-Kernel, when importable, in this process with the same timer")
    p.add_argument("--compile", action="store_true", help="also time torch.compile's softmax")
    p.add_argument("--no-check", action="store_true", help="skip the correctness checks around each timing")
    p.add_argument("--record", nargs="+", metavar="JSON",
                   help="print the current-record table of these saved runs (newest first per shape) and stop")
    p.add_argument("--scorecard", metavar="JSON",
                   help="print the goal, line by line, for this saved --lm-widths --peers run, and stop (no GPU)")
    p.add_argument("--since", metavar="JSON", help="with --scorecard: the earlier run to compare with")
    p.add_argument("--history", nargs="+", metavar="JSON",
                   help="print each shape's speed against QuACK in each of these saved runs (oldest first), and stop")
    args = p.parse_args(argv)
    if args.since and not args.scorecard:
        p.error("--since goes with --scorecard RUN.json")
    if args.scorecard and args.history:
        p.error("--scorecard and --history print different tables: ask for one at a time")
    if args.scorecard or args.history:
        from softmax_lab import scorecard

        try:
            if args.scorecard:
                since = args.since and scorecard.load(args.since)
                print(scorecard.report(scorecard.load(args.scorecard), since,
                                       scorecard.run_name(args.since) if since else "earlier"))
            else:
                print(scorecard.history([(scorecard.run_name(path), scorecard.load(path)) for path in args.history]))
        except ValueError as err:
            print(f"softmax-lab bench {'--scorecard' if args.scorecard else '--history'}: cannot read {err}",
                  file=sys.stderr)
            return 2
        return 0
    if args.record:
        try:
            print(record_table(args.record))
        except (OSError, ValueError, KeyError, TypeError) as err:
            print(f"softmax-lab bench --record: cannot read the runs ({type(err).__name__}: {err}); each must be "
                  "a JSON file written by softmax-lab bench")
            return 2
        return 0
    if args.rounds < 1:
        p.error(f"--rounds takes a whole number of 1 or more, not {args.rounds}")
    if not ON_GPU:
        print("softmax-lab bench needs a CUDA GPU (the CPU interpreter is far too slow to time).")
        return 1
    shapes = (QUICK_SHAPES if args.quick else ISSUE_SHAPES if args.issue
              else SHAPES + (SWEEP_EXTRA if args.sweep else []))
    back = [] if args.no_backward else ([QUICK_SHAPES[0]] if args.quick else ISSUE_BACKWARD_SHAPES if args.issue
                                        else BACKWARD_SHAPES)
    if args.only:
        keep = set(args.only.split(","))
        shapes = [s for s in shapes if f"{s[0]}x{s[1]}" in keep]
        back = [s for s in back if f"{s[0]}x{s[1]}" in keep]
    import triton

    started = time.time()
    device = torch.cuda.get_device_name()
    stem = os.path.join(args.out, args.name)
    os.makedirs(args.out, exist_ok=True)

    _, missing = peers(False, args.peers) if args.peers else ({}, {})
    props = torch.cuda.get_device_properties(0)
    fixed = dict(device=device, sms=props.multi_processor_count, l2_bytes=getattr(props, "L2_cache_size", None),
                 torch=torch.__version__, triton=triton.__version__, cuda=torch.version.cuda,
                 python=platform.python_version(),
                 command="softmax-lab bench " + " ".join(argv if argv is not None else sys.argv[1:]),
                 timing=f"median of triton.testing.{'do_bench_cudagraph' if args.timer == 'graph' else 'do_bench'}"
                        f", rotating through buffers of {ROTATE_BYTES >> 20} MiB or more in all"
                        + (f"; each shape's implementations timed in turn, {args.rounds} rounds, median of the "
                           "rounds" if args.rounds > 1 else ""),
                 rounds=args.rounds, bytes="read once + written once (backward: y, dy read; dx written)",
                 eager=None if args.no_eager else f"median of 5 repeats of a Python loop of back-to-back calls "
                                                  f"(about {EAGER_MS} ms of calls each), CUDA events",
                 peers_not_importable=missing,
                 versions={name: _version(name) for name in ("quack-kernels", "liger-kernel", "nvidia-cutlass-dsl")},
                 correctness="each result compared with a float64 softmax on 3 rows, before and after timing")

    def write(records, done=True):
        """The JSON: after every shape (``partial``: a run cut short keeps what it measured), then once more."""
        meta = dict(fixed, date=datetime.datetime.now(datetime.timezone.utc).isoformat(),
                    seconds=round(time.time() - started, 1),
                    peers=sorted({r["impl"] for r in records} & {"torch.compile", "liger", "quack"}),
                    peer_refusals=[dict(peer=r["impl"], kind=r["kind"], shape=f"{r['rows']}x{r['cols']}",
                                        dtype=r["dtype"], why=r["error"]) for r in records
                                   if r["impl"] in ("liger", "quack", "torch.compile") and "error" in r])
        save_run(stem + ".json", meta, records,
                 None if done else f"cut short: the shapes measured so far ({len(records)} records)")
        return meta

    records = run(shapes, back, args.rep, args.sweep, not args.no_kernels, args.timer, eager=not args.no_eager,
                  with_peers=args.peers, check=not args.no_check,
                  sweep_only=tuple(n for n in args.sweep_only.split(",") if n), with_compile=args.compile,
                  rounds=args.rounds, on_shape=lambda so_far: write(so_far, done=False))
    meta = write(records)
    if records:
        records[0]["_device"] = device
        plot(records, stem + ".png")
        del records[0]["_device"]
    print(table(records))
    if args.sweep:
        print(best_settings(records))
    print(f"wrote {stem}.json ({meta['seconds']} s)")
    return 0


def _version(distribution: str) -> str | None:
    try:
        from importlib.metadata import version

        return version(distribution)
    except Exception:
        return None


def plot_json(path_json: str, path_png: str | None = None) -> bool:
    """Make the plot from a saved JSON (for when the GPU machine had no matplotlib)."""
    with open(path_json) as fh:
        data = json.load(fh)
    records = data["records"]
    records[0]["_device"] = data["meta"]["device"]
    return plot(records, path_png or path_json[:-5] + ".png")


if __name__ == "__main__":
    sys.exit(main())
