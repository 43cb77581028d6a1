"""Exercise ch07-bandwidth: ``bytes_moved(M, N, dtype) = 2 * M * N * bytes_per_element``,
``achieved_gbps(M, N, dtype, ms)``, that over the time in GB/s (10^9 bytes per second), the seeds' figures as the
cases; and ``reads_per_element()``, the learner's prediction of how often the earlier chapters' kernels read each
input element, graded before memcount's table shows it."""
from __future__ import annotations

import math

import numpy as np
import torch

from .._pitfalls import Verdict
from ..common import Report
from ..judging import PCall, PythonJudge, expect_equal


# The cases, read by the notebook check and by the grader's judge alike (the judge adds fresh ones).
# (what, M, N, dtype, ms): the seeds' measured figures (the write-up's naive and final kernels, the book's Triton
# kernel), one made-up bf16 time, and one element.
BANDWIDTH_CASES = [
    ("attention 4x32x512x512 fp16, naive kernel", 4 * 32 * 512, 512, torch.float16, 2.34),
    ("attention 4x32x512x512 fp16, final kernel", 4 * 32 * 512, 512, torch.float16, 0.62),
    ("book 4096x1024 fp32, Triton kernel", 4096, 1024, torch.float32, 0.038361),
    ("4096x1024 bf16", 4096, 1024, torch.bfloat16, 0.02),
    ("one fp32 element", 1, 1, torch.float32, 1.0),
]


# The prediction, graded before the chapter's memcount table shows it: how many times each of the earlier chapters'
# kernels loads every input element (8 x 100 fp32; split_row in 2 chunks). tests/checks/test_ch07.py counts them
# again with memcount, so the table cannot drift from the kernels.
READS_PER_ELEMENT = {"row_serial": 3, "three_pass": 2, "fused": 1, "split_row": 2}
KERNEL_DESIGN = {"row_serial": "one thread walks the row once per step of the softmax, chapter 4",
                 "three_pass": "three kernels, one per step, chapter 4",
                 "fused": "one program holds the row in registers, chapter 4",
                 "split_row": "programs share one row and combine partial (max, sum) pairs, chapter 5"}


def fresh_cases(rng: np.random.Generator) -> list[tuple]:
    """One random (what, M, N, dtype, ms) per dtype, from the grader's seed."""
    cases = []
    for dtype in (torch.float16, torch.float32, torch.bfloat16):
        M, N = int(rng.integers(1, 100000)), int(rng.integers(1, 5000))
        cases.append((f"{M}x{N}", M, N, dtype, float(np.round(rng.uniform(0.01, 5.0), 4))))
    return cases


def _bytes_rule(M: int, N: int, dtype) -> int:
    return 2 * M * N * torch.tensor([], dtype=dtype).element_size()


def _bytes_problem(bytes_moved, M, N, dtype) -> str:
    want = _bytes_rule(M, N, dtype)
    got = bytes_moved(M, N, dtype)
    if got is None:
        return "bytes_moved returned None"
    if got == want:
        if isinstance(got, bool) or not isinstance(got, (int, np.integer)):
            return f"bytes_moved returned {got!r}, a {type(got).__name__}: a count of bytes is a whole number (an int)"
        return ""
    ratio = got / want
    name = str(dtype).replace("torch.", "")
    if math.isclose(ratio, 0.5):
        also = (" (or each float32 element counted as 2 bytes, half its 4)" if dtype == torch.float32 else "")
        return (f"bytes_moved = {got}, expected {want}: half the traffic, {want - got} bytes short - that is the "
                f"input's reads alone, while every output element is also written to memory{also}")
    if math.isclose(ratio, 1.5):
        return (f"bytes_moved = {got}, expected {want}: that is three passes over the tensor, {got - want} bytes more "
                f"than the least traffic a softmax of {M} x {N} {name} can have")
    if math.isclose(ratio, 2.0) and dtype != torch.float32:
        size = torch.tensor([], dtype=dtype).element_size()
        return (f"bytes_moved = {got}, expected {want}: twice the traffic, as if each {name} element were "
                f"{2 * size} bytes; a {name} element is {size} bytes")
    if math.isclose(ratio, 8.0):
        return f"bytes_moved = {got}, expected {want}: 8 times too many - that is the traffic in bits, not bytes"
    return (f"bytes_moved = {got}, expected {want}: that is not the least traffic a softmax of {M} x {N} "
            f"{str(dtype).replace('torch.', '')} can have")


def _gbps_problem(achieved_gbps, M, N, dtype, ms, bytes_moved=None) -> str:
    want = _bytes_rule(M, N, dtype) / (ms * 1e-3) / 1e9
    got = achieved_gbps(M, N, dtype, ms)
    if got is None:
        return "achieved_gbps returned None"
    got = float(got)
    if math.isclose(got, want, rel_tol=1e-6):
        return ""
    ratio = got / want
    if math.isclose(ratio, 1e9 / 2 ** 30, rel_tol=1e-6):
        return (f"got {got:.4g}, expected {want:.4g} GB/s: off by a factor of {1 / ratio:.4f}, the gap between two "
                "meanings of 'GB'; yours is not the one a data sheet quotes, so the figure cannot be set beside it")
    if math.isclose(ratio, 1e3, rel_tol=1e-6) or math.isclose(ratio, 1e-3, rel_tol=1e-6):
        return (f"got {got:.4g}, expected {want:.4g} GB/s: off by a factor of 1000 - the time's unit does not match "
                "the 'per second' of the rate")
    if math.isclose(ratio, 0.5, rel_tol=1e-6):
        also = " (or each float32 element counted as 2 bytes, half its 4)" if dtype == torch.float32 else ""
        return (f"got {got:.4g}, expected {want:.4g} GB/s: half the real rate, {want - got:.4g} GB/s too low - the "
                f"bytes it divides are the input's reads alone, {_bytes_rule(M, N, dtype) // 2} of the "
                f"{_bytes_rule(M, N, dtype)} the kernel moves{also}")
    wrong_bytes = _wrong_bytes(bytes_moved, M, N, dtype)
    if wrong_bytes is not None:
        if math.isclose(ratio, wrong_bytes / _bytes_rule(M, N, dtype), rel_tol=1e-6):
            return (f"got {got:.4g}, expected {want:.4g} GB/s: the rate follows from bytes_moved's {wrong_bytes} "
                    f"bytes for this case, not the {_bytes_rule(M, N, dtype)} the kernel moves (the bytes-moved "
                    "line above says why), so it is wrong by the same factor")
        return (f"got {got:.4g}, expected {want:.4g} GB/s: off by a factor of {1 / ratio:.4g}, and bytes_moved's "
                f"count for this case is wrong too ({wrong_bytes} bytes, see above)")
    return f"got {got:.4g}, expected {want:.4g} GB/s: the units of bytes, time and GB do not work out"


def _wrong_bytes(bytes_moved, M, N, dtype):
    """bytes_moved's count for the case when it is a number and not the right one, else None."""
    if bytes_moved is None:
        return None
    try:
        got = bytes_moved(M, N, dtype)
    except Exception:  # its own line above reports the error
        return None
    if isinstance(got, bool) or not isinstance(got, (int, float, np.integer, np.floating)) or got == 0:
        return None
    return None if got == _bytes_rule(M, N, dtype) else got


def _reads_problem(reads_per_element) -> str:
    got = reads_per_element()
    if not isinstance(got, dict):
        return f"reads_per_element returned {got!r}, not a dict of kernel name -> reads of each input element"
    missing = [k for k in READS_PER_ELEMENT if k not in got]
    if missing:
        return f"no prediction for {', '.join(missing)}"
    wrong = [f"{k} ({KERNEL_DESIGN[k]}): you predicted {got[k]!r}" for k, want in READS_PER_ELEMENT.items()
             if got[k] != want]
    if wrong:
        return "memcount's table below counts otherwise for " + "; ".join(wrong)
    return ""


def check_bandwidth(bytes_moved, achieved_gbps, reads_per_element) -> Verdict:
    """Exercise ch07-bandwidth: ``bytes_moved(M, N, dtype)``, ``achieved_gbps(M, N, dtype, ms)`` and the
    prediction ``reads_per_element()``."""
    report = Report("ch07-bandwidth")
    seen = set()
    for what, M, N, dtype, _ms in BANDWIDTH_CASES:
        if (M, N, dtype) not in seen:
            seen.add((M, N, dtype))
            report.run(f"bytes moved: {what.split(',')[0]}",
                       lambda M=M, N=N, dt=dtype: _bytes_problem(bytes_moved, M, N, dt))
    for what, M, N, dtype, ms in BANDWIDTH_CASES:
        report.run(f"GB/s: {what}, {ms:g} ms",
                   lambda M=M, N=N, dt=dtype, ms=ms: _gbps_problem(achieved_gbps, M, N, dt, ms, bytes_moved))
    report.run("predicted reads of each input element: row_serial, three_pass, fused, split_row",
               lambda: _reads_problem(reads_per_element))
    return Verdict(report.show())


def _expect_int(want: int):
    def problem(value) -> str:
        if isinstance(value, bool) or not isinstance(value, int):
            return f"got {value!r}: a count of bytes is an int"
        return expect_equal(want)(value)
    return problem


def _bandwidth_calls(rng):
    """The grader's calls: every named case and one fresh case per dtype from its seed."""
    calls = []
    for _, M, N, dtype, ms in BANDWIDTH_CASES + fresh_cases(rng):
        name, want = str(dtype).removeprefix("torch."), _bytes_rule(M, N, dtype)
        calls.append(PCall(f"bytes_moved({M}, {N}, {name})", "bytes_moved", [M, N, {"dtype": name}],
                           _expect_int(want)))
        calls.append(PCall(f"achieved_gbps({M}, {N}, {name}, {ms:g})", "achieved_gbps",
                           [M, N, {"dtype": name}, ms], expect_equal(want / (ms * 1e-3) / 1e9)))
    calls.append(PCall("reads_per_element()", "reads_per_element", [], _expect_reads))
    return calls


def _expect_reads(value) -> str:
    if not isinstance(value, dict):
        return f"got {value!r}: expected a dict, kernel name -> reads of each input element"
    wrong = [k for k, want in READS_PER_ELEMENT.items() if value.get(k) != want]
    return f"wrong prediction for {', '.join(wrong)}" if wrong else ""


JUDGES = {"ch07-bandwidth": PythonJudge(_bandwidth_calls)}
