"""One learner's feedback as a web page: per chapter the result by the course's pass rule, every exercise with its
points and the grader's whole message, and the hand-graded answers. Everything a learner wrote is escaped."""
from __future__ import annotations

from html import escape

from .chapters import Chapter
from .report import STATUS_WORDS, hint_words
from .results import points_text

STYLE = """
body { font: 16px/1.5 system-ui, sans-serif; max-width: 56rem; margin: 2rem auto; padding: 0 1rem; color: #1b1f24; }
h1 { font-size: 1.6rem; } h2 { font-size: 1.25rem; margin-top: 2.5rem; border-bottom: 1px solid #d0d7de; }
table { border-collapse: collapse; width: 100%; margin: 1rem 0; }
th, td { border: 1px solid #d0d7de; padding: .35rem .6rem; text-align: left; vertical-align: top; }
th { background: #f6f8fa; }
pre { background: #f6f8fa; padding: .75rem; overflow-x: auto; white-space: pre-wrap; word-break: break-word; }
.result { font-weight: 600; padding: .5rem .75rem; border-radius: 6px; display: inline-block; }
.pass { background: #dafbe1; color: #116329; } .fail { background: #ffebe9; color: #a40e26; }
.pending { background: #fff8c5; color: #7d4e00; }
.passed { color: #116329; } .failed, .error, .timeout, .missing { color: #a40e26; }
.copy { color: #7d4e00; }
"""


def _e(text) -> str:
    return escape(str(text), quote=True)


def feedback_html(learner: str, name: str, rows: list[dict], chapters: dict[str, Chapter],
                  answers: dict[str, dict[str, str]], results: list[dict], manual: list[dict]) -> str:
    """The page: ``rows`` are this learner's gradebook rows (copy check applied), ``results`` their chapter results,
    ``manual`` every manual-grading entry (this learner's are picked by submission)."""
    who = f"{name} ({learner})" if name and name != learner else learner
    out = ["<!DOCTYPE html>", '<html lang="en"><head><meta charset="utf-8">',
           '<meta name="viewport" content="width=device-width, initial-scale=1">',
           f"<title>Feedback for {_e(who)}</title><style>{STYLE}</style></head><body>",
           f"<h1>Feedback for {_e(who)}</h1>"]
    by_sub: dict[str, list[dict]] = {}
    for r in rows:
        by_sub.setdefault(r["submission"], []).append(r)
    result_of = {r["submission"]: r for r in results}
    grades = {(m["submission"], m["question"]): m for m in manual}
    for sub, srows in by_sub.items():
        ch = chapters.get(srows[0]["chapter"])
        out.append(f"<h2>{_e(ch.label() if ch else 'A notebook')}: <code>{_e(sub)}</code></h2>")
        res = result_of.get(sub)
        if res:
            word = {"pass": "Passed", "fail": "Not passed", "pending": "Awaiting hand grading"}[res["result"]]
            out.append(f'<p><span class="result {res["result"]}">{word}: {res["points"]} of {res["max_points"]} '
                       "points</span></p>")
            if res["reasons"]:
                out.append("<ul>" + "".join(f"<li>{_e(x)}</li>" for x in res["reasons"].split("; ")) + "</ul>")
        elif ch:
            out.append("<p>This notebook does not count for the chapter: another notebook of yours does.</p>")
        got = sum(float(r["points"] or 0) for r in srows)
        total = sum(float(r["max_points"] or 0) for r in srows)
        out += [f"<p>Exercises: <strong>{points_text(got)} of {points_text(total)} points</strong>.</p>",
                "<table><tr><th>exercise</th><th>points</th><th>result</th><th>hints used</th></tr>"]
        for r in srows:
            status = r["status"]
            out.append(f"<tr><td>{_e(r['exercise'] or '—')}</td><td>{points_text(float(r['points'] or 0))} of "
                       f"{points_text(float(r['max_points'] or 0))}</td><td class=\"{_e(status)}\">"
                       f"{_e(STATUS_WORDS.get(status, status))}</td><td>{_e(hint_words(r.get('hints', '')))}</td></tr>")
        out.append("</table>")
        for r in srows:
            if r["message"] and (r["status"] != "passed" or "note:" in r["message"]):
                klass = ' class="copy"' if "withheld for review" in r["message"] else ""
                out += [f"<h3{klass}>{_e(r['exercise'] or sub)}: {_e(STATUS_WORDS.get(r['status'], r['status']))}</h3>",
                        f"<pre>{_e(r['message'])}</pre>"]
        qs = ch.questions if ch else []
        if qs:
            out += ["<h3>Free-text questions (graded by your instructor)</h3>",
                    "<table><tr><th>question</th><th>points</th></tr>"]
            for q in qs:
                answer = answers.get(sub, {}).get(q.id, "")
                m = grades.get((sub, q.id), {})
                pts = (f"{_e(m['points'])} of {q.points}" if m.get("points")
                       else (f"awaiting grading (of {q.points})" if answer else f"not answered (of {q.points})"))
                if m.get("veto"):
                    pts += f"<br>veto: {_e(m['veto'])}"
                out.append(f"<tr><td>{_e(q.id)}</td><td>{pts}</td></tr>")
            out.append("</table>")
    out += ["<p>Run <code>softmax-lab check YOUR_NOTEBOOK.ipynb</code> to see these results yourself before handing "
            "in.</p>", "</body></html>", ""]
    return "\n".join(out)
