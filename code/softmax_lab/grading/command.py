"""`softmax-lab grade` (instructors) and `softmax-lab check` (learners): validate notebooks against the solutions.

    softmax-lab grade SUBMISSIONS/ --out grades/gradebook.csv [--jobs 4] [--roster roster.csv] [--chapter 02]
    softmax-lab check 02_masks_and_padding.ipynb

Each submission is matched to its chapter (notebook metadata), its exercise cells are grafted into a copy of
that chapter's solution notebook, and the result runs under nbval in a sandbox with limits (``grader.py``,
``runner.py``); the rows go to an atomically written gradebook that a rerun resumes (``report.py``). The
instructor's guide is docs/grading.md.
"""
from __future__ import annotations

import argparse
import csv
import difflib
import hashlib
import re
import sys
import traceback
from concurrent.futures import ThreadPoolExecutor, as_completed
from dataclasses import dataclass, field
from pathlib import Path

from ..cli import UsageError
from ..course import registry as _registry
from ..course import sanitize_config
from . import cluster
from .chapters import Chapter, InvalidNotebook, answers, load_chapters, match_chapter, read_submission
from .grader import GRADER_TROUBLE, Options, SubmissionResult, grade_notebook, make_row, safe_line
from .hints import DEFAULT_ANSWER_HINT_CAP
from .report import (atomic_write, feedback_markdown, feedback_name, file_hash, gradebook_text, manual_csv,
                     manual_markdown, read_gradebook, read_state, read_state_options, read_state_seeds, write_state)
from .runner import STOP, Limits
from .submissions import Submission, discover, other_assignment, read_roster

# ------------------------------------------------------------------------------------------------- options


def add_common_arguments(ap: argparse.ArgumentParser) -> None:
    """The options `grade` and `check` share: where the course is, limits, sandbox."""
    ap.add_argument("--solutions", type=Path, default=None,
                    help="folder of solution notebooks (default: solutions/ of this checkout)")
    ap.add_argument("--registry", type=Path, default=None,
                    help="folder of chNN.toml exercise registry files (default: the course's own)")
    ap.add_argument("--timeout", type=float, default=120, help="seconds per cell, from the first exercise on "
                    "(default 120)")
    ap.add_argument("--setup-timeout", type=float, default=300,
                    help="seconds per cell before the first exercise: imports, helpers (default 300)")
    ap.add_argument("--notebook-timeout", type=float, default=900,
                    help="seconds for one run of a whole notebook (default 900)")
    ap.add_argument("--memory-mb", type=int, default=8192,
                    help="memory cap per submission in MB, 0 for none (default 8192)")
    ap.add_argument("--sanitize-with", type=Path, default=None,
                    help="nbval sanitize config (default: the package's data/nbval_sanitize.cfg)")
    ap.add_argument("--answer-hint-cap", type=_fraction, default=None,
                    help="share of an exercise's points kept when the learner was shown its complete answer "
                         f"(hint level 4), 0..1 (default: the course config, else {DEFAULT_ANSWER_HINT_CAP})")
    ap.add_argument("--keep-scratch", action="store_true", help="keep each run's scratch folder (debugging)")
    ap.add_argument("--unsafe-no-sandbox", action="store_true",
                    help="run submissions WITHOUT the bubblewrap sandbox (trusted notebooks only; recorded in the "
                         "gradebook)")
    ap.add_argument("--unsafe-no-cgroup", action="store_true",
                    help="grade where no cgroup can be made: memory, tasks and CPU are then not capped by the kernel "
                         "(recorded in the gradebook; docs/grading.md says which limits still hold)")


def _fraction(text: str) -> float:
    try:
        value = float(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"{text!r} is not a number") from None
    if not 0.0 <= value <= 1.0:
        raise argparse.ArgumentTypeError(f"{text} is not between 0 and 1")
    return value


def _default_solutions() -> Path | None:
    from ..course.notebook import BuildError, repo_root

    try:
        return repo_root() / "solutions"
    except BuildError:
        return None


COURSE_CONFIG = "softmax-lab.toml"  # [grading] answer_hint_cap = 0.5, beside solutions/ (docs/grading.md)


def course_hint_cap(solutions: Path) -> float:
    """``[grading] answer_hint_cap`` from ``softmax-lab.toml`` in the folder holding solutions/, else the default."""
    import tomllib

    path = solutions.resolve().parent / COURSE_CONFIG
    if not path.is_file():
        return DEFAULT_ANSWER_HINT_CAP
    try:
        value = tomllib.loads(path.read_text(encoding="utf-8")).get("grading", {}).get("answer_hint_cap",
                                                                                        DEFAULT_ANSWER_HINT_CAP)
    except tomllib.TOMLDecodeError as err:
        raise UsageError(f"{path}: {err}") from None
    if isinstance(value, bool) or not isinstance(value, (int, float)) or not 0 <= value <= 1:
        raise UsageError(f"{path}: [grading] answer_hint_cap must be a number between 0 and 1, not {value!r}")
    return float(value)


def _chapters(args) -> tuple[Path, dict[str, Chapter]]:
    solutions = args.solutions or _default_solutions()
    if solutions is None or not Path(solutions).is_dir():
        raise UsageError("cannot find the solution notebooks: pass --solutions DIR")
    try:
        chapters = load_chapters(Path(solutions), _registry.load(args.registry))
    except Exception as err:  # noqa: BLE001
        raise UsageError(f"cannot read the solutions in {solutions}: {err}") from None
    if not chapters:
        raise UsageError(f"no chapter with exercises in {solutions}")
    return Path(solutions), chapters


def _prepare_sandbox(args, learner: bool) -> None:
    from . import cgroup, judge, sandbox

    own = learner and _own_notebooks(args)
    if not args.unsafe_no_sandbox:
        try:
            sandbox.check_works()
        except sandbox.SandboxMissing as err:
            if not own:
                where = (" (`softmax-lab check` of a notebook outside your own workspace/ runs it in the same sandbox "
                         "as `grade`)" if learner else "")
                raise UsageError(f"{err}{where}") from None
            # A learner checking their own notebook on their own laptop (macOS has no bubblewrap): their own code.
            print("softmax-lab check: no bubblewrap here, so your notebook runs without a sandbox (fine for your own "
                  "work in workspace/)", file=sys.stderr)
            args.unsafe_no_sandbox = True
    args.cgroup = _cgroup_policy(args, own)
    sandbox.clean_stale_scratch()  # left behind by a grader killed with kill -9
    cgroup.clean_stale()
    if not learner:  # `check` grades one notebook at a time and loads only what its chapter needs
        judge.judges()  # load the chapters' judges once, before worker threads start


def _own_notebooks(args) -> bool:
    """Every notebook given is the user's own: inside workspace/ of this checkout (or of the current folder)."""
    from ..course.notebook import BuildError, repo_root

    try:
        workspace = (repo_root() / "workspace").resolve()
    except BuildError:
        workspace = (Path.cwd() / "workspace").resolve()
    paths = getattr(args, "notebooks", None) or []
    for p in paths:
        real = Path(p).resolve() if Path(p).exists() else (workspace / Path(p).name).resolve()
        if workspace not in real.parents:
            return False
    return bool(paths)


def _cgroup_policy(args, own: bool) -> bool:
    """Whether every run gets a cgroup of its own. Grading (and checking a notebook that is not the user's own)
    refuses where none can be made, unless told --unsafe-no-cgroup."""
    from . import cgroup

    if getattr(args, "unsafe_no_cgroup", False):
        return False
    why = cgroup.why_unavailable()
    if not why:
        return True
    if own or args.unsafe_no_sandbox:
        return False
    raise UsageError(f"the grader caps each submission's memory, tasks and CPU with a cgroup of its own, but none can "
                     f"be made here ({why}). {cgroup.WITHOUT[0].upper()}{cgroup.WITHOUT[1:]}. Pass --unsafe-no-cgroup "
                     "to grade with those limits only (recorded in every row).")


def options(args, learner: bool = False) -> tuple[Options, dict[str, Chapter]]:
    """Grading options and the chapters from the parsed command line (UsageError names what is wrong)."""
    solutions, chapters = _chapters(args)
    if getattr(args, "dask", None):  # the cluster's workers sandbox each notebook: cluster.py checks them instead
        args.cgroup = not args.unsafe_no_cgroup
    else:
        _prepare_sandbox(args, learner)
    limits = Limits(cell_timeout=args.timeout, setup_timeout=max(args.setup_timeout, args.timeout),
                    wall_timeout=args.notebook_timeout, memory_mb=args.memory_mb, keep_scratch=args.keep_scratch,
                    sandbox=not args.unsafe_no_sandbox, cgroup=args.cgroup)
    sanitize = args.sanitize_with.read_text(encoding="utf-8") if args.sanitize_with else sanitize_config()
    cap = args.answer_hint_cap if args.answer_hint_cap is not None else course_hint_cap(solutions)
    opts = Options(limits=limits, sanitize=sanitize, expected_chapter=getattr(args, "chapter", None),
                   partial=getattr(args, "partial_credit", False), answer_hint_cap=cap)
    if opts.expected_chapter and opts.expected_chapter not in chapters:
        raise UsageError(f"--chapter {opts.expected_chapter}: no such chapter in {solutions} "
                         f"(have {', '.join(sorted(chapters))})")
    return opts, chapters


def fingerprint(args, opts: Options, chapters: dict[str, Chapter]) -> dict[str, str]:
    """What changes grades: a resumed gradebook must have been made with the same values."""
    sols = hashlib.sha256()
    for k in sorted(chapters):
        sols.update(chapters[k].path.read_bytes())
        sols.update(repr([(e.id, e.points) for e in chapters[k].exercises]).encode())
    return {"partial_credit": str(bool(opts.partial)), "chapter": str(opts.expected_chapter or ""),
            "timeout": f"{args.timeout:g}", "setup_timeout": f"{args.setup_timeout:g}",
            "notebook_timeout": f"{args.notebook_timeout:g}", "memory_mb": str(args.memory_mb),
            "sanitize": hashlib.sha256(opts.sanitize.encode()).hexdigest()[:16], "solutions": sols.hexdigest()[:16],
            "sandbox": str(not args.unsafe_no_sandbox), "answer_hint_cap": f"{opts.answer_hint_cap:g}",
            **({"cgroup": "False"} if getattr(args, "unsafe_no_cgroup", False) else {})}


# ----------------------------------------------------------------------------------------------- gradebook


@dataclass
class Gradebook:
    """One gradebook being written: its files, the rows so far, and what is known about each submission."""
    out: Path
    feedback_dir: Path
    chapters: dict[str, Chapter]
    roster: list[str]
    chapter_arg: str | None
    unsafe: bool
    fingerprint: dict[str, str]
    refused: list[Submission] = field(default_factory=list)
    no_cgroup: bool = False                                          # --unsafe-no-cgroup
    rows: dict[str, list[dict]] = field(default_factory=dict)        # submission -> its rows
    state: dict[str, str] = field(default_factory=dict)              # submission -> file hash graded
    hashes: dict[str, str] = field(default_factory=dict)             # submission -> its file's hash now
    seeds: dict[str, int] = field(default_factory=dict)              # submission -> the judge's seed
    learner_of: dict[str, str] = field(default_factory=dict)
    chapter_of: dict[str, Chapter] = field(default_factory=dict)
    answers_by: dict[str, dict[str, str]] = field(default_factory=dict)
    manual_points: dict[tuple[str, str, str], str] = field(default_factory=dict)

    @property
    def manual_csv_path(self) -> Path:
        return self.out.with_name(f"{self.out.stem}.manual.csv")

    @property
    def manual_md_path(self) -> Path:
        return self.out.with_name(f"{self.out.stem}.manual.md")


def resume(book: Gradebook, force: bool) -> None:
    """Load the rows, state and seeds of an earlier run with the same options (none with ``force``)."""
    if force:
        return
    try:
        old_rows = read_gradebook(book.out)
    except ValueError as err:
        raise UsageError(str(err)) from None
    old_options = read_state_options(book.out)
    if old_rows and old_options != book.fingerprint:
        changed = sorted(k for k in set(old_options) | set(book.fingerprint)
                         if old_options.get(k) != book.fingerprint.get(k))
        raise UsageError(f"{book.out} was graded with other options ({', '.join(changed) or 'unknown: an older grader'}"
                         " differ): rerun with --force to regrade every notebook with these options, or use the same "
                         "options (a resumed gradebook must not mix two ways of grading)")
    book.state, book.seeds = read_state(book.out), read_state_seeds(book.out)
    for r in old_rows:
        book.rows.setdefault(r["submission"], []).append(r)


def read_manual_points(path: Path) -> dict[tuple[str, str, str], str]:
    """Points the instructor entered in the manual-grading sheet, by (submission, question, answer): they survive
    reruns (and --force) as long as the answer they graded is unchanged."""
    points: dict[tuple[str, str, str], str] = {}
    if path.exists():
        with open(path, encoding="utf-8", newline="") as f:
            for r in csv.DictReader(f):
                if (r.get("points") or "").strip():
                    points[(r.get("submission", ""), r.get("question", ""), r.get("answer", ""))] = r["points"]
    return points


def to_grade(book: Gradebook, subs: list[Submission]) -> list[Submission]:
    """The submissions not in the gradebook yet, changed since, or graded when the grader itself was in trouble;
    their old rows are dropped."""
    book.hashes = hashes = {s.name: file_hash(s.path) for s in subs}
    todo = [s for s in subs if s.name not in book.rows
            or (s.name in book.state and book.state[s.name] != hashes[s.name])
            or any(GRADER_TROUBLE in r["message"] or "the grader failed" in r["message"] for r in book.rows[s.name])]
    for s in todo:
        book.rows.pop(s.name, None)
    for s in subs:
        if s.name in book.rows and s.name not in book.state:
            book.state[s.name] = hashes[s.name]
    return todo


def _answers_of(sub: Submission, chapters: dict[str, Chapter]) -> tuple[Chapter | None, dict[str, str]]:
    try:
        nb = read_submission(sub.path)
    except InvalidNotebook:
        return None, {}
    ch, _ = match_chapter(nb, sub.path, chapters)
    return (ch, answers(ch, nb)) if ch else (None, {})


def missing_rows(book: Gradebook) -> dict[str, list[dict]]:
    """Roster learners without any submission: one `missing` row (per exercise of --chapter when given)."""
    have = {book.learner_of.get(n, "") for n in book.rows}
    extra = {}
    ch = book.chapters.get(book.chapter_arg) if book.chapter_arg else None
    for rid in book.roster:
        if rid in have:
            continue
        name = f"{rid}/"
        if ch:
            extra[name] = [make_row(name, ch.chapter, ex.id, 0, ex.points, "missing", "no submission from this learner")
                           for ex in ch.exercises]
        else:
            extra[name] = [make_row(name, "", "", 0, 0, "missing", "no submission from this learner")]
    return extra


def duplicate_notes(book: Gradebook) -> dict[str, str]:
    """One learner, several notebooks of one chapter: all graded, each flagged."""
    groups: dict[tuple[str, str], list[str]] = {}
    for name in book.rows:
        ch = book.chapter_of.get(name)
        if ch is not None and name in book.learner_of:
            groups.setdefault((book.learner_of[name], ch.chapter), []).append(name)
    notes = {}
    for (learner, chap), names in groups.items():
        if len(names) > 1:
            for n in names:
                notes[n] = (f"note: duplicate: learner {learner} handed in {len(names)} notebooks of chapter "
                            f"{chap} ({', '.join(sorted(names))}); all are graded - keep the one that counts")
    return notes


def _with_note(rows: list[dict], note: str) -> list[dict]:
    return [{**r, "message": (r["message"] + "\n" + note).strip()} for r in rows]


def gradebook_rows(book: Gradebook) -> list[dict]:
    """Every row of the gradebook file: graded rows with their notes, refused files, roster learners missing."""
    every = dict(book.rows)
    for name, note in duplicate_notes(book).items():
        every[name] = _with_note(book.rows[name], note)
    for s in book.refused:
        every[s.name] = [make_row(s.name, "", "", 0, 0, "error", "not graded: a symbolic link or not a regular "
                                  "file (hand in the notebook itself)")]
    if book.unsafe:
        every = {n: _with_note(rs, "note: graded WITHOUT the sandbox (--unsafe-no-sandbox)") for n, rs in every.items()}
    if book.no_cgroup:
        every = {n: _with_note(rs, "note: graded WITHOUT kernel-enforced memory, task and CPU limits "
                                   "(--unsafe-no-cgroup)") for n, rs in every.items()}
    every.update(missing_rows(book))
    return [r for name in sorted(every) for r in every[name]]


def manual_entries(book: Gradebook) -> list[dict]:
    """One row per (submission, free-text question) for the manual-grading sheets."""
    entries = []
    for name in sorted(book.rows):
        ch = book.chapter_of.get(name)
        for q in (ch.questions if ch else []):
            answer = book.answers_by.get(name, {}).get(q.id, "")
            entries.append({"submission": name, "chapter": ch.chapter, "question": q.id,
                            "points": book.manual_points.get((name, q.id, answer), ""), "max_points": q.points,
                            "answer": answer})
    return entries


def write_all(book: Gradebook, learners: set[str]) -> None:
    """The gradebook, its state, the feedback of ``learners`` and the manual-grading sheets, each atomically."""
    atomic_write(book.out, gradebook_text(gradebook_rows(book)))
    write_state(book.out, book.state, book.fingerprint, book.seeds)
    for learner in learners:
        mine = [r for name in sorted(book.rows) if book.learner_of.get(name) == learner for r in book.rows[name]]
        if mine:
            atomic_write(book.feedback_dir / feedback_name(learner),
                         feedback_markdown(learner, mine, book.chapters, book.answers_by))
    entries = manual_entries(book)
    atomic_write(book.manual_csv_path, manual_csv(entries))
    atomic_write(book.manual_md_path, manual_markdown(entries, book.chapters, book.manual_csv_path.name))


def _grade_one(sub: Submission, chapters, opts) -> SubmissionResult:
    try:
        return grade_notebook(sub.path, sub.name, chapters, opts)
    except Exception:  # noqa: BLE001 - a grader bug on one notebook must not stop the others
        # The traceback (the instructor's paths, the grader's code) goes to the instructor's terminal only.
        detail = traceback.format_exc()
        ref = hashlib.sha256(detail.encode("utf-8", "replace")).hexdigest()[:8]
        print(f"softmax-lab grade: the grader failed on {safe_line(sub.name)} (error {ref}):\n{detail}",
              file=sys.stderr, flush=True)
        return SubmissionResult(sub.name, None, [make_row(sub.name, "", "", 0, 0, "error",
                                                          f"the grader failed on this notebook (error {ref}: a fault "
                                                          "of the grader, not of your notebook; your instructor has "
                                                          "the details)")])


def summary_line(name: str, rows: list[dict]) -> str:
    got = sum(float(r["points"]) for r in rows)
    total = sum(float(r["max_points"]) for r in rows)
    verdicts = ", ".join(f"{r['exercise'] or '-'} {r['status']}" for r in rows)
    return f"{name}: {got:g}/{total:g} points ({verdicts})"


def grade_all(book: Gradebook, todo: list[Submission], opts: Options, jobs: int, dask: str | None = None) -> int:
    """Grade ``todo`` with ``jobs`` threads (or on the Dask cluster at ``dask``), writing every file after each
    notebook. 130 on Ctrl-C, else 0."""
    from tqdm.auto import tqdm

    pool = cluster.GradingOnDask(dask, opts) if dask and todo else ThreadPoolExecutor(max_workers=max(1, jobs))
    bar = tqdm(total=len(todo), unit="notebook", desc="grading", file=sys.stderr, disable=None)
    try:
        futures = {pool.submit(_grade_one, s, book.chapters, opts): s for s in todo}
        for fut in as_completed(futures):
            s, res = futures[fut], fut.result()
            book.rows[s.name] = res.rows
            book.state[s.name] = book.hashes[s.name]
            if res.seed is not None:
                book.seeds[s.name] = res.seed
            if res.chapter is not None:
                book.chapter_of[s.name], book.answers_by[s.name] = res.chapter, res.answers
            write_all(book, {s.learner})
            bar.write(summary_line(s.name, res.rows), file=sys.stdout)
            bar.update(1)
    except KeyboardInterrupt:
        STOP.set()
        pool.shutdown(wait=True, cancel_futures=True)
        print("interrupted: the gradebook holds every notebook graded so far; rerun to continue", file=sys.stderr)
        return 130
    finally:
        pool.shutdown(wait=True)
        bar.close()
    return 0


# -------------------------------------------------------------------------------------------------- grade


def add_grade_arguments(ap: argparse.ArgumentParser) -> None:
    ap.add_argument("submissions", nargs="+", type=Path,
                    help="notebooks, or folders of them (one folder per learner, or files named after learners)")
    ap.add_argument("--out", type=Path, default=Path("gradebook.csv"), help="gradebook CSV (default gradebook.csv)")
    ap.add_argument("--feedback", type=Path, default=None, help="feedback folder (default: feedback/ next to --out)")
    ap.add_argument("--roster", type=Path, default=None,
                    help="CSV of learners (column `learner`); learners without a submission are listed as missing")
    ap.add_argument("--chapter", default=None,
                    help="the chapter being graded (e.g. 02): a notebook of another chapter scores `missing`")
    ap.add_argument("--jobs", "-j", type=int, default=1, help="submissions graded in parallel (default 1)")
    ap.add_argument("--dask", metavar="SCHEDULER_ADDRESS", default=None,
                    help="grade on the workers of this Dask cluster (e.g. tcp://10.0.0.5:8786) instead of here; "
                         "docs/grading.md, 'Grading on a cluster with Dask'")
    ap.add_argument("--force", action="store_true", help="regrade submissions already in the gradebook")
    ap.add_argument("--partial-credit", action="store_true",
                    help="a failed check earns points x (checks passed / checks run) instead of 0")
    add_common_arguments(ap)


def run_grade(args: argparse.Namespace) -> int:
    opts, chapters = options(args)
    roster = read_roster(args.roster) if args.roster else []
    try:
        subs, refused = discover(args.submissions, roster)
    except FileNotFoundError as err:
        raise UsageError(f"no such file or folder: {err}") from None
    if opts.expected_chapter:  # nbgrader's layout: submitted/<learner>/<assignment>/ - grade this assignment only
        subs = [s for s in subs if not other_assignment(s, opts.expected_chapter, chapters)]
    book = Gradebook(args.out, args.feedback or args.out.parent / "feedback", chapters, roster, args.chapter,
                     args.unsafe_no_sandbox, fingerprint(args, opts, chapters), refused,
                     no_cgroup=getattr(args, "unsafe_no_cgroup", False))
    resume(book, args.force)
    for s in refused:
        print(f"{s.name}: refused (a symbolic link or not a regular file: it is not followed)", file=sys.stderr)
    todo = to_grade(book, subs)
    book.manual_points = read_manual_points(book.manual_csv_path)
    book.learner_of = {s.name: s.learner for s in subs}
    for s in subs:
        if s.name in book.rows:
            ch, ans = _answers_of(s, chapters)
            if ch:
                book.chapter_of[s.name], book.answers_by[s.name] = ch, ans
    skipped = len(subs) - len(todo)
    print(f"softmax-lab grade: {len(subs)} notebook(s), {skipped} already graded"
          + (" (--force regrades them)" if skipped else "") + f", {len(todo)} to grade "
          + (f"on the Dask cluster at {args.dask}" if args.dask else f"with {args.jobs} job(s)"),
          file=sys.stderr)
    write_all(book, {s.learner for s in subs})
    try:
        rc = grade_all(book, todo, opts, args.jobs, args.dask)
    except cluster.ClusterError as err:  # unreachable, unfit workers, or the scheduler went away: one line
        print(f"softmax-lab grade: {err}", file=sys.stderr)
        return 1
    if rc == 0:
        print(f"wrote {book.out}, {book.feedback_dir}/, {book.manual_csv_path} and {book.manual_md_path}")
    return rc


# -------------------------------------------------------------------------------------------------- check


def add_check_arguments(ap: argparse.ArgumentParser) -> None:
    ap.add_argument("notebooks", nargs="+", type=Path, metavar="NOTEBOOK",
                    help="your saved notebook, e.g. 02_masks_and_padding.ipynb: looked for where you are, then in "
                         "the course's workspace/")
    ap.usage = "softmax-lab check [-h] NOTEBOOK [NOTEBOOK ...] [instructor options]"
    ap.epilog = "Save the notebook first (Ctrl+S): the saved file is what is checked."
    add_common_arguments(ap.add_argument_group(
        "instructor options", "for instructors and course authors; learners never need them"))


def find_notebook(given: Path, cwd: Path | None = None) -> tuple[Path | None, str]:
    """The notebook `softmax-lab check NAME` grades, and '' (or None and one line naming the fix).

    NAME as given, else ``workspace/NAME`` of the course checkout found from ``cwd``: learners work in
    workspace/ (``softmax_lab.lab``), and notebooks/ holds the course's blank copies, never their work."""
    from ..course.notebook import BuildError, repo_root

    cwd = Path.cwd() if cwd is None else cwd
    path = given if given.is_absolute() else cwd / given
    try:
        root = repo_root(cwd)
    except BuildError:
        try:
            root = repo_root()  # the checkout this package is installed from (make lab's editable install)
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
    if res.chapter and res.chapter.questions:
        print(f"  free-text questions ({', '.join(q.id for q in res.chapter.questions)}) are graded by your "
              "instructor")


def run_check(args: argparse.Namespace) -> int:
    found = []
    for given in args.notebooks:  # before the solutions are read: a wrong name is answered at once
        path, problem = find_notebook(given)
        if problem:
            print(f"softmax-lab check: {problem}", file=sys.stderr)
        else:
            found.append(path)
    if not found:
        return 1
    if args.solutions is None and _default_solutions() is None:
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
