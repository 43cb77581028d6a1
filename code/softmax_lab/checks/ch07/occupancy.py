"""Exercise ch07-occupancy: ``programs_per_sm(n_regs, num_warps, shared_bytes)``, how many programs of a kernel fit
one SM (registers, threads, shared memory, the block limit), as the official tutorial sizes its persistent grid."""
from __future__ import annotations

import numpy as np

from .._pitfalls import Verdict
from ..common import Report
from ..judging import PCall, PythonJudge, expect_equal
from ._hardware import BLOCKS_PER_SM, REGS_PER_SM, SHARED_PER_PROGRAM, SHARED_PER_SM, THREADS_PER_SM, WARPS
from ._kernels import _not_written


def occupancy_rule(n_regs: int, num_warps: int, shared_bytes: int = 0) -> int:
    if shared_bytes > SHARED_PER_PROGRAM:  # the kernel cannot launch at all
        return 0
    threads = 32 * num_warps
    fits = [REGS_PER_SM // (n_regs * threads), THREADS_PER_SM // threads, BLOCKS_PER_SM]
    if shared_bytes:
        fits.append(SHARED_PER_SM // shared_bytes)
    return max(0, min(fits))


# The cases, read by the notebook check and by the grader's judge alike: (n_regs, num_warps, shared bytes) where
# each limit decides in turn, and fresh ones in the judge.
# (16, 4, 58368): 57 KiB a program, where 228 KiB counted as 228,000 bytes gives 3; (32, 4, 233000): more than one
# program may use, so none runs.
OCCUPANCY_CASES = [(22, 4, 0), (64, 32, 0), (16, 1, 0), (40, 8, 0), (22, 4, 65536), (128, 4, 0), (255, 8, 0),
                   (32, 2, 1024), (24, 4, 100000), (16, 4, 58368), (32, 4, 233000)]
JUDGE_FRESH = 6  # fresh cases in every grader run, besides all the named ones


def fresh_case(rng: np.random.Generator) -> tuple[int, int, int]:
    """One random (n_regs, num_warps, shared bytes), from the grader's seed."""
    r, w = int(rng.integers(16, 256)), int(rng.choice(WARPS))
    return r, w, int(rng.choice([0, 0, int(rng.integers(256, 120000)), int(rng.integers(228000, 240000))]))


def _occupancy_problem(programs_per_sm, n_regs, warps, shared) -> str:
    want = occupancy_rule(n_regs, warps, shared)
    got = programs_per_sm(n_regs, warps, shared)
    if isinstance(got, float) and got.is_integer():
        got = int(got)
    if got == want:
        return ""
    threads = 32 * warps
    by = {"registers": REGS_PER_SM // (n_regs * threads), "threads": THREADS_PER_SM // threads,
          "block limit": BLOCKS_PER_SM, "shared memory": SHARED_PER_SM // shared if shared else 10**9}
    if not isinstance(got, int) or isinstance(got, bool):
        return f"got {got!r}: a number of programs is a whole number (an int), and a part of a program does not run"
    limit = min(by, key=by.get)
    ran_out = {"threads": "the SM's threads run out", "block limit": "the SM's slots for resident programs run out",
               "shared memory": "the SM's shared memory runs out", "registers": "the SM's registers run out"}[limit]
    per_warp = REGS_PER_SM // (n_regs * warps)  # the register limit with a warp taken as one thread
    others = [v for k, v in by.items() if k != "registers"]
    if shared <= SHARED_PER_PROGRAM and got in (per_warp, min(per_warp, BLOCKS_PER_SM), min([per_warp] + others)):
        also = "" if got == per_warp else f" (or it left the registers out: {got} is where another limit stops it)"
        then = "" if limit == "registers" else f"; here {ran_out} first, and your count did not stop there either"
        return (f"got {got}, expected {want}: your count applied the register limit to a warp's registers as if a "
                f"warp were one thread{also} - a program of {warps} warp{'s' if warps > 1 else ''} holds "
                f"{n_regs * threads:,} registers, {n_regs} for each of its {threads} threads, 32 times the "
                f"{n_regs * warps:,} your count charged it{then}")
    if shared > SHARED_PER_PROGRAM:
        return (f"got {got}, expected {want}: {shared:,} bytes is more shared memory than one program may have, so "
                "this kernel cannot launch at all")
    if shared and got == 228000 // shared and want == SHARED_PER_SM // shared:
        return (f"got {got}, expected {want}: your count gave the SM 228,000 bytes of shared memory, its 228 KiB "
                f"taken as thousands of bytes - {SHARED_PER_SM - 228000:,} bytes fewer than it has, and here that "
                f"leaves out {want - got} program{'s' if want - got > 1 else ''} of {shared:,} bytes")
    return f"got {got}, expected {want}: here {ran_out} first, and your count did not stop there"


def check_occupancy(programs_per_sm) -> Verdict:
    """Exercise ch07-occupancy: ``programs_per_sm(n_regs, num_warps, shared_bytes)`` on the H200's limits."""
    report = Report("ch07-occupancy")
    if _not_written(report, "programs_per_sm", lambda: programs_per_sm(22, 4, 0)):
        return Verdict(report.show())
    for n_regs, warps, shared in OCCUPANCY_CASES:
        report.run(f"{n_regs} registers, {warps} warp{'s' if warps > 1 else ''}, {shared} bytes of shared memory",
                   lambda r=n_regs, w=warps, s=shared: _occupancy_problem(programs_per_sm, r, w, s))
    return Verdict(report.show())


def _occupancy_calls(rng):
    """The grader's calls: every named case and JUDGE_FRESH fresh ones from its seed."""
    cases = OCCUPANCY_CASES + [fresh_case(rng) for _ in range(JUDGE_FRESH)]
    return [PCall(f"programs_per_sm({r}, {w}, {shared})", "programs_per_sm", [r, w, shared],
                  expect_equal(occupancy_rule(r, w, shared))) for r, w, shared in cases]


JUDGES = {"ch07-occupancy": PythonJudge(_occupancy_calls)}
