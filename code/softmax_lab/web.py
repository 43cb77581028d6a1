"""`softmax-lab site`: the web edition, a book of the chapters readable in any browser, with no network.

    softmax-lab site                 # solutions/ -> site/ (index.html, one page per chapter, search, downloads)
    softmax-lab site --out /tmp/web  # somewhere else

Built with Sphinx, MyST-NB and the Sphinx Book Theme: the stack of Jupyter Book 1, driven directly (docs/web.md says
why). A page is the solution notebook with its stored outputs, *minus* every answer: exercise cells as learners get
them (the solution region replaced, their outputs dropped), model answers to questions replaced, rubric cells dropped.
Demonstration outputs (tables, plots, check verdicts) stay; a widget shows its static picture (or its text), since a
static page has no kernel; paths of the machine that recorded an output are cut to the part that means something.
Each page links to its learner notebook and to a hosted notebook service. MathJax is served from the site itself.
``check_site`` verifies every local link and picture, that nothing loads from the network, and that no solution line
or build path appears anywhere.
"""
from __future__ import annotations

import argparse
import copy
import html
import importlib.util
import io
import re
import shutil
import sys
import tempfile
from html.parser import HTMLParser
from pathlib import Path

import nbformat

from .course import build, execute
from .course import notebook as fmt

WIDGET_VIEW = execute.WIDGET_VIEW
REPOSITORY = "softmax-lab/softmax-lab"  # on GitHub: what the notebooks' bootstrap cell installs from
HOSTED = "https://colab.research.google.com/github/{repo}/blob/main/notebooks/{name}"
TITLE = "Softmax Lab"

# Absolute paths of the machine that recorded an output, and what the web edition shows instead: a virtual
# environment's path from `.venv/` on, a home folder as `~/`, a scratch or build folder's file by its name.
BUILD_PATHS = [(re.compile(r"(?<![\w.~/-])(?:/[\w.+-]+)+/(?=\.venv/)"), ""),
               (re.compile(r"(?<![\w.~/-])/(?:root|home/[\w.-]+|Users/[\w.-]+)/"), "~/"),
               (re.compile(r"(?<![\w.~/-])/(?:tmp|work|builds?)(?:/[\w.+-]+)*/(?=[\w.+-])"), "")]
SHOWN_BUILD_PATH = re.compile(r"(?<![\w.~/-])/(?:root|tmp|work|home|Users)/[\w.+-]")


def scrub(text: str) -> str:
    """``text`` without the recording machine's folders: `/work/main/.venv/share` -> `.venv/share`, `/root/out` ->
    `~/out`."""
    for pattern, shown in BUILD_PATHS:
        text = pattern.sub(shown, text)
    return text


def _scrub_output(output):
    if "text" in output:
        output["text"] = scrub(output["text"] if isinstance(output["text"], str) else "".join(output["text"]))
    for key, value in (output.get("data") or {}).items():
        if key.startswith("text/"):
            output["data"][key] = scrub(value if isinstance(value, str) else "".join(value))
    if "traceback" in output:
        output["traceback"] = [scrub(line) for line in output["traceback"]]
    return output


def web_notebook(nb, learner_name: str):
    """The web version of one solution notebook (a new object)."""
    out = build.learner_notebook(nb)  # answers stripped, outputs cleared, rubrics dropped, bootstrap first
    stored = {c.get("id"): c for c in nb.cells}
    answers = solution_lines(nb)  # an output that quotes one (a race report naming your code's lines) is left out
    cells = []
    for cell in out.cells:
        if cell.get("id") == build.BOOTSTRAP_ID:
            continue
        source_cell = stored.get(cell.get("id"))
        keep_outputs = (cell.cell_type == "code" and source_cell is not None
                        and fmt.tag_value(cell, fmt.EXERCISE) is None and not fmt.has_solution(source_cell.source))
        if keep_outputs:
            cell.outputs = [_scrub_output(_static(copy.deepcopy(o))) for o in source_cell.get("outputs", [])]
            if any(line in _output_text(o) for o in cell.outputs for line in answers):
                cell.outputs = [nbformat.v4.new_output("stream", name="stdout", text=QUOTES_AN_ANSWER)]
            cell.execution_count = source_cell.get("execution_count")
        cells.append(cell)
    meta = nb.metadata.get("softmax_lab", {})
    title = meta.get("title", learner_name)
    run = nbformat.v4.new_markdown_cell(
        f"*Web edition of chapter {meta.get('chapter', '?')} ({html.escape(title)}): outputs as recorded, answers "
        "removed.* To do the exercises, "
        f"{{download}}`download the notebook <_notebooks/{learner_name}>` and run it with `make lab` (README, Quick "
        f"start), or [open it on a hosted notebook service]({HOSTED.format(repo=REPOSITORY, name=learner_name)}): "
        "its first cell installs the course there.")
    run.id = "web-edition-note"
    # The note goes under the chapter's title (the first heading is the page's title).
    at = next((i + 1 for i, c in enumerate(cells) if c.cell_type == "markdown" and c.source.lstrip().startswith("# ")),
              0)
    out.cells = cells[:at] + [run] + cells[at:]
    out.metadata.pop("widgets", None)
    return out


QUOTES_AN_ANSWER = ("(Not shown on the web: this output quotes lines of an exercise's answer, here the solution's. "
                    "Run the notebook to see it for your own code.)\n")


def _output_text(output) -> str:
    text = output.get("text", "")
    data = output.get("data", {}).get("text/plain", "")
    return "".join(text) + "".join(data)


def _static(output):
    """A widget view becomes its static picture or text (a static page has no kernel to draw it)."""
    data = output.get("data")
    if data and WIDGET_VIEW in data:
        output = nbformat.from_dict(dict(output))
        output["data"] = {k: v for k, v in data.items() if k != WIDGET_VIEW} or {"text/plain": "(interactive widget)"}
    return output


def mathjax_folder() -> Path:
    """MathJax 3 as the sphinx-mathjax-offline package ships it (the site serves it itself: no CDN)."""
    spec = importlib.util.find_spec("sphinx-mathjax-offline")
    if spec is None or not spec.submodule_search_locations:
        raise fmt.BuildError("the web edition needs sphinx-mathjax-offline (MathJax served locally): "
                             "make test installs it (requirements/test.txt)")
    return Path(next(iter(spec.submodule_search_locations))) / "static" / "mathjax"


# What MathJax's tex-chtml component loads: itself, its fonts, TeX packages on first use, the menu (not the speech
# rules, which only the menu's explorer asks for).
MATHJAX_PARTS = ["tex-chtml.js", "output/chtml/fonts/woff-v2", "input/tex/extensions", "ui", "a11y"]

CONF = f"""# Written by `softmax-lab site` (code/softmax_lab/web.py): the Sphinx configuration of the web edition.
project = {TITLE!r}
html_title = {TITLE!r}
extensions = ["myst_nb"]
nb_execution_mode = "off"  # outputs as recorded in solutions/
nb_merge_streams = True
myst_enable_extensions = ["dollarmath", "amsmath"]
html_theme = "sphinx_book_theme"
html_theme_options = {{"show_toc_level": 2, "use_download_button": False, "use_fullscreen_button": False,
                      "navigation_with_keys": True}}
html_static_path = ["_static"]
html_js_files = ["softmax-lab.js"]
html_css_files = ["softmax-lab.css"]
mathjax_path = "mathjax/tex-chtml.js"  # from the site itself
html_copy_source = False
html_show_sourcelink = False
html_show_sphinx = False
html_last_updated_fmt = None
exclude_patterns = ["_notebooks", "_build"]
suppress_warnings = ["mystnb.unknown_mime_type", "misc.highlighting_failure"]
"""


# The Sphinx Book Theme 1.4 and pydata-sphinx-theme 0.20 both attach their sidebar handlers to the *first*
# `.primary-toggle` / `.secondary-toggle` of the page, which is the (hidden) header's: the buttons a reader sees did
# nothing, so on a phone the chapter list could not be opened. Pass their clicks on.
TOGGLES_JS = """\
// Written by `softmax-lab site`: the visible sidebar buttons pass their clicks to the theme's first ones.
document.addEventListener("DOMContentLoaded", () => {
  for (const kind of ["primary-toggle", "secondary-toggle"]) {
    const [handled, ...shown] = document.querySelectorAll("." + kind);
    for (const button of shown) {
      button.addEventListener("click", (event) => {
        event.preventDefault();
        event.stopImmediatePropagation();
        handled.click();
      }, true);
    }
  }
});
"""


# pydata-sphinx-theme's own header row, empty under the book theme but for a second search box.
# Inline code may wrap (Sphinx keeps each word of it on one line: span.pre is nowrap), anywhere in a long path or
# call, so that no page scrolls sideways on a phone.
EXTRA_CSS = ("/* Written by `softmax-lab site` */\n.bd-header { display: none; }\n"
             "code.literal, code.literal span.pre { white-space: pre-wrap; overflow-wrap: anywhere; }\n")


def _index(chapters: list[tuple[str, str, str]]) -> str:
    rows = "\n".join(stem for stem, _, _ in chapters)
    return (f"# {TITLE}\n\nFast, correct GPU softmax kernels in Triton: the web edition. Every chapter with its "
            "outputs as recorded on the course's machines, answers removed. To do the exercises, download a chapter's "
            "notebook (a link at the top of each page) and run it with `make lab`, or open it on a hosted notebook "
            "service.\n\n"
            + "\n".join(f"- [{html.escape(ch)} · {html.escape(title)}]({stem}.ipynb)" for stem, ch, title in chapters)
            + f"\n\n```{{toctree}}\n:hidden:\n:caption: Chapters\n\n{rows}\n```\n")


def build_site(solutions: Path, notebooks: Path, out: Path, log=print) -> list[Path]:
    """Write the site into ``out`` (replacing it). Returns the chapter pages."""
    from sphinx.application import Sphinx

    paths = fmt.solution_paths(solutions)
    with tempfile.TemporaryDirectory(prefix="softmax-lab-site-") as tmp:
        src = Path(tmp) / "src"
        (src / "_notebooks").mkdir(parents=True)
        chapters = []
        for path in paths:
            learner = notebooks / path.name
            if not learner.exists():
                raise fmt.BuildError(f"notebooks/{path.name} is missing: run `make notebooks` first")
            shutil.copyfile(learner, src / "_notebooks" / path.name)
            nb = fmt.read(path)
            nbformat.write(web_notebook(nb, path.name), src / path.name)
            meta = nb.metadata.get("softmax_lab", {})
            chapters.append((path.stem, meta.get("chapter", ""), meta.get("title", path.stem)))
        (src / "index.md").write_text(_index(chapters), encoding="utf-8")
        (src / "conf.py").write_text(CONF, encoding="utf-8")
        (src / "_static").mkdir()
        (src / "_static" / "softmax-lab.js").write_text(TOGGLES_JS, encoding="utf-8")
        (src / "_static" / "softmax-lab.css").write_text(EXTRA_CSS, encoding="utf-8")
        mathjax = mathjax_folder()
        for part in MATHJAX_PARTS:
            target = src / "_static" / "mathjax" / part
            target.parent.mkdir(parents=True, exist_ok=True)
            (shutil.copytree if (mathjax / part).is_dir() else shutil.copyfile)(mathjax / part, target)
        if out.exists():
            shutil.rmtree(out)
        warnings = io.StringIO()
        app = Sphinx(str(src), str(src), str(out), str(Path(tmp) / "doctrees"), "html", status=None,
                     warning=warnings, freshenv=True, verbosity=0)
        app.build()
        if app.statuscode:
            raise fmt.BuildError(f"Sphinx failed:\n{warnings.getvalue()}")
        for line in warnings.getvalue().splitlines():
            log(f"sphinx: {scrub(line.replace(str(src) + '/', ''))}")
    pages = [out / f"{stem}.html" for stem, _, _ in chapters]
    for page in pages:
        log(f"wrote {page}")
    return pages


class _Page(HTMLParser):
    def __init__(self):
        super().__init__(convert_charrefs=True)
        self.links: list[str] = []
        self.loads: list[str] = []  # what the browser fetches by itself: scripts, styles, pictures, frames
        self.text: list[str] = []
        self._skip = 0

    def handle_starttag(self, tag, attrs):
        attrs = dict(attrs)
        if tag in ("script", "style"):
            self._skip += 1
        for key in ("href", "src"):
            if attrs.get(key):
                self.links.append(attrs[key])
                if tag in ("script", "img", "iframe", "source", "audio", "video") or (
                        tag == "link" and attrs.get("rel") not in ("canonical", "alternate")):
                    self.loads.append(attrs[key])

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
    """Problems of a built site: broken local links or pictures, anything loaded from the network, empty chapter
    pages, a build path shown, any solution line shown."""
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
        for load in parser.loads:
            if re.match(r"^(https?:)?//", load):
                problems.append(f"{page.name}: loads {load!r} from the network (the site must work offline)")
        text = " ".join(" ".join(parser.text).split())
        shown = SHOWN_BUILD_PATH.search(text)
        if shown:
            problems.append(f"{page.name}: shows a path of the build machine: "
                            f"{text[shown.start():shown.start() + 60]!r}")
        sol = solutions / f"{page.stem}.ipynb"
        if not sol.exists():
            if not re.match(r"^\d\d_", page.stem):
                continue  # index, search, genindex
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
    except ImportError as err:
        print(f"softmax-lab site: the web edition needs Sphinx, MyST-NB and the Sphinx Book Theme ({err}): "
              "`make site` installs them", file=sys.stderr)
        return 2
    problems = check_site(out, root / "solutions")
    for p in problems:
        print(f"softmax-lab site: {p}", file=sys.stderr)
    print(f"wrote {out / 'index.html'} ({len(list(out.glob('[0-9][0-9]_*.html')))} chapters)")
    return 1 if problems else 0
