"""Chapter 7's checks of the property each exercise teaches, proved with mutants.

Each mutant is a wrong answer a learner could hand in. It passes what the chapter checked before (output values
on contiguous rows, the chapter's fixed list of cases) and must fail the check of the property taught, with a
FAIL line that names the mistake: a table of answers instead of the rule (ch07-rows), one program per row or a
floor-divided grid (ch07-multirow), an output that ignores its own row stride, a tile read twice, a persistent
kernel that is not persistent or writes rows several times, counts without the warp size, a VEC that does not
divide every row stride (ch07-row-vector), knobs that miss a target (ch07-targets).

Sizes are tiny (the CPU interpreter runs them in CI); the solutions pass the same checks.
"""
import softmax_lab
import pytest
import torch
import triton
import triton.language as tl

from mutant_helpers import fails_naming, passes, run, values_only
from softmax_lab.checks import ch07
from softmax_lab.checks.ch07 import targets
from softmax_lab.device import DEVICE

# the course's own kernels stand in for learners' code here (correct ones and known mutants)
pytestmark = pytest.mark.usefixtures("allow_package_code")


# ============================================================================ the multi-row kernel (a)

@triton.jit
def multirow_kernel(out_ptr, in_ptr, in_row_stride, out_row_stride, n_rows, n_cols,
                    ROWS: tl.constexpr, BLOCK: tl.constexpr):
    rows = tl.program_id(0).to(tl.int64) * ROWS + tl.arange(0, ROWS)
    cols = tl.arange(0, BLOCK)
    live = rows[:, None] < n_rows
    mask = live & (cols[None, :] < n_cols)
    x = tl.load(in_ptr + rows[:, None] * in_row_stride + cols[None, :], mask=mask, other=float("-inf"))
    x = tl.where(live, x.to(tl.float32), 0.0)
    x = x - tl.max(x, axis=1)[:, None]
    num = tl.exp(x)
    y = num / tl.sum(num, axis=1)[:, None]
    tl.store(out_ptr + rows[:, None] * out_row_stride + cols[None, :], y.to(out_ptr.dtype.element_ty), mask=mask)


@triton.jit
def multirow_twice_kernel(out_ptr, in_ptr, in_row_stride, out_row_stride, n_rows, n_cols,
                          ROWS: tl.constexpr, BLOCK: tl.constexpr):  # reads the tile for the max, then again
    rows = tl.program_id(0).to(tl.int64) * ROWS + tl.arange(0, ROWS)
    cols = tl.arange(0, BLOCK)
    live = rows[:, None] < n_rows
    mask = live & (cols[None, :] < n_cols)
    ptrs = in_ptr + rows[:, None] * in_row_stride + cols[None, :]
    m = tl.max(tl.where(live, tl.load(ptrs, mask=mask, other=float("-inf")), 0.0), axis=1)
    x = tl.where(live, tl.load(ptrs, mask=mask, other=float("-inf")), 0.0)
    num = tl.exp(x - m[:, None])
    y = num / tl.sum(num, axis=1)[:, None]
    tl.store(out_ptr + rows[:, None] * out_row_stride + cols[None, :], y, mask=mask)


@triton.jit
def multirow_rows_unmasked_kernel(out_ptr, in_ptr, in_row_stride, out_row_stride, n_rows, n_cols,
                                  ROWS: tl.constexpr, BLOCK: tl.constexpr):  # the load masks columns only
    rows = tl.program_id(0).to(tl.int64) * ROWS + tl.arange(0, ROWS)
    cols = tl.arange(0, BLOCK)
    live = rows[:, None] < n_rows
    x = tl.load(in_ptr + rows[:, None] * in_row_stride + cols[None, :], mask=cols[None, :] < n_cols,
                other=float("-inf"))
    x = tl.where(live, x.to(tl.float32), 0.0)
    num = tl.exp(x - tl.max(x, axis=1)[:, None])
    y = num / tl.sum(num, axis=1)[:, None]
    tl.store(out_ptr + rows[:, None] * out_row_stride + cols[None, :], y.to(out_ptr.dtype.element_ty),
             mask=live & (cols[None, :] < n_cols))


def multirow_rows_unmasked(x, out, ROWS, num_warps=4):
    n_rows, n_cols = x.shape
    multirow_rows_unmasked_kernel[(triton.cdiv(n_rows, ROWS),)](out, x, x.stride(0), out.stride(0), n_rows, n_cols,
                                                                ROWS=ROWS, BLOCK=triton.next_power_of_2(n_cols))
    return out


def multirow(x, out, ROWS, num_warps=4):
    n_rows, n_cols = x.shape
    multirow_kernel[(triton.cdiv(n_rows, ROWS),)](out, x, x.stride(0), out.stride(0), n_rows, n_cols, ROWS=ROWS,
                                                  BLOCK=triton.next_power_of_2(n_cols), num_warps=num_warps)
    return out


def multirow_one_program_per_row(x, out, ROWS, num_warps=4):  # grid = n_rows: the extra programs do nothing
    n_rows, n_cols = x.shape
    multirow_kernel[(n_rows,)](out, x, x.stride(0), out.stride(0), n_rows, n_cols, ROWS=ROWS,
                               BLOCK=triton.next_power_of_2(n_cols))
    return out


def multirow_floor_grid(x, out, ROWS, num_warps=4):  # the wrong ROWS rule for the grid: drops the last rows
    n_rows, n_cols = x.shape
    multirow_kernel[(max(1, n_rows // ROWS),)](out, x, x.stride(0), out.stride(0), n_rows, n_cols, ROWS=ROWS,
                                               BLOCK=triton.next_power_of_2(n_cols))
    return out


def multirow_out_stride_ignored(x, out, ROWS, num_warps=4):  # steps output rows with the input's stride
    n_rows, n_cols = x.shape
    multirow_kernel[(triton.cdiv(n_rows, ROWS),)](out, x, x.stride(0), x.stride(0), n_rows, n_cols, ROWS=ROWS,
                                                  BLOCK=triton.next_power_of_2(n_cols))
    return out


def multirow_reads_twice(x, out, ROWS, num_warps=4):
    n_rows, n_cols = x.shape
    multirow_twice_kernel[(triton.cdiv(n_rows, ROWS),)](out, x, x.stride(0), out.stride(0), n_rows, n_cols,
                                                        ROWS=ROWS, BLOCK=triton.next_power_of_2(n_cols))
    return out


def blank_launcher(*args, **kwargs):
    raise NotImplementedError("exercise: replace this line with your code")


def test_multirow_solution_and_blank(capsys):
    passes(ch07.check_multirow, [multirow], "ch07-multirow", capsys)
    out = fails_naming(ch07.check_multirow, [blank_launcher], "ch07-multirow", ["not implemented yet"], capsys)
    assert "(0/" in out.strip().splitlines()[-1]


@pytest.mark.parametrize("mutant, words", [
    (multirow_one_program_per_row, ["9 programs, expected", "one program per row"]),
    (multirow_out_stride_ignored, ["has its own row stride", "stepped by the input's row stride"]),
    (multirow_reads_twice, ["read 2 times", "one read per element is the minimum"]),
], ids=["one-program-per-row", "output-stride-ignored", "reads-twice"])
def test_multirow_mutants_pass_values_only_and_fail_the_property(mutant, words, capsys):
    assert values_only(lambda x, out: mutant(x, out, ROWS=2)) == []
    fails_naming(ch07.check_multirow, [mutant], "ch07-multirow", words, capsys)


def test_multirow_unmasked_padding_rows_are_out_of_bounds_reads(capsys):
    """A load that masks the columns only reads past the tensor for the last program's padding rows: named as
    reads outside the input, not as scratch traffic."""
    fails_naming(ch07.check_multirow, [multirow_rows_unmasked], "ch07-multirow",
                 ["not the input's elements", "padding"], capsys)


def test_multirow_floor_grid_is_named(capsys):
    fails_naming(ch07.check_multirow, [multirow_floor_grid], "ch07-multirow",
                 ["never written", "the grid was rounded down"], capsys)


# ============================================================================ the persistent kernel (b)

@triton.jit
def persistent_kernel(out_ptr, in_ptr, in_row_stride, out_row_stride, n_rows, n_cols,
                      BLOCK: tl.constexpr, NUM_STAGES: tl.constexpr, STEP_ONE: tl.constexpr = False):
    start = tl.program_id(0).to(tl.int64)
    step = 1 if STEP_ONE else tl.num_programs(0)
    cols = tl.arange(0, BLOCK)
    mask = cols < n_cols
    for row in tl.range(start, n_rows, step, num_stages=NUM_STAGES):
        x = tl.load(in_ptr + row * in_row_stride + cols, mask=mask, other=float("-inf")).to(tl.float32)
        x = x - tl.max(x, axis=0)
        num = tl.exp(x)
        y = num / tl.sum(num, axis=0)
        tl.store(out_ptr + row * out_row_stride + cols, y.to(out_ptr.dtype.element_ty), mask=mask)


def persistent(x, out, n_programs, num_warps=4, num_stages=2, grid=None, step_one=False, out_stride=None):
    n_rows, n_cols = x.shape
    grid = grid or (min(n_programs, n_rows),)
    persistent_kernel[grid](out, x, x.stride(0), out.stride(0) if out_stride is None else out_stride, n_rows,
                            n_cols, BLOCK=triton.next_power_of_2(n_cols), NUM_STAGES=num_stages, STEP_ONE=step_one,
                            num_warps=num_warps)
    return out


@triton.jit
def persistent_chunks_kernel(out_ptr, in_ptr, in_row_stride, out_row_stride, n_rows, n_cols,
                             BLOCK: tl.constexpr, NUM_STAGES: tl.constexpr):
    """Another design the spec allows: program p takes one run of consecutive rows, not every P-th row."""
    per = tl.cdiv(n_rows, tl.num_programs(0))
    start = tl.program_id(0).to(tl.int64) * per
    cols = tl.arange(0, BLOCK)
    mask = cols < n_cols
    for row in tl.range(start, tl.minimum(start + per, n_rows), 1, num_stages=NUM_STAGES):
        x = tl.load(in_ptr + row * in_row_stride + cols, mask=mask, other=float("-inf")).to(tl.float32)
        num = tl.exp(x - tl.max(x, axis=0))
        tl.store(out_ptr + row * out_row_stride + cols, (num / tl.sum(num, axis=0)).to(out_ptr.dtype.element_ty),
                 mask=mask)


def persistent_chunks(x, out, n_programs, num_warps=4, num_stages=2):
    n_rows, n_cols = x.shape
    persistent_chunks_kernel[(min(n_programs, n_rows),)](out, x, x.stride(0), out.stride(0), n_rows, n_cols,
                                                         BLOCK=triton.next_power_of_2(n_cols), NUM_STAGES=num_stages,
                                                         num_warps=num_warps)
    return out


@triton.jit
def persistent_chunks_floor_kernel(out_ptr, in_ptr, in_row_stride, out_row_stride, n_rows, n_cols,
                                   BLOCK: tl.constexpr, NUM_STAGES: tl.constexpr):
    """Runs of n_rows // P rows: the leftover rows at the end belong to no program."""
    per = n_rows // tl.num_programs(0)
    start = tl.program_id(0).to(tl.int64) * per
    cols = tl.arange(0, BLOCK)
    mask = cols < n_cols
    for row in tl.range(start, start + per, 1, num_stages=NUM_STAGES):
        x = tl.load(in_ptr + row * in_row_stride + cols, mask=mask, other=float("-inf")).to(tl.float32)
        num = tl.exp(x - tl.max(x, axis=0))
        tl.store(out_ptr + row * out_row_stride + cols, (num / tl.sum(num, axis=0)).to(out_ptr.dtype.element_ty),
                 mask=mask)


def persistent_chunks_floor(x, out, n_programs, num_warps=4, num_stages=2):
    n_rows, n_cols = x.shape
    persistent_chunks_floor_kernel[(min(n_programs, n_rows),)](out, x, x.stride(0), out.stride(0), n_rows, n_cols,
                                                               BLOCK=triton.next_power_of_2(n_cols),
                                                               NUM_STAGES=num_stages, num_warps=num_warps)
    return out


def test_persistent_leftover_rows_are_named_unwritten(capsys):
    """Runs of n_rows // P rows leave the last rows to no program: the check says they were never written (not a
    missing max or a wrong stride)."""
    out = fails_naming(ch07.check_persistent, [persistent_chunks_floor], "ch07-persistent",
                       ["output rows were never written", "no program took those rows"], capsys)
    assert "row max" not in out and "stepped by" not in out, out


@triton.jit
def persistent_loop_to_kernel(out_ptr, in_ptr, in_row_stride, out_row_stride, n_rows, n_cols,
                              BLOCK: tl.constexpr, NUM_STAGES: tl.constexpr):
    """Correct on a GPU; in the interpreter the loop variable is a Python int, which has no .to()."""
    cols = tl.arange(0, BLOCK)
    mask = cols < n_cols
    for row in tl.range(tl.program_id(0), n_rows, tl.num_programs(0), num_stages=NUM_STAGES):
        r = row.to(tl.int64)
        x = tl.load(in_ptr + r * in_row_stride + cols, mask=mask, other=float("-inf")).to(tl.float32)
        num = tl.exp(x - tl.max(x, axis=0))
        tl.store(out_ptr + r * out_row_stride + cols, (num / tl.sum(num, axis=0)).to(out_ptr.dtype.element_ty),
                 mask=mask)


def persistent_loop_to(x, out, n_programs, num_warps=4, num_stages=2):
    n_rows, n_cols = x.shape
    persistent_loop_to_kernel[(min(n_programs, n_rows),)](out, x, x.stride(0), out.stride(0), n_rows, n_cols,
                                                          BLOCK=triton.next_power_of_2(n_cols),
                                                          NUM_STAGES=num_stages, num_warps=num_warps)
    return out


@pytest.mark.skipif(softmax_lab.ON_GPU, reason="the interpreter's Python-int loop variable: CPU only")
def test_persistent_loop_variable_to_is_explained_on_the_cpu(capsys):
    fails_naming(ch07.check_persistent, [persistent_loop_to], "ch07-persistent",
                 ["has no attribute 'to'", "loop variable of tl.range is a plain Python int"], capsys)


def test_persistent_check_takes_any_sharing_of_rows(capsys):
    """The prose leaves the sharing out of rows to the learner: runs of consecutive rows pass like every P-th row."""
    passes(ch07.check_persistent, [persistent_chunks], "ch07-persistent", capsys)


def persistent_one_program_per_row(x, out, n_programs, num_warps=4, num_stages=2):
    return persistent(x, out, n_programs, grid=(x.shape[0],))


def persistent_step_one(x, out, n_programs, num_warps=4, num_stages=2):  # every program walks to the end
    return persistent(x, out, n_programs, step_one=True)


def persistent_out_stride_ignored(x, out, n_programs, num_warps=4, num_stages=2):
    return persistent(x, out, n_programs, out_stride=x.shape[1])


def test_persistent_solution_and_blank(capsys):
    passes(ch07.check_persistent, [persistent], "ch07-persistent", capsys)
    fails_naming(ch07.check_persistent, [blank_launcher], "ch07-persistent", ["not implemented yet"], capsys)


@pytest.mark.parametrize("mutant, words", [
    (persistent_one_program_per_row, ["21 rows", "one program per row"]),
    (persistent_step_one, ["written", "exactly one", "their rows overlap"]),
    (persistent_out_stride_ignored, ["has its own row stride", "stepped by n_cols"]),
], ids=["one-program-per-row", "rows-written-several-times", "output-stride-ignored"])
def test_persistent_mutants_pass_values_only_and_fail_the_property(mutant, words, capsys):
    assert values_only(lambda x, out: mutant(x, out, n_programs=2)) == []
    fails_naming(ch07.check_persistent, [mutant], "ch07-persistent", words, capsys)


# ======================================================================================= ch07-rows

def rows_rule(M, N, n_sms):
    block = triton.next_power_of_2(N)
    rows = 1
    while rows * 2 * block <= 4096 and triton.cdiv(M, rows * 2) >= 4 * n_sms:
        rows *= 2
    return rows


ANSWERS = {(M, N, s): rows_rule(M, N, s) for M, N, s in ch07.ROWS_CASES}


def rows_from_a_table(M, N, n_sms):  # the named cases' answers, and a guess elsewhere
    return ANSWERS.get((M, N, n_sms), max(1, 4096 // triton.next_power_of_2(N)))


def test_rows_solution_passes(capsys):
    passes(ch07.check_choose_rows, [rows_rule], "ch07-rows", capsys)


def test_rows_table_passes_the_named_cases_and_fails_the_fresh_ones(capsys):
    ok, out = run(ch07.check_choose_rows, rows_from_a_table, capsys=capsys)
    named = [ln for ln in out.splitlines() if ln.startswith(("PASS", "FAIL")) and "fresh" not in ln]
    assert len(named) == len(ch07.ROWS_CASES) and all(ln.startswith("PASS") for ln in named), out
    assert not ok and any(ln.startswith("FAIL") and "fresh random shapes" in ln for ln in out.splitlines()), out


# ============================================================================ counts: warps, occupancy

def values_per_thread(BLOCK, num_warps):
    return max(1, BLOCK // (32 * num_warps))


def one_knob_sweeps(n_cols):
    b = triton.next_power_of_2(n_cols)
    return [(b, w) for w in (1, 2, 4, 8, 16)], [(b * k, 4) for k in (1, 2, 4)]


def predict_spill(BLOCK, num_warps):
    return values_per_thread(BLOCK, num_warps) + 24 > min(255, 65536 // (32 * num_warps))


def test_warps_solution_and_mutants(capsys):
    passes(ch07.check_warps, [values_per_thread, one_knob_sweeps, predict_spill], "ch07-warps", capsys)
    fails_naming(ch07.check_warps, [lambda b, w: b // w, one_knob_sweeps, predict_spill], "ch07-warps",
                 ["a warp is 32 threads"], capsys)
    fails_naming(ch07.check_warps, [values_per_thread, one_knob_sweeps,
                                    lambda b, w: values_per_thread(b, w) + 24 > 255], "ch07-warps",
                 ["H200", "with 32 warps", "not the limit that binds"], capsys)
    fails_naming(ch07.check_warps, [values_per_thread, one_knob_sweeps,  # the SM's share only, no 255 per thread
                                    lambda b, w: values_per_thread(b, w) + 24 > 65536 // (32 * w)], "ch07-warps",
                 ["BLOCK = 8192, num_warps = 1", "a thread may use at most 255"], capsys)
    fails_naming(ch07.check_warps, [lambda b, w: b // (32 * w), one_knob_sweeps, predict_spill], "ch07-warps",
                 ["every thread still holds 1 value"], capsys)  # a block smaller than the program: 0 values
    both = lambda n: ([(triton.next_power_of_2(n) * k, 4 * k) for k in (1, 2, 4)],) * 2
    fails_naming(ch07.check_warps, [values_per_thread, both, predict_spill], "ch07-warps",
                 ["one knob at a time"], capsys)


# ================================================================================== ch07-row-vector
def row_vector(n_cols, *tensors):
    vec = 16 // max(t.element_size() for t in tensors)
    whole = n_cols % vec == 0 and all(t.stride(0) % vec == 0 for t in tensors)
    return vec if whole else 1


def test_row_vector_solution_and_mutants(capsys):
    """VEC is a promise to the compiler: one that ignores a stride is caught by running the fused kernel with it
    (wrong rows), one that only looks at the first tensor misses the output's stride and the widest dtype, and
    the compiler's own rule (multiples of 16) or always 1 is correct but gives up the wide accesses."""
    passes(ch07.check_row_vector, [row_vector], "ch07-row-vector", capsys)
    fails_naming(ch07.check_row_vector, [lambda n, *t: (_ for _ in ()).throw(NotImplementedError("x"))],
                 "ch07-row-vector", ["not implemented yet"], capsys)
    no_strides = lambda n, *t: (16 // max(x.element_size() for x in t)
                                if n % (16 // max(x.element_size() for x in t)) == 0 else 1)
    fails_naming(ch07.check_row_vector, [no_strides], "ch07-row-vector", ["rows wrong", "row stride (1002)"], capsys)
    first = lambda n, *t: (16 // t[0].element_size()
                           if n % (16 // t[0].element_size()) == 0 and t[0].stride(0) % (16 // t[0].element_size()) == 0
                           else 1)
    fails_naming(ch07.check_row_vector, [first], "ch07-row-vector", ["output's row stride (1001)", "4-byte elements"],
                 capsys)
    narrowest = lambda n, *t: (16 // min(x.element_size() for x in t)  # the narrowest dtype decides: too wide
                               if all(v % (16 // min(x.element_size() for x in t)) == 0
                                      for v in [n] + [x.stride(0) for x in t]) else 1)
    fails_naming(ch07.check_row_vector, [narrowest], "ch07-row-vector",
                 ["VEC = 8, expected 4", "4-byte elements", "32 bytes, more than one 16-byte access"], capsys)
    sixteen = lambda n, *t: row_vector(n, *t) if n % 16 == 0 and all(x.stride(0) % 16 == 0 for x in t) else 1
    for wrong in (sixteen, lambda n, *t: 1):
        fails_naming(ch07.check_row_vector, [wrong], "ch07-row-vector", ["VEC = 1, expected 4", "16 bytes at a time"],
                     capsys)


def programs_per_sm(n_regs, num_warps, shared_bytes=0):
    if shared_bytes > 227 * 1024:
        return 0
    t = 32 * num_warps
    fits = [65536 // (n_regs * t), 2048 // t, 32] + ([228 * 1024 // shared_bytes] if shared_bytes else [])
    return min(fits)


def test_occupancy_solution_and_mutants(capsys):
    passes(ch07.check_occupancy, [programs_per_sm], "ch07-occupancy", capsys)
    fails_naming(ch07.check_occupancy, [lambda r, w, s=0: min(65536 // (r * w), 32)], "ch07-occupancy",
                 ["register limit to a warp's registers as if a warp were one thread", "32 times the"], capsys)
    # the review (issue 26): with every other limit in place, registers counted per warp were told "registers
    # run out first, and your count did not stop there"; every case it fails must name the per-warp count
    per_warp = lambda r, w, s=0: (0 if s > 227 * 1024 else
                                  min([65536 // (r * w), 2048 // (32 * w), 32] + ([228 * 1024 // s] if s else [])))
    ok = ch07.check_occupancy(per_warp)
    fails = [ln for ln in capsys.readouterr().out.splitlines() if ln.startswith("FAIL")]
    assert not ok and len(fails) == 4, fails
    assert all("as if a warp were one thread" in ln and "did not stop there" not in ln for ln in fails), fails
    fails_naming(ch07.check_occupancy, [lambda r, w, s=0: min(65536 // (r * 32 * w), 32)], "ch07-occupancy",
                 ["threads run out first"], capsys)
    fails_naming(ch07.check_occupancy, [lambda r, w, s=0: min(65536 // (r * 32 * w), 2048 // (32 * w), 32)],
                 "ch07-occupancy", ["shared memory runs out first"], capsys)
    no_slots = lambda r, w, s=0: min([65536 // (r * 32 * w), 2048 // (32 * w)]  # forgets the 32 resident programs
                                     + ([228 * 1024 // s] if s else []))
    fails_naming(ch07.check_occupancy, [no_slots], "ch07-occupancy",
                 ["16 registers, 1 warp", "slots for resident programs run out"], capsys)
    fails_naming(ch07.check_occupancy, [lambda r, w, s=0: programs_per_sm(r, w, s) + 0.5], "ch07-occupancy",
                 ["a part of a program does not run"], capsys)
    no_program_limit = lambda r, w, s=0: min([65536 // (r * 32 * w), 2048 // (32 * w), 32]
                                             + ([228 * 1024 // s] if s else []))
    fails_naming(ch07.check_occupancy, [no_program_limit], "ch07-occupancy",
                 ["233000 bytes of shared memory", "cannot launch at all"], capsys)
    decimal_kib = lambda r, w, s=0: (0 if s > 227 * 1024 else min([65536 // (r * 32 * w), 2048 // (32 * w), 32]
                                                                  + ([228000 // s] if s else [])))
    fails_naming(ch07.check_occupancy, [decimal_kib], "ch07-occupancy",
                 ["58368 bytes of shared memory", "228,000 bytes", "5,472 bytes fewer", "leaves out 1 program"], capsys)


# ================================================================================== the targets (d)

GOOD_KNOBS = {"multirow": {"ROWS": 8, "num_warps": 4},
              "persistent": {"programs_per_sm": 8, "num_warps": 4, "num_stages": 2}}


def test_targets_proxy(capsys):
    passes(ch07.check_targets, [lambda: GOOD_KNOBS, multirow, persistent], "ch07-targets", capsys)
    fails_naming(ch07.check_targets, [blank_launcher, multirow, persistent], "ch07-targets",
                 ["not implemented yet"], capsys)
    rows_one = {**GOOD_KNOBS, "multirow": {"ROWS": 1, "num_warps": 4}}  # 42% of copy on the H200
    fails_naming(ch07.check_targets, [rows_one, multirow, persistent], "ch07-targets",
                 ["8 KiB of loads in flight per SM"], capsys)
    big_tile = {**GOOD_KNOBS, "multirow": {"ROWS": 256, "num_warps": 4}}
    fails_naming(ch07.check_targets, [big_tile, multirow, persistent], "ch07-targets", ["spills registers"], capsys)
    unrecorded = {**GOOD_KNOBS, "multirow": {"ROWS": 2, "num_warps": 2}}  # the rules pass it; a GPU decides
    passes(ch07.check_targets, [unrecorded, multirow, persistent], "ch07-targets", capsys)
    quarter = {**GOOD_KNOBS, "persistent": {"programs_per_sm": 4, "num_warps": 4, "num_stages": 2}}  # 68% on the H200
    fails_naming(ch07.check_targets, [quarter, multirow, persistent], "ch07-targets",
                 ["68% is below the target of 80%"], capsys)
    per_row = {**GOOD_KNOBS, "persistent": {"programs_per_sm": 64, "num_warps": 4, "num_stages": 2}}
    fails_naming(ch07.check_targets, [per_row, multirow, persistent], "ch07-targets", ["such programs fit one SM"],
                 capsys)
    fails_naming(ch07.check_targets, [GOOD_KNOBS, multirow_reads_twice, persistent_step_one], "ch07-targets",
                 ["read 2 times"], capsys)


def test_targets_print_the_same_lines_on_cpu_and_gpu(capsys, monkeypatch):
    """A GPU run adds lines only when a target is missed: a passing GPU run prints what the CPU prints."""
    ok, cpu = run(ch07.check_targets, GOOD_KNOBS, multirow, persistent, capsys=capsys)
    monkeypatch.setattr(targets, "ON_GPU", True)
    monkeypatch.setattr(targets, "_timed_problem", lambda *a: "")
    ok2, gpu = run(ch07.check_targets, GOOD_KNOBS, multirow, persistent, capsys=capsys)
    assert ok and ok2 and cpu == gpu
    monkeypatch.setattr(targets, "_timed_problem", lambda key, *a: "timed at 50% of copy" if key == "multirow" else "")
    ok3, slow = run(ch07.check_targets, GOOD_KNOBS, multirow, persistent, capsys=capsys)
    assert not ok3 and "FAIL  target 1 timed on this GPU" in slow


# ============================================================ the notebooks' own exercise cells (solution, blank)


NEW_EXERCISES = [  # (exercise id, check, how the check is called with the cell's module)
    ("ch07-multirow", ch07.check_multirow, lambda m: [m.my_multirow_softmax]),
    ("ch07-persistent", ch07.check_persistent, lambda m: [m.my_persistent_softmax]),
    ("ch07-warps", ch07.check_warps, lambda m: [m.values_per_thread, m.one_knob_sweeps, m.predict_spill]),
    ("ch07-occupancy", ch07.check_occupancy, lambda m: [m.programs_per_sm]),
]


@pytest.mark.parametrize("exercise, check, args", NEW_EXERCISES, ids=[e[0] for e in NEW_EXERCISES])
def test_new_exercise_cells(exercise, check, args, exercise_module, capsys):
    passes(check, args(exercise_module(exercise)), exercise, capsys)
    out = fails_naming(check, args(exercise_module(exercise, learner=True)), exercise, ["not implemented yet"], capsys)
    assert "(0/" in out.strip().splitlines()[-1]


# ============================================== chapter 7's cells after a check, for an untouched learner: one line

@pytest.mark.parametrize("exercise, needle, names", [
    ("ch07-bandwidth", "bytes_moved(*attention)", ["bytes_moved", "achieved_gbps", "reads_per_element"]),
    ("ch07-warps", "warps_sweep, block_sweep = one_knob_sweeps(n_cols)",
     ["values_per_thread", "one_knob_sweeps", "predict_spill"]),
])
def test_chapter_7_demo_cells_say_write_the_exercise_first(exercise, needle, names, exercise_module, capsys):
    from conftest import exercise_notebook
    from softmax_lab.course import build, notebook

    learner = build.learner_notebook(notebook.read(exercise_notebook(exercise)))
    cell = next(c for c in learner.cells if c.cell_type == "code" and needle in c.source)
    blank = exercise_module(exercise, learner=True)
    scope = {"torch": torch, "triton": triton, "softmax_lab": softmax_lab, "DEVICE": DEVICE,
             **{n: getattr(blank, n) for n in names}}
    exec(compile(cell.source, "<notebook cell>", "exec"), scope)
    out = capsys.readouterr().out.strip().splitlines()
    assert out == [f"NotImplementedError: write {exercise} above first"], out


def test_grader_judges_row_vector():
    """The grader's own calls (fresh strided tensors in the sandbox): the solution passes; one that ignores the
    strides fails."""
    import shutil

    from conftest import exercise_source
    from softmax_lab.grading import judge
    from softmax_lab.grading.runner import Limits

    if not shutil.which("bwrap"):
        pytest.skip("needs bubblewrap")
    src = exercise_source("ch07-row-vector")
    line = "whole = n_cols % vec == 0 and all(t.stride(0) % vec == 0 for t in tensors)"
    assert line in src
    good = judge.run("", {"ch07-row-vector": src}, Limits(cell_timeout=60), seed=5)["ch07-row-vector"]
    assert good.ok, good.text("ch07-row-vector")
    seeds = [judge.run("", {"ch07-row-vector": src.replace(line, "whole = n_cols % vec == 0")}, Limits(cell_timeout=60),
                       seed=s)["ch07-row-vector"] for s in (5, 6)]
    assert not all(v.ok for v in seeds), [v.text("ch07-row-vector") for v in seeds]
