"""Run a notebook, and run it again without the exercise that broke the run, so that the others are still graded.

A hang, a dead kernel or exhausted memory is blamed on one exercise: the one whose cell broke, or, for a
demonstration cell that uses learner code, the latest exercise before it not blanked yet. That exercise is graded
so, replaced by its blank version, and the notebook runs again, all runs within one wall-clock budget. A break
that no learner code explains (a setup cell, every suspect blanked already) is the grader's trouble, never the
learner's.
"""
from __future__ import annotations

from dataclasses import dataclass, field, replace

from .chapters import Chapter, Graft, graft
from .rows import GRADER_TROUBLE
from .runner import Limits, RunResult, code_cell_numbers, run_notebook


@dataclass
class Runs:
    """What the runs of one notebook left: the last run, the notebook it ran, and the verdicts of the breaks."""
    run: RunResult
    graft: Graft
    numbers: dict[int, int]                                        # graft cell index -> nbval's cell number
    verdicts: dict[str, tuple[str, str]] = field(default_factory=dict)  # exercise id -> (status, message)
    count: int = 1
    seconds: float = 0.0

    def checked(self, ex) -> bool:
        """The exercise's check cell ran to its end in the last run."""
        return ex.check is not None and self.numbers.get(ex.check) in self.run.cells


@dataclass
class Blame:
    """Which exercises are blanked after breaks, and why."""
    blank: set[str] = field(default_factory=set)
    verdicts: dict[str, tuple[str, str]] = field(default_factory=dict)  # exercise id -> (status, message)
    demo: dict[str, int] = field(default_factory=dict)   # exercise id -> the demonstration cell it was blamed for
    kinds: dict[str, str] = field(default_factory=dict)  # exercise id -> the kind of break ("memory", "died", ...)

    def add(self, ident: str, verdict: tuple[str, str], kind: str) -> None:
        self.verdicts[ident], self.kinds[ident] = verdict, kind
        self.blank.add(ident)

    def withdraw(self, ident: str) -> None:
        self.blank.discard(ident)
        for book in (self.verdicts, self.kinds, self.demo):
            book.pop(ident, None)


def run_with_blanking(chapter: Chapter, nb, opts) -> Runs:
    """Run the grafted notebook, blanking the exercise each break is blamed on, until a run ends or none is."""
    limits = opts.limits
    blame, runs = Blame(), None
    budget = limits.wall_timeout  # one wall-clock budget for every run of this submission, reruns included
    for _ in range(2 * len(chapter.exercises) + 1):
        left = budget - (runs.seconds if runs else 0.0)
        if runs is not None and left < 1.0:
            _out_of_time(chapter, runs, blame, budget)
            break
        runs = run_once(chapter, nb, blame.blank, opts, left, runs)
        fatal = runs.run.fatal
        if fatal is None:
            break
        if fatal["status"] == "wall":
            fatal["message"] = (f"the runs of this notebook took longer than {budget:g} s in all (one budget for "
                                "every run, reruns included)")
        if fatal["status"] == "stopped":  # Ctrl-C: record nothing, so a rerun grades this notebook
            raise KeyboardInterrupt
        culprit, where = blame_for_break(chapter, runs, blame)
        if fatal["status"] == "wall" and runs.count > 1 and (culprit is None or culprit in blame.blank):
            _out_of_time(chapter, runs, blame, budget)  # earlier runs used the budget up, not code still graded
            break
        if culprit is None or culprit in blame.blank or culprit in runs.graft.missing:
            _grader_trouble(chapter, runs, blame, where, limits)
            break
        blame.add(culprit, fatal_words(fatal, where, limits), fatal["status"])
    runs.verdicts = blame.verdicts
    return runs


def run_once(chapter: Chapter, nb, blank: set[str], opts, left: float, before: Runs | None = None) -> Runs:
    """One run of the solution notebook with the submission's exercise cells grafted in, ``blank`` ones blanked."""
    g = graft(chapter, nb, blank)
    numbers = code_cell_numbers(g.nb)
    first = min(ex.cell for ex in chapter.exercises)
    limits = opts.limits
    timeouts = {n: (limits.setup_timeout if k < first else limits.cell_timeout) for k, n in numbers.items()}
    run = run_notebook(g.nb, replace(limits, wall_timeout=left), timeouts, opts.sanitize,
                       exercise_cells=[numbers[ex.cell] for ex in chapter.exercises])
    count, seconds = (before.count, before.seconds) if before else (0, 0.0)
    return Runs(run, g, numbers, count=count + 1, seconds=seconds + run.seconds)


def blame_for_break(chapter: Chapter, runs: Runs, blame: Blame) -> tuple[str | None, str]:
    """The exercise the last run's break is blamed on (None: no learner code), and words for the cell that broke."""
    index = {n: k for k, n in runs.numbers.items()}.get(runs.run.fatal["cell"])
    culprit, where = (None, "the notebook") if index is None else where_is(chapter, index)
    if culprit is None or not where.startswith("cell "):
        return culprit, where
    # A demonstration cell broke while using learner code: blame the latest exercise before it; if that exercise
    # was blanked for this same cell already and it still broke, it was not the culprit.
    for ex in reversed([e for e in chapter.exercises if e.cell <= index]):
        if blame.demo.get(ex.id) == index:
            blame.withdraw(ex.id)
            continue
        if ex.id not in blame.blank and ex.id not in runs.graft.missing:
            blame.demo[ex.id] = index
            return ex.id, where
    return None, where


def where_is(chapter: Chapter, cell_index: int) -> tuple[str | None, str]:
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


def fatal_words(fatal: dict, where: str, limits: Limits) -> tuple[str, str]:
    """(status, message) for a run that broke off in ``where``."""
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
    return "error", f"the run broke off in {where}: {fatal['message'][:500]}"


def _out_of_time(chapter: Chapter, runs: Runs, blame: Blame, budget: float) -> None:
    """The budget ran out: every exercise not decided yet times out."""
    for ex in chapter.exercises:
        if ex.id not in blame.verdicts and not runs.checked(ex):
            blame.verdicts[ex.id] = ("timeout", f"not graded: the runs of this notebook used up its time budget "
                                                f"({budget:g} s for all runs together)")


def _grader_trouble(chapter: Chapter, runs: Runs, blame: Blame, where: str, limits: Limits) -> None:
    """A break no learner code explains (the solution's own cells, limits too tight): the grader's trouble."""
    fatal = runs.run.fatal
    _, msg = fatal_words(fatal, where, limits)
    tail = [ln.strip() for ln in runs.run.log.splitlines() if ln.strip()][-3:]
    missing = next((ln for ln in reversed(tail) if "No module named" in ln), None)
    if missing:  # the sandbox's Python lacks a module the grader needs: not the memory cap, not the learner
        msg = f"the grader's Python in the sandbox could not import a module it needs: {missing[:200]}"
    msg = (f"{GRADER_TROUBLE}, not because of your code ({msg}); "
           "ask your instructor" + "".join(f"\ngrader log: {ln[:300]}" for ln in tail))
    # Learner code that ran to its end in this run: then the break may still be the learner's doing (a thread
    # left behind, say), and no earlier blame is withdrawn.
    learner_ran = any(runs.numbers.get(e.cell) in runs.run.cells for e in chapter.exercises
                      if e.id not in blame.blank and e.id not in runs.graft.missing)
    for ex in chapter.exercises:
        # Every exercise not decided yet, and those blamed for this same kind of break if it happened again with
        # no learner code run (a memory cap too low for the kernel itself strikes a different cell on each run).
        undecided = ex.id not in blame.verdicts and not runs.checked(ex)
        if undecided or (not learner_ran and blame.kinds.get(ex.id) == fatal["status"]):
            blame.verdicts[ex.id] = ("error", msg)
