"""The global loads and stores per thread, by width, of the kernels that take a bf16 row of 50,257 elements, compiled
for an H200 (sm_90) on any machine (Triton's own ptxas and cuobjdump; softmax_lab.machine_code): the cooperative
kernel with its ints in elements (what ran before: rows are not whole 16-byte vectors) against the unaligned
cooperative kernel (whole vectors from the boundary before each row), both as the dispatcher launched them
(BLOCK=4096 and 4 warps for the second), the backward pair, and the window in shared memory that the dispatcher
runs now (unaligned_resident, 8 warps). Prints JSON; writes it to the path given.

    PYTHONPATH=code python benchmarks/sass_widths.py benchmarks/records/sass-widths-50257-bf16.json
"""
import json
import sys

import torch

torch.cuda.is_available = lambda: True  # compile as for a GPU (nothing is launched), before softmax_lab picks one

# (E402: these must come after the patch above)
from softmax_lab.kernels.cooperative import cooperative_backward_kernel, cooperative_softmax_kernel  # noqa: E402
from softmax_lab.kernels.unaligned import (unaligned_cooperative_backward_kernel,  # noqa: E402
                                           unaligned_cooperative_kernel)
from softmax_lab.kernels.unaligned_resident import shared_window, unaligned_resident_kernel  # noqa: E402
from softmax_lab.machine_code import compile_for_h200, sass_ops  # noqa: E402


def widths(kernel, signature, constexprs, num_warps):
    ints = tuple(name for name, kind in signature.items() if kind == "i32")  # (not multiples of 16: 50257)
    ops, registers = sass_ops(compile_for_h200(kernel, signature, constexprs, num_warps, unaligned=ints))
    memory = {op: n for op, n in sorted(ops.items()) if op.startswith(("LDG", "STG")) and op != "LDGDEPBAR"}
    return dict(memory, registers=registers)


P, I, C = "*bf16", "i32", "constexpr"
out = {
    "cooperative (ints in elements, BLOCK=8192, 4 warps)": widths(cooperative_softmax_kernel, dict(
        out_ptr=P, in_ptr=P, pair_ptr="*fp32", count_ptr="*i32", in_row_stride=I, out_row_stride=I, n_cols=I,
        n_chunks=I, BLOCK=C, TILES=C, CHUNKS=C, KEEP_16=C, PUBLISH=C, FINISH=C, VEC=C), dict(
        BLOCK=8192, TILES=1, CHUNKS=8, KEEP_16=False, PUBLISH=True, FINISH=True, VEC=1), 4),
    "unaligned cooperative (BLOCK=4096, 4 warps)": widths(unaligned_cooperative_kernel, dict(
        out_ptr=P, in_ptr=P, pair_ptr="*fp32", count_ptr="*i32", in_first=I, in_row_stride=I, out_first=I,
        out_row_stride=I, n_cols=I, n_chunks=I, BLOCK=C, CHUNKS=C, PUBLISH=C, FINISH=C, VEC=C, SAME_HEADS=C), dict(
        BLOCK=4096, CHUNKS=16, PUBLISH=True, FINISH=True, VEC=8, SAME_HEADS=True), 4),
    "cooperative backward (ints in elements, BLOCK=8192, 8 warps)": widths(cooperative_backward_kernel, dict(
        dx_ptr=P, y_ptr=P, dy_ptr=P, dot_ptr="*fp32", count_ptr="*i32", y_row_stride=I, dy_row_stride=I,
        dx_row_stride=I, n_cols=I, n_chunks=I, BLOCK=C, CHUNKS=C, PUBLISH=C, FINISH=C, VEC=C), dict(
        BLOCK=8192, CHUNKS=8, PUBLISH=True, FINISH=True, VEC=1), 8),
    "unaligned cooperative backward (BLOCK=8192, 4 warps)": widths(unaligned_cooperative_backward_kernel, dict(
        dx_ptr=P, y_ptr=P, dy_ptr=P, dot_ptr="*fp32", count_ptr="*i32", first=I, y_row_stride=I, dy_row_stride=I,
        dx_row_stride=I, n_cols=I, n_chunks=I, BLOCK=C, CHUNKS=C, PUBLISH=C, FINISH=C, VEC=C), dict(
        BLOCK=8192, CHUNKS=8, PUBLISH=True, FINISH=True, VEC=8), 4),
    "unaligned resident (8 warps; LDGSTS: cp.async into shared memory)": widths(unaligned_resident_kernel, dict(
        out_ptr=P, in_ptr=P, in_first=I, in_row_stride=I, out_first=I, out_row_stride=I, n_cols=I, BLOCK=C, CHUNK=C),
        dict(zip(("BLOCK", "CHUNK"), shared_window(50257, 2, 8))), 8),
}
text = json.dumps(out, indent=1)
print(text)
if len(sys.argv) > 1:
    with open(sys.argv[1], "w") as fh:
        fh.write(text + "\n")
