"""Per learner and chapter: the points that count, and pass or fail by seed 002's rule (the lesson with a rubric).

The rule (``solutions/03_naive_kernel.ipynb`` states it for chapter 3; every chapter is judged the same way): a
learner passes a chapter when every code exercise passed the grader (her own work: no points withheld for copying),
no hand-graded answer carries a veto, and the total (exercises + hand-graded answers) is at least 8/10 of the
chapter's points. The threshold is read from the chapter's rubric cells when one states it (``at least 8/10``), else
``[grading] pass_threshold`` in softmax-lab.toml, else ``--pass-threshold``'s default 0.8. Until every free-text
answer is graded, the result is ``pending``.
"""
from __future__ import annotations

import re
from dataclasses import dataclass, field

from ..course.notebook import tag_value
from .chapters import Chapter

DEFAULT_THRESHOLD = 0.8  # seed 002: "总分不低于 8/10"
_STATED = re.compile(r"at least\W{0,4}(\d+)\s*/\s*(\d+)", re.IGNORECASE)
RESULT_COLUMNS = ["learner", "name", "chapter", "submission", "exercise_points", "manual_points", "points",
                  "max_points", "result", "reasons"]


def points_text(x: float) -> str:
    """Points as every file and page of the gradebook shows them: at most two decimals, no trailing zeros."""
    return f"{round(float(x), 2):g}"


@dataclass
class PassRule:
    threshold: float
    source: str                                      # where the threshold comes from, in words
    vetoes: list[str] = field(default_factory=list)  # the rubric's veto lines (for the instructor's sheet)


def pass_rule(chapter: Chapter, default: float = DEFAULT_THRESHOLD, configured: bool = False) -> PassRule:
    """The chapter's rule: a threshold its rubric cells state ("at least 8/10"), else ``default``."""
    vetoes, stated = [], None
    for cell in chapter.nb.cells:
        if tag_value(cell, "rubric:") is None:
            continue
        for line in cell.source.splitlines():
            if "veto" in line.lower():
                vetoes.append(line.strip(" *-"))
        m = _STATED.search(cell.source.replace("*", ""))
        if m and int(m.group(2)) > 0 and stated is None:
            stated = (int(m.group(1)), int(m.group(2)))
    if stated and not configured:
        return PassRule(stated[0] / stated[1], f"the chapter's rubric: at least {stated[0]}/{stated[1]}", vetoes)
    return PassRule(default, ("the course's setting" if configured else "the course's default rule")
                    + f": at least {default:.0%} of the points", vetoes)


@dataclass
class ManualGrade:
    points: str = ""   # '' while not graded
    veto: str = ""     # the instructor's reason when the answer breaks a veto rule


def _num(x) -> float:
    try:
        return float(x)
    except (TypeError, ValueError):
        return 0.0


def chapter_result(learner: str, chapter: Chapter, submission: str, rows: list[dict],
                   manual: dict[str, ManualGrade], rule: PassRule, notes: list[str] = ()) -> dict:
    """One learner's result for one chapter from its exercise rows (copy policy applied) and hand-graded points."""
    reasons = list(notes)
    ex_points = sum(_num(r["points"]) for r in rows)
    failed = [r for r in rows if r["status"] != "passed"]
    withheld = [r for r in rows if r["status"] == "passed" and r.get("copy") and _num(r["points"]) == 0
                and _num(r["max_points"]) > 0]
    for r in failed:
        reasons.append(f"{r['exercise'] or 'the notebook'} {r['status']}")
    for r in withheld:
        reasons.append(f"{r['exercise']}: points withheld for copy review")
    pending = [q.id for q in chapter.questions if not manual.get(q.id, ManualGrade()).points.strip()]
    man_points = sum(_num(manual[q.id].points) for q in chapter.questions if q.id not in pending)
    vetoes = [(q.id, manual[q.id].veto) for q in chapter.questions if q.id in manual and manual[q.id].veto.strip()]
    reasons += [f"veto on {qid}: {text}" for qid, text in vetoes]
    max_points = chapter.max_points + sum(q.points for q in chapter.questions)
    total = ex_points + man_points
    need = rule.threshold * max_points
    if failed or withheld or vetoes:
        result = "fail"
    elif pending:
        result = "pending"
        reasons.append(f"hand grading not entered yet: {', '.join(pending)}")
    elif total + 1e-9 < need:
        result = "fail"
    else:
        result = "pass"
    if not pending and total + 1e-9 < need:
        reasons.append(f"{points_text(total)} of {points_text(max_points)} points, below the {points_text(need)} "
                       f"needed ({rule.source})")
    return {"learner": learner, "chapter": chapter.chapter, "submission": submission,
            "exercise_points": points_text(ex_points), "manual_points": points_text(man_points),
            "points": points_text(total), "max_points": points_text(max_points), "result": result,
            "reasons": "; ".join(reasons)}


def lms_rows(results: list[dict], learners: list[str], chapters: list[str]) -> tuple[list[dict], list[str]]:
    """One row per learner, one column per chapter (the points that count, empty when nothing was handed in), and
    the total: what a learning management system's grade import reads."""
    columns = ["learner"] + [f"chapter {c}" for c in chapters] + ["total"]
    by = {(r["learner"], r["chapter"]): r for r in results}
    rows = []
    for learner in learners:
        row = {"learner": learner}
        total = 0.0
        for c in chapters:
            r = by.get((learner, c))
            r = r if r and r.get("submission", "-") != "" else None  # (a roster learner's "no submission" row)
            row[f"chapter {c}"] = r["points"] if r else ""
            total += _num(r["points"]) if r else 0.0
        row["total"] = points_text(total)
        rows.append(row)
    return rows, columns
