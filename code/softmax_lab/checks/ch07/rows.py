"""Exercise ch07-rows: ``choose_rows(M, N, n_sms)`` picks rows per program for short rows by the chapter's rule
(``rows_rule``); besides the named shapes, fresh random shapes every run, so a table of answers fails."""
from __future__ import annotations

import numpy as np
import triton

from ...dispatch import MULTIROW_TILE as MAX_TILE  # elements per program: bigger [ROWS, BLOCK] tiles spill registers
from .._pitfalls import Verdict
from ..common import Report
from ..judging import PCall, PythonJudge, expect_equal


PROGRAMS_PER_SM = 4  # keep at least this many programs per SM, so every SM has work and can hide latency


def rows_rule(M: int, N: int, n_sms: int) -> int:
    """The chapter's rule: the largest power of two ROWS with ROWS * next_power_of_2(N) <= MAX_TILE and
    cdiv(M, ROWS) >= PROGRAMS_PER_SM * n_sms; 1 when even ROWS = 2 breaks either condition."""
    block = triton.next_power_of_2(N)
    rows = 1
    while rows * 2 * block <= MAX_TILE and triton.cdiv(M, rows * 2) >= PROGRAMS_PER_SM * n_sms:
        rows *= 2
    return rows


# The cases, read by the notebook check and by the grader's judge alike: the named boundary cases and fresh ones.
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
FRESH_SHAPES = 24  # fresh shapes in every notebook check (one verdict line for all of them)
JUDGE_FRESH = 8    # fresh shapes in every grader run, besides all the named ones


def fresh_case(rng: np.random.Generator) -> tuple[int, int, int]:
    """One random (M, N, n_sms): drawn from a new generator every notebook run, from the grader's seed in the judge."""
    return int(rng.integers(1, 300000)), int(2 ** rng.uniform(0, 16)), int(rng.integers(8, 160))


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
        return (f"ROWS = {got}: only {programs} program{'s' if programs != 1 else ''} for {n_sms} SMs "
                f"(fewer than {PROGRAMS_PER_SM} per SM) - "
                f"some SMs sit idle (expected {want})")
    if got < want:
        if triton.cdiv(M, want) >= PROGRAMS_PER_SM * n_sms > M // want:
            return (f"ROWS = {got}, expected {want}: ROWS = {want} launches {triton.cdiv(M, want)} programs, the "
                    "last one taking the leftover rows - your count of programs left that one out")
        return (f"ROWS = {got}, expected {want}: ROWS = {want} still keeps {triton.cdiv(M, want)} programs "
                f"(>= {PROGRAMS_PER_SM} per SM) and a tile of {want * block} values - fewer rows per program than both "
                "facts allow")
    return f"ROWS = {got}, expected {want}"


def check_choose_rows(choose_rows) -> Verdict:
    """Exercise ch07-rows: ``choose_rows(M, N, n_sms)`` follows the chapter's rule."""
    report = Report("ch07-rows")
    for M, N, n_sms in ROWS_CASES:
        report.run(f"{M} rows of {N}, {n_sms} SMs", lambda M=M, N=N, s=n_sms: _rows_problem(choose_rows, M, N, s))
    report.run(f"{FRESH_SHAPES} fresh random shapes (new ones every run)", lambda: _fresh_rows(choose_rows))
    return Verdict(report.show())


def _fresh_rows(choose_rows) -> str:
    """The rule on shapes drawn now (not a fixed list): a table of the named cases' answers fails here."""
    rng = np.random.default_rng()
    for _ in range(FRESH_SHAPES):
        M, N, sms = fresh_case(rng)
        problem = _rows_problem(choose_rows, M, N, sms)
        if problem:
            return f"{M} rows of {N}, {sms} SMs: {problem}"
    return ""


def _rows_calls(rng):
    """The grader's calls: every named case and JUDGE_FRESH fresh ones from its seed."""
    shapes = ROWS_CASES + [fresh_case(rng) for _ in range(JUDGE_FRESH)]
    return [PCall(f"choose_rows({M}, {N}, {sms})", "choose_rows", [M, N, sms], expect_equal(rows_rule(M, N, sms)))
            for M, N, sms in shapes]


JUDGES = {"ch07-rows": PythonJudge(_rows_calls)}
