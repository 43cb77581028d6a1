"""`softmax-lab release OUT`: the class edition, the course a class gets with every answer left out.

    softmax-lab release ../class-2027          # a clean checkout -> ../class-2027 (a new or empty folder)
    softmax-lab release ../class --allow-dirty # build from uncommitted edits anyway (recorded in EDITION.json)
    softmax-lab release ../class --no-wheel    # skip dist/softmax_lab-*.whl

The open repository is the self-study edition: solutions, model answers and rubrics are in it. As nbgrader's
``release`` does, this writes a second edition from the same source with only what learners need:

* ``notebooks/``: the learner notebooks, made from ``solutions/`` by the build's learner pipeline;
* ``check-notebooks/``: what `softmax-lab check` grades a learner's notebook against on a class hub: each solution
  notebook with its solution regions and rubrics taken out but its check cells' compared outputs kept
  (``build.check_notebook``), so that learners can check their work without any account holding an answer;
* the package (``code/``), ``benchmarks/records/``'s recorded data (chapters 7 and 10 read it), the install files;
* ``data/hints/chNN.json`` with hint levels 1-3 only: level 4, the complete answer, says it is not in this edition;
* ``dist/softmax_lab-*.whl``, for a ``pip install`` without ``make``;
* ``EDITION.json``: the commit it was built from and any uncommitted file it contains.

Left out: ``solutions/``, ``tests/``, ``docs/``, CI files. The package's own kernels stay (the chapters need
them); copying them is caught by ``softmax-lab similarity``. Last, every file of the edition (the wheel's members
and notebook cells included) is searched for every significant line of every solution region, model answer and
rubric that is not also package code: a line found there fails the release and is named.
"""
from __future__ import annotations

import argparse
import datetime
import io
import json
import re
import shutil
import subprocess
import sys
import tempfile
import tomllib
import zipfile
from pathlib import Path

from . import registry as _registry
from .notebook import (BEGIN, EDITION_MARKER, END, HINT, RUBRIC, BuildError, dumps, read, repo_root, solution_paths,
                       tag_value)

# What the class edition copies from the source (tracked files under these paths); notebooks/ is rebuilt.
INCLUDE = ("README.md", "Makefile", "pyproject.toml", "environment.yml", ".gitignore", "requirements/", "tools/",
           "code/", "benchmarks/records/", "deploy/")
CHECK_NOTEBOOKS = "check-notebooks"  # `softmax-lab check`'s chapters in the class edition (no answers)
# From benchmarks/records/ only the recorded data and its notes (chapters 7 and 10 read the JSON): not the test
# logs of the GPU runs, which hold test output.
RECORDS = "benchmarks/records/"
RECORDS_KEPT = (".json", ".md", ".png")
HINT_DATA = "code/softmax_lab/data/hints/"  # replaced: levels 1-3 only
PACKAGE = "code/softmax_lab/"
REGISTRY = "code/softmax_lab/course/exercises"
MARKER = EDITION_MARKER
EDITION = "class"


# Put under the README's title in the class edition.
CLASS_NOTE = ("> **Class edition** (`softmax-lab release`; EDITION.json says which commit): the learner notebooks and "
              "the course package,\n> without solutions, model answers or rubrics. Hints stop at level 3. `make lab` "
              "works as below; `make test`\n> and the authors' tools need the course's source edition.\n")


class ReleaseError(Exception):
    """The edition cannot be built as asked (the message says why and what to do)."""


class AnswersFound(ReleaseError):
    """The edition was written but holds answer lines (the message names them; the folder is kept)."""


# ------------------------------------------------------------------------------------ the source tree


def _git(root: Path, *args: str) -> str | None:
    """Output of a git command in ``root``, or None where ``root`` is not a git checkout (or git is missing)."""
    try:
        proc = subprocess.run(["git", "-C", str(root), *args], capture_output=True, text=True, timeout=60)
    except (OSError, subprocess.TimeoutExpired):
        return None
    return proc.stdout if proc.returncode == 0 else None


def dirty_files(root: Path) -> list[str] | None:
    """Files that differ from the last commit (modified, added, deleted, untracked); None outside git."""
    out = _git(root, "status", "--porcelain", "--untracked-files=all")
    if out is None:
        return None
    return [line[3:] for line in out.splitlines() if line.strip()]


def tracked_files(root: Path) -> list[str]:
    """The files the edition may copy: tracked ones under ``INCLUDE`` (never .venv/, workspace/, caches)."""
    out = _git(root, "ls-files", "-z", "--", *INCLUDE)
    if out is None:
        raise ReleaseError(f"{root} is not a git checkout: the class edition is built from one, so that "
                           "EDITION.json can say which commit it is")
    return sorted(p for p in out.split("\0") if p and (root / p).is_file()
                  and not (p.startswith(RECORDS) and Path(p).suffix not in RECORDS_KEPT))


# ------------------------------------------------------------------------------------------ the edition


def class_hint_texts(registry: _registry.Registry) -> dict[str, str]:
    """``data/hints/chNN.json`` of the class edition: each exercise's chapter, points and hints 1-3, no answer."""
    chapters: dict[str, dict] = {}
    for ex in registry.exercises():
        chapters.setdefault(f"ch{ex.chapter}.json", {})[ex.id] = {
            "chapter": ex.chapter, "points": ex.points, "hints": list(ex.hints)}
    return {name: json.dumps({"edition": EDITION, "exercises": table}, indent=1, sort_keys=True,
                             ensure_ascii=False) + "\n" for name, table in sorted(chapters.items())}


def build_wheel(edition: Path, dist: Path) -> Path:
    """``pip wheel`` of the edition's package, built in a scratch copy (setuptools leaves build/ behind)."""
    with tempfile.TemporaryDirectory(prefix="softmax-lab-wheel-") as scratch:
        src = Path(scratch) / "src"
        shutil.copytree(edition / "code", src / "code", ignore=shutil.ignore_patterns("__pycache__", "*.egg-info"))
        for name in ("pyproject.toml", "README.md"):
            shutil.copy(edition / name, src / name)
        proc = subprocess.run([sys.executable, "-m", "pip", "wheel", "--no-deps", "--no-build-isolation", "-q",
                               "--disable-pip-version-check", "-w", str(Path(scratch) / "dist"), str(src)],
                              capture_output=True, text=True, timeout=600)
        wheels = sorted((Path(scratch) / "dist").glob("softmax_lab-*.whl"))
        if proc.returncode != 0 or not wheels:
            raise ReleaseError("building the wheel failed (pip wheel needs setuptools in this environment; "
                               "--no-wheel skips it):\n" + (proc.stderr or proc.stdout)[-1500:])
        dist.mkdir(parents=True, exist_ok=True)
        return Path(shutil.copy(wheels[0], dist / wheels[0].name))


def release(root: Path, out: Path, allow_dirty: bool = False, wheel: bool = True, log=print) -> dict:
    """Write the class edition of the checkout ``root`` into ``out`` (new or empty). Returns EDITION.json's data.

    Refuses (ReleaseError, nothing written) when ``out`` holds anything, lies inside ``root``, or ``root`` has
    uncommitted changes and ``allow_dirty`` is false. Raises ReleaseError naming the lines after writing when an
    answer line is found in the edition (the folder is kept for inspection)."""
    root, out = Path(root).resolve(), Path(out).resolve()
    if out.exists() and (not out.is_dir() or any(out.iterdir())):
        raise ReleaseError(f"{out} is not an empty folder: the class edition goes into a new or empty folder "
                           "(nothing is ever deleted to make room)")
    if out == root or root in out.parents:
        raise ReleaseError(f"{out} is inside the source tree {root}: choose a folder outside it")
    files = tracked_files(root)
    dirty = dirty_files(root) or []
    if dirty and not allow_dirty:
        shown = ", ".join(dirty[:8]) + (f" and {len(dirty) - 8} more" if len(dirty) > 8 else "")
        raise ReleaseError(f"{root} has uncommitted changes ({shown}): commit them first, so that the edition "
                           "is exactly a commit, or pass --allow-dirty (EDITION.json then lists these files)")
    solutions = root / "solutions"
    if not solutions.is_dir():
        raise ReleaseError(f"{root} has no solutions/: the class edition is built from the source edition")
    from .build import check_notebook, learner_notebook, problems_in

    registry = _registry.load(root / REGISTRY)  # the source's own registry (root may be another checkout)
    problems = problems_in(solution_paths(solutions), registry)
    if problems:
        raise ReleaseError("the solution notebooks break the course's conventions:\n" + "\n".join(problems))

    out.mkdir(parents=True, exist_ok=True)
    copied = 0
    for rel in files:
        if rel.startswith(HINT_DATA):
            continue
        target = out / rel
        target.parent.mkdir(parents=True, exist_ok=True)
        shutil.copy2(root / rel, target)
        copied += 1
    hint_dir = out / HINT_DATA
    hint_dir.mkdir(parents=True, exist_ok=True)
    for name, text in class_hint_texts(registry).items():
        (hint_dir / name).write_text(text, encoding="utf-8")
    readme = out / "README.md"
    if readme.is_file():
        title, _, rest = readme.read_text(encoding="utf-8").partition("\n")
        readme.write_text(f"{title}\n\n{CLASS_NOTE}{rest}", encoding="utf-8")
    (out / "notebooks").mkdir(exist_ok=True)
    for path in solution_paths(solutions):
        (out / "notebooks" / path.name).write_text(dumps(learner_notebook(read(path))), encoding="utf-8")
    (out / CHECK_NOTEBOOKS).mkdir(exist_ok=True)
    for path in solution_paths(solutions):
        (out / CHECK_NOTEBOOKS / path.name).write_text(dumps(check_notebook(read(path))), encoding="utf-8")
    log(f"copied {copied} files, wrote {len(solution_paths(solutions))} learner notebooks, their check notebooks "
        "and the hints 1-3")
    built = build_wheel(out, out / "dist") if wheel else None
    if built:
        log(f"built {built.relative_to(out)}")

    material = answer_material(solutions)
    given = package_text(out) + "\n" + hint_text(registry)
    searched = [m for m in material if m.line not in given]
    found, elsewhere = [], []
    for where, m in find_answers(out, searched):
        learner_side = where.startswith(("notebooks/", CHECK_NOTEBOOKS + "/"))
        other_chapter = learner_side and "!" not in where and Path(where).name != m.notebook
        (elsewhere if other_chapter else found).append((where, m))
    manifest = {
        "edition": EDITION,
        "built_from": (_git(root, "rev-parse", "HEAD") or "").strip() or None,
        "uncommitted": dirty,
        "date": datetime.datetime.now(datetime.timezone.utc).strftime("%Y-%m-%dT%H:%M:%SZ"),
        "notebooks": sorted(p.name for p in (out / "notebooks").glob("*.ipynb")),
        "wheel": built.name if built else None,
        "answer_search": {"lines": len(searched), "also_package_code_or_hints": len(material) - len(searched),
                          # where, and whose answer: never the line itself (this file ships with the edition)
                          "found": sorted({f"{where}: {m.source}" for where, m in found}),
                          "in_another_chapter": sorted({f"{where}: {m.source}" for where, m in elsewhere})},
    }
    (out / MARKER).write_text(json.dumps(manifest, indent=1) + "\n", encoding="utf-8")
    if found:
        raise AnswersFound(f"{len(found)} answer line(s) found in the edition at {out} (kept for inspection):\n"
                           + "\n".join(f"{where}: {m.source}: {m.line}" for where, m in found[:40]))
    for where, m in elsewhere:
        log(f"note: another chapter's learner notebook gives away a line of an answer: {where}: {m.source}: {m.line}")
    log(f"searched every file for {len(searched)} answer lines ({len(material) - len(searched)} more are also "
        "package code or hints 1-3): none found")
    return manifest


# ------------------------------------------------------------------------------ searching for answers
# The normalisation of tests/course/test_no_answers.py: spaces collapsed, a trailing code comment dropped; a line counts
# when it is code of at least 4 tokens and 12 characters, or a comment of at least 5 words.

TOKEN = re.compile(r"\w+|[^\w\s]")
TRAILING_COMMENT = re.compile(r"\s+#[^'\"]*$")


def normalise(line: str) -> str:
    line = " ".join(line.split())
    if not line.startswith("#"):
        line = TRAILING_COMMENT.sub("", line)
    return line


def significant(line: str) -> bool:
    if not line:
        return False
    if line.startswith("#"):
        return len(line.lstrip("#").split()) >= 5
    return len(TOKEN.findall(line)) >= 4 and len(line) >= 12


class Answer:
    """One significant line of answer material and where it comes from (``04_….ipynb exercise:ch04-fused``)."""

    __slots__ = ("line", "source", "notebook")

    def __init__(self, line: str, source: str, notebook: str = ""):
        self.line, self.source, self.notebook = line, source, notebook

    def __repr__(self) -> str:
        return f"Answer({self.line!r}, {self.source!r})"


def answer_material(solutions: Path) -> list[Answer]:
    """Every significant line of the solution regions (code and model answers, ``# HINT:`` lines excepted) and
    of the rubric cells of every solution notebook, once each."""
    seen: dict[str, Answer] = {}
    for path in solution_paths(Path(solutions)):
        for cell in read(path).cells:
            ident = next((t for t in cell.get("metadata", {}).get("tags", []) if ":" in t), "")
            where = f"{path.name} {ident}".strip()
            if tag_value(cell, RUBRIC) is not None:
                lines = cell.source.split("\n")
            else:
                lines, inside = [], False
                for raw in cell.source.split("\n"):
                    mark = raw.strip()
                    if mark in (BEGIN, END):
                        inside = mark == BEGIN
                    elif inside and not mark.startswith(HINT):
                        lines.append(raw)
            for raw in lines:
                line = normalise(raw)
                if significant(line) and line not in seen:
                    seen[line] = Answer(line, where, path.name)
    return list(seen.values())


def _normalised(text: str) -> str:
    return "\n".join(normalise(line) for line in text.split("\n"))


def package_text(edition: Path) -> str:
    """The edition's package code (every .py under code/softmax_lab), normalised: lines found there are code
    learners get anyway."""
    return "\n".join(_normalised(p.read_text(encoding="utf-8")) for p in sorted((edition / PACKAGE).rglob("*.py")))


def hint_text(registry: _registry.Registry) -> str:
    """Hints 1-3 of every exercise, normalised: a key line they give is given to every learner on purpose."""
    return "\n".join(_normalised(h.replace("`", "")) for ex in registry.exercises() for h in ex.hints)


def _strings(value) -> list[str]:
    if isinstance(value, str):
        return [value]
    if isinstance(value, dict):
        return [s for v in value.values() for s in _strings(v)]
    if isinstance(value, list):
        return [s for v in value for s in _strings(v)]
    return []


def texts(name: str, data: bytes):
    """(name, text) for one file: its text, plus every string of a JSON document (a notebook's cells, a hint
    file's entries), plus the same for each member of a zip archive (a wheel)."""
    if name.endswith((".whl", ".zip")) or data[:4] == b"PK\x03\x04":
        try:
            with zipfile.ZipFile(io.BytesIO(data)) as archive:
                for member in archive.namelist():
                    yield from texts(f"{name}!{member}", archive.read(member))
            return
        except zipfile.BadZipFile:
            pass
    text = data.decode("utf-8", errors="replace")
    yield name, text
    try:
        if name.endswith((".ipynb", ".json")):
            yield name, "\n".join(_strings(json.loads(text)))
        elif name.endswith(".toml"):
            yield name, "\n".join(_strings(tomllib.loads(text)))
    except ValueError:  # not valid JSON / TOML: its text was searched as it is
        pass


def find_answers(edition: Path, material: list[Answer]) -> list[tuple[str, Answer]]:
    """(file, answer) for each answer line found in a file of the edition (substring of a normalised line)."""
    found = []
    for path in sorted(p for p in Path(edition).rglob("*") if p.is_file()):
        rel = path.relative_to(edition).as_posix()
        for name, text in texts(rel, path.read_bytes()):
            blob = _normalised(text)
            found += [(name, m) for m in material if m.line in blob]
    unique = {(name, m.line): (name, m) for name, m in found}
    return list(unique.values())


# -------------------------------------------------------------------------------------------------- command


def add_arguments(ap: argparse.ArgumentParser) -> None:
    ap.add_argument("out", type=Path, help="where the class edition goes (a new or empty folder)")
    ap.add_argument("--root", type=Path, default=None, help="the source checkout (default: found from cwd)")
    ap.add_argument("--allow-dirty", action="store_true",
                    help="build from uncommitted changes too (EDITION.json lists the files)")
    ap.add_argument("--no-wheel", action="store_true", help="do not build dist/softmax_lab-*.whl")


def run(args: argparse.Namespace) -> int:
    try:
        root = args.root or repo_root()
        manifest = release(root, args.out, allow_dirty=args.allow_dirty, wheel=not args.no_wheel)
    except (ReleaseError, BuildError, _registry.RegistryError) as err:
        print(f"softmax-lab release: {err}", file=sys.stderr)
        return 1 if isinstance(err, AnswersFound) else 2
    if manifest["uncommitted"]:
        print(f"softmax-lab release: built from uncommitted changes ({len(manifest['uncommitted'])} file(s), "
              f"listed in {MARKER})", file=sys.stderr)
    print(f"the class edition is in {Path(args.out).resolve()} (built from {manifest['built_from'] or '?'}); "
          "learners run `make lab` there")
    return 0
