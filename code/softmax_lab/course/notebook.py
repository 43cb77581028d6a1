"""The course's notebook format: what a solution notebook's tags and markers mean (docs/authoring.md).

Used by the build (learner notebooks), the grader (grafting, blank exercises), the nbgrader export and the web
edition. Needs nbformat only (no torch).

* cell tags: ``exercise:<id>`` (an exercise's code cell), ``check:<id>`` (its check, the next cell),
  ``question:<id>`` / ``answer:<id>`` / ``rubric:<id>`` (free-text questions); ``explain:<exercise id>`` (the
  hand-graded explanation part of an exercise with ``parts``: a question whose id is ``explain:<exercise id>``, so
  its answer cell is ``answer:explain:<exercise id>``); ``points:<n>`` while still there
  must equal the registry's points (``softmax_lab.course.registry``);
* solution regions between ``### BEGIN SOLUTION`` and ``### END SOLUTION`` (nbgrader's markers), whose
  ``# HINT:`` lines learners keep;
* notebook metadata ``softmax_lab.chapter`` / ``.title``, the kernel ``softmax-lab``.
"""
from __future__ import annotations

import hashlib
import json
from pathlib import Path

from .registry import EXPLAIN, Registry

BEGIN = "### BEGIN SOLUTION"
END = "### END SOLUTION"
HINT = "# HINT:"
ANSWER_PLACEHOLDER = "YOUR ANSWER HERE"
KERNEL_NAME = "softmax-lab"
KERNELSPEC = {"name": KERNEL_NAME, "display_name": "Softmax Lab (Python 3)", "language": "python"}
NB_VERSION = 4
EDITION_MARKER = "EDITION.json"  # at the root of the class edition (course/release.py)

# Tag prefixes with meaning (see docs/authoring.md).
EXERCISE, CHECK, POINTS, QUESTION, ANSWER, RUBRIC = "exercise:", "check:", "points:", "question:", "answer:", "rubric:"
# Transient cell metadata that nbclient/Jupyter write and that must not reach learners or diffs.
TRANSIENT_METADATA = ("execution", "ExecuteTime")


class BuildError(Exception):
    """A solution notebook breaks the authoring conventions (the message says where and how)."""


def repo_root(start: Path | None = None, learner: bool = False) -> Path:
    """The checkout root: the nearest folder above ``start`` (default: cwd, then this file) holding solutions/.
    With ``learner``, the class edition's root (notebooks/, no solutions/: ``softmax-lab release``) also counts."""
    candidates = [Path.cwd() if start is None else Path(start)]
    if start is None:
        candidates.append(Path(__file__).resolve())
    need = "notebooks" if learner else "solutions"
    for c in candidates:
        for d in [c, *c.resolve().parents]:
            if (d / need).is_dir() and (d / "Makefile").is_file():
                return d
            if (d / EDITION_MARKER).is_file() and (d / "Makefile").is_file():
                raise BuildError(f"{d} is the class edition of the course ({EDITION_MARKER}): it has no solutions/ "
                                 "(this command needs the course's source edition)")
    raise BuildError(f"cannot find the repository root (a folder with {need}/ and Makefile); use --root")


def tags(cell) -> list[str]:
    return list(cell.get("metadata", {}).get("tags", []))


def tag_value(cell, prefix: str) -> str | None:
    """The value of the first tag starting with ``prefix`` (e.g. 'exercise:' -> 'ch04-fused'), or None."""
    for t in tags(cell):
        if t.startswith(prefix):
            return t[len(prefix):]
    return None


def question_id(cell) -> str | None:
    """The id of the free-text item a markdown cell asks: ``question:<id>`` -> id, ``explain:<exercise id>`` ->
    ``explain:<exercise id>`` (an exercise's explanation part), or None."""
    q = tag_value(cell, QUESTION)
    if q is not None:
        return q
    e = tag_value(cell, EXPLAIN)
    return None if e is None else EXPLAIN + e


def question_tag(ident: str) -> str:
    """The tag of the cell that asks question ``ident`` (the inverse of ``question_id``)."""
    return ident if ident.startswith(EXPLAIN) else QUESTION + ident


def has_solution(source: str) -> bool:
    return any(line.strip() == BEGIN for line in source.splitlines())


def strip_solutions(source: str, cell_type: str = "code", exercise: str | None = None) -> str:
    """Replace each solution region of one cell's source.

    Code: the region's ``# HINT:`` lines stay (as written); the rest becomes one
    ``raise NotImplementedError(...)`` at the indentation of the BEGIN marker. Markdown: the hints
    stay and the rest becomes ``YOUR ANSWER HERE``. Raises BuildError on unbalanced markers.
    """
    lines = source.split("\n")
    out: list[str] = []
    i = 0
    while i < len(lines):
        line = lines[i]
        if line.strip() == END:
            raise BuildError(f"'{END}' without '{BEGIN}'")
        if line.strip() != BEGIN:
            out.append(line)
            i += 1
            continue
        indent = line[: len(line) - len(line.lstrip())]
        j = i + 1
        while j < len(lines) and lines[j].strip() != END:
            if lines[j].strip() == BEGIN:
                raise BuildError(f"nested '{BEGIN}'")
            j += 1
        if j == len(lines):
            raise BuildError(f"'{BEGIN}' without '{END}'")
        hints = [ln for ln in lines[i + 1:j] if ln.strip().startswith(HINT)]
        out.extend(hints)
        if cell_type == "code":
            what = f"exercise {exercise}: " if exercise else ""
            out.append(f'{indent}raise NotImplementedError("{what}replace this line with your code")')
        else:
            out.append(f"{indent}{ANSWER_PLACEHOLDER}")
        i = j + 1
    return "\n".join(out)


# ------------------------------------------------------------------------------------------------ notebooks


def _int_tag(cell, prefix: str) -> int | None:
    value = tag_value(cell, prefix)
    return int(value) if value is not None and value.isdigit() else None


def validate(nb, name: str = "notebook", registry: Registry | None = None) -> list[str]:
    """Convention problems in one solution notebook (empty list when fine). With ``registry``, its exercise and
    question cells must be exactly the ones the registry declares for the notebook's chapter."""
    problems = []
    meta = nb.metadata.get("softmax_lab", {})
    if not meta.get("chapter") or not meta.get("title"):
        problems.append(f"{name}: notebook metadata needs softmax_lab.chapter and softmax_lab.title")
    if nb.metadata.get("kernelspec", {}).get("name") != KERNEL_NAME:
        problems.append(f"{name}: kernelspec name must be {KERNEL_NAME!r}")
    cells = nb.cells
    for k, cell in enumerate(cells):
        where = f"{name} cell {k} (id {cell.get('id', '?')})"
        ex = tag_value(cell, EXERCISE)
        q = question_id(cell)
        for kind, ident in (("exercise", ex), ("question", q)):
            if ident is None or tag_value(cell, POINTS) is None:
                continue
            if _int_tag(cell, POINTS) is None:
                problems.append(f"{where}: {kind} {ident}: the tag points:{tag_value(cell, POINTS)} is not a number")
        if ex is not None:
            if cell.cell_type != "code" or not has_solution(cell.source):
                problems.append(f"{where}: exercise {ex} must be a code cell with a solution region")
            nxt = cells[k + 1] if k + 1 < len(cells) else None
            if nxt is None or tag_value(nxt, CHECK) != ex or "nbval-check-output" not in tags(nxt):
                problems.append(f"{where}: the cell after exercise {ex} must be tagged check:{ex} and "
                                "nbval-check-output")
        if q is not None:
            nxt = cells[k + 1] if k + 1 < len(cells) else None
            if nxt is None or tag_value(nxt, ANSWER) != q or nxt.cell_type != "markdown":
                problems.append(f"{where}: the cell after question {q} must be a markdown cell tagged answer:{q}")
            explained = q[len(EXPLAIN):] if q.startswith(EXPLAIN) else None
            if explained is not None and not any(tag_value(c, CHECK) == explained for c in cells[:k]):
                problems.append(f"{where}: the explanation {q} must come after the check cell of {explained}")
        try:
            strip_solutions(cell.source, cell.cell_type)
        except BuildError as err:
            problems.append(f"{where}: {err}")
    if registry is not None:
        problems += against_registry(nb, name, registry)
    return problems


def against_registry(nb, name: str, registry: Registry) -> list[str]:
    """The notebook's ``exercise:``/``question:`` cells against the registry: same ids, same chapter, and a
    ``points:`` tag (while the notebooks still carry them) equal to the registry's points."""
    problems = []
    chapter = str(nb.metadata.get("softmax_lab", {}).get("chapter", ""))
    toml = f"course/exercises/ch{chapter}.toml"
    for kind, prefix, lookup, declared in (
            ("exercise", EXERCISE, registry.exercise, registry.exercises(chapter)),
            ("question", QUESTION, registry.question, registry.questions(chapter))):
        seen = set()
        for k, cell in enumerate(nb.cells):
            ident = tag_value(cell, prefix) if kind == "exercise" else question_id(cell)
            if ident is None:
                continue
            seen.add(ident)
            item = lookup(ident)
            where = f"{name} cell {k}: {kind} {ident}"
            if item is None:
                problems.append(f"{where} is not in the registry: add it to {toml}")
            elif item.chapter != chapter:
                problems.append(f"{where} is declared for chapter {item.chapter} (ch{item.chapter}.toml), "
                                f"but this notebook is chapter {chapter}")
            elif tag_value(cell, POINTS) is not None and _int_tag(cell, POINTS) != item.points:
                problems.append(f"{where}: the tag points:{tag_value(cell, POINTS)} differs from the registry's "
                                f"points = {item.points} ({toml}); the registry counts, fix or drop the tag")
        for item in declared:
            if item.id not in seen:
                tag = prefix + item.id if kind == "exercise" else question_tag(item.id)
                what = f"the explanation part of exercise {item.explains}" if getattr(item, "explains", "") else \
                    f"{kind} {item.id}"
                problems.append(f"{name}: {toml} declares {what}, but no cell is tagged {tag}")
    return problems


def exercise_ids(nb) -> list[str]:
    return [tag_value(c, EXERCISE) for c in nb.cells if tag_value(c, EXERCISE) is not None]


def sources_sha(nb) -> str:
    """Fingerprint of a notebook's cells (type and source): what a learner's edit changes."""
    cells = [[c.get("cell_type"), c.get("source", "")] for c in nb.get("cells", [])]
    return hashlib.sha256(json.dumps(cells, ensure_ascii=False).encode("utf-8")).hexdigest()


def edited_by_hand(text: str) -> bool:
    """True when a learner notebook's cells are not the ones the build wrote (or it does not parse)."""
    import nbformat  # here, not at the top: it takes a second to load (check --help must not wait)

    try:
        nb = nbformat.reads(text, as_version=NB_VERSION)
    except Exception:
        return True
    recorded = nb.metadata.get("softmax_lab", {}).get("learner_sha")
    return recorded != sources_sha(nb)


def dumps(nb) -> str:
    """The exact text written for a notebook (stable: nbformat's sorted keys and indent, final newline)."""
    import nbformat

    text = nbformat.writes(nb, version=NB_VERSION)
    return text if text.endswith("\n") else text + "\n"


def read(path: Path):
    import nbformat

    return nbformat.read(str(path), as_version=NB_VERSION)


def solution_paths(solutions: Path, only: list[str] | None = None) -> list[Path]:
    paths = sorted(p for p in solutions.glob("*.ipynb"))
    if only:
        wanted = {Path(o).name for o in only}
        missing = wanted - {p.name for p in paths}
        if missing:
            raise BuildError(f"not in {solutions}: {', '.join(sorted(missing))}")
        paths = [p for p in paths if p.name in wanted]
    return paths


