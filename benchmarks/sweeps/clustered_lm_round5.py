"""Every clustered setting (parts 4/8/16, 2/4/8 warps, 1/2/4 vectors) at 1024x128256 and 1024x65536 bf16 (issue 28
round 5), with the largest difference from torch.softmax in float32. GPU machine:
``PYTHONPATH=code OUT=DIR python3 benchmarks/sweeps/clustered_lm_round5.py``.
Record: ``benchmarks/records/h200-clustered-lm-sweep-round5.json``.
"""
import itertools
import json
import os

import torch

from softmax_lab import bench
from softmax_lab.kernels import clustered_softmax


def main():
    out = []
    for n_rows, n_cols in [(1024, 128256), (1024, 65536)]:
        xs = bench._buffers((n_rows, n_cols), torch.bfloat16, 2)
        ys = [torch.empty_like(x) for x in xs]
        copy = bench._time(lambda i: ys[i].copy_(xs[i]), 2, 20)
        ref = torch.softmax(xs[0].float(), -1)
        for parts, warps, vec in itertools.product((4, 8, 16), (2, 4, 8), (1, 2, 4)):
            knobs = dict(parts=parts, num_warps=warps, vectors=vec)
            shape = f"{n_rows}x{n_cols}"
            try:
                err = float((clustered_softmax(xs[0], **knobs).float() - ref).abs().max())
                t = bench._time(lambda i, k=knobs: clustered_softmax(xs[i], out=ys[i], **k), 2, 20)
                r = dict(shape=shape, parts=parts, warps=warps, vectors=vec, pct_copy=round(100 * copy / t, 1),
                         err=err)
            except Exception as e:  # a setting the kernel refuses: recorded, not fatal
                r = dict(shape=shape, parts=parts, warps=warps, vectors=vec, error=str(e)[:80])
            out.append(r)
            print(r, flush=True)
    with open(os.path.join(os.environ["OUT"], "sweep_lm.json"), "w") as fh:
        json.dump(out, fh, indent=1)


if __name__ == "__main__":
    main()
