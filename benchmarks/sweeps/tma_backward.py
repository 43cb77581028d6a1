"""Round 15: the backward of long rows with TMA copies (``kernels/clustered_tma_backward.py``) swept over its knobs,
beside the dispatcher (``clustered_backward`` from 65,536 to 151,936 elements, the cooperative kernel past them),
torch and a copy; and, with ``forward``, ``clustered_tma`` at the issue's forward shapes that stop 1-3% under
QuACK on other kernels (2048×32768 and 2048×32000 bf16 on ``resident``, 8192×8200 bf16 on tail tiles) or on
other knobs (1024×65536 bf16). GPU machine (sm_90), repository root:

    PYTHONPATH=code python3 benchmarks/sweeps/tma_backward.py OUT.json            # h200-tma-backward-round15.json
    PYTHONPATH=code python3 benchmarks/sweeps/tma_backward.py --borders OUT.json  # ...-borders-round15.json
    PYTHONPATH=code python3 benchmarks/sweeps/tma_backward.py --forward OUT.json  # h200-tma-near-quack-round15.json
    PYTHONPATH=code python3 benchmarks/sweeps/tma_backward.py --odd OUT.json      # h200-tma-backward-odd-round15.json

``bench.compare`` (buffers past the L2 cache, every result checked against float64 before and after it is
timed); the backward after an edge check (one-hot rows of y, dy of ±1e4, dx written over dy, slices past the
row's end).
"""
import sys

import torch

from softmax_lab import bench
from softmax_lab.kernels import clustered_tma_softmax
from softmax_lab.kernels.clustered_backward import clustered_backward
from softmax_lab.kernels.clustered_tma import tiles
from softmax_lab.kernels.clustered_tma_backward import clustered_tma_backward

from clustered_backward import edge_check  # (the sweep beside this one: python3 puts this folder on the path)

F32, BF16 = torch.float32, torch.bfloat16
SHARED = 227 * 1024


def tma_backward(parts, warps, **more):
    knobs = dict(parts=parts, num_warps=warps, **more)  # (more: held=..., held_tail.py)
    return "clustered_tma_backward", lambda y, dy, out: clustered_tma_backward(y, dy, out, **knobs), knobs


def cluster_backward(parts=8, warps=4):
    knobs = dict(parts=parts, num_warps=warps, dsmem=True)
    return "clustered_backward", lambda y, dy, out: clustered_backward(y, dy, out, **knobs), knobs


def fits(n_cols, dtype, parts, warps, tensors):
    o = tiles(n_cols, parts, warps)
    return tensors * (o["MAIN"] + o["TAIL"]) * torch.empty((), dtype=dtype).element_size() <= SHARED


BACKWARD = [(512, 151936, F32), (1024, 128256, F32), (1024, 65536, F32), (1024, 100000, F32),
            (1024, 128256, BF16), (1024, 65536, BF16), (2048, 32768, BF16), (512, 200000, F32),
            (512, 262144, BF16)]


def tma_forward(parts, warps, stream):
    knobs = dict(parts=parts, num_warps=warps, stream=stream)
    name = f"clustered_tma {'stream' if stream else 'held'}"
    return name, lambda x, out: clustered_tma_softmax(x, out=out, **knobs), knobs


FORWARD = [(2048, 32768, BF16, [tma_forward(2, 8, False), tma_forward(2, 4, True), tma_forward(2, 8, True),
                                 tma_forward(4, 4, False), tma_forward(4, 4, True), tma_forward(4, 8, True)]),
           (2048, 32000, BF16, [tma_forward(2, 8, False), tma_forward(2, 4, True), tma_forward(4, 4, False),
                                 tma_forward(4, 4, True)]),
           (1024, 65536, BF16, [tma_forward(4, 8, True), tma_forward(8, 4, False), tma_forward(8, 4, True),
                                 tma_forward(8, 8, True), tma_forward(16, 4, True), tma_forward(4, 8, False)]),
           (8192, 8200, BF16, [tma_forward(2, 4, False), tma_forward(2, 4, True), tma_forward(4, 4, False),
                                tma_forward(2, 2, False)]),
           (4096, 16384, BF16, [tma_forward(2, 4, False), tma_forward(2, 4, True)])]


# ``--borders``: where the TMA backward's range should start and end (the first run, above, had it ahead from
# 32,768 to 262,144 16-bit elements and from 65,536 to 151,936 fp32 ones, behind at 200,000 fp32): rows the tile
# kernel (up to 16,384), ``resident_backward`` (16-bit rows of 16,385-57,344) and the cooperative kernel (fp32 rows
# of 16,385-65,535 and past 151,936) run today.
BORDERS = [(8192, 8192, BF16), (4096, 16384, BF16), (4096, 16384, F32), (4096, 20000, BF16), (4096, 20000, F32),
           (2048, 32768, F32), (2048, 50000, BF16), (2048, 50000, F32), (2048, 57344, BF16), (1024, 100000, BF16),
           (512, 163840, F32), (1024, 196608, BF16)]


# ``--odd``: rows that are not whole 16-byte vectors, copied as one line of elements (flat descriptors), beside what
# the dispatcher runs there (``resident_backward`` for 16-bit rows up to 57,337 and fp32 ones up to 28,669, the
# unaligned cooperative kernel past them).
ODD = [(2048, 50257, BF16), (2048, 50257, F32), (4096, 20001, BF16), (4096, 20001, F32), (2048, 32001, BF16),
       (1024, 100001, BF16), (1024, 128257, F32), (4096, 16385, BF16)]


def main(path, forward=False, borders=False, odd=False):
    if forward:
        bench.sweep(path, FORWARD, "PYTHONPATH=code python3 benchmarks/sweeps/tma_backward.py --forward OUT.json")
        return
    if borders or odd:
        option = "--borders" if borders else "--odd"
        cases = [(n_rows, n_cols, dtype, [tma_backward(p, w) for p in (2, 4, 8, 16) for w in (4, 8)
                                          if fits(n_cols, dtype, p, w, 2) and n_cols // p >= 2048])
                 for n_rows, n_cols, dtype in (BORDERS if borders else ODD)]
        bench.sweep(path, cases, f"PYTHONPATH=code python3 benchmarks/sweeps/tma_backward.py {option} OUT.json",
                    kind="backward")
        return
    bad = edge_check([(4, 151936, F32, dict(parts=16, num_warps=4)), (4, 128256, BF16, dict(parts=8, num_warps=4)),
                      (3, 520, BF16, dict(parts=4, num_warps=4)), (5, 65544, F32, dict(parts=8, num_warps=8))],
                     clustered_tma_backward)
    print("edge check:", bad or "ok", flush=True)
    cases = []
    for n_rows, n_cols, dtype in BACKWARD:
        cands = [tma_backward(p, w) for p in (2, 4, 8, 16) for w in (4, 8) if fits(n_cols, dtype, p, w, 2)
                 and n_cols // p >= 4096 and (p > 2 or n_cols <= 32768)]
        if 65536 <= n_cols <= 151936:
            cands.append(cluster_backward())
        cases.append((n_rows, n_cols, dtype, cands))
    bench.sweep(path, cases, "PYTHONPATH=code python3 benchmarks/sweeps/tma_backward.py OUT.json", kind="backward",
                edge_check=bad or "ok")


if __name__ == "__main__":
    if sys.argv[1] in ("--forward", "--borders", "--odd"):
        main(sys.argv[2], **{sys.argv[1][2:]: True})
    else:
        main(sys.argv[1])
