"""Grade one submission: match its chapter, graft, run under nbval, and turn cell results into gradebook rows.

Statuses (one per exercise): ``passed``, ``failed`` (the check printed something other than the solution's
output: usually FAIL lines), ``error`` (the exercise cell or its check raised, or the kernel died, or the
notebook is unreadable), ``timeout`` (a cell ran past its timeout), ``missing`` (no cell tagged
``exercise:<id>`` in the submission, or a notebook of another chapter was handed in).

When an exercise hangs, kills the kernel or exhausts memory, it is graded so, replaced by its blank version,
and the notebook is run again, so that the learner's other exercises are still graded.
"""
from __future__ import annotations

import re
from dataclasses import dataclass, field, replace
from pathlib import Path

from . import hints
from .chapters import Chapter, InvalidNotebook, answers, graft, match_chapter, read_submission
from ..course import sanitize_config
from .runner import Limits, RunResult, code_cell_numbers, run_notebook

COLUMNS = ["submission", "chapter", "exercise", "points", "max_points", "status", "hints", "message"]
STATUSES = ("passed", "failed", "error", "timeout", "missing")
GRADER_TROUBLE = "the grader could not run this notebook"  # rows saying so are graded again on a rerun
_SUMMARY = re.compile(r"^(?P<id>\S+): (PASSED|FAILED) \((?P<k>\d+)/(?P<n>\d+) checks passed\)\s*$", re.MULTILINE)


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


def make_row(submission, chapter, exercise, points, max_points, status, message, hint_level: int = 0) -> dict:
    """One gradebook row (COLUMNS); ``hint_level``: the highest hint the learner was shown (0: none)."""
    assert status in STATUSES, status
    return {"submission": submission, "chapter": chapter, "exercise": exercise, "points": _fmt(points),
            "max_points": _fmt(max_points), "status": status, "hints": str(hint_level) if hint_level else "",
            "message": safe_text(message).strip()}


def safe_text(text: str, line_limit: int = 300, lines: int = 40) -> str:
    """Text that may hold what a learner's code printed, made safe for the gradebook and feedback: valid UTF-8
    (lone surrogates replaced), no control characters but newlines, each line and the number of lines capped."""
    text = str(text).encode("utf-8", "replace").decode("utf-8", "replace")
    out = []
    for ln in text.splitlines()[:lines]:
        ln = "".join(ch if ch.isprintable() or ch == "\t" else "?" for ch in ln)
        out.append(ln if len(ln) <= line_limit else ln[: line_limit - 3] + "...")
    if len(text.splitlines()) > lines:
        out.append(f"... ({len(text.splitlines()) - lines} more lines)")
    return "\n".join(out)


def safe_line(text: str, limit: int = 300) -> str:
    """One line of learner-chosen text (a file name, an id) safe for a terminal: no control, bidi or other
    invisible format characters (they could forge lines, recolour or retitle the terminal), at most ``limit``."""
    text = str(text).encode("utf-8", "surrogateescape").decode("utf-8", "backslashreplace")
    text = "".join(ch if ch.isprintable() else f"\\u{ord(ch):04x}" for ch in text)
    return text if len(text) <= limit else text[: limit - 3] + "..."


def safe_answer(text: str) -> str:
    """A free-text answer kept as written, except control and bidi characters (newlines and tabs stay)."""
    text = str(text).encode("utf-8", "replace").decode("utf-8", "replace")
    return "\n".join("".join(ch if ch.isprintable() or ch == "\t" else "?" for ch in ln) for ln in text.splitlines())


def _fmt(x) -> str:
    return f"{x:g}" if isinstance(x, float) else str(x)


def _raised(rec: dict) -> tuple[str, str]:
    err = rec.get("error") or {}
    if err:
        return err.get("ename", "") or "Error", err.get("evalue", "")
    return "Error", rec.get("message", "")


def _exception_words(ename: str, evalue: str, memory_mb: int) -> str:
    if ename == "NotImplementedError" or "NotImplementedError" in evalue:
        return "not implemented yet - replace `raise NotImplementedError` with your code"
    text = (f"{ename}: {evalue}" if evalue else ename).strip().splitlines()[0][:300] if ename else "an exception"
    if ename == "MemoryError" or "out of memory" in evalue.lower():
        text += f" (the grader caps memory at {memory_mb} MB: does your code allocate without bound?)"
    if ename == "NameError":
        text += " (did you rename or delete a function or variable that the check uses?)"
    return text


def _where(chapter: Chapter, cell_index: int) -> tuple[str | None, str]:
    """Which exercise a notebook cell belongs to, and words for the cell."""
    owner = None
    for ex in chapter.exercises:
        if ex.cell <= cell_index:
            owner = ex
    if owner is None:
        return None, f"cell {cell_index} (before the first exercise)"
    if cell_index == owner.cell:
        return owner.id, "the exercise cell"
    if cell_index == owner.check:
        return owner.id, "its check"
    return owner.id, f"cell {cell_index}, after the exercise (it uses your code)"


def _fatal_words(fatal: dict, where: str, limits: Limits) -> tuple[str, str]:
    kind = fatal["status"]
    if kind == "timeout":
        return "timeout", (f"timed out: {where} ran longer than {limits.cell_timeout:g} s "
                           "(an endless loop? a kernel grid that never ends?)")
    if kind == "wall":
        return "timeout", f"timed out: {fatal['message']} (stopped in {where})"
    if kind == "memory":
        return "error", f"out of memory: {where} {fatal['message']}; the grader stopped it"
    if kind == "died" and fatal["message"].startswith("the grading process"):
        cap = f", or is the memory cap of {limits.memory_mb} MB (--memory-mb) too low" if limits.memory_mb else ""
        return "error", f"{fatal['message']} while running {where} (does your code kill processes{cap}?)"
    if kind == "died":
        return "error", (f"the Python kernel died while running {where} "
                         "(os._exit/exit(), a crash such as a segfault in native code, or out of memory)")
    if kind == "setup-error":
        return "error", f"the run did not start: {fatal['message'][:300]} (is --memory-mb too low?)"
    return "error", f"the grader could not run {where}: {fatal['message'][:500]}"


def _check_message(rec: dict, expected: str, memory_mb: int) -> tuple[str, str]:
    """status and message for a check cell that ran, from what it printed."""
    out = rec.get("stdout", "")
    fails = [ln for ln in out.splitlines() if ln.startswith("FAIL")]
    summary = _SUMMARY.search(out)
    if rec["status"] == "passed":
        return "passed", summary.group(0).strip() if summary else ""
    if rec["status"] == "raised":
        ename, evalue = _raised(rec)
        return "error", "the check raised " + _exception_words(ename, evalue, memory_mb)
    lines = fails + ([summary.group(0).strip()] if summary else [])
    if fails:
        return "failed", "\n".join(lines)
    exp_lines = [ln for ln in expected.splitlines() if ln.strip()]
    got_lines = out.splitlines()
    err = (rec.get("stderr") or "").strip()
    if out.strip() == expected.strip() and err:
        return "failed", ("every check passed, but the check cell also wrote to stderr (a warning from your code?): "
                          f"{err.splitlines()[0][:200]!r}")
    if exp_lines and all(ln in got_lines for ln in exp_lines):
        extra = next((ln for ln in got_lines if ln not in exp_lines and ln.strip()), "")
        return "failed", ("every check passed, but the check cell printed something else too: remove print() "
                          f"calls from your functions (first extra line: {extra[:200]!r})")
    first = next((ln for ln in got_lines if ln.strip()), "(nothing)")
    return "failed", ("the check's output differs from the expected output (first line printed: "
                      f"{first[:200]!r})" + (f"\n{summary.group(0).strip()}" if summary else ""))


def _expected_text(cell) -> str:
    return "".join(o.get("text", "") for o in cell.get("outputs", []) if o.get("output_type") == "stream"
                   and o.get("name") == "stdout")


def grade_notebook(path: Path, name: str, chapters: dict[str, Chapter], opts: Options) -> SubmissionResult:
    """Grade one notebook file. Never raises on a learner's mistake: every problem becomes a row."""
    try:
        nb = read_submission(path)
    except InvalidNotebook as err:
        chapter, _ = match_chapter(None, path, chapters)
        if opts.expected_chapter in chapters:
            chapter = chapters[opts.expected_chapter]
        res = SubmissionResult(name, chapter, [])
        if chapter is None:
            res.rows.append(make_row(name, "", "", 0, 0, "error", str(err)))
        else:
            for ex in chapter.exercises:
                res.rows.append(make_row(name, chapter.chapter, ex.id, 0, ex.points, "error", str(err)))
        return res

    chapter, note = match_chapter(nb, path, chapters)
    notes = [note] if note else []
    if chapter is None:
        if opts.expected_chapter in chapters:
            chapter = chapters[opts.expected_chapter]
            msg = f"not a notebook of this course's chapter {chapter.chapter}: {note}"
            return SubmissionResult(name, chapter, [make_row(name, chapter.chapter, ex.id, 0, ex.points, "missing", msg)
                                                    for ex in chapter.exercises], notes)
        return SubmissionResult(name, None, [make_row(name, "", "", 0, 0, "error", f"cannot tell the chapter: {note}")],
                                notes)
    if opts.expected_chapter and chapter.chapter != opts.expected_chapter and opts.expected_chapter in chapters:
        want = chapters[opts.expected_chapter]
        msg = (f"this notebook is {chapter.label()}, not {want.label()}: hand in the notebook of "
               f"{want.label()}")
        return SubmissionResult(name, want, [make_row(name, want.chapter, ex.id, 0, ex.points, "missing", msg)
                                             for ex in want.exercises], notes)

    result = SubmissionResult(name, chapter, [], notes, answers(chapter, nb))
    if not chapter.exercises:
        return result
    limits = opts.limits
    blank: set[str] = set()
    verdict: dict[str, tuple[str, str]] = {}  # exercise id -> (status, message) decided by a broken run
    demo_blame: dict[str, int] = {}  # exercise id -> the demonstration cell it was blamed for
    blamed_for: dict[str, str] = {}  # exercise id -> the kind of break ("memory", "died", ...) it was blamed for
    run: RunResult | None = None
    g = None
    budget = limits.wall_timeout  # one wall-clock budget for every run of this submission, reruns included
    for _ in range(2 * len(chapter.exercises) + 1):
        left = budget - result.seconds
        if run is not None and left < 1.0:
            for ex in chapter.exercises:
                if ex.id not in verdict and not (ex.check is not None and numbers.get(ex.check) in run.cells):
                    verdict[ex.id] = ("timeout", f"not graded: the runs of this notebook used up its time budget "
                                                 f"({budget:g} s for all runs together)")
            break
        g = graft(chapter, nb, blank)
        numbers = code_cell_numbers(g.nb)
        first = min(ex.cell for ex in chapter.exercises)
        timeouts = {n: (limits.setup_timeout if k < first else limits.cell_timeout) for k, n in numbers.items()}
        run = run_notebook(g.nb, replace(limits, wall_timeout=left), timeouts, opts.sanitize,
                           exercise_cells=[numbers[ex.cell] for ex in chapter.exercises])
        result.runs += 1
        result.seconds += run.seconds
        if run.fatal is None:
            break
        if run.fatal["status"] == "wall":
            run.fatal["message"] = (f"the runs of this notebook took longer than {budget:g} s in all (one budget for "
                                    "every run, reruns included)")
        if run.fatal["status"] == "stopped":  # Ctrl-C: record nothing, so a rerun grades this notebook
            raise KeyboardInterrupt
        index = {n: k for k, n in numbers.items()}.get(run.fatal["cell"])
        culprit, where = (None, "the notebook") if index is None else _where(chapter, index)
        if culprit is not None and where.startswith("cell "):
            # A demonstration cell broke while using learner code: blame the latest exercise before it; if that
            # exercise was blanked for this same cell already and it still broke, it was not the culprit.
            culprit = None
            for ex in reversed([e for e in chapter.exercises if e.cell <= index]):
                if demo_blame.get(ex.id) == index:
                    blank.discard(ex.id)
                    verdict.pop(ex.id, None)
                    blamed_for.pop(ex.id, None)
                    demo_blame.pop(ex.id)
                    continue
                if ex.id not in blank and ex.id not in g.missing:
                    culprit = ex.id
                    demo_blame[culprit] = index
                    break
        if run.fatal["status"] == "wall" and result.runs > 1 and (culprit is None or culprit in blank):
            # The budget ran out in a rerun, before any learner code that is still graded: earlier runs used it.
            for ex in chapter.exercises:
                if ex.id not in verdict and not (ex.check is not None and numbers.get(ex.check) in run.cells):
                    verdict[ex.id] = ("timeout", f"not graded: the runs of this notebook used up its time budget "
                                                 f"({budget:g} s for all runs together)")
            break
        if culprit is None or culprit in blank or culprit in g.missing:
            # Not the learner's code: the solution's own cells failed here (environment, limits too tight).
            _, msg = _fatal_words(run.fatal, where, limits)
            tail = [ln.strip() for ln in run.log.splitlines() if ln.strip()][-3:]
            msg = (f"{GRADER_TROUBLE}, not because of your code ({msg}); "
                   "ask your instructor" + "".join(f"\ngrader log: {ln[:300]}" for ln in tail))
            # Learner code that ran to its end in this run: then the break may still be the learner's doing (a
            # thread left behind, say), and no earlier blame is withdrawn.
            learner_ran = any(numbers.get(e.cell) in run.cells for e in chapter.exercises
                              if e.id not in blank and e.id not in g.missing)
            for ex in chapter.exercises:
                # Every exercise not decided yet, and those blamed for this same kind of break if it happened again
                # with no learner code run (a memory cap too low for the kernel itself strikes a different cell
                # on each run).
                undecided = ex.id not in verdict and not (ex.check is not None and numbers.get(ex.check) in run.cells)
                if undecided or (not learner_ran and blamed_for.get(ex.id) == run.fatal["status"]):
                    verdict[ex.id] = ("error", msg)
            break
        verdict[culprit] = _fatal_words(run.fatal, where, limits)
        blamed_for[culprit] = run.fatal["status"]
        blank.add(culprit)
    result.log = run.log if run else ""

    numbers = code_cell_numbers(g.nb)
    first = min(ex.cell for ex in chapter.exercises)
    for k, n in numbers.items():
        rec = run.cells.get(n)
        if k < first and rec is not None and rec["status"] == "raised":
            # A setup cell of the solution raised or differed: the environment is broken, not the learner's code.
            ename, evalue = _raised(rec)
            msg = (f"{GRADER_TROUBLE}, not because of your code (the chapter's setup cell {k} failed: "
                   f"{(ename + ': ' + evalue) if evalue else rec.get('message', '')[:300]}); ask your instructor")
            for ex in chapter.exercises:
                verdict.setdefault(ex.id, ("error", msg))
            break
    decided: dict[str, tuple[str, str, dict | None]] = {}
    for ex in chapter.exercises:
        ck_rec = None
        if ex.id in verdict:
            status, msg = verdict[ex.id]
        elif ex.id in g.missing:
            status, msg = "missing", (f"no cell tagged exercise:{ex.id} in the submission (deleted, or its tags "
                                      "removed? copy the exercise cell back from the learner notebook)")
        else:
            ex_rec = run.cells.get(numbers[ex.cell])
            ck_rec = run.cells.get(numbers.get(ex.check)) if ex.check is not None else None
            if ex_rec is None:
                status, msg = "error", "not run (an earlier cell broke the run; see the other exercises)"
            elif ex_rec["status"] != "passed":
                ename, evalue = _raised(ex_rec)
                status, msg = "error", "the exercise cell raised " + _exception_words(ename, evalue, limits.memory_mb)
                if ck_rec is not None and ck_rec["status"] != "passed":
                    fails = [ln for ln in ck_rec.get("stdout", "").splitlines() if ln.startswith("FAIL")]
                    msg += "".join(f"\n{ln}" for ln in fails)
            elif ex.check is None:
                status, msg = "error", "this exercise has no check cell in the solution (tell the course authors)"
            elif ck_rec is None:
                status, msg = "error", "its check did not run"
            else:
                status, msg = _check_message(ck_rec, _expected_text(chapter.nb.cells[ex.check]), limits.memory_mb)
                if "MemoryError" in msg and "caps memory" not in msg:
                    msg += f" (the grader caps memory at {limits.memory_mb} MB)"
        decided[ex.id] = (status, msg, ck_rec if status == "failed" and ex.id not in verdict else None)

    # The judge: the learner's own code, launched by the grader on fresh inputs, judged here. It can only take
    # points away from what nbval's run gave (a check that passed in the notebook proves nothing by itself).
    from . import judge

    table = judge.judges(chapter.chapter) if opts.judge else {}
    wanted = {ex.id: g.nb.cells[ex.cell].source for ex in chapter.exercises if ex.id in table
              and (decided[ex.id][0] == "passed" or (opts.partial and decided[ex.id][0] == "failed"))}
    seed = opts.seed if opts.seed is not None else judge.new_seed()
    verdicts = judge.run(chapter.chapter, wanted, limits, seed) if wanted else {}
    result.seed = seed
    used = hints.merge(hints.levels_used(nb), [h for rec in run.cells.values() for h in rec.get("hints", [])])
    for ex in chapter.exercises:
        extra = [n for n in [g.found.get(ex.id, "")] + notes if n]
        status, msg, ck_rec = decided[ex.id]
        jv = verdicts.get(ex.id)
        if status == "passed" and jv is not None and not jv.ok:
            status = "failed"
            msg = ("the notebook's check passed, but the grader's own launch of your code on fresh inputs did not "
                   "(the grader calls your kernel/functions itself; the check cell's output alone earns nothing):\n"
                   + jv.text(ex.id))
        points = ex.points if status == "passed" else 0
        if status == "failed" and opts.partial:
            points = round(ex.points * _partial_fraction(jv, ck_rec, ex.id), 2)
        points, cap_note = hints.capped(points, ex.points, used.get(ex.id, 0), opts.answer_hint_cap)
        msg = "\n".join([msg] + [f"note: {n}" for n in extra] + ([cap_note] if cap_note else []))
        result.rows.append(make_row(name, chapter.chapter, ex.id, points, ex.points, status, msg, used.get(ex.id, 0)))
    return result


def _partial_fraction(jv, ck_rec: dict | None, ident: str) -> float:
    """k/n for --partial-credit, computed by the grader and clamped below 1 (the exercise failed).

    From the grader's own checks (the judge) when it ran; otherwise from the check's LAST output line, only when
    it is exactly the verdict line of this exercise (a learner's print cannot come after it)."""
    fractions = []
    if jv is not None and jv.total > 0:
        fractions.append(jv.passed / jv.total)
    if ck_rec is not None:
        lines = [ln for ln in (ck_rec.get("stdout") or "").splitlines() if ln.strip()]
        m = _SUMMARY.fullmatch(lines[-1].strip()) if lines else None
        if m and m.group("id") == ident and 0 < int(m.group("n")) <= 10000:
            fractions.append(min(int(m.group("k")), int(m.group("n"))) / int(m.group("n")))
    if not fractions:
        return 0.0
    frac = min(fractions)
    return max(0.0, min(frac, 0.99))
