"""`softmax-lab collect` (instructors): copy the chapters from the hub's learners' workspaces into a folder to grade.

    softmax-lab collect --out submissions/                        # every /home/*/softmax-lab/workspace
    softmax-lab collect --out submissions/ --roster roster.csv --chapter 02
    softmax-lab collect --out submissions/ --update               # later: bring in what changed since
    softmax-lab grade submissions/ --out grades/gradebook.csv     # then grade them

It writes one folder per learner, ``OUT/<learner>/<chapter>.ipynb``: the layout `softmax-lab grade` reads. Only the
class edition's chapter notebooks are taken (not the ``.new-*`` copies or the learner's own extra notebooks), byte
for byte; links are refused, never followed (the collector runs as root and could be pointed at anyone's file). A
folder holds one collection: a second one into it needs ``--update``, which replaces the notebooks that changed and
keeps each replaced copy under ``OUT/.replaced/`` (hidden, so it is never graded twice). docs/hub.md explains why this
and not nbgrader's exchange.
"""
from __future__ import annotations

import argparse
import contextlib
import glob
import hashlib
import json
import os
import signal
import sys
import threading
import time
from dataclasses import dataclass, field
from pathlib import Path

from .lock import Lock, LockError
from .streams import read_regular
from .submissions import read_roster

WORKSPACES = "/home/{learner}/softmax-lab/workspace"  # where deploy/start-learner puts each learner's workspace
MANIFEST = ".collected.json"
LOCK = ".collect.lock"
REPLACED = ".replaced"
TMP = ".tmp"
SAVE_EVERY_S = 5.0  # while copying, the manifest is written again this often
MAX_BYTES = 64 * 1024 * 1024  # a chapter notebook with its outputs is far smaller; anything bigger is not one


class CollectError(Exception):
    """The whole collection cannot go on (the message says why); nothing was written."""


@dataclass
class Report:
    copied: list[str] = field(default_factory=list)
    replaced: list[str] = field(default_factory=list)
    unchanged: list[str] = field(default_factory=list)
    problems: list[str] = field(default_factory=list)  # one line each: a learner or notebook not collected
    resumed: str = ""  # the start of the stopped collection this run finished, if it did


def find_workspaces(patterns: list[str], roster: list[str]) -> tuple[dict[str, tuple[Path, Path]], list[str]]:
    """Each learner's workspace from the ``{learner}`` patterns (every match, or the roster's learners).

    Returns ({learner: (workspace, the learner's own folder)}, problems): a learner with no workspace (deleted, or
    never logged in), two workspaces, or a name that cannot be a folder of the collection is a problem line, and is
    not collected."""
    found: dict[str, list[tuple[Path, Path]]] = {}
    missing: dict[str, list[str]] = {}
    for pattern in patterns:
        if pattern.count("{learner}") != 1:
            raise CollectError(f"--workspaces {pattern!r} must contain {{learner}} once (e.g. {WORKSPACES})")
        prefix, suffix = pattern.split("{learner}")
        if roster:
            names = roster
        else:  # everyone with a learner's folder there (e.g. /home/*/softmax-lab), so a deleted workspace is named
            marker = glob.escape(prefix) + "*" + glob.escape(os.path.dirname(suffix))  # /home/*/softmax-lab
            names = sorted({m[len(prefix):].split("/")[0] for m in glob.glob(marker)})
        for learner in names:
            if not learner or "/" in learner:
                continue
            path = Path(pattern.replace("{learner}", learner))
            if os.path.lexists(path):
                found.setdefault(learner, []).append((path, Path(prefix + learner)))
            else:
                missing.setdefault(learner, []).append(str(path))
    problems, workspaces = [], {}
    for learner, places in sorted(missing.items()):
        if learner not in found:
            problems.append(f"{learner}: no workspace at {' or '.join(places)} (deleted, or never logged in): "
                            "nothing collected")
    by_folder: dict[str, list[str]] = {}
    for learner in found:
        by_folder.setdefault(learner.casefold(), []).append(learner)
    for learner, places in sorted(found.items()):
        same = sorted(n for n in by_folder[learner.casefold()] if n != learner)
        if len(places) > 1:
            problems.append(f"{learner}: two workspaces ({', '.join(str(p) for p, _ in places)}): collected neither; "
                            "collect each hub into its own folder")
        elif same:
            problems.append(f"{learner}: same name as {', '.join(same)} but for upper/lower case (one folder on many "
                            "file systems): collected neither; collect them into separate folders")
        elif learner.startswith("."):
            problems.append(f"{learner}: a name `softmax-lab grade` would skip as hidden: not collected")
        else:
            workspaces[learner] = places[0]
    return workspaces, problems


def _no_links(path: Path, below: Path) -> str:
    """'' when no folder from ``below`` down to ``path`` is a symbolic link, else the first that is."""
    parts = path.relative_to(below).parts if path != below else ()
    current = below
    for part in ("",) + parts:
        current = current / part if part else current
        if os.path.islink(current):
            return str(current)
    return ""


def read_notebook(path: Path) -> bytes:
    """The bytes of a learner's notebook, refusing links, odd files and anything too big to be a chapter."""
    return read_regular(path, MAX_BYTES)


def _private_folder(path: Path) -> None:
    """``path``, and each folder above it that this makes, for the collector only (mode 700, whatever the umask)."""
    missing = [p for p in (path, *path.parents) if not p.exists()]
    for folder in reversed(missing):
        folder.mkdir(mode=0o700)
        os.chmod(folder, 0o700)
    os.chmod(path, 0o700)


def _write_atomically(path: Path, data: bytes, before=None) -> None:
    """Write ``data`` to ``path`` as a private file (mode 600, whatever the umask): learners' work is theirs. The
    bytes go to a hidden temporary file first; ``before()`` runs once they are all written, just before the rename
    (``--update`` moves the old copy aside there, so OUT never lacks the notebook). A stop removes the temporary."""
    _private_folder(path.parent)
    tmp = path.with_name(f".{path.name}.{os.getpid()}{TMP}")
    try:
        fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
        with os.fdopen(fd, "wb") as f:
            os.fchmod(f.fileno(), 0o600)
            f.write(data)
        if before is not None:
            before()
        os.replace(tmp, path)
    except BaseException:
        tmp.unlink(missing_ok=True)
        raise


def _sweep_temporaries(out: Path) -> None:
    """Remove the hidden temporaries a run killed mid-write left (the lock is held: no other run is writing)."""
    for tmp in out.glob(f"*/.*{TMP}"):
        if tmp.is_file() and not tmp.is_symlink():
            tmp.unlink(missing_ok=True)


@contextlib.contextmanager
def _signals_held():
    """Ctrl-C, SIGTERM and SIGHUP wait while the manifest is written (a second Ctrl-C must not cut it short)."""
    held = {signal.SIGINT, signal.SIGTERM, signal.SIGHUP}
    if threading.current_thread() is not threading.main_thread():
        yield
        return
    old = signal.pthread_sigmask(signal.SIG_BLOCK, held)
    try:
        yield
    finally:
        signal.pthread_sigmask(signal.SIG_SETMASK, old)


class _Lock(Lock):
    """OUT/.collect.lock: one collection writes into a folder at a time (two instructors, two terminals)."""

    def __init__(self, out: Path):
        super().__init__(out / LOCK, "another collection", f"writing into {out}")

    def __enter__(self):
        try:
            return super().__enter__()
        except LockError as err:
            raise CollectError(str(err)) from None


def _sha(data: bytes) -> str:
    return hashlib.sha256(data).hexdigest()


def collect(patterns: list[str], out: Path, chapters: list[str], roster: list[str], update: bool) -> Report:
    """Copy each learner's chapter notebooks into ``out/<learner>/`` (see the module's opening)."""
    # OUT holds every learner's work: only the collector may enter it (collect runs as root, often somewhere every
    # account can read, e.g. beside the course), so no learner reads a classmate's notebook there.
    _private_folder(out)
    report = Report()
    with _Lock(out):
        manifest_path = out / MANIFEST
        try:
            manifest = json.loads(manifest_path.read_text(encoding="utf-8")) if manifest_path.exists() else None
        except ValueError:
            raise CollectError(f"{manifest_path} is damaged: collect into a new folder") from None
        if manifest is None and any(not p.name.startswith(".") for p in out.iterdir()):
            raise CollectError(f"{out} already holds files that no collection wrote: collect into a new (or empty) "
                               "folder, so that nothing of yours is mixed in or replaced")
        unfinished = bool(manifest and manifest.get("collections")
                          and manifest["collections"][-1].get("finished") is False)
        if manifest is not None and not update and not unfinished:
            last = manifest["collections"][-1]["time"] if manifest.get("collections") else "?"
            raise CollectError(f"{out} already holds a collection (made {last}): collect into a new folder, or add "
                               "--update to bring in what changed since "
                               f"(replaced copies are kept in {out / REPLACED})")
        manifest = manifest or {"collections": [], "files": {}}
        report.resumed = manifest["collections"][-1]["time"] if unfinished else ""
        stamp = time.strftime("%Y%m%d-%H%M%S")
        workspaces, report.problems = find_workspaces(patterns, roster)
        # The manifest is written first (OUT is a collection from now on), every few seconds while copying, and
        # at the end, however it ends: a stopped run leaves a manifest naming every copy made, and a rerun resumes.
        record = {"time": time.strftime("%Y-%m-%d %H:%M:%S %z"), "workspaces": patterns, "finished": False}
        manifest["collections"].append(record)
        _sweep_temporaries(out)
        saved = _save(manifest_path, manifest, record, report, False)
        finished = False
        try:
            for learner, (workspace, own) in sorted(workspaces.items()):
                _collect_learner(learner, workspace, own, chapters, out, stamp, manifest, report)
                if time.monotonic() - saved > SAVE_EVERY_S:
                    saved = _save(manifest_path, manifest, record, report, False)
            finished = True
        finally:
            with _signals_held():
                _save(manifest_path, manifest, record, report, finished)
    return report


def _collect_learner(learner, workspace: Path, own: Path, chapters, out: Path, stamp: str, manifest: dict,
                     report: Report) -> None:
    """Copy one learner's chapter notebooks (each recorded in ``manifest`` as it is written)."""
    link = _no_links(workspace, own)
    if link:
        report.problems.append(f"{learner}: {link} is a link: not followed, nothing collected")
        return
    if not workspace.is_dir():
        report.problems.append(f"{learner}: {workspace} is not a folder: nothing collected")
        return
    for name in chapters:
        src = workspace / name
        if not os.path.lexists(src):
            continue
        rel = f"{learner}/{name}"
        try:
            data = read_notebook(src)
        except OSError as err:
            reason = "a link: not followed" if os.path.islink(src) else (err.strerror or str(err))
            report.problems.append(f"{rel}: not collected ({src}: {reason})")
            continue
        dst = out / learner / name
        sha = _sha(data)
        if dst.exists():
            if _sha(dst.read_bytes()) == sha:
                report.unchanged.append(rel)
                if manifest["files"].get(rel, {}).get("sha256") != sha:  # copied by a run stopped before saving
                    manifest["files"][rel] = {"sha256": sha, "from": str(src), "collected": stamp}
                continue
            keep = out / REPLACED / stamp / learner / name
            _private_folder(keep.parent)
            _write_atomically(dst, data, before=lambda: os.replace(dst, keep))
            report.replaced.append(rel)
        else:
            _write_atomically(dst, data)
            report.copied.append(rel)
        manifest["files"][rel] = {"sha256": sha, "from": str(src), "collected": stamp}


def _save(path: Path, manifest: dict, record: dict, report: Report, finished: bool) -> float:
    """Write the manifest with this run's counts so far; returns when (time.monotonic)."""
    record.update(copied=len(report.copied), replaced=len(report.replaced), unchanged=len(report.unchanged),
                  problems=report.problems, finished=finished)
    _write_atomically(path, (json.dumps(manifest, indent=1, sort_keys=True) + "\n").encode())
    return time.monotonic()


def class_chapters(course: Path | None, chapter: str | None) -> list[str]:
    """The chapter notebooks' names of the class edition (one with ``chapter``)."""
    from ..course.notebook import BuildError, repo_root

    try:
        root = course or repo_root()
    except BuildError as err:
        raise CollectError(str(err)) from None
    names = sorted(p.name for p in (root / "notebooks").glob("[0-9][0-9]_*.ipynb"))
    if not names:
        raise CollectError(f"{root / 'notebooks'} holds no chapter notebooks: name the class edition with --course")
    if chapter is not None:
        picked = [n for n in names if n.split("_")[0] == chapter.zfill(2)]
        if not picked:
            raise CollectError(f"no chapter {chapter} in {root / 'notebooks'} (chapters: "
                               f"{', '.join(n.split('_')[0] for n in names)})")
        return picked
    return names


def add_arguments(ap: argparse.ArgumentParser) -> None:
    ap.add_argument("--out", type=Path, required=True, help="the folder to collect into (OUT/<learner>/<chapter>)")
    ap.add_argument("--workspaces", action="append", default=None, metavar="PATTERN",
                    help=f"where the learners' workspaces are, with {{learner}} for the name (default {WORKSPACES}; "
                         "repeat for several hubs)")
    ap.add_argument("--roster", type=Path, default=None,
                    help="roster CSV: collect these learners only, and name the ones without a workspace")
    ap.add_argument("--chapter", default=None, help="collect one chapter only, e.g. 02")
    ap.add_argument("--update", action="store_true",
                    help="OUT already holds a collection: bring in what changed "
                         "(replaced copies kept in OUT/.replaced)")
    ap.add_argument("--course", type=Path, default=None,
                    help="the class edition, a course checkout (default: found from cwd)")


def run(args: argparse.Namespace) -> int:
    try:
        roster = read_roster(args.roster) if args.roster else []
        chapters = class_chapters(args.course, args.chapter)
        report = collect(args.workspaces or [WORKSPACES], args.out, chapters, roster, args.update)
    except (CollectError, OSError, ValueError) as err:
        print(f"softmax-lab collect: {err}", file=sys.stderr)
        return 2
    except KeyboardInterrupt:  # Ctrl-C, SIGTERM, SIGHUP (grading/lock.py)
        print(f"softmax-lab collect: interrupted: {args.out} holds the notebooks copied so far, each listed in its "
              f"{MANIFEST}; run the same command again to finish the collection", file=sys.stderr)
        return 130
    if report.resumed:
        print(f"softmax-lab collect: finished the collection stopped since {report.resumed}", file=sys.stderr)
    for line in report.problems:
        print(f"softmax-lab collect: {line}", file=sys.stderr)
    learners = {r.split("/")[0] for r in report.copied + report.replaced + report.unchanged}
    print(f"collected {len(report.copied) + len(report.replaced)} notebooks of {len(learners)} learners into "
          f"{args.out} ({len(report.copied)} new, {len(report.replaced)} changed, {len(report.unchanged)} unchanged"
          + (f"; previous copies in {args.out / REPLACED}" if report.replaced else "") + ")")
    book = f"grades/ch{args.chapter}.csv" if args.chapter else "grades/gradebook.csv"  # (a gradebook per chapter)
    print(f"next: softmax-lab grade {args.out} --out {book}"
          + (f" --chapter {args.chapter}" if args.chapter else "")
          + (f" --roster {args.roster}" if args.roster else ""))
    return 1 if report.problems else 0
