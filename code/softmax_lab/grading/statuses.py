"""Each exercise's status and message, decided from the cells nbval ran (the runs' own verdicts come first).

``passed``: the check printed exactly the solution's output; ``failed``: something else (usually FAIL lines);
``error``: the exercise cell or its check raised, or did not run; ``missing``: no cell tagged ``exercise:<id>``;
``timeout``: a cell ran past the grader's limit (a check that stopped a case of the learner's code after its own
limit is ``failed``, with the STOPPED line).
"""
from __future__ import annotations

import itertools
import re

from .blanking import Runs
from .chapters import Chapter
from .rows import GRADER_TROUBLE, cut_at_word

STOPPED = re.compile(r"STOPPED  after [\d.]+ s")  # what checks/guard.py prints when its time limit stops a case
STOPPED_VERDICT = re.compile(r"^\S+: FAILED \(stopped: ", re.MULTILINE)
SUMMARY = re.compile(r"^(?P<id>\S+): (PASSED|FAILED) \((?P<k>\d+)/(?P<n>\d+) checks passed\)\s*$", re.MULTILINE)


def decide_from_cells(chapter: Chapter, runs: Runs, memory_mb: int) -> dict[str, tuple[str, str, dict | None]]:
    """exercise id -> (status, message, the check's record when the check itself failed, for partial credit)."""
    verdicts = {**setup_trouble(chapter, runs), **runs.verdicts}
    decided = {}
    for ex in chapter.exercises:
        if ex.id in verdicts:
            decided[ex.id] = (*verdicts[ex.id], None)
        elif ex.id in runs.graft.missing:
            decided[ex.id] = ("missing", f"no cell tagged exercise:{ex.id} in the submission (deleted, or its tags "
                                         "removed? copy the exercise cell back from the learner notebook)", None)
        else:
            ck_rec = runs.run.cells.get(runs.numbers.get(ex.check)) if ex.check is not None else None
            status, msg = exercise_status(chapter, ex, runs, ck_rec, memory_mb)
            decided[ex.id] = (status, msg, ck_rec if status == "failed" else None)
    return decided


def setup_trouble(chapter: Chapter, runs: Runs) -> dict[str, tuple[str, str]]:
    """A setup cell of the solution raised: the environment is broken, not the learner's code (every exercise)."""
    first = min(ex.cell for ex in chapter.exercises)
    for k, n in runs.numbers.items():
        rec = runs.run.cells.get(n)
        if k < first and rec is not None and rec["status"] == "raised":
            ename, evalue = raised(rec)
            msg = (f"{GRADER_TROUBLE}, not because of your code (the chapter's setup cell {k} failed: "
                   f"{(ename + ': ' + evalue) if evalue else rec.get('message', '')[:300]}); ask your instructor")
            return {ex.id: ("error", msg) for ex in chapter.exercises}
    return {}


def exercise_status(chapter: Chapter, ex, runs: Runs, ck_rec: dict | None, memory_mb: int) -> tuple[str, str]:
    """(status, message) of an exercise whose cell was in the run, from its cell's and its check's records."""
    ex_rec = runs.run.cells.get(runs.numbers[ex.cell])
    if ex_rec is None:
        return "error", "not run (an earlier cell broke the run; see the other exercises)"
    if ex_rec["status"] != "passed":
        ename, evalue = raised(ex_rec)
        if ename in INTERRUPTS:
            return "timeout", interrupted_words("the exercise cell", evalue)
        msg = "the exercise cell raised " + exception_words(ename, evalue, memory_mb)
        if ck_rec is not None and ck_rec["status"] != "passed":
            fails = [ln for ln in ck_rec.get("stdout", "").splitlines() if ln.startswith("FAIL")]
            msg += "".join(f"\n{ln}" for ln in fails)
        return "error", msg
    if ex.check is None:
        return "error", "this exercise has no check cell in the solution (tell the course authors)"
    if ck_rec is None:
        return "error", "its check did not run"
    status, msg = check_message(ck_rec, expected_text(chapter.nb.cells[ex.check]), memory_mb)
    if "MemoryError" in msg and "caps memory" not in msg:
        msg += f" (the grader caps memory at {memory_mb} MB)"
    return status, msg


def check_message(rec: dict, expected: str, memory_mb: int) -> tuple[str, str]:
    """status and message for a check cell that ran, from what it printed."""
    out = rec.get("stdout", "")
    fails = [ln for ln in out.splitlines() if ln.startswith("FAIL")]
    summary = SUMMARY.search(out)
    if rec["status"] == "passed":
        return "passed", summary.group(0).strip() if summary else ""
    if rec["status"] == "raised":
        ename, evalue = raised(rec)
        if ename in INTERRUPTS:  # nobody presses Interrupt in the grader: the cell's time limit did
            return "timeout", interrupted_words("the check", evalue)
        return "error", "the check raised " + exception_words(ename, evalue, memory_mb)
    lines = fails + ([summary.group(0).strip()] if summary else [])
    got_lines = out.splitlines()
    stop = next((k for k, ln in enumerate(got_lines) if STOPPED.match(ln)), None)
    if stop is not None and STOPPED_VERDICT.search(out):  # the check's time limit stopped a case (checks/guard.py):
        # failed (its other cases may still earn partial credit), said plainly, with the likely cause
        cause = list(itertools.takewhile(lambda ln: ln.startswith("  "), got_lines[stop + 1:]))
        return "failed", "\n".join(fails + [got_lines[stop]] + cause)
    if fails:
        return "failed", "\n".join(lines)
    exp_lines = [ln for ln in expected.splitlines() if ln.strip()]
    err = (rec.get("stderr") or "").strip()
    if out.strip() == expected.strip() and err:
        return "failed", ("every check passed, but the check cell also wrote to stderr (a warning from your code?): "
                          f"{err.splitlines()[0][:200]!r}")
    if exp_lines and all(ln in got_lines for ln in exp_lines):
        extra = next((ln for ln in got_lines if ln not in exp_lines and ln.strip()), "")
        return "failed", ("every check passed, but the check cell printed something else too: remove print() "
                          f"calls from your functions (first extra line: {extra[:200]!r})")
    got = [ln for ln in got_lines if ln.strip()]
    at = next((k for k in range(max(len(got), len(exp_lines))) if k >= len(got) or k >= len(exp_lines)
               or got[k] != exp_lines[k]), 0)
    printed = _quoted(got[at]) if at < len(got) else "nothing more" if got else "nothing"
    wanted = _quoted(exp_lines[at]) if at < len(exp_lines) else "nothing more"
    return "failed", (f"the check's output differs from the expected output from its line {at + 1} on: it printed "
                      f"{printed} where the solution's check printed {wanted}"
                      + (f"\n{summary.group(0).strip()}" if summary else ""))


def _quoted(line: str, limit: int = 500) -> str:
    """A line of a check's output, quoted whole up to ``limit`` characters, else cut at a word and saying so."""
    return repr(line if len(line) <= limit else cut_at_word(line, limit))


def raised(rec: dict) -> tuple[str, str]:
    """(exception name, its value) of a cell record that raised."""
    err = rec.get("error") or {}
    if err:
        return err.get("ename", "") or "Error", err.get("evalue", "")
    return "Error", rec.get("message", "")


INTERRUPTS = ("KeyboardInterrupt", "CheckInterrupted")  # what a cell shows when nbval's time limit interrupts it


def interrupted_words(what: str, evalue: str) -> str:
    """A cell the grader's time limit interrupted: what was running (the check's own lines say where)."""
    lines = [ln for ln in evalue.splitlines() if ln.strip() and not ln.startswith("Run the exercise cell")]
    return (f"timed out: {what} ran past the grader's time limit for a cell (an endless loop?)"
            + "".join(f"\n{ln[:300]}" for ln in lines[:4]))


def exception_words(ename: str, evalue: str, memory_mb: int) -> str:
    """An exception in a learner's words, with the likely fix."""
    if ename == "NotImplementedError" or "NotImplementedError" in evalue:
        return "not implemented yet - replace `raise NotImplementedError` with your code"
    text = (f"{ename}: {evalue}" if evalue else ename).strip().splitlines()[0][:300] if ename else "an exception"
    if ename == "MemoryError" or "out of memory" in evalue.lower():
        text += f" (the grader caps memory at {memory_mb} MB: does your code allocate without bound?)"
    if ename == "NameError":
        text += " (did you rename or delete a function or variable that the check uses?)"
    return text


def expected_text(cell) -> str:
    """What the solution's check cell printed on stdout (its stored outputs)."""
    return "".join(o.get("text", "") for o in cell.get("outputs", []) if o.get("output_type") == "stream"
                   and o.get("name") == "stdout")
