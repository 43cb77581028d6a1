"""Chapter 9's checks of the property each exercise teaches, proved with mutants: a sector counter that ignores
where an access ends (ch09-sectors), a tree that starts its max from 0 (ch09-block-tree).

Sizes are tiny (numba's simulator runs them in CI); the solutions pass the same checks.
"""
import pytest

from softmax_lab import cuda_layer  # noqa: F401 - before numba: it picks the CUDA simulator on a CPU
from mutant_helpers import fails_naming, passes
from softmax_lab.checks import ch09

# the course's own kernels stand in for learners' code here (correct ones and known mutants)
pytestmark = pytest.mark.usefixtures("allow_package_code")


# ========================================================================================= chapter 9

def test_sectors_mutant_that_ignores_where_an_access_ends(capsys):
    from softmax_lab import cuda_layer as cl

    def first_byte_only(addresses, access_bytes=4):
        return len({a // 32 for a in addresses}), len({a // 128 for a in addresses})

    cases = list(ch09.sectors._sector_cases())
    old = [c for c in cases if "straddle" not in c[0]]
    assert all(first_byte_only(a, b) == cl.count_sectors(a, b) for _, a, b in old)  # the old cases pass it
    fails_naming(ch09.check_sectors, [first_byte_only], "ch09-sectors", ["straddle"], capsys)


def course_kernel_edited(exercise_module, kernel, old, new, count=1):
    """A mutant: one of the course's CUDA kernels (``cuda_layer.kernels``) with ``old`` replaced by ``new``, loaded
    from its own file (numba and the checks read a kernel's source)."""
    import inspect

    from softmax_lab.cuda_layer import kernels as K

    source = inspect.getsource(getattr(K, kernel).py_func)
    assert source.count(old) == count, f"{kernel}: expected {count} x {old!r}"
    module = exercise_module("mutant", source=CUDA_HEADER + "import math\n\n" + source.replace(old, new))
    return getattr(module, kernel)


def test_block_tree_identity_mutant_is_named(exercise_module, capsys):
    # the max starts at 0, not -inf: a thread with no column adds a 0
    max_from_zero = course_kernel_edited(exercise_module, "block_softmax_kernel", "m = float32(-math.inf)",
                                         "m = float32(0.0)")
    fails_naming(ch09.check_block_tree, [max_from_zero], "ch09-block-tree", ["-inf"], capsys)


# ========================================================= chapter 9's reader barrier: only barriers may be added

CUDA_HEADER = "from softmax_lab import cuda_layer\nfrom numba import cuda, float32\n"


def test_reader_barrier_cell_solution_and_blank(exercise_module, capsys):
    from conftest import exercise_source

    solved = exercise_module("ch09-reader-barrier", source=CUDA_HEADER + exercise_source("ch09-reader-barrier"))
    passes(ch09.check_reader_barrier, [solved.fixed_kernel], "ch09-reader-barrier", capsys)
    blank = exercise_module("ch09-reader-barrier",
                            source=CUDA_HEADER + exercise_source("ch09-reader-barrier", learner=True))
    fails_naming(ch09.check_reader_barrier, [blank.fixed_kernel], "ch09-reader-barrier", ["not implemented yet"],
                 capsys)


def test_reader_barrier_accepts_only_added_barriers(exercise_module, capsys):
    from softmax_lab.cuda_layer import kernels as K

    # a correct, race-free kernel that is not the buggy body fixed (the shuffle tail): named, though it passes the rest
    out = fails_naming(ch09.check_reader_barrier, [K.shuffle_tail_kernel], "ch09-reader-barrier",
                       ["add cuda.syncthreads() lines only", "while stride > 32:"], capsys)
    assert "PASS  race check" in out
    # the buggy body untouched: no barrier added, and the race named
    fails_naming(ch09.check_reader_barrier, [K.block_softmax_missing_barrier_kernel], "ch09-reader-barrier",
                 ["no cuda.syncthreads() was added", "reader barrier is missing"], capsys)
    # only a barrier added, in a place where it protects nothing: the source is fine, the race is not
    barrier_after_the_wrong_write = course_kernel_edited(
        exercise_module, "block_softmax_missing_barrier_kernel", "    shared[tid] = total\n",
        "    shared[tid] = total\n    cuda.syncthreads()\n")
    out = fails_naming(ch09.check_reader_barrier, [barrier_after_the_wrong_write], "ch09-reader-barrier",
                       ["reader barrier is missing"], capsys)
    assert "PASS  the buggy kernel's body" in out
