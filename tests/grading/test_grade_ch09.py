"""`softmax-lab grade` on chapter 9, run as an instructor runs it (the CLI in its own process): the grader's judges
re-run the learner's own numba code in its sandbox, so the notebook's checks are no longer trusted.

One grade run of three submissions: a blank notebook whose check functions were replaced by forged ones that print
PASS lines (0 points),
the same with one-line aliases of the package's objects in the exercise cells (0 points), and the solutions pasted
into the learner notebook (full marks).
"""
from __future__ import annotations

import sys
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).parent))
from test_grade import SOLUTIONS, ensure_bwrap, index_of, paste_solutions, read_rows, save, solution
from test_grade_dask import grade_cli

from softmax_lab import course
from softmax_lab.course.build import learner_notebook

NAME = "09_cuda_layer.ipynb"
IDS = [e.id for e in course.exercises("09")]

# The package's own objects under the exercises' names, one line each (all imported in the learner notebook).
ALIASES = {
    "ch09-block-tree": "from softmax_lab.checks.ch09 import reader_barrier\nexec(reader_barrier.HELPERS)\n",
    "ch09-reader-barrier": "fixed_kernel = K.block_softmax_kernel\n",
    "ch09-shuffle-tail": "warp_max, warp_sum = K.warp_max, K.warp_sum\nmy_tail_kernel = K.shuffle_tail_kernel\n",
    "ch09-sectors": ("from softmax_lab.checks.ch09.sectors import predicted_truth as predicted_loads\n"
                     "sectors_and_lines = cl.count_sectors\n"),
    "ch09-profile": ("from softmax_lab.checks.ch09 import profile as p\n"
                     "dram_bound, traffic_ratio = p._dram_bound, p._traffic_ratio\n"
                     "reread_from_l2, waits_on_memory = p._reread_from_l2, p._waits_on_memory\n"),
}


def forged(nb, sources=None):
    """Every exercise cell (its blank source, or ``sources[id]``) followed by lines that replace its check function
    with one printing exactly what the passing check prints (copied from the solution's stored output, so that
    nbval's comparison of the check cell passes too)."""
    sol = solution(SOLUTIONS / NAME)
    for ident in IDS:
        cell = nb.cells[index_of(nb, "exercise:", ident)]
        check = course.exercise(ident).check
        printed = "".join(o.get("text", "") for o in sol.cells[index_of(sol, "check:", ident)].outputs)
        cell.source = (sources or {}).get(ident, cell.source) + (
            "\n\nimport softmax_lab.checks\n\n\n"
            "def forged_check(*args):\n"
            f"    print({printed!r}, end='')\n"
            "    return None  # shown as nothing, like the check's Verdict\n\n\n"
            f"softmax_lab.checks.{check} = forged_check\n")
    return nb


@pytest.fixture(scope="module")
def rows(tmp_path_factory):
    ensure_bwrap()
    sol = solution(SOLUTIONS / NAME)
    subs = tmp_path_factory.mktemp("ch09") / "submissions"
    save(forged(learner_notebook(sol)), subs / "forged" / NAME)
    save(forged(learner_notebook(sol), ALIASES), subs / "aliased" / NAME)
    save(paste_solutions(learner_notebook(sol), sol), subs / "pasted" / NAME)
    out = subs.parent / "gradebook.csv"
    p = grade_cli([str(subs), "--out", str(out), "--jobs", "2", "--solutions", str(SOLUTIONS), "--timeout", "120",
                   "--notebook-timeout", "600"], timeout=900)
    assert p.returncode == 0, p.stdout + p.stderr
    return {(r["submission"].split("/")[0], r["exercise"]): r for r in read_rows(out)}


def test_forged_checks_on_a_blank_notebook_score_zero(rows):
    for ident in IDS:
        r = rows[("forged", ident)]
        assert (r["status"], r["points"]) == ("failed", "0"), r
        assert "grader's own launch of your code" in r["message"], r
        # the blank's own line, or (sectors: the cell is run alone) the forgery's import, which the sandbox lacks
        assert "NotImplementedError" in r["message"] or "No module named 'softmax_lab" in r["message"], r


def test_aliases_of_the_package_score_zero(rows):
    words = {"ch09-block-tree": "no @cuda.jit function named `block_max",
             "ch09-reader-barrier": "no @cuda.jit function named `fixed_kernel`",
             "ch09-shuffle-tail": "no @cuda.jit function named",
             "ch09-sectors": "No module named 'softmax_lab",
             "ch09-profile": "No module named 'softmax_lab"}
    for ident in IDS:
        r = rows[("aliased", ident)]
        assert (r["status"], r["points"]) == ("failed", "0"), r
        assert words[ident] in r["message"], r["message"]


def test_the_solutions_score_full_marks(rows):
    total = 0
    for ident in IDS:
        r = rows[("pasted", ident)]
        assert r["status"] == "passed" and r["points"] == r["max_points"] != "0", r
        total += int(r["points"])
    assert total == sum(e.code_points for e in course.exercises("09"))  # less hand-graded explanations
