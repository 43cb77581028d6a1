"""Judge and score: the learner's code relaunched by the grader on fresh inputs, then points, partial credit and
the cap after a complete-answer hint, one gradebook row per exercise.

The judge can only take points away from what nbval's run gave: a check that passed in the notebook proves
nothing by itself.

Seed 002's split (an exercise whose registry entry has ``parts``): its code points are a normal part and a boundary
part. A passed exercise earns both. A failed one is judged anyway (unless its cell is the blank one), and earns
each part whose cases all passed, in the grader's own run and in the notebook's check; the boundary cases are the
ones the registry names, every other case is a normal one. The third part, the explanation, is a hand-graded item
(``explain:<id>``), not in the exercise's row.
"""
from __future__ import annotations

from . import hints
from .blanking import Runs
from .chapters import Chapter
from .rows import make_row
from .statuses import SUMMARY


def judge_exercises(chapter: Chapter, runs: Runs, decided: dict, opts) -> tuple[dict, int]:
    """The judge's verdicts (exercise id -> judge.Verdict) for the exercises that passed (or failed, with
    --partial-credit), and the seed their inputs were drawn from."""
    from . import judge  # numpy: loaded only once a notebook is graded

    table = judge.judges(chapter.chapter) if opts.judge else {}
    source = {ex.id: runs.graft.nb.cells[ex.cell].source for ex in chapter.exercises}
    def judged(ex) -> bool:  # passed; or failed, when partial credit or seed 002's parts can use the verdict
        status = decided[ex.id][0]
        return status == "passed" or ((opts.partial or ex.split) and status == "failed"
                                      and not is_blank(ex, source[ex.id]))

    wanted = {ex.id: source[ex.id] for ex in chapter.exercises if ex.id in table and judged(ex)}
    seed = opts.seed if opts.seed is not None else judge.new_seed()
    return (judge.run(chapter.chapter, wanted, opts.limits, seed) if wanted else {}), seed


def score(name: str, chapter: Chapter, nb, runs: Runs, decided: dict, verdicts: dict, notes: list[str],
          opts) -> list[dict]:
    """One row per exercise: the judge's verdict, then points (partial credit, hint cap), then the notes."""
    judged = {ex.id: after_judge(ex, decided[ex.id], verdicts.get(ex.id), opts.partial) for ex in chapter.exercises}
    used = hints.merge(hints.levels_used(nb), [h for rec in runs.run.cells.values() for h in rec.get("hints", [])])
    capped = {ex.id: hints.capped(judged[ex.id][2], ex.points, used.get(ex.id, 0), opts.answer_hint_cap)
              for ex in chapter.exercises}
    rows = []
    for ex in chapter.exercises:
        (status, msg, _), (points, cap_note) = judged[ex.id], capped[ex.id]
        extra = [n for n in [runs.graft.found.get(ex.id, "")] + notes if n]
        msg = "\n".join([msg] + [f"note: {n}" for n in extra] + ([cap_note] if cap_note else []))
        rows.append(make_row(name, chapter.chapter, ex.id, points, ex.points, status, msg, used.get(ex.id, 0)))
    return rows


def is_blank(ex, source: str) -> bool:
    """The exercise cell is the learner version's, untouched (nothing to judge)."""
    def plain(text: str) -> str:
        return "\n".join(line.rstrip() for line in str(text).strip().splitlines())
    return plain(source) == plain(ex.blank)


def after_judge(ex, decision: tuple[str, str, dict | None], jv, partial: bool) -> tuple[str, str, float]:
    """(status, message, points before the hint cap) once the judge's verdict ``jv`` (or None) is taken in."""
    status, msg, ck_rec = decision
    if status == "passed" and jv is not None and not jv.ok:
        status = "failed"
        msg = ("the notebook's check passed, but the grader's own launch of your code on fresh inputs did not "
               "(the grader calls your kernel/functions itself; the check cell's output alone earns nothing):\n"
               + jv.text(ex.id))
        ck_rec = None  # the check passed: nothing of it failed
    if getattr(ex, "split", False):
        points, words = split_points(ex, status, jv, ck_rec if status == "failed" else None)
        return status, f"{msg}\n{words}" if msg else words, points
    points = ex.points if status == "passed" else 0
    if status == "failed" and partial:
        frac, counted = partial_credit(jv, ck_rec, ex.id)
        points = round(ex.points * frac, 2)
        if counted:  # the one fraction the points come from, so the message and the points never disagree
            msg += (f"\npartial credit: {counted} passed, so {points:g} of {ex.points} points"
                    + (" (at most 99% for a failed exercise)" if frac == 0.99 else ""))
    return status, msg, points


def partial_fraction(jv, ck_rec: dict | None, ident: str) -> float:
    """k/n for --partial-credit (see ``partial_credit``)."""
    return partial_credit(jv, ck_rec, ident)[0]


def partial_credit(jv, ck_rec: dict | None, ident: str) -> tuple[float, str]:
    """k/n for --partial-credit, computed by the grader and clamped below 1 (the exercise failed), and which k/n it
    is in words ('' when none could be counted).

    From the grader's own checks (the judge) when it ran; otherwise from the check's LAST output line, only when
    it is exactly the verdict line of this exercise (a learner's print cannot come after it). The lower one counts."""
    fractions = []
    if jv is not None and jv.total > 0:
        fractions.append((jv.passed / jv.total, f"{jv.passed}/{jv.total} of the grader's own checks"))
    if ck_rec is not None:
        lines = [ln for ln in (ck_rec.get("stdout") or "").splitlines() if ln.strip()]
        m = SUMMARY.fullmatch(lines[-1].strip()) if lines else None
        if m and m.group("id") == ident and 0 < int(m.group("n")) <= 10000:
            k, n = min(int(m.group("k")), int(m.group("n"))), int(m.group("n"))
            fractions.append((k / n, f"{k}/{n} of the notebook check's cases"))
    if not fractions:
        return 0.0, ""
    frac, words = min(fractions)
    return max(0.0, min(frac, 0.99)), words


# ------------------------------------------------------------------------------ seed 002's parts

PARTS_LINE = "parts (the course's rubric): "  # how the row's message says which parts were earned


def _failed(cases: list[str]) -> str:
    return f" (failed: {'; '.join(cases[:3])}" + (f" and {len(cases) - 3} more" if len(cases) > 3 else "") + ")"


def split_points(ex, status: str, jv, ck_rec: dict | None) -> tuple[float, str]:
    """(points, the line that says which parts were earned) of an exercise with a normal and a boundary part.

    ``passed``: both. ``failed``: each part whose cases all passed in the grader's own run (``jv``, which must have
    run at least one case of the part) and in the notebook's check (``ck_rec``: its ``PASS  <name>`` lines and its
    verdict line's k/n; every failed case that is not a boundary case counts against the normal part, a property the
    judge does not test included). Else nothing."""
    normal = boundary = False
    why_normal = why_boundary = ""
    if status == "passed":
        normal = boundary = True
    elif status == "failed" and jv is not None:
        names = set(ex.boundary_cases)
        judged_b = [ok for case, ok in jv.cases if case in names]
        judged_n = [ok for case, ok in jv.cases if case not in names]
        check_b, check_n = _check_failures(ex, ck_rec)
        normal = bool(judged_n) and all(judged_n) and check_n == 0
        boundary = not names or (bool(judged_b) and all(judged_b) and check_b == 0)
        failed_b = [case for case, ok in jv.cases if case in names and not ok]
        failed_n = [case for case, ok in jv.cases if case not in names and not ok]
        if not normal and failed_n:
            why_normal = _failed(failed_n)
        elif not normal and judged_n:
            why_normal = " (a case that is not a boundary case failed in the notebook's check)"
        if not boundary and failed_b:
            why_boundary = _failed(failed_b)
        elif not boundary and check_b:
            why_boundary = " (a boundary case failed in the notebook's check)"
    points = (ex.normal if normal else 0) + (ex.boundary if boundary else 0)
    parts = [f"normal inputs {ex.normal if normal else 0}/{ex.normal}{why_normal}"]
    if ex.boundary:
        parts.append(f"boundary inputs {ex.boundary if boundary else 0}/{ex.boundary}{why_boundary}")
    words = PARTS_LINE + "; ".join(parts)
    if ex.explain:
        words += f"; the explanation ({ex.explain}) is graded by hand"
    return points, words


def _check_failures(ex, ck_rec: dict | None) -> tuple[int, int]:
    """(boundary cases, other cases) the notebook's check failed, from its output: the boundary names the solution's
    check passes (``ex.check_boundary``) without a ``PASS  <name>`` line here, and the rest of the failures its
    verdict line counts (k/n, when it is the last line and names this exercise). (0, 0) without a record (the check
    passed); both >0 when the output cannot be read."""
    if ck_rec is None:
        return 0, 0
    lines = [ln.rstrip() for ln in (ck_rec.get("stdout") or "").splitlines() if ln.strip()]
    m = SUMMARY.fullmatch(lines[-1].strip()) if lines else None
    if not m or m.group("id") != ex.id or not 0 < int(m.group("n")) <= 10000:
        return 1, 1
    passed = {ln[len("PASS  "):].strip() for ln in lines if ln.startswith("PASS  ")}
    failed_b = sum(1 for n in ex.check_boundary if n not in passed)
    failed = max(0, int(m.group("n")) - int(m.group("k")))
    return failed_b, max(0, failed - failed_b)
