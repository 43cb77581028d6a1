"""``softmax-lab bench``: time every kernel, ``softmax_lab.softmax`` and ``torch.softmax`` on the GPU.

Each timing is a median from ``triton.testing`` (``do_bench_cudagraph`` by default: the calls are replayed
from a CUDA graph, so Python's launch overhead is not timed; ``--timer plain`` uses ``do_bench``). Every call
gets the next of several input (and output) buffers, together bigger than the L2 cache, so no call is served
by the cache. Bandwidth counts the
bytes read once plus written once (backward: y and dy read, dx written), and is compared with a
device-to-device copy of the same bytes timed the same way: the ceiling for a memory-bound kernel.

Writes a JSON file (device, versions, date, command, every timing) and a PNG plot; prints a table.
``--sweep`` instead times the dispatcher's candidate settings (rows per program, warps, tiles, chunks).
"""
from __future__ import annotations

import argparse
import datetime
import json
import math
import os
import platform
import sys
import time

import torch

import softmax_lab
from softmax_lab import kernels
from softmax_lab.kernels import ALL, softmax_backward

F32, F16, BF16 = torch.float32, torch.float16, torch.bfloat16
# (rows, cols, dtype): the shapes of issue 3.
SHAPES = [(4096, 1024, F32), (65536, 512, F16), (65536, 512, BF16), (32768, 1000, F32), (65536, 128, F32),
          (32768, 2048, F16), (16384, 4096, F32), (4096, 16384, F32), (1024, 65536, F32), (256, 262144, F32),
          (16, 1048576, F32)]
BACKWARD_SHAPES = [(4096, 1024, F32), (65536, 512, F16), (16384, 4096, F32), (1024, 65536, F32),
                   (16, 1048576, F32)]
# --sweep adds these, to tune the dispatcher between the shapes above.
SWEEP_EXTRA = [(65536, 256, F32), (65536, 512, F32), (65536, 128, F16), (65536, 1024, F16), (65536, 4096, F16),
               (16384, 2048, F32), (32768, 8192, F32), (2048, 32768, F32), (64, 262144, F32)]
QUICK_SHAPES = [(4096, 1024, F32), (65536, 128, F32), (16, 1048576, F32)]
DTYPE_NAMES = {F32: "float32", F16: "float16", BF16: "bfloat16"}
ROTATE_BYTES = 400 * 2**20  # inputs+outputs cycled per timing: several times the 50-60 MB L2


def _progress(items, desc):
    try:
        from tqdm import tqdm

        return tqdm(items, desc=desc, file=sys.stdout, mininterval=5, dynamic_ncols=False, ncols=100)
    except ImportError:  # the GPU machine may lack tqdm: a plain loop that prints every step
        def plain():
            for i, item in enumerate(items):
                print(f"[{desc} {i + 1}/{len(items)}] {item[0] if isinstance(item, tuple) else item}", flush=True)
                yield item
        return plain()


def _buffers(shape, dtype, count):
    return [torch.randn(shape, device="cuda", dtype=torch.float32).mul_(3).to(dtype) for _ in range(count)]


def _time(fn, n_buffers, rep_ms, timer="graph"):
    """Median ms of one fn(i), i cycling through the buffers.

    timer="graph" (default): ``triton.testing.do_bench_cudagraph``: the calls, one per buffer in turn, are
    captured in a CUDA graph and replayed, so Python's launch overhead (tens of µs a call, more than a whole
    kernel on the small shapes) is not timed, only the GPU's work. timer="plain": ``triton.testing.do_bench``,
    which launches from Python each time (and flushes L2 between calls).
    """
    import triton.testing

    state = {"i": 0}

    def call():
        state["i"] = (state["i"] + 1) % n_buffers
        fn(state["i"])

    call()
    torch.cuda.synchronize()
    if timer == "graph":
        return triton.testing.do_bench_cudagraph(call, rep=rep_ms, return_mode="median")
    return triton.testing.do_bench(call, warmup=max(5, rep_ms // 4), rep=rep_ms, return_mode="median")


def _kernel_fits(name, n_rows, n_cols):
    """Skip what a kernel cannot take, or would take minutes for (naive is O(N²); row-serial is one lane)."""
    limit = kernels.MAX_COLS[name]
    if limit and n_cols > limit:
        return False
    if name == "naive":
        return n_cols <= 1024
    if name == "row_serial":
        return n_cols <= 4096
    return True


def _forward_candidates(n_rows, n_cols, dtype):
    """(kernel, knobs) settings that --sweep times for one shape."""
    block = 1 << (n_cols - 1).bit_length()
    out = []
    if block <= 4096:
        for tile in (1024, 2048, 4096, 8192, 16384):
            if tile >= block:
                for warps in (2, 4, 8, 16):
                    if 2 <= tile // (32 * warps) <= 64:
                        out.append(("multirow", dict(ROWS=tile // block, BLOCK=block, num_warps=warps)))
    if 1024 <= block <= 65536:
        for warps in (4, 8, 16, 32):
            if 2 <= block // (32 * warps) <= 128:
                out.append(("fused", dict(num_warps=warps)))
    sms = torch.cuda.get_device_properties(0).multi_processor_count
    if block >= 16384:
        for tile, warps in ((8192, 16), (8192, 32), (16384, 32)):
            for programs in (None, sms):
                if programs is None or programs < n_rows:
                    out.append(("online", dict(BLOCK=tile, num_warps=warps, programs=programs)))
    if block >= 65536:
        row_bytes = n_cols * torch.empty((), dtype=dtype).element_size()
        for group_mb in (None, 16, 32):
            group = None if group_mb is None else max(1, (group_mb << 20) // row_bytes)
            if group is not None and group >= n_rows:
                continue
            for per_sm in (1, 2, 4):
                for tile, warps in ((4096, 16), (8192, 16), (8192, 32)):
                    chunks = max(1, math.ceil(per_sm * sms / (group or n_rows)))
                    out.append(("split_row", dict(chunks=chunks, BLOCK=tile, num_warps=warps, rows_per_launch=group)))
    return out


def run(shapes, backward_shapes, rep_ms, sweep, with_kernels, timer="graph"):
    from softmax_lab import softmax

    records = []
    tasks = [("forward", s) for s in shapes] + [("backward", s) for s in backward_shapes]
    for kind, (n_rows, n_cols, dtype) in _progress(tasks, "bench"):
        size = torch.empty((), dtype=dtype).element_size()
        moved = (2 if kind == "forward" else 3) * n_rows * n_cols * size
        n_buf = max(2, min(16, math.ceil(ROTATE_BYTES / moved)))
        xs = _buffers((n_rows, n_cols), dtype, n_buf)
        outs = [torch.empty_like(xs[0]) for _ in range(n_buf)]
        base = dict(kind=kind, rows=n_rows, cols=n_cols, dtype=DTYPE_NAMES[dtype], bytes=moved, buffers=n_buf)

        def add(impl, fn, knobs=None):
            try:
                ms = _time(fn, n_buf, rep_ms, timer)
                records.append(dict(base, impl=impl, knobs=knobs, ms=ms, gbps=moved / ms / 1e6))
            except Exception as err:  # a setting that does not compile or fit: record it, keep going
                records.append(dict(base, impl=impl, knobs=knobs, error=f"{type(err).__name__}: {err}"[:300]))

        if kind == "forward":
            add("copy", lambda i: outs[i].copy_(xs[i]))
            add("torch.softmax", lambda i: torch.softmax(xs[i], -1))
            add("softmax_lab.softmax", lambda i: softmax(xs[i]))
            records[-1]["choice"] = softmax.choose(n_rows, n_cols, dtype)[0]
            if with_kernels:
                for name, f in ALL.items():
                    if _kernel_fits(name, n_rows, n_cols):
                        add(name, lambda i, f=f: f(xs[i], out=outs[i]))
            if sweep:
                for name, knobs in _forward_candidates(n_rows, n_cols, dtype):
                    add(f"sweep:{name}", lambda i, f=ALL[name], k=knobs: f(xs[i], out=outs[i], **k), knobs)
        else:
            ys = [torch.softmax(x.float(), -1).to(dtype) for x in xs]
            del xs
            dys = _buffers((n_rows, n_cols), dtype, n_buf)
            # a copy of the same bytes: read 2 tensors, write 1
            add("copy", lambda i: torch.add(ys[i], dys[i], out=outs[i]))
            add("torch.softmax", lambda i: torch._softmax_backward_data(dys[i], ys[i], -1, dtype))
            add("softmax_lab.softmax", lambda i: softmax_backward(ys[i], dys[i], out=outs[i]))
            if sweep:
                block = 1 << (n_cols - 1).bit_length()
                for rows_tile, warps in ((2048, 4), (4096, 8), (8192, 8), (8192, 16), (16384, 16)):
                    if block <= 16384 and rows_tile >= block:
                        k = dict(ROWS=rows_tile // block, num_warps=warps)
                        add("sweep:backward", lambda i, k=k: softmax_backward(ys[i], dys[i], out=outs[i], **k), k)
                sms = torch.cuda.get_device_properties(0).multi_processor_count
                for tile, warps in ((4096, 8), (4096, 16), (8192, 16)):
                    for per_sm in (1, 2, 4):
                        if block > 16384:
                            k = dict(BLOCK=tile, num_warps=warps, chunks=math.ceil(per_sm * sms / n_rows))
                            add("sweep:backward", lambda i, k=k: softmax_backward(ys[i], dys[i], out=outs[i], **k), k)
            del ys, dys
        del outs
        torch.cuda.empty_cache()
    _relative(records)
    return records


def _relative(records):
    """Add % of copy bandwidth and the speed ratio to torch (torch time / this time) to every record."""
    for r in records:
        same = [o for o in records if o["kind"] == r["kind"] and o["rows"] == r["rows"] and o["cols"] == r["cols"]
                and o["dtype"] == r["dtype"] and "ms" in o]
        copy = next((o for o in same if o["impl"] == "copy"), None)
        torch_ = next((o for o in same if o["impl"] == "torch.softmax"), None)
        if "ms" in r and copy:
            r["pct_copy"] = 100 * copy["ms"] / r["ms"]
        if "ms" in r and torch_:
            r["vs_torch"] = torch_["ms"] / r["ms"]


def table(records, impls=("copy", "torch.softmax", "softmax_lab.softmax")) -> str:
    lines = ["| pass | shape | dtype | impl | kernel | ms | GB/s | % of copy | vs torch |",
             "| --- | --- | --- | --- | --- | ---: | ---: | ---: | ---: |"]
    for r in records:
        if r["impl"] in impls and "ms" in r:
            lines.append(f"| {r['kind']} | {r['rows']}x{r['cols']} | {r['dtype']} | {r['impl']} | "
                         f"{r.get('choice', '')} | {r['ms']:.4f} | {r['gbps']:.0f} | {r.get('pct_copy', 0):.1f} | "
                         f"{r.get('vs_torch', 0):.2f}x |")
    return "\n".join(lines)


def best_settings(records) -> str:
    """For --sweep: the fastest setting per shape."""
    out = []
    groups = {}
    for r in records:
        if r["impl"].startswith("sweep:") and "ms" in r:
            groups.setdefault((r["kind"], r["rows"], r["cols"], r["dtype"]), []).append(r)
    for key, rs in groups.items():
        rs.sort(key=lambda r: r["ms"])
        top = ", ".join(f"{r['impl'][6:]} {r['knobs']} {r['pct_copy']:.0f}%" for r in rs[:4])
        out.append(f"{key}: {top}")
    return "\n".join(out)


def plot(records, path) -> bool:
    try:
        import matplotlib

        matplotlib.use("Agg")
        import matplotlib.pyplot as plt
    except ImportError:
        print("matplotlib is missing: no plot (make it later from the JSON with softmax_lab.bench.plot)")
        return False
    impls = ["torch.softmax", "softmax_lab.softmax"]
    fig, axes = plt.subplots(1, 2, figsize=(15, 5.5), gridspec_kw=dict(width_ratios=[3, 1.3]))
    for ax, kind in zip(axes, ("forward", "backward")):
        rows = [r for r in records if r["kind"] == kind and r["impl"] == "copy"]
        labels = [f"{r['rows']}x{r['cols']}\n{r['dtype']}" for r in rows]
        for j, impl in enumerate(impls):
            vals = []
            for c in rows:
                m = [r for r in records if r["kind"] == kind and r["impl"] == impl and r["rows"] == c["rows"]
                     and r["cols"] == c["cols"] and r["dtype"] == c["dtype"] and "pct_copy" in r]
                vals.append(m[0]["pct_copy"] if m else 0)
            xs = [i + (j - 0.5) * 0.4 for i in range(len(rows))]
            ax.bar(xs, vals, width=0.4, label=impl if kind == "forward" else None)
        ax.axhline(90, color="gray", ls="--", lw=1)
        ax.set_xticks(range(len(rows)), labels, fontsize=7, rotation=45, ha="right")
        top = max([r.get("pct_copy", 0) for r in records if r["kind"] == kind and r["impl"] in impls] + [100])
        ax.set_ylim(0, top + 10)
        ax.set_ylabel("% of device-to-device copy bandwidth")
        ax.set_title(f"softmax {kind}")
    axes[0].legend(loc="lower left")
    meta = records[0].get("_device", "")
    fig.suptitle(f"Softmax Lab on {meta}: read once + write once, median timings, rotating buffers")
    fig.tight_layout()
    fig.savefig(path, dpi=120)
    return True


def main(argv=None) -> int:
    p = argparse.ArgumentParser(prog="softmax-lab bench", description=__doc__.splitlines()[0])
    p.add_argument("--out", default="results", help="folder for the JSON and the plot (default: results)")
    p.add_argument("--name", default="bench", help="file name stem (default: bench)")
    p.add_argument("--quick", action="store_true", help="three shapes only")
    p.add_argument("--sweep", action="store_true", help="also time the dispatcher's candidate settings")
    p.add_argument("--no-kernels", action="store_true", help="only copy, torch.softmax and softmax_lab.softmax")
    p.add_argument("--no-backward", action="store_true")
    p.add_argument("--only", default="", help="only these shapes, e.g. 16x1048576,1024x65536 (any dtype)")
    p.add_argument("--rep", type=int, default=100, help="ms of timed repeats per measurement (do_bench rep)")
    p.add_argument("--timer", choices=["graph", "plain"], default="graph",
                   help="graph: do_bench_cudagraph (GPU time only; default); plain: do_bench from Python")
    args = p.parse_args(argv)
    if not softmax_lab.ON_GPU:
        print("softmax-lab bench needs a CUDA GPU (the CPU interpreter is far too slow to time).")
        return 1
    shapes = QUICK_SHAPES if args.quick else SHAPES + (SWEEP_EXTRA if args.sweep else [])
    back = [] if args.no_backward else ([QUICK_SHAPES[0]] if args.quick else BACKWARD_SHAPES)
    if args.only:
        keep = set(args.only.split(","))
        shapes = [s for s in shapes if f"{s[0]}x{s[1]}" in keep]
        back = [s for s in back if f"{s[0]}x{s[1]}" in keep]
    import triton

    started = time.time()
    records = run(shapes, back, args.rep, args.sweep, not args.no_kernels, args.timer)
    device = torch.cuda.get_device_name()
    props = torch.cuda.get_device_properties(0)
    meta = dict(device=device, sms=props.multi_processor_count, l2_bytes=getattr(props, "L2_cache_size", None),
                torch=torch.__version__, triton=triton.__version__, cuda=torch.version.cuda,
                python=platform.python_version(), date=datetime.datetime.now(datetime.timezone.utc).isoformat(),
                command="softmax-lab bench " + " ".join(argv if argv is not None else sys.argv[1:]),
                seconds=round(time.time() - started, 1),
                timing=f"median of triton.testing.{'do_bench_cudagraph' if args.timer == 'graph' else 'do_bench'}, "
                       f"rotating through buffers of {ROTATE_BYTES >> 20} MiB or more in all",
                bytes="read once + written once (backward: y, dy read; dx written)")
    os.makedirs(args.out, exist_ok=True)
    stem = os.path.join(args.out, args.name)
    with open(stem + ".json", "w") as fh:
        json.dump(dict(meta=meta, records=records), fh, indent=1)
    if records:
        records[0]["_device"] = device
        plot(records, stem + ".png")
        del records[0]["_device"]
    print(table(records))
    if args.sweep:
        print(best_settings(records))
    print(f"wrote {stem}.json ({meta['seconds']} s)")
    return 0


def plot_json(path_json: str, path_png: str | None = None) -> bool:
    """Make the plot from a saved JSON (for when the GPU machine had no matplotlib)."""
    with open(path_json) as fh:
        data = json.load(fh)
    records = data["records"]
    records[0]["_device"] = data["meta"]["device"]
    return plot(records, path_png or path_json[:-5] + ".png")


if __name__ == "__main__":
    sys.exit(main())
