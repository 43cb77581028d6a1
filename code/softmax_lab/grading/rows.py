"""One gradebook row per exercise, and learner text made safe for the gradebook, the feedback and a terminal."""
from __future__ import annotations

COLUMNS = ["submission", "chapter", "exercise", "points", "max_points", "status", "hints", "message", "copy"]
OLD_COLUMNS = COLUMNS[:-1]  # gradebooks written before copy detection joined `grade` (read, then rewritten)
STATUSES = ("passed", "failed", "error", "timeout", "missing")
GRADER_TROUBLE = "the grader could not run this notebook"  # rows saying so are graded again on a rerun


def make_row(submission, chapter, exercise, points, max_points, status, message, hint_level: int = 0) -> dict:
    """One gradebook row (COLUMNS); ``hint_level``: the highest hint the learner was shown (0: none)."""
    assert status in STATUSES, status
    return {"submission": submission, "chapter": chapter, "exercise": exercise, "points": _fmt(points),
            "max_points": _fmt(max_points), "status": status, "hints": str(hint_level) if hint_level else "",
            "message": safe_text(message).strip(), "copy": ""}


def safe_text(text: str, line_limit: int = 2000, lines: int = 40) -> str:
    """Text that may hold what a learner's code printed, made safe for the gradebook and feedback: valid UTF-8
    (lone surrogates replaced), no control characters but newlines, each line and the number of lines capped.

    The caps are against floods, far above any message of the course's checks: a line past ``line_limit`` is cut
    at a space (never inside a word) and says how much was left out."""
    text = str(text).encode("utf-8", "replace").decode("utf-8", "replace")
    out = []
    for ln in text.splitlines()[:lines]:
        ln = "".join(ch if ch.isprintable() or ch == "\t" else "?" for ch in ln)
        out.append(ln if len(ln) <= line_limit else cut_at_word(ln, line_limit))
    if len(text.splitlines()) > lines:
        out.append(f"... ({len(text.splitlines()) - lines} more lines)")
    return "\n".join(out)


def cut_at_word(line: str, limit: int) -> str:
    """``line`` cut to about ``limit`` characters at the last space before it, saying how many were left out."""
    head = line[:limit]
    space = head.rfind(" ")
    head = head[:space] if space > limit // 2 else head
    return f"{head} [... {len(line) - len(head)} more characters]"


def safe_line(text: str, limit: int = 300) -> str:
    """One line of learner-chosen text (a file name, an id) safe for a terminal: no control, bidi or other
    invisible format characters (they could forge lines, recolour or retitle the terminal), at most ``limit``."""
    text = str(text).encode("utf-8", "surrogateescape").decode("utf-8", "backslashreplace")
    text = "".join(ch if ch.isprintable() else f"\\u{ord(ch):04x}" for ch in text)
    return text if len(text) <= limit else text[: limit - 3] + "..."


def _fmt(x) -> str:
    return f"{x:g}" if isinstance(x, float) else str(x)
