"""`softmax-lab grade` (instructors) and `softmax-lab check` (learners): validate notebooks against the solutions.

    softmax-lab grade SUBMISSIONS/ --out grades/gradebook.csv [--jobs 4] [--roster roster.csv] [--chapter 02]
    softmax-lab check 02_masks_and_padding.ipynb

Each submission is matched to its chapter (notebook metadata), its exercise cells are grafted into a copy of
that chapter's solution notebook, and the result runs under nbval in a separate process with limits (see
``softmax_lab.grading``). The instructor's guide is docs/grading.md.
"""
from __future__ import annotations

import argparse
import csv
import os
import sys
import traceback
from concurrent.futures import ThreadPoolExecutor, as_completed
from dataclasses import dataclass
from pathlib import Path

from .grading.chapters import Chapter, InvalidNotebook, answers, load_chapters, match_chapter, read_submission
from .grading.grader import GRADER_TROUBLE, Options, SubmissionResult, _row, grade_notebook
from .grading.report import (atomic_write, feedback_markdown, feedback_name, file_hash, gradebook_text, manual_csv,
                             manual_markdown, read_gradebook, read_state, read_state_options, read_state_seeds,
                             write_state)
from .grading.runner import DEFAULT_SANITIZE, STOP, Limits


@dataclass
class Submission:
    path: Path
    name: str      # the gradebook's `submission` column: the path relative to the submissions folder
    learner: str


# ------------------------------------------------------------------------------------------------- options


def _default_solutions() -> Path | None:
    from .build import BuildError, repo_root

    try:
        return repo_root() / "solutions"
    except BuildError:
        return None


def _sanitize_for(solutions: Path, given: Path | None) -> str:
    if given:
        return given.read_text(encoding="utf-8")
    cfg = solutions.resolve().parent / "tests" / "nbval_sanitize.cfg"  # what `make test-notebooks` uses
    return cfg.read_text(encoding="utf-8") if cfg.is_file() else DEFAULT_SANITIZE


def _common_args(ap: argparse.ArgumentParser) -> None:
    ap.add_argument("--solutions", type=Path, default=None,
                    help="folder of solution notebooks (default: solutions/ of this checkout)")
    ap.add_argument("--timeout", type=float, default=120, help="seconds per cell, from the first exercise on "
                    "(default 120)")
    ap.add_argument("--setup-timeout", type=float, default=300,
                    help="seconds per cell before the first exercise: imports, helpers (default 300)")
    ap.add_argument("--notebook-timeout", type=float, default=900,
                    help="seconds for one run of a whole notebook (default 900)")
    ap.add_argument("--memory-mb", type=int, default=8192,
                    help="memory cap per submission in MB, 0 for none (default 8192)")
    ap.add_argument("--sanitize-with", type=Path, default=None,
                    help="nbval sanitize config (default: tests/nbval_sanitize.cfg next to the solutions)")
    ap.add_argument("--keep-scratch", action="store_true", help="keep each run's scratch folder (debugging)")
    ap.add_argument("--unsafe-no-sandbox", action="store_true",
                    help="run submissions WITHOUT the bubblewrap sandbox (trusted notebooks only; recorded in the "
                         "gradebook)")


def _options(args, ap, learner: bool = False) -> tuple[Options, dict[str, Chapter]]:
    solutions = args.solutions or _default_solutions()
    if solutions is None or not Path(solutions).is_dir():
        ap.error("cannot find the solution notebooks: pass --solutions DIR")
    try:
        chapters = load_chapters(Path(solutions))
    except Exception as err:  # noqa: BLE001
        ap.error(f"cannot read the solutions in {solutions}: {err}")
    if not chapters:
        ap.error(f"no chapter with exercises in {solutions}")
    from .grading import sandbox

    if not args.unsafe_no_sandbox:
        try:
            sandbox.check_works()
        except sandbox.SandboxMissing as err:
            if not learner:
                ap.error(str(err))
            # `softmax-lab check` on a learner's own laptop (macOS has no bubblewrap): their own code, their
            # machine - run it without the sandbox, and say so.
            print(f"softmax-lab check: no sandbox ({err}); checking without one", file=sys.stderr)
            args.unsafe_no_sandbox = True
    sandbox.clean_stale_scratch()  # left behind by a grader killed with kill -9
    from .grading import judge

    judge.judges()  # load the chapters' judges once, before worker threads start
    limits = Limits(cell_timeout=args.timeout, setup_timeout=max(args.setup_timeout, args.timeout),
                    wall_timeout=args.notebook_timeout, memory_mb=args.memory_mb, keep_scratch=args.keep_scratch,
                    sandbox=not args.unsafe_no_sandbox)
    opts = Options(limits=limits, sanitize=_sanitize_for(Path(solutions), args.sanitize_with),
                   expected_chapter=getattr(args, "chapter", None), partial=getattr(args, "partial_credit", False))
    if opts.expected_chapter and opts.expected_chapter not in chapters:
        ap.error(f"--chapter {opts.expected_chapter}: no such chapter in {solutions} "
                 f"(have {', '.join(sorted(chapters))})")
    return opts, chapters


# --------------------------------------------------------------------------------------------- submissions


def read_roster(path: Path) -> list[str]:
    """Learner ids from a roster CSV: the column `learner` (or `id`, `username`, `student`, else the first)."""
    with open(path, encoding="utf-8-sig", newline="") as f:
        reader = csv.DictReader(f)
        fields = reader.fieldnames or []
        col = next((c for c in ("learner", "id", "username", "student") if c in fields), fields[0] if fields else None)
        if col is None:
            raise ValueError(f"{path}: empty roster")
        return [r[col].strip() for r in reader if (r.get(col) or "").strip()]


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


MAX_NOTEBOOK_BYTES = 20 * 2**20


def _display_name(rel: Path) -> str:
    """A path for the gradebook: any undecodable byte of a file name shown as \\xNN (never a crash)."""
    return rel.as_posix().encode("utf-8", "surrogateescape").decode("utf-8", "backslashreplace")


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


def _other_assignment(sub: Submission, chapter: str, chapters) -> bool:
    """In nbgrader's layout, a notebook in an assignment folder that names another chapter (e.g.
    alice/softmax-lab-03/03_naive_kernel.ipynb when grading 02) is another assignment: not graded here."""
    parts = Path(sub.name).parts
    if len(parts) < 3:
        return False
    prefix = Path(sub.name).name.split("_")[0]
    return prefix in chapters and prefix != chapter


def _answers_of(sub: Submission, chapters: dict[str, Chapter]) -> tuple[Chapter | None, dict[str, str]]:
    try:
        nb = read_submission(sub.path)
    except InvalidNotebook:
        return None, {}
    ch, _ = match_chapter(nb, sub.path, chapters)
    return (ch, answers(ch, nb)) if ch else (None, {})


def _fingerprint(args, opts, chapters) -> dict[str, str]:
    """What changes grades: a resumed gradebook must have been made with the same values."""
    import hashlib

    sols = hashlib.sha256()
    for k in sorted(chapters):
        sols.update(chapters[k].path.read_bytes())
    return {"partial_credit": str(bool(opts.partial)), "chapter": str(opts.expected_chapter or ""),
            "timeout": f"{args.timeout:g}", "setup_timeout": f"{args.setup_timeout:g}",
            "notebook_timeout": f"{args.notebook_timeout:g}", "memory_mb": str(args.memory_mb),
            "sanitize": hashlib.sha256(opts.sanitize.encode()).hexdigest()[:16], "solutions": sols.hexdigest()[:16],
            "sandbox": str(not args.unsafe_no_sandbox)}


def _grade_one(sub: Submission, chapters, opts) -> SubmissionResult:
    try:
        return grade_notebook(sub.path, sub.name, chapters, opts)
    except Exception as err:  # noqa: BLE001 - a grader bug on one notebook must not stop the others
        detail = traceback.format_exc(limit=3)
        return SubmissionResult(sub.name, None, [_row(sub.name, "", "", 0, 0, "error",
                                                      f"the grader failed on this notebook: {err!r}\n{detail}")])


# -------------------------------------------------------------------------------------------------- grade


def grade_main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(prog="softmax-lab grade",
                                 description="Grade learners' notebooks against the solutions (docs/grading.md).")
    ap.add_argument("submissions", nargs="+", type=Path,
                    help="notebooks, or folders of them (one folder per learner, or files named after learners)")
    ap.add_argument("--out", type=Path, default=Path("gradebook.csv"), help="gradebook CSV (default gradebook.csv)")
    ap.add_argument("--feedback", type=Path, default=None, help="feedback folder (default: feedback/ next to --out)")
    ap.add_argument("--roster", type=Path, default=None,
                    help="CSV of learners (column `learner`); learners without a submission are listed as missing")
    ap.add_argument("--chapter", default=None,
                    help="the chapter being graded (e.g. 02): a notebook of another chapter scores `missing`")
    ap.add_argument("--jobs", "-j", type=int, default=1, help="submissions graded in parallel (default 1)")
    ap.add_argument("--force", action="store_true", help="regrade submissions already in the gradebook")
    ap.add_argument("--partial-credit", action="store_true",
                    help="a failed check earns points x (checks passed / checks run) instead of 0")
    _common_args(ap)
    args = ap.parse_args(argv)
    opts, chapters = _options(args, ap)
    roster = read_roster(args.roster) if args.roster else []
    try:
        subs, refused = discover(args.submissions, roster)
    except FileNotFoundError as err:
        ap.error(f"no such file or folder: {err}")
    if opts.expected_chapter:  # nbgrader's layout: submitted/<learner>/<assignment>/ - grade this assignment only
        subs = [s for s in subs if not _other_assignment(s, opts.expected_chapter, chapters)]
    out = args.out
    feedback_dir = args.feedback or out.parent / "feedback"
    manual_csv_path = out.with_name(f"{out.stem}.manual.csv")
    manual_md_path = out.with_name(f"{out.stem}.manual.md")

    fingerprint = _fingerprint(args, opts, chapters)
    try:
        old_rows = [] if args.force else read_gradebook(out)
    except ValueError as err:
        ap.error(str(err))
    state = {} if args.force else read_state(out)
    old_options = {} if args.force else read_state_options(out)
    seeds: dict[str, int] = {} if args.force else read_state_seeds(out)
    if old_rows and old_options != fingerprint:
        changed = sorted(k for k in set(old_options) | set(fingerprint) if old_options.get(k) != fingerprint.get(k))
        ap.error(f"{out} was graded with other options ({', '.join(changed) or 'unknown: an older grader'} "
                 "differ): rerun with --force to regrade every notebook with these options, or use the same options "
                 "(a resumed gradebook must not mix two ways of grading)")
    for s in refused:
        print(f"{s.name}: refused (a symbolic link or not a regular file: it is not followed)", file=sys.stderr)
    rows: dict[str, list[dict]] = {}
    for r in old_rows:
        rows.setdefault(r["submission"], []).append(r)
    hashes = {s.name: file_hash(s.path) for s in subs}
    todo = [s for s in subs if s.name not in rows or (s.name in state and state[s.name] != hashes[s.name])
            or any(GRADER_TROUBLE in r["message"] or "the grader failed" in r["message"] for r in rows[s.name])]
    skipped = len(subs) - len(todo)
    for s in todo:
        rows.pop(s.name, None)
    for s in subs:
        if s.name in rows and s.name not in state:
            state[s.name] = hashes[s.name]

    # Points the instructor already entered in the manual-grading sheet survive reruns (and --force), as long
    # as the answer they graded is unchanged.
    manual_points: dict[tuple[str, str, str], str] = {}
    if manual_csv_path.exists():
        with open(manual_csv_path, encoding="utf-8", newline="") as f:
            for r in csv.DictReader(f):
                if (r.get("points") or "").strip():
                    manual_points[(r.get("submission", ""), r.get("question", ""), r.get("answer", ""))] = r["points"]

    learner_of = {s.name: s.learner for s in subs}
    answers_by: dict[str, dict[str, str]] = {}
    chapter_of: dict[str, Chapter] = {}
    for s in subs:
        if s.name in rows:
            ch, ans = _answers_of(s, chapters)
            if ch:
                chapter_of[s.name], answers_by[s.name] = ch, ans

    def missing_rows() -> dict[str, list[dict]]:
        have = {learner_of.get(n, "") for n in rows}
        extra = {}
        for rid in roster:
            if rid in have:
                continue
            name = f"{rid}/"
            ch = chapters.get(args.chapter) if args.chapter else None
            if ch:
                extra[name] = [_row(name, ch.chapter, ex.id, 0, ex.points, "missing", "no submission from this learner")
                               for ex in ch.exercises]
            else:
                extra[name] = [_row(name, "", "", 0, 0, "missing", "no submission from this learner")]
        return extra

    def duplicate_notes() -> dict[str, str]:
        """One learner, several notebooks of one chapter: all graded, each flagged."""
        groups: dict[tuple[str, str], list[str]] = {}
        for name in rows:
            ch = chapter_of.get(name)
            if ch is not None and name in learner_of:
                groups.setdefault((learner_of[name], ch.chapter), []).append(name)
        notes = {}
        for (learner, chap), names in groups.items():
            if len(names) > 1:
                for n in names:
                    notes[n] = (f"note: duplicate: learner {learner} handed in {len(names)} notebooks of chapter "
                                f"{chap} ({', '.join(sorted(names))}); all are graded - keep the one that counts")
        return notes

    def write_all(learners: set[str]) -> None:
        every = dict(rows)
        for name, note in duplicate_notes().items():
            every[name] = [{**r, "message": (r["message"] + "\n" + note).strip()} for r in rows[name]]
        for s in refused:
            every[s.name] = [_row(s.name, "", "", 0, 0, "error", "not graded: a symbolic link or not a regular "
                                  "file (hand in the notebook itself)")]
        if args.unsafe_no_sandbox:
            every = {n: [{**r, "message": (r["message"] + "\nnote: graded WITHOUT the sandbox "
                                               "(--unsafe-no-sandbox)").strip()} for r in rs] for n, rs in every.items()}
        every.update(missing_rows())
        atomic_write(out, gradebook_text([r for name in sorted(every) for r in every[name]]))
        write_state(out, state, fingerprint, seeds)
        for learner in learners:
            mine = [r for name in sorted(rows) if learner_of.get(name) == learner for r in rows[name]]
            if not mine:
                continue
            text = feedback_markdown(learner, mine, chapters, answers_by)
            atomic_write(feedback_dir / feedback_name(learner), text)
        entries = []
        for name in sorted(rows):
            ch = chapter_of.get(name)
            for q in (ch.questions if ch else []):
                answer = answers_by.get(name, {}).get(q.id, "")
                entries.append({"submission": name, "chapter": ch.chapter, "question": q.id,
                                "points": manual_points.get((name, q.id, answer), ""), "max_points": q.points,
                                "answer": answer})
        atomic_write(manual_csv_path, manual_csv(entries))
        atomic_write(manual_md_path, manual_markdown(entries, chapters, manual_csv_path.name))

    print(f"softmax-lab grade: {len(subs)} notebook(s), {skipped} already graded"
          + (" (--force regrades them)" if skipped else "") + f", {len(todo)} to grade with {args.jobs} job(s)",
          file=sys.stderr)
    write_all({s.learner for s in subs})
    from tqdm.auto import tqdm

    bar = tqdm(total=len(todo), unit="notebook", desc="grading", file=sys.stderr, disable=None)
    pool = ThreadPoolExecutor(max_workers=max(1, args.jobs))
    try:
        futures = {pool.submit(_grade_one, s, chapters, opts): s for s in todo}
        for fut in as_completed(futures):
            s = futures[fut]
            res = fut.result()
            rows[s.name] = res.rows
            state[s.name] = hashes[s.name]
            if res.seed is not None:
                seeds[s.name] = res.seed
            if res.chapter is not None:
                chapter_of[s.name], answers_by[s.name] = res.chapter, res.answers
            write_all({s.learner})
            got = sum(float(r["points"]) for r in res.rows)
            total = sum(float(r["max_points"]) for r in res.rows)
            verdicts = ", ".join(f"{r['exercise'] or '-'} {r['status']}" for r in res.rows)
            bar.write(f"{s.name}: {got:g}/{total:g} points ({verdicts})", file=sys.stdout)
            bar.update(1)
    except KeyboardInterrupt:
        STOP.set()
        pool.shutdown(wait=True, cancel_futures=True)
        print("interrupted: the gradebook holds every notebook graded so far; rerun to continue", file=sys.stderr)
        return 130
    finally:
        pool.shutdown(wait=True)
        bar.close()
    print(f"wrote {out}, {feedback_dir}/, {manual_csv_path} and {manual_md_path}")
    return 0


# -------------------------------------------------------------------------------------------------- check


def check_main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(prog="softmax-lab check",
                                 description="Check your notebook's exercises the way the grader does.")
    ap.add_argument("notebooks", nargs="+", type=Path, help="your notebook(s)")
    _common_args(ap)
    args = ap.parse_args(argv)
    opts, chapters = _options(args, ap, learner=True)
    all_ok = True
    for path in args.notebooks:
        if not path.exists():
            print(f"{path}: no such file", file=sys.stderr)
            all_ok = False
            continue
        print(f"checking {path} (a fresh kernel runs it with the course's own checks) ...", flush=True)
        res = grade_notebook(path, path.name, chapters, opts)
        got = sum(float(r["points"]) for r in res.rows)
        total = sum(float(r["max_points"]) for r in res.rows)
        title = res.chapter.label() if res.chapter else "unknown chapter"
        print(f"{path.name}: {title}: {got:g}/{total:g} points")
        width = max([len(r["exercise"]) for r in res.rows] + [8])
        for r in res.rows:
            print(f"  {r['exercise'] or '-':<{width}}  {r['points']:>4}/{r['max_points']:<4} {r['status']}")
            if r["status"] != "passed" and r["message"]:
                for line in r["message"].splitlines():
                    print(f"      {line}")
        all_ok &= all(r["status"] == "passed" for r in res.rows)
        if res.chapter and res.chapter.questions:
            print(f"  free-text questions ({', '.join(q.id for q in res.chapter.questions)}) are graded by your "
                  "instructor")
    return 0 if all_ok else 1


main = grade_main
