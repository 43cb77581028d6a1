"""The web edition (`softmax-lab site`): builds from solutions/ with stored outputs, no broken links or pictures, and
no line of any solution, model answer or rubric anywhere in it."""
from pathlib import Path

import nbformat
import pytest

from softmax_lab import web
from softmax_lab.course import execute, notebook

pytest.importorskip("nbconvert", reason="the web edition needs nbconvert (in requirements/lab.txt)")

ROOT = Path(__file__).resolve().parents[1]
SOLUTIONS = ROOT / "solutions"


@pytest.fixture(scope="module")
def site(tmp_path_factory):
    out = tmp_path_factory.mktemp("site")
    web.build_site(SOLUTIONS, ROOT / "notebooks", out, log=lambda *_: None)
    return out


def test_site_builds_every_chapter_with_no_problems(site):
    chapters = sorted(p.stem for p in SOLUTIONS.glob("*.ipynb"))
    assert sorted(p.stem for p in site.glob("*.html") if p.name != "index.html") == chapters
    assert web.check_site(site, SOLUTIONS) == []
    index = (site / "index.html").read_text()
    for name in chapters:
        assert f'href="{name}.html"' in index and (site / "notebooks" / f"{name}.ipynb").exists()


def test_pages_keep_demonstration_outputs_and_pictures(site):
    setup = (site / "00_setup.html").read_text()
    assert "softmax([2, 1, 0]) =" in setup and "0.6652" in setup  # a stored demonstration output
    assert "PASSED" in setup  # the check verdicts of the recorded run
    plots = sum((site / f"{p.stem}.html").read_text().count("data:image/png") for p in SOLUTIONS.glob("*.ipynb"))
    assert plots >= 9, "the chapters' stored plots are embedded in the pages"


@pytest.mark.parametrize("path", sorted(SOLUTIONS.glob("*.ipynb")), ids=lambda p: p.stem)
def test_the_solution_check_is_not_vacuous(path):
    assert web.solution_lines(notebook.read(path)), f"{path.name}: no distinctive solution line to search for"


def test_a_page_with_a_solution_or_a_broken_link_is_caught(tmp_path):
    from nbconvert import HTMLExporter

    web.build_site(SOLUTIONS, ROOT / "notebooks", tmp_path, log=lambda *_: None)
    page = tmp_path / "04_three_kernels_to_one.html"
    raw, _ = HTMLExporter(template_name="lab").from_notebook_node(notebook.read(SOLUTIONS / page.name.replace(".html", ".ipynb")))
    page.write_text(raw.replace("</body>", '<a href="missing.html">x</a><img src="gone.png"></body>'))
    problems = web.check_site(tmp_path, SOLUTIONS)
    assert any("shows a line of the solution" in p for p in problems)
    assert any("'missing.html'" in p for p in problems) and any("'gone.png'" in p for p in problems)


def test_widgets_become_their_text_fallback():
    out = nbformat.v4.new_output("display_data", data={execute.WIDGET_VIEW: {"model_id": "x"}, "text/plain": "step 1 of 6"})
    assert web._static(out)["data"] == {"text/plain": "step 1 of 6"}
