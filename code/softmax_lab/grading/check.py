"""`softmax-lab check` (learners): check a saved notebook with the course's own checks, graded as `grade` would.

    softmax-lab check 02_masks_and_padding.ipynb

A bare name is looked for where the learner is, then in the course's workspace/; the notebook is graded by
``grader.py`` in the same sandbox as `grade` (a learner's own workspace/ notebook may run without one where
bubblewrap cannot work, ``options.py``) and printed as points and FAIL lines per exercise.
"""
from __future__ import annotations

import argparse
import difflib
import re
import sys
from pathlib import Path

from .chapters import Chapter, InvalidNotebook, match_chapter, read_submission
from .hints import ANSWER_NOTE
from .grader import SubmissionResult, grade_notebook
from .options import add_common_arguments, default_solutions, options
from .rows import safe_line
from .scoring import PARTS_LINE


def add_arguments(ap: argparse.ArgumentParser) -> None:
    ap.add_argument("notebooks", nargs="+", type=Path, metavar="NOTEBOOK",
                    help="your saved notebook, e.g. 02_masks_and_padding.ipynb: looked for where you are, then in "
                         "the course's workspace/")
    ap.usage = "softmax-lab check [-h] NOTEBOOK [NOTEBOOK ...] [instructor options]"
    ap.epilog = "Save the notebook first (Ctrl+S): the saved file is what is checked."
    add_common_arguments(ap.add_argument_group(
        "instructor options", "for instructors and course authors; learners never need them"))


GONE = ("softmax-lab check: the folder you are in no longer exists (your workspace was deleted?): on the class hub, "
        "get a fresh workspace by stopping and starting your server (File > Hub Control Panel > Stop My Server, then "
        "Start My Server; your other files are kept); on your own computer, run `softmax-lab workspace`, then cd into "
        "the new workspace/")


def run(args: argparse.Namespace) -> int:
    try:
        Path.cwd()
    except FileNotFoundError:  # a learner deleted the folder their terminal is in (~/softmax-lab/workspace)
        print(GONE, file=sys.stderr)
        return 2
    found = []
    for given in args.notebooks:  # before the solutions are read: a wrong name is answered at once
        path, problem = find_notebook(given)
        if problem:
            print(f"softmax-lab check: {problem}", file=sys.stderr)
        else:
            found.append(path)
    if not found:
        return 1
    if args.solutions is None and default_solutions() is None:
        print("softmax-lab check: the course's solutions/ are not here (installed without the course checkout): "
              "run each exercise's check cell in the notebook, or pass --solutions DIR", file=sys.stderr)
        return 2
    all_ok = len(found) == len(args.notebooks)
    args.notebooks = found  # the files found (workspace/NAME for a bare name): the sandbox policy judges these
    opts, chapters = options(args, learner=True)
    for path in found:
        problem = readable_problem(path, chapters)
        if problem:
            print(f"softmax-lab check: {safe_line(problem)}", file=sys.stderr)
            all_ok = False
            continue
        print(f"checking {safe_line(str(path))} ({_saved_when(path)}): a fresh kernel runs it with the course's own "
              "checks ...", flush=True)
        res = grade_notebook(path, path.name, chapters, opts)
        print_check(path, res)
        all_ok &= all(r["status"] == "passed" for r in res.rows)
    return 0 if all_ok else 1


def find_notebook(given: Path, cwd: Path | None = None) -> tuple[Path | None, str]:
    """The notebook `softmax-lab check NAME` grades, and '' (or None and one line naming the fix).

    NAME as given, else ``workspace/NAME`` of the course checkout found from ``cwd``: learners work in
    workspace/ (``softmax_lab.lab``), and notebooks/ holds the course's blank copies, never their work."""
    from ..course.notebook import BuildError, repo_root

    cwd = Path.cwd() if cwd is None else cwd
    path = given if given.is_absolute() else cwd / given
    try:
        root = repo_root(cwd, learner=True)  # the source edition, or the class edition (a class hub's ~/softmax-lab)
    except BuildError:
        try:
            root = repo_root(learner=True)  # the checkout this package is installed from (make lab's editable install)
        except BuildError:
            root = None
    workspace = root / "workspace" if root else None
    if path.is_dir():
        inside = sorted(path.glob("*.ipynb")) or (sorted(workspace.glob("*.ipynb")) if workspace else [])
        example = _shown(inside[0], cwd) if inside else "02_masks_and_padding.ipynb"
        return None, f"{given} is a folder: name the notebook, e.g. softmax-lab check {example}"
    if path.is_file():
        mine = workspace / path.name if workspace else None
        if root and path.resolve().parent == (root / "notebooks").resolve() and mine and mine.is_file():
            return None, (f"{given} is the course's blank copy, not your work: yours is {_shown(mine, cwd)} "
                          f"(softmax-lab check {_shown(mine, cwd)})")
        return path, ""
    if workspace is not None and not given.is_absolute() and (workspace / given).is_file():
        return workspace / given, ""
    if workspace is not None and not workspace.is_dir():
        return None, (f"no notebook {given} here, and no {workspace} (deleted? or `make lab` never ran): "
                      "`softmax-lab workspace` copies the chapters there")
    folders = [cwd] + ([workspace] if workspace is not None and workspace.resolve() != cwd.resolve() else [])
    names = sorted({p.name for f in folders for p in f.glob("*.ipynb")})
    near = _nearest(given.name, names)
    if near:
        fix = f"did you mean {near[0]}?"
    elif names:
        fix = f"the notebooks there: {', '.join(names[:4])}{' ...' if len(names) > 4 else ''}"
    else:
        fix = "name the path of your saved notebook"
    return None, f"no notebook {given} in {' or '.join(map(str, folders))}: {fix}"


def _nearest(name: str, names: list[str]) -> list[str]:
    """The notebook a learner most likely meant: the chapter whose number they typed ("3", "ch02", "03.ipynb"),
    else a close spelling ("02_masks_and_paddng.ipynb"); nothing when neither is close."""
    number = re.fullmatch(r"(?:ch(?:apter)?[ _-]?)?0*(\d{1,2})(?:\.ipynb)?", name.lower())
    if number:
        return [n for n in names if re.match(rf"0*{int(number.group(1))}_", n)][:1]
    return difflib.get_close_matches(name, names, n=1, cutoff=0.75)


def _shown(path: Path, cwd: Path) -> str:
    """``path`` relative to ``cwd`` when inside it (what a learner would type), else absolute."""
    try:
        return str(path.resolve().relative_to(cwd.resolve()))
    except ValueError:
        return str(path)


def _saved_when(path: Path) -> str:
    import time

    age = max(0, int(time.time() - path.stat().st_mtime))
    ago = f"{age} s" if age < 120 else f"{age // 60} min" if age < 7200 else f"{age // 3600} h"
    return f"saved {time.strftime('%H:%M:%S', time.localtime(path.stat().st_mtime))}, {ago} ago"


def readable_problem(path: Path, chapters: dict[str, Chapter]) -> str:
    """One line naming the fix when ``path`` cannot be checked at all (not a notebook, not of this course, no
    exercise cells), else ''. Reading it never changes it."""
    from .chapters import _tagged

    try:
        nb = read_submission(path)
    except InvalidNotebook as err:
        from .chapters import DAMAGED

        saved = path.parent / ".ipynb_checkpoints" / f"{path.stem}-checkpoint.ipynb"
        if saved.is_file():
            fix = f"JupyterLab's last checkpoint of it is {saved}"
        elif any(path.name == c.path.name for c in chapters.values()):
            fix = "rename it, and `softmax-lab workspace` copies a fresh blank one"
        else:
            fix = "open the notebook you meant, or re-download this one"
        return f"{path.name} is not a readable notebook ({str(err).replace(f' ({DAMAGED})', '')}); {fix}"
    chapter, note = match_chapter(nb, path, chapters)
    if chapter is None:
        return f"{path.name} is not a notebook of this course ({note}): check one of the NN_*.ipynb chapters"
    if chapter.exercises and not _tagged(nb, "exercise:"):
        return (f"{path.name} has no exercise cells ({chapter.label()}'s cells tagged exercise:...; deleted, or "
                f"their tags removed?): copy them back from notebooks/{chapter.path.name}")
    if not chapter.exercises:
        return f"{chapter.label()} has no exercises to check; its questions are graded by your instructor"
    return ""


def print_check(path: Path, res: SubmissionResult) -> None:
    """A learner's view of one graded notebook: points, status, hints used and the FAIL lines per exercise."""
    got = sum(float(r["points"]) for r in res.rows)
    total = sum(float(r["max_points"]) for r in res.rows)
    title = res.chapter.label() if res.chapter else "unknown chapter"
    print(f"{safe_line(path.name)}: {title}: {got:g}/{total:g} points")
    width = max([len(r["exercise"]) for r in res.rows] + [8])
    for r in res.rows:
        hint = f"  (hints used: up to level {r['hints']})" if r.get("hints") else ""
        print(f"  {r['exercise'] or '-':<{width}}  {r['points']:>4}/{r['max_points']:<4} {r['status']}{hint}")
        if r["status"] != "passed" and r["message"]:
            for line in r["message"].splitlines():
                print(f"      {line}")
        elif r["message"]:  # a passed exercise: which of seed 002's parts it earned, the answer hint's cap
            for line in r["message"].splitlines():
                if line.startswith((PARTS_LINE, ANSWER_NOTE)):
                    print(f"      {line}")
    if res.chapter and res.chapter.questions:
        print(f"  free-text questions ({', '.join(q.id for q in res.chapter.questions)}) are graded by your "
              "instructor")
