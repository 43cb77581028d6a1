"""Checks for chapter 9, the CUDA layer, one module per exercise (``ch09-shuffle-tail`` -> ``shuffle_tail.py``;
shared launching and race detection in ``_blocks.py``): numba ``@cuda.jit`` code, real CUDA on a GPU, the simulator
on a CPU. Each module holds the exercise's case table, its notebook check and the grader's judge (``JUDGES``).

* ``check_block_tree(block_max, block_sum)``: device functions that reduce one value per thread as a tree in
  shared memory and give every thread the result (probed thread by thread).
* ``check_reader_barrier(kernel)``: the notebook's racy kernel with one ``cuda.syncthreads()`` line added, and
  nothing else, run on the course's own block reductions (so it does not depend on ch09-block-tree).
* ``check_shuffle_tail(warp_max, warp_sum, tail_kernel)``: warp-shuffle reductions and the kernel using them.
* ``check_sectors(sectors_and_lines, predicted_loads)``: the predicted sectors and lines of four mappings' first
  warp loads, then 32-byte sectors and 128-byte lines of any warp load, counted.
* ``check_profile(dram_bound, traffic_ratio, reread_from_l2, waits_on_memory)``: readings of Nsight Compute
  reports recorded on the H200 (``softmax_lab.profiles``) and of made-up ones (plain Python, no numba).

Besides comparing outputs with the float64 reference, every check of shared memory runs the code once in numba's
simulator under the shared-memory race recorder (``softmax_lab.cuda_layer.record_races``), which is deterministic,
so a missing barrier fails on every run and on every machine, also when the output happened to come out right.
Failures name the mistake (a race by thread, address and line number, a tree that stops early or starts too
small, a serial loop where a tree belongs, a shuffle of the wrong width, a sector count that ignores where an
access ends), never the line that fixes it.

The grader's judges run the learner's ``@cuda.jit`` functions alone, in numba's simulator, in a sandbox without
this package (``grading/judge_harness.py``); numba is imported only when a check runs (``import
softmax_lab.checks`` stays light).
"""
from .block_tree import check_block_tree
from .profile import check_profile
from .reader_barrier import check_reader_barrier
from .sectors import check_sectors
from .shuffle_tail import check_shuffle_tail

__all__ = ["check_block_tree", "check_reader_barrier", "check_shuffle_tail", "check_sectors", "check_profile"]
