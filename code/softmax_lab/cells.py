"""What the notebook's kernel ran: each cell's source, when it finished and how it ended (the checks read it).

``import softmax_lab`` starts the record in an IPython kernel (``watch``); an exercise check then knows whether the
definition it was given comes from the last run of its exercise cell, or from an earlier run because the last
one stopped on an error (``softmax_lab.checks.guard``). Nothing here imports torch, or IPython itself.
"""
from __future__ import annotations

import os
import sys
import time
from dataclasses import dataclass
from pathlib import Path

MAX_RUNS = 500  # the most recent runs kept


@dataclass
class Run:
    """One cell run: its execution count, its source, when it finished, and its error ('' when it ran cleanly)."""
    number: int | None
    source: str
    ended: float
    error: str = ""          # e.g. "SyntaxError: invalid syntax"
    error_line: int = 0      # the line of the cell it points at, when known
    before_run: bool = False  # True when the cell could not even start (a SyntaxError)


RUNS: list[Run] = []
_watching: set[int] = set()


def _describe(err: BaseException | None) -> tuple[str, int]:
    if err is None:
        return "", 0
    if isinstance(err, SyntaxError):
        return f"{type(err).__name__}: {err.msg}", int(err.lineno or 0)
    line = 0
    tb = err.__traceback__
    while tb is not None:  # the innermost frame of the cell itself
        name = tb.tb_frame.f_code.co_filename
        if name.startswith("<ipython-input") or "ipykernel_" in name:
            line = tb.tb_lineno
        tb = tb.tb_next
    text = str(err).strip().splitlines()
    return f"{type(err).__name__}: {text[0][:150]}" if text else type(err).__name__, line


def record(result) -> None:
    """IPython's ``post_run_cell`` event: remember one run (no exception object is kept: no tensors held)."""
    info = getattr(result, "info", None)
    before = getattr(result, "error_before_exec", None)
    error, line = _describe(before or getattr(result, "error_in_exec", None))
    RUNS.append(Run(getattr(result, "execution_count", None), getattr(info, "raw_cell", "") or "", time.time(),
                    error, line, before is not None))
    del RUNS[:-MAX_RUNS]


def watch() -> bool:
    """Start recording the cells of the running IPython kernel (once); False outside IPython."""
    ipython = sys.modules.get("IPython")
    shell = ipython.get_ipython() if ipython is not None else None
    if shell is None or not hasattr(shell, "events"):
        return False
    if id(shell) not in _watching:
        shell.events.register("post_run_cell", record)
        _watching.add(id(shell))
    return True


def notebook_path() -> Path | None:
    """The notebook this kernel runs for, when Jupyter says (``JPY_SESSION_NAME``: the kernel's notebook)."""
    name = os.environ.get("JPY_SESSION_NAME", "")
    if not name.endswith(".ipynb"):
        return None
    path = Path(name)
    return path if path.is_absolute() else Path.cwd() / path.name
