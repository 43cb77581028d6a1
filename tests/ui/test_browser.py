"""The course in a real browser: JupyterLab 4 + Chromium, driven as a learner would: every cell runs clean and
every picture, widget and stepper works.

For chapters 1, 2 and 5: open the solution notebook, wait for an idle kernel, Run All Cells from the menu, then
assert that no cell shows an error, every matplotlib figure renders as an image, every widget view renders, and
each stepper responds: "next ▶" moves the shown text to the next step of the trace. One learner notebook gets an
exercise filled in through the editor (pasted), run with its check, which must print PASSED. All of it offline:
any request to a host other than loopback is blocked and fails the test.

Run: `make test-ui` (or `.venv/bin/python -m pytest tests/ui`). Screenshots: test-output/ui/.
"""
from __future__ import annotations

import os
import re
import time
from pathlib import Path

import nbformat
import pytest
from jlab import OUT, ROOT, Notebook

pytestmark = pytest.mark.ui

RUN_ALL_TIMEOUT = 150  # s; each chapter runs in well under a minute on 2 cores (docs/authoring.md)

# What each chapter's widgets must show, as its author wrote it (compare with the chapter's trace cells):
#   steps:   (text in one step, text in the step right after it) in one of the chapter's steppers, on "next ▶";
#   padding: {padding option: {table row: values}} in the chapter's padding explorer, after clicking that option.
# Texts are compared after `squash`: whitespace collapsed, "2.0" read as "2".
CHAPTERS = {
    "01": {"steps": [("m = max(x) = 1002", "x - m = [-2, -1, 0]")]},
    "02": {"steps": [("max = 0", "x - max = [-1002, -1001, -1000, 0]"),
                     ("exp(x - max) = [0, 0, 0, 1]", "sum = 1")],
           "padding": {"-inf": {"max": "-1000"},
                             "0": {"max": "0", "output (stored lanes only)": "0 0 0"}}},
    "05": {"steps": [("l = 1.368", "= 1.203")]},
}
LEARNER_CHAPTER = os.environ.get("SOFTMAX_LAB_UI_LEARNER", "02")  # the learner notebook to fill in


def squash(text: str) -> str:
    text = re.sub(r"(?<=\d)\.0+(?![\d.])", "", text)  # 2.0 -> 2, -1.00 -> -1
    return re.sub(r"\s+", " ", text).strip()


def chapter_file(folder: str, chapter: str) -> Path:
    found = sorted((ROOT / folder).glob(f"{chapter}_*.ipynb"))
    if not found:
        pytest.fail(f"{folder}/{chapter}_*.ipynb not found: the UI test covers chapter {chapter} "
                    f"(update CHAPTERS in {Path(__file__).relative_to(ROOT)} if chapters were renumbered)",
                    pytrace=False)
    return found[0]


def expected_figures(path: Path) -> int:
    """Figures the chapter draws: image outputs stored in the solution, or cells that plot with plt."""
    nb = nbformat.read(path, as_version=4)
    code = [c for c in nb.cells if c.cell_type == "code"]
    stored = sum(1 for c in code for o in c.get("outputs", []) if "image/png" in o.get("data", {}))
    plotting = sum(1 for c in code if re.search(r"\bplt\.|\.plot\(|\bfig\b", c.source))
    return max(stored, plotting)


def check_offline(nb: Notebook) -> None:
    nb.check(not nb.page.external,
             "the page tried to reach the internet (blocked; widgets and assets must come from the local "
             "server): " + ", ".join(nb.page.external[:5]))


def check_renders(nb: Notebook, min_figures: int) -> tuple[dict, list[dict]]:
    """Figures shown as loaded <img>, widget views rendered (not 'Error displaying widget')."""
    figs = nb.wait_figures()
    nb.check(figs["model"] >= min_figures, f"expected at least {min_figures} matplotlib figure(s), "
                                           f"the run produced {figs['model']} image output(s)")
    nb.check(figs["loaded"] >= figs["model"],
             f"{figs['model']} figure(s) in the outputs but only {figs['loaded']} rendered as a loaded <img> "
             f"({figs['shown']} <img> elements)")
    deadline = time.monotonic() + 20
    while True:
        views = nb.widget_views()
        broken = [v for v in views if not v["rendered"] or "Error displaying widget" in v["text"]]
        if not broken or time.monotonic() > deadline:
            break
        time.sleep(0.25)
    nb.check(not broken, f"{len(broken)} of {len(views)} widget output(s) did not render as a widget view "
                         f"(is the @jupyter-widgets/jupyterlab-manager labextension installed and loaded?):\n  "
                         + "\n  ".join(f"cell {v['cell']!r} shows {v['text']!r}" for v in broken[:5]))
    return figs, views


def run_solution(nb: Notebook, min_figures: int) -> None:
    nb.open()
    state = nb.run_all(RUN_ALL_TIMEOUT)
    nb.check_no_errors("after Run All Cells")
    nb.check(state["done"] == state["code"] and state["executed"] >= state["code"],
             f"only {state['executed']} of {state['code']} code cells ran (Run All stopped early?): {state}")
    check_renders(nb, min_figures)


def walk_steppers(nb: Notebook) -> list[list[str]]:
    n = nb.steppers().count()
    nb.check(n >= 1, "no stepper widget (.softmax-lab-stepper) is shown after running the notebook")
    return [nb.walk_stepper(k) for k in range(n)]


def check_transitions(nb: Notebook, walks: list[list[str]], expected: list[tuple[str, str]]) -> tuple | None:
    """Each (before, after) pair is shown by consecutive steps of some stepper. Returns where the first one is."""
    first = None
    for before, after in expected:
        where = [(k, i + 1) for k, steps in enumerate(walks) for i in range(len(steps) - 1)
                 if squash(before) in squash(steps[i]) and squash(after) in squash(steps[i + 1])]
        ok = bool(where)
        first = first or (where[0] if where else None)
        shown = "\n".join(f"  stepper {k + 1}: " + " | ".join(squash(s)[:90] for s in steps)
                          for k, steps in enumerate(walks))
        nb.check(ok, f"no stepper goes from a step showing {before!r} to one showing {after!r} on 'next ▶'. "
                     f"The steppers showed:\n{shown}")
    return first


def check_padding(nb: Notebook, expected: dict[str, dict[str, str]]) -> None:
    n = nb.explorers().count()
    nb.check(n >= 1, "no padding explorer widget (.softmax-lab-padding) is shown after running the notebook")
    tables = [nb.toggle_explorer(k) for k in range(n)]
    for option, rows in expected.items():
        for row, values in rows.items():
            ok = any(squash(t.get(option, {}).get(row, "")) == squash(values) for t in tables)
            nb.check(ok, f"with padding {option!r}, no padding explorer shows {row!r} = {values!r}; they showed "
                         + "; ".join(f"{option!r}: {t.get(option)}" for t in tables))


def chapter_screenshot(nb: Notebook, name: str, where: tuple | None) -> Path:
    """The first interactive widget in the middle; a stepper at the step the chapter's trace expects."""
    if where:
        nb.stepper_goto(*where)
    with nb.step("taking the chapter screenshot"):
        widget = (nb.steppers().nth(where[0]) if where else
                  nb.page.locator(".jp-Notebook .softmax-lab-stepper, .jp-Notebook .softmax-lab-padding").first)
        widget.evaluate("n => n.scrollIntoView({block: 'center'})")
        if where:  # the stepper draws the step it shows (softmax_lab.pictures), not only its text
            drawn = widget.locator("img")
            nb.check(drawn.count() >= 1 and drawn.first.evaluate("i => i.complete && i.naturalWidth > 100"),
                     "the stepper shows no drawing of its step")
        return nb.screenshot(name)


@pytest.mark.parametrize("chapter", sorted(CHAPTERS))
def test_solution_chapter_in_jupyterlab(page, lab, chapter):
    path = chapter_file("solutions", chapter)
    nb = Notebook(page, lab, f"solutions/{path.name}", OUT, f"ch{chapter}")
    run_solution(nb, expected_figures(path))
    expect, where = CHAPTERS[chapter], None
    if "steps" in expect or nb.steppers().count():
        where = check_transitions(nb, walk_steppers(nb), expect.get("steps", []))
    if "padding" in expect or nb.explorers().count():
        check_padding(nb, expect.get("padding", {}))
    chapter_screenshot(nb, f"ch{chapter}", where)
    check_offline(nb)


def test_harness_reports_errors_on_fixture(page, lab):
    """The harness itself, on a tiny notebook: stepper, figure and widgets pass; the 1/0 cell is reported."""
    nb = Notebook(page, lab, "fixtures/fixture_error.ipynb", OUT, "fixture")
    nb.open()
    nb.run_all(60)
    errors = nb.errors()
    nb.check(len(errors) == 1 and "ZeroDivisionError" in errors[0],
             f"the fixture's last cell divides by zero; the harness should report exactly that, got {errors}")
    check_renders(nb, 1)
    nb.check(nb.steppers().count() == 1, "the fixture's stepper is not shown")
    check_transitions(nb, [nb.walk_stepper(0)], [("1002", "[-2, -1, 0]")])
    check_offline(nb)
    # The offline guard itself: a CDN fetch from the page must be blocked and reported.
    blocked = page.evaluate("""() => fetch('https://cdn.jsdelivr.net/npm/@jupyter-widgets/html-manager')
                                     .then(() => 'fetched', () => 'blocked')""")
    nb.check(blocked == "blocked" and any("cdn.jsdelivr.net" in u for u in page.external),
             f"the offline guard let a CDN request through ({blocked}, recorded: {page.external})")


def find_exercise(learner: Path, solution: Path) -> tuple[str, int, str]:
    """The first exercise with a check right after it: (id, cell index in the learner notebook, solution source)."""
    lnb = nbformat.read(learner, as_version=4)
    snb = nbformat.read(solution, as_version=4)
    answers = {t.split(":", 1)[1]: c.source for c in snb.cells for t in c.metadata.get("tags", [])
               if t.startswith("exercise:")}
    for i, cell in enumerate(lnb.cells[:-1]):
        for tag in cell.metadata.get("tags", []):
            if tag.startswith("exercise:"):
                ex = tag.split(":", 1)[1]
                if f"check:{ex}" in lnb.cells[i + 1].metadata.get("tags", []) and ex in answers:
                    return ex, i, answers[ex]
    pytest.fail(f"no exercise cell followed by its check cell in {learner.relative_to(ROOT)} "
                f"with a solution in {solution.relative_to(ROOT)}", pytrace=False)


def check_output(nb: Notebook, index: int) -> str:
    return nb.cells()[index]["shown"]


def test_learner_fills_exercise_in_jupyterlab(page, lab):
    learner = chapter_file("notebooks", LEARNER_CHAPTER)
    solution = chapter_file("solutions", LEARNER_CHAPTER)
    fill_exercise(page, lab, learner, solution, f"notebooks/{learner.name}", f"learner-ch{LEARNER_CHAPTER}")


def fill_exercise(page, lab, learner: Path, solution: Path, rel: str, label: str) -> None:
    ex, index, answer = find_exercise(learner, solution)
    nb = Notebook(page, lab, rel, OUT, label)
    nb.open()
    if index > 0:  # the cells above the exercise: imports, helpers
        with nb.step("selecting the exercise cell"):
            nb.cell_locator(index).locator(".cm-content").click()
        nb.arm_run()
        nb.menu("Run", "Run All Above Selected Cell")
        nb.wait_run(RUN_ALL_TIMEOUT, "Run All Above Selected Cell")
        nb.check_no_errors("above the exercise (Run All Above Selected Cell)")
        nb.log(f"ran the {index} cells above exercise {ex}")

    nb.run_cells(index, 2, 120)  # the blank exercise and its check: not passed yet
    before = check_output(nb, index + 1)
    nb.check(f"{ex}: FAILED" in before,
             f"the check of the blank exercise {ex} should print '{ex}: FAILED ...', it shows:\n{before[-800:]}")
    nb.log(f"blank exercise {ex}: its check says FAILED")

    unmasked = answer.replace("tl.store(out_ptr + row * n_cols + cols, y, mask=mask)",
                              "tl.store(out_ptr + row * n_cols + cols, y)")
    if unmasked != answer:  # a real mistake: the check draws the kernel's lanes beside its FAIL lines
        nb.replace_source(index, unmasked)
        nb.run_cells(index, 2, 120)
        wrong = check_output(nb, index + 1)
        drawn = nb.cell_locator(index + 1).locator(".jp-OutputArea img")
        nb.check(f"{ex}: FAILED" in wrong and "lane map of your kernel on a" in wrong
                 and "the store is not masked" in wrong and drawn.count() >= 1,
                 f"an unmasked store should fail with a lane map; the check shows:\n{wrong[-800:]}")
        with nb.step("taking the lane-map screenshot"):
            drawn.first.evaluate("n => n.scrollIntoView({block: 'center'})")
            nb.screenshot(f"{label}-lanemap")
        nb.log(f"unmasked store in {ex}: FAILED, lane map shown")

    nb.replace_source(index, answer)
    nb.run_cells(index, 2, 120)
    after = check_output(nb, index + 1)
    nb.check_no_errors("after running the filled-in exercise and its check")
    nb.check(re.search(rf"^{re.escape(ex)}: PASSED \((\d+)/\1 checks passed\)", after, re.M) is not None,
             f"after pasting the solution of {ex} and running it, its check should print '{ex}: PASSED (k/k "
             f"checks passed)'; it shows:\n{after[-1500:]}")
    nb.log(f"pasted the solution of {ex}: its check says PASSED")
    with nb.step("taking the learner screenshot"):
        nb.cell_locator(index + 1).evaluate("n => n.scrollIntoView({block: 'center'})")
        nb.screenshot(label)
    check_offline(nb)
