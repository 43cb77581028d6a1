"""Chapter 7's exercise checks (bandwidth arithmetic, choosing rows per program): a blank exercise fails with "not
implemented", the solution passes, and each classic mistake fails with a message that names it.

The kernels here are small stand-ins for what a learner writes in the notebook (the solution, and each pitfall
introduced into it); the notebook's own exercise cells are checked too. Sizes stay tiny: these run on the CPU
interpreter in CI.
"""
import softmax_lab  # before triton: picks the device (the interpreter on a CPU)
import pytest
import torch
import triton

from check_helpers import (assert_blank, assert_names, assert_passes, blank,
                           notebook_exercise_blank_says_not_implemented, notebook_exercise_solution_passes)
from softmax_lab.checks import ch07
from softmax_lab.device import DEVICE


def _bytes(M, N, dtype, reads_only=False, itemsize=None):
    size = itemsize or torch.tensor([], dtype=dtype).element_size()
    return (1 if reads_only else 2) * M * N * size


def _gbps(M, N, dtype, ms, gib=False, seconds=False):
    seconds_taken = ms if seconds else ms * 1e-3
    return _bytes(M, N, dtype) / seconds_taken / (2 ** 30 if gib else 1e9)


def _reads():
    return {"row_serial": 3, "three_pass": 2, "fused": 1, "split_row": 2}


def test_reads_per_element_table_is_what_memcount_counts():
    """The prediction's answers are memcount's counts of the course's kernels (the notebook's table), not typed."""
    from softmax_lab.kernels import fused_softmax, row_serial_softmax, split_row_softmax, three_pass_softmax
    from softmax_lab.memcount import count_calls

    x = softmax_lab.testing.randn((8, 100), device=DEVICE, seed=7)
    runs = {"row_serial": (row_serial_softmax, {}), "three_pass": (three_pass_softmax, {}),
            "fused": (fused_softmax, {}), "split_row": (split_row_softmax, dict(chunks=2, BLOCK=32))}
    for name, (fn, knobs) in runs.items():
        _, c = count_calls(fn, x, **knobs)
        assert c.loads_of.get("in_ptr", 0) / x.numel() == ch07.READS_PER_ELEMENT[name], name


@pytest.mark.parametrize("reads, words", [
    (lambda: {"row_serial": 1, "three_pass": 3, "fused": 1, "split_row": 1},
     ["row_serial", "you predicted 1", "three_pass", "split_row"]),
    (lambda: {"fused": 1}, ["no prediction for row_serial"]),
    (lambda: [3, 2, 1, 2], ["not a dict"]),
])
def test_ch07_reads_prediction_wrong(reads, words, capsys):
    ok = ch07.check_bandwidth(_bytes, _gbps, reads)
    out = capsys.readouterr().out
    assert not ok
    fails = [line for line in out.splitlines() if line.startswith("FAIL ")]
    assert len(fails) == 1, out
    for w in words:
        assert w in fails[0], out


def test_ch07_bandwidth_blank(capsys):
    ok = ch07.check_bandwidth(blank, blank, blank)
    out = capsys.readouterr().out
    assert not ok and "not implemented yet" in out
    assert out.strip().splitlines()[-1].startswith("ch07-bandwidth: FAILED (0/")


def test_ch07_bandwidth_solution(capsys):
    assert ch07.check_bandwidth(_bytes, _gbps, _reads), capsys.readouterr().out


@pytest.mark.parametrize("bytes_fn,gbps_fn,words", [
    (lambda M, N, dt: _bytes(M, N, dt, reads_only=True), _gbps, ["half the traffic", "the input's reads alone"]),
    (_bytes, lambda M, N, dt, ms: _gbps(M, N, dt, ms) / 2, ["half the real rate", "the input's reads alone",
                                                             "67108864 of the 134217728 the kernel moves"]),
    (lambda M, N, dt: _bytes(M, N, dt, itemsize=4), _gbps, ["element is 2 bytes"]),
    (lambda M, N, dt: 3 * _bytes(M, N, dt) // 2, _gbps, ["three passes over the tensor"]),
    (lambda M, N, dt: _bytes(M, N, dt) + 4, _gbps, ["not the least traffic a softmax of"]),
    (_bytes, lambda M, N, dt, ms: _gbps(M, N, dt, ms) * 2 ** 20 / 1e6, ["do not work out"]),
    (_bytes, lambda M, N, dt, ms: _gbps(M, N, dt, ms, gib=True), ["two meanings of 'GB'"]),
    (_bytes, lambda M, N, dt, ms: _gbps(M, N, dt, ms, seconds=True), ["factor of 1000", "time's unit"]),
    (lambda M, N, dt: float(_bytes(M, N, dt)), _gbps, ["a float", "whole number"]),
])
def test_ch07_bandwidth_pitfalls(bytes_fn, gbps_fn, words, capsys):
    ok = ch07.check_bandwidth(bytes_fn, gbps_fn, _reads)
    out = capsys.readouterr().out
    assert not ok
    fails = [line for line in out.splitlines() if line.startswith("FAIL ")]
    for w in words:
        assert any(w in line for line in fails), out


def test_ch07_bandwidth_rate_from_a_dtype_blind_byte_count(capsys):
    """The review (issue 26): bytes_moved counting 4 bytes whatever the dtype, and achieved_gbps built on it: each
    fp16/bf16 GB/s line blamed 'the units of bytes, time and GB', though the cause is the byte count named above."""
    blind = lambda M, N, dt: _bytes(M, N, dt, itemsize=4)
    gbps = lambda M, N, dt, ms: blind(M, N, dt) / (ms * 1e-3) / 1e9
    ok = ch07.check_bandwidth(blind, gbps, _reads)
    out = capsys.readouterr().out
    assert not ok
    fails = [line for line in out.splitlines() if line.startswith("FAIL ")]
    rates = [line for line in fails if line.startswith("FAIL  GB/s:")]
    assert len(rates) == 3 and all("16" in line.split(":")[1] for line in rates), out  # the fp16 and bf16 cases
    for line in rates:
        assert "follows from bytes_moved's" in line and "element is 2 bytes" not in line, line
    assert not any("do not work out" in line for line in fails), out
    assert any("element is 2 bytes" in line for line in fails), out


def rows_solution(M, N, n_sms):
    block = triton.next_power_of_2(N)
    rows = 1
    while rows * 2 * block <= ch07.MAX_TILE and triton.cdiv(M, rows * 2) >= ch07.PROGRAMS_PER_SM * n_sms:
        rows *= 2
    return rows


def rows_no_grid(M, N, n_sms):  # ignores the SMs: fills the tile
    return max(1, ch07.MAX_TILE // triton.next_power_of_2(N))


def rows_floor(M, N, n_sms):  # counts programs with M // ROWS
    block = triton.next_power_of_2(N)
    rows = 1
    while rows * 2 * block <= ch07.MAX_TILE and M // (rows * 2) >= ch07.PROGRAMS_PER_SM * n_sms:
        rows *= 2
    return rows


def rows_no_tile_cap(M, N, n_sms):
    rows = 1
    while triton.cdiv(M, rows * 2) >= ch07.PROGRAMS_PER_SM * n_sms:
        rows *= 2
    return rows


def rows_strict(M, N, n_sms):  # a tile of exactly 4096 values, or exactly 4 programs per SM, counted as too many
    block = triton.next_power_of_2(N)
    rows = 1
    while rows * 2 * block < ch07.MAX_TILE and triton.cdiv(M, rows * 2) > ch07.PROGRAMS_PER_SM * n_sms:
        rows *= 2
    return rows


def rows_not_pow2(M, N, n_sms):
    return max(1, min(ch07.MAX_TILE // triton.next_power_of_2(N), M // (ch07.PROGRAMS_PER_SM * n_sms)))


def test_ch07_rows_blank(capsys):
    assert_blank(ch07.check_choose_rows, blank, "ch07-rows", capsys)


def test_ch07_rows_solution(capsys):
    assert_passes(ch07.check_choose_rows, rows_solution, "ch07-rows", capsys)


@pytest.mark.parametrize("fn,words", [
    (rows_no_grid, ["some SMs sit idle"]),
    (rows_floor, ["last one taking the leftover rows", "left that one out"]),
    (rows_strict, ["fewer rows per program than both facts allow"]),
    (rows_no_tile_cap, ["spill registers"]),
    (rows_not_pow2, ["power of two"]),
])
def test_ch07_rows_pitfalls(fn, words, capsys):
    assert_names(ch07.check_choose_rows, fn, "ch07-rows", words, capsys)


# ============================================================ the notebooks' own exercise cells, both versions


# (notebook, exercise id, check function, names the check is called with)
NOTEBOOK_EXERCISES = [
    ("07_performance.ipynb", "ch07-bandwidth", ch07.check_bandwidth,
     ["bytes_moved", "achieved_gbps", "reads_per_element"]),
    ("07_performance.ipynb", "ch07-rows", ch07.check_choose_rows, ["choose_rows"]),
]


@pytest.mark.parametrize("notebook,exercise,check,names", NOTEBOOK_EXERCISES, ids=[e[1] for e in NOTEBOOK_EXERCISES])
def test_notebook_exercise_solution_passes(notebook, exercise, check, names, exercise_module, capsys):
    notebook_exercise_solution_passes(exercise, check, names, exercise_module, capsys)


@pytest.mark.parametrize("notebook,exercise,check,names", NOTEBOOK_EXERCISES, ids=[e[1] for e in NOTEBOOK_EXERCISES])
def test_notebook_exercise_blank_says_not_implemented(notebook, exercise, check, names, exercise_module, capsys):
    notebook_exercise_blank_says_not_implemented(exercise, check, names, exercise_module, capsys)


# ======================================== issue 26: what the learner reads before the check leaves the reasoning

# Per exercise, what the learner must work out; none of it may appear in the markdown cell above the exercise, the
# learner's exercise cell or hint levels 1-2 (level 3 gives the key line).
GIVEAWAYS = {
    "ch07-bandwidth": ["read once", "written once", "read every element", "1e9", "10^9", "2 * M", "ms / 1e3"],
    "ch07-rows": ["largest", "cdiv", "double", "rows *= 2"],
    "ch07-multirow": ["[:, None]", "axis=1", "cdiv", "tl.where"],
    "ch07-persistent": ["p + P", "grid-stride", "num_programs(0))", "step"],
    "ch07-warps": ["32 * num_warps", "65536 //", "65536 / (", "min(255", "max(1"],
    "ch07-occupancy": ["whichever", "smallest", "minimum", "min(", "//", "which of those counts wins"],
    "ch07-row-vector": ["widest", "% vec", "stride(0) %", "every row stride", "element_size"],
}


@pytest.mark.parametrize("exercise", list(GIVEAWAYS))
def test_prose_cell_and_first_two_hints_leave_the_rule_to_the_learner(exercise):
    from conftest import exercise_notebook
    from softmax_lab.course import build, exercise as registered, notebook

    learner = build.learner_notebook(notebook.read(exercise_notebook(exercise)))
    k = next(i for i, c in enumerate(learner.cells) if notebook.tag_value(c, "exercise:") == exercise)
    above = next(learner.cells[j] for j in range(k - 1, -1, -1) if learner.cells[j].cell_type == "markdown")
    text = {"the markdown above": above.source, "the exercise cell": learner.cells[k].source,
            "hint 1": registered(exercise).hints[0], "hint 2": registered(exercise).hints[1]}
    shown = [(where, g) for where, t in text.items() for g in GIVEAWAYS[exercise] if g in t]
    assert not shown, shown
