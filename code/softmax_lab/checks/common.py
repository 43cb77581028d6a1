"""What every exercise check shares: run one case, turn failures into plain words, print verdict lines.

A check prints one line per case and a last line with the total, for example::

    PASS  random 2x31
    FAIL  all-negative row [-1002, -1001, -1000]: the padding lanes read 0, above every real score, so ...
    ch02-masked-load: FAILED (7/8 checks passed)

The text must be the same on the CPU interpreter and on a GPU (nbval compares it): verdicts and rounded
values only, never timings or raw floats. Learner mistakes never raise out of a check; they become FAIL lines.
"""
from __future__ import annotations

import os
import signal
import sys
import traceback
from typing import Callable

import torch




GUARD = 12345.0   # written around and after every output; a correct, masked store never touches it
GUARD_LEN = 1024  # guard values after an output's last row: more than a power-of-two BLOCK pads any row by


def guarded(n: int, dtype=torch.float32, device="cpu") -> torch.Tensor:
    """A flat buffer of ``n + GUARD_LEN`` elements, all GUARD: the outputs go in its first ``n`` (or in a strided
    view of them), and every element no output covers must still be GUARD after the launch."""
    return torch.full((n + GUARD_LEN,), GUARD, dtype=dtype, device=device)


_PACKAGE = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))  # softmax_lab/
_LIBRARY = tuple({os.path.abspath(p) for p in (sys.prefix, sys.base_prefix, sys.exec_prefix)})


def _is_learner_file(filename: str) -> bool:
    """A notebook cell (IPython's cell files, ``<ipython-input-...>``) or the learner's own module: not this
    package, not an installed library, not the standard library, not Python's frozen modules."""
    if filename.startswith("<"):
        return filename.startswith("<ipython-input") or filename.startswith("<exercise cell")
    path = os.path.abspath(filename)
    if path.startswith(_PACKAGE + os.sep):
        return False
    return not any(path.startswith(lib + os.sep) for lib in _LIBRARY)


def learner_line(err: BaseException) -> tuple[int, str] | None:
    """(line number, line text) of the innermost frame in the learner's code of ``err``'s traceback, looking
    first at the exceptions it was raised from (Triton's interpreter re-raises a kernel's error as its own)."""
    chain, seen = [], set()
    while err is not None and id(err) not in seen:
        seen.add(id(err))
        chain.append(err)
        err = err.__cause__ or err.__context__
    for e in reversed(chain):  # innermost first: that is where the learner's kernel line is
        mine = [f for f in traceback.extract_tb(e.__traceback__) if _is_learner_file(f.filename)]
        if mine:
            return mine[-1].lineno, (mine[-1].line or "").strip()
    return None


def explain_exception(err: BaseException) -> str:
    """A learner-facing reason for an exception raised while running their code, with the line of their
    cell it came from when the traceback passes through it."""
    text = f"{type(err).__name__}: {err}"
    if isinstance(err, NotImplementedError) or "NotImplementedError" in text:
        return "not implemented yet - replace `raise NotImplementedError` with your code"
    first = text.strip().splitlines()[0] if text.strip() else type(err).__name__
    where = learner_line(err)
    at = ""
    if where is not None:
        line = where[1] if len(where[1]) <= 80 else where[1][:77] + "..."
        at = f" (at line {where[0]} of your code: `{line}`)" if line else f" (at line {where[0]} of your code)"
    return f"your code raised {first[:200]}{at}"


_CASE = ""  # the case a Report is running now ('' between cases)


def current_case(clear: bool = False) -> str:
    """The case being run when a check was stopped ('' between cases); ``clear``: forget it."""
    global _CASE
    name = _CASE
    if clear:
        _CASE = ""
    return name


_armed = {"seconds": 0.0}  # the time limit of the running guarded check (0: none; checks.guard.time_limit sets it)


def new_case() -> None:
    """A check starts its next case: the time limit counts again from now (Report.run calls this)."""
    if _armed["seconds"]:
        signal.setitimer(signal.ITIMER_REAL, _armed["seconds"])


class Report:
    """Collects PASS/FAIL lines for one exercise and prints them."""

    def __init__(self, exercise: str, drawing: Callable[[], None] | None = None):
        self.exercise = exercise
        self.drawing = drawing  # after a real FAIL (not a blank): draw the learner's kernel (lanemap)
        self.lines: list[str] = []            # one line per case, in order (what ``show`` groups)
        self.cases: list[tuple[str, str]] = []  # (case name, '' or the reason)
        self.passed = 0
        self.total = 0

    def add(self, name: str, problem: str) -> bool:
        """Record one case; ``problem`` is '' for a pass, otherwise the plain-words reason."""
        self.total += 1
        self.cases.append((name, problem))
        if problem:
            self.lines.append(f"FAIL  {name}: {problem}")
            return False
        self.passed += 1
        self.lines.append(f"PASS  {name}")
        return True

    def grouped_lines(self) -> list[str]:
        """The lines ``show`` prints: a reason shared by several failing cases is printed once, where the
        first of them failed, with the cases it covers."""
        by_reason: dict[str, list[str]] = {}
        for name, problem in self.cases:
            if problem:
                by_reason.setdefault(problem, []).append(name)
        out, done = [], set()
        for name, problem in self.cases:
            if not problem:
                out.append(f"PASS  {name}")
            elif len(by_reason[problem]) == 1:
                out.append(f"FAIL  {name}: {problem}")
            elif problem not in done:
                done.add(problem)
                names = by_reason[problem]
                # (names may hold commas themselves: "2 rows of 2 chunks, room for 2")
                listed = "; ".join(names) if len(names) <= 3 else f"{names[0]}; {names[1]}; … {len(names) - 2} more"
                out.append(f"FAIL ×{len(names)} cases ({listed}): {problem}")
        return out

    def run(self, name: str, fn: Callable[[], str], pitfall: str = "") -> bool:
        """Call ``fn`` (returns '' or a reason); exceptions become a FAIL with a plain reason."""
        global _CASE
        _CASE = name  # what a stopped or interrupted check names (checks.guard); kept when one stops it
        new_case()
        try:
            problem = fn()
        except Exception as err:
            problem = explain_exception(err)
        else:
            if problem and pitfall:
                problem = f"{problem} - {pitfall}"
        _CASE = ""
        return self.add(name, problem)

    @property
    def ok(self) -> bool:
        return self.total > 0 and self.passed == self.total

    def hint_line(self) -> str:
        """Where the fix is: the FAIL lines say what went wrong and what it caused, the hint ladder how to fix it."""
        return (f'how to fix it: softmax_lab.hint("{self.exercise}") shows the next hint level (each level you see '
                "is recorded)")

    def summary(self) -> str:
        verdict = "PASSED" if self.ok else "FAILED"
        return f"{self.exercise}: {verdict} ({self.passed}/{self.total} checks passed)"

    def show(self) -> bool:
        for line in self.grouped_lines():
            print(line)
        fails = [line for line in self.lines if line.startswith("FAIL")]
        mistakes = fails and not all("not implemented yet" in line for line in fails)
        if mistakes:
            print(self.hint_line())  # the FAIL lines name the mistake; the fix is the hint ladder's
        if self.drawing is not None and mistakes:
            self.drawing()  # before the summary: the verdict line stays last
        print(self.summary())
        return self.ok


def lane_map_of(launch: Callable, make_input: Callable | None = None,
                padding: str | None = "-inf", effect: bool = False) -> Callable[[], None]:
    """A Report's ``drawing``: the lane map of ``launch(x) -> y`` on a small strided input (softmax_lab.lanemap);
    ``padding``: what the kernel's padding lanes must read (None: anything, e.g. a backward pass's zeros);
    ``effect``: say what the padding lanes did to the rows, not which value they read."""
    def draw() -> None:
        from ..lanemap import show_on_failure

        show_on_failure(launch, make_input, padding=padding, effect=effect)

    return draw


def _returned(y, out):
    return out if y is None else y


def debug_traceback() -> str:  # for instructors: the full traceback of the last error
    return traceback.format_exc()


__all__ = ["Report", "GUARD", "GUARD_LEN", "guarded", "explain_exception", "learner_line", "lane_map_of", "torch"]
