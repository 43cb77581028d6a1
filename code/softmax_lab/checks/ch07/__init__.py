"""Checks for chapter 7, performance: one module per exercise, named after its id (``ch07-row-vector`` ->
``row_vector.py``), each holding the exercise's case table, its notebook check and the grader's judge.

* ``bandwidth``: bytes moved and GB/s, exact arithmetic on the seeds' figures;
* ``rows``: rows per program for short rows (``rows_rule``), fresh random shapes every run;
* ``multirow``, ``persistent``: the ``[ROWS, BLOCK]`` and persistent kernels written from scratch, checked on
  boundary and strided shapes and counted with ``memcount`` (shared helpers: ``_kernels.py``);
* ``warps``, ``occupancy``: the counts behind ``BLOCK``/``num_warps`` and programs per SM, on the H200's limits
  (``_hardware.py``), spills checked against what the H200 compiler really did;
* ``row_vector``: the ``VEC`` a register kernel may take its ints in;
* ``targets``: two performance targets, judged on the H200's recorded runs (``data/ch07_targets_h200.json``) or,
  for knobs it never ran, a proxy's rules calibrated on them (timed on a GPU).

Notebooks import the checks from ``softmax_lab.checks`` (or from here); the names below stay importable.
"""
from ._hardware import BLOCKS_PER_SM, REG_OVERHEAD, REGS_PER_SM, SHARED_PER_SM, THREADS_PER_SM, WARPS
from .bandwidth import BANDWIDTH_CASES, READS_PER_ELEMENT, check_bandwidth
from .multirow import MULTIROW_CASES, check_multirow
from .occupancy import OCCUPANCY_CASES, check_occupancy, occupancy_rule
from .persistent import PERSISTENT_CASES, check_persistent
from .row_vector import VECTOR_CASES, check_row_vector, vector_rule
from .rows import MAX_TILE, PROGRAMS_PER_SM, ROWS_CASES, check_choose_rows, rows_rule
from .targets import TARGETS, check_targets
from .warps import H200_REGISTERS, check_warps, spill_rule, values_rule

__all__ = ["check_bandwidth", "check_choose_rows", "check_multirow", "check_persistent", "check_warps",
           "check_occupancy", "check_row_vector", "check_targets",
           # the cases, rules and H200 limits, importable from here as before the chapter became a package
           "BLOCKS_PER_SM", "REG_OVERHEAD", "REGS_PER_SM", "SHARED_PER_SM", "THREADS_PER_SM", "WARPS",
           "BANDWIDTH_CASES", "READS_PER_ELEMENT", "MULTIROW_CASES", "OCCUPANCY_CASES", "occupancy_rule",
           "PERSISTENT_CASES",
           "VECTOR_CASES", "vector_rule", "MAX_TILE", "PROGRAMS_PER_SM", "ROWS_CASES", "rows_rule", "TARGETS",
           "H200_REGISTERS", "spill_rule", "values_rule"]
