"""Exercise ch07-warps: the counts behind ``BLOCK``/``num_warps`` (values per thread, one knob at a time), and a
spill prediction checked against what the H200 compiler really did."""
from __future__ import annotations

import numpy as np
import triton

from .._pitfalls import Verdict
from ..common import Report
from ..judging import PCall, PythonJudge, expect_equal
from ._hardware import MAX_REGS_PER_THREAD, REGS_PER_SM, REG_OVERHEAD, WARPS
from ._kernels import NOT_IMPLEMENTED


# The fused kernel compiled on the H200 (benchmarks/records/h200-cuda-layer.md):
# (BLOCK, num_warps, values/thread, n_regs, spills)
H200_REGISTERS = [(1024, 4, 8, 22, 0), (2048, 8, 8, 22, 0), (4096, 8, 16, 34, 0), (8192, 16, 16, 38, 0),
                  (16384, 16, 32, 57, 0), (32768, 32, 32, 53, 0), (65536, 32, 64, 64, 48)]


# The cases, read by the notebook check and by the grader's judge alike (the judge adds fresh ones).
# (BLOCK, num_warps); the last one is a block smaller than the program (64 values, 128 threads)
VALUES_CASES = [(1024, 4), (2048, 8), (1024, 16), (4096, 2), (65536, 32), (128, 4), (32, 1), (64, 4)]
SWEEP_COLS = [1000, 128, 4097]                                  # row lengths for one_knob_sweeps
SPILL_CASES = [(65536, 16), (4096, 1), (8192, 1), (1024, 32)]    # spills by the model, beyond the recorded ones
JUDGE_FRESH = 4  # fresh (BLOCK, num_warps) settings and one fresh row length in every grader run


def fresh_case(rng: np.random.Generator) -> tuple[int, int]:
    """One random (BLOCK, num_warps), from the grader's seed."""
    return int(2 ** rng.integers(4, 17)), int(rng.choice(WARPS + (32,)))


def values_rule(block: int, num_warps: int) -> int:
    return max(1, block // (32 * num_warps))


def spill_rule(block: int, num_warps: int) -> bool:
    cap = min(MAX_REGS_PER_THREAD, REGS_PER_SM // (32 * num_warps))
    return values_rule(block, num_warps) + REG_OVERHEAD > cap


def _values_problem(values_per_thread, block, warps) -> str:
    want, got = values_rule(block, warps), values_per_thread(block, warps)
    if got == want:
        return ""
    if got == block // warps:
        return f"got {got}: a warp is 32 threads, so a program has 32 * num_warps threads to share the BLOCK values"
    if got == 0 or (isinstance(got, float) and got < 1):
        return (f"got {got}: with more threads than values ({32 * warps} threads, BLOCK = {block}) every thread "
                "still holds 1 value (Triton repeats the small block across the threads)")
    return f"got {got!r}, expected {want}"


def _sweeps_problem(one_knob_sweeps, n_cols) -> str:
    block = triton.next_power_of_2(n_cols)
    got = one_knob_sweeps(n_cols)
    try:
        warps_sweep, block_sweep = [list(map(tuple, s)) for s in got]
    except (TypeError, ValueError):
        return "return two lists of (BLOCK, num_warps) pairs: (the num_warps sweep, the BLOCK sweep)"
    if len({b for b, _ in warps_sweep}) != 1 or len({w for _, w in warps_sweep}) < 2:
        return "the first sweep must keep BLOCK fixed and change num_warps only (one knob at a time)"
    if len({w for _, w in block_sweep}) != 1 or len({b for b, _ in block_sweep}) < 2:
        return "the second sweep must keep num_warps fixed and change BLOCK only (one knob at a time)"
    if warps_sweep != [(block, w) for w in WARPS]:
        return f"num_warps sweep: expected BLOCK = {block} (next_power_of_2({n_cols})) with num_warps 1, 2, 4, 8, 16"
    if block_sweep != [(block * k, 4) for k in (1, 2, 4)]:
        return f"BLOCK sweep: expected num_warps = 4 with BLOCK = {block}, {2 * block}, {4 * block}"
    return ""


def _spill_problem(predict_spill, block, warps, record=None) -> str:
    want = spill_rule(block, warps) if record is None else record > 0
    got = predict_spill(block, warps)
    if not isinstance(got, (bool, np.bool_)):
        return f"predict_spill returned {got!r}, not True or False"
    if bool(got) == want:
        return ""
    need = values_rule(block, warps) + REG_OVERHEAD
    cap = min(MAX_REGS_PER_THREAD, REGS_PER_SM // (32 * warps))
    if not want and got:
        return f"predicted a spill, but {need} registers fit under the cap of {cap} per thread"
    if cap < MAX_REGS_PER_THREAD:
        return (f"predicted no spill, but it spills: with {warps} warps a thread cannot get even {need} registers, "
                "though that is under 255 - the per-thread maximum is not the limit that binds here")
    return f"predicted no spill, but about {need} registers are needed and a thread may use at most 255"


def check_warps(values_per_thread, one_knob_sweeps, predict_spill) -> Verdict:
    """Exercise ch07-warps: the counts behind BLOCK and num_warps, and a spill prediction checked against the
    registers the H200 compiler really gave the fused kernel."""
    report = Report("ch07-warps")
    try:
        values_per_thread(1024, 4)
    except NotImplementedError:
        report.add("values_per_thread", NOT_IMPLEMENTED)
        return Verdict(report.show())
    except Exception:
        pass
    for block, warps in VALUES_CASES:
        report.run(f"values per thread, BLOCK = {block}, num_warps = {warps}",
                   lambda b=block, w=warps: _values_problem(values_per_thread, b, w))
    for n in SWEEP_COLS:
        report.run(f"one knob at a time, rows of {n}", lambda n=n: _sweeps_problem(one_knob_sweeps, n))
    report.run("spill predicted as the H200 compiler did, on the 7 recorded settings "
               "(benchmarks/records/h200-cuda-layer.md)",
               lambda: next((f"BLOCK = {b}, num_warps = {w}: " + p for b, w, _, _, s in H200_REGISTERS
                             if (p := _spill_problem(predict_spill, b, w, s))), ""))
    for block, warps in SPILL_CASES:
        report.run(f"spill predicted by the model, BLOCK = {block}, num_warps = {warps}",
                   lambda b=block, w=warps: _spill_problem(predict_spill, b, w))
    return Verdict(report.show())


def _expect_sweeps(n_cols):
    block = triton.next_power_of_2(n_cols)
    want = [[[block, w] for w in WARPS], [[block * k, 4] for k in (1, 2, 4)]]

    def problem(value) -> str:
        return "" if value == want else f"expected {want}"
    return problem


def _expect_bool(want: bool):
    return lambda value: "" if value is want else f"got {value!r}, expected {want}"


def _warps_calls(rng):
    """The grader's calls: every named case and fresh ones from its seed."""
    fresh = [fresh_case(rng) for _ in range(JUDGE_FRESH)]
    calls = [PCall(f"values_per_thread({b}, {w})", "values_per_thread", [b, w], expect_equal(values_rule(b, w)))
             for b, w in VALUES_CASES + fresh]
    calls += [PCall(f"predict_spill({b}, {w})", "predict_spill", [b, w], _expect_bool(spills > 0))
              for b, w, _, _, spills in H200_REGISTERS]
    calls += [PCall(f"predict_spill({b}, {w})", "predict_spill", [b, w], _expect_bool(spill_rule(b, w)))
              for b, w in SPILL_CASES + fresh]
    calls += [PCall(f"one_knob_sweeps({n})", "one_knob_sweeps", [n], _expect_sweeps(n))
              for n in SWEEP_COLS + [int(rng.integers(2, 9000))]]
    return calls


JUDGES = {"ch07-warps": PythonJudge(_warps_calls)}
