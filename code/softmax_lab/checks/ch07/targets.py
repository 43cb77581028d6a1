"""Exercise ch07-targets: the knobs of two performance targets, judged on the H200's recorded runs.

One decision per target (``target_problem``), read by the notebook check and the grader's judge alike:

1. a knob set the H200 ran (``softmax_lab/data/ch07_targets_h200.json``, shipped with the package): its
   recorded % of copy decides;
2. any other knob set: the proxy's rules (legal knobs, no spill, enough loads in flight per SM),
   calibrated so that they fail every recorded run below its target and keep every one above it
   (``tests/checks/test_ch07_targets.py`` checks them against every H200 record of these shapes);
3. a knob set that no run recorded and no rule fails is marked "graded on a GPU": the proxy passes it, and a GPU
   times it.

The notebook check also runs the learner's kernels with the chosen knobs under ``memcount`` (one read and one
write per element, the programs asked for), and on a GPU times both with ``softmax_lab.measure``.
"""
from __future__ import annotations

import json
from functools import lru_cache
from pathlib import Path

import torch
import triton

from ...device import DEVICE, ON_GPU
from .._pitfalls import Verdict, explain, quiet, random_rows
from ..common import Report, explain_exception
from ..judging import PCall, PythonJudge
from ._hardware import REG_OVERHEAD, THREADS_PER_SM, WARPS
from ._kernels import _counted, _programs_problem, _traffic_problem
from .occupancy import occupancy_rule
from .warps import spill_rule, values_rule

RECORD = Path(__file__).resolve().parents[2] / "data" / "ch07_targets_h200.json"
H200_SMS = 132

# (key, kernel, shape, dtype, % of copy to reach on a GPU, the knobs target_knobs() gives for it)
TARGETS = [("multirow", "multi-row kernel", (65536, 128), torch.float32, 90.0, ("ROWS", "num_warps")),
           ("persistent", "persistent kernel", (32768, 1024), torch.float32, 80.0,
            ("programs_per_sm", "num_warps", "num_stages"))]

# Bytes each SM must have loading at once to hide the memory's latency (Little's law: bandwidth x latency,
# shared by the SMs). Calibrated on the record: every run with less missed its target, every run with this much
# or more reached it.
IN_FLIGHT_PER_SM = 32 * 1024


@lru_cache(maxsize=1)
def recorded_runs() -> tuple[dict, ...]:
    """The H200 runs of these two targets' knob sets (kernel, shape, knobs, pct_copy); () if the file is absent."""
    try:
        return tuple(json.loads(RECORD.read_text(encoding="utf-8"))["records"])
    except (OSError, ValueError, KeyError):
        return ()


def recorded_pct(key: str, knobs: dict) -> float | None:
    """The H200's recorded % of copy for this target's knob set, or None when no run recorded it."""
    for r in recorded_runs():
        if r.get("kernel") == key and all(r.get(k) == v for k, v in knobs.items()):
            return float(r["pct_copy"])
    return None


def knobs_of(target_knobs, key: str, names: tuple) -> dict:
    """The knobs of one target, checked: a dict of ints with exactly these keys (ValueError otherwise)."""
    knobs = target_knobs.get(key) if isinstance(target_knobs, dict) else None
    if not isinstance(knobs, dict) or set(knobs) != set(names):
        raise ValueError(f"target_knobs()[{key!r}] must be a dict with the keys {', '.join(names)}")
    for k, v in knobs.items():
        if not isinstance(v, int) or isinstance(v, bool):
            raise ValueError(f"target_knobs()[{key!r}][{k!r}] must be an int, got {v!r}")
    return dict(knobs)


def _power_of_two(v: int) -> bool:
    return v >= 1 and not v & (v - 1)


def illegal(key: str, knobs: dict) -> str:
    """'' when the kernel can be launched with these knobs at all, else why not."""
    if key == "multirow" and (not _power_of_two(knobs["ROWS"]) or knobs["num_warps"] not in WARPS):
        return "ROWS must be a power of two and num_warps one of 1, 2, 4, 8, 16"
    if key == "persistent" and (knobs["num_warps"] not in WARPS or not 1 <= knobs["num_stages"] <= 4):
        return "num_warps must be one of 1, 2, 4, 8, 16 and num_stages 1 to 4"
    return ""


def _multirow_rules(rows: int, warps: int) -> str:
    """Target 1's proxy rules: '' or what goes wrong on the H200 with these (legal) knobs."""
    M, N = TARGETS[0][2]
    block = triton.next_power_of_2(N)
    tile = rows * block
    values = values_rule(tile, warps)
    if spill_rule(tile, warps):
        return (f"a {rows}x{block} tile over {warps} warps is {values} values per thread: ch07-warps' model says "
                "it spills registers")
    programs = triton.cdiv(M, rows)  # at this shape every tile that does not spill leaves no SM idle
    resident = min(occupancy_rule(values + REG_OVERHEAD, warps), triton.cdiv(programs, H200_SMS))
    in_flight = resident * tile * 4
    if in_flight < IN_FLIGHT_PER_SM:
        return (f"{resident} programs per SM x a {tile * 4:,}-byte tile = {in_flight // 1024} KiB of loads in "
                f"flight per SM, under the {IN_FLIGHT_PER_SM // 1024} KiB that hide the memory's latency: the "
                "SMs wait on memory between tiles")
    return ""


def _persistent_rules(per_sm: int, warps: int, stages: int) -> str:
    """Target 2's proxy rules: '' or what goes wrong on the H200 with these (legal) knobs."""
    N = TARGETS[1][2][1]
    fit = occupancy_rule(values_rule(N, warps) + REG_OVERHEAD, warps)
    if not 1 <= per_sm <= fit:
        return (f"{per_sm} programs of {32 * warps} threads per SM: only {fit} such programs fit one SM "
                f"({THREADS_PER_SM} threads), the others wait for a free slot")
    rows = per_sm * max(1, stages - 1)  # num_stages = s keeps s - 1 rows loading ahead of the one computed
    in_flight = rows * N * 4
    if in_flight < IN_FLIGHT_PER_SM:
        return (f"{per_sm} programs per SM with num_stages = {stages} keep {rows} row{'s' if rows > 1 else ''} "
                f"of {N * 4:,} bytes loading = {in_flight // 1024} KiB in flight per SM, under the "
                f"{IN_FLIGHT_PER_SM // 1024} KiB that hide the memory's latency: the SMs wait on memory")
    return ""


def rules_problem(key: str, knobs: dict) -> str:
    """The proxy's rules alone (what decides a knob set no H200 run recorded)."""
    if illegal(key, knobs):
        return illegal(key, knobs)
    if key == "multirow":
        return _multirow_rules(knobs["ROWS"], knobs["num_warps"])
    return _persistent_rules(knobs["programs_per_sm"], knobs["num_warps"], knobs["num_stages"])


def decide(key: str, knobs: dict) -> tuple[str, str]:
    """(how this knob set is judged, '' or its problem): the H200's record where it has the knob set, else the
    proxy's rules, and a knob set they pass is marked as graded on a GPU."""
    target = next(t for t in TARGETS if t[0] == key)[4]
    pct = recorded_pct(key, knobs)
    if pct is not None and not illegal(key, knobs):
        how = f"recorded on the H200 at {pct:.0f}% of copy"
        return how, "" if pct >= target else f"{pct:.0f}% is below the target of {target:.0f}%"
    problem = rules_problem(key, knobs)
    if problem:
        return "not recorded on the H200: the proxy's rules", problem
    return "not recorded on the H200: the proxy's rules pass it, graded on a GPU", ""


def target_problem(target_knobs, key: str) -> str:
    """'' when ``target_knobs()``'s knobs for ``key`` reach the target (record or rules), else what is wrong."""
    names = next(t for t in TARGETS if t[0] == key)[5]
    try:
        knobs = knobs_of(target_knobs, key, names)
    except ValueError as err:
        return str(err)
    return decide(key, knobs)[1]


def _target_name(i: int, key: str, knobs: dict | None) -> str:
    _, what, (M, N), _, target, _ = TARGETS[i - 1]
    how = decide(key, knobs)[0] if knobs is not None else "knobs unreadable"
    return f"target {i}: {what} at {M}x{N} fp32, >= {target:.0f}% of copy ({how})"


def _memcount_problem(key: str, knobs: dict, launch) -> str:
    """The learner's kernel with these knobs on a small input of the target's row length: the programs asked
    for, one read and one write per element, the right values."""
    if key == "multirow":
        rows, warps = knobs["ROWS"], knobs["num_warps"]
        x = random_rows((2 * rows + 1, TARGETS[0][2][1]), 780).to(DEVICE)  # three programs of the same shape
        c, out = _counted(launch, x, ROWS=rows, num_warps=warps)
        return (_programs_problem(c, 3, f"cdiv({2 * rows + 1}, {rows})") or _traffic_problem(c, x.numel())
                or explain(out, x))
    x = random_rows((7, TARGETS[1][2][1]), 781).to(DEVICE)  # rows of the target's length, 3 programs
    c, out = _counted(launch, x, n_programs=3, num_warps=knobs["num_warps"], num_stages=knobs["num_stages"])
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
    Every machine prints the same lines: each target's knobs on the H200's record (or the proxy's rules), and
    the learner's kernel with them under memcount. On a GPU each kernel is also timed with
    ``softmax_lab.measure``; a missed target adds a FAIL line (the cell after the check prints the timings)."""
    report = Report("ch07-targets")
    if callable(target_knobs):
        try:
            target_knobs = target_knobs()
        except Exception as err:
            report.add("target_knobs()", explain_exception(err))
            return Verdict(report.show())
    launches = {"multirow": my_multirow_softmax, "persistent": my_persistent_softmax}
    for i, (key, what, (M, N), dtype, target, names) in enumerate(TARGETS, start=1):
        try:
            knobs = knobs_of(target_knobs, key, names)
        except ValueError as err:
            report.add(_target_name(i, key, None), str(err))
            continue
        report.run(_target_name(i, key, knobs), lambda k=key, kn=knobs: decide(k, kn)[1])
        legal = not illegal(key, knobs)
        if legal:
            report.run(f"target {i}: your {what} with these knobs under memcount (programs, one read and one "
                       "write per element, values)", lambda k=key, kn=knobs: _memcount_problem(k, kn, launches[k]))
        if ON_GPU and legal:
            problem = ""
            try:
                problem = _timed_problem(key, launches[key], target_knobs, (M, N), dtype, target)
            except Exception as err:
                problem = explain_exception(err)
            if problem:
                report.add(f"target {i} timed on this GPU (softmax_lab.measure)", problem)
    return Verdict(report.show())


def _targets_calls(rng):
    """The grader's calls: target_knobs() once per target, each judged like the notebook's first line."""
    calls = []
    for i, (key, what, (M, N), _, target, _) in enumerate(TARGETS, start=1):
        calls.append(PCall(f"target {i}: {what} at {M}x{N} fp32, >= {target:.0f}% of copy (H200 record, or the "
                           "proxy's rules)", "target_knobs", [], expect=lambda v, k=key: target_problem(v, k)))
    return calls


JUDGES = {"ch07-targets": PythonJudge(_targets_calls)}
