"""Chapters 0-4: every exercise, taken from the solution notebooks, fails its check when blank ("not implemented"),
passes with the solution, and fails with a message naming the pitfall when a seed mistake is introduced."""
from __future__ import annotations

import contextlib
import importlib.util
import io
import itertools
from pathlib import Path

import nbformat
import numpy as np
import pytest

import softmax_lab
from softmax_lab import checks
from softmax_lab.course import build, notebook

ROOT = Path(__file__).resolve().parents[2]
HEADER = """\
import softmax_lab
import torch
import triton
import triton.language as tl
from softmax_lab import DEVICE
"""

# exercise id -> (notebook, check function name, names the check takes from the exercise cell)
EXERCISES = {
    "ch00-double": ("00_setup.ipynb", "check_double", ["double"]),
    "ch01-stable-row": ("01_scores_to_probabilities.ipynb", "check_stable_row", ["softmax_row"]),
    "ch01-shift-trace": ("01_scores_to_probabilities.ipynb", "check_shift_trace",
                         ["predicted_trace", "steps_that_change"]),
    "ch01-count-nonfinite": ("01_scores_to_probabilities.ipynb", "check_count_nonfinite", ["count_nonfinite"]),
    "ch02-masked-load-store": ("02_masks_and_padding.ipynb", "check_masked_rows", ["softmax_rows"]),
    "ch02-padding-self-test": ("02_masks_and_padding.ipynb", "check_padding_self_test", ["padding_self_test"]),
    "ch03-naive-normalize": ("03_naive_kernel.ipynb", "check_naive", ["my_naive_softmax"]),
    "ch04-traffic": ("04_three_kernels_to_one.ipynb", "check_traffic", ["three_pass_traffic", "fused_traffic"]),
    "ch04-fused": ("04_three_kernels_to_one.ipynb", "check_fused", ["my_fused_softmax"]),
}

# (exercise, pitfall name, (old, new) replacements in the solution, the failing case, words the message must hold)
PITFALLS = [
    ("ch00-double", "store without mask",
     [("tl.store(out_ptr + offs, 2 * x, mask=mask)", "tl.store(out_ptr + offs, 2 * x)")],
     "vector of 5", "mask the store"),
    ("ch00-double", "stores x, not 2x", [("2 * x, mask=mask", "x, mask=mask")], "vector of 64", "multiply by 2"),
    ("ch01-stable-row", "no max subtraction", [("p = tl.exp(x - m)", "p = tl.exp(x)")],
     "large values [1000, 1001, 1002]", "subtract the row max"),
    ("ch01-stable-row", "only the denominator shifted",
     [("y = p / tl.sum(p, axis=0)", "y = tl.exp(x) / tl.sum(p, axis=0)")],
     "[2, 1, 0]", "shifted only the denominator"),
    ("ch01-stable-row", "not normalized", [("y = p / tl.sum(p, axis=0)", "y = p")], "[2, 1, 0]",
     "divide by the row sum"),
    ("ch02-masked-load-store", "padding 0 instead of -inf", [('other=float("-inf")', "other=0.0")],
     "all-negative row [-1002, -1001, -1000]", "max became 0 - did you pad with 0 instead of -inf?"),
    ("ch02-masked-load-store", "store without mask", [("y, mask=mask)", "y)")], "random 2x31", "mask the store"),
    ("ch02-masked-load-store", "load without mask", [(', mask=mask, other=float("-inf"))', ")")],
     "random 2x31", "mask the load"),
    ("ch03-naive-normalize", "numerator not shifted",
     [("y = tl.exp(mine - row_max) / total", "y = tl.exp(mine) / total")],
     "random 2x31", "shifted only the denominator"),
    ("ch03-naive-normalize", "no division", [("y = tl.exp(mine - row_max) / total", "y = tl.exp(mine - row_max)")],
     "random 4x33", "divide by the row sum"),
    ("ch04-traffic", "forgot the per-row max and sum",
     [("loads = rows * cols + (rows * cols + rows) + (rows * cols + rows)", "loads = 3 * rows * cols")],
     "three_pass on 3x5", "count the per-row max and sum"),
    ("ch04-fused", "rows stepped by n_cols, not the row stride", [("row * in_row_stride", "row * n_cols")],
     "strided view big[:, :1000] of a 4x1100 tensor", "row stride"),
    ("ch04-fused", "padding 0 instead of -inf", [('other=float("-inf")', "other=0.0")],
     "all-negative row [-1002, -1001, -1000]", "pad with 0 instead of -inf"),
    ("ch04-fused", "no max subtraction", [("x = x - tl.max(x, axis=0)", "x = x")],
     "large values [1000, 1001, 1002]", "subtract the row max"),
]

_counter = itertools.count()


def exercise_source(ex: str, learner: bool = False) -> str:
    nb = notebook.read(ROOT / "solutions" / EXERCISES[ex][0])
    if learner:
        nb = build.learner_notebook(nb)
    cells = [c for c in nb.cells if notebook.tag_value(c, "exercise:") == ex]
    assert len(cells) == 1, f"exercise {ex} not found"
    return cells[0].source


def load(ex: str, source: str, tmp_path: Path):
    """Import an exercise cell as a module (Triton needs the kernel's source in a file)."""
    path = tmp_path / f"ex_{ex.replace('-', '_')}_{next(_counter)}.py"
    path.write_text(HEADER + source)
    spec = importlib.util.spec_from_file_location(path.stem, path)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def run_check(ex: str, module, grouped: bool = True) -> tuple[bool, str]:
    """The check's printed text; ``grouped=False``: one line per case (failures not grouped by reason)."""
    _, check_name, names = EXERCISES[ex]
    out = io.StringIO()
    with contextlib.ExitStack() as stack:
        stack.enter_context(contextlib.redirect_stdout(out))
        if not grouped:
            stack.enter_context(_ungrouped())
        ok = getattr(checks, check_name)(*[getattr(module, n) for n in names])
    return ok, out.getvalue()


@contextlib.contextmanager
def _ungrouped():
    from softmax_lab.checks import common

    original = common.Report.grouped_lines
    common.Report.grouped_lines = lambda self: list(self.lines)
    try:
        yield
    finally:
        common.Report.grouped_lines = original


@pytest.mark.parametrize("ex", list(EXERCISES))
def test_blank_exercise_fails_with_not_implemented(ex, tmp_path):
    ok, text = run_check(ex, load(ex, exercise_source(ex, learner=True), tmp_path))
    lines = text.strip().splitlines()
    assert not ok
    assert lines[-1].startswith(f"{ex}: FAILED (0/"), text
    assert all("not implemented yet" in line for line in lines[:-1]), text
    assert len(lines) == 2, "one reason, one line: " + text


@pytest.mark.parametrize("ex", list(EXERCISES))
def test_solution_passes(ex, tmp_path):
    ok, text = run_check(ex, load(ex, exercise_source(ex), tmp_path))
    assert ok, text
    assert "FAIL" not in text and text.strip().splitlines()[-1].startswith(f"{ex}: PASSED"), text


@pytest.mark.parametrize("ex,pitfall,edits,case,words", PITFALLS, ids=[f"{p[0]}: {p[1]}" for p in PITFALLS])
def test_pitfall_fails_naming_it(ex, pitfall, edits, case, words, tmp_path):
    source = exercise_source(ex)
    for old, new in edits:
        assert old in source, f"the solution of {ex} no longer contains {old!r}: update this test"
        source = source.replace(old, new)
    ok, text = run_check(ex, load(ex, source, tmp_path), grouped=False)
    assert not ok, text
    line = next((l for l in text.splitlines() if l.startswith(f"FAIL  {case}:")), None)
    assert line is not None, f"case {case!r} did not fail:\n{text}"
    assert words in line, line


def test_check_output_has_no_raw_floats_or_timings(tmp_path):
    """Checks print verdicts, not numbers that could differ between CPU and GPU."""
    import re

    source = exercise_source("ch04-fused").replace('other=float("-inf")', "other=0.0")
    _, text = run_check("ch04-fused", load("ch04-fused", source, tmp_path))
    assert not re.search(r"\d\.\d{3,}", text), text


# ------------------------------------------------------------------------- what the grader launches (judges)


@pytest.mark.parametrize("rows,cols", [(1, 4), (3, 5), (2, 16), (4, 33)])
def test_judge_traffic_formula_matches_the_counted_traffic(rows, cols):
    """The ch04 judge answers with a closed form (its sandbox has no memcount): it must equal the counts."""
    from softmax_lab.checks.ch04 import measured_traffic, three_pass_counts

    assert three_pass_counts(rows, cols) == measured_traffic("three_pass", rows, cols)
    assert (rows * cols, rows * cols) == measured_traffic("fused", rows, cols)


@pytest.mark.parametrize("source,words", [
    ("@triton.jit\ndef k(x):\n    import os\n", "Import"),
    ("@triton.jit\ndef k(x):\n    open('/grader-out/results.json', 'w')\n", "calls `open`"),
    ("@triton.jit\ndef k(x):\n    y = x.__class__\n", "__class__"),
    ("@triton.jit\ndef k(x):\n    tl.store(x, HELPER)\n", "defined outside"),
    ("@my_decorator\n@triton.jit\ndef k(x):\n    pass\n", "only @triton.jit"),
    ("@triton.jit\ndef k(x, y=print('hi')):\n    pass\n", "constants"),
])
def test_judge_defines_only_triton_code(source, words):
    """The judge defines the learner's kernels alone, after checking they are Triton code (on the CPU the
    interpreter runs a kernel as Python: the allow-list keeps other Python out)."""
    from softmax_lab.grading import judge_harness

    with pytest.raises(judge_harness.SourceRejected, match=words.replace("(", r"\(")):
        judge_harness.define_kernels(source)


def test_judge_accepts_every_solution_kernel():
    from softmax_lab.grading import judge, judge_harness

    seen = 0
    for path in sorted((Path(__file__).parents[2] / "solutions").glob("*.ipynb")):
        nb = nbformat.read(str(path), as_version=4)
        for cell in nb.cells:
            ident = notebook.tag_value(cell, "exercise:")
            j = judge.judges().get(ident)
            if j is not None and j.kind == "kernel":
                assert j.kernel in judge_harness.define_kernels(cell.source), ident
                seen += 1
    assert seen >= 7


@pytest.mark.parametrize("name", ["04_three_kernels_to_one.ipynb", "06_half_precision_and_attention.ipynb",
                                  "08_backward.ipynb"])
def test_judge_big_buffers_plumbing(name, monkeypatch):
    """On a GPU the judge launches kernels on buffers past 2**31 elements, shipping only windows of them; here the
    same path runs with rows 4096 apart (no overflow: this checks the windows, pointers and strides)."""
    from softmax_lab.checks import judging
    from softmax_lab.grading import judge
    from softmax_lab.grading.runner import Limits

    pytest.importorskip("shutil").which("bwrap") or pytest.skip("needs bubblewrap")
    monkeypatch.setattr(judging, "gpu_scale", lambda: True)
    monkeypatch.setattr(judging, "BIG_STEP", 4096)
    nb = nbformat.read(str(Path(__file__).parents[2] / "solutions" / name), as_version=4)
    kernels = {notebook.tag_value(c, "exercise:"): c.source for c in nb.cells
               if judge.judges().get(notebook.tag_value(c, "exercise:")) is not None
               and judge.judges()[notebook.tag_value(c, "exercise:")].kind == "kernel"}
    verdicts = judge.run("", kernels, Limits(cell_timeout=60), seed=7)
    for ident, v in verdicts.items():
        assert v.ok and any("2**30 apart" in c.name for c in judge.judges()[ident].cases(np.random.default_rng(7))), \
            v.text(ident)
    # A store that steps rows with the input's stride writes into the output's guard margins.
    src = kernels.get("ch04-fused")
    if src:
        bad = src.replace("out_ptr + row * out_row_stride", "out_ptr + row * (out_row_stride + 1)")
        v = judge.run("", {"ch04-fused": bad}, Limits(cell_timeout=60), seed=7)["ch04-fused"]
        assert not v.ok and any("2**30 apart" in ln and "64-bit" in ln for ln in v.lines), v.text("ch04-fused")


# ------------------------------------------------------------------------- grouped failure lines, learner lines


def test_report_groups_identical_reasons_where_the_first_failed(capsys):
    from softmax_lab.checks import Report

    r = Report("ex")
    r.add("a", "")
    for name in ("b", "c", "d", "e"):
        r.add(name, "same reason")
    r.add("f", "other reason")
    r.add("g", "")
    r.add("h", "pair")
    r.add("i", "pair")
    assert not r.show()
    assert capsys.readouterr().out.splitlines() == [
        "PASS  a",
        "FAIL ×4 cases (b, c, … 2 more): same reason",
        "FAIL  f: other reason",
        "PASS  g",
        "FAIL ×2 cases (h, i): pair",
        "ex: FAILED (2/9 checks passed)",
    ]
    assert len(r.lines) == 9  # the per-case record is kept


@pytest.mark.skipif(softmax_lab.ON_GPU, reason="on a GPU the compiler reports the kernel line in its own message")
def test_error_in_the_learners_kernel_names_their_line(tmp_path):
    source = exercise_source("ch00-double").replace(
        "    x = tl.load(in_ptr + offs, mask=mask)\n",
        "    x = tl.load(in_ptr + offs, mask=mask)\n    y = tl.reshape(x, (3, 7))\n")
    module = load("ch00-double", source, tmp_path)
    ok, text = run_check("ch00-double", module)
    want = HEADER.count("\n") + source.splitlines().index("    y = tl.reshape(x, (3, 7))") + 1
    assert not ok
    assert f"(at line {want} of your code: `y = tl.reshape(x, (3, 7))`)" in text, text
    assert sum(l.startswith("FAIL") for l in text.splitlines()) == 1, text  # four cases, one reason: one line


def test_error_in_the_learners_launcher_names_their_line(tmp_path):
    source = exercise_source("ch00-double").replace("    BLOCK = 64\n", "    BLOCK = 64\n    x.no_such_thing\n")
    ok, text = run_check("ch00-double", load("ch00-double", source, tmp_path))
    assert not ok and "AttributeError" in text and "of your code: `x.no_such_thing`" in text, text
