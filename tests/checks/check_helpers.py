"""What the check tests share: exercise cells as modules, the checks run on them, the pitfalls the chapters name."""
from __future__ import annotations

import contextlib
import importlib.util
import io
import itertools
from pathlib import Path

import nbformat

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
    "ch01-count-nonfinite": ("01_scores_to_probabilities.ipynb", "check_count_nonfinite", ["predicted_counts"]),
    "ch02-masked-load-store": ("02_masks_and_padding.ipynb", "check_masked_rows", ["softmax_rows"]),
    "ch02-padding-self-test": ("02_masks_and_padding.ipynb", "check_padding_self_test", ["padding_self_test"]),
    "ch03-naive-normalize": ("03_naive_kernel.ipynb", "check_naive", ["naive_loads"]),
    "ch04-traffic": ("04_three_kernels_to_one.ipynb", "check_traffic", ["three_pass_traffic", "fused_traffic"]),
    "ch04-wrapped-rows": ("04_three_kernels_to_one.ipynb", "check_rows_read_right", ["rows_read_right"]),
    "ch04-fused": ("04_three_kernels_to_one.ipynb", "check_fused", ["my_fused_softmax"]),
    "ch04-find-the-bug": ("04_three_kernels_to_one.ipynb", "check_find_the_bug", ["catching_layout"]),
}

# The pitfalls the chapters name (the mutant tests add more):
# (exercise, pitfall name, (old, new) replacements in the solution, the failing case, words the message must hold)
PITFALLS = [
    ("ch00-double", "store without mask",
     [("tl.store(out_ptr + offs, 2 * x, mask=mask)", "tl.store(out_ptr + offs, 2 * x)")],
     "vector of 5", "the store is not masked"),
    ("ch00-double", "stores x, not 2x", [("2 * x, mask=mask", "x, mask=mask")], "vector of 64", "stored x itself"),
    ("ch01-stable-row", "no max subtraction", [("p = tl.exp(x - m)", "p = tl.exp(x)")],
     "large values [1000, 1001, 1002]", "exp overflowed to inf"),
    ("ch01-stable-row", "only the denominator shifted",
     [("y = p / tl.sum(p, axis=0)", "y = tl.exp(x) / tl.sum(p, axis=0)")],
     "[2, 1, 0]", "e^max times too large"),
    ("ch01-stable-row", "not normalized", [("y = p / tl.sum(p, axis=0)", "y = p")], "[2, 1, 0]",
     "not divided by the row sum"),
    ("ch02-masked-load-store", "padding 0 instead of -inf", [('other=float("-inf")', "other=0.0")],
     "all-negative row [-1002, -1001, -1000]", "the padding lanes read 0, above every real score"),
    ("ch02-masked-load-store", "store without mask", [("y, mask=mask)", "y)")], "random 2x31",
     "the store is not masked"),
    ("ch02-masked-load-store", "load without mask", [(', mask=mask, other=float("-inf"))', ")")],
     "random 2x31", "the load is not masked"),
    ("ch03-naive-normalize", "forgot its own element",
     [("return rows * cols * (2 * cols + 1)", "return rows * cols * 2 * cols")],
     "4096 x 1024, one tile of 1024 (the H200 benchmark's shape)", "one load per program short"),
    ("ch03-naive-normalize", "counted the masked lanes of the last tile",
     [("return rows * cols * (2 * cols + 1)", "return rows * cols * (2 * block * -(-cols // block) + 1)")],
     "3 x 7, tiles of 4 (counted by memcount)", "masked lanes of the last tile"),
    ("ch04-traffic", "forgot the per-row max and sum",
     [("loads = rows * cols + (rows * cols + rows) + (rows * cols + rows)", "loads = 3 * rows * cols")],
     "three_pass on 3x5", "once for its whole row, apart from x and y, are miscounted"),
    ("ch04-fused", "rows stepped by n_cols, not the row stride", [("row * in_row_stride", "row * n_cols")],
     "strided view big[:, :1000] of a 4x1100 tensor", "row stride"),
    ("ch04-fused", "padding 0 instead of -inf", [('other=float("-inf")', "other=0.0")],
     "all-negative row [-1002, -1001, -1000]", "the padding lanes read 0"),
    ("ch04-fused", "no max subtraction", [("x = x - tl.max(x, axis=0)", "x = x")],
     "large values [1000, 1001, 1002]", "exp overflowed to inf"),
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


def chapter_exercises(chapter: str) -> list[str]:
    """The exercises of EXERCISES in one chapter ("ch01")."""
    return [ex for ex in EXERCISES if ex.startswith(f"{chapter}-")]


def chapter_rows(rows: list, chapter: str) -> list:
    """The rows of a table (PITFALLS ...) whose exercise, their first field, is in one chapter ("ch01")."""
    return [row for row in rows if row[0].startswith(f"{chapter}-")]


# ------------------------------------------------- an exercise cell of a solution notebook (chapters 0-4)


def blank_exercise_fails_with_not_implemented(ex, tmp_path):
    ok, text = run_check(ex, load(ex, exercise_source(ex, learner=True), tmp_path))
    lines = text.strip().splitlines()
    assert not ok
    assert lines[-1].startswith(f"{ex}: FAILED (0/"), text
    assert all("not implemented yet" in line for line in lines[:-1]), text
    assert len(lines) == 2, "one reason, one line: " + text


def solution_passes(ex, tmp_path):
    ok, text = run_check(ex, load(ex, exercise_source(ex), tmp_path))
    assert ok, text
    assert "FAIL" not in text and text.strip().splitlines()[-1].startswith(f"{ex}: PASSED"), text


def pitfall_fails_naming_it(ex, edits, case, words, tmp_path):
    source = exercise_source(ex)
    for old, new in edits:
        assert old in source, f"the solution of {ex} no longer contains {old!r}: update this test"
        source = source.replace(old, new)
    ok, text = run_check(ex, load(ex, source, tmp_path), grouped=False)
    assert not ok, text
    line = next((l for l in text.splitlines() if l.startswith(f"FAIL  {case}:")), None)
    assert line is not None, f"case {case!r} did not fail:\n{text}"
    assert words in line, line


def check_case_names(ex, tmp_path) -> list[str]:
    """The cases the notebook check runs on the exercise's solution, in order."""
    ok, text = run_check(ex, load(ex, exercise_source(ex), tmp_path), grouped=False)
    assert ok, text
    return [line[len("PASS  "):] for line in text.splitlines() if line.startswith("PASS  ")]


def judge_case_names(ex, seed: int = 0) -> list[str]:
    """The cases (kernel launches or function calls) the grader's judge runs for the exercise, in order."""
    import numpy as np

    from softmax_lab.grading import judge

    j = judge.judges()[ex]
    rng = np.random.default_rng(seed)
    return [c.name for c in (j.cases(rng) if j.kind == "kernel" else j.calls(rng))]


def one_case_table(ex, table_names, tmp_path, check_only=(), fresh=0):
    """Check and judge read one case table: the check runs exactly its named cases (then ``check_only``, the
    properties only a notebook can measure), the judge runs them too, in the same order, then ``fresh`` more."""
    table_names = list(table_names)
    assert check_case_names(ex, tmp_path) == table_names + list(check_only)
    for seed in (0, 1):
        judged = judge_case_names(ex, seed)
        assert judged[:len(table_names)] == table_names, judged
        assert len(judged) >= len(table_names) + fresh, judged


# ----------------------------------------------------- a stand-in for the learner's function (chapters 5-8)

NEG_INF = float("-inf")


def check_output(check, fn, capsys):
    ok = check(fn)
    out = capsys.readouterr().out
    return ok, out


def assert_blank(check, fn, exercise, capsys):
    ok, out = check_output(check, fn, capsys)
    assert not ok
    assert "not implemented yet" in out
    assert out.strip().splitlines()[-1].startswith(f"{exercise}: FAILED (0/")


def assert_passes(check, fn, exercise, capsys):
    ok, out = check_output(check, fn, capsys)
    assert ok, out
    assert "FAIL " not in out
    last = out.strip().splitlines()[-1]
    assert last.startswith(f"{exercise}: PASSED (") and "checks passed)" in last


def assert_names(check, fn, exercise, words, capsys):
    ok, out = check_output(check, fn, capsys)
    assert not ok, out
    assert f"{exercise}: FAILED" in out
    fails = [line for line in out.splitlines() if line.startswith("FAIL ")]
    assert fails, out
    for w in words:
        assert any(w in line for line in fails), f"no FAIL line mentions {w!r}:\n{out}"


def blank(*args, **kwargs):
    raise NotImplementedError("exercise: replace this line with your code")


def notebook_exercise_solution_passes(exercise, check, names, exercise_module, capsys):
    module = exercise_module(exercise)
    assert check(*[getattr(module, n) for n in names]), capsys.readouterr().out
    assert capsys.readouterr().out.strip().splitlines()[-1].startswith(f"{exercise}: PASSED")


def notebook_exercise_blank_says_not_implemented(exercise, check, names, exercise_module, capsys):
    module = exercise_module(exercise, learner=True)
    assert not check(*[getattr(module, n) for n in names])
    out = capsys.readouterr().out
    fails = [line for line in out.splitlines() if line.startswith("FAIL ")]
    assert fails and all("not implemented yet" in line for line in fails), out
    assert out.strip().splitlines()[-1].startswith(f"{exercise}: FAILED (0/")


def notebook_cell(folder, notebook, exercise):
    """The source of the one cell tagged ``exercise:<exercise>`` in ``folder/notebook``."""
    nb = nbformat.read(ROOT / folder / notebook, as_version=4)
    cells = [c for c in nb.cells if f"exercise:{exercise}" in c.metadata.get("tags", [])]
    assert len(cells) == 1, f"{notebook}: expected one cell tagged exercise:{exercise}"
    return cells[0].source
