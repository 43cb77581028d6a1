"""Submissions: the notebooks under the folders given, who handed each in (a roster, folder or file names).

Layouts (docs/grading.md, "Submissions folder"): one folder per learner (nbgrader's ``submitted/<learner>/
<assignment>/`` too), or files named after learners. Symbolic links are refused, never followed.
"""
from __future__ import annotations

import csv
import os
from dataclasses import dataclass
from pathlib import Path


@dataclass
class Submission:
    path: Path
    name: str      # the gradebook's `submission` column: the path relative to the submissions folder
    learner: str


ID_COLUMNS = ("learner", "id", "username", "student")
NAME_COLUMNS = ("name", "display_name", "full_name")


def _roster_rows(path: Path) -> tuple[str, list[dict]]:
    with open(path, encoding="utf-8-sig", newline="") as f:
        reader = csv.DictReader(f)
        fields = reader.fieldnames or []
        col = next((c for c in ID_COLUMNS if c in fields), fields[0] if fields else None)
        if col is None:
            raise ValueError(f"{path}: empty roster")
        return col, [r for r in reader if (r.get(col) or "").strip()]


def read_roster(path: Path) -> list[str]:
    """Learner ids from a roster CSV: the column `learner` (or `id`, `username`, `student`, else the first). An id
    listed twice is refused (two learners would share one row); two learners may share a display name."""
    col, rows = _roster_rows(path)
    ids = [r[col].strip() for r in rows]
    twice = sorted({i for i in ids if ids.count(i) > 1})
    if twice:
        raise ValueError(f"learner id(s) listed more than once: {', '.join(twice[:10])} (each learner needs an id of "
                         "their own; two learners may share a name, never an id)")
    return ids


def roster_names(path: Path) -> dict[str, str]:
    """Learner id -> display name (column `name`, `display_name` or `full_name`), for the feedback pages."""
    col, rows = _roster_rows(path)
    name_col = next((c for c in NAME_COLUMNS if c in rows[0]), None) if rows else None
    return {r[col].strip(): (r.get(name_col) or "").strip() for r in rows} if name_col else {}


def _learner_of(rel: Path, roster: list[str]) -> str:
    rel = Path(_display_name(rel))
    if len(rel.parts) > 1:
        guess = rel.parts[0]
        if not roster or guess in roster:
            return guess
    stem = rel.stem if len(rel.parts) == 1 else rel.parts[0]
    for rid in sorted(roster, key=len, reverse=True):  # files named after learners: alice.ipynb, alice_02.ipynb
        if stem == rid or (stem.startswith(rid) and stem[len(rid)] in "_-. "):
            return rid
    return stem


def _display_name(rel: Path) -> str:
    """A path for the gradebook: any undecodable byte of a file name shown as \\xNN (never a crash)."""
    text = rel.as_posix().encode("utf-8", "surrogateescape").decode("utf-8", "backslashreplace")
    # control, bidi and other invisible characters would forge lines or retitle an instructor's terminal
    return "".join(ch if ch.isprintable() else f"\\u{ord(ch):04x}" for ch in text)


def discover(paths: list[Path], roster: list[str]) -> tuple[list[Submission], list[Submission]]:
    """Every notebook under the given files and folders (hidden folders such as .ipynb_checkpoints skipped).

    Returns (submissions, refused): symbolic links and files that are not regular are refused (listed with
    a reason, never followed: a link could point at the solutions or another learner's notebook)."""
    files: list[tuple[Path, Path]] = []
    refused: list[Submission] = []
    if len(paths) == 1 and paths[0].is_dir():
        base = paths[0].resolve()
    else:  # names relative to the folder holding them all: alice/ bob/ -> alice/..., bob/...
        base = Path(os.path.commonpath([str(p.resolve().parent) for p in paths]))
    for p in paths:
        if p.is_dir():
            for root, dirs, names in os.walk(p, followlinks=False):
                rel_root = Path(root).relative_to(p)
                for d in list(dirs):
                    if d.startswith(".") or os.path.islink(os.path.join(root, d)):
                        if os.path.islink(os.path.join(root, d)) and not d.startswith("."):
                            rel = Path(os.path.abspath(os.path.join(root, d))).relative_to(base)
                            refused.append(Submission(Path(root) / d, _display_name(rel), _learner_of(rel, roster)))
                        dirs.remove(d)
                dirs.sort()
                for n in sorted(names):
                    if not n.endswith(".ipynb") or n.startswith("."):
                        continue
                    f = Path(root) / n
                    rel = Path(os.path.abspath(f)).relative_to(base)
                    if f.is_symlink() or not f.is_file():
                        refused.append(Submission(f, _display_name(rel), _learner_of(rel, roster)))
                        continue
                    files.append((f, rel))
                del rel_root
        elif p.exists():
            files.append((p, p.resolve().relative_to(base)))
        else:
            raise FileNotFoundError(p)
    seen, out = set(), []
    for f, rel in files:
        name = _display_name(rel)
        if name in seen:
            continue
        seen.add(name)
        out.append(Submission(f, name, _learner_of(Path(name), roster)))
    return out, refused


def other_assignment(sub: Submission, chapter: str, chapters) -> bool:
    """In nbgrader's layout, a notebook in an assignment folder that names another chapter (e.g.
    alice/softmax-lab-03/03_naive_kernel.ipynb when grading 02) is another assignment: not graded here."""
    parts = Path(sub.name).parts
    if len(parts) < 3:
        return False
    prefix = Path(sub.name).name.split("_")[0]
    return prefix in chapters and prefix != chapter


def other_chapter_notebooks(subs: list[Submission], chapter: str, chapters) -> dict[str, str]:
    """With ``--chapter``: the notebooks that are plainly another chapter's (by their metadata, or their exercise
    cells) of learners who also handed in one for this chapter. They are not graded here (no false "missing" rows,
    no false duplicates); a learner whose only notebook is another chapter's keeps it, graded as a clear row."""
    from .chapters import InvalidNotebook, match_chapter, read_submission

    found: dict[str, str] = {}
    mine: dict[str, bool] = {}
    for s in subs:
        try:
            nb = read_submission(s.path)
        except InvalidNotebook:
            mine[s.learner] = True  # unreadable: graded here, with its own row
            continue
        ch, _ = match_chapter(nb, s.path, chapters)
        if ch is not None and ch.chapter != chapter:
            found[s.name] = f"it is {ch.label()}; grading chapter {chapter}"
        else:
            mine[s.learner] = True
    return {n: why for n, why in found.items() if mine.get(next(s.learner for s in subs if s.name == n))}
