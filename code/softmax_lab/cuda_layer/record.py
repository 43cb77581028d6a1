"""Record chapter 9's GPU facts on a real NVIDIA GPU (run there; the chapter shows the committed record on a CPU).

    python -m softmax_lab.cuda_layer.record all --out DIR      # correctness, PTX/SASS, registers, timings
    python -m softmax_lab.cuda_layer.record probe missing      # one launch of the barrier-less kernel
    python -m softmax_lab.cuda_layer.record probe fixed        # ... and of the fixed one (compute-sanitizer)
    python -m softmax_lab.cuda_layer.record probe ncu          # each mapping once at 4096x1024 (for ncu)
    python -m softmax_lab.cuda_layer.record merge DIR          # DIR's outputs -> softmax_lab/data/cuda_layer_h200.json

benchmarks/records/h200-cuda-layer.md has the exact commands (compute-sanitizer, ncu) used on the H200.

``all`` writes DIR/cuda_layer.json: the device, versions, date and command; every chapter kernel checked
against the float64 reference as real CUDA; the PTX/SASS of the numba kernels and of the course's fused
Triton kernel (``softmax_lab.kernels.fused``) with registers and spills per row length; and the chapter's
progression timed with ``triton.testing.do_bench_cudagraph`` (median, inputs rotated past the L2 cache).
"""
from __future__ import annotations

import argparse
import datetime
import json
import math
import platform
import re
import subprocess
import sys
import time

import torch

import softmax_lab
from softmax_lab import cuda_layer as cl
from softmax_lab.cuda_layer import kernels as K

PTX_PATTERNS = {
    "shfl.sync.bfly": r"shfl\.sync\.bfly",
    "bar.sync": r"\bbar\.sync\b|\bbarrier\.sync\b",
    "ld.global.v4": r"ld\.global(\.\w+)*\.v4",
    "ld.global (scalar)": r"ld\.global(?!(\.\w+)*\.v\d)",
    "st.global.v4": r"st\.global(\.\w+)*\.v4",
    "ld.shared/st.shared": r"(ld|st)\.shared",
    "ex2.approx": r"ex2\.approx",
    "ld.local/st.local (spills)": r"(ld|st)\.local",
}
SASS_PATTERNS = {
    "SHFL.BFLY": r"SHFL\.BFLY",
    "BAR.SYNC": r"\bBAR\.SYNC",
    "LDG.E.128": r"LDG\.E\.128",
    "LDG (all)": r"\bLDG\b",
    "STG.E.128": r"STG\.E\.128",
    "MUFU.EX2": r"MUFU\.EX2",
    "FMNMX": r"FMNMX",
    "LDL/STL (spills)": r"\b(LDL|STL)\b",
}


def _count(text: str, patterns: dict) -> dict:
    return {k: len(re.findall(p, text)) for k, p in patterns.items()}


def _excerpt(text: str, pattern: str, context: int = 1, limit: int = 3) -> list[str]:
    lines = text.splitlines()
    hits = [i for i, ln in enumerate(lines) if re.search(pattern, ln)]
    out, last = [], -10
    for i in hits[:limit]:
        lo = max(i - context, last + 1)
        for j in range(lo, min(len(lines), i + context + 1)):
            out.append(lines[j].rstrip())
        out.append("...")
        last = i + context
    return out


def meta(argv) -> dict:
    import numba
    import numpy
    import triton
    from importlib.metadata import version

    info = {
        "date_utc": datetime.datetime.now(datetime.timezone.utc).strftime("%Y-%m-%d %H:%M UTC"),
        "command": "python -m softmax_lab.cuda_layer.record " + " ".join(argv),
        "python": platform.python_version(), "torch": torch.__version__, "triton": triton.__version__,
        "numpy": numpy.__version__, "numba": numba.__version__, "numba_cuda": version("numba-cuda"),
        "where": cl.describe(),
    }
    if torch.cuda.is_available():
        p = torch.cuda.get_device_properties(0)
        info.update(device=torch.cuda.get_device_name(), sms=p.multi_processor_count,
                    l2_mib=round(getattr(p, "L2_cache_size", 0) / 2**20), cuda=torch.version.cuda)
        try:
            info["driver"] = subprocess.run(["nvidia-smi", "--query-gpu=driver_version", "--format=csv,noheader"],
                                            capture_output=True, text=True, timeout=20).stdout.strip()
        except Exception:
            pass
    return info


def correctness() -> list[dict]:
    from softmax_lab.reference import softmax_ref

    d = softmax_lab.DEVICE
    g = torch.Generator().manual_seed(9)
    cases = [("1x1", torch.randn(1, 1, generator=g)), ("2x31", torch.randn(2, 31, generator=g)),
             ("3x257", torch.randn(3, 257, generator=g) * 3), ("4x1024", torch.randn(4, 1024, generator=g) * 3),
             ("all-negative", torch.tensor([[-1002.0, -1001.0, -1000.0]])),
             ] + ([("4096x1024", torch.randn(4096, 1024, generator=g) * 3)] if softmax_lab.ON_GPU else [])
    big = torch.randn(3, 1100, generator=g)
    out = []
    for name, fn in K.ALL.items():
        for cname, x in cases + [("view big[:, :1000]", big[:, :1000])]:
            xd = big.to(d)[:, :1000] if cname.startswith("view") else x.to(d)
            y = torch.full(xd.shape, float("nan"), device=d)
            fn(xd, y)
            if d.type == "cuda":
                torch.cuda.synchronize()
            err = (y.double().cpu() - softmax_ref(xd).cpu()).abs().max().item()
            out.append({"kernel": name, "case": cname, "max_abs_err": err, "ok": bool(err < 1e-5)})
    return out


def numba_asm() -> dict:
    """PTX (and SASS when numba can disassemble) of the chapter's numba kernels, with registers."""
    d = softmax_lab.DEVICE
    x = torch.randn(8, 1024, device=d)
    y = torch.empty_like(x)
    K.block_softmax(x, y, threads=256)
    K.shuffle_tail_softmax(x, y, threads=256)
    K.warp_softmax(x, y)
    K.row_serial_softmax(x, y)
    K.launch_rows(K.block_softmax_missing_barrier_kernel, x, y, 256)
    out = {}
    for name, k in [("block_softmax_kernel", K.block_softmax_kernel), ("shuffle_tail_kernel", K.shuffle_tail_kernel),
                    ("warp_softmax_kernel", K.warp_softmax_kernel), ("row_serial_kernel", K.row_serial_kernel),
                    ("block_softmax_missing_barrier_kernel", K.block_softmax_missing_barrier_kernel)]:
        sig = k.signatures[0]
        ptx = k.inspect_asm(sig)
        rec = {"ptx_counts": _count(ptx, PTX_PATTERNS)}
        try:  # without a signature numba returns {signature: value} for every compiled one
            rec["regs"] = next(iter(k.get_regs_per_thread().values()))
            rec["local_bytes"] = next(iter(k.get_local_mem_per_thread().values()))
        except Exception as err:
            rec["regs_error"] = f"{type(err).__name__}: {str(err)[:200]}"
        rec["ptx_excerpt"] = (_excerpt(ptx, PTX_PATTERNS["shfl.sync.bfly"], 1, 2)
                              + _excerpt(ptx, PTX_PATTERNS["bar.sync"], 1, 2))
        try:
            sass = k.inspect_sass(sig)
            rec["sass_counts"] = _count(sass, SASS_PATTERNS)
            rec["sass_excerpt"] = (_excerpt(sass, SASS_PATTERNS["SHFL.BFLY"], 0, 3)
                                   + _excerpt(sass, SASS_PATTERNS["BAR.SYNC"], 0, 2))
        except Exception as err:
            rec["sass_error"] = f"{type(err).__name__}: {str(err)[:200]}"
        out[name] = rec
    return out


def triton_asm(cols_list=(1024, 2048, 4096, 8192, 16384, 32768, 65536)) -> dict:
    """The course's fused Triton kernel, compiled at each row length: registers, spills, PTX/SASS counts."""
    from softmax_lab.kernels._launch import default_num_warps
    from softmax_lab.kernels.fused import fused_softmax_kernel

    out = {"per_cols": [], "excerpts": {}}
    configs = [(n, n, default_num_warps(n)) for n in cols_list] + [(1024, 2048, 8)]  # + seed's "t1-wide"
    for n, block, warps in configs:
        x = torch.randn(4, n, device="cuda")
        y = torch.empty_like(x)
        ck = fused_softmax_kernel[(4,)](y, x, x.stride(0), y.stride(0), n, BLOCK=block, num_warps=warps)
        ptx = ck.asm["ptx"]
        rec = {"n_cols": n, "BLOCK": block, "num_warps": warps, "n_regs": ck.n_regs, "n_spills": ck.n_spills,
               "values_per_thread": block // (32 * warps), "ptx_counts": _count(ptx, PTX_PATTERNS)}
        try:
            sass = ck.asm["sass"]
            rec["sass_counts"] = _count(sass, SASS_PATTERNS)
        except Exception as err:
            sass = ""
            rec["sass_error"] = f"{type(err).__name__}: {str(err)[:200]}"
        ttgir = ck.asm.get("ttgir", "")
        layout = [ln.strip() for ln in ttgir.splitlines() if ln.strip().startswith("#blocked")]
        rec["layout"] = layout[:2]
        out["per_cols"].append(rec)
        if n == 1024 and block == 1024:
            out["excerpts"] = {
                "ptx_shfl": _excerpt(ptx, PTX_PATTERNS["shfl.sync.bfly"], 1, 3),
                "ptx_bar": _excerpt(ptx, PTX_PATTERNS["bar.sync"], 1, 2),
                "ptx_ld_v4": _excerpt(ptx, PTX_PATTERNS["ld.global.v4"], 0, 2),
                "sass_shfl": _excerpt(sass, SASS_PATTERNS["SHFL.BFLY"], 0, 3) if sass else [],
                "sass_bar": _excerpt(sass, SASS_PATTERNS["BAR.SYNC"], 0, 2) if sass else [],
                "sass_ldg": _excerpt(sass, SASS_PATTERNS["LDG.E.128"], 0, 2) if sass else [],
                "layout": layout[:2],
            }
    return out


def _timed_call(name, fn, kw, xs, outs, n_cols):
    """``call(i)``: one launch of ``name`` on the i-th rotating buffer (``kw == "wide"``: BLOCK = 2 x row, 8 warps)."""
    if name == "copy":
        return lambda i: outs[i].copy_(xs[i])
    if name == "torch_softmax":
        return lambda i: torch.softmax(xs[i], dim=-1)
    if kw == "wide":
        block = 2 * (1 << (n_cols - 1).bit_length())
        return lambda i: fn(xs[i], outs[i], BLOCK=block, num_warps=8)
    return lambda i: fn(xs[i], outs[i], **kw)


def timings(shapes=((4096, 1024), (65536, 512)), rep_ms=60) -> list[dict]:
    from softmax_lab.bench import ROTATE_BYTES, _time
    from softmax_lab.kernels import fused_softmax

    progression = [
        ("three_kernel", "3 kernels: thread per row (max; exp + sum into a buffer), thread per element",
         K.three_kernel_softmax, {}),
        ("row_serial", "1 kernel, one thread per row, 3 walks", K.row_serial_softmax, {}),
        ("block_tree_256", "one block (256 threads) per row, shared-memory trees", K.block_softmax, {"threads": 256}),
        ("block_tree_1024", "one block (1024 threads) per row, shared-memory trees", K.block_softmax,
         {"threads": 1024}),
        ("shuffle_tail_256", "one block (256) per row, trees end in warp shuffles", K.shuffle_tail_softmax,
         {"threads": 256}),
        ("warp_per_row", "one warp per row, shuffles only", K.warp_softmax, {}),
        ("triton_fused", "Triton fused kernel (chapter 4), default num_warps", fused_softmax, {}),
        ("triton_wide", "Triton fused, BLOCK = 2 x row, num_warps 8 (seed's t1-wide)", fused_softmax, "wide"),
        ("torch_softmax", "torch.softmax", None, {}),
        ("copy", "device-to-device copy of the same bytes (the ceiling)", None, {}),
    ]
    records = []
    for n_rows, n_cols in shapes:
        moved = 2 * n_rows * n_cols * 4
        n_buf = max(2, min(16, math.ceil(ROTATE_BYTES / moved)))
        xs = [torch.randn(n_rows, n_cols, device="cuda") * 3 for _ in range(n_buf)]
        outs = [torch.empty_like(xs[0]) for _ in range(n_buf)]
        for name, what, fn, kw in progression:
            if name == "row_serial" and n_rows * n_cols > 4096 * 1024 * 8:
                continue
            call = _timed_call(name, fn, kw, xs, outs, n_cols)
            rec = {"shape": f"{n_rows}x{n_cols}", "kernel": name, "what": what}
            try:
                call(0)
                torch.cuda.synchronize()
                try:
                    ms = _time(call, n_buf, rep_ms, "graph")
                    rec["timer"] = "do_bench_cudagraph"
                except Exception as err:
                    rec["graph_error"] = f"{type(err).__name__}: {str(err)[:160]}"
                    torch.cuda.synchronize()
                    ms = _time(call, n_buf, rep_ms, "plain")
                    rec["timer"] = "do_bench (plain: Python launch overhead included)"
                rec["ms"] = ms
                rec["gbps"] = moved / ms / 1e6
            except Exception as err:
                rec["error"] = f"{type(err).__name__}: {str(err)[:200]}"
            print(rec, flush=True)
            records.append(rec)
        del xs, outs
        torch.cuda.empty_cache()
    return records


def probe(which: str) -> None:
    """Launches for compute-sanitizer / ncu, nothing else (no torch kernels, few numba ones)."""
    import numpy as np

    from numba import cuda

    if which in ("missing", "fixed"):
        k = K.block_softmax_missing_barrier_kernel if which == "missing" else K.block_softmax_kernel
        x = cuda.to_device((np.random.default_rng(0).standard_normal((4, 1024)) * 3).astype(np.float32))
        y = cuda.device_array((4, 1024), dtype=np.float32)
        k[4, 256, 0, 1024](x, y, 1024)
        cuda.synchronize()
        print(f"probe {which}: launched 4 blocks of 256 threads")
        return
    x = torch.randn(4096, 1024, device="cuda")
    y = torch.empty_like(x)
    for fn, kw in [(K.row_serial_softmax, {}), (K.block_softmax, {"threads": 256}), (K.warp_softmax, {}),
                   (K.shuffle_tail_softmax, {"threads": 256})]:
        fn(x, y, **kw)
    row_max = torch.empty(4096, device="cuda")
    K.chunked_row_max_kernel[4096, 32, K._stream(), 0](K.as_array(x), K.as_array(row_max), 1024)
    torch.cuda.synchronize()
    print("probe ncu: done")


KNOWN = ["block_softmax_missing_barrier_kernel", "block_softmax_kernel", "shuffle_tail_kernel",
         "warp_softmax_kernel", "row_serial_kernel", "chunked_row_max_kernel"]


_MANGLED = re.compile(r"(?:[\w:]+::)?(\w+)\[abi:[^\]]*\]\(.*\)(?=\+0x)")


def _racecheck_lines(text: str) -> list[str]:
    """The first hazard of each kind (WAR, RAW, WAW) with its threads, and the summary line."""
    blocks, summary = [], []
    for ln in text.splitlines():
        s = _MANGLED.sub(r"\1", ln.replace("=========", "")).strip()
        if s.startswith(("Error:", "Warning:")) and "hazard" in s:
            blocks.append([s])
        elif blocks and s.startswith(("Read Thread", "Write Thread", "Current Value")):
            blocks[-1].append(s)
        elif "RACECHECK SUMMARY" in s:
            summary.append(s)
    out, seen = [], set()
    for b in blocks:
        kind = next((k for k in ("WAR", "RAW", "WAW") if k in b[0]), "?")
        if kind not in seen:
            seen.add(kind)
            out += b
    return out + summary


def _ncu_rows(text: str) -> list[dict]:
    import csv
    import io

    lines = [ln for ln in text.splitlines() if ln.startswith('"')]
    per: dict = {}
    for row in csv.DictReader(io.StringIO("\n".join(lines))):
        name = row.get("Kernel Name", "")
        kernel = next((k for k in KNOWN if k in name), name[:40])
        key = (row.get("ID"), kernel)
        value = float(str(row.get("Metric Value", "0")).replace(",", "") or 0)
        unit = row.get("Metric Unit", "")
        metric = row.get("Metric Name", "")
        if metric.startswith("dram__bytes_read"):
            value *= {"byte": 1e-6, "Kbyte": 1e-3, "Mbyte": 1.0, "Gbyte": 1e3}.get(unit, 1e-6)
        per.setdefault(key, {})[metric] = value
    out = []
    for (_, kernel), m in per.items():
        req = m.get("l1tex__t_requests_pipe_lsu_mem_global_op_ld.sum", 0)
        sec = m.get("l1tex__t_sectors_pipe_lsu_mem_global_op_ld.sum", 0)
        out.append({"kernel": kernel, "requests": int(req), "sectors": int(sec),
                    "sectors_per_request": sec / req if req else 0.0,
                    "dram_read_mb": m.get("dram__bytes_read.sum", 0.0)})
    return out


def merge(folder: str, to: str) -> None:
    """One file for the chapter: DIR/cuda_layer.json + racecheck_*.txt + ncu.csv -> ``to``."""
    from pathlib import Path

    d = Path(folder)
    rec = json.loads((d / "cuda_layer.json").read_text())
    rec["racecheck"] = {w: _racecheck_lines((d / f"racecheck_{w}.txt").read_text(errors="replace"))
                        for w in ("missing", "fixed") if (d / f"racecheck_{w}.txt").exists()}
    if (d / "ncu.csv").exists():
        rec["ncu"] = _ncu_rows((d / "ncu.csv").read_text(errors="replace"))
    Path(to).write_text(json.dumps(rec, indent=1, default=str) + "\n")
    print(f"wrote {to}")


def main(argv=None) -> int:
    argv = sys.argv[1:] if argv is None else argv
    p = argparse.ArgumentParser(prog="python -m softmax_lab.cuda_layer.record")
    p.add_argument("what", choices=["all", "probe", "merge"])
    p.add_argument("which", nargs="?", default="missing")
    p.add_argument("--out", default=".")
    p.add_argument("--to", default="code/softmax_lab/data/cuda_layer_h200.json")
    p.add_argument("--steps", default="meta,correctness,numba_asm,triton_asm,timings")
    a = p.parse_args(argv)
    if a.what == "probe":
        probe(a.which)
        return 0
    if a.what == "merge":
        merge(a.which, a.to)
        return 0
    record, path = {}, f"{a.out}/cuda_layer.json"
    for step in a.steps.split(","):
        t0 = time.time()
        try:
            record[step] = meta(argv) if step == "meta" else globals()[step]()
        except Exception as err:
            import traceback

            record[step] = {"error": f"{type(err).__name__}: {err}", "traceback": traceback.format_exc()[-2000:]}
        record.setdefault("seconds", {})[step] = round(time.time() - t0, 1)
        print(f"[record] {step}: {record['seconds'][step]} s", flush=True)
        with open(path, "w") as f:
            json.dump(record, f, indent=1, default=str)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
