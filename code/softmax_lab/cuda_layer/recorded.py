"""Chapter 9's facts recorded on a real H200, shown the same way on any machine, labelled with where they come from.

The file ``softmax_lab/data/cuda_layer_h200.json`` is made on the GPU by ``python -m softmax_lab.cuda_layer.record``
(``all``, then ``merge`` with compute-sanitizer's and ncu's outputs) and committed;
``benchmarks/records/h200-cuda-layer.md`` has the commands. Nothing here runs a kernel.
"""
from __future__ import annotations

import json
from pathlib import Path

DATA = Path(__file__).resolve().parents[1] / "data" / "cuda_layer_h200.json"


def load() -> dict | None:
    try:
        return json.loads(DATA.read_text())
    except (OSError, ValueError):
        return None


def label(rec: dict | None = None) -> str:
    rec = rec or load()
    if not rec:
        return "no H200 record is committed yet (benchmarks/records/h200-cuda-layer.md says how to make one)"
    m = rec.get("meta", {})
    return (f"recorded on {m.get('device', '?')} (driver {m.get('driver', '?')}, CUDA {m.get('cuda', '?')}), "
            f"torch {m.get('torch', '?')}, triton {m.get('triton', '?')}, numba {m.get('numba', '?')} + numba-cuda "
            f"{m.get('numba_cuda', '?')}, {m.get('date_utc', '?')}, by `{m.get('command', '?')}`")


def _print_label(rec):
    print(f"[{label(rec)}]")


def show_tl_max() -> None:
    """PTX and SASS excerpts of the course's fused Triton kernel (chapter 4) at 1024 columns, 4 warps."""
    rec = load()
    _print_label(rec)
    if not rec or "excerpts" not in rec.get("triton_asm", {}):
        return
    ex = rec["triton_asm"]["excerpts"]
    for title, key in [("Triton's layout for the row (TTGIR)", "layout"),
                       ("PTX: the row load, 4 floats per thread (ld.global.v4)", "ptx_ld_v4"),
                       ("PTX: tl.max inside a warp (butterfly shuffles 16, 8, 4, ...)", "ptx_shfl"),
                       ("PTX: tl.max across the 4 warps (a barrier, then shared memory)", "ptx_bar"),
                       ("SASS (H200 machine code): LDG.E.128", "sass_ldg"),
                       ("SASS: SHFL.BFLY", "sass_shfl"), ("SASS: BAR.SYNC", "sass_bar")]:
        lines = [ln for ln in ex.get(key, []) if ln.strip()]
        if lines:
            print(f"--- {title}")
            print("\n".join("    " + ln.strip() for ln in lines))


def show_registers() -> None:
    """Registers, spills and instruction counts of the fused Triton kernel as the row grows."""
    rec = load()
    _print_label(rec)
    rows = rec.get("triton_asm", {}).get("per_cols", []) if rec else []
    print(f"{'n_cols':>7} {'BLOCK':>6} {'warps':>5} {'vals/thr':>8} {'n_regs':>6} {'n_spills':>8} "
          f"{'SHFL.BFLY':>9} {'BAR.SYNC':>8} {'LDG.E.128':>9} {'LDL/STL':>7}")
    for r in rows:
        s = r.get("sass_counts", {})
        print(f"{r['n_cols']:>7} {r['BLOCK']:>6} {r['num_warps']:>5} {r['values_per_thread']:>8} {r['n_regs']:>6} "
              f"{r['n_spills']:>8} {s.get('SHFL.BFLY', '-'):>9} {s.get('BAR.SYNC', '-'):>8} "
              f"{s.get('LDG.E.128', '-'):>9} {s.get('LDL/STL (spills)', '-'):>7}")


def show_numba_asm() -> None:
    """What this chapter's numba kernels compiled to on the H200: barriers, shuffles, registers."""
    rec = load()
    _print_label(rec)
    kernels = rec.get("numba_asm", {}) if rec else {}
    if "error" in kernels:
        print("not recorded:", kernels["error"][:200])
        return
    print(f"{'kernel':>38} {'regs':>4} {'bar.sync':>8} {'shfl.sync.bfly':>14} {'ld.shared/st.shared':>19}")
    for name, r in kernels.items():
        c = r.get("ptx_counts", {})
        print(f"{name:>38} {r.get('regs', '?'):>4} {c.get('bar.sync', 0):>8} {c.get('shfl.sync.bfly', 0):>14} "
              f"{c.get('ld.shared/st.shared', 0):>19}")
    for name in ("shuffle_tail_kernel",):
        ex = kernels.get(name, {}).get("ptx_excerpt", [])
        if ex:
            print(f"--- PTX of {name}: `cuda.shfl_xor_sync(...)` and `cuda.syncthreads()`")
            print("\n".join("    " + ln.strip() for ln in ex if ln.strip()))


def show_racecheck() -> None:
    """compute-sanitizer --tool racecheck on the barrier-less kernel and on the fixed one."""
    rec = load()
    _print_label(rec)
    rc = rec.get("racecheck", {}) if rec else {}
    for which, title in [("missing", "block_softmax_missing_barrier_kernel (4 rows, 256 threads)"),
                         ("fixed", "block_softmax_kernel (4 rows, 256 threads)")]:
        lines = rc.get(which, [])
        print(f"--- {title}")
        print("\n".join("    " + ln for ln in lines) if lines else "    (not recorded)")


def show_ncu() -> None:
    """Nsight Compute's count of global-load sectors per request, one launch per mapping (4096 x 1024 float32)."""
    rec = load()
    _print_label(rec)
    rows = rec.get("ncu", []) if rec else []
    if not rows:
        print("(not recorded)")
        return
    print(f"{'kernel':>26} {'load requests':>13} {'sectors':>10} {'sectors/request':>15} {'DRAM read MB':>12}")
    for r in rows:
        print(f"{r['kernel']:>26} {r['requests']:>13,} {r['sectors']:>10,} {r['sectors_per_request']:>15.1f} "
              f"{r['dram_read_mb']:>12.1f}")


def show_progression(kernels=None) -> None:
    """The chapter's kernels timed on the H200 (median GPU time), with the copy ceiling beside them;
    ``kernels``: only these names (e.g. ("row_serial", "block_tree_256", "copy"))."""
    rec = load()
    _print_label(rec)
    rows = rec.get("timings", []) if rec else []
    if kernels and isinstance(rows, list):
        rows = [r for r in rows if r.get("kernel") in kernels or r.get("kernel") == "copy"]
    if not rows or isinstance(rows, dict):
        print("(not recorded)")
        return
    for shape in dict.fromkeys(r["shape"] for r in rows):
        these = [r for r in rows if r["shape"] == shape]
        copy = next((r["ms"] for r in these if r["kernel"] == "copy" and "ms" in r), None)
        print(f"--- {shape} float32 (GB/s counts one read of x and one write of y)")
        for r in these:
            if "ms" not in r:
                print(f"{r['kernel']:>17}: {r.get('error', 'not run')[:80]}")
                continue
            pct = f"{100 * copy / r['ms']:5.1f}% of copy" if copy else ""
            print(f"{r['kernel']:>17}: {r['ms'] * 1e3:9.1f} us {r['gbps']:7.0f} GB/s {pct:>16}   {r['what']}")
        timers = {r.get("timer") for r in these if "timer" in r}
        print("timer:", ", ".join(sorted(t for t in timers if t)))
