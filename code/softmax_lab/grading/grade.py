"""`softmax-lab grade` (instructors): grade a class's notebooks into a gradebook that a rerun resumes.

    softmax-lab grade SUBMISSIONS/ --out grades/gradebook.csv [--jobs 4] [--roster roster.csv] [--chapter 02]
    softmax-lab grade SUBMISSIONS/ --out grades/gradebook.csv --merge filled-manual.csv   # hand-graded points

Each submission is graded by ``grader.py`` (its chapter matched, its exercise cells grafted into that chapter's
solution notebook, run under nbval in a sandbox with limits, judged); its rows go to the gradebook, written after
every notebook (``gradebook.py``). Before grading, every exercise function of the class is compared with the
package, the solutions and classmates (``copies.py``). The instructor's guide is docs/grading.md.
"""
from __future__ import annotations

import argparse
import hashlib
import sys
import traceback
from concurrent.futures import ThreadPoolExecutor, as_completed
from pathlib import Path

from ..usage import UsageError
from . import cluster
from .copies import CopyPolicy, find_copies
from .gradebook import (Gradebook, answers_of, default_feedback, fingerprint, read_manual_points, resume, to_grade,
                        write_all)
from .lock import Lock, LockError
from .grader import Options, SubmissionResult, grade_notebook
from .merge import merge_manual
from .options import _fraction, add_common_arguments, course_setting, options
from .results import DEFAULT_THRESHOLD
from .rows import GRADER_TROUBLE, make_row, safe_line
from .runner import STOP
from .similarity import THRESHOLD
from .submissions import Submission, discover, other_assignment, other_chapter_notebooks, read_roster, roster_names


def add_arguments(ap: argparse.ArgumentParser) -> None:
    ap.add_argument("submissions", nargs="+", type=Path,
                    help="notebooks, or folders of them (one folder per learner, or files named after learners)")
    ap.add_argument("--out", type=Path, default=Path("gradebook.csv"), help="gradebook CSV (default gradebook.csv)")
    ap.add_argument("--feedback", type=Path, default=None,
                    help="feedback folder (default: next to --out, named after it: grades/ch02.feedback/)")
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
    ap.add_argument("--merge", type=Path, default=None, metavar="FILE",
                    help="hand-graded points: the manual-grading CSV (gradebook.manual.csv) with `points` (and "
                         "`veto`) filled in; checked whole first, nothing merged if any row is wrong")
    ap.add_argument("--copies", choices=("withhold", "flag", "off"), default="withhold",
                    help="a function above --copy-threshold like the package's, a solution's or a classmate's: "
                         "its points are withheld for your review (default), only flagged, or not checked at all")
    ap.add_argument("--copy-threshold", type=_share, default=THRESHOLD,
                    help=f"share of a function's own fingerprints found elsewhere that flags it (default {THRESHOLD}; "
                         "docs/grading.md, 'Copy detection')")
    ap.add_argument("--withhold-solution-matches", action="store_true",
                    help="withhold points for code like the exercise's solution too (a class edition, where learners "
                         "never see the solutions); by default such code is flagged and keeps its points")
    ap.add_argument("--pass-threshold", type=_fraction, default=None,
                    help="share of a chapter's points needed to pass it (default: the chapter's rubric, else "
                         f"[grading] pass_threshold in softmax-lab.toml, else {DEFAULT_THRESHOLD} as seed 002's rule)")
    add_common_arguments(ap)


def _share(text: str) -> float:
    value = _fraction(text)
    if value == 0:
        raise argparse.ArgumentTypeError("0 would flag everything: use --copies off to switch the check off")
    return value


def run(args: argparse.Namespace) -> int:
    if args.merge is not None and not args.merge.is_file():
        raise UsageError(f"--merge {args.merge}: no such file")
    opts, chapters = options(args)
    args.out.parent.mkdir(parents=True, exist_ok=True)
    try:  # one run writes a gradebook at a time: a second would erase the first's rows (and it theirs)
        with Lock(lock_path(args.out), "another grade run", f"writing {args.out}"):
            return _run(args, opts, chapters)
    except LockError as err:
        print(f"softmax-lab grade: {err}", file=sys.stderr)
        return 1
    except KeyboardInterrupt:  # Ctrl-C, SIGTERM or SIGHUP while the class was read, before anything was written
        print("interrupted before grading anything: nothing changed", file=sys.stderr)
        return 130


def lock_path(out: Path) -> Path:
    """The lock file beside the gradebook ``out`` (gradebook.csv.lock)."""
    return out.with_name(out.name + ".lock")


def _run(args: argparse.Namespace, opts: Options, chapters) -> int:
    book, subs, todo = open_gradebook(args, opts, chapters)
    if args.merge is not None:  # checked whole before anything is written (UsageError: nothing changes)
        warnings: list[str] = []
        merged = merge_manual(book, args.merge, warnings)
        print(f"softmax-lab grade: merged {merged} hand-graded answer(s) from {args.merge}", file=sys.stderr)
        for w in warnings:
            print(f"softmax-lab grade: warning: {w}", file=sys.stderr)
    if book.roster:  # graded all the same (their rows are real work), but the instructor should know
        on_roster = set(book.roster)
        for learner in sorted({s.learner for s in subs} - on_roster):
            print(f"softmax-lab grade: warning: learner {safe_line(learner, 80)} is not on the roster {args.roster}: "
                  "graded anyway (a typo in a folder or file name, or a learner missing from the roster?)",
                  file=sys.stderr)
    for s in book.refused:
        print(f"{s.name}: refused (a symbolic link or not a regular file: it is not followed)", file=sys.stderr)
    for name, why in book.skipped.items():
        print(f"{safe_line(name)}: not graded here ({why})", file=sys.stderr)
    policy = CopyPolicy(args.copy_threshold, args.copies == "withhold", args.withhold_solution_matches,
                        args.copies != "off")
    book.copies = find_copies(subs, chapters[next(iter(chapters))].path.parent, policy)
    skipped = len(subs) - len(todo)
    print(f"softmax-lab grade: {len(subs)} notebook(s), {skipped} already graded"
          + (" (--force regrades them)" if skipped else "") + f", {len(todo)} to grade "
          + (f"on the Dask cluster at {args.dask}" if args.dask else f"with {args.jobs} job(s)"),
          file=sys.stderr)
    existed = {p for p in _files(book) if p.exists()}
    try:
        write_all(book, {s.learner for s in subs})
        rc = grade_all(book, todo, opts, args.jobs, args.dask)
    except cluster.ClusterError as err:  # unreachable, unfit workers, or the scheduler went away: one line
        _remove_new(book, existed)
        print(f"softmax-lab grade: {err}", file=sys.stderr)
        return 1
    except KeyboardInterrupt:  # before the first notebook was sent (e.g. waiting for the cluster)
        STOP.set()
        _remove_new(book, existed)
        print("interrupted before grading anything: nothing changed", file=sys.stderr)
        return 130
    return closing_lines(book, policy) if rc == 0 else rc


def refuse_collections_parent(paths) -> None:
    """UsageError for a folder whose subfolders are `collect`'s collections (``submissions/ch02/<learner>/``, each
    with its manifest): graded as one, each chapter folder would be taken for a learner (helper-76)."""
    from .collect import MANIFEST

    def is_collection(d: Path) -> bool:
        try:
            return d.is_dir() and (d / MANIFEST).is_file()
        except OSError:  # (a folder this user cannot enter: discover skips it)
            return False

    given = [p for p in paths if is_collection(p)]
    for p in paths:
        try:
            inside = [] if is_collection(p) or not p.is_dir() else sorted(d for d in p.iterdir() if is_collection(d))
        except OSError:
            inside = []
        if inside or len(given) > 1:
            collections = inside or given
            first = collections[0]
            where = f"{p} holds" if inside else "these are"
            names = ", ".join(c.name for c in collections)
            raise UsageError(f"{where} collections of `softmax-lab collect` ({names}), each one chapter's folder of "
                             f"learners: grade each on its own, e.g. softmax-lab grade {first} --out "
                             f"grades/{first.name}.csv --chapter NN (graded together, each chapter folder would count "
                             "as a learner)")


def open_gradebook(args, opts: Options, chapters) -> tuple[Gradebook, list[Submission], list[Submission]]:
    """The gradebook as a rerun finds it (rows, state, hand-graded points), the class's notebooks, those to grade."""
    try:
        roster = read_roster(args.roster) if args.roster else []
        names = roster_names(args.roster) if args.roster else {}
    except (OSError, ValueError) as err:
        raise UsageError(f"--roster {args.roster}: {err}") from None
    refuse_collections_parent(args.submissions)
    try:
        subs, refused = discover(args.submissions, roster)
    except FileNotFoundError as err:
        raise UsageError(f"no such file or folder: {err}") from None
    skipped_other = {}
    if opts.expected_chapter:  # nbgrader's layout: submitted/<learner>/<assignment>/ - grade this assignment only
        subs = [s for s in subs if not other_assignment(s, opts.expected_chapter, chapters)]
        skipped_other = other_chapter_notebooks(subs, opts.expected_chapter, chapters)
        subs = [s for s in subs if s.name not in skipped_other]
    book = Gradebook(args.out, args.feedback or default_feedback(args.out), chapters, roster, args.chapter,
                     args.unsafe_no_sandbox, fingerprint(args, opts, chapters), refused,
                     no_cgroup=getattr(args, "unsafe_no_cgroup", False), names=names, skipped=skipped_other)
    threshold = args.pass_threshold if args.pass_threshold is not None else course_setting(
        chapters[next(iter(chapters))].path.parent, "pass_threshold", None)
    if threshold is not None:
        book.pass_threshold, book.threshold_configured = threshold, True
    resume(book, args.force)
    todo = to_grade(book, subs)
    book.manual_points, book.manual_vetoes = read_manual_points(book.manual_csv_path)
    book.learner_of = {s.name: s.learner for s in subs}
    for s in subs:
        if s.name in book.rows:
            ch, ans = answers_of(s, chapters)
            if ch and opts.expected_chapter and ch.chapter != opts.expected_chapter:  # graded as a `missing` row
                ch, ans = chapters[opts.expected_chapter], {}
            if ch is None and book.rows[s.name][:1] and book.rows[s.name][0]["chapter"] in chapters:  # unreadable
                ch, ans = chapters[book.rows[s.name][0]["chapter"]], {}
            if ch:
                book.chapter_of[s.name], book.answers_by[s.name] = ch, ans
    return book, subs, todo


def closing_lines(book: Gradebook, policy: CopyPolicy) -> int:
    """What was written; and when some notebooks could not be graded (the grader's trouble, not the learners'),
    which ones and what to run: exit status 1 then."""
    print(f"wrote {book.out}, {book.feedback_dir}/ (Markdown and HTML), {book.beside('learners.csv')}, "
          f"{book.beside('lms.csv')}, {book.manual_csv_path} and {book.manual_md_path}"
          + (f"; copy check: {book.beside('copies.txt')}" if policy.enabled else ""))
    if book.copies is not None and book.copies.flags:
        held = sum(bool(book.copies.withheld(*key)) for key in book.copies.flags)
        withheld = (f"; it withheld the points of {held} of them: the gradebook shows it, not the lines printed per "
                    "notebook above, which came before the check") if held else (
            "; no points withheld (code like the exercise's own solution is only flagged: "
            "--withhold-solution-matches)" if policy.withhold else "")
        print(f"softmax-lab grade: the copy check flagged {len(book.copies.flags)} exercise(s): see "
              f"{book.beside('copies.txt')}{withheld}", file=sys.stderr)
    def trouble(row) -> bool:
        return GRADER_TROUBLE in row["message"] or "the grader failed" in row["message"]

    again = sorted(n for n, rows in book.rows.items() if any(map(trouble, rows)))
    if not again:
        return 0
    first = next(r["message"] for r in book.rows[again[0]] if trouble(r))
    print(f"softmax-lab grade: {len(again)} notebook(s) could not be graded, not because of the learners' code "
          f"({', '.join(safe_line(n, 80) for n in again[:5])}{' ...' if len(again) > 5 else ''}): fix what their "
          f"rows in {book.out} say, then run the same command again to grade them; the first says: "
          + " / ".join(safe_line(ln, 300) for ln in first.splitlines()[-3:]), file=sys.stderr)
    return 1


def _files(book: Gradebook) -> list[Path]:
    from .gradebook import state_path

    return [book.out, state_path(book.out), book.manual_csv_path, book.manual_md_path, book.beside("learners.csv"),
            book.beside("lms.csv"), book.beside("copies.txt"), book.beside("similarity.csv"), book.feedback_dir]


def _remove_new(book: Gradebook, existed: set[Path]) -> None:
    """A start that failed before any notebook was graded leaves no file it made (it says nothing changed)."""
    if book.graded_now:
        return
    import shutil

    for p in _files(book):
        if p in existed or not p.exists():
            continue
        if p.is_dir():
            shutil.rmtree(p, ignore_errors=True)
        else:
            p.unlink(missing_ok=True)


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
            book.graded_now.add(s.name)
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


def _grade_one(sub: Submission, chapters, opts) -> SubmissionResult:
    try:
        return grade_notebook(sub.path, sub.name, chapters, opts)
    except Exception:
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
