"""Copy detection inside `softmax-lab grade`: every graded function of the class against the package, the solutions
and classmates (``similarity.py``), as a gradebook column, a report for the instructor, and points withheld.

A flagged exercise is never silently full marks: its row's ``copy`` column names the match, the instructor's report
(``gradebook.copies.txt``) shows the matching lines of both sides, and the points of code like the package's or a
classmate's are withheld until the instructor decides (``--copies flag`` keeps them). Code like the exercise's own
solution is a flag, not a zero: a correct answer to a fill-in exercise *is* its solution, and on the self-study
edition learners may read it; ``--withhold-solution-matches`` withholds those too (a class edition, where learners
never see the solutions).
"""
from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path

from . import similarity


@dataclass
class CopyPolicy:
    threshold: float = similarity.THRESHOLD
    withhold: bool = True          # --copies withhold (default) or flag
    withhold_solutions: bool = False  # a match with the course's solution withholds points too (else: a flag)
    enabled: bool = True           # --copies off


@dataclass
class Flag:
    kind: str        # "package", "solution" or "submission" (a classmate)
    match: str       # what it matches: softmax_lab/kernels/fused.py:fused_softmax_kernel, bob:ch02-mask:f ...
    similarity: float
    lines: str       # the learner's matching lines (numbered within the exercise cell)
    match_lines: str

    def text(self) -> str:
        """For the learner's message: what it matches, never which classmate (the instructor's report names them)."""
        share = f"{self.similarity:.0%}"
        if self.kind == "submission":
            return f"{share} like a classmate's code (lines {self.lines}; your instructor has the pair)"
        if self.kind == "package":
            return f"{share} like the course package's own {self.match} (lines {self.lines})"
        return f"{share} like the course's {self.match} (lines {self.lines})"


@dataclass
class Copies:
    """What the copy check found for a class: flags by (submission, exercise), the report, the per-function rows."""
    policy: CopyPolicy
    flags: dict[tuple[str, str], list[Flag]] = field(default_factory=dict)
    report: str = ""
    rows: list[dict] = field(default_factory=list)

    def withheld(self, submission: str, exercise: str) -> list[Flag]:
        """The flags of this exercise that withhold its points under the policy ([] keeps them)."""
        if not self.policy.withhold:
            return []
        return [f for f in self.flags.get((submission, exercise), [])
                if f.kind != "solution" or self.policy.withhold_solutions]


def find_copies(subs, solutions: Path, policy: CopyPolicy) -> Copies:
    """Compare every exercise function of ``subs`` (grading.submissions.Submission) as `softmax-lab similarity`
    does, with ``policy.threshold``."""
    found = Copies(policy)
    if not policy.enabled or not subs:
        return found
    try:
        course = similarity.load_course(solutions)
        rows, (matches, notes) = similarity._analyse(subs, solutions, policy.threshold, similarity.COMMON, course)
    except Exception:  # a fault of the check must not cost the class its grades: said on the terminal and report
        import hashlib
        import sys
        import traceback

        detail = traceback.format_exc()
        ref = hashlib.sha256(detail.encode("utf-8", "replace")).hexdigest()[:8]
        print(f"softmax-lab grade: the copy check failed (error {ref}); grading goes on without it:\n{detail}",
              file=sys.stderr, flush=True)
        found.report = f"The copy check failed (error {ref}: the details are on the terminal of the run).\n"
        return found
    found.rows = rows
    for r in rows:
        if r["flagged"]:
            found.flags.setdefault((r["submission"], r["exercise"]), []).append(
                Flag(r["kind"], r["match"], r["similarity"], r["lines"], r["match_lines"]))
    found.report = similarity.report(matches, notes, policy.threshold)
    return found


def decorate(rows: list[dict], copies: Copies | None) -> list[dict]:
    """The rows with their ``copy`` column filled, and the points of flagged exercises withheld (with a note)."""
    if copies is None:
        return rows
    out = []
    for r in rows:
        flags = copies.flags.get((r["submission"], r["exercise"]), [])
        if not flags:
            out.append({**r, "copy": ""})
            continue
        r = {**r, "copy": "; ".join(f"{_named(f)} {f.similarity:.0%}" for f in flags)}
        withheld = copies.withheld(r["submission"], r["exercise"])
        try:
            points = float(r["points"] or 0)
        except ValueError:
            points = 0.0
        if withheld and points > 0:
            r["points"] = "0"
            r["message"] = (r["message"] + "\n" + f"note: {points:g} point(s) withheld for review: your code is "
                            + "; ".join(f.text() for f in withheld)
                            + ". Your instructor decides; explain your work to them if it is your own.").strip()
        out.append(r)  # a flag only (code like the solution): the instructor's column and report, not a note
    return out


def _named(flag) -> str:
    """'package softmax_lab/kernels/fused.py:...', 'solution of ch04-fused:...' (not 'solution solution of')."""
    return flag.match if flag.match.startswith(flag.kind) else f"{flag.kind} {flag.match}"
