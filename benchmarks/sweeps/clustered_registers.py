"""The clustered forward with each program's slice in registers, as QuACK holds it, beside the library's kernel
(``kernels/clustered.py``: slices in shared memory; ``bench.compare`` times the dispatcher beside it) and QuACK,
on the widths where the library stops 8-9 points under QuACK (docs/performance.md, rounds 8 and 10). GPU machine
(sm_90), repository root, QuACK importable for its lines (``benchmarks/bench_with_peers.sh`` shows how):

    PYTHONPATH=code python3 benchmarks/sweeps/clustered_registers.py OUT.json

``registers_kernel``: one cluster of PARTS programs a row, as ``clustered.py``; each program loads its slice
straight into registers (16-byte loads, all issued at once), takes its max, then exp2 once per element, kept in
registers, and their sum; the programs exchange (max, sum) through each other's shared memory
(``cluster_exchange.py``); each scales its exps by exp2(its max - the row's) / the row's sum and stores them. One
read, one write, one exp an element, no shared-memory pass (the library's kernel reads its shared memory twice
with ``online``, and its copies are all landed, none in flight, while the cluster waits at the exchange).

A slice is a power-of-two tile and, where the slice is longer, a second, narrower one (``tiles``: 151,936 fp32 on
16 programs is 9,496 a program: 8,192 + 2,048, where one tile of 16,384 would be 42% padding), as ``multirow``'s
tail tiles. Every setting is checked against float64 first on hard rows (an all -inf row, -inf runs, rows near
-1000), then timed with ``bench.compare`` (buffers past the L2 cache, checked before and after).

Written in round 10, run in round 11 (``h200-clustered-registers-round11.json``): it lost to the dispatcher in every
setting, 8.3 to 34.0 points of copy (docs/performance.md, round 11, says why).
"""
import sys

import torch
from triton.experimental import gluon
from triton.experimental.gluon import language as gl

from softmax_lab import bench
from softmax_lab.kernels._launch import next_power_of_2, power_of_2_at_most
from softmax_lab.kernels.cluster_exchange import cluster_arrive, exchange_max_sum
from softmax_lab.kernels.clustered import split_layout

LOG2E = gl.constexpr(1.4426950408889634)  # (a global a kernel reads must be a constexpr)


@gluon.jit
def _load(src, part, SLICE: gl.constexpr, START: gl.constexpr, TILE: gl.constexpr, n_cols, layout: gl.constexpr):
    """Columns [START, START + TILE) of each program's slice, -inf past the row (and the slice), as floats."""
    offs = START + gl.arange(0, TILE, layout=gl.SliceLayout(0, layout))
    cols = part[:, None] * SLICE + offs[None, :]
    ok = (cols < n_cols) & (offs[None, :] < SLICE)
    return gl.load(src + cols, mask=ok, other=float("-inf")).to(gl.float32), cols, ok


@gluon.jit
def registers_kernel(out_ptr, in_ptr, n_cols, in_stride, out_stride, SLICE: gl.constexpr, MAIN: gl.constexpr,
                     TAIL: gl.constexpr, PARTS: gl.constexpr):
    VEC: gl.constexpr = 128 // in_ptr.dtype.element_ty.primitive_bitwidth  # elements per 16 bytes
    layout: gl.constexpr = split_layout(VEC, gl.num_warps(), PARTS)
    row = gl.program_id(0).to(gl.int64)  # (the cluster's number)
    part = gl.arange(0, PARTS, layout=gl.SliceLayout(1, layout))
    cluster_arrive()  # (the partners may write into this program's shared memory once all have arrived)
    src = in_ptr + row * in_stride
    x, cols, ok = _load(src, part, SLICE, 0, MAIN, n_cols, layout)  # 1. the slice into registers
    if TAIL > 0:
        x_t, cols_t, ok_t = _load(src, part, SLICE, MAIN, TAIL, n_cols, layout)
        s = gl.maximum(gl.max(x, axis=1), gl.max(x_t, axis=1)) * LOG2E  # 2. its max (times log2 e, rounded once)
    else:
        s = gl.max(x, axis=1) * LOG2E
    shift = gl.where(s == float("-inf"), 0.0, s)  # (a slice of -inf only: its exps and sum are 0)
    e = gl.exp2(x * LOG2E - shift[:, None])  # 3. one exp an element, kept
    total = gl.sum(e, axis=1)
    if TAIL > 0:
        e_t = gl.exp2(x_t * LOG2E - shift[:, None])
        total += gl.sum(e_t, axis=1)
    s_row, r_row = exchange_max_sum(s, total, PARTS, True)  # 4. the row's max and 1 / its sum
    scale = (gl.exp2(shift - s_row) * r_row)[:, None]
    dst = out_ptr + row * out_stride
    gl.store(dst + cols, (e * scale).to(out_ptr.dtype.element_ty), mask=ok)  # 5. stored
    if TAIL > 0:
        gl.store(dst + cols_t, (e_t * scale).to(out_ptr.dtype.element_ty), mask=ok_t)


def tiles(n_cols: int, parts: int) -> dict:
    """SLICE (a program's columns, a multiple of 64 so that every slice starts on 128 bytes) as MAIN, the largest
    power of two it holds, and TAIL, a power of two for the rest (0: none)."""
    slice_ = -(-n_cols // (parts * 64)) * 64
    main = power_of_2_at_most(slice_)
    tail = next_power_of_2(slice_ - main) if slice_ > main else 0
    if main + tail >= next_power_of_2(slice_):  # (one tile holds it as well)
        main, tail = next_power_of_2(slice_), 0
    return dict(SLICE=slice_, MAIN=main, TAIL=tail, PARTS=parts)


def registers_softmax(x: torch.Tensor, out: torch.Tensor | None = None, parts: int = 8, num_warps: int = 8):
    """Softmax over the last dim of a contiguous 2-D CUDA ``x`` whose rows are whole 16-byte vectors."""
    assert x.is_cuda and x.dim() == 2 and x.stride(1) == 1 and (x.shape[1] * x.element_size()) % 16 == 0
    y = torch.empty_like(x) if out is None else out
    options = tiles(x.shape[1], parts)
    registers_kernel[(x.shape[0],)](y, x, x.shape[1], x.stride(0), y.stride(0), **options, num_warps=num_warps,
                                    num_ctas=parts)
    return y


def hard_rows(n_rows, n_cols, dtype):
    """Rows to check first: random, all -inf, -inf runs over whole slices, near -1000 with the mass on a few."""
    x = 3 * torch.randn((n_rows, n_cols), device="cuda")
    x[1] = float("-inf")
    x[2, : n_cols // 2] = float("-inf")
    x[3] = -1000.0 - 3 * torch.rand(n_cols, device="cuda")
    x[3, :: n_cols // 5] = -990.0
    return x.to(dtype)


def checked(launch, n_cols, dtype):
    """Whether ``launch`` gives float64's softmax on ``hard_rows`` (NaN where torch gives NaN)."""
    x = hard_rows(8, n_cols, dtype)
    y = launch(x, torch.full_like(x, float("nan")))
    tol = 1e-5 if dtype == torch.float32 else 1e-2
    ref = torch.softmax(x.double(), -1)
    return bool(torch.allclose(y.double(), ref, atol=tol * 0.1, rtol=tol, equal_nan=True))


# (rows, columns, dtype): the settings (parts, num_warps) to try; the library's dispatcher and QuACK beside them.
SETTINGS = {(1024, 65536, torch.bfloat16): [(4, 8), (4, 16), (8, 4), (8, 8)],
            (1024, 128256, torch.bfloat16): [(8, 8), (8, 16), (16, 4), (16, 8)],
            (1024, 100000, torch.bfloat16): [(8, 8), (8, 16), (16, 8)],
            (512, 151936, torch.float32): [(16, 8), (16, 16), (8, 16)],
            (1024, 65536, torch.float32): [(8, 8), (16, 4), (16, 8)]}


def main(path):
    quack = bench.peer_candidates()
    cases = []
    for (n_rows, n_cols, dtype), settings in SETTINGS.items():
        candidates = list(quack)
        for parts, warps in settings:
            def launch(x, out, parts=parts, warps=warps):
                return registers_softmax(x, out, parts, warps)
            try:
                right = checked(launch, n_cols, dtype)
            except Exception as error:  # (e.g. a cluster of 16 this GPU will not launch)
                print(f"{n_rows}x{n_cols} {dtype} parts={parts} warps={warps}: {type(error).__name__}: {error}"[:300])
                continue
            if not right:
                print(f"{n_rows}x{n_cols} {dtype} parts={parts} warps={warps}: WRONG on the hard rows", flush=True)
                continue
            candidates.append((f"registers {parts}x{warps}", launch, dict(parts=parts, num_warps=warps, **tiles(
                n_cols, parts))))
        cases.append((n_rows, n_cols, dtype, candidates))
    bench.sweep(path, cases, "PYTHONPATH=code python3 benchmarks/sweeps/clustered_registers.py OUT.json")


if __name__ == "__main__":
    main(sys.argv[1])
