"""Copy detection as MOSS and JPlag do it: every graded function of every submission, normalised and fingerprinted,
against the package's own code, the course's solutions and every classmate's version.

    softmax-lab similarity submitted/                  # -> similarity.csv and similarity.txt in the current folder
    softmax-lab similarity submitted/ --out reports/ --threshold 0.6

How a function is compared:

1. *Normalised*: Python's tokenizer reads it; comments, docstrings and whitespace go; every name becomes ``V``
   (renaming changes nothing) except keywords, builtins and attribute names (``tl.load`` stays ``V . load``:
   an API call cannot be renamed); every number becomes ``0`` and every string ``S``.
2. *Fingerprinted*: each run of ``K`` tokens is hashed; winnowing keeps the smallest hash of every ``WINDOW``
   consecutive ones (Schleimer, Wilkerson and Aiken, 2003: what MOSS does), so any common run of
   ``K + WINDOW - 1`` tokens is found, whatever surrounds it.
3. *What is the learner's own*: fingerprints of the exercise's blank cell (the skeleton everyone gets) are removed,
   as MOSS's base file. Against the package and classmates, the fingerprints of the exercise's own solution are
   removed too: writing the expected answer is no evidence of copying it from anywhere. What is left is where a
   copy shows, in the package's or a classmate's peculiarities that survive renaming.
4. *Compared*: with every function of every package module and every solution (``similarity`` = the share of the
   learner's remaining fingerprints found in it), and with every other learner's function for the same exercise
   (the share of the smaller of the two), ignoring fingerprints that more than ``COMMON`` learners share (MOSS's
   ``-m``: a common idiom, not a copy). A pair is flagged at ``similarity >= THRESHOLD`` with at least
   ``MIN_MATCH`` fingerprints in common; the report shows the matching lines of both sides.

A function with fewer than ``MIN_MATCH`` fingerprints of its own cannot be judged (its row says so): exercises
whose answer is a few canonical lines look the same however they were written.
"""
from __future__ import annotations

import argparse
import ast
import builtins
import csv
import hashlib
import io
import keyword
import sys
import tokenize
from dataclasses import dataclass, field
from pathlib import Path

K = 10
WINDOW = 5
THRESHOLD = 0.5
MIN_MATCH = 5
COMMON = 10
PACKAGE = Path(__file__).resolve().parents[1]
BUILTINS = frozenset(dir(builtins))
COLUMNS = ("learner", "submission", "exercise", "function", "kind", "match", "similarity", "matched",
           "own", "flagged", "lines", "match_lines", "note")


# ------------------------------------------------------------------------------------- fingerprints


def normalised_tokens(source: str) -> list[tuple[str, int]]:
    """(token, line) for each significant token of ``source`` (see the module's step 1); [] if it does not parse."""
    try:
        tree = ast.parse(source)
    except (SyntaxError, ValueError):
        return []
    docstrings = set()
    for node in ast.walk(tree):
        if isinstance(node, (ast.Module, ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)) and node.body:
            first = node.body[0]
            if isinstance(first, ast.Expr) and isinstance(getattr(first.value, "value", None), str):
                docstrings.update(range(first.lineno, first.end_lineno + 1))
    out: list[tuple[str, int]] = []
    previous = ""
    try:
        for tok in tokenize.generate_tokens(io.StringIO(source).readline):
            line = tok.start[0]
            if tok.type in (tokenize.COMMENT, tokenize.NL, tokenize.ENCODING, tokenize.ENDMARKER):
                continue
            if line in docstrings and tok.type in (tokenize.STRING, tokenize.NEWLINE):
                continue
            if tok.type == tokenize.NAME:
                kept = keyword.iskeyword(tok.string) or tok.string in BUILTINS or previous == "."
                text = tok.string if kept else "V"
            elif tok.type == tokenize.NUMBER:
                text = "0"
            elif tok.type == tokenize.STRING:
                text = "S"
            elif tok.type == tokenize.NEWLINE:
                text = ";"
            elif tok.type == tokenize.INDENT:
                text = "{"
            elif tok.type == tokenize.DEDENT:
                text = "}"
            else:
                text = tok.string
            out.append((text, line))
            previous = tok.string
    except (tokenize.TokenError, IndentationError, SyntaxError):
        return []
    return out


def fingerprints(tokens: list[tuple[str, int]], k: int = K, window: int = WINDOW) -> dict[int, tuple[int, int]]:
    """Winnowed fingerprints: hash -> (first line, last line) of the k-gram it was taken from."""
    grams = []
    for i in range(len(tokens) - k + 1):
        text = " ".join(t for t, _ in tokens[i:i + k])
        grams.append((int.from_bytes(hashlib.blake2b(text.encode(), digest_size=8).digest(), "big"),
                      tokens[i][1], tokens[i + k - 1][1]))
    if not grams:
        return {}
    picked: dict[int, tuple[int, int]] = {}
    for start in range(max(1, len(grams) - window + 1)):
        chunk = grams[start:start + window]
        low = min(h for h, _, _ in chunk)
        h, first, last = [g for g in chunk if g[0] == low][-1]  # rightmost minimum, as in the paper
        picked.setdefault(h, (first, last))
    return picked


# ---------------------------------------------------------------------------------------------- units


@dataclass
class Unit:
    """One function (or kernel) to compare: where it comes from and its fingerprints."""
    kind: str             # "submission", "solution" or "package"
    owner: str            # the learner; "solution"; the module's path in the package
    exercise: str         # its exercise id ("" for package code)
    name: str             # the function's name
    where: str            # the notebook (submissions) or file
    lines: list[str]      # the function's source lines
    first: int            # line number of lines[0] in fingerprints' numbering
    prints: dict[int, tuple[int, int]]
    own: set[int] = field(default_factory=set)          # minus the skeleton
    distinctive: set[int] = field(default_factory=set)  # minus the skeleton and the exercise's solution

    @property
    def label(self) -> str:
        if self.kind == "package":
            return f"softmax_lab/{self.owner}:{self.name}"
        if self.kind == "solution":
            return f"solution of {self.exercise}:{self.name}"
        return f"{self.owner}:{self.exercise}:{self.name}"


def functions(source: str) -> list[tuple[str, int, int]]:
    """(name, first line, last line) of each function of ``source``: top-level ones and methods, decorators
    included ([] when it does not parse)."""
    try:
        tree = ast.parse(source)
    except (SyntaxError, ValueError):
        return []
    found = []
    for node in tree.body:
        members = node.body if isinstance(node, ast.ClassDef) else [node]
        for fn in members:
            if isinstance(fn, (ast.FunctionDef, ast.AsyncFunctionDef)):
                start = min([fn.lineno] + [d.lineno for d in fn.decorator_list])
                found.append((fn.name if node is fn else f"{node.name}.{fn.name}", start, fn.end_lineno))
    return found


def units_of(source: str, kind: str, owner: str, exercise: str, where: str) -> list[Unit]:
    """One Unit per function of ``source``; fingerprints are taken on the whole source (so line numbers are the
    file's) and each unit keeps those whose k-gram lies inside it."""
    prints = fingerprints(normalised_tokens(source))
    lines = source.split("\n")
    out = []
    for name, first, last in functions(source):
        mine = {h: span for h, span in prints.items() if first <= span[0] and span[1] <= last}
        out.append(Unit(kind, owner, exercise, name, where, lines[first - 1:last], first, mine))
    return out


def cell_prints(source: str) -> set[int]:
    return set(fingerprints(normalised_tokens(source)))


def package_units(package: Path = PACKAGE) -> list[Unit]:
    """Every function of every module of the package (tests and notebooks excepted: the package only)."""
    units = []
    for path in sorted(Path(package).rglob("*.py")):
        rel = path.relative_to(package).as_posix()
        units += units_of(path.read_text(encoding="utf-8"), "package", rel, "", rel)
    return units


def _exercise_cells(nb, names: dict[str, str] | None = None) -> dict[str, str]:
    """exercise id -> the source of its cell: the cell tagged ``exercise:<id>``, or else (a tag lost) the first
    code cell defining one of the functions the exercise's skeleton defines (``names``: function -> id)."""
    out, untagged = {}, []
    for cell in nb.get("cells", []):
        if cell.get("cell_type") != "code":
            continue
        tags = cell.get("metadata", {}).get("tags", [])
        ident = next((t[len("exercise:"):] for t in tags if t.startswith("exercise:")), None)
        src = cell.get("source", "")
        src = "".join(src) if isinstance(src, list) else src
        if ident:
            out.setdefault(ident, src)
        else:
            untagged.append(src)
    for src in untagged if names else []:
        for name, _, _ in functions(src):
            ident = names.get(name)
            if ident and ident not in out:
                out[ident] = src
                break
    return out


@dataclass
class Course:
    """What the submissions are compared with: the package's functions and, per exercise, the solution's
    functions, the skeleton's fingerprints (the blank cell) and the solution's."""
    package: list[Unit]
    solutions: list[Unit]
    skeleton: dict[str, set[int]]
    expected: dict[str, set[int]]
    names: dict[str, str] = field(default_factory=dict)  # a function the skeleton defines -> its exercise


def load_course(solutions: Path, package: Path = PACKAGE) -> Course:
    from ..course.notebook import read, solution_paths, strip_solutions

    sol_units, skeleton, expected = [], {}, {}
    for path in solution_paths(Path(solutions)):
        for ident, source in _exercise_cells(read(path)).items():
            skeleton[ident] = cell_prints(strip_solutions(source, "code", ident))
            expected[ident] = cell_prints(source)
            for unit in units_of(source, "solution", "solution", ident, path.name):
                unit.own = set(unit.prints) - skeleton[ident]
                sol_units.append(unit)
    names = {u.name: u.exercise for u in sol_units}
    return Course(package_units(package), sol_units, skeleton, expected, names)


def submission_units(learner: str, path: Path, course: Course, name: str | None = None) -> tuple[list[Unit], list[str]]:
    """The functions of a submitted notebook's exercise cells, and notes on what could not be read. ``name``: the
    submission's name in the gradebook (default: the file name)."""
    from .chapters import InvalidNotebook, read_submission

    try:  # as the grader reads it: a regular file only, size, cell count and nesting depth checked first
        nb = read_submission(Path(path))
    except InvalidNotebook as err:
        return [], [f"{name or Path(path).name}: not a readable notebook, not compared ({err})"]
    units, notes = [], []
    cells = _exercise_cells(nb, course.names)
    if not cells:
        notes.append(f"{learner}: {Path(path).name}: no exercise cell (tagged exercise:<id> or defining an "
                     "exercise's function); nothing compared")
    for ident, source in cells.items():
        found = units_of(source, "submission", learner, ident, name or Path(path).name)
        if not found and source.strip():
            notes.append(f"{learner}: {ident}: the cell does not parse as Python; not compared")
        for unit in found:
            unit.own = set(unit.prints) - course.skeleton.get(ident, set())
            unit.distinctive = unit.own - course.expected.get(ident, set())
            units.append(unit)
    return units, notes


# ---------------------------------------------------------------------------------------------- pairs


@dataclass
class Match:
    unit: Unit
    other: Unit
    matched: set[int]
    base: int             # the fingerprints the similarity is a share of
    threshold: float = THRESHOLD

    @property
    def similarity(self) -> float:
        return len(self.matched) / self.base if self.base else 0.0

    @property
    def flagged(self) -> bool:
        return len(self.matched) >= MIN_MATCH and self.similarity >= self.threshold

    def line_numbers(self, unit: Unit) -> list[int]:
        rows = set()
        for h in self.matched:
            first, last = unit.prints[h]
            rows.update(range(first, last + 1))
        return sorted(rows)


def _ranges(numbers: list[int]) -> str:
    out, start = [], None
    for k, n in enumerate(numbers):
        if start is None:
            start = n
        if k + 1 == len(numbers) or numbers[k + 1] != n + 1:
            out.append(f"{start}" if start == n else f"{start}-{n}")
            start = None
    return ", ".join(out)


def compare(units: list[Unit], course: Course, threshold: float = THRESHOLD, common: int = COMMON) -> list[Match]:
    """The best match of each submitted function with the package, with the solutions and with classmates."""
    best: list[Match] = []
    by_exercise: dict[str, list[Unit]] = {}
    for u in units:
        by_exercise.setdefault(u.exercise, []).append(u)
    shared: dict[int, set[str]] = {}
    for u in units:
        for h in u.distinctive:
            shared.setdefault(h, set()).add(u.owner)
    frequent = {h for h, owners in shared.items() if len(owners) > common}
    for u in units:
        candidates = []
        if u.distinctive:
            candidates += [Match(u, p, u.distinctive & set(p.prints), len(u.distinctive), threshold)
                           for p in course.package]
        for s in course.solutions:
            mine = u.own if s.exercise == u.exercise else u.distinctive
            if mine:
                candidates.append(Match(u, s, mine & set(s.prints), len(mine), threshold))
        mine = u.distinctive - frequent
        for v in by_exercise[u.exercise]:
            theirs = v.distinctive - frequent
            if v.owner != u.owner and mine and theirs:
                candidates.append(Match(u, v, mine & theirs, min(len(mine), len(theirs)), threshold))
        for kind in ("package", "solution", "submission"):
            mine_kind = [m for m in candidates if m.other.kind == kind and m.matched]
            if mine_kind:
                best.append(max(mine_kind, key=lambda m: (m.similarity, len(m.matched), m.other.label)))
    return best


def _row(unit: Unit, match: Match | None, note: str = "") -> dict:
    return {
        "learner": unit.owner, "submission": unit.where, "exercise": unit.exercise, "function": unit.name,
        "kind": match.other.kind if match else "", "match": match.other.label if match else "",
        "similarity": round(match.similarity, 2) if match else 0.0,
        "matched": len(match.matched) if match else 0, "own": len(unit.own),
        "flagged": bool(match and match.flagged),
        "lines": _ranges(match.line_numbers(unit)) if match else "",
        "match_lines": _ranges(match.line_numbers(match.other)) if match else "", "note": note}


def _short_note(unit: Unit) -> str:
    if len(unit.own) < MIN_MATCH:
        return f"only {len(unit.own)} fingerprint(s) of the learner's own: too little code to judge"
    return ""


def similarity_rows(submissions, solutions: Path | None = None, threshold: float = THRESHOLD,
                    common: int = COMMON, course: Course | None = None) -> list[dict]:
    """One row per submitted function and kind of match (package, solution, submission), columns ``COLUMNS``.

    ``submissions``: objects with ``.learner``, ``.path`` and ``.name`` (grading.submissions.Submission: the
    ``submission`` column is its name, as in the gradebook) or (learner, path) pairs (the file name).
    ``flagged`` is True for a pair above ``threshold`` with at least ``MIN_MATCH`` fingerprints in
    common; ``lines``/``match_lines`` are the matching lines of each side (numbered within the cell or file)."""
    rows, _ = _analyse(submissions, solutions, threshold, common, course)
    return rows


def flags(rows: list[dict]) -> dict[tuple[str, str, str], str]:
    """The gradebook's column: (learner, submission, exercise) -> "kind match similarity" of each flagged pair,
    "; "-joined (absent: nothing flagged)."""
    out: dict[tuple[str, str, str], list[str]] = {}
    for r in rows:
        if r["flagged"]:
            out.setdefault((r["learner"], r["submission"], r["exercise"]), []).append(
                f"{r['kind']} {r['match']} {r['similarity']:.0%}")
    return {key: "; ".join(v) for key, v in out.items()}


def _analyse(submissions, solutions, threshold, common, course):
    if course is None:
        if solutions is None:
            from ..course.notebook import repo_root

            solutions = repo_root() / "solutions"
        course = load_course(solutions)
    units, notes = [], []
    for sub in submissions:
        learner, path = (sub.learner, sub.path) if hasattr(sub, "learner") else sub
        found, problems = submission_units(learner, Path(path), course, getattr(sub, "name", None))
        units += found
        notes += problems
    matches = compare(units, course, threshold, common)
    by_unit: dict[int, list[Match]] = {}
    for m in matches:
        by_unit.setdefault(id(m.unit), []).append(m)
    rows = []
    for u in units:
        mine = by_unit.get(id(u), [])
        if not mine:
            rows.append(_row(u, None, _short_note(u) or "no match"))
        rows += [_row(u, m, _short_note(u)) for m in mine]
    return rows, (matches, notes)


# ------------------------------------------------------------------------------------------ the report


def report(matches: list[Match], notes: list[str], threshold: float) -> str:
    flagged, seen = [], set()
    for m in sorted((m for m in matches if m.flagged), key=lambda m: (-m.similarity, m.unit.owner, m.unit.exercise)):
        pair = frozenset((id(m.unit), id(m.other)))
        if pair not in seen:  # two classmates: one entry for the pair (each has its own row in the CSV)
            seen.add(pair)
            flagged.append(m)
    out = [f"Similarity report: {len(flagged)} flagged pair(s) (similarity >= {threshold:.0%} with at least "
           f"{MIN_MATCH} fingerprints in common; k = {K} tokens, window {WINDOW}).", ""]
    for m in flagged:
        out.append(f"{m.unit.label} ({m.unit.where}) ~ {m.other.label} ({m.other.where}): {m.similarity:.0%} "
                   f"({len(m.matched)} of {m.base} fingerprints)")
        for side in (m.unit, m.other):
            out.append(f"  {side.label}:")
            for n in m.line_numbers(side)[:20]:
                text = side.lines[n - side.first] if 0 <= n - side.first < len(side.lines) else ""
                out.append(f"    {n:4d} | {text}")
        out.append("")
    if not flagged:
        out.append("No pair above the threshold.")
    out += [f"note: {n}" for n in notes]
    return "\n".join(out) + "\n"


def add_arguments(ap: argparse.ArgumentParser) -> None:
    ap.add_argument("paths", nargs="+", type=Path, help="submitted notebooks, or folders of them")
    ap.add_argument("--out", type=Path, default=Path("."), help="folder for similarity.csv and similarity.txt")
    ap.add_argument("--solutions", type=Path, default=None, help="solution notebooks (default: this checkout's)")
    ap.add_argument("--roster", type=Path, default=None, help="CSV of learner ids (as for softmax-lab grade)")
    ap.add_argument("--threshold", type=float, default=THRESHOLD, help=f"flag at this similarity (default {THRESHOLD})")
    ap.add_argument("--common", type=int, default=COMMON,
                    help=f"ignore code shared by more than this many learners (default {COMMON})")


def run(args: argparse.Namespace) -> int:
    from ..course.notebook import BuildError
    from .submissions import discover, read_roster

    missing = [str(p) for p in args.paths if not p.exists()]
    if missing:
        print(f"softmax-lab similarity: no such file or folder: {', '.join(missing)}", file=sys.stderr)
        return 2
    if not 0 < args.threshold <= 1:
        print("softmax-lab similarity: --threshold is a share between 0 and 1 (e.g. 0.5)", file=sys.stderr)
        return 2
    try:
        roster = read_roster(args.roster) if args.roster else []
        subs, refused = discover(args.paths, roster)
        rows, (matches, notes) = _analyse(subs, args.solutions, args.threshold, args.common, None)
    except (BuildError, OSError, ValueError) as err:
        print(f"softmax-lab similarity: {err}", file=sys.stderr)
        return 2
    notes += [f"{r.name}: refused ({getattr(r, 'learner', '')})" for r in refused]
    args.out.mkdir(parents=True, exist_ok=True)
    with open(args.out / "similarity.csv", "w", encoding="utf-8", newline="") as f:
        writer = csv.DictWriter(f, fieldnames=COLUMNS)
        writer.writeheader()
        writer.writerows(rows)
    text = report(matches, notes, args.threshold)
    (args.out / "similarity.txt").write_text(text, encoding="utf-8")
    print(text.split("\n", 1)[0])
    print(f"wrote {args.out / 'similarity.csv'} ({len(rows)} rows) and {args.out / 'similarity.txt'}")
    return 0
