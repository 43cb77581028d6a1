"""Checks for chapter 9, the CUDA layer, one module per exercise (``ch09-shuffle-tail`` -> ``shuffle_tail.py``;
shared launching and race detection in ``_blocks.py``): numba ``@cuda.jit`` kernels, real CUDA on a GPU, the
simulator on a CPU.

* ``check_block_tree(kernel)``: a one-block-per-row softmax ``kernel(x, y, n_cols)`` with shared-memory trees.
* ``check_reader_barrier(kernel)``: the library's buggy block kernel with its missing reader barrier added
  (only ``cuda.syncthreads()`` lines may be added to its body).
* ``check_shuffle_tail(warp_max, warp_sum, tail_softmax)``: warp-shuffle reductions and the kernel using them.
* ``check_sectors(sectors_and_lines)``: 32-byte sectors and 128-byte lines of one warp load.

Besides comparing outputs with the float64 reference, every kernel check runs the kernel once in numba's
simulator under the shared-memory race recorder (``softmax_lab.cuda_layer.record_races``), which is
deterministic, so a missing barrier fails on every run and on every machine, also when the output happened
to come out right. Named pitfalls: a missing barrier (by thread, address and line), a wrong stride in the
per-thread loop, a max that starts from 0 instead of -inf, a sector count that ignores where an access ends,
a shuffle of the wrong width (offset 32: a 64-lane wavefront's first step; 8: half a warp).

numba is imported only when a check runs (``import softmax_lab.checks`` stays light). These exercises are
judged in the notebook only for now (``course.registry.NOTEBOOK_ONLY``).
"""
from .block_tree import check_block_tree
from .reader_barrier import check_reader_barrier
from .sectors import check_sectors
from .shuffle_tail import check_shuffle_tail

__all__ = ["check_block_tree", "check_reader_barrier", "check_shuffle_tail", "check_sectors"]
