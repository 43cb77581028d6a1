"""`make lab` as a new learner meets it: `softmax-lab lab` (what the Makefile runs) serves workspace/ with chapter 0
open, offers only the course kernel, shows no news pop-up, and puts the venv first on PATH for `!` commands. A
learner saves an answer through JupyterLab; rebuilding the course (`make notebooks`) and its stale check (what
`make test` runs) then pass, and the answer is still on disk.

Run: `make test-ui`. Screenshots: test-output/ui/make-lab-*.png.
"""
from __future__ import annotations

import os
import secrets
import shutil
import subprocess
import sys
import time
import urllib.error
from pathlib import Path

import nbformat
import pytest

from conftest import LabServer, _free_port, _stop  # pytest puts tests/ui on sys.path
from jlab import OUT, ROOT, Notebook

from softmax_lab.course import build

pytestmark = pytest.mark.ui
SETUP = "00_setup.ipynb"


@pytest.fixture(scope="module")
def made_lab(tmp_path_factory):
    """A fresh course checkout (solutions/, notebooks/) and `softmax-lab lab` serving it, the way `make lab` does,
    with a PATH that does not have the venv on it and JupyterLab settings that nobody tuned."""
    root = tmp_path_factory.mktemp("course")
    for name in ("solutions", "notebooks"):
        shutil.copytree(ROOT / name, root / name)
    (root / "Makefile").write_text("# a course checkout\n")
    home = tmp_path_factory.mktemp("home")
    token = secrets.token_hex(16)
    env = dict(os.environ, JUPYTER_TOKEN=token, HOME=str(home), JUPYTER_CONFIG_DIR=str(home / "config"),
               JUPYTER_RUNTIME_DIR=str(home / "runtime"), JUPYTERLAB_SETTINGS_DIR=str(home / "settings"),
               JUPYTERLAB_WORKSPACES_DIR=str(home / "workspaces"), PATH="/usr/bin:/bin", PYTHONUNBUFFERED="1")
    env.pop("VIRTUAL_ENV", None)
    command = Path(sys.executable).parent / "softmax-lab"
    port = _free_port()
    OUT.mkdir(parents=True, exist_ok=True)
    log = OUT / "make-lab.log"
    with open(log, "w") as fh:
        proc = subprocess.Popen([str(command), "lab", "--root", str(root), "--port", str(port), "--no-browser", "--",
                                 "--ServerApp.ip=127.0.0.1", "--LabApp.expose_app_in_browser=True"],
                                cwd=root, env=env, stdout=fh, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL)
    server = LabServer(root / "workspace", port, token, proc, log)
    if not server.wait_serving(90):
        _stop(proc)
        pytest.fail(f"`softmax-lab lab` did not serve JupyterLab:\n{server.log_tail()}", pytrace=False)
    server.course = root
    deadline = time.monotonic() + 30  # the address comes in a box, after everything the server printed
    while "Softmax Lab is ready" not in server.log_tail(20000) and time.monotonic() < deadline:
        time.sleep(0.3)
    printed = server.log_tail(20000).rstrip().splitlines()
    assert f"| http://localhost:{port}/lab/tree/00_setup.ipynb?token={token}" in "\n".join(printed[-5:]), \
        "\n".join(printed[-30:])
    assert set(printed[-1]) == {"+", "-"}, "the box is the last thing `softmax-lab lab` prints"
    try:
        yield server
    finally:
        try:
            server.api("POST", "/api/shutdown")
            proc.wait(timeout=15)
        except (urllib.error.URLError, OSError, subprocess.TimeoutExpired):
            pass
        _stop(proc)


def test_first_screen_saved_answer_survives_rebuild(browser, made_lab):
    lab = made_lab
    workspace = lab.course / "workspace"
    assert sorted(p.name for p in workspace.glob("*.ipynb")) == \
        sorted(p.name for p in (ROOT / "notebooks").glob("*.ipynb"))
    assert set(lab.api("GET", "/api/kernelspecs")["kernelspecs"]) == {"softmax-lab"}, "only the course kernel"

    context = browser.new_context(viewport={"width": 1280, "height": 1000}, service_workers="block")
    context.grant_permissions(["clipboard-read", "clipboard-write"], origin=lab.base)
    page = context.new_page()
    try:
        nb = Notebook(page, lab, SETUP, OUT, "make-lab")
        # The address `make lab` prints (token only) opens chapter 0.
        with nb.step("opening the address make lab prints"):
            page.goto(lab.url("/"), wait_until="domcontentloaded", timeout=60_000)
        nb.wait_for("""() => { const w = window.jupyterapp && window.jupyterapp.shell.currentWidget;
                       return w && w.context && w.context.path === '00_setup.ipynb' && w.context.isReady; }""",
                    "chapter 0 to open by itself", 90)
        nb.wait_idle(90, "the course kernel to start")
        time.sleep(3)  # the news question appears a moment after start-up when it is on
        toasts = page.locator(".Toastify__toast").all_inner_texts()
        nb.check(not any("news" in t.lower() for t in toasts), f"a news pop-up is shown: {toasts}")
        nb.screenshot("make-lab-first-screen")

        # A learner's `!` commands use the course's environment.
        cells = nb.cells()
        k = next(i for i, c in enumerate(cells) if c["source"].strip() == "softmax_lab.doctor();")
        nb.replace_source(k, "!softmax-lab --version\n!which python")
        nb.run_cells(k, 1, 120)
        shown = nb.cells()[k]["shown"]
        nb.check("softmax-lab 0.1.0" in shown and str(Path(sys.executable).parent / "python") in shown,
                 f"`!softmax-lab --version` / `!which python` in a cell show: {shown!r}")
        with nb.step("saving with Ctrl+S"):
            page.keyboard.press("ControlOrMeta+s")
        nb.wait_for("""() => !window.jupyterapp.shell.currentWidget.context.model.dirty""", "the save", 30)
        nb.screenshot("make-lab-saved")
    finally:
        context.close()

    saved = (workspace / SETUP).read_text()
    assert "!softmax-lab --version" in saved
    # `make notebooks` and the stale check `make test` runs: both pass, and the answer is still there.
    assert build.build(lab.course / "solutions", lab.course / "notebooks", log=lambda *_: None) == []
    assert build.build(lab.course / "solutions", lab.course / "notebooks", check=True, log=lambda *_: None) == []
    assert (workspace / SETUP).read_text() == saved
    assert nbformat.reads(saved, as_version=4).cells[k].source.startswith("!softmax-lab --version")


CHAPTER_2 = "02_masks_and_padding.ipynb"


def test_chapter_2_solved_and_saved_gets_full_marks_in_a_cell_and_in_the_terminal(browser, made_lab):
    """The whole route: after `make lab`, chapter 2 solved and saved in Chromium, then
    `!softmax-lab check 02_masks_and_padding.ipynb` in a cell and the same command in JupyterLab's terminal (which
    opens in workspace/) both give full marks."""
    lab = made_lab
    workspace = lab.course / "workspace"
    learner = nbformat.read(str(workspace / CHAPTER_2), as_version=4)
    solution = nbformat.read(str(ROOT / "solutions" / CHAPTER_2), as_version=4)
    answers = {t: c.source for c in solution.cells for t in c.metadata.get("tags", []) if t.startswith("exercise:")}
    exercise_cells = {k: answers[t] for k, c in enumerate(learner.cells) for t in c.metadata.get("tags", [])
                      if t in answers}
    assert len(exercise_cells) == 2, exercise_cells.keys()
    last = max(k for k, c in enumerate(learner.cells) if c.cell_type == "code")

    context = browser.new_context(viewport={"width": 1280, "height": 1000}, service_workers="block")
    context.grant_permissions(["clipboard-read", "clipboard-write"], origin=lab.base)
    page = context.new_page()
    try:
        nb = Notebook(page, lab, CHAPTER_2, OUT, "check-ch02")
        nb.open()
        for k, source in exercise_cells.items():
            nb.replace_source(k, source)
        nb.replace_source(last, f"!softmax-lab check {CHAPTER_2}")
        with nb.step("saving with Ctrl+S"):
            page.keyboard.press("ControlOrMeta+s")
        nb.wait_for("""() => !window.jupyterapp.shell.currentWidget.context.model.dirty""", "the save", 30)
        nb.run_cells(last, 1, 600)
        shown = nb.cells()[last]["shown"]
        nb.screenshot("check-ch02-in-a-cell")
        nb.check(_full_marks(shown), f"`!softmax-lab check {CHAPTER_2}` in a cell shows: {shown!r}")
        nb.check(f"checking {workspace / CHAPTER_2}" in shown,
                 f"the cell does not say which file it checked: {shown!r}")

        with nb.step("opening JupyterLab's terminal"):
            page.evaluate("() => window.jupyterapp.commands.execute('terminal:create-new').then(() => true)")
            page.wait_for_selector(".jp-Terminal .xterm", timeout=60_000)
            page.locator(".jp-Terminal .xterm").last.click()
            time.sleep(2)  # bash reads its start-up file
            page.keyboard.type(f"pwd; softmax-lab check {CHAPTER_2}\n", delay=20)
        # What the terminal shows, read from its xterm.js buffer (it may draw on a canvas).
        screen = nb.wait_for(r"""() => { const w = window.jupyterapp.shell.currentWidget;
                                      const t = w && w.content && w.content._term;
                                      if (!t) return '';
                                      const b = t.buffer.active, rows = [];
                                      for (let i = 0; i < b.length; i++)
                                          rows.push(b.getLine(i).translateToString(true));
                                      const text = rows.join('\n');
                                      return /\d+\/\d+ points/.test(text) ? text : ''; }""",
                             "the terminal's `softmax-lab check` to finish", 600)
        nb.screenshot("check-ch02-in-the-terminal")
        nb.check(str(workspace) in screen, f"the terminal does not open in workspace/: {screen!r}")
        nb.check(_full_marks(screen), f"`softmax-lab check {CHAPTER_2}` in the terminal shows: {screen!r}")
    finally:
        context.close()


def _full_marks(text: str) -> bool:
    import re

    found = re.search(r"(\d+(?:\.\d+)?)/(\d+(?:\.\d+)?) points", text)
    return bool(found) and float(found.group(1)) == float(found.group(2)) > 0
