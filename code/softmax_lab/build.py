"""`softmax-lab build`: generate the learner notebooks in notebooks/ from the solution notebooks in solutions/.

    softmax-lab build                  # solutions/*.ipynb -> notebooks/*.ipynb (only files that changed)
    softmax-lab build --check          # exit 1 if notebooks/ is stale (CI and tests use this)
    softmax-lab build --force          # also overwrite learner notebooks that were edited by hand
    softmax-lab build --execute        # first re-run solutions/ in place (kernel softmax-lab), then build
    softmax-lab build 04_three_kernels_to_one.ipynb   # just these chapters (file names or paths)

What a learner notebook is (docs/authoring.md has the conventions):

* every ``### BEGIN SOLUTION`` .. ``### END SOLUTION`` region becomes its ``# HINT:`` lines plus
  ``raise NotImplementedError(...)`` at the marker's indentation (in markdown: ``YOUR ANSWER HERE``);
* cells tagged ``rubric:<id>`` are dropped (they are for instructors);
* outputs and execution counts are cleared; cell ids, tags, metadata and notebook metadata are kept;
* a first cell installs the course when ``softmax_lab`` is missing (hosted notebooks; a no-op under ``make lab``);
* ``softmax_lab.learner_sha`` in the notebook metadata fingerprints the generated cells, so the build can tell a
  notebook it wrote from one somebody edited: it never overwrites an edited one without ``--force``.

Learners do not work in notebooks/: ``make lab`` copies it to workspace/ (``softmax_lab.lab``), which nothing here
touches. The output is a pure function of the solution notebook, so ``--check`` compares text byte for byte.
"""
from __future__ import annotations

import argparse
import copy
import hashlib
import json
import re
import sys
from pathlib import Path

import nbformat

BEGIN = "### BEGIN SOLUTION"
END = "### END SOLUTION"
HINT = "# HINT:"
ANSWER_PLACEHOLDER = "YOUR ANSWER HERE"
KERNEL_NAME = "softmax-lab"
KERNELSPEC = {"name": KERNEL_NAME, "display_name": "Softmax Lab (Python 3)", "language": "python"}
NB_VERSION = 4

# Tag prefixes with meaning (see docs/authoring.md).
EXERCISE, CHECK, POINTS, QUESTION, ANSWER, RUBRIC = "exercise:", "check:", "points:", "question:", "answer:", "rubric:"
# Transient cell metadata that nbclient/Jupyter write and that must not reach learners or diffs.
TRANSIENT_METADATA = ("execution", "ExecuteTime")


# The first cell of every learner notebook. Under `make lab` softmax_lab is installed and the cell does nothing;
# on a hosted notebook service (Colab, Kaggle, ...) it installs the course beside the service's own torch.
BOOTSTRAP_ID = "softmax-lab-bootstrap"
BOOTSTRAP = """\
# Running on a hosted notebook (Colab, Kaggle, ...)? This cell installs the course there; with `make lab` it does
# nothing. SOFTMAX_LAB_SOURCE: where to install it from (a git URL or a folder); the service's torch is kept.
import importlib.util, os, subprocess, sys
if importlib.util.find_spec("softmax_lab") is None:
    source = os.environ.get("SOFTMAX_LAB_SOURCE", "{source}")
    subprocess.check_call([sys.executable, "-m", "pip", "install", "-q", "--no-deps", source])
    subprocess.check_call([sys.executable, "-m", "pip", "install", "-q", {pins}])"""
# The course's public source; override per class with SOFTMAX_LAB_SOURCE (docs/authoring.md, "Hosted notebooks").
COURSE_SOURCE = "git+https://github.com/softmax-lab/softmax-lab.git"
# What a hosted service lacks: everything pinned except torch (kept) and the JupyterLab application itself.
HOSTED_SKIP = ("torch", "jupyterlab", "ipykernel")


class BuildError(Exception):
    """A solution notebook breaks the authoring conventions (the message says where and how)."""


def repo_root(start: Path | None = None) -> Path:
    """The checkout root: the nearest folder above ``start`` (default: cwd, then this file) holding solutions/."""
    candidates = [Path.cwd() if start is None else Path(start)]
    if start is None:
        candidates.append(Path(__file__).resolve())
    for c in candidates:
        for d in [c, *c.resolve().parents]:
            if (d / "solutions").is_dir() and (d / "Makefile").is_file():
                return d
    raise BuildError("cannot find the repository root (a folder with solutions/ and Makefile); use --root")


# ----------------------------------------------------------------------------------------------- cell text


def tags(cell) -> list[str]:
    return list(cell.get("metadata", {}).get("tags", []))


def tag_value(cell, prefix: str) -> str | None:
    """The value of the first tag starting with ``prefix`` (e.g. 'exercise:' -> 'ch04-fused'), or None."""
    for t in tags(cell):
        if t.startswith(prefix):
            return t[len(prefix):]
    return None


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


def validate(nb, name: str = "notebook") -> list[str]:
    """Convention problems in one solution notebook (empty list when fine)."""
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
        q = tag_value(cell, QUESTION)
        for kind, ident in (("exercise", ex), ("question", q)):
            if ident is None:
                continue
            if tag_value(cell, POINTS) is None or not tag_value(cell, POINTS).isdigit():
                problems.append(f"{where}: {kind} {ident} needs a tag points:<n>")
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
        try:
            strip_solutions(cell.source, cell.cell_type)
        except BuildError as err:
            problems.append(f"{where}: {err}")
    return problems


def exercise_ids(nb) -> list[str]:
    return [tag_value(c, EXERCISE) for c in nb.cells if tag_value(c, EXERCISE) is not None]


def hosted_pins(pyproject: Path | None = None) -> list[str]:
    """The pins the bootstrap cell installs on a hosted service (from pyproject.toml's dependencies)."""
    import tomllib

    path = pyproject or Path(__file__).resolve().parents[2] / "pyproject.toml"
    deps = tomllib.loads(path.read_text(encoding="utf-8"))["project"]["dependencies"]
    return [d for d in deps if d.split("==")[0].strip().lower() not in HOSTED_SKIP]


def bootstrap_cell():
    pins = ", ".join(repr(p) for p in hosted_pins())
    cell = nbformat.v4.new_code_cell(BOOTSTRAP.format(source=COURSE_SOURCE, pins=pins))
    cell.id = BOOTSTRAP_ID
    cell.metadata["tags"] = ["bootstrap"]
    return cell


def sources_sha(nb) -> str:
    """Fingerprint of a notebook's cells (type and source): what a learner's edit changes."""
    cells = [[c.get("cell_type"), c.get("source", "")] for c in nb.get("cells", [])]
    return hashlib.sha256(json.dumps(cells, ensure_ascii=False).encode("utf-8")).hexdigest()


def edited_by_hand(text: str) -> bool:
    """True when a learner notebook's cells are not the ones the build wrote (or it does not parse)."""
    try:
        nb = nbformat.reads(text, as_version=NB_VERSION)
    except Exception:  # noqa: BLE001  (a notebook that does not parse may be somebody's broken work: keep it)
        return True
    recorded = nb.metadata.get("softmax_lab", {}).get("learner_sha")
    return recorded != sources_sha(nb)


def learner_notebook(nb):
    """The learner version of a solution notebook (a new object; ``nb`` is not modified)."""
    out = copy.deepcopy(nb)
    cells = [bootstrap_cell()]
    for cell in out.cells:
        if tag_value(cell, RUBRIC) is not None:
            continue
        if has_solution(cell.source):
            cell.source = strip_solutions(cell.source, cell.cell_type, tag_value(cell, EXERCISE))
        if cell.cell_type == "code":
            cell.outputs = []
            cell.execution_count = None
        for key in TRANSIENT_METADATA:
            cell.metadata.pop(key, None)
        cells.append(cell)
    out.cells = cells
    out.metadata.pop("widgets", None)  # saved widget state belongs to the executed solutions only
    out.metadata.setdefault("softmax_lab", {})["learner_sha"] = sources_sha(out)
    return out


def dumps(nb) -> str:
    """The exact text written for a notebook (stable: nbformat's sorted keys and indent, final newline)."""
    text = nbformat.writes(nb, version=NB_VERSION)
    return text if text.endswith("\n") else text + "\n"


def read(path: Path):
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


class EditedNotebooks(BuildError):
    """Learner notebooks that were edited by hand; the build would overwrite them."""

    def __init__(self, names: list[str]):
        self.names = names
        super().__init__(
            "these learner notebooks were edited by hand and would be overwritten: " + ", ".join(names)
            + ". Learners: your work belongs in workspace/ (`softmax-lab workspace` copies these edited files there). "
            "Authors: change solutions/ instead, or pass --force to overwrite.")


def build(solutions: Path, notebooks: Path, only: list[str] | None = None, check: bool = False,
          log=print, force: bool = False) -> list[str]:
    """Write (or with ``check``, only compare) learner notebooks. Returns the stale/written file names.

    With ``check`` and no ``only``, a learner notebook with no solution counterpart also counts as stale.
    Without ``force`` it writes nothing at all when it would overwrite a notebook edited by hand
    (raises EditedNotebooks, naming them).
    """
    paths = solution_paths(solutions, only)
    problems = []
    for p in paths:
        problems += validate(read(p), p.name)
    ids: dict[str, str] = {}
    for p in paths:
        for ex in exercise_ids(read(p)):
            if ex in ids:
                problems.append(f"{p.name}: exercise id {ex} also used in {ids[ex]}")
            ids[ex] = p.name
    if problems:
        raise BuildError("\n".join(problems))
    plan = []
    for p in paths:
        text = dumps(learner_notebook(read(p)))
        target = notebooks / p.name
        current = target.read_text(encoding="utf-8", errors="surrogateescape") if target.exists() else None
        if current != text:
            plan.append((p.name, target, text, current))
    edited = [name for name, _, _, current in plan if current is not None and edited_by_hand(current)]
    changed = []
    for name, target, text, current in plan:
        changed.append(name)
        if check:
            why = "missing" if current is None else "edited by hand" if name in edited else "differs from solutions/"
            log(f"stale: notebooks/{name} ({why})")
    if not check:
        if edited and not force:
            raise EditedNotebooks(edited)
        for name, target, text, _ in plan:
            notebooks.mkdir(parents=True, exist_ok=True)
            target.write_text(text, encoding="utf-8")
            log(f"wrote notebooks/{name}")
    if not only and notebooks.is_dir():
        for orphan in sorted(set(q.name for q in notebooks.glob("*.ipynb")) - set(p.name for p in paths)):
            changed.append(orphan)
            log(f"stale: notebooks/{orphan} has no solutions/{orphan}" + ("" if check else " (delete it)"))
    return changed


# ------------------------------------------------------------------------------------------------ execution

_MODEL_REF = re.compile(r"IPY_MODEL_([0-9a-f]{32})")
WIDGET_VIEW = "application/vnd.jupyter.widget-view+json"
WIDGET_STATE = "application/vnd.jupyter.widget-state+json"


def stable_widget_state(nb, salt: str) -> None:
    """Make saved widget state reproducible: widget model ids are random uuids, so rename them in a fixed
    order (displayed widgets in cell order, then the models they refer to) and drop models no view uses."""
    state = nb.metadata.get("widgets", {}).get(WIDGET_STATE, {}).get("state")
    views = [out["data"][WIDGET_VIEW]["model_id"] for cell in nb.cells if cell.cell_type == "code"
             for out in cell.get("outputs", []) if WIDGET_VIEW in out.get("data", {})]
    if state is None:
        return
    order: list[str] = []

    def visit(mid: str) -> None:
        if mid in order or mid not in state:
            return
        order.append(mid)
        model_state = state[mid].get("state", {})
        for key in sorted(model_state):
            for ref in _MODEL_REF.findall(json.dumps(model_state[key], sort_keys=True)):
                visit(ref)

    for mid in views:
        visit(mid)
    new_id = {mid: hashlib.md5(f"{salt}:{k}".encode()).hexdigest() for k, mid in enumerate(order)}

    def rename(obj):
        if isinstance(obj, dict):
            return {new_id.get(k, k): rename(v) for k, v in obj.items()}
        if isinstance(obj, list):
            return [rename(v) for v in obj]
        if isinstance(obj, str):
            if obj in new_id:
                return new_id[obj]
            return _MODEL_REF.sub(lambda m: "IPY_MODEL_" + new_id.get(m.group(1), m.group(1)), obj)
        return obj

    nb.metadata["widgets"][WIDGET_STATE]["state"] = rename({mid: state[mid] for mid in order})
    for cell in nb.cells:
        for out in cell.get("outputs", []) if cell.cell_type == "code" else []:
            if WIDGET_VIEW in out.get("data", {}):
                out["data"][WIDGET_VIEW] = rename(out["data"][WIDGET_VIEW])


def merge_streams(nb) -> None:
    """Join consecutive stdout (or stderr) chunks of each cell, as nbval does before comparing: how a print loop
    is split into chunks depends on timing, and the stored file should not."""
    for cell in nb.cells:
        if cell.cell_type != "code":
            continue
        merged = []
        for out in cell.get("outputs", []):
            if (out.get("output_type") == "stream" and merged and merged[-1].get("output_type") == "stream"
                    and merged[-1].get("name") == out.get("name")):
                merged[-1]["text"] += out["text"]
            else:
                merged.append(out)
        cell.outputs = merged


def execute(path: Path, timeout: int = 300, log=print) -> None:
    """Re-run one solution notebook in place with the course kernel and store its outputs deterministically."""
    from nbclient import NotebookClient
    from nbclient.exceptions import CellExecutionError

    nb = read(path)
    client = NotebookClient(nb, timeout=timeout, kernel_name=KERNEL_NAME, record_timing=False,
                            resources={"metadata": {"path": str(path.parent)}})
    try:
        client.execute()
    except CellExecutionError as err:
        raise BuildError(f"solutions/{path.name} failed to execute:\n{err}") from None
    for cell in nb.cells:
        for key in TRANSIENT_METADATA:
            cell.metadata.pop(key, None)
    nb.metadata["kernelspec"] = dict(KERNELSPEC)
    merge_streams(nb)
    stable_widget_state(nb, path.stem)
    path.write_text(dumps(nb), encoding="utf-8")
    log(f"executed solutions/{path.name}")


# -------------------------------------------------------------------------------------------------- command


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(prog="softmax-lab build", description=__doc__.split("\n\n")[0])
    ap.add_argument("notebooks", nargs="*", help="only these chapters (file names in solutions/)")
    ap.add_argument("--check", action="store_true", help="write nothing; exit 1 if notebooks/ is stale")
    ap.add_argument("--force", action="store_true",
                    help="overwrite learner notebooks even when they were edited by hand (their edits are lost)")
    ap.add_argument("--execute", action="store_true",
                    help="re-run the solution notebooks in place (storing outputs) before building")
    ap.add_argument("--timeout", type=int, default=300, help="per-cell timeout for --execute (seconds)")
    ap.add_argument("--root", type=Path, default=None, help="repository root (default: found from cwd)")
    ap.add_argument("--solutions", type=Path, default=None, help="source folder (default ROOT/solutions)")
    ap.add_argument("--out", type=Path, default=None, help="learner folder (default ROOT/notebooks)")
    args = ap.parse_args(argv)
    if args.check and args.execute:
        ap.error("--check and --execute do not mix")
    try:
        root = args.root or (None if args.solutions and args.out else repo_root())
        solutions = args.solutions or root / "solutions"
        notebooks = args.out or root / "notebooks"
        if args.execute:
            for p in solution_paths(solutions, args.notebooks):
                execute(p, timeout=args.timeout)
        changed = build(solutions, notebooks, only=args.notebooks or None, check=args.check, force=args.force)
    except BuildError as err:
        print(f"softmax-lab build: {err}", file=sys.stderr)
        return 2
    if args.check:
        if changed:
            print(f"notebooks/ is stale ({len(changed)} file(s)). Authors: run `make notebooks` and commit the result. "
                  "Learners: nothing to do (you work in workspace/, which this does not look at).", file=sys.stderr)
            return 1
        print("notebooks/ is up to date")
    elif not changed:
        print("notebooks/ is up to date")
    return 0


if __name__ == "__main__":
    sys.exit(main())
