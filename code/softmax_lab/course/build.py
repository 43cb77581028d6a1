"""`softmax-lab build`: the learner notebooks in notebooks/ from the solution notebooks in solutions/.

    softmax-lab build                  # solutions/*.ipynb -> notebooks/*.ipynb (only files that changed)
    softmax-lab build --check          # exit 1 if notebooks/ is stale (CI and tests use this)
    softmax-lab build --force          # also overwrite learner notebooks that were edited by hand
    softmax-lab build --execute        # first re-run solutions/ in place (kernel softmax-lab), then build
    softmax-lab build 04_three_kernels_to_one.ipynb   # just these chapters (file names or paths)

A learner notebook is the solution notebook passed through ``LEARNER_PIPELINE``, a list of nbconvert
preprocessors (docs/authoring.md has the conventions):

* ``DropRubrics``: cells tagged ``rubric:<id>`` go (they are for instructors);
* ``StripSolutions``: every ``### BEGIN SOLUTION`` .. ``### END SOLUTION`` region becomes its ``# HINT:`` lines
  plus ``raise NotImplementedError(...)`` (in markdown: ``YOUR ANSWER HERE``);
* nbconvert's ``ClearOutputPreprocessor``: outputs, execution counts and transient cell metadata cleared (cell
  ids, tags, other metadata and notebook metadata are kept);
* ``DropWidgetState``: saved widget state belongs to the executed solutions only;
* ``AddBootstrap``: a cell under the title, collapsed, installs the course when ``softmax_lab`` is missing (hosted
  notebooks);
* ``Fingerprint``: ``softmax_lab.learner_sha`` fingerprints the generated cells, so the build can tell a notebook it
  wrote from one somebody edited: it never overwrites an edited one without ``--force``.

Learners do not work in notebooks/: ``make lab`` copies it to workspace/ (``softmax_lab.lab``), which nothing here
touches. The output is a pure function of the solution notebook, so ``--check`` compares text byte for byte.
"""
from __future__ import annotations

import argparse
import copy
import sys
from pathlib import Path

import nbformat
from nbconvert.preprocessors import ClearOutputPreprocessor, Preprocessor

from . import registry as _registry
from .notebook import (EXERCISE, RUBRIC, TRANSIENT_METADATA, BuildError, dumps, edited_by_hand, exercise_ids,
                       has_solution, read, repo_root, solution_paths, sources_sha, strip_solutions, tag_value,
                       validate)

# The cell under the title of every learner notebook, collapsed to its first line. Under `make lab` softmax_lab
# is installed and the cell does nothing; on a hosted notebook service (Colab, Kaggle, ...) it installs the course
# beside the service's own torch.
BOOTSTRAP_ID = "softmax-lab-bootstrap"
BOOTSTRAP = """\
# Installs the course on a hosted notebook (Colab, Kaggle); does nothing under `make lab`.
# SOFTMAX_LAB_SOURCE: where to install from (a git URL or a folder); the service's torch is kept.
import importlib.util, os, subprocess, sys
if importlib.util.find_spec("softmax_lab") is None:
    source = os.environ.get("SOFTMAX_LAB_SOURCE",
                            "{source}")
    pip = [sys.executable, "-m", "pip", "install", "-q"]
    subprocess.check_call(pip + ["--no-deps", source])
    subprocess.check_call(pip + [{pins}])"""
BOOTSTRAP_WIDTH = 100  # no line wider than this: the cell never scrolls sideways
# The course's public source; override per class with SOFTMAX_LAB_SOURCE (docs/authoring.md, "Hosted notebooks").
COURSE_SOURCE = "git+https://github.com/softmax-lab/softmax-lab.git"
# What a hosted service lacks: everything pinned except torch (kept) and the JupyterLab application itself.
HOSTED_SKIP = ("torch", "jupyterlab", "ipykernel")


def hosted_pins(pyproject: Path | None = None) -> list[str]:
    """The pins the bootstrap cell installs on a hosted service (from pyproject.toml's dependencies)."""
    import tomllib

    path = pyproject or Path(__file__).resolve().parents[3] / "pyproject.toml"
    deps = tomllib.loads(path.read_text(encoding="utf-8"))["project"]["dependencies"]
    return [d for d in deps if d.split("==")[0].strip().lower() not in HOSTED_SKIP]


def bootstrap_cell():
    """The install cell: collapsed (JupyterLab shows its first line), its pins wrapped to BOOTSTRAP_WIDTH."""
    lines, line, indent = [], "", " " * len("    subprocess.check_call(pip + [")
    for pin in (repr(p) for p in hosted_pins()):
        if line and len(indent) + len(line) + len(pin) + 4 > BOOTSTRAP_WIDTH:
            lines.append(line + ",")
            line = ""
        line = f"{line}, {pin}" if line else pin
    pins = ("\n" + indent).join(lines + [line])
    cell = nbformat.v4.new_code_cell(BOOTSTRAP.format(source=COURSE_SOURCE, pins=pins))
    cell.id = BOOTSTRAP_ID
    cell.metadata["tags"] = ["bootstrap"]
    cell.metadata["jupyter"] = {"source_hidden": True}
    return cell


# ------------------------------------------------------------------------------------- the learner pipeline


class DropRubrics(Preprocessor):
    """Cells tagged ``rubric:<id>`` are for instructors only."""

    def preprocess(self, nb, resources):
        nb.cells = [c for c in nb.cells if tag_value(c, RUBRIC) is None]
        return nb, resources


class StripSolutions(Preprocessor):
    """Each solution region becomes its hints plus ``raise NotImplementedError(...)`` / ``YOUR ANSWER HERE``."""

    def preprocess_cell(self, cell, resources, index):
        if has_solution(cell.source):
            cell.source = strip_solutions(cell.source, cell.cell_type, tag_value(cell, EXERCISE))
        return cell, resources


class DropWidgetState(Preprocessor):
    """Saved ipywidgets state belongs to the executed solutions only."""

    def preprocess(self, nb, resources):
        nb.metadata.pop("widgets", None)
        return nb, resources


class AddBootstrap(Preprocessor):
    """The cell under the title installs the course on a hosted notebook service (a no-op under ``make lab``)."""

    def preprocess(self, nb, resources):
        titled = bool(nb.cells) and nb.cells[0].cell_type == "markdown" and nb.cells[0].source.startswith("# ")
        nb.cells.insert(1 if titled else 0, bootstrap_cell())
        return nb, resources


class Fingerprint(Preprocessor):
    """``softmax_lab.learner_sha``: what the build wrote, so that a hand edit can be told apart."""

    def preprocess(self, nb, resources):
        nb.metadata.setdefault("softmax_lab", {})["learner_sha"] = sources_sha(nb)
        return nb, resources


def learner_pipeline() -> list[Preprocessor]:
    return [DropRubrics(), StripSolutions(), ClearOutputPreprocessor(remove_metadata_fields=set(TRANSIENT_METADATA)),
            DropWidgetState(), AddBootstrap(), Fingerprint()]


def learner_notebook(nb):
    """The learner version of a solution notebook (a new object; ``nb`` is not modified)."""
    out = copy.deepcopy(nb)
    resources: dict = {}
    for step in learner_pipeline():
        out, resources = step.preprocess(out, resources)
    return out


CHECK_OUTPUT = "nbval-check-output"


class KeepComparedOutputs(Preprocessor):
    """Only the outputs nbval compares stay (check cells' verdicts), never an exercise cell's own output."""

    def preprocess_cell(self, cell, resources, index):
        if cell.cell_type == "code":
            tags = cell.get("metadata", {}).get("tags", [])
            if CHECK_OUTPUT not in tags or tag_value(cell, EXERCISE) is not None:
                cell.outputs = []
                cell.execution_count = None
        return cell, resources


def check_notebook(nb):
    """What `softmax-lab check` grades against in the class edition (``check-notebooks/``): the solution notebook
    with every solution region and rubric taken out, as in the learner version, but the compared outputs of its
    check cells kept, so that nbval still compares a learner's verdicts with the solution's."""
    out = copy.deepcopy(nb)
    resources: dict = {}
    for step in (DropRubrics(), StripSolutions(), KeepComparedOutputs(), DropWidgetState()):
        out, resources = step.preprocess(out, resources)
    return out


# ------------------------------------------------------------------------------------------------ the build


class EditedNotebooks(BuildError):
    """Learner notebooks that were edited by hand; the build would overwrite them."""

    def __init__(self, names: list[str]):
        self.names = names
        super().__init__(
            "these learner notebooks were edited by hand and would be overwritten: " + ", ".join(names)
            + ". Learners: your work belongs in workspace/ (`softmax-lab workspace` copies these edited files there). "
            "Authors: change solutions/ instead, or pass --force to overwrite.")


def problems_in(paths: list[Path], registry: _registry.Registry | None) -> list[str]:
    """Every broken convention in these solution notebooks, duplicate exercise ids across them included."""
    problems = []
    ids: dict[str, str] = {}
    for p in paths:
        nb = read(p)
        problems += validate(nb, p.name, registry)
        for ex in exercise_ids(nb):
            if ex in ids:
                problems.append(f"{p.name}: exercise id {ex} also used in {ids[ex]}")
            ids[ex] = p.name
    return problems


def build(solutions: Path, notebooks: Path, only: list[str] | None = None, check: bool = False,
          log=print, force: bool = False, registry: _registry.Registry | None = None) -> list[str]:
    """Write (or with ``check``, only compare) learner notebooks. Returns the stale/written file names.

    ``registry``: the exercise registry the notebooks must agree with (None: skip that check; the command
    passes the course's). With ``check`` and no ``only``, a learner notebook with no solution counterpart also
    counts as stale. Without ``force`` it writes nothing at all when it would overwrite a notebook edited by
    hand (raises EditedNotebooks, naming them).
    """
    paths = solution_paths(solutions, only)
    problems = problems_in(paths, registry)
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
    changed = [name for name, *_ in plan]
    if check:
        for name, _, _, current in plan:
            why = "missing" if current is None else "edited by hand" if name in edited else "differs from solutions/"
            log(f"stale: notebooks/{name} ({why})")
    else:
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


# -------------------------------------------------------------------------------------------------- command


def add_arguments(ap: argparse.ArgumentParser) -> None:
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
    ap.add_argument("--registry", type=Path, default=None,
                    help="folder of chNN.toml exercise registry files (default: the course's own)")


def hint_data(solutions: Path, check: bool) -> list[str]:
    """The hint ladders an installed package reads (``softmax_lab/data/hints/chNN.json``, level 4 taken from the
    solution regions): rewritten with the learner notebooks; with ``check``, the names of stale files."""
    from .. import hints

    changed = hints.write_hint_data(solutions, check=check)
    if not check:
        for name in changed:
            print(f"updated softmax_lab/data/hints/{name}")
    return [f"data/hints/{n}" for n in changed]


def run(args: argparse.Namespace) -> int:
    if args.check and args.execute:
        print("softmax-lab build: --check and --execute do not mix", file=sys.stderr)
        return 2
    try:
        registry = _registry.load(args.registry)
        root = args.root or (None if args.solutions and args.out else repo_root())
        solutions = args.solutions or root / "solutions"
        notebooks = args.out or root / "notebooks"
        if args.execute:
            from .execute import execute

            for p in solution_paths(solutions, args.notebooks):
                execute(p, timeout=args.timeout)
        changed = build(solutions, notebooks, only=args.notebooks or None, check=args.check, force=args.force,
                        registry=registry)
        if args.registry is None and args.solutions is None:
            changed += hint_data(solutions, check=args.check)
    except (BuildError, _registry.RegistryError) as err:
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
