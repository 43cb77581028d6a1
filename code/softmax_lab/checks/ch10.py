"""Checks for chapter 10, long rows: ``ch10-schedule``, will a launch of cooperating programs finish? and
``ch10-cluster-size``, how many programs of a cluster should share one row?

``cluster_size(n_cols, element_size, per_sm, max_parts)`` is the shared-memory arithmetic of the clustered kernel:
the smallest power-of-two cluster (at most ``max_parts`` programs) whose programs each hold their slice of the row
(rounded up) within one program's 227 KiB, ``per_sm`` of them within one SM's 228 KiB; None when none does.
``my_cluster(n_cols, element_size)`` is the learner's choice of ``per_sm`` and ``max_parts``, judged on the H200's
sweep of the clustered kernel (``CLUSTER_RUNS``): within ``CLOSE_TO_BEST`` points of copy speed of the fastest
setting measured for each recorded row. The grader's judge adds fresh rows for both.

``finishes(resident, n_chunks, start_order, tickets)`` plays the GPU's scheduler: it starts programs in
``start_order`` while fewer than ``resident`` run, each program's work item is its ``program_id`` (or, with
``tickets``, the number of programs started before it), item ``w`` is chunk ``w % n_chunks`` of row
``w // n_chunks``, and a program finishes once every chunk of its row has been taken by a started program. The
cases are small launches that finish or hang; the grader's judge draws fresh ones.
"""
from __future__ import annotations

import numpy as np

from ._pitfalls import Verdict
from .common import Report
from .judging import PCall, PythonJudge

__all__ = ["check_schedule", "SCHEDULE_CASES", "finishes_rule", "check_cluster_size", "CLUSTER_CASES", "CLUSTER_RUNS",
           "cluster_rule"]

# (what, resident, n_chunks, start_order, tickets)
SCHEDULE_CASES = [
    ("2 rows of 2 chunks, room for 2, started in program order, by program_id", 2, 2, [0, 1, 2, 3], False),
    ("room for 2, started 0, 2, 1, 3, by program_id", 2, 2, [0, 2, 1, 3], False),
    ("room for 2, started 0, 2, 1, 3, with tickets", 2, 2, [0, 2, 1, 3], True),
    ("room for 1, rows of 2 chunks, with tickets", 1, 2, [0, 1], True),
    ("room for 3, 3 rows of 2, started last to first, by program_id", 3, 2, [5, 4, 3, 2, 1, 0], False),
    ("room for 3, 2 rows of 3, started 0, 3, 1, 4, 2, 5, by program_id", 3, 3, [0, 3, 1, 4, 2, 5], False),
    ("room for 3, 2 rows of 3, started 0, 3, 1, 4, 2, 5, with tickets", 3, 3, [0, 3, 1, 4, 2, 5], True),
    ("room for 1, rows of 1 chunk (no partners), started 2, 0, 1", 1, 1, [2, 0, 1], False),
    ("room for 4, 2 rows of 4, started 4, 0, 5, 1, 6, 2, 7, 3, by program_id", 4, 4, [4, 0, 5, 1, 6, 2, 7, 3], False),
]


def run_schedule(resident: int, n_chunks: int, start_order: list[int], tickets: bool) -> tuple[bool, str]:
    """(whether every program finishes, the state it stops in when it does not)."""
    queue, running, started = list(start_order), [], 0
    taken: dict[int, int] = {}  # row -> chunks taken by started programs
    while queue or running:
        while queue and len(running) < resident:
            pid = queue.pop(0)
            row = (started if tickets else pid) // n_chunks
            started += 1
            taken[row] = taken.get(row, 0) + 1
            running.append((pid, row))
        still = [(pid, row) for pid, row in running if taken[row] < n_chunks]
        if len(still) == len(running):
            stuck = ", ".join(f"program {pid} (row {row}, {taken[row]} of {n_chunks} chunks taken)"
                              for pid, row in running)
            return False, (f"after {started} programs started, every running program waits: {stuck}; "
                           f"no room is left for the programs still to start")
        running = still
    return True, ""


def finishes_rule(resident: int, n_chunks: int, start_order: list[int], tickets: bool) -> bool:
    return run_schedule(resident, n_chunks, start_order, tickets)[0]


def _problem(got, resident, n_chunks, order, tickets) -> str:
    if not isinstance(got, (bool, np.bool_)):
        return f"finishes returned {got!r}: return True or False"
    want, stuck = run_schedule(resident, n_chunks, order, tickets)
    if bool(got) == want:
        return ""
    if want:
        how = ("with tickets, the programs that start first take the first row's chunks, whatever their ids"
               if tickets else "every running program's row gets all its chunks taken in time")
        return f"said it hangs, but every program finishes: {how}"
    return f"said it finishes, but it hangs: {stuck}"


def check_schedule(finishes) -> Verdict:
    """Exercise ch10-schedule: ``finishes(resident, n_chunks, start_order, tickets) -> bool``."""
    report = Report("ch10-schedule")
    for what, resident, n_chunks, order, tickets in SCHEDULE_CASES:
        report.run(what, lambda r=resident, g=n_chunks, o=order, t=tickets:
                   _problem(finishes(r, g, list(o), t), r, g, o, t))
    return Verdict(report.show())


def fresh_cases(rng: np.random.Generator, n: int = 20) -> list[tuple]:
    """``n`` random launches from the grader's seed: rows of 2-5 chunks, rooms from one short of a row to one short
    of the launch, start orders at random, one chunk of each row in turn, or row by row in a random row order;
    tickets or not at random. (Six small launches let a rule of thumb through two times in three; twenty of
    these, about one time in 700.)"""
    out = []
    for k in range(n):
        n_chunks, rows = int(rng.integers(2, 6)), int(rng.integers(2, 6))
        total = n_chunks * rows
        resident = int(rng.integers(n_chunks - 1, total))
        if k % 3 == 0:
            order = rng.permutation(total)
        elif k % 3 == 1:  # one chunk of each row in turn
            order = [r * n_chunks + c for c in range(n_chunks) for r in rng.permutation(rows)]
        else:  # row by row, the rows in a random order
            order = [r * n_chunks + c for r in rng.permutation(rows) for c in rng.permutation(n_chunks)]
        out.append((f"fresh launch {k + 1}", resident, n_chunks, [int(p) for p in order], bool(rng.integers(2))))
    return out


def _calls(rng):
    return [PCall(f"{what}: finishes({r}, {g}, {o}, {t})", "finishes", [r, g, o, t],
                  lambda got, r=r, g=g, o=o, t=t: _problem(got, r, g, o, t))
            for what, r, g, o, t in SCHEDULE_CASES + fresh_cases(rng)]


# ------------------------------------------------------------------ ch10-cluster-size: how many programs a row?

SHARED_PER_SM = 228 * 1024  # bytes of shared memory on one H200 SM
SHARED_PER_PROGRAM = 227 * 1024  # the most one program (CTA) may ask for
BIGGEST_CLUSTER = 16  # H100/H200 (non-portable); every Hopper GPU launches 8

# The arithmetic's cases, read by the notebook check and the grader's judge alike: (what, n_cols, element_size,
# per_sm, max_parts). Each sits where one mistake gives another answer (elements for bytes, a slice rounded down,
# a cluster of 3, 1000-byte KiB, the SM's limit for one program's, '<' for '<=', no cap on the cluster, one
# program's limit for the SM's, no cluster of 1, one program an SM); the last two are where a rounded-down slice and a
# 1000-byte KiB alone give their answer, so the check can name them.
CLUSTER_CASES = [
    ("65,536 fp32, one program per SM", 65536, 4, 1, 16),
    ("65,536 fp32, three programs per SM", 65536, 4, 3, 16),
    ("32,768 bf16, three programs per SM", 32768, 2, 3, 16),
    ("32,768 bf16, four programs per SM", 32768, 2, 4, 16),
    ("58,368 fp32 (228 KiB), one program per SM", 58368, 4, 1, 16),
    ("58,112 fp32 (227 KiB), one program per SM", 58112, 4, 1, 16),
    ("57,500 fp32 (230,000 bytes), one program per SM", 57500, 4, 1, 16),
    ("116,225 fp32 (an odd length), one program per SM", 116225, 4, 1, 16),
    ("153,600 fp32 (600 KiB), one program per SM", 153600, 4, 1, 16),
    ("29,120 fp32 (113.75 KiB), two programs per SM", 29120, 4, 2, 16),
    ("131,072 bf16, three programs per SM", 131072, 2, 3, 16),
    ("262,144 fp32, one program per SM, portable clusters (8)", 262144, 4, 1, 8),
    ("262,144 fp32, two programs per SM, portable clusters (8)", 262144, 4, 2, 8),
    ("4,194,304 fp32, one program per SM", 4194304, 4, 1, 16),
    ("1,000 fp32, seven programs per SM", 1000, 4, 7, 16),
    ("38,913 fp32 (an odd length), three programs per SM", 38913, 4, 3, 16),
    ("115,000 fp32 (halves of 230,000 bytes), one program per SM", 115000, 4, 1, 16),
]

# The H200's sweep of the clustered kernel (benchmarks/records/h200-clustered-b.json): (rows, n_cols, dtype,
# element_size, {programs a row: % of copy speed, the best of that cluster size's settings that checked ok}), with
# the resident kernel of the same run as a cluster of 1. tests/checks/test_ch10.py re-reads them from the record.
CLUSTER_RUNS = [
    (1024, 65536, "float32", 4, {2: 80.3, 4: 91.8, 8: 92.2, 16: 82.8}),
    (1024, 65536, "bfloat16", 2, {2: 79.7, 4: 83.8, 8: 80.3, 16: 68.2}),
    (2048, 65536, "bfloat16", 2, {2: 83.7, 4: 85.7, 8: 80.6, 16: 68.3}),
    (4096, 131072, "bfloat16", 2, {2: 98.0, 4: 138.2, 8: 133.6, 16: 122.8}),
    (512, 131072, "float32", 4, {4: 78.3, 8: 89.2, 16: 87.9}),
    (1024, 100000, "float32", 4, {4: 89.9, 8: 86.2, 16: 87.2}),
    (2048, 24000, "bfloat16", 2, {1: 95.7, 2: 83.9, 4: 76.4, 8: 64.3, 16: 41.2}),
    (4096, 20000, "float16", 2, {1: 96.4, 2: 84.6, 4: 73.4, 8: 57.6, 16: 35.5}),
    (2048, 32768, "bfloat16", 2, {1: 93.6, 2: 85.1, 4: 81.4, 8: 70.3, 16: 52.1}),
    (256, 262144, "float32", 4, {8: 76.1, 16: 83.8}),
]
CLOSE_TO_BEST = 5  # points of copy speed: a choice this close to the fastest measured setting is as good (noise)
JUDGE_FRESH_CLUSTERS = 8  # fresh rows in every grader run, for each of the two functions


def cluster_rule(n_cols: int, element_size: int, per_sm: int = 1, max_parts: int = BIGGEST_CLUSTER,
                 kib: int = 1024, block_limit: bool = True, rounded_up: bool = True, powers_of_two: bool = True,
                 at_most: bool = True, sm_limit: int = 0):
    """The smallest cluster whose slices fit (None: none up to ``max_parts``); the keywords after ``max_parts``
    build the named mistakes (a KiB of 1000 bytes, no per-program limit, slices rounded down, any cluster size,
    '<' for '<=', the per-program limit for the SM's)."""
    per_program, per_sm_bytes = 227 * kib, sm_limit or 228 * kib
    parts = 1
    while parts <= max_parts:
        longest = (-(-n_cols // parts) if rounded_up else n_cols // parts) * element_size
        fits = (lambda a, b: a <= b) if at_most else (lambda a, b: a < b)
        if (not block_limit or fits(longest, per_program)) and fits(per_sm * longest, per_sm_bytes):
            return parts
        parts = parts * 2 if powers_of_two else parts + 1
    return None


def _kib(n_bytes: float) -> str:
    return f"{n_bytes / 1024:.1f}".rstrip("0").rstrip(".") + " KiB"


def _returned(got):
    """The learner's value; the grader's sandbox hands a None back as the string '<NoneType>'."""
    return None if isinstance(got, str) and got == "<NoneType>" else got


def _slice_bytes(n_cols: int, element_size: int, parts: int) -> int:
    return -(-n_cols // parts) * element_size  # the longest slice: the row need not split evenly


def cluster_problem(got, n_cols: int, element_size: int, per_sm: int, max_parts: int) -> str:
    """'' when ``got`` is the smallest cluster for this row, else the mistake it looks like and what it causes."""
    want = cluster_rule(n_cols, element_size, per_sm, max_parts)
    got = _returned(got)
    if got is not None and (isinstance(got, bool) or not isinstance(got, (int, np.integer))):
        return f"cluster_size returned {got!r}: a number of programs is an int (or None when no cluster can)"
    got = None if got is None else int(got)
    if got == want:
        return ""
    if got is None:
        return "said no cluster can hold the row, but one of at most max_parts programs does"
    if got < 1 or got & (got - 1):
        return (f"a cluster of {got} programs: the kernel splits the row by the bits of a program's rank in the "
                "cluster, so a cluster has 1, 2, 4, 8 or 16 programs")
    if got > max_parts:
        return (f"a cluster of {got} programs, more than max_parts = {max_parts}: a GPU that launches at most "
                f"{max_parts} programs together refuses that launch")
    longest = _slice_bytes(n_cols, element_size, got)
    if want is None:
        return (f"a cluster of {got}: its slices of {longest:,} bytes do not fit ({per_sm} an SM), and no "
                f"cluster of at most {max_parts} programs can hold this row")
    # a mistake is named only when it alone gives this cluster here; otherwise the message states the limits
    named = [text for text, answer in _cluster_mistakes(n_cols, element_size, per_sm, max_parts, want, got)
             if answer == got]
    if len(named) == 1:
        return f"a cluster of {got}: {named[0]}"
    if got < want:
        over_program = longest > SHARED_PER_PROGRAM
        if over_program and (per_sm == 1 or per_sm * longest <= SHARED_PER_SM):
            broken = f"more than one program may ask for ({SHARED_PER_PROGRAM:,} bytes, 227 KiB)"
        else:
            broken = (f"{per_sm} of them on one SM need {per_sm * longest:,} bytes, more than its {SHARED_PER_SM:,} "
                      f"(228 KiB){', and each is more than one program may ask for' if over_program else ''}")
        return (f"a cluster of {got}: its longest slice is {-(-n_cols // got):,} elements, {longest:,} bytes: "
                f"{broken}, so it does not fit")
    smaller = _slice_bytes(n_cols, element_size, want)
    return (f"a cluster of {got}: a cluster of {want} already fits (slices of {smaller:,} bytes, {per_sm} an SM: at "
            f"most {SHARED_PER_PROGRAM:,} bytes a program and {SHARED_PER_SM:,} an SM), and every program more is "
            "one more partner each waits for at the cluster barrier")


def _cluster_mistakes(n_cols: int, element_size: int, per_sm: int, max_parts: int, want: int, got: int) -> list:
    """(what went wrong, the cluster that mistake gives) for the mistakes the check can name. Two are left out as
    they never give a cluster of their own: '<' for '<=' and one program's limit for the SM's refuse slices only at
    or just below a KiB limit, where a KiB of 1000 bytes refuses them too."""
    rule = cluster_rule
    args = (n_cols, element_size, per_sm, max_parts)
    longest = _slice_bytes(n_cols, element_size, got)
    smaller = _slice_bytes(n_cols, element_size, want)
    return [
        (f"{n_cols:,} elements do not split evenly over {got} programs, so one slice is {-(-n_cols // got):,} "
         f"elements ({longest:,} bytes), one element more than the even share, and that slice does not fit",
         rule(*args, rounded_up=False)),
        (f"its slices of {longest:,} bytes fit the SM's {SHARED_PER_SM:,} bytes, but one program may ask for at most "
         f"{SHARED_PER_PROGRAM:,} (227 KiB), so no program can hold one", rule(*args, block_limit=False)),
        (f"its slices are {-(-n_cols // got):,} elements of {element_size} bytes, {_kib(longest)} each: counted in "
         "elements they fit, but shared memory holds bytes", rule(n_cols, 1, per_sm, max_parts)),
        (f"a KiB is 1024 bytes, not 1000, so the limits are {SHARED_PER_PROGRAM:,} and {SHARED_PER_SM:,} bytes, and "
         f"a cluster of {want} already fits", rule(*args, kib=1000)),
        (f"one program alone holds the row's {smaller:,} bytes{f' ({per_sm} an SM)' if per_sm > 1 else ''}: a "
         "cluster of 1 is a cluster too", 2 if want == 1 else want),
        (f"the {per_sm} programs on one SM each hold a slice, so they need {per_sm * longest:,} bytes of its "
         f"{SHARED_PER_SM:,}", rule(n_cols, element_size, 1, max_parts) if per_sm > 1 else want),
    ]


def fresh_cluster_case(rng: np.random.Generator) -> tuple:
    """One fresh row for ``cluster_size``: a length, 2 or 4 bytes, 1-7 programs an SM, clusters of 8 or 16."""
    size = int(rng.choice([2, 4]))
    n_cols = int(rng.integers(1000, 2_500_000)) // size
    per_sm, max_parts = int(rng.integers(1, 8)), int(rng.choice([8, 16]))
    return (f"fresh row of {n_cols:,} x {size} bytes, {per_sm} an SM, clusters up to {max_parts}", n_cols, size,
            per_sm, max_parts)


def _run_name(rows: int, n_cols: int, dtype: str) -> str:
    return f"recorded on the H200: {rows}x{n_cols} {dtype}"


def run_problem(got, n_cols: int, element_size: int, measured: dict) -> str:
    """'' when ``got`` (the learner's cluster for a recorded row) ran within CLOSE_TO_BEST points of the fastest
    setting measured, else what it ran at."""
    best = max(measured.values())
    got = _returned(got)
    if got is not None and (isinstance(got, bool) or not isinstance(got, (int, np.integer))):
        return f"my_cluster returned {got!r}: a number of programs is an int (or None when no cluster can)"
    if got is None:
        return f"no cluster, but clusters holding this row were measured (the fastest at {best:.0f}% of copy)"
    got = int(got)
    longest = -(-n_cols // got) * element_size
    per_sm = SHARED_PER_SM // longest
    if longest > SHARED_PER_PROGRAM:
        return (f"a cluster of {got} gives each program {_kib(longest)} of the row, more than one program may hold "
                "(227 KiB): that launch cannot run")
    what = f"a cluster of {got} ({_kib(longest)} a program, {per_sm} an SM by shared memory)"
    if got not in measured:
        return (f"{what} was not measured for this row: the sweep's settings ran at up to {best:.0f}% of copy")
    if measured[got] < best - CLOSE_TO_BEST:
        return (f"{what} ran at {measured[got]:.0f}% of copy, {best - measured[got]:.0f} points below the fastest "
                f"setting measured for this row ({best:.0f}%)")
    return ""


def _accepted(n_cols: int, element_size: int) -> set:
    """The clusters of the targets (programs an SM, biggest cluster) that every recorded row supports."""
    return {cluster_rule(n_cols, element_size, per_sm, max_parts) for per_sm, max_parts in supported_targets()}


def supported_targets() -> list[tuple[int, int]]:
    """(programs an SM, biggest cluster) whose clusters ran within CLOSE_TO_BEST of the fastest on every row of
    CLUSTER_RUNS."""
    return [(per_sm, max_parts) for max_parts in (8, 16) for per_sm in range(1, 9)
            if all(not run_problem(cluster_rule(n, size, per_sm, max_parts), n, size, measured)
                   for _, n, _, size, measured in CLUSTER_RUNS)]


def fresh_run_problem(got, n_cols: int, element_size: int) -> str:
    """A fresh row for ``my_cluster``: its answer must be the cluster of a target the recorded runs support."""
    ok = _accepted(n_cols, element_size)
    got = _returned(got)
    if got in ok and not isinstance(got, bool):
        return ""
    return (f"a cluster of {got}: the rule that held on the recorded rows (one programs-a-SM target, one biggest "
            "cluster) gives another cluster for this row, so my_cluster is not one rule for every row")


def _dtype_name(size: int) -> str:
    return "fp32" if size == 4 else "16-bit"


def check_cluster_size(cluster_size, my_cluster) -> Verdict:
    """Exercise ch10-cluster-size: ``cluster_size(n_cols, element_size, per_sm, max_parts) -> int | None`` on
    CLUSTER_CASES, and ``my_cluster(n_cols, element_size)`` on the H200's recorded rows."""
    report = Report("ch10-cluster-size")
    for what, n_cols, size, per_sm, max_parts in CLUSTER_CASES:
        report.run(what, lambda n=n_cols, b=size, k=per_sm, m=max_parts:
                   cluster_problem(cluster_size(n, b, k, m), n, b, k, m))
    for rows, n_cols, dtype, size, measured in CLUSTER_RUNS:
        report.run(_run_name(rows, n_cols, dtype), lambda n=n_cols, b=size, m=measured:
                   run_problem(my_cluster(n, b), n, b, m))
    return Verdict(report.show())


def _cluster_calls(rng: np.random.Generator) -> list:
    cases = CLUSTER_CASES + [fresh_cluster_case(rng) for _ in range(JUDGE_FRESH_CLUSTERS)]
    calls = [PCall(what, "cluster_size", [n, b, k, m], lambda got, n=n, b=b, k=k, m=m: cluster_problem(got, n, b, k, m))
             for what, n, b, k, m in cases]
    calls += [PCall(_run_name(rows, n, dtype), "my_cluster", [n, b], lambda got, n=n, b=b, m=measured:
                    run_problem(got, n, b, m)) for rows, n, dtype, b, measured in CLUSTER_RUNS]
    for _ in range(JUDGE_FRESH_CLUSTERS):
        size = int(rng.choice([2, 4]))
        n = int(rng.integers(40_000, 2_000_000)) // size
        calls.append(PCall(f"my_cluster on a fresh row of {n:,} {_dtype_name(size)}", "my_cluster", [n, size],
                           lambda got, n=n, b=size: fresh_run_problem(got, n, b)))
    return calls


JUDGES = {"ch10-schedule": PythonJudge(_calls), "ch10-cluster-size": PythonJudge(_cluster_calls)}
