"""Chapter 9's ladder: no exercise's skeleton or solution is another exercise's answer, and what the notebook gives
(the racy kernel) is what the check and the judge compare with."""
import itertools

import pytest

from conftest import SOLUTIONS
from softmax_lab.course import build, notebook, release

IDS = ["ch09-block-tree", "ch09-reader-barrier", "ch09-shuffle-tail", "ch09-sectors"]
CHAPTER = SOLUTIONS / "09_cuda_layer.ipynb"


def _lines(text: str) -> set[str]:
    return {ln for raw in text.split("\n") if release.significant(ln := release.normalise(raw))}


def _region(source: str) -> str:
    inside, out = False, []
    for raw in source.split("\n"):
        if raw.strip() in (notebook.BEGIN, notebook.END):
            inside = raw.strip() == notebook.BEGIN
        elif inside:
            out.append(raw)
    return "\n".join(out)


@pytest.fixture(scope="module")
def ladder():
    """exercise id -> (its solution region's lines, its blank cell's lines, its own lines: the solution lines the
    learner notebook shows nowhere else)."""
    nb = notebook.read(CHAPTER)
    learner = build.learner_notebook(nb)
    out = {}
    for ident in IDS:
        cell = next(c for c in nb.cells if notebook.tag_value(c, notebook.EXERCISE) == ident)
        blank = next(c for c in learner.cells if notebook.tag_value(c, notebook.EXERCISE) == ident)
        shown = set().union(*(_lines(c.source) for c in learner.cells if c is not blank))
        solution = _lines(_region(cell.source))
        out[ident] = (solution, _lines(blank.source), solution - shown)
    return out


def test_every_exercise_but_the_find_the_bug_one_has_its_own_answer(ladder):
    for ident in ["ch09-block-tree", "ch09-shuffle-tail", "ch09-sectors"]:
        assert ladder[ident][2], f"{ident}: every line of its answer is shown elsewhere in the learner notebook"
    # find and fix: the racy kernel is given; the answer is the barrier(s) added to it
    assert ladder["ch09-reader-barrier"][2] == set()


@pytest.mark.parametrize("a, b", list(itertools.permutations(IDS, 2)))
def test_no_skeleton_or_solution_holds_another_exercises_answer(ladder, a, b):
    solution_a, blank_a, _ = ladder[a]
    own_b = ladder[b][2]
    assert not own_b & blank_a, f"{a}'s skeleton holds {b}'s answer: {sorted(own_b & blank_a)}"
    assert not own_b & solution_a, f"{a}'s solution holds {b}'s answer: {sorted(own_b & solution_a)}"


def test_the_block_tree_answer_is_not_the_reader_barrier_answer(ladder):
    tree, barrier = ladder["ch09-block-tree"][0], ladder["ch09-reader-barrier"][0]
    assert not (tree & barrier) - {"cuda.syncthreads()"}, sorted(tree & barrier)


def test_racy_kernel_of_the_notebook_is_the_case_tables():
    from softmax_lab.checks.ch09.reader_barrier import RACY_KERNEL

    given = [c.source for c in notebook.read(CHAPTER).cells if c.cell_type == "code" and "def racy_kernel" in c.source]
    assert given == [RACY_KERNEL.rstrip("\n")]
