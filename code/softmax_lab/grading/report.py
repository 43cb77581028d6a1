"""What the gradebook's files say: the CSV (safe from spreadsheet formulas), feedback per learner, the manual-grading
sheets. ``gradebook.py`` decides when they are written, and writes them atomically."""
from __future__ import annotations

import csv
import hashlib
import html
import io
import re

from .chapters import Chapter, without_lead
from .rows import COLUMNS

_FORMULA = ("=", "+", "-", "@", "\t", "\r", "\uff1d", "\uff0b", "\uff0d", "\uff20")
_NUMBER = re.compile(r"^-?\d+(\.\d+)?$")


def escape_cell(value) -> str:
    """A CSV cell a spreadsheet will not run as a formula (=HYPERLINK(...), @SUM(...), +cmd|...): a leading
    apostrophe, as OWASP recommends. Plain numbers are left alone."""
    text = str(value)
    if text.startswith(_FORMULA) and not _NUMBER.match(text):
        return "'" + text
    if text.startswith("'") and text[1:].startswith(_FORMULA):
        return "'" + text  # an apostrophe of the learner's own survives a round trip
    return text


def unescape_cell(text: str) -> str:
    return text[1:] if text.startswith("'") and text[1:].startswith(_FORMULA + ("'",)) else text


def csv_text(rows: list[dict], columns: list[str]) -> str:
    """``rows`` as CSV text with exactly ``columns`` (missing values empty)."""
    buf = io.StringIO()
    w = csv.DictWriter(buf, fieldnames=columns, lineterminator="\n")
    w.writeheader()
    for r in rows:
        w.writerow({k: escape_cell(r.get(k, "")) for k in columns})
    return buf.getvalue()


def gradebook_text(rows: list[dict]) -> str:
    return csv_text(rows, COLUMNS)


# -------------------------------------------------------------------------------------------------- feedback


def _num(x: str) -> float:
    try:
        return float(x)
    except (TypeError, ValueError):
        return 0.0


def _g(x: float) -> str:
    return f"{round(float(x), 2):g}"  # as results.points_text: one way to show points everywhere


STATUS_WORDS = {"passed": "passed", "failed": "failed", "error": "error", "timeout": "timed out",
                "missing": "missing"}


def hint_words(level: str) -> str:
    """The gradebook's ``hints`` cell in words: '' -> 'none', '4' -> 'up to level 4 (the complete answer)'."""
    if not level:
        return "none"
    return f"up to level {level}" + (" (the complete answer)" if level == "4" else "")


RESULT_WORDS = {"pass": "passed", "fail": "not passed", "pending": "awaiting hand grading"}


def feedback_markdown(learner: str, rows: list[dict], chapters: dict[str, Chapter],
                      answers: dict[str, dict[str, str]], results: list[dict] = (), manual: list[dict] = ()) -> str:
    """Feedback for one learner: per submission, a table of exercises and each failed check's message.

    ``answers`` maps submission -> question id -> the learner's answer ('' when unanswered); ``results`` the
    learner's chapter results (results.py), shown on the notebook that counts; ``manual`` the manual-grading
    entries (gradebook.manual_entries): the hand-graded points merged so far, and vetoes.
    """
    result_of = {r["submission"]: r for r in results}
    grades = {(m["submission"], m["question"]): m for m in manual}
    out = [f"# Feedback for {_md(learner)}", ""]
    by_sub: dict[str, list[dict]] = {}
    for r in rows:
        by_sub.setdefault(r["submission"], []).append(r)
    for sub, srows in by_sub.items():
        ch = chapters.get(srows[0]["chapter"])
        got = sum(_num(r["points"]) for r in srows)
        total = sum(_num(r["max_points"]) for r in srows)
        out += [f"## {_md(sub)}" + (f" — {ch.label()}" if ch else ""), "",
                f"Exercises: **{_g(got)} / {_g(total)} points**.", ""]
        res = result_of.get(sub)
        if res:
            asked = bool(ch and ch.questions)  # (a chapter without free-text questions has nothing graded by hand)
            out += [f"Chapter result: **{RESULT_WORDS[res['result']]}**, {res['points']} / {res['max_points']} points"
                    + (" with the hand-graded answers" if asked else "")
                    + (f" ({_md(res['reasons'])})" if res["reasons"] else "") + ".", ""]
        out += [
                "| exercise | points | result | hints used |", "|---|---|---|---|"]
        for r in srows:
            out.append(f"| {r['exercise'] or '—'} | {_g(_num(r['points']))} / {_g(_num(r['max_points']))} | "
                       f"{STATUS_WORDS.get(r['status'], r['status'])} | {hint_words(r.get('hints', ''))} |")
        out.append("")
        for r in srows:
            if (r["status"] != "passed" or "withheld for review" in r["message"]) and r["message"]:
                out += [f"**{_md(r['exercise'] or sub)}** ({STATUS_WORDS.get(r['status'], r['status'])}):",
                        "", "```text",
                        r["message"].replace("```", "'''"), "```", ""]
        qs = ch.questions if ch else []
        if qs:
            out += ["Free-text questions (graded by your instructor):", ""]
            for q in qs:
                answered = bool(answers.get(sub, {}).get(q.id))
                m = grades.get((sub, q.id), {})
                graded = str(m.get("points") or "").strip()
                state = (f"**{_md(graded)} / {q.points}**" if graded
                         else "answered, awaiting grading" if answered else "**not answered**")
                if str(m.get("veto") or "").strip():
                    state += f" (veto: {_md(m['veto'])})"
                out.append(f"- {q.id} ({q.points} point{'s' if q.points != 1 else ''}): {state}")
            out.append("")
        out += ["Run `softmax-lab check YOUR_NOTEBOOK.ipynb` to see these results yourself before handing in.", ""]
    return "\n".join(out)


def safe_filename(name: str) -> str:
    return re.sub(r"[^A-Za-z0-9._-]+", "_", name).strip("._") or "learner"


def feedback_name(learner: str) -> str:
    """The feedback file of a learner: their id when it is a plain file name, else a readable part plus a hash
    of the whole id (josé and josè must not share a file)."""
    safe = safe_filename(learner)
    if safe == learner and len(safe) <= 100:
        return f"{safe}.md"
    digest = hashlib.sha256(learner.encode("utf-8", "surrogateescape")).hexdigest()[:10]
    return f"{safe[:80]}-{digest}.md"


# -------------------------------------------------------------------------------------------- manual grading

MANUAL_COLUMNS = ["submission", "chapter", "question", "points", "max_points", "answer", "veto"]


def manual_csv(entries: list[dict]) -> str:
    """One row per (submission, question), points left empty for the instructor to fill in (and ``veto``: why an
    answer breaks one of the rubric's veto rules, which fails the chapter)."""
    return csv_text(entries, MANUAL_COLUMNS)


def manual_markdown(entries: list[dict], chapters: dict[str, Chapter], sheet: str = "the manual-grading CSV") -> str:
    """Question by question: the prompt, the rubric and the model answer once, then every learner's answer."""
    out = ["# Free-text answers to grade by hand", "",
           f"Grade each answer against the rubric and enter the points in `{sheet}` (column `points`).", ""]
    groups: dict[tuple[str, str], list[dict]] = {}
    for e in entries:
        groups.setdefault((e["chapter"], e["question"]), []).append(e)
    if not groups:
        out += ["No free-text answers to grade by hand in this gradebook (yet).", ""]

    def in_notebook_order(key):  # (chapter, the question's place in its notebook)
        ch = chapters.get(key[0])
        ids = [q.id for q in ch.questions] if ch else []
        return key[0], ids.index(key[1]) if key[1] in ids else len(ids), key[1]

    def headed(heading: str, text: str) -> list[str]:  # (the prompt and rubric cells have leads of their own)
        if text.startswith("#"):  # a "### Question `id`" heading: bold, under this sheet's own headings
            first, _, rest = text.partition("\n")
            return [f"**{first.lstrip('#').strip()}**", rest.strip(), ""]
        return ([] if text.startswith("**") else [heading, ""]) + [text, ""]

    for (chap, qid) in sorted(groups, key=in_notebook_order):
        items = groups[chap, qid]
        ch = chapters.get(chap)
        q = next((q for q in ch.questions if q.id == qid), None) if ch else None
        pts = items[0]["max_points"]
        out += [f"## {qid} — chapter {chap} ({pts} point{'' if str(pts) == '1' else 's'})", ""]
        if q:
            out += (headed("**Question**", q.prompt.strip()) + headed("**Rubric**", q.rubric.strip() or "(none)")
                    + ["**Model answer**", "", _strip_markers(q.model_answer), ""])
        for e in items:
            answer = e["answer"].strip()
            out += [f"### {_md(e['submission'])}", "", "\n".join("> " + _md(ln) for ln in answer.splitlines()) if answer
                    else "_(not answered)_", ""]
    return "\n".join(out)


def _md(text: str) -> str:
    """Learner text in Markdown that may be shown as HTML: no tags, no entities, no control characters."""
    text = "".join(ch if ch.isprintable() or ch == "\t" else "?" for ch in str(text))
    return html.escape(text, quote=False).replace("|", "\\|")


def _strip_markers(text: str) -> str:
    """A model answer as a grader reads it: no solution markers, no template line (``**Your answer:**``)."""
    return without_lead("\n".join(ln for ln in text.strip().splitlines()
                                   if ln.strip() not in ("### BEGIN SOLUTION", "### END SOLUTION")))
