"""The gradebook `softmax-lab grade` writes beside its rows: copy detection, per-learner results by seed 002's pass
rule, hand-graded points merged with --merge, one HTML feedback page per learner, the LMS export, and bad input
(notebooks renamed or merged, another chapter's notebook, two learners with one display name, the blank notebook).

One class of the fixture chapter 90 is graded once by the CLI in its own process (module fixture, about 20 s on 2
cores); each test reads what that run (and the merges after it) wrote.
"""
from __future__ import annotations

import csv
import hashlib
import sys
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).parent))
import test_grade as T
from test_grade import CH91, FAST, FIXTURES, KERNEL_OK, PITFALL, blank, ensure_bwrap, pasted, save, set_exercise
from test_grade_dask import grade_cli

from softmax_lab.grading.gradebook import default_feedback

NB = "90_grading_fixture.ipynb"
# A correct fx-kernel written in a way of its own (the -inf lanes made with tl.where): distinctive enough to compare.
OWN_KERNEL = KERNEL_OK.replace(
    '    ### BEGIN SOLUTION\n    x = tl.load(x_ptr + offs, mask=mask, other=float("-inf"))\n    ### END SOLUTION\n'
    "    tl.store(out_ptr, tl.max(x, axis=0))",
    "    lanes = tl.load(x_ptr + offs, mask=mask, other=0.0)\n"
    '    floor = tl.full([BLOCK], float("-inf"), tl.float32)\n'
    "    kept = tl.where(mask, lanes, floor)\n"
    "    biggest = tl.max(kept, axis=0)\n"
    "    half = biggest * 0.5\n"
    "    tl.store(out_ptr, half + half)")
assert OWN_KERNEL != KERNEL_OK
# The same kernel, every name changed and comments added: what a learner does to a classmate's work.
RENAMED = (OWN_KERNEL.replace("lanes", "vals").replace("floor", "lowest").replace("kept", "masked_vals")
           .replace("biggest", "m").replace("half", "h").replace("    tl.store", "    # my own idea\n    tl.store"))
ROSTER = ("learner,name\nann,Ann Lee\nbea,Ann Lee\nbob,Bob\ncat,Cat\ndan,Dan\neve,Eve\nfay,Fay\nmia,Mia\n"
          "zoe,Zoe\n")
FILES = ("gradebook.csv", "gradebook.csv.state.json", "gradebook.manual.csv", "gradebook.learners.csv",
         "gradebook.lms.csv", "gradebook.copies.txt")


def make_class(subs: Path) -> None:
    save(pasted(), subs / "ann" / NB)
    save(pasted(CH91), subs / "ann" / "91_other_fixture.ipynb")          # another chapter's notebook beside hers
    nb = pasted()
    nb.cells[T.index_of(nb, "answer:", "fx-why")].source = "<script>alert(1)</script> exp(1000) is inf & max-shift"
    save(nb, subs / "bea" / "my homework (final).ipynb")                # renamed; same display name as ann
    save(blank(), subs / "bob" / NB)                                      # the blank notebook as handed out
    save(set_exercise(pasted(), "fx-kernel", PITFALL), subs / "cat" / NB)  # the seed pitfall: partial credit
    save(set_exercise(pasted(), "fx-kernel", OWN_KERNEL), subs / "dan" / NB)
    save(set_exercise(pasted(), "fx-kernel", RENAMED), subs / "eve" / NB)  # dan's kernel, renamed
    save(pasted(CH91), subs / "fay" / "91_other_fixture.ipynb")           # only another chapter's notebook
    merged = pasted()                                                     # chapter 91's exercise cell moved in
    merged.cells += [c for c in pasted(CH91).cells if (c.get("metadata", {}).get("tags") or [""])[0].startswith(
        "exercise:")]
    k = T.index_of(merged, "exercise:", "fx-double")
    merged.cells.insert(0, merged.cells.pop(k))                           # and its own cells re-ordered
    save(merged, subs / "mia" / NB)


def snapshot(folder: Path) -> dict[str, str]:
    return {p.relative_to(folder).as_posix(): hashlib.sha256(p.read_bytes()).hexdigest()
            for p in sorted(folder.rglob("*")) if p.is_file()}


def read_csv(path: Path) -> list[dict]:
    with open(path, newline="", encoding="utf-8") as f:
        return list(csv.DictReader(f))


@pytest.fixture(scope="module")
def graded(tmp_path_factory):
    ensure_bwrap()
    tmp = tmp_path_factory.mktemp("gradebook")
    subs, out = tmp / "submissions", tmp / "grades" / "gradebook.csv"
    make_class(subs)
    (tmp / "roster.csv").write_text(ROSTER, encoding="utf-8")
    argv = [str(subs), "--out", str(out), "--solutions", str(FIXTURES), "--chapter", "90", "--roster",
            str(tmp / "roster.csv"), "--jobs", "2", "--partial-credit", "--memory-mb", "3000", *FAST]
    proc = grade_cli(argv, timeout=400)
    return {"proc": proc, "argv": argv, "out": out, "tmp": tmp, "rows": read_csv(out)}


def _rows(g, who):
    return {r["exercise"]: r for r in g["rows"] if r["submission"].split("/")[0] == who}


def _results(g):
    return {r["learner"]: r for r in read_csv(g["out"].with_name("gradebook.learners.csv"))}


def test_the_class_is_graded(graded):
    assert graded["proc"].returncode == 0, graded["proc"].stderr[-3000:]
    assert {r["submission"].split("/")[0] for r in graded["rows"]} == {
        "ann", "bea", "bob", "cat", "dan", "eve", "fay", "mia", "zoe"}


def test_a_classmates_renamed_kernel_is_flagged_with_pair_and_lines(graded):
    dan, eve = _rows(graded, "dan")["fx-kernel"], _rows(graded, "eve")["fx-kernel"]
    for mine, theirs in ((dan, "eve"), (eve, "dan")):
        assert mine["status"] == "passed" and mine["points"] == "0", mine  # never silently full marks
        assert f"submission {theirs}:fx-kernel:row_max_kernel" in mine["copy"], mine["copy"]
        assert "withheld for review" in mine["message"] and "a classmate's code" in mine["message"], mine["message"]
        assert theirs not in mine["message"]  # the learner is not told whose: the instructor's report says
    report = graded["out"].with_name("gradebook.copies.txt").read_text(encoding="utf-8")
    pair = next(ln for ln in report.splitlines() if ln.startswith(("dan:fx-kernel", "eve:fx-kernel")))
    assert "~" in pair and "%" in pair, pair
    assert "tl.where(mask, lanes, floor)" in report and "tl.where(mask, vals, lowest)" in report
    res = _results(graded)
    assert res["dan"]["result"] == "fail" and "withheld for copy review" in res["dan"]["reasons"]


def test_pasted_solutions_are_flagged_not_zeroed(graded):
    ann = _rows(graded, "ann")
    assert ann["fx-kernel"]["points"] == "3" and ann["fx-kernel"]["status"] == "passed"
    assert ann["fx-kernel"]["copy"].startswith("solution "), ann["fx-kernel"]
    assert "withheld" not in ann["fx-kernel"]["message"]


def test_partial_credit_is_shown_the_same_everywhere(graded):
    r = _rows(graded, "cat")["fx-kernel"]
    assert r["status"] == "failed" and r["points"] == "2", r
    assert "partial credit: 2/3 of the notebook check's cases passed, so 2 of 3 points" in r["message"]
    page = (default_feedback(graded["out"]) / "cat.html").read_text(encoding="utf-8")
    assert "2 of 3</td>" in page and "Exercises: <strong>4 of 5 points</strong>" in page


def test_another_chapters_notebook_is_no_missing_row_nor_a_duplicate(graded):
    ann = [r for r in graded["rows"] if r["submission"].startswith("ann/")]
    assert {r["submission"] for r in ann} == {f"ann/{NB}"}, ann
    assert not any("duplicate" in r["message"] for r in graded["rows"])
    assert "ann/91_other_fixture.ipynb: not graded here (it is chapter 91" in graded["proc"].stderr
    md = (default_feedback(graded["out"]) / "ann.md").read_text(encoding="utf-8")
    assert "91_other" not in md and "0 / 4" not in md
    fay = _rows(graded, "fay")  # her only notebook: one clear row per exercise, naming what she handed in
    assert all(r["status"] == "missing" and "this notebook is chapter 91" in r["message"] for r in fay.values())


def test_renamed_merged_and_reordered_notebooks(graded):
    assert all(r["status"] == "passed" for r in _rows(graded, "bea").values())  # "my homework (final).ipynb"
    mia = _rows(graded, "mia")
    assert all(r["status"] == "passed" for r in mia.values()), mia
    assert all("also holds exercise cells of chapter 91 (fx-negate)" in r["message"] for r in mia.values())


def test_the_blank_notebook_is_one_clear_row_per_exercise(graded):
    for r in _rows(graded, "bob").values():
        assert (r["status"], r["points"]) == ("failed", "0")
        assert "blank notebook as handed out" in r["message"] and "nothing was run" in r["message"]
    assert _results(graded)["bob"]["result"] == "fail"


def test_two_learners_with_one_display_name_stay_apart(graded):
    res = _results(graded)
    assert res["ann"]["name"] == res["bea"]["name"] == "Ann Lee"
    assert res["ann"]["submission"] != res["bea"]["submission"]
    feedback = default_feedback(graded["out"])
    assert "Ann Lee (ann)" in (feedback / "ann.html").read_text(encoding="utf-8")
    assert "Ann Lee (bea)" in (feedback / "bea.html").read_text(encoding="utf-8")


def test_a_roster_with_an_id_twice_is_refused(graded, tmp_path):
    roster = tmp_path / "roster.csv"
    roster.write_text("learner,name\nann,Ann\nann,Another Ann\n", encoding="utf-8")
    argv = list(graded["argv"])
    argv[argv.index("--roster") + 1] = str(roster)
    argv[argv.index("--out") + 1] = str(tmp_path / "g.csv")
    proc = grade_cli(argv)
    assert proc.returncode == 2 and "listed more than once: ann" in proc.stderr, proc.stderr
    assert not (tmp_path / "g.csv").exists()


def test_results_lms_export_and_pending_hand_grading(graded):
    res = _results(graded)
    assert res["ann"]["result"] == "pending" and "hand grading not entered yet: fx-why" in res["ann"]["reasons"]
    assert res["zoe"]["result"] == "fail" and res["zoe"]["reasons"] == "no submission"
    lms = read_csv(graded["out"].with_name("gradebook.lms.csv"))
    assert list(lms[0]) == ["learner", "chapter 90", "total"]
    assert [r["learner"] for r in lms] == ["ann", "bea", "bob", "cat", "dan", "eve", "fay", "mia", "zoe"]
    assert {r["learner"]: r["chapter 90"] for r in lms}["cat"] == "4"
    zoe = {r["learner"]: r for r in lms}["zoe"]  # on the roster, nothing handed in: empty, not 0
    assert zoe["chapter 90"] == "" and zoe["total"] == "0"


def _manual_sheet(graded, edit) -> Path:
    rows = read_csv(graded["out"].with_name("gradebook.manual.csv"))
    rows = edit(rows)
    path = graded["tmp"] / f"filled-{len(list(graded['tmp'].glob('filled-*')))}.csv"
    with open(path, "w", newline="", encoding="utf-8") as f:
        w = csv.DictWriter(f, fieldnames=list(dict.fromkeys(k for r in rows for k in r)))
        w.writeheader()
        w.writerows(rows)
    return path


def test_merge_refuses_a_wrong_sheet_and_changes_nothing(graded):
    def wrong(rows):
        by = {r["submission"].split("/")[0]: r for r in rows}
        by["ann"]["points"] = "7"                                         # out of range (the question is 1 point)
        extra = [dict(by["cat"], points="1"), dict(by["cat"], submission="nobody/x.ipynb", points="1"),
                 dict(by["dan"], question="fx-nothing", points="1"), dict(by["dan"], learner="eve", points="1")]
        by["cat"]["points"] = "1"
        return rows + extra                                               # cat twice, an unknown learner and id

    before = snapshot(graded["out"].parent)
    proc = grade_cli(graded["argv"] + ["--merge", str(_manual_sheet(graded, wrong))])
    assert proc.returncode == 2, proc.stderr
    err = proc.stderr
    assert "nothing merged, 5 problem(s)" in err, err
    for words in ("are not a number from 0 to 1", "graded twice", "no submission nobody/x.ipynb",
                  "no question fx-nothing", "learner dan's, not eve's"):
        assert words in err, (words, err)
    assert snapshot(graded["out"].parent) == before


def test_merged_points_give_pass_and_fail_and_a_veto_fails(graded):
    def filled(rows):
        for r in rows:
            r["points"] = "1"
            if r["submission"].startswith("cat/"):
                r["points"], r["veto"] = "0.5", "reports numbers as measured that were never run"
        return rows

    proc = grade_cli(graded["argv"] + ["--merge", str(_manual_sheet(graded, filled))])
    assert proc.returncode == 0, proc.stderr[-3000:]
    assert "merged 8 hand-graded answer(s)" in proc.stderr, proc.stderr
    res = _results(graded)
    assert (res["ann"]["result"], res["ann"]["points"], res["ann"]["max_points"]) == ("pass", "6", "6")
    assert res["cat"]["result"] == "fail" and "veto on fx-why: reports numbers" in res["cat"]["reasons"]
    assert res["bob"]["result"] == "fail"
    rows = read_csv(graded["out"])
    assert rows == graded["rows"], "a merge changes no exercise row"
    page = (default_feedback(graded["out"]) / "cat.html").read_text(encoding="utf-8")
    assert "Not passed" in page and "veto: reports numbers" in page
    sheet = graded["out"].with_name("gradebook.manual.md").read_text(encoding="utf-8")
    assert "<script>" not in sheet and "&lt;script&gt;alert(1)&lt;/script&gt; exp(1000) is inf &amp; max-shift" in sheet
    bea = (default_feedback(graded["out"]) / "bea.html").read_text(encoding="utf-8")
    assert "<script>" not in bea and "1 of 1" in bea
    # the Markdown feedback says the same as the page (before: "answered, awaiting grading" after the merge)
    ann = (default_feedback(graded["out"]) / "ann.md").read_text(encoding="utf-8")
    assert "- fx-why (1 point): **1 / 1**" in ann and "awaiting grading" not in ann, ann
    cat = (default_feedback(graded["out"]) / "cat.md").read_text(encoding="utf-8")
    assert "**0.5 / 1** (veto: reports numbers as measured that were never run)" in cat, cat
    # points for an answer the learner never wrote are kept, with a warning naming the row
    assert "point(s) for a question the learner did not answer" in proc.stderr and "bob/" in proc.stderr, \
        proc.stderr


def test_feedback_pages_hold_whole_messages(graded):
    from softmax_lab.grading.rows import safe_text

    long_line = "word " * 400
    assert safe_text(long_line).startswith(long_line[:1000].rstrip())
    cut = safe_text("a flood of words " * 300)
    assert cut.endswith("more characters]") and cut.split(" [")[0].endswith(("a", "flood", "of", "words"))
    page = (default_feedback(graded["out"]) / "cat.html").read_text(encoding="utf-8")
    assert "did you pad masked lanes with 0 instead of -inf?" in page


def test_a_screenshot_of_a_feedback_page(graded):
    sys.path.insert(0, str(T.ROOT / "tests"))
    import chromium

    why = chromium.install()
    if why:
        pytest.skip(why)
    from playwright.sync_api import sync_playwright

    page_file = default_feedback(graded["out"]) / "cat.html"
    shot = T.ROOT / "test-output" / "gradebook-feedback-cat.png"
    shot.parent.mkdir(exist_ok=True)
    with sync_playwright() as p:
        browser = p.chromium.launch(executable_path=chromium.CHROMIUM, args=chromium.ARGS)
        try:
            page = browser.new_page(viewport={"width": 1000, "height": 900})
            page.goto(page_file.as_uri())
            assert page.title() == "Feedback for Cat (cat)"
            assert page.locator(".result").first.inner_text().startswith(("Awaiting", "Not passed", "Passed"))
            page.screenshot(path=str(shot), full_page=True)
        finally:
            browser.close()
    assert shot.stat().st_size > 10_000


def test_notebooks_the_grader_could_not_run_end_with_what_to_do_and_exit_1(tmp_path):
    """A setup cell of the course that fails here is the grader's trouble: its rows say so, and the run ends with a
    line naming them and the command to run again, and a non-zero exit status (before: 0, no closing line)."""
    ensure_bwrap()
    sol = T.solution()
    sol.cells[1].source += "\nimport softmax_lab_no_such_module"
    save(sol, tmp_path / "solutions" / NB)
    save(T.solution(CH91), tmp_path / "solutions" / CH91.name)
    save(pasted(), tmp_path / "subs" / "ann" / NB)
    proc = grade_cli([tmp_path / "subs", "--out", tmp_path / "g.csv", "--solutions", tmp_path / "solutions", *FAST])
    assert proc.returncode == 1, proc.stderr[-2000:]
    last = proc.stderr.strip().splitlines()[-1]
    assert "1 notebook(s) could not be graded" in last and "ann/" + NB in last, last
    assert "run the same command again" in last, last
    assert "the first says:" in last and "softmax_lab_no_such_module" in last, last  # the reason, on the screen


def test_a_learner_not_on_the_roster_is_graded_with_a_warning(tmp_path):
    save(blank(), tmp_path / "s" / "zed" / NB)             # the blank notebook: graded without running anything
    (tmp_path / "roster.csv").write_text("learner\nann\n", encoding="utf-8")
    proc = grade_cli([tmp_path / "s", "--out", tmp_path / "g.csv", "--solutions", FIXTURES, "--chapter", "90",
                      "--roster", tmp_path / "roster.csv", *FAST], timeout=300)
    assert proc.returncode == 0, proc.stderr[-2000:]
    assert "warning: learner zed is not on the roster" in proc.stderr and "graded anyway" in proc.stderr, proc.stderr
    rows = read_csv(tmp_path / "g.csv")
    assert {r["submission"].split("/")[0] for r in rows} == {"zed", "ann"}  # zed graded, ann missing


@pytest.mark.parametrize("kinds,words", [
    (["solution"] * 4, "no points withheld (code like the exercise's own solution is only flagged"),
    (["solution", "package"], "it withheld the points of 1 of them"),
])
def test_the_closing_line_says_whether_points_were_withheld(kinds, words, tmp_path, capsys):
    """A class whose flags were all solution matches (only flagged by default) was told "the points it withheld are
    in the gradebook" (found by an instructor-reviewer): the line now says what was withheld, if anything."""
    from types import SimpleNamespace

    from softmax_lab.grading.copies import Copies, CopyPolicy, Flag
    from softmax_lab.grading.grade import closing_lines

    policy = CopyPolicy()
    copies = Copies(policy, {(f"l{k}/n.ipynb", "ex"): [Flag(kind, "m", 0.9, "1-3", "1-3")]
                             for k, kind in enumerate(kinds)})
    book = SimpleNamespace(out=tmp_path / "g.csv", feedback_dir=tmp_path / "feedback", beside=lambda n: tmp_path / n,
                           manual_csv_path=tmp_path / "m.csv", manual_md_path=tmp_path / "m.md", copies=copies,
                           rows={})
    assert closing_lines(book, policy) == 0
    err = capsys.readouterr().err
    assert f"flagged {len(kinds)} exercise(s)" in err and words in err, err


def test_each_gradebook_has_its_own_feedback_folder(graded):
    """Chapters graded into grades/ch02.csv and grades/ch04.csv once rewrote one grades/feedback/ (helper-74): the
    pages are in a folder named after the gradebook, as its other files."""
    out = graded["out"]
    assert default_feedback(Path("grades/ch02.csv")) == Path("grades/ch02.feedback")
    assert default_feedback(out).is_dir() and any(default_feedback(out).glob("*.html"))
    assert not (out.parent / "feedback").exists()
