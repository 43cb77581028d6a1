"""The shared-memory kernels with and without ``online`` (the sum taken with the max as each chunk lands,
``kernels/chunk_state.py``: one pass over shared memory fewer), beside QuACK where it runs: one shape in every row
range the dispatcher gives ``resident``, ``unaligned_resident`` or ``clustered`` (at the dispatcher's own knobs,
from ``dispatch._runnable``), and a few other settings of the issue 28 lines. GPU machine (sm_90), repository
root, QuACK importable for its lines (``benchmarks/bench_with_peers.sh`` shows how):

    PYTHONPATH=code python3 benchmarks/sweeps/online_sum.py OUT.json [ROWSxCOLS ...]   # (those shapes alone)

Every candidate is checked against float64 before and after it is timed (``bench.compare``). Its runs:
``benchmarks/records/h200-online-sum-round9.json`` (at 136880f: the issue's lines only, without QuACK, before the
rounding fix of ``chunk_state.py``), ``h200-online-sum-round10.json`` (every range, its 1-warp window shape then
1500, which the dispatcher gives a register kernel) and ``h200-online-sum-more-round10.json`` (16384×1501 and more
clustered settings; docs/performance.md, round 10).
"""
import sys

import torch

from softmax_lab import bench, dispatch
from softmax_lab.kernels import clustered_softmax, resident_softmax, unaligned_resident_softmax


def both(name, launch, settings):
    """(name, fn, knobs) for each setting, with online off and on."""
    settings = [{k: v for k, v in knobs.items() if k != "online"} for knobs in settings]
    return [(f"{name} online={on}", lambda x, out, k=k, on=on: launch(x, out, online=on, **k), dict(k, online=on))
            for k in settings for on in (False, True)]


# One shape in each row range of the dispatcher's rules that takes a shared-memory kernel (tuning.FORWARD and
# UNALIGNED_FORWARD): rows of whole vectors (resident, clustered) and odd widths (unaligned_resident).
RANGES = [(4096, 12288, "bf16"), (2048, 32768, "bf16"), (2048, 32000, "bf16"), (1024, 50000, "bf16"),
          (1024, 65536, "bf16"), (1024, 80000, "bf16"), (1024, 100000, "bf16"), (1024, 128256, "bf16"),
          (2048, 20000, "fp32"), (1024, 50000, "fp32"), (1024, 65536, "fp32"),
          (16384, 1501, "bf16"), (4096, 10001, "bf16"), (4096, 20001, "bf16"), (2048, 50257, "bf16"),
          (2048, 30001, "fp32")]
# Other settings, on the lines.
OTHERS = {(2048, 50257, "bf16"): ("unaligned_resident", [dict(num_warps=16, line=128)]),
          (1024, 65536, "bf16"): ("clustered", [dict(parts=8, num_warps=4), dict(parts=4, num_warps=2, vectors=2),
                                                dict(parts=2, num_warps=4, vectors=2)]),
          (1024, 128256, "bf16"): ("clustered", [dict(parts=8, num_warps=4), dict(parts=8, num_warps=1, vectors=2),
                                                 dict(parts=16, num_warps=2, vectors=1)]),
          (512, 151936, "fp32"): ("clustered", [dict(parts=8, num_warps=4), dict(parts=16, num_warps=4),
                                                dict(parts=16, num_warps=2), dict(parts=8, num_warps=8)])}
LAUNCH = {"resident": resident_softmax, "unaligned_resident": unaligned_resident_softmax,
          "clustered": clustered_softmax}
DTYPES = {"bf16": torch.bfloat16, "fp32": torch.float32}


def main(path, only=()):
    """Every shape, or those named in ``only`` (``"ROWSxCOLS"``)."""
    quack = bench.peer_candidates()
    cases = []
    for n_rows, n_cols, short in RANGES + [key for key in OTHERS if key not in RANGES]:
        if only and f"{n_rows}x{n_cols}" not in only:
            continue
        dtype = DTYPES[short]
        name, knobs = dispatch._runnable(torch.empty((n_rows, n_cols), dtype=dtype, device="cuda"))
        candidates = both(name, LAUNCH[name], [knobs]) if name in LAUNCH else []
        if (n_rows, n_cols, short) in OTHERS:
            other, settings = OTHERS[n_rows, n_cols, short]
            candidates += both(other, LAUNCH[other], settings)
        cases.append((n_rows, n_cols, dtype, quack + candidates))
    bench.sweep(path, cases, " ".join(["PYTHONPATH=code python3 benchmarks/sweeps/online_sum.py OUT.json", *only]))


if __name__ == "__main__":
    main(sys.argv[1], sys.argv[2:])
