"""Grade one submission as a short pipeline of named steps, as nbgrader declares its preprocessors:

    match_submission     read the file and find its chapter (unreadable, or another chapter: rows at once)
    run_with_blanking    graft its exercise cells into the solution notebook, run it under nbval in a sandbox,
                         and run it again without each exercise that hangs, crashes or exhausts memory
                         (blanking.py, runner.py)
    decide_from_cells    each exercise's status and message from the cells that ran (statuses.py)
    judge_exercises      the learner's own code relaunched by the grader on fresh inputs (scoring.py, judge.py)
    score                points, partial credit and the hint cap: one gradebook row per exercise (scoring.py)

Statuses (one per exercise): ``passed``, ``failed`` (the check printed something other than the solution's
output: usually FAIL lines), ``error`` (the exercise cell or its check raised, or the kernel died, or the
notebook is unreadable), ``timeout`` (a cell ran past its timeout), ``missing`` (no cell tagged
``exercise:<id>`` in the submission, or a notebook of another chapter was handed in).
"""
from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path

from . import hints
from ..course import sanitize_config
from .blanking import run_with_blanking
from .chapters import Chapter, InvalidNotebook, answers, match_chapter, read_submission
from .rows import make_row
from .runner import Limits
from .scoring import judge_exercises, score
from .statuses import decide_from_cells


@dataclass
class Options:
    limits: Limits = field(default_factory=Limits)
    sanitize: str = field(default_factory=sanitize_config)  # nbval's sanitizer (softmax_lab/data/nbval_sanitize.cfg)
    expected_chapter: str | None = None  # --chapter: a notebook of another chapter scores 'missing'
    partial: bool = False                # award points * k/n of the grader's own checks for a failed exercise
    judge: bool = True                   # launch the learner's code on fresh inputs outside nbval (judge.py)
    seed: int | None = None              # the judge's inputs; None: fresh from os.urandom per submission
    answer_hint_cap: float = hints.DEFAULT_ANSWER_HINT_CAP  # max share of points after seeing the answer


@dataclass
class SubmissionResult:
    submission: str
    chapter: Chapter | None
    rows: list[dict]
    notes: list[str] = field(default_factory=list)
    answers: dict[str, str] = field(default_factory=dict)
    runs: int = 0
    seconds: float = 0.0
    seed: int | None = None
    log: str = ""


def grade_notebook(path: Path, name: str, chapters: dict[str, Chapter], opts: Options) -> SubmissionResult:
    """Grade one notebook file. Never raises on a learner's mistake: every problem becomes a row."""
    matched = match_submission(path, name, chapters, opts)
    if isinstance(matched, SubmissionResult):  # unreadable, or not a notebook of the chapter graded
        return matched
    nb, chapter, notes = matched
    result = SubmissionResult(name, chapter, [], notes, answers(chapter, nb))
    if not chapter.exercises:
        return result
    if untouched(chapter, nb) and not any(result.answers.values()):  # nothing to run: say so plainly
        result.rows = every_exercise(name, chapter, "failed", BLANK)
        return result
    runs = run_with_blanking(chapter, nb, opts)
    decided = decide_from_cells(chapter, runs, opts.limits.memory_mb)
    verdicts, result.seed = judge_exercises(chapter, runs, decided, opts)
    result.rows = score(name, chapter, nb, runs, decided, verdicts, notes, opts)
    result.runs, result.seconds, result.log = runs.count, runs.seconds, runs.run.log
    return result


def match_submission(path: Path, name: str, chapters: dict[str, Chapter], opts: Options):
    """(notebook, its chapter, notes) to grade, or the finished result of a file that cannot be graded as one."""
    try:
        nb = read_submission(path)
    except InvalidNotebook as err:
        chapter, _ = match_chapter(None, path, chapters)
        if opts.expected_chapter in chapters:
            chapter = chapters[opts.expected_chapter]
        if chapter is None:
            return SubmissionResult(name, None, [make_row(name, "", "", 0, 0, "error", str(err))])
        return SubmissionResult(name, chapter, every_exercise(name, chapter, "error", str(err)))
    chapter, note = match_chapter(nb, path, chapters)
    notes = [note] if note else []
    if chapter is not None:
        moved = other_chapters_cells(chapter, chapters, nb)
        notes += [moved] if moved else []
    want = chapters.get(opts.expected_chapter) if opts.expected_chapter else None
    if chapter is None and want is not None:
        msg = f"not a notebook of this course's chapter {want.chapter}: {note}"
        return SubmissionResult(name, want, every_exercise(name, want, "missing", msg), notes)
    if chapter is None:
        return SubmissionResult(name, None, [make_row(name, "", "", 0, 0, "error", f"cannot tell the chapter: {note}")],
                                notes)
    if want is not None and chapter.chapter != want.chapter:
        msg = f"this notebook is {chapter.label()}, not {want.label()}: hand in the notebook of {want.label()}"
        return SubmissionResult(name, want, every_exercise(name, want, "missing", msg), notes)
    return nb, chapter, notes


BLANK = ("not implemented yet: this is the blank notebook as handed out (no exercise cell was changed, no question "
         "answered), so nothing was run")


def _plain(source) -> str:
    source = "".join(source) if isinstance(source, list) else str(source)
    return "\n".join(line.rstrip() for line in source.strip().splitlines())


def untouched(chapter: Chapter, nb) -> bool:
    """Every exercise cell of the submission is the learner version's blank one (or absent)."""
    blanks = {ex.id: _plain(ex.blank) for ex in chapter.exercises}
    seen = False
    for cell in nb.cells:
        tags = cell.get("metadata", {}).get("tags", [])
        for t in tags if isinstance(tags, list) else []:
            if isinstance(t, str) and t.startswith("exercise:") and t[len("exercise:"):] in blanks:
                seen = True
                if _plain(cell.get("source", "")) != blanks[t[len("exercise:"):]]:
                    return False
    return seen


def other_chapters_cells(chapter: Chapter, chapters: dict[str, Chapter], nb) -> str:
    """A note when the notebook also holds exercise cells of other chapters (notebooks merged, cells moved): they
    are not graded here."""
    ids = {t[len("exercise:"):] for c in nb.cells for t in (c.get("metadata", {}).get("tags", []) or [])
           if isinstance(t, str) and t.startswith("exercise:")}
    elsewhere = {k: sorted(ids & {e.id for e in ch.exercises}) for k, ch in chapters.items() if k != chapter.chapter}
    found = {k: v for k, v in elsewhere.items() if v}
    if not found:
        return ""
    return ("this notebook also holds exercise cells of " + "; ".join(f"chapter {k} ({', '.join(v)})"
                                                                      for k, v in sorted(found.items()))
            + f": they are not graded as part of chapter {chapter.chapter}; hand them in in their own chapter's "
            "notebook")


def every_exercise(name: str, chapter: Chapter, status: str, message: str) -> list[dict]:
    """The same row, with no points, for every exercise of ``chapter``."""
    return [make_row(name, chapter.chapter, ex.id, 0, ex.points, status, message) for ex in chapter.exercises]
