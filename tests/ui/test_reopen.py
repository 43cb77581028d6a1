"""Pictures survive a reopen: chapter 1 run, saved, its kernel stopped, reopened in a fresh page:
every stepper comes back with its drawing, no "Error displaying widget: model not found".

Run: `make test-ui` (or `.venv/bin/python -m pytest tests/ui/test_reopen.py`). Screenshots: test-output/ui/.
"""
from __future__ import annotations

import json
import time

import pytest
from jlab import OUT, Notebook

from softmax_lab import lab as course_lab

pytestmark = pytest.mark.ui

CHAPTER = "solutions/01_scores_to_probabilities.ipynb"
STATE = "application/vnd.jupyter.widget-state+json"


def test_the_setting_the_browser_uses_is_make_labs():
    from conftest import LAB_SETTINGS

    (plugin, value), = course_lab.WIDGET_SETTINGS.items()
    assert LAB_SETTINGS[plugin.replace(":", "/") + ".jupyterlab-settings"] == value


def test_a_saved_chapter_shows_its_pictures_when_reopened(page, lab):
    nb = Notebook(page, lab, CHAPTER, OUT, "reopen-ch01")
    nb.open()
    nb.run_all(150)
    nb.check_no_errors("after Run All Cells")
    shown = nb.steppers().count()
    nb.check(shown >= 1, "chapter 1 shows no stepper after Run All Cells")
    with nb.step("saving the notebook"):
        page.evaluate("() => window.jupyterapp.commands.execute('docmanager:save')")
        path = lab.root / CHAPTER
        deadline = time.monotonic() + 30
        while STATE not in json.loads(path.read_text()).get("metadata", {}).get("widgets", {}):
            nb.check(time.monotonic() < deadline, "the saved notebook holds no widget state (saveState off?)")
            time.sleep(0.5)
    lab.shutdown_kernels()  # the pictures must come from the saved notebook, not from a live kernel
    nb.open()
    with nb.step("waiting for the steppers to come back"):
        deadline = time.monotonic() + 30
        while nb.steppers().count() < shown and time.monotonic() < deadline:
            time.sleep(0.5)
    views = nb.widget_views()
    missing = [v for v in views if not v["rendered"] or "Error displaying widget" in v["text"]]
    nb.check(not missing, f"widgets that did not come back: {missing[:3]}")
    nb.check(nb.steppers().count() == shown, f"{nb.steppers().count()} of {shown} steppers came back")
    for k in range(shown):
        img = nb.steppers().nth(k).locator("img")
        nb.check(img.count() >= 1 and img.first.evaluate("i => i.complete && i.naturalWidth > 100"),
                 f"stepper {k + 1} came back without its drawing")
    nb.steppers().first.evaluate("n => n.scrollIntoView({block: 'center'})")
    nb.screenshot("reopen-ch01")
