"""What every exercise check does around your code: it refuses an old definition, stops a runaway kernel, and
answers an Interrupt in a few lines; it also refuses the package's own kernels given as yours.

* **An old definition.** When the last run of your exercise cell stopped on an error (a SyntaxError, say), the
  function the check was given is the one from an earlier run; when the saved notebook shows the exercise cell
  edited since it ran, the check would test what is no longer on screen. Either way the check says so in one
  line instead of checking it (``softmax_lab.cells`` records the runs).
* **A runaway kernel.** In Triton's interpreter a kernel is Python code: a ``while`` whose condition never turns
  false, or a loop bound of ``n_cols`` where ``tl.cdiv(n_cols, BLOCK)`` was meant, runs for hours. When one case
  of a check has run for ``TIME_LIMIT_S`` seconds and your code is the one running, the check stops it and names
  the loop your code was in (the check's own work, a compile say, is never stopped). On a GPU a kernel cannot be
  stopped from Python; the grader's own time limit applies there.
  A check given again the very functions it stopped (a later cell that runs the same check, say) does not wait
  another ``TIME_LIMIT_S`` seconds for the same stop: it prints what it printed then, saying so.
* **Interrupt.** Pressing the notebook's stop button raises ``KeyboardInterrupt`` deep inside Triton; the check
  shows where your code was, in a few lines, instead of a traceback through this package and Triton.
"""
from __future__ import annotations

import contextlib
import functools
import json
import linecache
import os
import re
import signal
import sys
import threading
import types

from .common import _armed, _is_learner_file, current_case

TIME_LIMIT_S = float(os.environ.get("SOFTMAX_LAB_CHECK_SECONDS", "60"))  # per case; below the grader's 120 s a cell
RECHECK_S = 5.0  # when the time is up but the check itself is working: look again this much later
_depth = threading.local()


# ------------------------------------------------------------------------------------------ an old definition


def learner_functions(args, kwargs) -> list[tuple[str, types.FunctionType]]:
    """(name, function) of each function of the learner's own code passed to a check (kernels unwrapped)."""
    found = []
    for value in [*args, *kwargs.values()]:
        fn = getattr(value, "fn", value)  # a @triton.jit kernel wraps the Python function
        if isinstance(fn, types.FunctionType) and _is_learner_file(fn.__code__.co_filename):
            found.append((fn.__name__, fn))
    return found


def _defines(source: str, name: str) -> bool:
    return re.search(rf"^(?:async\s+)?def\s+{re.escape(name)}\s*\(|^{re.escape(name)}\s*=", source, re.M) is not None


def _came_from(fn: types.FunctionType, run) -> bool | None:
    """Whether ``fn`` was defined by ``run`` (the cell file names IPython gives each source); None: unknown."""
    try:
        from IPython import get_ipython

        shell = get_ipython()
        name = shell.compile.get_code_name(run.source, shell.transform_cell(run.source), run.number)
    except Exception:
        return None
    return fn.__code__.co_filename == name


def stale_definition(functions) -> str:
    """'' or one line: the last run of the cell defining one of ``functions`` stopped on an error, so the
    function the check was given is older than that cell."""
    from .. import cells

    for name, fn in functions:
        last = next((r for r in reversed(cells.RUNS) if _defines(r.source, name)), None)
        if last is None or not last.error:
            continue
        if not last.before_run and _came_from(fn, last) is not False:
            continue  # the definition ran; the error came after it
        at = f" at line {last.error_line}" if last.error_line else ""
        return (f"the last run of the cell defining `{name}` stopped with {last.error}{at}, so `{name}` is still "
                "the one from an earlier run: fix that cell and run it, then run this check")
    return ""


def _saved_cell(path, exercises: list[str]) -> str | None:
    try:
        with open(path, encoding="utf-8") as f:
            nb = json.load(f)
        for cell in nb.get("cells", []):
            if any(f"exercise:{ex}" in cell.get("metadata", {}).get("tags", []) for ex in exercises):
                src = cell.get("source", "")
                return "".join(src) if isinstance(src, list) else str(src)
    except (OSError, ValueError, AttributeError, TypeError):
        return None
    return None


def edited_since_run(exercises: list[str], functions) -> str:
    """'' or one line: the saved notebook's exercise cell differs from every version that ran, and was saved
    after the last run of the cell defining the functions (so it is what the learner sees now)."""
    from .. import cells

    path = cells.notebook_path()
    if path is None or not exercises or not functions:
        return ""
    last = next((r for r in reversed(cells.RUNS) if any(_defines(r.source, n) for n, _ in functions)), None)
    saved = _saved_cell(path, exercises)
    if last is None or saved is None:
        return ""
    ran = {r.source.rstrip() for r in cells.RUNS}
    try:
        saved_after = os.path.getmtime(path) > last.ended
    except OSError:
        return ""
    if saved.rstrip() in ran or not saved_after:
        return ""
    return ("the exercise cell was edited since it last ran (the saved notebook differs from what ran): run the "
            "exercise cell, then this check")


def package_object(args, kwargs) -> str:
    """'' or one line: a function given to the check is the package's own (imported under another name, aliased
    or wrapped; ``softmax_lab.origin``), so checking it would grade the course's code, not the learner's."""
    from ..origin import describe

    for value in [*args, *kwargs.values()]:
        if callable(value):
            found = describe(value)
            if found:
                return found
    return ""


# ------------------------------------------------------------------------------------------ a runaway kernel


class RunawayKernel(BaseException):
    """Raised inside the learner's code when a check runs past its time limit (a BaseException: no
    ``except Exception`` on the way, the learner's, Triton's or a check's, turns it into something else)."""

    def __init__(self, seconds: float, where: tuple[str, int] | None):
        super().__init__(f"stopped after {seconds:g} s")
        self.seconds, self.where = seconds, where


def _learner_frame(frame) -> tuple[str, int] | None:
    """(file, line) of the innermost frame of the learner's own code running inside the check, if any (the
    notebook cell that called the check, below it, does not count)."""
    while frame is not None and frame.f_code is not _WRAPPER:
        if _is_learner_file(frame.f_code.co_filename):
            return frame.f_code.co_filename, frame.f_lineno
        frame = frame.f_back
    return None


LOOP = re.compile(r"^\s*(while\b|for\b.*\bin\b)")


def likely_cause(where: tuple[str, int] | None) -> list[str]:
    """Lines naming where the learner's code was and the loop around it (its header), from the cell's source."""
    if where is None:
        return ["your code was not running at that moment (the check itself was): tell the course authors"]
    filename, lineno = where
    lines = linecache.getlines(filename)
    here = lines[lineno - 1].rstrip() if 0 < lineno <= len(lines) else ""
    out = [f"your code was at line {lineno}" + (f": `{here.strip()[:90]}`" if here else "")]
    indent = len(here) - len(here.lstrip()) if here else None
    for k in range(lineno - 1, -1, -1):  # the loop header around that line (the line itself may be one)
        text = lines[k] if k < len(lines) else ""
        if not text.strip():
            continue
        level = len(text) - len(text.lstrip())
        if LOOP.match(text) and (k == lineno - 1 or indent is None or level < indent):
            header = text.strip()[:90]
            if header.startswith("while"):
                out.append(f"likely cause: the `while` loop at line {k + 1} (`{header}`) never ends: does its "
                           "condition ever become false, is the variable it tests changed each time round?")
            else:
                out.append(f"likely cause: the loop bound at line {k + 1} (`{header}`): it runs far more times than "
                           "you meant (a step of 1 where BLOCK was meant, or n_cols where tl.cdiv(n_cols, BLOCK) "
                           "was meant?)")
            return out
        if indent is not None and level < indent and text.lstrip().startswith("def "):
            break
    out.append("likely cause: a loop in your code that runs far longer than the row needs (check each loop's "
               "bound and step), or a very large input")
    return out


@contextlib.contextmanager
def time_limit(seconds: float):
    """Raise RunawayKernel in this thread after ``seconds`` (SIGALRM: the main thread of a Unix process only;
    elsewhere, or with ``seconds`` <= 0, no limit)."""
    usable = (seconds > 0 and hasattr(signal, "setitimer") and threading.current_thread() is threading.main_thread())
    if not usable:
        yield
        return

    def alarm(signum, frame):
        where = _learner_frame(frame)
        if where is None:  # the check's own work (a compile, a reference): not a runaway
            signal.setitimer(signal.ITIMER_REAL, RECHECK_S)
            return
        raise RunawayKernel(seconds, where)

    previous = signal.signal(signal.SIGALRM, alarm)
    signal.setitimer(signal.ITIMER_REAL, seconds)
    _armed["seconds"] = seconds
    try:
        yield
    finally:
        _armed["seconds"] = 0.0
        signal.setitimer(signal.ITIMER_REAL, 0)
        signal.signal(signal.SIGALRM, previous)


class _Recorder:
    """stdout that also keeps what was written (what a check printed before it was stopped)."""

    def __init__(self, out):
        self.out, self.text = out, []

    def write(self, text):
        self.text.append(text)
        return self.out.write(text)

    def __getattr__(self, name):
        return getattr(self.out, name)


# check -> (args, kwargs, (what it printed, the stop's lines)) of its last run that the time limit stopped. The
# arguments are kept (so their identities stay theirs): given the same objects again, the check would stop at the
# same case after the same wait. A new run of the exercise cell makes new functions, which are checked again.
_STOPPED: dict = {}


def _stopped_before(check, args, kwargs) -> tuple[list[str], list[str]] | None:
    """(what the check printed before its stop, its stop's lines) when ``check`` stopped these very arguments."""
    before = _STOPPED.get(check)
    if before is None:
        return None
    old_args, old_kwargs, printed = before
    same = (len(args) == len(old_args) and all(a is b for a, b in zip(args, old_args))
            and kwargs.keys() == old_kwargs.keys() and all(kwargs[k] is old_kwargs[k] for k in kwargs))
    return printed if same else None


class CheckInterrupted(KeyboardInterrupt):
    """The learner pressed Interrupt during a check: IPython shows these few lines instead of a traceback."""

    def __init__(self, lines: list[str]):
        super().__init__("\n".join(lines))
        self.lines = lines

    def _render_traceback_(self) -> list[str]:
        return self.lines


def _case() -> str:
    name = current_case(clear=True)
    return f" during the case {name!r}" if name else ""


# ------------------------------------------------------------------------------------------ the wrapper


def guarded(check, exercises: list[str]):
    """``check`` with the three guards above; ``exercises``: the ids of the exercises it checks."""

    @functools.wraps(check)
    def run(*args, **kwargs):
        if getattr(_depth, "n", 0):  # a check calling another: guarded once, from the outside
            return check(*args, **kwargs)
        from ._pitfalls import Verdict

        label = exercises[0] if exercises else check.__name__
        functions = learner_functions(args, kwargs)
        problem = stale_definition(functions) or edited_since_run(exercises, functions)
        if problem:
            print(f"NOT CHECKED  {problem}")
            print(f"{label}: FAILED (not checked: the definition given is not the one in the cell)")
            return Verdict(False)
        borrowed = package_object(args, kwargs)
        if borrowed:
            print(f"NOT CHECKED  {borrowed}")
            print(f"{label}: FAILED (not checked: the code given is the course's, not yours)")
            return Verdict(False)
        again = _stopped_before(check, args, kwargs)
        if again is not None:  # the same functions this check stopped before: the same lines, without the wait
            before, stopped = again
            names = ", ".join(f"`{name}`" for name, _ in functions) or "the code given"
            print("".join(before) + stopped[0])
            print(f"  not run again (no wait this time): this check stopped the same {names} before, unchanged "
                  "since; fix it and run its cell, then this check")
            print("\n".join(stopped[1:]))
            return Verdict(False)
        _depth.n = 1
        current_case(clear=True)
        printed = _Recorder(sys.stdout)
        try:
            with time_limit(TIME_LIMIT_S if _interpreted() else 0), contextlib.redirect_stdout(printed):
                return check(*args, **kwargs)
        except RunawayKernel as stop:
            lines = [f"STOPPED  after {stop.seconds:g} s{_case()}: your code was still running"]
            lines += ["  " + line for line in likely_cause(stop.where)]
            lines.append(f"{label}: FAILED (stopped: one case ran past the check's {stop.seconds:g} s limit)")
            print("\n".join(lines))
            _STOPPED[check] = (args, kwargs, (printed.text, lines))
            return Verdict(False)
        except KeyboardInterrupt as err:
            if isinstance(err, CheckInterrupted):
                raise
            where = _learner_frame(_innermost(err.__traceback__))
            lines = [f"Interrupted{_case()} ({label})."]
            lines += ["  " + ln for ln in likely_cause(where)] if where else []
            lines.append("Run the exercise cell and the check again when it is fixed.")
            raise CheckInterrupted(lines) from None
        finally:
            _depth.n = 0

    return run


_WRAPPER = guarded(lambda: None, []).__code__  # the frame of a guarded check: the learner's code runs above it


def _innermost(tb):
    frame = None
    while tb is not None:
        frame, tb = tb.tb_frame, tb.tb_next
    return frame


def _interpreted() -> bool:
    """Kernels run in Triton's interpreter (Python code a signal can stop), i.e. not on a GPU."""
    return os.environ.get("TRITON_INTERPRET", "0") == "1"


__all__: list[str] = []
