"""Exercise ch09-profile: read Nsight Compute reports. Four functions of a kernel's metrics (``softmax_lab.profiles``
gives their form): ``dram_bound(k)``, ``traffic_ratio(report)``, ``reread_from_l2(k)``, ``waits_on_memory(k)``.

The cases are the kernels profiled on the H200 plus made-up kernels from a seeded generator (the grader's judge
draws fresh ones), so an answer copied from the recorded table fails: the functions must read the metrics.
"""
from __future__ import annotations

import math

import numpy as np

from ... import profiles
from .._pitfalls import Verdict
from ..common import Report
from ..judging import PCall, PythonJudge

THREE_PASS = ("row_max", "exp_sum", "normalize")
STALLS = ("long_scoreboard", "barrier", "short_scoreboard", "lg_throttle", "mio_throttle", "not_selected", "wait",
          "math_pipe_throttle")


# ------------------------------------------------------------------------------------------- the rules


def _dram_bound(k: dict) -> bool:
    return k["dram_pct"] >= 60


def _traffic_ratio(report: dict) -> float:
    moved = {name: k["dram_read_bytes"] + k["dram_write_bytes"] for name, k in report.items()}
    return sum(moved[n] for n in THREE_PASS) / moved["fused"]


def _reread_from_l2(k: dict) -> float:
    return 1 - (k["dram_read_bytes"] - k["input_bytes"]) / k["input_bytes"]


def _waits_on_memory(k: dict) -> bool:
    return max(k["stalls"], key=k["stalls"].get) == "long_scoreboard"


# ------------------------------------------------------------------------------------------- the cases


def made_up_kernel(rng: np.random.Generator, shape: tuple[int, int], writes: bool = True,
                   rereads: bool = False) -> dict:
    """A kernel's metrics with random values: DRAM-bound or not, waiting on memory or not, with decoys (L2 hits,
    SM throughput, occupancy) that do not follow."""
    size = shape[0] * shape[1] * 4
    dram = float(rng.choice([rng.uniform(5, 50), rng.uniform(70, 95)]))
    stalls = {str(r): round(float(rng.uniform(0.5, 30)), 2) for r in rng.choice(STALLS, 4, replace=False)}
    return {"shape": list(shape), "input_bytes": size, "grid": shape[0], "block": 256, "registers": 32,
            "duration_us": round(float(rng.uniform(5, 500)), 1), "dram_pct": round(dram, 2),
            "dram_read_bytes": float(size * (rng.uniform(1.0, 2.0) if rereads else rng.uniform(0.99, 1.01))),
            "dram_write_bytes": float(size * rng.uniform(0.85, 1.0) if writes else shape[0] * 4),
            "l2_hit_pct": round(float(rng.uniform(1, 99)), 2), "sm_pct": round(float(rng.uniform(5, 99)), 2),
            "occupancy_pct": round(float(rng.uniform(20, 99)), 2), "stalls": stalls}


def made_up_report(rng: np.random.Generator) -> dict:
    """A report of the same six kernels on one made-up shape (the row max writes one value per row)."""
    shape = (int(rng.choice([1024, 2048, 4096, 8192])), int(rng.choice([1024, 4096, 8192])))
    return {name: made_up_kernel(rng, shape, writes=name != "row_max", rereads=name == "online")
            for name in (*THREE_PASS, "fused", "online", "naive")}


def cases(rng: np.random.Generator) -> list[tuple[str, str, object, object]]:
    """(case name, function, its argument, the right answer): the recorded H200 kernels, then one made-up report."""
    out = []
    for where, report in (("H200", profiles.report()), ("made-up", made_up_report(rng))):
        if not report:
            continue
        for name, k in report.items():
            out.append((f"{where} {name}: DRAM-bound?", "dram_bound", k, _dram_bound(k)))
            out.append((f"{where} {name}: waits on memory?", "waits_on_memory", k, _waits_on_memory(k)))
        out.append((f"{where}: three kernels' DRAM bytes / fused's", "traffic_ratio", report, _traffic_ratio(report)))
        out.append((f"{where} online: share of read 2 from L2", "reread_from_l2", report["online"],
                    _reread_from_l2(report["online"])))
    return out


CASE_SEED = 7  # the notebook's made-up report (the judge draws its own)


# ------------------------------------------------------------------------------------------- what went wrong


def _problem(fn: str, arg, want, got) -> str:
    if fn in ("dram_bound", "waits_on_memory"):
        if not isinstance(got, (bool, np.bool_)):
            return f"{fn} returned {got!r}, not True or False"
        if bool(got) == want:
            return ""
        if fn == "dram_bound":
            return (f"said {bool(got)} for a kernel at {arg['dram_pct']:.0f}% of DRAM's peak: the column your answer "
                    "follows does not measure how busy the memory was")
        top = max(arg["stalls"], key=arg["stalls"].get)
        return (f"said {bool(got)}: this kernel's largest stall is {top} ({arg['stalls'][top]:.1f} cycles); which of "
                "the stall reasons is a warp waiting for a global load?")
    if not isinstance(got, (int, float)) or isinstance(got, bool) or not math.isfinite(got):
        return f"{fn} returned {got!r}, not a number"
    if math.isclose(got, want, rel_tol=0.01, abs_tol=0.005):
        return ""
    if fn == "traffic_ratio":
        def mb(key: str, names) -> str:
            return f"{sum(arg[n][key] for n in names) / 1e6:.1f} MB"

        def ratio(key: str) -> float:
            return sum(arg[n][key] for n in THREE_PASS) / arg["fused"][key]

        off = f"so it is {abs(got - want):.2f} too {'high' if got > want else 'low'}"
        wrote = (f"leaves out what the kernels wrote to DRAM ({mb('dram_write_bytes', THREE_PASS)} against "
                 f"{mb('dram_write_bytes', ['fused'])}), {off}")
        if math.isclose(got, ratio("input_bytes"), rel_tol=0.01):  # 3: the input's bytes, or DRAM reads, or kernels
            return (f"got {got:.2f}, the report's byte counts give {want:.2f}: your ratio is what the input's bytes "
                    f"alone give, one pass over the input per kernel (the three kernels read "
                    f"{mb('dram_read_bytes', THREE_PASS)} from DRAM against fused's "
                    f"{mb('dram_read_bytes', ['fused'])}), and it {wrote}")
        if math.isclose(got, ratio("dram_read_bytes"), rel_tol=0.01):
            return (f"got {got:.2f}, the report's byte counts give {want:.2f}: your ratio compares the bytes read "
                    f"from DRAM alone ({mb('dram_read_bytes', THREE_PASS)} against "
                    f"{mb('dram_read_bytes', ['fused'])}) and {wrote}")
        if math.isclose(got, ratio("dram_write_bytes"), rel_tol=0.01):
            return (f"got {got:.2f}, the report's byte counts give {want:.2f}: your ratio compares the bytes written "
                    f"to DRAM alone ({mb('dram_write_bytes', THREE_PASS)} against "
                    f"{mb('dram_write_bytes', ['fused'])}); it leaves out what the kernels read from DRAM "
                    f"({mb('dram_read_bytes', THREE_PASS)} against {mb('dram_read_bytes', ['fused'])}), {off}")
        if math.isclose(got, 1 / want, rel_tol=0.01):
            return (f"got {got:.2f}, the report's byte counts give {want:.2f}: upside down - the three kernels move "
                    "more, not less")
        return f"got {got:.3g}, the report's byte counts give {want:.3g}"
    if math.isclose(got, 1 - want, rel_tol=0.01, abs_tol=0.005):
        return f"got {got:.2f}: that is the share of the second read that came from DRAM, not from L2"
    if math.isclose(got, 100 * want, rel_tol=0.01):
        return f"got {got:.3g}: that reads as a percentage; the share is a fraction between 0 and 1"
    if math.isclose(got, arg["l2_hit_pct"] / 100, rel_tol=0.01):
        return (f"got {got:.3g}, the kernel's L2 hit rate: it counts every request of the kernel (the first read and "
                "the stores too), not the second read alone")
    return f"got {got:.3g}, the report's byte counts give {want:.3g}"


def check_profile(dram_bound, traffic_ratio, reread_from_l2, waits_on_memory) -> Verdict:
    """Exercise ch09-profile: the four readings of a profile, on the H200's kernels and a made-up report."""
    report = Report("ch09-profile")
    fns = {"dram_bound": dram_bound, "traffic_ratio": traffic_ratio, "reread_from_l2": reread_from_l2,
           "waits_on_memory": waits_on_memory}
    for name, fn, arg, want in cases(np.random.default_rng(CASE_SEED)):
        report.run(name, lambda fn=fn, arg=arg, want=want: _problem(fn, arg, want, fns[fn](arg)))
    return Verdict(report.show())


def _calls(rng):
    return [PCall(name, fn, [arg], lambda got, fn=fn, arg=arg, want=want: _problem(fn, arg, want, got))
            for name, fn, arg, want in cases(rng)]


JUDGES = {"ch09-profile": PythonJudge(_calls)}
