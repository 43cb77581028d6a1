"""`softmax-lab site`: the web edition, a static site readable without installing anything.

    softmax-lab site                 # solutions/ -> site/ (index.html, one page per chapter, learner downloads)
    softmax-lab site --out /tmp/web  # somewhere else

A page is the solution notebook with its stored outputs, *minus* every answer: exercise cells as learners get them
(the solution region replaced, their outputs dropped), model answers to questions replaced, rubric cells dropped.
Demonstration outputs (tables, plots, check verdicts) stay. Widgets show their text fallback, since a static
page has no kernel. Each page links to the learner notebook and says how to run it. ``check_site`` verifies
every local link and picture and that no solution line appears anywhere.
"""
from __future__ import annotations

import argparse
import html
import re
import shutil
import sys
from html.parser import HTMLParser
from pathlib import Path

import nbformat

from .course import build, execute
from .course import notebook as fmt

WIDGET_VIEW = execute.WIDGET_VIEW


def web_notebook(nb, learner_name: str):
    """The web version of one solution notebook (a new object)."""
    out = build.learner_notebook(nb)  # answers stripped, outputs cleared, rubrics dropped, bootstrap first
    stored = {c.get("id"): c for c in nb.cells}
    cells = []
    for cell in out.cells:
        if cell.get("id") == build.BOOTSTRAP_ID:
            continue
        source_cell = stored.get(cell.get("id"))
        keep_outputs = (cell.cell_type == "code" and source_cell is not None
                        and fmt.tag_value(cell, fmt.EXERCISE) is None and not fmt.has_solution(source_cell.source))
        if keep_outputs:
            cell.outputs = [_static(o) for o in source_cell.get("outputs", [])]
            cell.execution_count = source_cell.get("execution_count")
        cells.append(cell)
    title = nb.metadata.get("softmax_lab", {}).get("title", learner_name)
    run = nbformat.v4.new_markdown_cell(
        f"*Web edition of chapter {nb.metadata.get('softmax_lab', {}).get('chapter', '?')} ({html.escape(title)}): "
        "outputs as recorded, answers removed.* "
        f"To do the exercises, [download the notebook](notebooks/{learner_name}) and run it with `make lab` "
        "(README, Quick start), or upload it to a hosted notebook service: its first cell installs the course. "
        "[All chapters](index.html).")
    run.id = "web-edition-note"
    out.cells = [run] + cells
    out.metadata.pop("widgets", None)
    return out


def _static(output):
    """A widget view becomes its text fallback (a static page has no kernel to draw it)."""
    data = output.get("data")
    if data and WIDGET_VIEW in data:
        output = nbformat.from_dict(dict(output))
        output["data"] = {k: v for k, v in data.items() if k != WIDGET_VIEW} or {"text/plain": "(interactive widget)"}
    return output


def build_site(solutions: Path, notebooks: Path, out: Path, log=print) -> list[Path]:
    """Write the site into ``out`` (replacing it). Returns the chapter pages."""
    from nbconvert import HTMLExporter

    exporter = HTMLExporter(template_name="lab")
    exporter.exclude_input_prompt = True
    exporter.exclude_output_prompt = True
    if out.exists():
        shutil.rmtree(out)
    (out / "notebooks").mkdir(parents=True)
    pages, rows = [], []
    for path in fmt.solution_paths(solutions):
        nb = fmt.read(path)
        learner = notebooks / path.name
        if not learner.exists():
            raise fmt.BuildError(f"notebooks/{path.name} is missing: run `make notebooks` first")
        shutil.copyfile(learner, out / "notebooks" / path.name)
        body, _ = exporter.from_notebook_node(web_notebook(nb, path.name))
        page = out / f"{path.stem}.html"
        page.write_text(body, encoding="utf-8")
        pages.append(page)
        meta = nb.metadata.get("softmax_lab", {})
        rows.append(f'<li><a href="{page.name}">{html.escape(meta.get("chapter", ""))} · '
                    f'{html.escape(meta.get("title", path.stem))}</a> '
                    f'(<a href="notebooks/{path.name}">notebook</a>)</li>')
        log(f"wrote {page}")
    (out / "index.html").write_text(
        "<!doctype html>\n<html lang=\"en\"><head><meta charset=\"utf-8\"><title>Softmax Lab</title></head><body>\n"
        "<h1>Softmax Lab</h1>\n<p>Fast, correct GPU softmax kernels in Triton: the web edition (outputs as recorded "
        "on the course's machines, answers removed). To do the exercises, download a notebook and run it with "
        "<code>make lab</code>, or on a hosted notebook service.</p>\n<ol>\n" + "\n".join(rows) + "\n</ol>\n</body></html>\n",
        encoding="utf-8")
    return pages


class _Page(HTMLParser):
    def __init__(self):
        super().__init__(convert_charrefs=True)
        self.links: list[str] = []
        self.text: list[str] = []
        self._skip = 0

    def handle_starttag(self, tag, attrs):
        attrs = dict(attrs)
        if tag in ("script", "style"):
            self._skip += 1
        for key in ("href", "src"):
            if attrs.get(key):
                self.links.append(attrs[key])

    def handle_endtag(self, tag):
        if tag in ("script", "style") and self._skip:
            self._skip -= 1

    def handle_data(self, data):
        if not self._skip:
            self.text.append(data)


def solution_lines(nb) -> set[str]:
    """The distinctive lines of every answer in a solution notebook (regions, rubrics), as the web must not show."""
    lines = set()
    learner_text = "\n".join(c.source for c in build.learner_notebook(nb).cells)
    for cell in nb.cells:
        if fmt.tag_value(cell, fmt.RUBRIC) is not None:
            region = cell.source.splitlines()
        elif fmt.has_solution(cell.source):
            region, inside = [], False
            for line in cell.source.splitlines():
                if line.strip() in (fmt.BEGIN, fmt.END):
                    inside = line.strip() == fmt.BEGIN
                elif inside and not line.strip().startswith(fmt.HINT):
                    region.append(line)
        else:
            continue
        for line in region:
            text = line.strip()
            if len(text) >= 16 and text not in learner_text:  # short or shared lines (`return y`) say nothing
                lines.add(text)
    return lines


def check_site(out: Path, solutions: Path) -> list[str]:
    """Problems of a built site: broken local links or pictures, empty pages, any solution line shown."""
    problems = []
    pages = sorted(out.glob("*.html"))
    if not pages:
        return [f"{out}: no pages"]
    for page in pages:
        parser = _Page()
        parser.feed(page.read_text(encoding="utf-8"))
        for link in parser.links:
            if re.match(r"^(https?:|mailto:|data:|#|javascript:)", link):
                continue
            target = (page.parent / link.split("#")[0].split("?")[0]).resolve()
            if not target.exists():
                problems.append(f"{page.name}: broken link or picture {link!r}")
        text = " ".join(" ".join(parser.text).split())
        if page.name != "index.html":
            sol = solutions / f"{page.stem}.ipynb"
            if not sol.exists():
                problems.append(f"{page.name}: no solutions/{sol.name}")
                continue
            if len(text) < 500:
                problems.append(f"{page.name}: almost empty ({len(text)} characters of text)")
            for line in solution_lines(fmt.read(sol)):
                if " ".join(line.split()) in text:
                    problems.append(f"{page.name}: shows a line of the solution: {line[:80]!r}")
    return problems


def add_arguments(ap: argparse.ArgumentParser) -> None:
    ap.add_argument("--out", type=Path, default=None, help="where to write the site (default ROOT/site)")
    ap.add_argument("--root", type=Path, default=None, help="the course checkout (default: found from cwd)")


def run(args: argparse.Namespace) -> int:
    try:
        root = args.root or fmt.repo_root()
        out = args.out or root / "site"
        build_site(root / "solutions", root / "notebooks", out, log=lambda *_: None)
    except fmt.BuildError as err:
        print(f"softmax-lab site: {err}", file=sys.stderr)
        return 2
    problems = check_site(out, root / "solutions")
    for p in problems:
        print(f"softmax-lab site: {p}", file=sys.stderr)
    print(f"wrote {out / 'index.html'} ({len(list(out.glob('*.html'))) - 1} chapters)")
    return 1 if problems else 0
