"""`softmax-lab grade` (instructors): grade a class's notebooks into a gradebook that a rerun resumes.

    softmax-lab grade SUBMISSIONS/ --out grades/gradebook.csv [--jobs 4] [--roster roster.csv] [--chapter 02]

Each submission is graded by ``grader.py`` (its chapter matched, its exercise cells grafted into that chapter's
solution notebook, run under nbval in a sandbox with limits, judged); its rows go to the gradebook, written after
every notebook (``gradebook.py``). The instructor's guide is docs/grading.md.
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
from .gradebook import Gradebook, answers_of, fingerprint, read_manual_points, resume, to_grade, write_all
from .grader import Options, SubmissionResult, grade_notebook
from .options import add_common_arguments, options
from .rows import make_row, safe_line
from .runner import STOP
from .submissions import Submission, discover, other_assignment, read_roster


def add_arguments(ap: argparse.ArgumentParser) -> None:
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


def run(args: argparse.Namespace) -> int:
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
            ch, ans = answers_of(s, chapters)
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
