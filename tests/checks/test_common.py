"""What every check prints: identical failure reasons grouped into one line, and an error in the learner's code
reported at their own line."""
import softmax_lab
import pytest

from check_helpers import HEADER, exercise_source, load, run_check


def test_report_groups_identical_reasons_where_the_first_failed(capsys):
    from softmax_lab.checks import Report

    r = Report("ex")
    r.add("a", "")
    for name in ("b", "c", "d", "e"):
        r.add(name, "same reason")
    r.add("f", "other reason")
    r.add("g", "")
    r.add("h", "pair")
    r.add("i", "pair")
    assert not r.show()
    assert capsys.readouterr().out.splitlines() == [
        "PASS  a",
        "FAIL ×4 cases (b; c; … 2 more): same reason",
        "FAIL  f: other reason",
        "PASS  g",
        "FAIL ×2 cases (h; i): pair",
        'how to fix it: softmax_lab.hint("ex") shows the next hint level (each level you see is recorded)',
        "ex: FAILED (2/9 checks passed)",
    ]
    assert len(r.lines) == 9  # the per-case record is kept


def test_a_failing_check_points_at_the_hint_ladder_but_a_blank_or_passing_one_does_not(capsys):
    """The FAIL lines name the mistake; the fix is the hint ladder's (every level shown is recorded)."""
    from softmax_lab.checks import Report

    for problems, pointer in ((["", "wrong"], True), (["", ""], False),
                              (["not implemented yet - replace `raise NotImplementedError` with your code"], False)):
        r = Report("ch00-double")
        for k, problem in enumerate(problems):
            r.add(f"case {k}", problem)
        r.show()
        out = capsys.readouterr().out.splitlines()
        assert ('softmax_lab.hint("ch00-double")' in "\n".join(out)) == pointer, out
        assert out[-1].startswith("ch00-double: "), "the verdict line stays last (the grader reads it)"


@pytest.mark.skipif(softmax_lab.ON_GPU, reason="on a GPU the compiler reports the kernel line in its own message")
def test_error_in_the_learners_kernel_names_their_line(tmp_path):
    source = exercise_source("ch00-double").replace(
        "    x = tl.load(in_ptr + offs, mask=mask)\n",
        "    x = tl.load(in_ptr + offs, mask=mask)\n    y = tl.reshape(x, (3, 7))\n")
    module = load("ch00-double", source, tmp_path)
    ok, text = run_check("ch00-double", module)
    want = HEADER.count("\n") + source.splitlines().index("    y = tl.reshape(x, (3, 7))") + 1
    assert not ok
    assert f"(at line {want} of your code: `y = tl.reshape(x, (3, 7))`)" in text, text
    assert sum(l.startswith("FAIL") for l in text.splitlines()) == 1, text  # four cases, one reason: one line


def test_error_in_the_learners_launcher_names_their_line(tmp_path):
    source = exercise_source("ch00-double").replace("    BLOCK = 64\n", "    BLOCK = 64\n    x.no_such_thing\n")
    ok, text = run_check("ch00-double", load("ch00-double", source, tmp_path))
    assert not ok and "AttributeError" in text and "of your code: `x.no_such_thing`" in text, text
