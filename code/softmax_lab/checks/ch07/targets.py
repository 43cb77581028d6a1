"""Exercise ch07-targets: the knobs of two performance targets. Every machine prints the same lines (the proxy:
legal knobs, programs per SM, ``memcount`` traffic); on a GPU both kernels are also timed with
``softmax_lab.measure`` and a missed target adds a FAIL line (no timing is printed)."""
from __future__ import annotations

import torch
import triton

from ...device import DEVICE, ON_GPU
from .._pitfalls import Verdict, explain, quiet, random_rows
from ..common import Report, explain_exception
from ._hardware import THREADS_PER_SM, WARPS
from ._kernels import _counted, _programs_problem, _traffic_problem
from .rows import MAX_TILE, PROGRAMS_PER_SM
from .warps import values_rule


H200_SMS = 132


# (key, kernel, shape, dtype, % of copy to reach on a GPU)
TARGETS = [("multirow", "multi-row kernel", (65536, 128), torch.float32, 90.0),
           ("persistent", "persistent kernel", (32768, 1024), torch.float32, 80.0)]


MIN_THREADS_PER_SM = THREADS_PER_SM // 2  # the persistent proxy: its programs keep at least half an SM's threads


def _knobs(target_knobs, key, names):
    knobs = target_knobs.get(key) if isinstance(target_knobs, dict) else None
    if not isinstance(knobs, dict) or set(knobs) != set(names):
        raise ValueError(f"target_knobs()[{key!r}] must be a dict with the keys {', '.join(names)}")
    for k, v in knobs.items():
        if not isinstance(v, int) or isinstance(v, bool):
            raise ValueError(f"target_knobs()[{key!r}][{k!r}] must be an int, got {v!r}")
    return knobs


def _power_of_two(v: int) -> bool:
    return v >= 1 and not v & (v - 1)


def _multirow_proxy(target_knobs, launch) -> str:
    k = _knobs(target_knobs, "multirow", ("ROWS", "num_warps"))
    rows, warps = k["ROWS"], k["num_warps"]
    M, N = TARGETS[0][2]
    block = triton.next_power_of_2(N)
    if not _power_of_two(rows) or warps not in WARPS:
        return "ROWS must be a power of two and num_warps one of 1, 2, 4, 8, 16"
    if rows * block > MAX_TILE:
        return f"a {rows}x{block} tile holds {rows * block} values, more than {MAX_TILE}: it spills registers"
    if triton.cdiv(M, rows) < PROGRAMS_PER_SM * H200_SMS:
        return (f"{triton.cdiv(M, rows)} programs for {H200_SMS} SMs: fewer than {PROGRAMS_PER_SM} per SM, "
                "some SMs sit idle")
    if values_rule(rows * block, warps) > 64:
        return f"{values_rule(rows * block, warps)} values per thread: too few threads for the tile"
    x = random_rows((2 * rows + 1, N), 780).to(DEVICE)  # the same program shape, three programs
    c, out = _counted(launch, x, ROWS=rows, num_warps=warps)
    return (_programs_problem(c, 3, f"cdiv({2 * rows + 1}, {rows})") or _traffic_problem(c, x.numel())
            or explain(out, x))


def _persistent_proxy(target_knobs, launch) -> str:
    k = _knobs(target_knobs, "persistent", ("programs_per_sm", "num_warps", "num_stages"))
    per_sm, warps, stages = k["programs_per_sm"], k["num_warps"], k["num_stages"]
    if warps not in WARPS or not 1 <= stages <= 4:
        return "num_warps must be one of 1, 2, 4, 8, 16 and num_stages 1 to 4"
    if not 1 <= per_sm <= THREADS_PER_SM // (32 * warps):
        return (f"{per_sm} programs of {32 * warps} threads per SM: an SM holds at most {THREADS_PER_SM} threads "
                f"({THREADS_PER_SM // (32 * warps)} such programs)")
    if per_sm * 32 * warps < MIN_THREADS_PER_SM:
        return (f"{per_sm} programs of {32 * warps} threads per SM keep only {per_sm * 32 * warps} of its "
                f"{THREADS_PER_SM} threads busy (fewer than {MIN_THREADS_PER_SM}): too few loads in flight to hide "
                "the memory's latency - ask programs_per_sm how many of your kernel fit")
    x = random_rows((7, TARGETS[1][2][1]), 781).to(DEVICE)  # rows of the target's length, 3 programs
    c, out = _counted(launch, x, n_programs=3, num_warps=warps, num_stages=stages)
    return (_programs_problem(c, 3, "3 programs asked for") or _traffic_problem(c, x.numel())
            or explain(out, x))


def _timed_problem(key, launch, target_knobs, shape, dtype, target) -> str:
    """GPU only: the learner's kernel timed with softmax_lab.measure against the copy of the same bytes."""
    from ...measure import measure

    if key == "multirow":
        k = target_knobs["multirow"]
        fn = lambda x: launch(x, torch.empty_like(x), ROWS=k["ROWS"], num_warps=k["num_warps"])
    else:
        k = target_knobs["persistent"]
        sms = torch.cuda.get_device_properties(0).multi_processor_count
        fn = lambda x: launch(x, torch.empty_like(x), n_programs=sms * k["programs_per_sm"],
                              num_warps=k["num_warps"], num_stages=k["num_stages"])
    with quiet():
        r = measure(fn, lambda: torch.randn(*shape, device=DEVICE, dtype=dtype), name=key)
    if not r.ok:
        return r.problem
    if r.pct_of_copy < target:
        return f"timed at {r.pct_of_copy:.0f}% of copy on this GPU, below the target of {target:.0f}%"
    return ""


def check_targets(target_knobs, my_multirow_softmax, my_persistent_softmax) -> Verdict:
    """Exercise ch07-targets: ``target_knobs()`` (or the dict it returns) gives the knobs of the two targets.
    Every machine prints the same lines: the memcount proxy of each target (knobs,
    programs per SM, one read and one write per element). On a GPU each kernel is also timed with
    ``softmax_lab.measure``; a missed target adds a FAIL line (the cell after the check prints the timings)."""
    report = Report("ch07-targets")
    if callable(target_knobs):
        try:
            target_knobs = target_knobs()
        except Exception as err:
            report.add("target_knobs()", explain_exception(err))
            return Verdict(report.show())
    launches = {"multirow": my_multirow_softmax, "persistent": my_persistent_softmax}
    proxies = {"multirow": _multirow_proxy, "persistent": _persistent_proxy}
    for i, (key, what, (M, N), dtype, target) in enumerate(TARGETS, start=1):
        ok = report.run(f"target {i}: {what} at {M}x{N} fp32, >= {target:.0f}% of copy on a GPU - proxy "
                        "(knobs, programs per SM, memcount traffic), the same on every machine",
                        lambda k=key: proxies[k](target_knobs, launches[k]))
        if ok and ON_GPU:
            problem = ""
            try:
                problem = _timed_problem(key, launches[key], target_knobs, (M, N), dtype, target)
            except Exception as err:
                problem = explain_exception(err)
            if problem:
                report.add(f"target {i} timed on this GPU (softmax_lab.measure)", problem)
    return Verdict(report.show())
