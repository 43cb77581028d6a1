"""The gradebook being written: its rows, what is known of each submission, and the files it keeps beside the CSV.

    gradebook.csv             one row per (submission, exercise)
    gradebook.csv.state.json  the hash of each file graded, the options and the judge's seeds: a rerun resumes
    gradebook.feedback/LEARNER.md/.html  each learner's results (a folder per gradebook: grading chapters into
                              grades/ch02.csv and grades/ch04.csv keeps both chapters' pages)
    gradebook.manual.csv/.md  free-text answers to grade by hand
    gradebook.learners.csv    per learner and chapter: points that count, pass/fail (results.py)
    gradebook.lms.csv         one row per learner, one column per chapter: for a learning management system
    gradebook.copies.txt      the copy check's report: each flagged pair and its matching lines (copies.py)

Every file is written whole to a temporary file next to it and then moved into place (``os.replace``), after
each graded submission: an interrupted or crashed run leaves the previous complete version, never half a file.
What the files say is ``report.py``.
"""
from __future__ import annotations

import csv
import hashlib
import json
import os
import tempfile
from dataclasses import dataclass, field
from pathlib import Path

from ..usage import UsageError
from .chapters import Chapter, InvalidNotebook, answers, match_chapter, read_submission, without_lead
from .grader import Options
from . import similarity
from .copies import Copies, decorate
from .feedback_html import feedback_html
from .report import (csv_text, feedback_markdown, feedback_name, gradebook_text, manual_csv, manual_markdown,
                     unescape_cell)
from .results import RESULT_COLUMNS, DEFAULT_THRESHOLD, ManualGrade, chapter_result, lms_rows, pass_rule
from .rows import COLUMNS, GRADER_TROUBLE, OLD_COLUMNS, make_row
from .submissions import Submission


def _umask() -> int:
    mask = os.umask(0)
    os.umask(mask)
    return mask


UMASK = _umask()  # read once, at import: os.umask can only be read by setting it, which races with other threads


def atomic_write(path: Path, text: str) -> None:
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(prefix=f".{path.name}.", suffix=".tmp", dir=str(path.parent))
    try:
        with os.fdopen(fd, "w", encoding="utf-8", errors="replace", newline="") as f:  # lone surrogates -> ?
            f.write(text)
            f.flush()
            os.fsync(f.fileno())
        os.chmod(tmp, 0o666 & ~UMASK)  # mkstemp makes it 0600: the mode any new file gets, for TAs to read
        os.replace(tmp, path)
    except BaseException:
        try:
            os.unlink(tmp)
        except OSError:
            pass
        raise


def file_hash(path: Path) -> str:
    from .chapters import MAX_NOTEBOOK_BYTES
    from .streams import read_regular

    try:  # a FIFO or a device among the submissions must not block the grader
        return hashlib.sha256(read_regular(path, MAX_NOTEBOOK_BYTES)).hexdigest()
    except OSError:
        try:
            st = Path(path).lstat()
            return f"unreadable-{st.st_size}-{st.st_mtime_ns}"
        except OSError:
            return ""


def read_gradebook(path: Path) -> list[dict]:
    if not Path(path).exists():
        return []
    with open(path, encoding="utf-8", newline="") as f:
        reader = csv.DictReader(f)
        if reader.fieldnames not in (COLUMNS, OLD_COLUMNS):
            raise ValueError(f"{path} is not a gradebook (columns {reader.fieldnames}, expected {COLUMNS})")
        return [{"copy": "", **{k: unescape_cell(v or "") for k, v in r.items()}} for r in reader]


def state_path(gradebook: Path) -> Path:
    """Resume state next to the gradebook: the sha256 of each graded submission file."""
    return Path(gradebook).with_name(Path(gradebook).name + ".state.json")


def read_state(gradebook: Path) -> dict[str, str]:
    try:
        data = json.loads(state_path(gradebook).read_text(encoding="utf-8"))
        return {str(k): str(v) for k, v in data.get("graded", {}).items()}
    except (OSError, ValueError, AttributeError):
        return {}


def read_state_options(gradebook: Path) -> dict[str, str]:
    """The grading options the gradebook was made with ({} when unknown)."""
    try:
        data = json.loads(state_path(gradebook).read_text(encoding="utf-8"))
        return {str(k): str(v) for k, v in (data.get("options") or {}).items()}
    except (OSError, ValueError, AttributeError):
        return {}


def read_state_seeds(gradebook: Path) -> dict[str, int]:
    """The judge's seed per submission (its fresh inputs can be drawn again from it)."""
    try:
        data = json.loads(state_path(gradebook).read_text(encoding="utf-8"))
        return {str(k): int(v) for k, v in (data.get("seeds") or {}).items()}
    except (OSError, ValueError, AttributeError, TypeError):
        return {}


def read_state_raw(gradebook: Path) -> dict[str, list[dict]]:
    """The rows as graded of submissions whose gradebook rows the copy check changed (points withheld, notes)."""
    try:
        data = json.loads(state_path(gradebook).read_text(encoding="utf-8"))
        raw = data.get("raw") or {}
        return {str(k): [{c: str(r.get(c, "")) for c in COLUMNS} for r in v] for k, v in raw.items()}
    except (OSError, ValueError, AttributeError, TypeError):
        return {}


def write_state(gradebook: Path, graded: dict[str, str], options: dict[str, str] | None = None,
                seeds: dict[str, int] | None = None, raw: dict[str, list[dict]] | None = None) -> None:
    atomic_write(state_path(gradebook), json.dumps({"graded": dict(sorted(graded.items())), "options": options or {},
                                                    "seeds": dict(sorted((seeds or {}).items())),
                                                    "raw": dict(sorted((raw or {}).items()))}, indent=1) + "\n")


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


def default_feedback(out: Path) -> Path:
    """The feedback folder of the gradebook ``out`` when ``--feedback`` is not given: ``<its stem>.feedback`` beside
    it, as its other files (``grades/ch02.csv`` -> ``grades/ch02.feedback/``), so that gradebooks in one folder do
    not overwrite each other's pages."""
    return out.with_name(f"{out.stem}.feedback")


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
    manual_vetoes: dict[tuple[str, str, str], str] = field(default_factory=dict)
    copies: Copies | None = None                                     # the copy check's flags (copies.py)
    names: dict[str, str] = field(default_factory=dict)              # learner id -> display name (roster)
    pass_threshold: float = DEFAULT_THRESHOLD
    threshold_configured: bool = False                               # --pass-threshold or softmax-lab.toml
    skipped: dict[str, str] = field(default_factory=dict)            # submission -> why it is not graded here
    graded_now: set[str] = field(default_factory=set)                # submissions graded by this run

    @property
    def manual_csv_path(self) -> Path:
        return self.out.with_name(f"{self.out.stem}.manual.csv")

    @property
    def manual_md_path(self) -> Path:
        return self.out.with_name(f"{self.out.stem}.manual.md")

    def beside(self, suffix: str) -> Path:
        """A file next to the gradebook: gradebook.learners.csv, gradebook.lms.csv, gradebook.copies.txt."""
        return self.out.with_name(f"{self.out.stem}.{suffix}")


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
    for name, rows in read_state_raw(book.out).items():  # as graded, before the copy check withheld points
        if name in book.rows:
            book.rows[name] = rows


def read_manual_points(path: Path) -> tuple[dict[tuple[str, str, str], str], dict[tuple[str, str, str], str]]:
    """Points (and vetoes) the instructor entered in the manual-grading sheet, by (submission, question, answer):
    they survive reruns (and --force) as long as the answer they graded is unchanged."""
    points: dict[tuple[str, str, str], str] = {}
    vetoes: dict[tuple[str, str, str], str] = {}
    if path.exists():
        with open(path, encoding="utf-8", newline="") as f:
            for r in csv.DictReader(f):
                key = (unescape_cell(r.get("submission") or ""), r.get("question") or "",
                       without_lead(unescape_cell(r.get("answer") or "")))
                if (r.get("points") or "").strip():
                    points[key] = r["points"].strip()
                if (r.get("veto") or "").strip():
                    vetoes[key] = unescape_cell(r["veto"].strip())
    return points, vetoes


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


def answers_of(sub: Submission, chapters: dict[str, Chapter]) -> tuple[Chapter | None, dict[str, str]]:
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
    for name, rows in book.rows.items():
        ch = book.chapter_of.get(name)
        if all(r["status"] == "missing" for r in rows):  # another chapter's notebook (--chapter): not a second try
            continue
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


def counted_rows(book: Gradebook) -> dict[str, list[dict]]:
    """Each submission's rows with the copy check applied (its column filled, flagged points withheld)."""
    return {name: decorate(rows, book.copies) for name, rows in book.rows.items()}


def gradebook_rows(book: Gradebook) -> list[dict]:
    """Every row of the gradebook file: graded rows with their notes, refused files, roster learners missing."""
    every = counted_rows(book)
    for name, note in duplicate_notes(book).items():
        every[name] = _with_note(every[name], note)
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
                            "answer": answer, "veto": book.manual_vetoes.get((name, q.id, answer), "")})
    return entries


def result_rows(book: Gradebook) -> list[dict]:
    """Per learner and chapter: the submission that counts, its points and pass/fail (results.py)."""
    counted = counted_rows(book)
    groups: dict[tuple[str, str], list[str]] = {}
    for name, rows in counted.items():
        ch = book.chapter_of.get(name) or book.chapters.get(rows[0]["chapter"] if rows else "")
        if ch is not None and name in book.learner_of:
            groups.setdefault((book.learner_of[name], ch.chapter), []).append(name)
    out = []
    configured = book.threshold_configured
    for (learner, chap), names in sorted(groups.items()):
        ch = book.chapters[chap]
        pts = {n: sum(float(r["points"] or 0) for r in counted[n] if r["chapter"] == chap) for n in names}
        best = max(sorted(names), key=lambda n: pts[n])  # several notebooks of one chapter: the best one counts
        notes = ([f"{len(names)} notebooks of this chapter; the one with the most points counts ({best})"]
                 if len(names) > 1 else [])
        answers = book.answers_by.get(best, {})
        manual = {q.id: ManualGrade(book.manual_points.get((best, q.id, answers.get(q.id, "")), ""),
                                    book.manual_vetoes.get((best, q.id, answers.get(q.id, "")), ""))
                  for q in ch.questions}
        rows = [r for r in counted[best] if r["chapter"] == chap and r["exercise"]]
        res = chapter_result(learner, ch, best, rows, manual, pass_rule(ch, book.pass_threshold, configured), notes)
        out.append({**res, "name": book.names.get(learner, "")})
    have = {r["learner"] for r in out}
    chap = book.chapters.get(book.chapter_arg) if book.chapter_arg else None
    for rid in book.roster:
        if rid not in have and chap is not None:
            out.append({"learner": rid, "name": book.names.get(rid, ""), "chapter": chap.chapter, "submission": "",
                        "exercise_points": "0", "manual_points": "0", "points": "0",
                        "max_points": f"{chap.max_points + sum(q.points for q in chap.questions):g}",
                        "result": "fail", "reasons": "no submission"})
    return sorted(out, key=lambda r: (r["learner"], r["chapter"]))


def write_results(book: Gradebook, learners: set[str], results: list[dict]) -> None:
    """The per-learner files: ``results`` (result_rows), the LMS export, and the HTML feedback pages of ``learners``."""
    atomic_write(book.beside("learners.csv"), csv_text(results, RESULT_COLUMNS))
    everyone = sorted(set(book.roster) | {book.learner_of[n] for n in book.rows if n in book.learner_of})
    chapters = sorted({r["chapter"] for r in results} | ({book.chapter_arg} if book.chapter_arg else set()))
    rows, columns = lms_rows(results, everyone, chapters)
    atomic_write(book.beside("lms.csv"), csv_text(rows, columns))
    counted = counted_rows(book)
    for learner in learners:
        mine = [r for name in sorted(counted) if book.learner_of.get(name) == learner for r in counted[name]]
        if mine:
            atomic_write((book.feedback_dir / feedback_name(learner)).with_suffix(".html"),
                         feedback_html(learner, book.names.get(learner, ""), mine, book.chapters, book.answers_by,
                                       [r for r in results if r["learner"] == learner], manual_entries(book)))


def write_all(book: Gradebook, learners: set[str]) -> None:
    """The gradebook, its state, the feedback of ``learners`` and the manual-grading sheets, each atomically."""
    atomic_write(book.out, gradebook_text(gradebook_rows(book)))
    counted = counted_rows(book)
    results = result_rows(book)
    raw = {n: rows for n, rows in book.rows.items() if counted[n] != [{**r, "copy": ""} for r in rows]}
    write_state(book.out, book.state, book.fingerprint, book.seeds, raw)
    entries = manual_entries(book)
    for learner in learners:
        mine = [r for name in sorted(counted) if book.learner_of.get(name) == learner for r in counted[name]]
        if mine:
            atomic_write(book.feedback_dir / feedback_name(learner),
                         feedback_markdown(learner, mine, book.chapters, book.answers_by,
                                           [r for r in results if r["learner"] == learner], entries))
    atomic_write(book.manual_csv_path, manual_csv(entries))
    atomic_write(book.manual_md_path, manual_markdown(entries, book.chapters, book.manual_csv_path.name))
    write_results(book, learners, results)
    if book.copies is not None and book.copies.policy.enabled:
        atomic_write(book.beside("copies.txt"), book.copies.report)
        atomic_write(book.beside("similarity.csv"), csv_text(book.copies.rows, list(similarity.COLUMNS)))
