"""What every check does around the learner's code (softmax_lab.checks.guard): it refuses a definition older
than the exercise cell, stops a runaway kernel naming its loop, and answers an Interrupt in a few lines."""
from __future__ import annotations

import _thread
import contextlib
import io
import json
import os
import signal
import threading
import time

import pytest
from IPython.core.interactiveshell import InteractiveShell

from softmax_lab import cells
from softmax_lab.checks import guard

from conftest import exercise_source, load_exercise, run_check

WHILE = ("    for start in range(0, n_cols, BLOCK):\n        cols = start + tl.arange(0, BLOCK)\n"
         "        x = tl.load(x_row + cols, mask=cols < n_cols, other=-float(\"inf\")).to(tl.float32)\n"
         "        m_new")
WHILE_NEVER_ENDS = ("    start = 0\n    while start < n_cols:\n        cols = start + tl.arange(0, BLOCK)\n"
                    "        x = tl.load(x_row + cols, mask=cols < n_cols, other=-float(\"inf\")).to(tl.float32)\n"
                    "        m_new")


def online(edit, tmp_path):
    source = exercise_source("ch05-online-kernel")
    old, new = edit
    assert old in source, "the solution of ch05-online-kernel changed: update this test"
    return load_exercise("ch05-online-kernel", source.replace(old, new, 1), tmp_path).online_softmax


@pytest.fixture
def short_limit(monkeypatch):
    monkeypatch.setattr(guard, "TIME_LIMIT_S", 3.0)
    monkeypatch.setattr(guard, "_interpreted", lambda: True)


@pytest.mark.parametrize("edit,words", [
    ((WHILE, WHILE_NEVER_ENDS), "the `while` loop at line"),
    (("for start in range(0, n_cols, BLOCK):", "for start in range(0, n_cols * 1000000, BLOCK):"), "the loop bound"),
], ids=["a while that never ends", "a loop bound far too large"])
def test_a_runaway_kernel_is_stopped_and_its_loop_named(edit, words, short_limit, tmp_path):
    ok, text = run_check("ch05-online-kernel", online(edit, tmp_path))
    lines = text.strip().splitlines()
    assert not ok and len(lines) <= 10, text
    assert lines[0].startswith("STOPPED  after 3 s during the case"), text
    assert any(words in line for line in lines), text
    assert "Traceback" not in text and "triton" not in text.replace("@triton.jit", "")
    assert lines[-1].startswith("ch05-online-kernel: FAILED (stopped"), text
    # the interpreter is left as it was: the solution passes right after
    fine = load_exercise("ch05-online-kernel", exercise_source("ch05-online-kernel"), tmp_path).online_softmax
    ok, text = run_check("ch05-online-kernel", fine)
    assert ok, text


def test_the_same_stopped_function_is_not_run_again(short_limit, monkeypatch, tmp_path):
    """A later cell gives the check the very function it stopped (chapter 3's table runs its check again): the same
    lines at once, saying so, instead of another wait; what the grader reads from them is the same (a stop, with the
    cases before it). A new definition (the exercise cell run again) is checked again."""
    from softmax_lab.grading.statuses import STOPPED, STOPPED_VERDICT

    monkeypatch.setattr(guard, "_STOPPED", {})
    hangs = online((WHILE, WHILE_NEVER_ENDS), tmp_path)
    t0 = time.monotonic()
    ok, first = run_check("ch05-online-kernel", hangs)
    assert not ok and time.monotonic() - t0 >= 3.0, first
    t0 = time.monotonic()
    ok, again = run_check("ch05-online-kernel", hangs)
    assert not ok and time.monotonic() - t0 < 1.0, again
    lines = again.splitlines()
    assert [ln for ln in lines if "not run again" not in ln] == first.splitlines(), (first, again)
    note = next(k for k, ln in enumerate(lines) if "not run again" in ln)
    assert STOPPED.match(lines[note - 1]) and lines[note].startswith("  ") and "`online_softmax`" in lines[note]
    assert STOPPED_VERDICT.search(again)
    t0 = time.monotonic()
    ok, fresh = run_check("ch05-online-kernel", online((WHILE, WHILE_NEVER_ENDS), tmp_path))
    assert not ok and time.monotonic() - t0 >= 3.0 and "not run again" not in fresh, fresh


def test_interrupt_shows_a_few_lines_and_no_traceback(monkeypatch, tmp_path):
    """The learner presses Interrupt (SIGINT in the kernel) while the check runs a kernel that never ends:
    IPython shows the check's few lines, naming the loop, and no traceback through the package or Triton."""
    monkeypatch.setattr(guard, "TIME_LIMIT_S", 0)
    fn = online((WHILE, WHILE_NEVER_ENDS), tmp_path)
    shell = InteractiveShell.instance()
    shell.user_ns["fn"] = fn
    timer = threading.Timer(2.0, _thread.interrupt_main)
    out = io.StringIO()
    # A kernel's SIGINT raises KeyboardInterrupt; where pytest was started in the background (`cmd &` in a script)
    # SIGINT is ignored and interrupt_main does nothing, so the never-ending kernel would run for ever.
    ignored = signal.signal(signal.SIGINT, signal.default_int_handler)
    timer.start()
    try:
        with contextlib.redirect_stdout(out):
            result = shell.run_cell("from softmax_lab.checks import check_online_softmax\n"
                                    "check_online_softmax(fn)")
    finally:
        timer.cancel()
        signal.signal(signal.SIGINT, ignored)
    assert isinstance(result.error_in_exec, guard.CheckInterrupted)
    shown = result.error_in_exec._render_traceback_()
    assert len(shown) <= 10 and shown[0].startswith("Interrupted during the case"), shown
    assert any("`while` loop at line" in line for line in shown), shown
    assert "Traceback" not in out.getvalue() and "interpreter.py" not in out.getvalue(), out.getvalue()


# --- an old definition --------------------------------------------------------------------------------------

GOOD = exercise_source("ch00-double")
HEADER = "import torch\nimport triton\nimport triton.language as tl\n\n"


@pytest.fixture
def shell(monkeypatch):
    """An IPython shell recording its runs as a notebook kernel does after `import softmax_lab`."""
    sh = InteractiveShell.instance()
    monkeypatch.setattr(cells, "RUNS", [])
    assert cells.watch()
    monkeypatch.delenv("JPY_SESSION_NAME", raising=False)

    def run(source: str) -> str:
        out = io.StringIO()
        with contextlib.redirect_stdout(out):
            sh.run_cell(source)
        # a terminal shell's prompt for the check's (invisible) result is not part of what a notebook shows
        return "".join(line for line in out.getvalue().splitlines(True) if not line.startswith("Out["))

    run(HEADER)
    return run


CHECK = "from softmax_lab.checks import check_double\ncheck_double(double)"


def test_a_syntax_error_after_a_good_run_is_said_not_checked(shell):
    assert "ch00-double: PASSED" in shell(GOOD) + shell(CHECK)
    broken = GOOD.replace("tl.store(", "tl.store((", 1)
    shell(broken)
    text = shell(CHECK).strip().splitlines()
    assert len(text) == 2, text
    assert text[0].startswith("NOT CHECKED  the last run of the cell defining `double` stopped with SyntaxError"), text
    assert text[-1].startswith("ch00-double: FAILED"), text
    shell(GOOD)  # fixed and run again: checked again
    assert "ch00-double: PASSED" in shell(CHECK)


def test_an_error_after_the_definition_still_checks_the_new_one(shell):
    shell(GOOD + "\nraise ValueError('my own test at the end of the cell')\n")
    assert "ch00-double: PASSED" in shell(CHECK)


def test_a_cell_edited_and_saved_since_it_ran_is_said_not_checked(shell, monkeypatch, tmp_path):
    shell(GOOD)
    saved = tmp_path / "00_setup.ipynb"
    edited = GOOD.replace("2 * x", "3 * x")
    saved.write_text(json.dumps({"cells": [{"cell_type": "code", "metadata": {"tags": ["exercise:ch00-double"]},
                                            "source": edited, "outputs": []}], "metadata": {}}))
    # saved after the run: the file system's clock is coarser than time.time(), so say it outright
    later = time.time() + 1
    os.utime(saved, (later, later))
    monkeypatch.setenv("JPY_SESSION_NAME", str(saved))
    text = shell(CHECK)
    assert "NOT CHECKED  the exercise cell was edited since it last ran" in text, text
    shell(edited)  # run as saved: no complaint (the check now tests it, and names what is wrong)
    assert "NOT CHECKED" not in shell(CHECK)


def test_a_real_kernel_refuses_the_old_definition(tmp_path):
    """The learner's route: a Jupyter kernel, the exercise cell run, broken, run again, then the check."""
    import nbformat
    from jupyter_client.kernelspec import KernelSpecManager
    from nbclient import NotebookClient

    from softmax_lab.course import notebook

    nb = nbformat.v4.new_notebook()
    nb.cells = [nbformat.v4.new_code_cell("import softmax_lab\n" + HEADER), nbformat.v4.new_code_cell(GOOD),
                nbformat.v4.new_code_cell(GOOD.replace("def double(", "def double(:", 1)),
                nbformat.v4.new_code_cell(CHECK)]
    name = notebook.KERNEL_NAME if notebook.KERNEL_NAME in KernelSpecManager().find_kernel_specs() else "python3"
    NotebookClient(nb, timeout=120, kernel_name=name, allow_errors=True).execute()
    text = "".join(o.get("text", "") for o in nb.cells[3].outputs)
    assert text.startswith("NOT CHECKED  the last run of the cell defining `double` stopped with SyntaxError"), text


def test_the_checks_own_work_is_never_stopped(monkeypatch, capsys):
    """Past the limit with no learner code running (a compile, a reference), the check goes on: only the frames
    above the check count, not the notebook cell (or this test) that called it."""
    import time

    monkeypatch.setattr(guard, "TIME_LIMIT_S", 0.5)
    monkeypatch.setattr(guard, "RECHECK_S", 0.2)
    monkeypatch.setattr(guard, "_interpreted", lambda: True)
    import functools

    slow = guard.guarded(functools.partial(time.sleep, 1.5), ["ch00-double"])  # no Python frame of its own
    t0 = time.monotonic()
    assert slow() is None and time.monotonic() - t0 >= 1.5
    assert capsys.readouterr().out == ""


def test_the_package_s_own_kernel_given_as_yours_is_not_checked(tmp_path):
    """The course's kernel imported under the exercise's name, or wrapped by the learner's launcher, is the
    course's code: the check says so in one line and fails, instead of printing PASS for it."""
    source = ("from softmax_lab.kernels.fused import fused_softmax\n\n"
              "def my_fused_softmax(x, out):\n    return fused_softmax(x, out)\n")
    wrapped = load_exercise("ch04-fused", source, tmp_path).my_fused_softmax
    ok, text = run_check("ch04-fused", wrapped)
    lines = text.strip().splitlines()
    assert not ok and len(lines) == 2, text
    assert lines[0].startswith("NOT CHECKED  this is softmax_lab's kernel, not yours"), text
    assert "softmax_lab.kernels.fused.fused_softmax" in lines[0], text
    # the learner's own kernel (the solution) is checked as before
    mine = load_exercise("ch04-fused", exercise_source("ch04-fused"), tmp_path).my_fused_softmax
    ok, text = run_check("ch04-fused", mine)
    assert ok and "NOT CHECKED" not in text, text
