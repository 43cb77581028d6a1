"""`softmax-lab build`: solution regions, rubric cells, outputs, staleness of notebooks/ (all chapters)."""
from __future__ import annotations

import copy
from pathlib import Path

import nbformat
import pytest

from conftest import NOTEBOOKS, SOLUTIONS
from softmax_lab import cli
from softmax_lab.course import build, execute, notebook, registry

ALL_SOLUTIONS = sorted(SOLUTIONS.glob("*.ipynb"))
# The registry of the test chapter 99 that exercise_nb() makes.
REGISTRY_99 = """\
[[exercise]]
id = "ch99-add"
points = 2
check = "check_add"

[[question]]
id = "ch99-why"
points = 1
"""


def registry_99(folder: Path) -> Path:
    folder.mkdir(parents=True, exist_ok=True)
    (folder / "ch99.toml").write_text(REGISTRY_99)
    return folder


def build_main(args: list[str]) -> int:
    """`softmax-lab build ARGS` with the registry of chapter 99 (beside the solutions folder given)."""
    sol = Path(args[args.index("--solutions") + 1])
    return cli.main(["build", *args, "--registry", str(registry_99(sol.parent / "exercises"))])

KERNEL_SOURCE = """\
import triton
import triton.language as tl

@triton.jit
def k(x_ptr, N, BLOCK: tl.constexpr):
    offs = tl.arange(0, BLOCK)
    ### BEGIN SOLUTION
    # HINT: load with a mask
    x = tl.load(x_ptr + offs, mask=offs < N)
    ### END SOLUTION
    tl.store(x_ptr + offs, x, mask=offs < N)"""


def make_nb(cells, chapter="99"):
    nb = nbformat.v4.new_notebook()
    nb.metadata["kernelspec"] = dict(notebook.KERNELSPEC)
    nb.metadata["softmax_lab"] = {"chapter": chapter, "title": "Test chapter"}
    nb.cells = cells
    return nb


def exercise_nb(ex="ch99-add"):
    code = nbformat.v4.new_code_cell
    md = nbformat.v4.new_markdown_cell
    cells = [
        code("import softmax_lab", outputs=[nbformat.v4.new_output("stream", text="hi\n")], execution_count=1),
        code("def add_one(x):\n    ### BEGIN SOLUTION\n    # HINT: one line\n    return x + 1\n    ### END SOLUTION",
             metadata={"tags": [f"exercise:{ex}", "points:2"]}, execution_count=2),
        code("print(add_one(1))", metadata={"tags": [f"check:{ex}", "nbval-check-output"]},
             outputs=[nbformat.v4.new_output("stream", text="2\n")], execution_count=3),
        md("Why?", metadata={"tags": ["question:ch99-why", "points:1"]}),
        md("### BEGIN SOLUTION\nBecause.\n### END SOLUTION", metadata={"tags": ["answer:ch99-why"]}),
        md("Full marks for 'because'.", metadata={"tags": ["rubric:ch99-why"]}),
    ]
    cells[1].metadata["execution"] = {"iopub.status.busy": "2026-01-01"}
    return make_nb(cells)


# ------------------------------------------------------------------------------------------- solution regions


def test_code_region_becomes_hints_and_raise_at_marker_indentation():
    out = notebook.strip_solutions(KERNEL_SOURCE, "code", "ch99-k")
    assert "tl.load" not in out
    assert "    # HINT: load with a mask\n" in out
    assert '    raise NotImplementedError("exercise ch99-k: replace this line with your code")\n' in out
    assert out.endswith("tl.store(x_ptr + offs, x, mask=offs < N)")  # code after the region is kept
    compile(out, "<learner>", "exec")  # still valid Python


def test_top_level_region_and_several_regions():
    src = "a = 1\n### BEGIN SOLUTION\nb = 2\n### END SOLUTION\ndef f():\n        ### BEGIN SOLUTION\n        pass\n" \
          "        ### END SOLUTION"
    out = notebook.strip_solutions(src, "code")
    assert out.splitlines() == ["a = 1", 'raise NotImplementedError("replace this line with your code")',
                                "def f():", '        raise NotImplementedError("replace this line with your code")']


def test_markdown_region_becomes_placeholder():
    out = notebook.strip_solutions("Intro\n### BEGIN SOLUTION\nThe answer.\n### END SOLUTION", "markdown")
    assert out == "Intro\nYOUR ANSWER HERE"


@pytest.mark.parametrize("src", ["### BEGIN SOLUTION\nx", "x\n### END SOLUTION",
                                 "### BEGIN SOLUTION\n### BEGIN SOLUTION\n### END SOLUTION"])
def test_unbalanced_markers_are_errors(src):
    with pytest.raises(notebook.BuildError):
        notebook.strip_solutions(src)


def test_blank_exercise_still_defines_its_names_and_raises_not_implemented():
    nb = build.learner_notebook(exercise_nb())
    ns: dict = {}
    exec(nb.cells[2].source, ns)  # cell 0 is the bootstrap cell
    with pytest.raises(NotImplementedError, match="ch99-add"):
        ns["add_one"](1)


# ---------------------------------------------------------------------------------------------- notebooks


def test_bootstrap_cell_sits_under_the_title_collapsed_and_narrow():
    """The first screen of every chapter: its title, then one collapsed line (the hosted-notebook installer)."""
    for path in sorted(NOTEBOOKS.glob("*.ipynb")):
        nb = nbformat.read(str(path), as_version=4)
        assert nb.cells[0].cell_type == "markdown" and nb.cells[0].source.startswith("# "), path.name
        cell = nb.cells[1]
        assert cell.id == build.BOOTSTRAP_ID and cell.metadata["jupyter"] == {"source_hidden": True}, path.name
        lines = cell.source.splitlines()
        assert len(lines[0]) <= 90 and "make lab" in lines[0], lines[0]
        assert max(map(len, lines)) <= build.BOOTSTRAP_WIDTH, "the cell must not scroll sideways"
    untitled = build.learner_notebook(exercise_nb())  # no title: the installer is the first cell
    assert untitled.cells[0].id == build.BOOTSTRAP_ID


def test_learner_notebook_drops_rubric_clears_outputs_keeps_ids_tags_metadata():
    sol = exercise_nb()
    before = copy.deepcopy(sol)
    nb = build.learner_notebook(sol)
    assert sol == before, "the solution notebook must not be modified"
    assert nb.cells[0].id == build.BOOTSTRAP_ID and "find_spec(\"softmax_lab\")" in nb.cells[0].source
    nb.cells = nb.cells[1:]
    assert [c.id for c in nb.cells] == [c.id for c in sol.cells[:5]]
    assert [c.metadata.get("tags") for c in nb.cells] == [c.metadata.get("tags") for c in sol.cells[:5]]
    assert not any(notebook.tag_value(c, "rubric:") for c in nb.cells)
    for c in nb.cells:
        if c.cell_type == "code":
            assert c.outputs == [] and c.execution_count is None
        assert "execution" not in c.metadata
    assert nb.cells[4].source == "YOUR ANSWER HERE"
    learner_sha = nb.metadata["softmax_lab"].pop("learner_sha")
    assert nb.metadata["softmax_lab"] == sol.metadata["softmax_lab"]
    assert nb.metadata["kernelspec"] == notebook.KERNELSPEC
    assert learner_sha == notebook.sources_sha(build.learner_notebook(sol))


def _built(tmp_path):
    sol, out = tmp_path / "solutions", tmp_path / "notebooks"
    sol.mkdir()
    nbformat.write(exercise_nb(), str(sol / "99_test.ipynb"))
    build.build(sol, out, log=lambda *_: None)
    return sol, out


def _edit_answer(path):
    nb = nbformat.read(str(path), as_version=4)
    k = next(i for i, c in enumerate(nb.cells) if "NotImplementedError" in c.source)
    nb.cells[k].source = nb.cells[k].source.replace(
        'raise NotImplementedError("exercise ch99-add: replace this line with your code")', "return x + 1  # mine")
    nb.cells[k].outputs = [nbformat.v4.new_output("stream", text="ran\n")]
    nbformat.write(nb, str(path))
    return path.read_text()


def test_build_never_overwrites_an_edited_learner_notebook(tmp_path, capsys):
    sol, out = _built(tmp_path)
    mine = _edit_answer(out / "99_test.ipynb")
    # the solution changes, so the build wants to rewrite the learner notebook
    nb = nbformat.read(str(sol / "99_test.ipynb"), as_version=4)
    nb.cells[0].source += "\nimport math"
    nbformat.write(nb, str(sol / "99_test.ipynb"))
    with pytest.raises(build.EditedNotebooks) as err:
        build.build(sol, out, log=lambda *_: None)
    assert err.value.names == ["99_test.ipynb"] and "workspace/" in str(err.value) and "--force" in str(err.value)
    assert (out / "99_test.ipynb").read_text() == mine
    args = ["--solutions", str(sol), "--out", str(out)]
    assert build_main(args) == 2 and "99_test.ipynb" in capsys.readouterr().err
    assert (out / "99_test.ipynb").read_text() == mine
    lines = []
    assert build.build(sol, out, check=True, log=lines.append) == ["99_test.ipynb"]
    assert lines == ["stale: notebooks/99_test.ipynb (edited by hand)"]
    assert build_main(args + ["--force"]) == 0
    assert "# mine" not in (out / "99_test.ipynb").read_text()


def test_only_outputs_or_reformatting_do_not_count_as_edits(tmp_path):
    sol, out = _built(tmp_path)
    nb = nbformat.read(str(out / "99_test.ipynb"), as_version=4)
    nb.metadata["language_info"] = {"name": "python"}  # what Jupyter adds on save
    nbformat.write(nb, str(out / "99_test.ipynb"))
    assert not notebook.edited_by_hand((out / "99_test.ipynb").read_text())
    assert notebook.edited_by_hand("{not json")
    assert notebook.edited_by_hand(_edit_answer(out / "99_test.ipynb"))


def test_stale_message_tells_authors_what_to_do_and_learners_not_to_worry(tmp_path, capsys):
    sol, out = tmp_path / "solutions", tmp_path / "notebooks"
    sol.mkdir()
    nbformat.write(exercise_nb(), str(sol / "99_test.ipynb"))
    assert build_main(["--solutions", str(sol), "--out", str(out), "--check"]) == 1
    err = capsys.readouterr().err
    assert "Authors: run `make notebooks`" in err and "Learners: nothing to do" in err


def test_validate_flags_broken_conventions():
    nb = exercise_nb()
    assert notebook.validate(nb) == []
    bad = copy.deepcopy(nb)
    bad.cells[2].metadata["tags"] = ["nbval-check-output"]  # check cell lost its check: tag
    bad.cells[1].metadata["tags"] = ["exercise:ch99-add", "points:two"]
    del bad.metadata["softmax_lab"]
    problems = "\n".join(notebook.validate(bad))
    assert "check:ch99-add" in problems and "points:two" in problems and "softmax_lab.chapter" in problems


def test_validate_against_the_registry(tmp_path):
    reg = registry.load(registry_99(tmp_path / "exercises"))
    nb = exercise_nb()
    assert notebook.validate(nb, "99_test.ipynb", reg) == []
    nb.cells[1].metadata["tags"] = ["exercise:ch99-add", "points:3"]  # the registry says 2
    nb.cells[3].metadata["tags"] = ["question:ch99-how"]             # not declared; ch99-why now has no cell
    problems = "\n".join(notebook.validate(nb, "99_test.ipynb", reg))
    assert "points:3 differs from the registry's points = 2" in problems
    assert "question ch99-how is not in the registry: add it to course/exercises/ch99.toml" in problems
    assert "declares question ch99-why, but no cell is tagged question:ch99-why" in problems
    nb = exercise_nb()
    nb.cells[1].metadata["tags"] = ["exercise:ch99-add"]  # a points: tag is optional (the registry counts)
    assert notebook.validate(nb, "99_test.ipynb", reg) == []
    nb.metadata["softmax_lab"]["chapter"] = "98"  # the registry declares ch99-add for chapter 99
    assert "declared for chapter 99" in "\n".join(notebook.validate(nb, "98_test.ipynb", reg))


def test_build_command_refuses_a_notebook_the_registry_does_not_know(tmp_path, capsys):
    sol = tmp_path / "solutions"
    sol.mkdir()
    nbformat.write(exercise_nb("ch99-other"), str(sol / "99_test.ipynb"))
    assert build_main(["--solutions", str(sol), "--out", str(tmp_path / "notebooks")]) == 2
    err = capsys.readouterr().err
    assert "exercise ch99-other is not in the registry" in err and "declares exercise ch99-add" in err


def test_registry_format_errors_are_named(tmp_path):
    bad = tmp_path / "ch07.toml"
    bad.write_text('[[exercise]]\nid = "x"\npoints = 1\n')
    with pytest.raises(registry.RegistryError, match=r"ch07.toml: \[\[exercise\]\] #1 \(x\): needs check"):
        registry.load_file(bad)
    bad.write_text('[[exercise]]\nid = "x"\npoints = 1\ncheck = "c"\nhints = ["one", "two"]\n')
    with pytest.raises(registry.RegistryError, match="exactly 3"):
        registry.load_file(bad)
    bad.write_text('[[exercise]]\nid = "x"\npoints = -1\ncheck = "c"\n')
    with pytest.raises(registry.RegistryError, match="whole number"):
        registry.load_file(bad)
    (tmp_path / "ch08.toml").write_text('[[question]]\nid = "x"\npoints = 1\n')
    bad.write_text('[[exercise]]\nid = "x"\npoints = 1\ncheck = "c"\n')
    with pytest.raises(registry.RegistryError, match="also declared in ch07.toml"):
        registry.load(tmp_path)


def test_course_registry_lists_chapters_exercises_and_questions():
    from softmax_lab import checks, course

    assert course.chapters() == sorted({p.name[:2] for p in ALL_SOLUTIONS})
    for ex in course.exercises():
        assert callable(getattr(checks, ex.check, None)), f"{ex.id}: no check {ex.check} in softmax_lab.checks"
        assert ex.points > 0 and ex.id.startswith(f"ch{ex.chapter}-")
        assert ex.hints == () or len(ex.hints) == 3
    assert course.exercise("ch04-fused").points == 4 and course.exercise("ch04-fused").chapter == "04"
    assert {q.id for q in course.questions("04")} == {"ch04-q-what-changed", "ch04-q-num-warps", "explain:ch04-fused"}
    assert course.exercise("ch04-fused").code_points == 3  # seed 002's split: 1 point is the explanation's
    with pytest.raises(KeyError, match="no exercise 'nope'"):
        course.exercise("nope")


def test_readme_chapter_table_matches_the_registry():
    """The README's chapter table names every chapter the registry declares, with its notebook."""
    from softmax_lab import course

    readme = (SOLUTIONS.parent / "README.md").read_text(encoding="utf-8")
    for chapter in course.chapters():
        (sol,) = SOLUTIONS.glob(f"{chapter}_*.ipynb")
        assert f"| {int(chapter)} | `{sol.stem}` |" in readme, f"README's chapter table lacks chapter {chapter}"


def test_build_writes_then_check_detects_stale_and_orphans(tmp_path):
    sol, out = tmp_path / "solutions", tmp_path / "notebooks"
    sol.mkdir()
    nbformat.write(exercise_nb(), str(sol / "99_test.ipynb"))
    assert build.build(sol, out, check=True, log=lambda *_: None) == ["99_test.ipynb"]  # missing
    assert build.build(sol, out, log=lambda *_: None) == ["99_test.ipynb"]
    assert build.build(sol, out, check=True, log=lambda *_: None) == []
    # editing a solution makes the learner notebook stale
    nb = nbformat.read(str(sol / "99_test.ipynb"), as_version=4)
    nb.cells[0].source += "\nimport torch"
    nbformat.write(nb, str(sol / "99_test.ipynb"))
    assert build.build(sol, out, check=True, log=lambda *_: None) == ["99_test.ipynb"]
    # a learner notebook without a solution is stale too
    build.build(sol, out, log=lambda *_: None)
    (out / "98_gone.ipynb").write_text("{}")
    assert build.build(sol, out, check=True, log=lambda *_: None) == ["98_gone.ipynb"]


def test_duplicate_exercise_ids_across_chapters_are_rejected(tmp_path):
    sol = tmp_path / "solutions"
    sol.mkdir()
    nbformat.write(exercise_nb(), str(sol / "98_a.ipynb"))
    nbformat.write(exercise_nb(), str(sol / "99_b.ipynb"))
    with pytest.raises(notebook.BuildError, match="also used"):
        build.build(sol, tmp_path / "notebooks", log=lambda *_: None)


def test_cli_exit_codes(tmp_path, capsys):
    sol, out = tmp_path / "solutions", tmp_path / "notebooks"
    sol.mkdir()
    nbformat.write(exercise_nb(), str(sol / "99_test.ipynb"))
    args = ["--solutions", str(sol), "--out", str(out)]
    assert build_main(args + ["--check"]) == 1
    assert build_main(args) == 0
    assert build_main(args + ["--check"]) == 0
    bad = exercise_nb()
    bad.cells[1].source = "### BEGIN SOLUTION\nx = 1"
    nbformat.write(bad, str(sol / "99_test.ipynb"))
    assert build_main(args) == 2
    assert "without" in capsys.readouterr().err


def test_widget_state_gets_stable_ids():
    def executed(a, b):
        nb = make_nb([nbformat.v4.new_code_cell("w", id="cell-w", outputs=[nbformat.v4.new_output(
            "display_data", data={execute.WIDGET_VIEW: {"model_id": a, "version_major": 2, "version_minor": 0}})])])
        nb.metadata["widgets"] = {execute.WIDGET_STATE: {"state": {
            a: {"model_name": "IntSliderModel", "state": {"layout": f"IPY_MODEL_{b}"}},
            b: {"model_name": "LayoutModel", "state": {}},
            "f" * 32: {"model_name": "Orphan", "state": {}}}, "version_major": 2, "version_minor": 0}}
        return nb

    one, two = executed("a" * 32, "b" * 32), executed("c" * 32, "d" * 32)
    execute.stable_widget_state(one, "x")
    execute.stable_widget_state(two, "x")
    assert notebook.dumps(one) == notebook.dumps(two)
    state = one.metadata["widgets"][execute.WIDGET_STATE]["state"]
    assert len(state) == 2  # the orphan model is gone
    view = one.cells[0].outputs[0]["data"][execute.WIDGET_VIEW]["model_id"]
    assert state[view]["state"]["layout"].removeprefix("IPY_MODEL_") in state


# ------------------------------------------------------------------------------------- the real chapters


@pytest.mark.skipif(not ALL_SOLUTIONS, reason="no solution notebooks yet")
def test_solutions_follow_the_conventions():
    problems = []
    for p in ALL_SOLUTIONS:
        problems += notebook.validate(notebook.read(p), p.name, registry.load())
    assert not problems, "\n".join(problems)


@pytest.mark.skipif(not ALL_SOLUTIONS, reason="no solution notebooks yet")
def test_solutions_are_executed():
    """nbval compares against stored outputs: every code cell needs its execution count
    (softmax-lab build --execute)."""
    missing = [f"{p.name}: cell {c.id}" for p in ALL_SOLUTIONS for c in notebook.read(p).cells
               if c.cell_type == "code" and c.source.strip() and c.execution_count is None]
    assert not missing, "run `softmax-lab build --execute` for: " + ", ".join(missing)


@pytest.mark.skipif(not ALL_SOLUTIONS, reason="no solution notebooks yet")
def test_learner_notebooks_are_up_to_date():
    stale = build.build(SOLUTIONS, NOTEBOOKS, check=True, log=lambda *_: None, registry=registry.load())
    assert not stale, f"notebooks/ is stale, run `make notebooks`: {stale}"


@pytest.mark.skipif(not ALL_SOLUTIONS, reason="no solution notebooks yet")
@pytest.mark.parametrize("path", ALL_SOLUTIONS, ids=lambda p: p.name)
def test_learner_exercise_cells_still_compile(path):
    nb = build.learner_notebook(notebook.read(path))
    for cell in nb.cells:
        if cell.cell_type == "code" and notebook.tag_value(cell, "exercise:"):
            assert "### BEGIN SOLUTION" not in cell.source
            assert "NotImplementedError" in cell.source
            compile(cell.source, f"{path.name}:{cell.id}", "exec")


def test_execute_joins_print_chunks_like_nbval():
    from nbformat.v4 import new_code_cell, new_notebook, new_output

    from nbconvert.preprocessors import CoalesceStreamsPreprocessor

    cell = new_code_cell("for i in range(3): print(i)")
    cell.outputs = [new_output("stream", name="stdout", text="0\n"), new_output("stream", name="stdout", text="1\n"),
                    new_output("stream", name="stderr", text="warn\n"), new_output("stream", name="stdout", text="2\n")]
    nb = new_notebook(cells=[cell])
    nb, _ = CoalesceStreamsPreprocessor().preprocess(nb, {})
    assert [(o.name, o.text) for o in nb.cells[0].outputs] == [("stdout", "0\n1\n"), ("stderr", "warn\n"),
                                                               ("stdout", "2\n")]
