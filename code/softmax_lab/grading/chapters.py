"""The chapters a submission can belong to, how a submission is matched to one, and the grafted notebook.

A chapter is read from its solution notebook (``solutions/NN_slug.ipynb``): its exercises (cells tagged
``exercise:<id>``, each followed by its ``check:<id>`` cell) and its free-text questions (``question:<id>``,
the ``answer:<id>`` cell after it, and the ``rubric:<id>`` cell). Points come from the exercise registry
(``softmax_lab.course.registry``), never from the notebook.

Grafting: the notebook the sandbox runs, made of the solution notebook's code cells with the exercise cells'
sources replaced by the learner's. Setup, demonstrations and the checks (with the outputs nbval compares) stay
the solution's, so a learner who edits or deletes a check cell changes nothing. What the learner must not read
is not in it: every markdown cell is emptied (prompts, model answers, rubrics) and only compared outputs are kept.
"""
from __future__ import annotations

import copy
import json
import re
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING

from ..course import registry as _registry
from ..course.notebook import has_solution, question_id, strip_solutions, tag_value

if TYPE_CHECKING:
    import nbformat

CHECK_OUTPUT = "nbval-check-output"
# nbval obeys these comments in a cell's source; a learner's exercise cell must not switch checking off.
_NBVAL_COMMENT = re.compile(r"^(\s*)#\s*(NBVAL_\w+|PYTEST_VALIDATE_IGNORE_OUTPUT)\s*$", re.MULTILINE)
_NBVAL_TAGS = {"nbval-skip", "nbval-ignore-output", "nbval-raises-exception", "raises-exception", CHECK_OUTPUT}


@dataclass
class Exercise:
    id: str
    points: int        # the points its code earns: the registry's, less a hand-graded explanation part
    cell: int          # index in the solution notebook's cells
    check: int | None  # index of its check cell
    blank: str         # the learner version's source (solution region -> raise NotImplementedError)
    normal: int = 0    # seed 002's split (registry ``parts``): points for the normal cases (0: no split) ...
    boundary: int = 0  # ... for the boundary cases ...
    boundary_cases: tuple[str, ...] = ()  # ... which are these case names of its case table (the judge's names,
    #                                       and the check's where its lines name them otherwise)
    check_boundary: tuple[str, ...] = ()  # those of them the solution's check prints as ``PASS  <name>``
    explain: str = ""  # the id of its hand-graded explanation item (explain:<id>), '' when none

    @property
    def split(self) -> bool:
        """True when its code points are split into a normal and a boundary part (registry ``parts``)."""
        return self.normal > 0


@dataclass
class Question:
    id: str
    points: int
    prompt: str
    model_answer: str = ""
    rubric: str = ""


@dataclass
class Chapter:
    chapter: str
    title: str
    path: Path
    nb: nbformat.NotebookNode
    exercises: list[Exercise] = field(default_factory=list)
    questions: list[Question] = field(default_factory=list)

    @property
    def max_points(self) -> int:
        return sum(e.points for e in self.exercises)

    def label(self) -> str:
        return f"chapter {self.chapter} ({self.title})" if self.title else f"chapter {self.chapter}"


def _points(registry: _registry.Registry, ident: str, path: Path) -> int:
    item = registry.exercise(ident)
    points = item.code_points if item is not None else registry.points(ident)
    if points is None:
        raise _registry.RegistryError(f"{path.name}: {ident} is not in the exercise registry "
                                      "(softmax_lab/course/exercises/chNN.toml, or --registry DIR)")
    return points


def load_chapter(path: Path, registry: _registry.Registry | None = None) -> Chapter:
    import nbformat  # here, not at the top: it takes a second to load (check --help must not wait)

    registry = registry or _registry.load()
    nb = nbformat.read(str(path), as_version=4)
    meta = nb.metadata.get("softmax_lab", {})
    chapter = str(meta.get("chapter") or path.name.split("_")[0])
    ch = Chapter(chapter, str(meta.get("title", "")), path, nb)
    rubrics = {tag_value(c, "rubric:"): c.source for c in nb.cells if tag_value(c, "rubric:") is not None}
    for k, cell in enumerate(nb.cells):
        ex = tag_value(cell, "exercise:")
        if ex is not None:
            check = next((j for j in range(k + 1, len(nb.cells)) if tag_value(nb.cells[j], "check:") == ex), None)
            blank = strip_solutions(cell.source, "code", ex) if has_solution(cell.source) else cell.source
            declared = registry.exercise(ex)
            split = ()
            if declared is not None and declared.parts:
                passed = _passed_names(nb.cells[check]) if check is not None else set()
                split = (declared.part("normal"), declared.part("boundary"), declared.boundary,
                         tuple(n for n in declared.boundary if n in passed), declared.explain_id or "")
            ch.exercises.append(Exercise(ex, _points(registry, ex, path), k, check, blank, *split))
        q = question_id(cell)
        if q is not None:
            answer = next((c.source for c in nb.cells if tag_value(c, "answer:") == q), "")
            ch.questions.append(Question(q, _points(registry, q, path), cell.source, answer, rubrics.get(q, "")))
    return ch


def _passed_names(cell) -> set[str]:
    """The case names a solution's check cell printed as ``PASS  <name>`` (its stored stdout)."""
    text = "".join(o.get("text", "") for o in cell.get("outputs", []) if o.get("name") == "stdout")
    return {ln[len("PASS  "):].strip() for ln in text.splitlines() if ln.startswith("PASS  ")}


def load_chapters(solutions: Path, registry: _registry.Registry | None = None) -> dict[str, Chapter]:
    """Every solution notebook in ``solutions`` that has exercises or questions, by chapter number; points from
    ``registry`` (default: the course's)."""
    registry = registry or _registry.load()
    chapters: dict[str, Chapter] = {}
    for path in sorted(Path(solutions).glob("*.ipynb")):
        ch = load_chapter(path, registry)
        if ch.exercises or ch.questions:
            if ch.chapter in chapters:
                raise ValueError(f"{path.name} and {chapters[ch.chapter].path.name} both say chapter {ch.chapter}")
            chapters[ch.chapter] = ch
    return chapters


# ------------------------------------------------------------------------------------------- submissions


class InvalidNotebook(Exception):
    """The submission is not a readable notebook (the message says why, in plain words)."""


MAX_NOTEBOOK_BYTES = 20 * 2**20
MAX_CELLS = 2000
DAMAGED = "the file is damaged: re-download it from Jupyter, File > Download"
MAX_DEPTH = 64  # nbformat validates recursively; a real notebook is about 8 levels deep


def _depth(data) -> int:
    """How deeply lists and objects nest in parsed JSON (without recursion)."""
    deepest, todo = 0, [(data, 1)]
    while todo:
        value, d = todo.pop()
        if isinstance(value, (dict, list)):
            deepest = max(deepest, d)
            if deepest > MAX_DEPTH:
                return deepest
            todo.extend((v, d + 1) for v in (value.values() if isinstance(value, dict) else value))
    return deepest


def read_submission(path: Path) -> nbformat.NotebookNode:
    """The submission as a notebook, or InvalidNotebook saying why (size and cell count are checked first)."""
    from .streams import read_regular

    try:
        size = Path(path).lstat().st_size
    except OSError as err:
        raise InvalidNotebook(f"cannot read the file: {err.strerror or err}") from None
    if size > MAX_NOTEBOOK_BYTES:
        raise InvalidNotebook(f"the notebook is {size / 2**20:.0f} MB, more than the grader's limit of "
                              f"{MAX_NOTEBOOK_BYTES // 2**20} MB "
                              "(clear the outputs: Edit > Clear Outputs of All Cells)")
    try:  # a regular file only (no FIFO, device or link: they could block or change under the grader), capped
        text = read_regular(path, MAX_NOTEBOOK_BYTES).decode("utf-8")
    except UnicodeDecodeError:
        raise InvalidNotebook("not a notebook: the file is not UTF-8 text") from None
    except OSError as err:
        raise InvalidNotebook(f"cannot read the file: {err.strerror or err} "
                              "(hand in the notebook file itself)") from None
    try:
        data = json.loads(text)
    except json.JSONDecodeError as err:
        what = err.msg[0].lower() + err.msg[1:].removesuffix(" at")  # "Unterminated string starting at": json's
        raise InvalidNotebook(f"invalid JSON: {what} at line {err.lineno}, column {err.colno} "
                              f"({DAMAGED})") from None
    except RecursionError:
        raise InvalidNotebook("not a notebook: its JSON is nested too deep (a notebook is a few levels deep; "
                              "re-download it from Jupyter, File > Download)") from None
    if not isinstance(data, dict) or not isinstance(data.get("cells"), list):
        raise InvalidNotebook("valid JSON, but not a Jupyter notebook (no list of cells)")
    if len(data["cells"]) > MAX_CELLS:
        raise InvalidNotebook(f"the notebook has {len(data['cells'])} cells, "
                              f"more than the grader's limit of {MAX_CELLS}")
    if _depth(data) > MAX_DEPTH:
        raise InvalidNotebook(f"not a notebook: its JSON is nested more than {MAX_DEPTH} levels deep (a notebook "
                              "is a few levels deep; re-download it from Jupyter, File > Download)")
    import nbformat

    try:
        return nbformat.reads(text, as_version=4)
    except RecursionError:
        raise InvalidNotebook("not a notebook: its JSON is nested too deep") from None
    except Exception as err:
        raise InvalidNotebook(f"not a readable notebook: {type(err).__name__}: {str(err)[:200]}") from None


def _cell_tags(cell) -> list[str]:
    tags = cell.get("metadata", {}).get("tags", [])
    return [t for t in tags if isinstance(t, str)] if isinstance(tags, list) else []


def _tagged(nb, prefix: str) -> dict[str, list]:
    found: dict[str, list] = {}
    for cell in nb.get("cells", []):
        for t in _cell_tags(cell):
            if t.startswith(prefix):
                found.setdefault(t[len(prefix):], []).append(cell)
    return found


def match_chapter(nb, path: Path, chapters: dict[str, Chapter]) -> tuple[Chapter | None, str]:
    """The chapter of a submission and a note on how it was matched ('' when by metadata, as expected).

    Order: the notebook metadata ``softmax_lab.chapter``; when that is missing, unknown, or contradicted by
    the exercise cells (no exercise id of that chapter, some of another one), the exercise ids; last, the
    file name's ``NN_`` prefix.
    """
    ids = set(_tagged(nb, "exercise:")) if nb is not None else set()
    by_ids = {k: len(ids & {e.id for e in ch.exercises}) for k, ch in chapters.items()}
    best = max(by_ids, key=lambda k: by_ids[k], default=None)
    meta = nb.metadata.get("softmax_lab", {}) if nb is not None else {}
    claimed = str(meta.get("chapter", "")) if isinstance(meta, dict) else ""
    if claimed in chapters:
        mine = by_ids[claimed]
        if mine == 0 and best is not None and by_ids[best] > 0:
            return chapters[best], (f"the notebook metadata says chapter {claimed}, but its exercise cells are "
                                    f"those of chapter {best}: graded as chapter {best}")
        return chapters[claimed], ""
    why = (f"the notebook metadata names chapter {claimed!r}, which the course does not have" if claimed
           else "the notebook has no softmax_lab.chapter metadata")
    if best is not None and by_ids[best] > 0:
        return chapters[best], f"{why}: matched to chapter {best} by its exercise ids"
    prefix = Path(path).name.split("_")[0]
    if prefix in chapters:
        return chapters[prefix], f"{why}: matched to chapter {prefix} by its file name"
    return None, f"{why}, no exercise cell of any chapter, and no chapter number in the file name"


# ------------------------------------------------------------------------------------------------ grafting


@dataclass
class Graft:
    nb: nbformat.NotebookNode
    found: dict[str, str]      # exercise id -> '' (found) or a note (e.g. duplicated cells)
    missing: list[str]         # exercise ids with no cell in the submission


def neutralize_nbval_comments(source: str) -> str:
    """Disarm nbval's comment markers (``# NBVAL_SKIP``, ``## NBVAL_RAISES_EXCEPTION`` ...) in a learner's cell.

    nbval splits the source with ``str.splitlines`` (which also breaks at \\r, \\f, \\u2028 ...) and strips any
    number of ``#``: so do we. (The sandboxed plugin also ignores markers in exercise cells.)"""
    out = []
    for line in source.splitlines(keepends=True):
        stripped = line.strip()
        body = line[: len(line.rstrip("\r\n\x0b\x0c\x1c\x1d\x1e\x85\u2028\u2029"))]
        ending = line[len(body):]
        if stripped.startswith("#"):
            marker = stripped.lstrip("#").strip()
            if marker.upper().startswith(("NBVAL_", "PYTEST_VALIDATE")) or _NBVAL_COMMENT.match(body):
                indent = body[: len(body) - len(body.lstrip())]
                safe = re.sub(r"[^A-Za-z0-9_]", "", marker)[:60]
                line = f"{indent}# ({safe} ignored by the grader)" + ending  # a comment nbval does not obey
        out.append(line)
    return "".join(out)


def graft(chapter: Chapter, submission, blank: set[str] = frozenset()) -> Graft:
    """The solution notebook with the submission's exercise cells (by tag) in place of the solution's.

    Exercises in ``blank``, and exercises the submission lacks, get the learner (``NotImplementedError``)
    version, so that later cells still find the names they define.
    """
    import nbformat  # here, not at the top: it takes a second to load (check --help must not wait)

    nb = copy.deepcopy(chapter.nb)
    for cell in nb.cells:  # nothing the sandbox does not need: no prose, no model answers, no rubrics
        if cell.cell_type != "code":
            cell.source = ""
            cell.metadata = nbformat.NotebookNode()
            cell.pop("attachments", None)
        elif CHECK_OUTPUT not in _cell_tags(cell):
            cell.outputs = []
    theirs = _tagged(submission, "exercise:") if submission is not None else {}
    found: dict[str, str] = {}
    missing: list[str] = []
    for ex in chapter.exercises:
        cell = nb.cells[ex.cell]
        cells = [c for c in theirs.get(ex.id, []) if c.get("cell_type") == "code"]
        if not cells:
            missing.append(ex.id)
            source = ex.blank
        else:
            chosen = cells[-1]
            src = chosen.get("source", "")
            source = "".join(src) if isinstance(src, list) else str(src)
            found[ex.id] = (f"{len(cells)} cells are tagged exercise:{ex.id}; the last one was graded"
                            if len(cells) > 1 else "")
        if ex.id in blank:
            source = ex.blank
        cell.source = neutralize_nbval_comments(source)
        # The exercise cell's own output is never compared, and it may not skip itself or expect errors.
        cell.metadata["tags"] = [t for t in _cell_tags(cell) if t not in _NBVAL_TAGS]
        cell.outputs = []
        cell.execution_count = None
    return Graft(nb, found, missing)


ANSWER_LEAD = "**Your answer:**"  # the line every answer cell of the course starts with (its template)


def without_lead(answer: str) -> str:
    """An answer without the template's lead line: the form answers are compared and kept in (sheets written
    before the lead was taken out still match their answers)."""
    answer = answer.strip()
    return answer[len(ANSWER_LEAD):].strip() if answer.startswith(ANSWER_LEAD) else answer


def answers(chapter: Chapter, submission) -> dict[str, str]:
    """The learner's free-text answers, by question id ('' when absent or unchanged from the template)."""
    theirs = _tagged(submission, "answer:") if submission is not None else {}
    out = {}
    for q in chapter.questions:
        cells = theirs.get(q.id, [])
        text = ""
        if cells:
            src = cells[-1].get("source", "")
            text = ("".join(src) if isinstance(src, list) else str(src)).strip()
        try:
            template = strip_solutions(q.model_answer, "markdown").strip()
        except Exception:
            template = ""
        text = without_lead(text)  # the template's lead line, then theirs
        if text in ("", "YOUR ANSWER HERE", without_lead(template)):
            text = ""
        # kept as written, but no control or bidi characters: the answer goes into CSV and Markdown sheets
        out[q.id] = "\n".join("".join(ch if ch.isprintable() or ch == "\t" else "?" for ch in ln)
                               for ln in text.splitlines())
    return out
