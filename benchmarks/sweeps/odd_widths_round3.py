"""Issue 28, round 3: rows that are not whole 16-byte vectors, beside what ran there before
(``softmax_lab.bench.compare``: check, time, check again; a copy of the same bytes and ``torch.softmax`` beside).

* 16-bit rows off 16 bytes, their window in shared memory (``unaligned_resident``), against the cooperative window
  kernel and the register kernels that ran there before;
* the register kernels with their ints in the widest pieces the rows allow (``part_vector``: 4 bytes for a bf16
  row of 130, 8 for 4,100) against one element at a time (VEC = 1, what ran before);
* where each of these starts to win (probe b).

GPU machine, repository root:

    PYTHONPATH=code python3 benchmarks/sweeps/odd_widths_round3.py OUT.json [a|b]

Recorded: ``benchmarks/records/h200-odd-widths-round3-a.json``, ``h200-odd-widths-round3-b.log`` (its JSON did not come
back from the GPU machine).
"""
import sys

import torch

from softmax_lab import bench
from softmax_lab.kernels import cooperative_softmax, fused, multirow
from softmax_lab.kernels.unaligned import unaligned_cooperative_softmax, unaligned_softmax
from softmax_lab.kernels.unaligned_resident import unaligned_resident_softmax

F32, F16, BF16 = torch.float32, torch.float16, torch.bfloat16


def with_vec(module, vec, **knobs):
    """The register kernel of ``module`` (fused or multirow) launched with its ints in pieces of ``vec``."""
    def run(x, out):
        kernel, grid, args, options = module.launch_setup(out, x, **knobs)
        y, x_, *_ = args
        sx, sy, n = x.stride(0), out.stride(0), x.shape[1]
        ints = (sx // vec, sy // vec, x.shape[0], n // vec) if module is multirow else (sx // vec, sy // vec, n // vec)
        kernel[grid](y, x_, *ints, **dict(options, VEC=vec))
        return out
    name = f"{module.__name__.rsplit('.', 1)[1]} VEC={vec}"
    return name, run, dict(knobs, VEC=vec)


def resident(*warps):
    return [("unaligned_resident", lambda x, out, w=w: unaligned_resident_softmax(x, out=out, num_warps=w),
             dict(num_warps=w)) for w in warps]


def cooperative(block=4096, warps=4):
    return [("unaligned_cooperative", lambda x, out: unaligned_cooperative_softmax(x, out=out, BLOCK=block,
                                                                                     num_warps=warps),
             dict(BLOCK=block, num_warps=warps))]


def tiles(*rows_warps):
    return [("unaligned", lambda x, out, r=r, w=w: unaligned_softmax(x, out=out, ROWS=r, num_warps=w),
             dict(ROWS=r, num_warps=w)) for r, w in rows_warps]


# Probe a (recorded: h200-odd-widths-round3-a.json) ran at commit acb1d32, with a third candidate since removed: short
# rows packed end to end (kernels/packed.py, in git history): 34-37% at 65536x130 bf16, 85-104% at 100000x77 fp32.
FORWARD_A = [
    ((2048, 50257, BF16), cooperative() + resident(8, 16, 32)),
    ((2048, 50257, F16), cooperative() + resident(8, 16)),
    ((1024, 50257, F32), resident(16, 32)),
    ((4096, 20001, BF16), cooperative() + resident(4, 8, 16)),
    ((8192, 10001, BF16), [with_vec(fused, 1, num_warps=16)] + resident(4, 8)),
    ((16384, 4101, BF16), [with_vec(fused, 1, num_warps=8)] + resident(4, 8)),
    ((65536, 130, BF16), [with_vec(multirow, 1, ROWS=4, num_warps=2)]
     + [with_vec(multirow, 2, ROWS=r, num_warps=w) for r, w in ((4, 2), (8, 2), (8, 4), (16, 4))] + tiles((8, 2))),
    ((8192, 4100, BF16), [with_vec(fused, 1, num_warps=8)] + [with_vec(fused, 4, num_warps=w) for w in (4, 8, 16)]),
    ((32768, 1002, F32), [with_vec(multirow, 1, ROWS=1, num_warps=4), with_vec(multirow, 2, ROWS=1, num_warps=4)]),
    ((100000, 77, F32), tiles((8, 2))),
]
# Probe b: the limits of the rules (where the window in shared memory starts to win, its warps, short rows' tiles).
FORWARD_B = [
    ((65536, 130, BF16), [with_vec(multirow, 2, ROWS=r, num_warps=w) for r, w in ((4, 2), (8, 2), (16, 2), (4, 1),
                                                                                   (8, 1))]),
    ((65536, 129, BF16), [with_vec(multirow, 1, ROWS=r, num_warps=w) for r, w in ((4, 2), (8, 2), (16, 2))]),
    ((65536, 1025, BF16), [with_vec(multirow, 1, ROWS=1, num_warps=4)] + resident(1, 2, 4)),
    ((32768, 2049, BF16), [with_vec(fused, 1, num_warps=8)] + resident(2, 4)),
    ((16384, 4100, BF16), [with_vec(fused, 4, num_warps=4)] + resident(2, 4)),
    ((16384, 4102, BF16), [with_vec(fused, 2, num_warps=4)] + resident(4)),
    ((8192, 10001, BF16), resident(2, 4)),
    ((4096, 30001, BF16), resident(4, 8)),
    ((2048, 50257, BF16), cooperative() + resident(8)),
    ((2048, 40001, F32), [("cooperative (register)", lambda x, out: cooperative_softmax(x, out=out, BLOCK=8192,
                                                                                        num_warps=4),
                           dict(BLOCK=8192, num_warps=4))] + resident(16, 32)),
    ((2048, 20001, F32), tiles((1, 16)) + resident(8, 16)),
]


def main(path, probe="b"):
    bench.sweep(path, [(*shape, candidates, dict(rep_ms=30)) for shape, candidates in
                       (FORWARD_A if probe == "a" else FORWARD_B)],
                "python3 benchmarks/sweeps/odd_widths_round3.py " + " ".join(sys.argv[1:]))


if __name__ == "__main__":
    main(*sys.argv[1:])
