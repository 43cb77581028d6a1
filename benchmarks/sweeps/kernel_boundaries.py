"""The dispatcher's boundaries between kernels, checked on widths between the benchmark's: at each shape the
kernel the dispatcher picks beside the one the rule before it picked, with ``torch.softmax`` and a copy of the
same bytes (``softmax_lab.bench.compare``, eager time too). GPU machine, repository root:

    PYTHONPATH=code python3 benchmarks/sweeps/kernel_boundaries.py OUT.json

Recorded: ``benchmarks/records/h200-boundaries-b.json``.
"""
import sys

import torch

from softmax_lab import bench
from softmax_lab.kernels import cooperative_softmax, fused_softmax

F32, F16, BF16 = torch.float32, torch.float16, torch.bfloat16
BEFORE = {"fused": ("fused", lambda x, out: fused_softmax(x, out=out, num_warps=32), dict(num_warps=32)),
          "cooperative": ("cooperative", lambda x, out: cooperative_softmax(x, out=out, BLOCK=8192, num_warps=4),
                          dict(BLOCK=8192, num_warps=4))}
SHAPES = [(8192, 8200, BF16, "fused"), (4096, 12288, BF16, "fused"), (4096, 16384, F16, "fused"),
          (2048, 40000, F32, "cooperative"), (2048, 49152, F32, "cooperative"), (1024, 40000, BF16, "cooperative"),
          (1024, 49152, BF16, "cooperative"), (1024, 100000, BF16, "cooperative"), (512, 131072, F16, "cooperative"),
          (8192, 65536, F32, "cooperative"), (64, 65536, BF16, "cooperative")]


def main(path):
    bench.sweep(path, [(n_rows, n_cols, dtype, [BEFORE[before]], dict(eager=True))
                       for n_rows, n_cols, dtype, before in SHAPES],
                "python3 benchmarks/sweeps/kernel_boundaries.py " + " ".join(sys.argv[1:]),
                line=lambda rec: f"{rec['impl']:20s} {rec.get('choice', '')} {rec.get('pct_copy', 0):6.1f}% eager "
                                 f"{rec.get('eager_ms', 0) * 1e3:.1f} us {rec.get('checked') or rec.get('error')}")


if __name__ == "__main__":
    main(sys.argv[1])
