"""Probe (issue 15, seventh session): did the sixth session's review slow the clustered kernel? It reordered two
stride products (``row * (in_stride_v * VEC)`` became ``row * in_stride_v * VEC``, the same for the output).
1024x65536 fp32 ran at 92.5% of copy before the review (h200-issue15l.json) and 90.2% after (h200-issue15m.json).
This times the kernel as it is and with the old order, interleaved, three rounds, same process.

    python3 results/probe_clustered_ab.py OUT/h200-clustered-ab.json
"""
import datetime, importlib.util, json, sys, tempfile
from pathlib import Path

import torch
import triton

sys.path.insert(0, "code")
import softmax_lab  # noqa: E402
from softmax_lab import bench  # noqa: E402
from softmax_lab.kernels import clustered  # noqa: E402

src = Path(clustered.__file__).read_text().replace("from ._launch import", "from softmax_lab.kernels._launch import")
old = src.replace("src = in_ptr + row * in_stride_v * VEC", "src = in_ptr + row * (in_stride_v * VEC)")
old = old.replace("dst = out_ptr + row * out_stride_v * OUT_VEC", "dst = out_ptr + row * (out_stride_v * OUT_VEC)")
assert old != src
path = Path(tempfile.mkdtemp()) / "clustered_old_order.py"
path.write_text(old)
spec = importlib.util.spec_from_file_location("clustered_old_order", path)
before = importlib.util.module_from_spec(spec)
spec.loader.exec_module(before)

out = dict(device=torch.cuda.get_device_name(), torch=torch.__version__, triton=triton.__version__,
           date=datetime.datetime.now(datetime.timezone.utc).isoformat(timespec="seconds"),
           command="python3 results/probe_clustered_ab.py " + " ".join(sys.argv[1:]), records=[])
for (n_rows, n_cols, dtype), knobs in [((1024, 65536, torch.float32), dict(parts=8, num_warps=2, vectors=2)),
                                       ((1024, 65536, torch.bfloat16), dict(parts=4, num_warps=4, vectors=2))]:
    moved = 2 * n_rows * n_cols * torch.empty((), dtype=dtype).element_size()
    n_buf = max(2, min(16, -(-bench.ROTATE_BYTES // moved)))
    xs = bench._buffers((n_rows, n_cols), dtype, n_buf)
    outs = [torch.empty_like(x) for x in xs]
    for rnd in range(3):
        copy = bench._time(lambda i: outs[i].copy_(xs[i]), n_buf, 20)
        for name, mod in (("now", clustered), ("old order", before)):
            fn = lambda i, m=mod: m.clustered_softmax(xs[i], out=outs[i], **knobs)  # noqa: E731
            bad = bench._check(fn(0), xs[0])
            pct = 100 * copy / bench._time(fn, n_buf, 20)
            rec = dict(shape=f"{n_rows}x{n_cols}", dtype=str(dtype)[6:], knobs=knobs, round=rnd, kernel=name,
                       pct_copy=pct, checked=bad or bench._check(fn(n_buf - 1), xs[n_buf - 1]) or "ok")
            print(json.dumps(rec), flush=True)
            out["records"].append(rec)
    del xs, outs
    torch.cuda.empty_cache()
with open(sys.argv[1], "w") as f:
    json.dump(out, f, indent=1)
