"""What exp2((x - m)·log2 e) costs the shared-memory kernels against exp2(x·log2 e - m·log2 e), the form they had
until round 12 (one fused multiply-add an element, but m·log2 e overflows past 2.36e38: NaN rows of huge finite
values). The dispatcher is timed with ``bench.compare`` (buffers past the L2 cache, checked against float64
before and after) on each range a shared-memory kernel serves, with the code of whichever tree is on PYTHONPATH;
the two trees run one after the other, twice, in one call of the GPU machine (repository root, the earlier tree's
``code/`` copied to ``before/code``):

    for i in 1 2; do for t in before .; do
        PYTHONPATH=$t/code python3 benchmarks/sweeps/exp_forms.py OUT.json $t-$i; done; done

Each run appends its records, labelled, to OUT.json.
"""
import json
import sys
from pathlib import Path

import torch

from softmax_lab import bench
from softmax_lab.kernels.clustered import clustered_softmax
from softmax_lab.kernels.resident import resident_softmax

F32, F16, BF16 = torch.float32, torch.float16, torch.bfloat16

# (rows, cols, dtype): resident online on 8 warps (16-bit, 8,193-16,384) and on 16 (16,385-57,344), fp32 on 8
# (16,385-28,672); clustered online (16-bit 57,345-131,072, fp32 32,769-65,536); unaligned_resident (odd widths).
SHAPES = [(8192, 8200, BF16), (4096, 16384, BF16), (4096, 12000, F16), (2048, 32768, BF16), (2048, 32000, BF16),
          (1024, 50000, BF16), (4096, 20000, F32), (1024, 65536, BF16), (1024, 100000, BF16), (1024, 128256, BF16),
          (1024, 65536, F32), (2048, 50257, BF16), (4096, 30001, F16)]

# The passes without the online sum (the kernels' other form), on two of those shapes.
OTHERS = {(2048, 32768, BF16): [("resident 16 warps, sum pass", lambda x, out: resident_softmax(x, out, 16, True),
                                 dict(num_warps=16, overlap=True))],
          (1024, 65536, BF16): [("clustered 4x4, sum pass", lambda x, out: clustered_softmax(x, out, 4, 4, 2),
                                 dict(parts=4, num_warps=4, vectors=2))]}


def main(out_path: str, label: str) -> None:
    path = Path(out_path)
    records = json.loads(path.read_text()) if path.exists() else []
    for rows, cols, dtype in SHAPES:
        for rec in bench.compare(rows, cols, dtype, OTHERS.get((rows, cols, dtype), []), with_torch=False):
            rec["tree"] = label
            records.append(rec)
            if rec["impl"] != "copy":
                print(label, rows, cols, rec["dtype"], rec["impl"], rec.get("choice", ""),
                      f"{rec.get('pct_copy', 0):.1f}", rec.get("checked", rec.get("error")), flush=True)
    path.write_text(json.dumps(records, indent=1))


if __name__ == "__main__":
    main(sys.argv[1], sys.argv[2])
