"""Turn the course's solution notebooks into nbgrader *source* notebooks (for a course run with nbgrader).

    softmax-lab nbgrader solutions/02_masks_and_padding.ipynb COURSE/source/softmax-lab-02/

The solutions already use nbgrader's ``### BEGIN SOLUTION`` / ``### END SOLUTION`` markers; what nbgrader
also needs is its cell metadata, made here from the course's tags:

* ``exercise:<id>`` code cell        -> autograded answer   (solution, grade_id ``<id>``)
* ``check:<id>`` code cell           -> autograder tests    (grade, locked, the exercise's points from the
  registry, ``softmax_lab.course.registry``). nbgrader
  awards the points when the cell does not raise; our checks print PASS/FAIL lines and never raise, so the
  check is wrapped: it runs as before, prints the same lines, then fails when its last line is not PASSED.
* ``question:<id>`` markdown cell    -> read-only
* ``answer:<id>`` markdown cell      -> manually graded answer (solution, grade, the question's points)
* ``rubric:<id>`` markdown cell      -> dropped (nbgrader would release it to learners)

docs/grading.md ("Using nbgrader on JupyterHub") has the whole procedure.
"""
from __future__ import annotations

import argparse
import copy
import textwrap
from pathlib import Path

import nbformat

from . import registry as _registry
from .notebook import question_id, tag_value

SCHEMA = 3


def _meta(grade_id: str, solution=False, grade=False, locked=False, points=None) -> dict:
    meta = {"grade": grade, "grade_id": grade_id, "locked": locked, "schema_version": SCHEMA,
            "solution": solution, "task": False}
    if grade:
        meta["points"] = points or 0
    return meta


def wrap_check(source: str, exercise: str) -> str:
    """A check cell that prints what it printed before, then raises unless its verdict line says PASSED."""
    body = textwrap.indent(source.rstrip() or "pass", "    ")
    return (
        "import contextlib as _contextlib, io as _io\n"
        "_out = _io.StringIO()\n"
        "with _contextlib.redirect_stdout(_out):\n"
        f"{body}\n"
        "print(_out.getvalue(), end='')\n"
        f"assert _out.getvalue().strip().endswith('checks passed)') and "
        f"_out.getvalue().strip().splitlines()[-1].startswith('{exercise}: PASSED'), "
        "'some checks failed: see the FAIL lines above'\n"
    )


def hints_outside(source: str) -> str:
    """Move each solution region's ``# HINT:`` lines to just before its ``### BEGIN SOLUTION``: nbgrader replaces
    the whole region (hints included) with ``raise NotImplementedError()``, and learners must keep the hints,
    as in the notebooks ``softmax-lab build`` makes."""
    lines = source.split("\n")
    out, region, hints = [], None, []
    for line in lines:
        mark = line.strip()
        if mark == "### BEGIN SOLUTION":
            region, hints = [line], []
        elif region is not None and mark == "### END SOLUTION":
            out += hints + region + [line]
            region = None
        elif region is not None:
            (hints if mark.startswith("# HINT:") else region).append(line)
        else:
            out.append(line)
    if region is not None:  # unbalanced markers: leave the cell as it was
        return source
    return "\n".join(out)


def convert(nb, registry: _registry.Registry | None = None) -> nbformat.NotebookNode:
    """The nbgrader source version of one solution notebook (a new object): nbgrader metadata on each cell,
    points from ``registry`` (default: the course's), hints kept outside the regions nbgrader replaces, outputs
    and widget state dropped."""
    registry = registry or _registry.load()
    out = copy.deepcopy(nb)
    out.metadata.pop("widgets", None)  # saved ipywidgets state: stale, large, and not the learner's
    cells = []
    for cell in out.cells:
        if tag_value(cell, "rubric:") is not None:
            continue
        ex, check = tag_value(cell, "exercise:"), tag_value(cell, "check:")
        q, ans = question_id(cell), tag_value(cell, "answer:")
        if ex is not None:
            cell.source = hints_outside(cell.source)
            cell.metadata["nbgrader"] = _meta(ex, solution=True)
        elif check is not None:
            cell.source = wrap_check(cell.source, check)
            declared = registry.exercise(check)  # its code points: an explanation part is its answer cell's
            cell.metadata["nbgrader"] = _meta(f"check-{check}", grade=True, locked=True,
                                              points=declared.code_points if declared else 0)
        elif q is not None:
            cell.metadata["nbgrader"] = _meta(f"question-{q}".replace(":", "-"), locked=True)  # explain:<id> too
        elif ans is not None:
            cell.source = hints_outside(cell.source)
            cell.metadata["nbgrader"] = _meta(ans.replace(":", "-"), solution=True, grade=True,
                                              points=registry.points(ans) or 0)
        cell.metadata.pop("widgets", None)
        if cell.cell_type == "code":
            cell.outputs = []
            cell.execution_count = None
        cells.append(cell)
    out.cells = cells
    return out


def add_arguments(ap: argparse.ArgumentParser) -> None:
    ap.add_argument("source", type=Path, help="a solution notebook, or a folder of them")
    ap.add_argument("dest", type=Path, help="nbgrader's source/<assignment>/ folder to write into")
    ap.add_argument("--registry", type=Path, default=None,
                    help="folder of chNN.toml exercise registry files (default: the course's own)")


def run(args: argparse.Namespace) -> int:
    registry = _registry.load(args.registry)
    paths = sorted(args.source.glob("*.ipynb")) if args.source.is_dir() else [args.source]
    args.dest.mkdir(parents=True, exist_ok=True)
    for p in paths:
        nbformat.write(convert(nbformat.read(str(p), as_version=4), registry), str(args.dest / p.name))
        print(f"wrote {args.dest / p.name}")
    return 0
