"""Checks for chapter 7, performance: bandwidth arithmetic and choosing rows per program.

Both exercises are plain Python, so the checks are exact and need no GPU:

* ``check_bandwidth(bytes_moved, achieved_gbps)``: a softmax reads every element once and writes it once, so
  ``bytes_moved(M, N, dtype) = 2 * M * N * bytes_per_element`` and ``achieved_gbps(M, N, dtype, ms)`` is that
  over the time, in GB/s (10^9 bytes per second). The seed figures are the test cases.
* ``check_choose_rows(choose_rows)``: ``choose_rows(M, N, n_sms)`` picks rows per program for short rows
  (the rule is in the chapter and in ``rows_rule`` below).
"""
from __future__ import annotations

import math

import torch
import triton

from ._pitfalls import Verdict
from .common import Report

__all__ = ["check_bandwidth", "check_choose_rows"]

MAX_TILE = 4096  # elements per program (as kernels.multirow.TILE): bigger [ROWS, BLOCK] tiles spill registers
PROGRAMS_PER_SM = 4  # keep at least this many programs per SM, so every SM has work and can hide latency


def rows_rule(M: int, N: int, n_sms: int) -> int:
    """The chapter's rule: the largest power of two ROWS with ROWS * next_power_of_2(N) <= MAX_TILE and
    cdiv(M, ROWS) >= PROGRAMS_PER_SM * n_sms; 1 when even ROWS = 2 breaks either condition."""
    block = triton.next_power_of_2(N)
    rows = 1
    while rows * 2 * block <= MAX_TILE and triton.cdiv(M, rows * 2) >= PROGRAMS_PER_SM * n_sms:
        rows *= 2
    return rows


# ------------------------------------------------------------------------------------------------ bandwidth

# (what, M, N, dtype, ms): the seeds' measured figures (the write-up's naive and final kernels, the book's Triton
# kernel), one made-up bf16 time, and one element.
BANDWIDTH_CASES = [
    ("attention 4x32x512x512 fp16, naive kernel", 4 * 32 * 512, 512, torch.float16, 2.34),
    ("attention 4x32x512x512 fp16, final kernel", 4 * 32 * 512, 512, torch.float16, 0.62),
    ("book 4096x1024 fp32, Triton kernel", 4096, 1024, torch.float32, 0.038361),
    ("4096x1024 bf16", 4096, 1024, torch.bfloat16, 0.02),
    ("one fp32 element", 1, 1, torch.float32, 1.0),
]


def _bytes_problem(bytes_moved, M, N, dtype) -> str:
    want = 2 * M * N * torch.tensor([], dtype=dtype).element_size()
    got = bytes_moved(M, N, dtype)
    if got is None:
        return "bytes_moved returned None"
    if got == want:
        return ""
    ratio = got / want
    if math.isclose(ratio, 0.5):
        also = (" (or you took 2 bytes per element: a float32 element is 4 bytes, x.element_size())"
                if dtype == torch.float32 else "")
        return (f"bytes_moved = {got}, expected {want}: you counted only the reads - each element is also written "
                f"once{also}")
    if math.isclose(ratio, 1.5):
        return (f"bytes_moved = {got}, expected {want}: that is three passes over the tensor; the minimum is one "
                "read and one write per element")
    if math.isclose(ratio, 2.0) and dtype != torch.float32:
        size = torch.tensor([], dtype=dtype).element_size()
        return (f"bytes_moved = {got}, expected {want}: a {str(dtype).replace('torch.', '')} element is {size} "
                "bytes (x.element_size())")
    if math.isclose(ratio, 8.0):
        return f"bytes_moved = {got}, expected {want}: that is bits; count bytes"
    return f"bytes_moved = {got}, expected {want} = 2 * M * N * bytes per element (read once, write once)"


def _gbps_problem(achieved_gbps, M, N, dtype, ms) -> str:
    want = 2 * M * N * torch.tensor([], dtype=dtype).element_size() / (ms * 1e-3) / 1e9
    got = achieved_gbps(M, N, dtype, ms)
    if got is None:
        return "achieved_gbps returned None"
    got = float(got)
    if math.isclose(got, want, rel_tol=1e-6):
        return ""
    ratio = got / want
    if math.isclose(ratio, 1e9 / 2 ** 30, rel_tol=1e-6):
        return f"got {got:.4g}, expected {want:.4g} GB/s: GB/s means 10^9 bytes per second, not 2^30 (GiB)"
    if math.isclose(ratio, 1e3, rel_tol=1e-6) or math.isclose(ratio, 1e-3, rel_tol=1e-6):
        return f"got {got:.4g}, expected {want:.4g} GB/s: the time is in milliseconds (1 ms = 1e-3 s)"
    if math.isclose(ratio, 0.5, rel_tol=1e-6):
        return f"got {got:.4g}, expected {want:.4g} GB/s: count the bytes written as well as the bytes read"
    return f"got {got:.4g}, expected {want:.4g} GB/s = bytes_moved / seconds / 1e9"


def check_bandwidth(bytes_moved, achieved_gbps) -> Verdict:
    """Exercise ch07-bandwidth: ``bytes_moved(M, N, dtype)`` and ``achieved_gbps(M, N, dtype, ms)``."""
    report = Report("ch07-bandwidth")
    seen = set()
    for what, M, N, dtype, ms in BANDWIDTH_CASES:
        if (M, N, dtype) not in seen:
            seen.add((M, N, dtype))
            report.run(f"bytes moved: {what.split(',')[0]}",
                       lambda M=M, N=N, dt=dtype: _bytes_problem(bytes_moved, M, N, dt))
    for what, M, N, dtype, ms in BANDWIDTH_CASES:
        report.run(f"GB/s: {what}, {ms:g} ms", lambda M=M, N=N, dt=dtype, ms=ms: _gbps_problem(achieved_gbps, M, N, dt, ms))
    return Verdict(report.show())


# --------------------------------------------------------------------------------------------- rows per program

# (M, N, n_sms): short rows on an H200 (132 SMs), the edges of the rule, and a small GPU.
ROWS_CASES = [
    (65536, 128, 132),   # many short rows: the tile cap decides
    (65536, 512, 132),   # the 4x32x512x512 attention rows
    (2048, 256, 132),    # the grid decides
    (1000, 1000, 132),   # ROWS = 2 would leave too few programs
    (1055, 64, 132),     # cdiv, not floor: 1055 rows in pairs is 528 programs
    (1024, 65536, 132),  # one row is already bigger than a tile
    (32, 16, 132),       # too few rows to fill the GPU at all
    (100000, 100, 20),   # a small GPU
]


def _rows_problem(choose_rows, M, N, n_sms) -> str:
    want = rows_rule(M, N, n_sms)
    got = choose_rows(M, N, n_sms)
    if got is None:
        return "choose_rows returned None"
    if not isinstance(got, int) or isinstance(got, bool):
        if isinstance(got, float) and got.is_integer():
            got = int(got)
        else:
            return f"choose_rows returned {got!r}; ROWS must be an int (it becomes a tl.constexpr)"
    if got == want:
        return ""
    block = triton.next_power_of_2(N)
    if got < 1 or got & (got - 1):
        return f"ROWS = {got}: tl.arange needs a power of two (expected {want})"
    if got * block > MAX_TILE and got > 1:
        return (f"ROWS = {got}: a {got}x{block} tile holds {got * block} values, more than {MAX_TILE} - it would "
                f"spill registers (expected {want})")
    programs = triton.cdiv(M, got)
    if programs < PROGRAMS_PER_SM * n_sms and got > 1:
        return (f"ROWS = {got}: only {programs} program{'s' if programs != 1 else ''} for {n_sms} SMs (fewer than {PROGRAMS_PER_SM} per SM) - "
                f"some SMs sit idle (expected {want})")
    if got < want:
        if triton.cdiv(M, want) >= PROGRAMS_PER_SM * n_sms > M // want:
            return (f"ROWS = {got}, expected {want}: count programs with cdiv(M, ROWS) - the last program takes "
                    "the leftover rows")
        return (f"ROWS = {got}, expected {want}: ROWS = {want} still keeps {triton.cdiv(M, want)} programs "
                f"(>= {PROGRAMS_PER_SM} per SM) and a tile of {want * block} values - take the largest")
    return f"ROWS = {got}, expected {want}"


def check_choose_rows(choose_rows) -> Verdict:
    """Exercise ch07-rows: ``choose_rows(M, N, n_sms)`` follows the chapter's rule."""
    report = Report("ch07-rows")
    for M, N, n_sms in ROWS_CASES:
        report.run(f"{M} rows of {N}, {n_sms} SMs", lambda M=M, N=N, s=n_sms: _rows_problem(choose_rows, M, N, s))
    return Verdict(report.show())


# ------------------------------------------------------------------------------- what the grader launches

def _bandwidth_calls(rng):
    from .judging import PCall, expect_equal

    calls = []
    for dtype, size in (("float16", 2), ("float32", 4), ("bfloat16", 2)):
        M, N = int(rng.integers(1, 100000)), int(rng.integers(1, 5000))
        ms = float(np.round(rng.uniform(0.01, 5.0), 4))
        want = 2 * M * N * size
        calls.append(PCall(f"bytes_moved({M}, {N}, {dtype})", "bytes_moved", [M, N, {"dtype": dtype}],
                           expect_equal(want)))
        calls.append(PCall(f"achieved_gbps({M}, {N}, {dtype}, {ms})", "achieved_gbps",
                           [M, N, {"dtype": dtype}, ms], expect_equal(want / (ms * 1e-3) / 1e9)))
    return calls


def _rows_calls(rng):
    from .judging import PCall, expect_equal

    calls = []
    for _ in range(8):
        M, N, sms = int(rng.integers(1, 200000)), int(rng.integers(1, 70000)), int(rng.integers(8, 160))
        calls.append(PCall(f"choose_rows({M}, {N}, {sms})", "choose_rows", [M, N, sms],
                           expect_equal(rows_rule(M, N, sms))))
    for M, N, sms in ((65536, 128, 132), (1055, 64, 132)):
        calls.append(PCall(f"choose_rows({M}, {N}, {sms})", "choose_rows", [M, N, sms],
                           expect_equal(rows_rule(M, N, sms))))
    return calls


def _judges():
    from .judging import PythonJudge

    return {"ch07-bandwidth": PythonJudge(_bandwidth_calls), "ch07-rows": PythonJudge(_rows_calls)}


import numpy as np  # noqa: E402

JUDGES = _judges()
