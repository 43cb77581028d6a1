"""`softmax-lab grade --merge FILE`: hand-graded points from the sheet the instructor filled, checked whole first.

The file is ``gradebook.manual.csv`` (or a copy of it) with the column ``points`` filled in, and optionally
``veto`` (why an answer breaks one of the rubric's veto rules: it fails the chapter whatever the total). Rows are
named by ``submission`` and ``question`` (a ``learner`` column, when present, must agree). Every row is checked before
anything is kept: an unknown submission, learner or question, points that are not a number from 0 to the question's
maximum, the same answer graded twice, or an answer that changed since the sheet was made refuse the whole file
with one line per problem, and the gradebook is left exactly as it was.
"""
from __future__ import annotations

import csv
import math
from pathlib import Path

from ..usage import UsageError
from .chapters import without_lead
from .report import unescape_cell
from .rows import safe_line

SHOWN = 20  # problems listed before "... and N more"


def merge_manual(book, path: Path, warnings: list[str] | None = None) -> int:
    """Check ``path`` and put its points and vetoes into ``book`` (grading.gradebook.Gradebook); the number of
    answers graded. UsageError, with every problem, when any row is wrong (``book`` unchanged then). Rows that are
    kept but look wrong (points above 0 for a question the learner did not answer) add a line to ``warnings``."""
    try:
        with open(path, encoding="utf-8-sig", newline="") as f:
            reader = csv.DictReader(f)
            fields = reader.fieldnames or []
            rows = list(reader)
    except (OSError, UnicodeDecodeError, csv.Error) as err:
        raise UsageError(f"--merge {path}: cannot read it as a UTF-8 CSV file ({err})") from None
    need = [c for c in ("submission", "question", "points") if c not in fields]
    if need:
        raise UsageError(f"--merge {path}: no column {', '.join(need)} (fill in the points column of "
                         f"{book.manual_csv_path.name}, keeping its columns)")
    problems, points, vetoes, seen = [], {}, {}, {}
    for line, r in enumerate(rows, start=2):
        problem, key, value, veto = _check_row(book, line, r, "answer" in fields, seen)
        if problem:
            problems.append(problem)
        elif value is not None:
            points[key] = value
            if veto:
                vetoes[key] = veto
            if warnings is not None and not key[2].strip() and float(value) > 0:
                warnings.append(f"--merge {path}: line {line} ({safe_line(key[0], 80)}, {safe_line(key[1], 40)}): "
                                f"{value} point(s) for a question the learner did not answer (kept; 0 if that was "
                                "a slip)")
    if problems:
        shown = problems[:SHOWN] + ([f"... and {len(problems) - SHOWN} more"] if len(problems) > SHOWN else [])
        raise UsageError(f"--merge {path}: nothing merged, {len(problems)} problem(s):\n  " + "\n  ".join(shown))
    for key in {(s, q) for s, q, _ in points} | {(s, q) for s, q, _ in vetoes}:
        for store in (book.manual_points, book.manual_vetoes):  # a regraded answer replaces the earlier grade
            for old in [k for k in store if k[:2] == key]:
                del store[old]
    book.manual_points.update(points)
    book.manual_vetoes.update(vetoes)
    return len(points)


def _check_row(book, line: int, r: dict, has_answer: bool, seen: dict):
    """(problem, (submission, question, answer), points, veto) of one row: a problem in words, or points None
    for a row left empty."""
    sub = unescape_cell((r.get("submission") or "").strip())
    qid = (r.get("question") or "").strip()
    where = f"line {line} ({safe_line(sub, 80)}, {safe_line(qid, 40)})"
    if sub not in book.rows:
        return f"{where}: no submission {safe_line(sub, 80)} in this gradebook", None, None, ""
    learner = unescape_cell((r.get("learner") or "").strip())
    if learner and book.learner_of.get(sub) != learner:
        return (f"{where}: the submission is learner {safe_line(book.learner_of.get(sub, '?'), 60)}'s, not "
                f"{safe_line(learner, 60)}'s"), None, None, ""
    ch = book.chapter_of.get(sub)
    q = next((q for q in (ch.questions if ch else []) if q.id == qid), None)
    if q is None:
        have = ", ".join(x.id for x in ch.questions) if ch and ch.questions else "none"
        return f"{where}: no question {safe_line(qid, 40)} in this notebook's chapter (its questions: {have})", \
            None, None, ""
    if (sub, qid) in seen:
        return f"{where}: graded twice (also on line {seen[(sub, qid)]}); keep one row", None, None, ""
    seen[(sub, qid)] = line
    answer = book.answers_by.get(sub, {}).get(qid, "")
    if has_answer and without_lead(unescape_cell(r.get("answer") or "")) != without_lead(answer):
        return (f"{where}: the learner's answer is not the one in this sheet (the notebook changed since the sheet "
                "was written): grade the answer in the new sheet"), None, None, ""
    text = (r.get("points") or "").strip()
    veto = unescape_cell((r.get("veto") or "").strip())
    if not text:
        problem = f"{where}: a veto without points: enter the question's points too (0 is fine)" if veto else ""
        return problem, None, None, ""
    try:
        value = float(text)
    except ValueError:
        value = math.nan
    if not (0 <= value <= q.points):
        return f"{where}: points {safe_line(text, 20)!r} are not a number from 0 to {q.points}", None, None, ""
    return "", (sub, qid, answer), f"{value:g}", veto
