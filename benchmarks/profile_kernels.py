"""Nsight Compute reports of the course's kernels on a GPU, kept as data for chapter 7's profiler section.

Each case launches one kernel (or chapter 4's three) twice on a fresh input; `ncu` skips the first launch (it
compiles) and profiles the second. Recorded per kernel: the launch (grid, block, registers, shared memory),
DRAM throughput and bytes, L2 hit rate, achieved occupancy and the warp stall reasons. Also times chapter 3's
naive kernel written in CUDA C (`softmax_lab/data/naive_softmax.cu`, built with nvcc) beside the Triton
naive and fused kernels.

    python benchmarks/profile_kernels.py record OUT.json     # on the GPU machine: ncu and nvcc on PATH
    python benchmarks/profile_kernels.py run CASE            # what ncu profiles (one case)
"""
from __future__ import annotations

import csv
import datetime
import io
import json
import platform
import shutil
import subprocess
import sys
import tempfile
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
CUDA_NAIVE = ROOT / "code" / "softmax_lab" / "data" / "naive_softmax.cu"

# case -> (shape, the kernel-name regex ncu matches, kernels per call). (The recorded run of 2026-12-02 also tried a
# "copy" case, x.clone(): a device-to-device clone is a cudaMemcpy, not a kernel, so ncu had nothing to profile.)
CASES = {
    "three_pass": ((8192, 8192), "row_max_kernel|exp_sum_kernel|normalize_kernel", 3),
    "fused": ((8192, 8192), "fused_softmax_kernel", 1),
    "online": ((8192, 8192), "online_softmax_kernel", 1),
    "naive": ((2048, 2048), "naive_softmax_kernel", 1),
}
SECTIONS = ["SpeedOfLight", "MemoryWorkloadAnalysis", "Occupancy", "LaunchStats", "WarpStateStats"]
METRICS = ["dram__bytes_read.sum", "dram__bytes_write.sum", "lts__t_sector_hit_rate.pct", "gpu__time_duration.sum",
           "sm__warps_active.avg.pct_of_peak_sustained_active"]
STALLS = "regex:smsp__average_warps_issue_stalled_.*_per_issue_active\\.ratio"


def run(case: str) -> None:
    import torch

    from softmax_lab.kernels import fused_softmax, naive_softmax, online_softmax, three_pass_softmax

    launch = {"three_pass": three_pass_softmax, "fused": fused_softmax,
              "online": lambda x: online_softmax(x, BLOCK=1024), "naive": naive_softmax}[case]
    x = torch.randn(*CASES[case][0], device="cuda")
    for _ in range(2):
        launch(x)
    torch.cuda.synchronize()


def _value(text: str):
    try:
        return float(text.replace(",", ""))
    except ValueError:
        return text


def ncu_rows(text: str) -> dict:
    """ncu's `--csv --page details` output -> {kernel name: {metric: [value, unit]}}."""
    lines = [ln for ln in text.splitlines() if ln.startswith('"')]
    out: dict = {}
    for row in csv.DictReader(io.StringIO("\n".join(lines))):
        name = row.get("Kernel Name", "").split("(")[0]
        key = f"{row.get('ID')} {name}"
        out.setdefault(key, {})[row.get("Metric Name", "")] = [_value(row.get("Metric Value", "")),
                                                               row.get("Metric Unit", "")]
    return out


def profile(case: str, ncu: str, log: list[str]) -> dict:
    _, regex, per_call = CASES[case]
    base = [ncu, "--csv", "--page", "details", "-k", f"regex:{regex}", "--launch-skip", str(per_call),
            "--launch-count", str(per_call)]
    for s in SECTIONS:
        base += ["--section", s]
    tail = [sys.executable, __file__, "run", case]
    for metrics in ([*METRICS, STALLS], METRICS):  # the stall regex can be refused by an older ncu
        cmd = base + ["--metrics", ",".join(metrics)] + tail
        done = subprocess.run(cmd, capture_output=True, text=True, timeout=300)
        log.append(f"$ {' '.join(cmd)}\nrc {done.returncode}\n{done.stderr[-2000:]}")
        rows = ncu_rows(done.stdout)
        if done.returncode == 0 and rows:
            return {"shape": list(CASES[case][0]), "dtype": "float32", "command": " ".join(cmd[:-3]) +
                    f" python benchmarks/profile_kernels.py run {case}", "kernels": rows}
    return {"shape": list(CASES[case][0]), "error": log[-1][-500:]}


def time_naive(log: list[str]) -> list[dict]:
    """The CUDA C naive kernel (nvcc) beside Triton's naive and fused kernels, median GPU times."""
    import torch
    import triton.testing

    from softmax_lab.kernels import fused_softmax, naive_softmax

    out = []
    with tempfile.TemporaryDirectory() as tmp:
        exe = Path(tmp) / "naive_softmax"
        cmd = ["nvcc", "-O3", "-arch=sm_90", str(CUDA_NAIVE), "-o", str(exe)]
        built = subprocess.run(cmd, capture_output=True, text=True)
        log.append(f"$ {' '.join(cmd)}\nrc {built.returncode}\n{built.stderr[-2000:]}")
        for rows, cols in ((1024, 128), (1024, 1024), (1024, 4096), (2048, 2048)):
            rec = {"rows": rows, "cols": cols}
            if built.returncode == 0:
                done = subprocess.run([str(exe), str(rows), str(cols)], capture_output=True, text=True, timeout=120)
                rec["cuda_c_naive"] = json.loads(done.stdout) if done.stdout.strip() else {"error": done.stderr}
            x = torch.randn(rows, cols, device="cuda")
            for name, fn in (("triton_naive", naive_softmax), ("triton_fused", fused_softmax)):
                y = fn(x)
                err = (y.double() - torch.softmax(x.double(), -1)).abs().max().item()
                ms = triton.testing.do_bench(lambda fn=fn: fn(x), return_mode="median")
                rec[name] = {"max_error": err, "median_us": ms * 1e3}
            out.append(rec)
            print(json.dumps(rec), flush=True)
    return out


def _version(tool: str) -> str:
    done = subprocess.run([tool, "--version"], capture_output=True, text=True)
    return (done.stdout.strip().splitlines() or ["?"])[-1]


def record(path: str) -> None:
    import torch
    import triton

    ncu = shutil.which("ncu") or "/usr/local/cuda/bin/ncu"
    log: list[str] = []
    meta = {"device": torch.cuda.get_device_name(), "torch": torch.__version__, "triton": triton.__version__,
            "cuda": torch.version.cuda, "python": platform.python_version(),
            "ncu": _version(ncu), "nvcc": _version("nvcc"),
            "date_utc": datetime.datetime.now(datetime.UTC).strftime("%Y-%m-%d %H:%M"),
            "command": "python benchmarks/profile_kernels.py record " + path}
    rec = {"meta": meta, "profiles": {}, "naive_timings": []}
    for case in CASES:
        rec["profiles"][case] = profile(case, ncu, log)
        print(case, "done", flush=True)
    rec["naive_timings"] = time_naive(log)
    Path(path).write_text(json.dumps(rec, indent=1) + "\n")
    Path(path).with_suffix(".log").write_text("\n\n".join(log) + "\n")
    print("wrote", path)


if __name__ == "__main__":
    if sys.argv[1:2] == ["run"]:
        run(sys.argv[2])
    elif sys.argv[1:2] == ["record"]:
        record(sys.argv[2])
    else:
        sys.exit(__doc__)
