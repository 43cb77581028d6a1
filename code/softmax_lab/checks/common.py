"""What every exercise check shares: run one case, turn failures into plain words, print verdict lines.

A check prints one line per case and a last line with the total, for example::

    PASS  random 2x31
    FAIL  all-negative row [-1002, -1001, -1000]: max became 0 - did you pad with 0 instead of -inf?
    ch02-masked-load: FAILED (7/8 checks passed)

The text must be the same on the CPU interpreter and on a GPU (nbval compares it): verdicts and rounded
values only, never timings or raw floats. Learner mistakes never raise out of a check; they become FAIL lines.
"""
from __future__ import annotations

import traceback
from typing import Callable

import torch

from ..testing import Case, compare, poisoned_like


def explain_exception(err: BaseException) -> str:
    """A learner-facing reason for an exception raised while running their code."""
    text = f"{type(err).__name__}: {err}"
    if isinstance(err, NotImplementedError) or "NotImplementedError" in text:
        return "not implemented yet - replace `raise NotImplementedError` with your code"
    first = text.strip().splitlines()[0] if text.strip() else type(err).__name__
    return f"your code raised {first[:200]}"


class Report:
    """Collects PASS/FAIL lines for one exercise and prints them."""

    def __init__(self, exercise: str, drawing: Callable[[], None] | None = None):
        self.exercise = exercise
        self.drawing = drawing  # after a real FAIL (not a blank): draw the learner's kernel (lanemap)
        self.lines: list[str] = []
        self.passed = 0
        self.total = 0

    def add(self, name: str, problem: str) -> bool:
        """Record one case; ``problem`` is '' for a pass, otherwise the plain-words reason."""
        self.total += 1
        if problem:
            self.lines.append(f"FAIL  {name}: {problem}")
            return False
        self.passed += 1
        self.lines.append(f"PASS  {name}")
        return True

    def run(self, name: str, fn: Callable[[], str], pitfall: str = "") -> bool:
        """Call ``fn`` (returns '' or a reason); exceptions become a FAIL with a plain reason."""
        try:
            problem = fn()
        except Exception as err:  # noqa: BLE001 - any learner error is a verdict, not a crash
            problem = explain_exception(err)
        else:
            if problem and pitfall:
                problem = f"{problem} - {pitfall}"
        return self.add(name, problem)

    @property
    def ok(self) -> bool:
        return self.total > 0 and self.passed == self.total

    def summary(self) -> str:
        verdict = "PASSED" if self.ok else "FAILED"
        return f"{self.exercise}: {verdict} ({self.passed}/{self.total} checks passed)"

    def show(self) -> bool:
        for line in self.lines:
            print(line)
        fails = [line for line in self.lines if line.startswith("FAIL")]
        if self.drawing is not None and fails and not all("not implemented yet" in line for line in fails):
            self.drawing()  # before the summary: the verdict line stays last
        print(self.summary())
        return self.ok


def softmax_case(report: Report, fn: Callable, case: Case) -> bool:
    """Run a learner's ``fn(x, out)`` softmax launcher on one case, output poisoned first."""

    def one() -> str:
        out = poisoned_like(case.x)
        y = fn(case.x, out)
        return compare(out if y is None else y, case.x)

    return report.run(case.name, one, case.pitfall)


def lane_map_of(launch: Callable, make_input: Callable | None = None) -> Callable[[], None]:
    """A Report's ``drawing``: the lane map of ``launch(x) -> y`` on a small strided input (softmax_lab.lanemap)."""
    def draw() -> None:
        from ..lanemap import show_on_failure

        show_on_failure(launch, make_input)

    return draw


def _returned(y, out):
    return out if y is None else y


def debug_traceback() -> str:  # for instructors: the full traceback of the last error
    return traceback.format_exc()


__all__ = ["Report", "softmax_case", "explain_exception", "lane_map_of", "torch"]
