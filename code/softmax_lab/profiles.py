"""Nsight Compute reports of the course's kernels, recorded on an H200 and shown the same way on any machine.

``softmax_lab/data/profiles_h200.json`` is made from ``benchmarks/records/h200-profiles.json`` (the raw
``ncu --csv`` rows, recorded by ``benchmarks/profile_kernels.py``) by ``python -m softmax_lab.profiles
condense``. ``report()`` gives one dict of plain numbers per kernel; ``show()`` prints them as a table.
Nothing here runs a kernel.
"""
from __future__ import annotations

import json
import sys
from pathlib import Path

DATA = Path(__file__).resolve().parent / "data" / "profiles_h200.json"
STALL = "smsp__average_warps_issue_stalled_"
KERNELS = {  # the report's kernel names, by the case that launched them
    ("three_pass", "row_max_kernel"): "row_max", ("three_pass", "exp_sum_kernel"): "exp_sum",
    ("three_pass", "normalize_kernel"): "normalize", ("fused", "fused_softmax_kernel"): "fused",
    ("online", "online_softmax_kernel"): "online", ("naive", "naive_softmax_kernel"): "naive",
}
# one kernel's metrics: (our name, ncu's name)
METRICS = [("grid", "Grid Size"), ("block", "Block Size"), ("registers", "Registers Per Thread"),
           ("duration_us", "gpu__time_duration.sum"), ("dram_pct", "DRAM Throughput"),
           ("dram_read_bytes", "dram__bytes_read.sum"), ("dram_write_bytes", "dram__bytes_write.sum"),
           ("l2_hit_pct", "lts__t_sector_hit_rate.pct"), ("sm_pct", "Compute (SM) Throughput"),
           ("occupancy_pct", "Achieved Occupancy")]


def condense(raw: dict) -> dict:
    """The recorded ncu rows -> {meta, kernels: {name: {metric: number, stalls: {reason: cycles}}}, naive_timings}."""
    kernels = {}
    for case, prof in raw["profiles"].items():
        for key, rows in prof.get("kernels", {}).items():
            name = KERNELS.get((case, key.split(" ", 1)[1]))
            if name is None:
                continue
            k = {"input_bytes": prof["shape"][0] * prof["shape"][1] * 4, "shape": prof["shape"]}
            for ours, theirs in METRICS:
                value, unit = rows[theirs]
                k[ours] = value / 1000 if ours == "duration_us" and unit == "ns" else value
            stalls = {m.removeprefix(STALL).removesuffix("_per_issue_active.ratio"): v for m, (v, _) in rows.items()
                      if m.startswith(STALL) and "not_issued" not in m}
            k["stalls"] = dict(sorted(stalls.items(), key=lambda kv: -kv[1])[:6])
            kernels[name] = k
    return {"meta": raw["meta"], "kernels": kernels, "naive_timings": raw.get("naive_timings", [])}


def load() -> dict | None:
    try:
        return json.loads(DATA.read_text())
    except (OSError, ValueError):
        return None


def report() -> dict:
    """{kernel name: its metrics} from the recorded H200 run (empty when the data file is missing)."""
    rec = load()
    return rec["kernels"] if rec else {}


def label() -> str:
    rec = load()
    if not rec:
        return "no H200 profile is recorded (benchmarks/profile_kernels.py makes one)"
    m = rec["meta"]
    return (f"recorded on {m['device']} with Nsight Compute ({m['ncu']}), torch {m['torch']}, triton {m['triton']}, "
            f"{m['date_utc']} UTC")


def show(kernels: dict | None = None) -> None:
    """One line per kernel: launch, time, DRAM, L2, SMs, occupancy; then each kernel's largest stall reasons."""
    kernels = report() if kernels is None else kernels
    print(f"{'kernel':10s} {'shape':>10s} {'grid':>8s} {'block':>5s} {'regs':>4s} {'µs':>7s} {'DRAM %':>6s} "
          f"{'read MB':>8s} {'write MB':>8s} {'L2 hit %':>8s} {'SM %':>5s} {'occup %':>7s}")
    for name, k in kernels.items():
        shape = "x".join(str(s) for s in k["shape"])
        print(f"{name:10s} {shape:>10s} {k['grid']:8.0f} {k['block']:5.0f} {k['registers']:4.0f} "
              f"{k['duration_us']:7.1f} {k['dram_pct']:6.1f} {k['dram_read_bytes'] / 1e6:8.1f} "
              f"{k['dram_write_bytes'] / 1e6:8.1f} {k['l2_hit_pct']:8.1f} {k['sm_pct']:5.1f} {k['occupancy_pct']:7.1f}")
    print("\nwarp stall reasons (cycles per issued instruction, largest first):")
    for name, k in kernels.items():
        print(f"{name:10s} " + ", ".join(f"{r} {v:.1f}" for r, v in list(k["stalls"].items())[:3]))


if __name__ == "__main__":
    if sys.argv[1:2] != ["condense"] or len(sys.argv) != 3:
        sys.exit("usage: python -m softmax_lab.profiles condense benchmarks/records/h200-profiles.json")
    DATA.write_text(json.dumps(condense(json.loads(Path(sys.argv[2]).read_text())), indent=1) + "\n")
    print("wrote", DATA)
