"""A pytest plugin loaded next to nbval in the grading subprocess (``-p softmax_lab.grading.nbval_plugin``).

Importing it imports no torch (``import softmax_lab`` is light, see its docstring), so it loads as an ordinary
plugin. nbval 0.11 drives the kernel with jupyter_client itself, not with nbclient, so nbclient's hooks do not
reach it: the three patches below (``await_reply``, ``runtest``, ``collect``) are nbval's own extension points.

It changes nothing about how nbval runs or compares cells. It only

* reports every cell's result (status, message, the text the cell printed, the hints it showed) as one JSON line
  on a pipe that the grader opened for it (``SOFTMAX_LAB_GRADE_CONFIG`` names the file descriptor). The kernel,
  where the learner's code runs, does not inherit that descriptor, so learner code cannot forge these lines;
* notices a dead kernel (``os._exit``, a segfault, the memory limit) within half a second instead of waiting
  for the cell timeout, and then stops the session: the grader decides what to rerun;
* gives each cell its own timeout (setup cells before the first exercise get a longer one);
* ignores nbval's comment markers (``# NBVAL_SKIP``, ``## NBVAL_RAISES_EXCEPTION`` ...) in the learner's cells;
* makes this process non-dumpable, so that the kernel (same user, no capabilities in the sandbox) cannot open
  this process's file descriptors through ``/proc/<pid>/fd`` or read its memory, and removes the pipe's
  number from the environment the kernel inherits.

Nothing here decides points: these records are diagnostics, and the grader validates every field.
"""
from __future__ import annotations

import json
import os
import re
import time
from queue import Empty

import pytest
from nbval import kernel as nbval_kernel
from nbval import plugin as nbval_plugin

from .hints import hint_of

_CONFIG = json.loads(os.environ.pop("SOFTMAX_LAB_GRADE_CONFIG", "{}"))  # the kernel does not inherit it


def _no_dump() -> None:
    try:
        import ctypes

        ctypes.CDLL(None, use_errno=True).prctl(4, 0, 0, 0, 0)  # PR_SET_DUMPABLE = 4 -> 0
    except Exception:
        pass


_no_dump()
_EXERCISE_CELLS = set(_CONFIG.get("exercise_cells", []))
_ANSI = re.compile(r"\x1b\[[0-9;]*[A-Za-z]")
_out = None


_LAST_REPLY: dict = {}


class KernelDied(RuntimeError):
    """The kernel process exited while a cell was running."""


def _emit(record: dict) -> None:
    global _out
    if _out is None:
        fd = _CONFIG.get("fd")
        if fd is None:
            return
        _out = os.fdopen(int(fd), "w", encoding="utf-8", buffering=1)
    _out.write(json.dumps(record, ensure_ascii=True, default=str) + "\n")
    _out.flush()


# ------------------------------------------------------------------------------- dead-kernel detection


def _await_reply(self, msg_id, timeout=None):
    """nbval's await_reply, polling in short steps so that a dead kernel is noticed at once."""
    deadline = None if timeout is None else time.monotonic() + timeout
    while True:
        step = 0.5 if deadline is None else max(0.0, min(0.5, deadline - time.monotonic()))
        try:
            msg = self.get_message(stream="shell", timeout=step)
        except Empty:
            if not self.is_alive():
                raise KernelDied("the kernel process died while running this cell") from None
            if deadline is not None and time.monotonic() >= deadline:
                raise
            continue
        if msg["parent_header"].get("msg_id") == msg_id:
            _LAST_REPLY[msg_id] = msg["content"]  # its status says 'error' even when the error output was lost
            if msg["content"]["status"] == "aborted":
                raise RuntimeError("Kernel aborted execution request")
            return


nbval_kernel.RunningKernel.await_reply = _await_reply


# ------------------------------------------------------------------------------------- cell results


def _outputs_text(outputs) -> dict:
    stdout, stderr, other, error, shown = [], [], [], None, []
    for out in outputs or []:
        kind = out.get("output_type")
        hint = hint_of(out)
        if hint:
            shown.append(list(hint))
        if kind == "stream":
            (stdout if out.get("name") == "stdout" else stderr).append(out.get("text", ""))
        elif kind == "error":
            error = {"ename": out.get("ename", ""), "evalue": str(out.get("evalue", ""))[:2000],
                     "traceback": _ANSI.sub("", "\n".join(out.get("traceback", [])))[-4000:]}
        elif kind in ("display_data", "execute_result"):
            text = out.get("data", {}).get("text/plain")
            if text:
                other.append(text if isinstance(text, str) else "".join(text))
    return {"stdout": "".join(stdout)[-20000:], "stderr": "".join(stderr)[-4000:],
            "display": "\n".join(other)[-4000:], "error": error, "hints": shown[:50]}


_orig_runtest = nbval_plugin.IPyNbCell.runtest


def _runtest(self):
    cell = self.cell_num
    timeouts = _CONFIG.get("timeouts", {})
    if str(cell) in timeouts:
        self.config.option.nbval_cell_timeout = float(timeouts[str(cell)])
    _emit({"event": "start", "cell": cell, "time": time.time()})
    record = {"event": "end", "cell": cell, "status": "passed", "message": ""}
    t0 = time.monotonic()
    try:
        _LAST_REPLY.clear()
        _orig_runtest(self)
        reply = next(iter(_LAST_REPLY.values()), {})
        if reply.get("status") == "error" and cell in _EXERCISE_CELLS:
            # The kernel said the cell failed, but no error output came (e.g. an exception message holding a
            # lone surrogate could not be sent): still an error.
            record.update(status="raised", message="the cell raised an exception")
            record["reply_error"] = {"ename": str(reply.get("ename", "Error"))[:200],
                                     "evalue": str(reply.get("evalue", ""))[:2000], "traceback": ""}
    except KernelDied as err:
        record.update(status="died", message=str(err))
        raise
    except nbval_plugin.NbCellError as err:
        text = str(err)
        if text.startswith("Timeout"):
            record.update(status="timeout", message=text)
        elif text.startswith("Cell outputs differ"):
            record.update(status="mismatch", message=text)
        else:
            record.update(status="raised", message=text)
        raise
    except RuntimeError as err:
        status = "died" if "Kernel dead" in str(err) else "grader-error"
        record.update(status=status, message=str(err))
        raise
    except pytest.skip.Exception:
        record.update(status="skipped")
        raise
    except BaseException as err:
        record.update(status="grader-error", message=f"{type(err).__name__}: {err}")
        raise
    finally:
        record["seconds"] = round(time.monotonic() - t0, 3)
        record.update(_outputs_text(self.test_outputs))
        if record.get("reply_error") and not record.get("error"):
            record["error"] = record.pop("reply_error")
        record.pop("reply_error", None)
        _emit(record)
        if record["status"] in ("died", "timeout", "grader-error"):
            # The grader reruns without the culprit; running on would only cost time.
            self.session.shouldstop = f"cell {cell}: {record['status']}"


nbval_plugin.IPyNbCell.runtest = _runtest

# nbval reads comment markers from every cell's source; in the learner's cells they must change nothing.
_orig_collect = nbval_plugin.IPyNbFile.collect


def _collect(self):
    for item in _orig_collect(self):
        if getattr(item, "cell_num", None) in _EXERCISE_CELLS:
            item.options.update(check=False, check_exception=False, skip=False)
        yield item


nbval_plugin.IPyNbFile.collect = _collect


def _last_error(report) -> str:
    """The last ``SomeError: ...`` line of a failed pytest report (else its tail), for the grader's message."""
    text = _ANSI.sub("", report.longreprtext)
    errors = re.findall(r"^E?\s*((?:\w+\.)*\w*(?:Error|Exception)\b.*)$", text, re.MULTILINE)
    return (errors[-1] if errors else text[-300:]).strip()[:500]


@pytest.hookimpl(hookwrapper=True)
def pytest_runtest_makereport(item, call):
    outcome = yield
    rep = outcome.get_result()
    if rep.when == "setup" and rep.failed and isinstance(item, nbval_plugin.IPyNbCell):
        # Typically: the kernel did not start (memory limit too low, broken environment).
        _emit({"event": "end", "cell": item.cell_num, "status": "setup-error", "message": _last_error(rep),
               "stdout": "", "stderr": "", "display": "", "error": None})
        item.session.shouldstop = "setup failed"


def pytest_collectreport(report):
    if report.failed:
        # The notebook could not even be read (typically MemoryError under a memory cap far too low).
        _emit({"event": "collect-error", "message": _last_error(report)})


def pytest_sessionfinish(session, exitstatus):
    _emit({"event": "finished", "exitstatus": int(exitstatus)})
