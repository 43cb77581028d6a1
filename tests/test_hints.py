"""The hint ladder (softmax_lab.hints): four levels per exercise, recorded in the notebook's outputs."""
from __future__ import annotations

import json
import re
from pathlib import Path

import pytest
from IPython.core.interactiveshell import InteractiveShell
from IPython.utils.capture import capture_output

from softmax_lab import hints
from softmax_lab.course import notebook
from softmax_lab.grading import hints as grading_hints

ROOT = Path(__file__).resolve().parents[1]


@pytest.fixture(autouse=True)
def fresh_ladder(monkeypatch):
    monkeypatch.setattr(hints, "_shown", {})
    monkeypatch.setattr(hints, "_seeded", False)
    monkeypatch.setattr(hints, "_cache", None)
    monkeypatch.delenv("JPY_SESSION_NAME", raising=False)
    InteractiveShell.instance()  # display() needs a shell; capture_output() records what it publishes


def recorded(outputs):
    """(exercise, level) of each captured display that carries a hint record."""
    out = []
    for o in outputs:
        rec = (o.metadata or {}).get("softmax_lab", {}).get("hint")
        if rec:
            out.append((rec["exercise"], rec["level"]))
    return out


def solution_cells():
    for path in sorted((ROOT / "solutions").glob("*.ipynb")):
        for cell in notebook.read(path).cells:
            ex = notebook.tag_value(cell, "exercise:")
            if ex:
                yield ex, cell


def test_hint_walks_levels_1_to_3_and_never_shows_4_unasked():
    with capture_output() as cap:
        for _ in range(5):
            hints.hint("ch04-fused")
    assert recorded(cap.outputs) == [("ch04-fused", 1), ("ch04-fused", 2), ("ch04-fused", 3)]
    last = cap.outputs[-1].data["text/plain"]
    assert 'softmax_lab.hint("ch04-fused", 4)' in last and "earns at most 50% of its points" in last
    assert "tl.store" not in "".join(o.data["text/plain"] for o in cap.outputs[3:])


def test_level_4_only_when_asked_says_it_caps_and_is_recorded():
    with capture_output() as cap:
        hints.hint("ch04-fused", 4)
    (out,) = cap.outputs
    assert out.metadata == {"softmax_lab": {"hint": {"exercise": "ch04-fused", "level": 4},
                                            "hints": {"ch04-fused": 4}}}
    text = out.data["text/markdown"]
    assert "earns at most 50% of its points" in text and "```python" in text
    assert "tl.program_id(0).to(tl.int64)" in text


def test_output_is_markdown_and_plain_text():
    with capture_output() as cap:
        hints.hint("ch00-double", 1)
    (out,) = cap.outputs
    assert set(out.data) == {"text/markdown", "text/plain"}
    assert out.data["text/plain"].startswith("Hint 1/4 for `ch00-double` (concept area)")


def test_unknown_id_lists_the_chapters_ids_and_records_nothing():
    with capture_output() as cap:
        hints.hint("ch04-fuse")
    (out,) = cap.outputs
    assert recorded(cap.outputs) == []
    assert "no exercise 'ch04-fuse'" in out.data["text/plain"]
    assert "ch04-fused" in out.data["text/plain"] and "ch04-traffic" in out.data["text/plain"]
    with pytest.raises(hints.HintError, match="course's exercises"):
        hints.level_text("nonsense", 1)


@pytest.mark.parametrize("level", [0, 5, "2", True, 2.0])
def test_bad_level_is_named(level):
    with pytest.raises(hints.HintError, match="levels are 1, 2, 3 and 4"):
        hints.level_text("ch00-double", level)


def test_plain_python_prints(capsys, monkeypatch):
    monkeypatch.setattr("IPython.get_ipython", lambda: None)
    hints.hint("ch01-stable-row", 2)
    assert capsys.readouterr().out.startswith("Hint 2/4 for `ch01-stable-row` (specific direction)")


def test_button_reveals_the_next_level_through_its_display_handle():
    with capture_output() as cap:
        b = hints.hint_button("ch02-masked-load-store")
        first = len(cap.outputs)
        for _ in range(3):
            b.button.click()
        assert recorded(cap.outputs) == [("ch02-masked-load-store", n) for n in (1, 2, 3)]
        b.button.click()  # the 4th click only arms the complete answer
        assert len(recorded(cap.outputs)) == 3 and "caps" in b.button.description
        b.button.click()
    assert recorded(cap.outputs)[-1] == ("ch02-masked-load-store", 4)
    assert b.button.disabled
    # the idle text shown when the cell ran says what to do where no button renders
    assert any('softmax_lab.hint("ch02-masked-load-store")' in o.data.get("text/plain", "")
               for o in cap.outputs[:first])
    # every reveal went to one display id (an update of the output made when the cell ran): the saved
    # notebook keeps the last one, with all the levels shown so far
    final = cap.outputs[-1].data["text/markdown"]
    assert all(f"Hint {n}/4" in final for n in (1, 2, 3, 4))


def test_button_for_unknown_id_says_so():
    with capture_output() as cap:
        assert hints.hint_button("ch02-nope") is None
    assert "chapter 02's exercises" in cap.outputs[0].data["text/plain"]


@pytest.mark.parametrize("ex,cell", list(solution_cells()), ids=[e for e, _ in solution_cells()])
def test_level_4_is_the_solution_region(ex, cell):
    """Derived, never copied: every line of the solution region (but # HINT: lines) is in level 4, and none of
    it in the learner's cell."""
    text = hints.level_text(ex, 4)
    inside, region = False, []
    for line in cell.source.splitlines():
        if line.strip() == hints.BEGIN:
            inside = True
        elif line.strip() == hints.END:
            inside = False
        elif inside and line.strip() and not line.strip().startswith(hints.HINT):
            region.append(line.strip())
    assert region, ex
    assert all(line in text for line in region), ex


def test_packaged_data_is_not_stale():
    """data/hints/chNN.json (what an installed package reads) equals what the sources give now.
    Fix: python -m softmax_lab.hints"""
    want = hints.hint_data_texts()
    have = {p.name: p.read_text(encoding="utf-8") for p in hints.DATA_DIR.glob("ch*.json")}
    assert have == want, "data/hints/ is stale: run `python -m softmax_lab.hints` and commit it"


def test_installed_package_reads_the_packaged_data(monkeypatch):
    from_sources = hints.table()
    monkeypatch.setattr(hints, "_cache", None)
    monkeypatch.setattr(hints, "_repo_solutions", lambda: None)
    assert hints.table() == json.loads(json.dumps(from_sources))
    assert "tl.int64" in hints.level_text("ch04-fused", 4)


def test_write_hint_data_rewrites_only_what_changed(tmp_path):
    assert sorted(hints.write_hint_data(target=tmp_path)) == sorted(hints.hint_data_texts())
    assert hints.write_hint_data(target=tmp_path) == []
    (tmp_path / "ch99.json").write_text("{}")
    assert hints.write_hint_data(target=tmp_path) == ["ch99.json"] and not (tmp_path / "ch99.json").exists()


def _ladder_params():
    for ident, entry in sorted(hints.read_registry().items()):
        yield pytest.param(ident, entry, id=ident)


@pytest.mark.parametrize("ident,entry", list(_ladder_params()))
def test_every_exercise_has_three_written_levels(ident, entry):
    ladder = entry["hints"]
    assert len(ladder) == 3 and all(isinstance(h, str) and h.strip() for h in ladder), ident
    assert len(set(ladder)) == 3, f"{ident}: the levels repeat each other"
    answer = "\n".join(hints.table()[ident]["answer"])
    code_lines = {re.sub(r"\s+", "", ln) for ln in answer.splitlines() if len(ln.strip()) > 25}
    for h in ladder[:2]:  # levels 1 and 2 point the way: they quote no full line of the answer
        assert not any(ln in re.sub(r"\s+", "", h) for ln in code_lines), (ident, h)


def test_a_real_kernel_saves_the_records_in_the_notebook(tmp_path):
    """Run hint() and a button click in a real Jupyter kernel (nbclient): the saved notebook's outputs carry the
    records, the button's as the update of the display made when its cell ran."""
    import nbformat
    from nbclient import NotebookClient

    nb = nbformat.v4.new_notebook()
    nb.cells = [nbformat.v4.new_code_cell('import softmax_lab\nsoftmax_lab.hint("ch01-stable-row")'),
                nbformat.v4.new_code_cell('b = softmax_lab.hint_button("ch04-fused")\nb.button.click()\n'
                                          'b.button.click()')]
    from jupyter_client.kernelspec import KernelSpecManager

    # the course's kernel where it is installed (make test), else this Python's default kernel (a bare GPU image)
    name = notebook.KERNEL_NAME if notebook.KERNEL_NAME in KernelSpecManager().find_kernel_specs() else "python3"
    NotebookClient(nb, timeout=120, kernel_name=name).execute()
    first = [o for o in nb.cells[0].outputs if o.output_type == "display_data"]
    assert [o.metadata for o in first] == [{"softmax_lab": {"hint": {"exercise": "ch01-stable-row", "level": 1},
                                                            "hints": {"ch01-stable-row": 1}}}]
    shown = [o for o in nb.cells[1].outputs if o.get("metadata", {}).get("softmax_lab")]
    assert [o.metadata["softmax_lab"]["hint"] for o in shown] == [{"exercise": "ch04-fused", "level": 2}]
    assert "Hint 1/4" in shown[0].data["text/markdown"] and "Hint 2/4" in shown[0].data["text/markdown"]


# --- durable records: re-running, clearing or deleting a hint cell never lowers the level -----------------------


def test_every_hint_output_carries_the_highest_levels_so_far():
    with capture_output() as cap:
        hints.hint("ch04-fused", 4)
        hints.hint("ch01-stable-row", 1)
        hints.hint("ch04-fused")            # after the answer: says so, and records it again
        b = hints.hint_button("ch04-fused")  # a button cell re-run: its idle output keeps the record
    levels = {"ch01-stable-row": 1, "ch04-fused": 4}
    assert [o.metadata["softmax_lab"]["hints"] for o in cap.outputs[1:] if o.metadata] == [levels] * 3
    assert "seen the complete answer" in cap.outputs[2].data["text/plain"]
    assert b is not None
    # the grader reads any one of them: deleting the other cells loses nothing
    nb = {"cells": [{"cell_type": "code", "outputs": [{"output_type": "display_data", "data": {},
                                                        "metadata": cap.outputs[-1].metadata}]}]}
    assert grading_hints.levels_used(nb) == levels


def test_grader_reads_the_notebook_metadata_and_ignores_malformed_records():
    nb = {"metadata": {"softmax_lab": {"chapter": "04", "hints": {"ch04-fused": 4, "ch04-x": 9, "": 1,
                                                                   "ch04-traffic": True, "ch01-stable-row": 2}}},
          "cells": [{"cell_type": "code", "outputs": [{"output_type": "display_data", "metadata": {
              "softmax_lab": {"hint": {"exercise": "ch01-stable-row", "level": 3}}}}]}]}
    assert grading_hints.levels_used(nb) == {"ch04-fused": 4, "ch01-stable-row": 3}
    for broken in ({"metadata": {"softmax_lab": []}}, {"metadata": {"softmax_lab": {"hints": [1]}}},
                   {"cells": "x"}, [], None):
        assert grading_hints.levels_used(broken) == {}


def _session(monkeypatch, path):
    monkeypatch.setenv("JPY_SESSION_NAME", str(path))
    monkeypatch.setattr(hints, "_shown", {})
    monkeypatch.setattr(hints, "_seeded", False)


def test_a_restarted_kernel_goes_on_from_the_file_beside_the_notebook(tmp_path, monkeypatch):
    nb_path = tmp_path / "04_three_kernels_to_one.ipynb"
    _session(monkeypatch, nb_path)
    with capture_output():
        hints.hint("ch04-fused")
        hints.hint("ch04-fused")
    beside = json.loads((tmp_path / hints.RECORD_FILE).read_text())
    assert beside == {nb_path.name: {"ch04-fused": 2}}
    _session(monkeypatch, nb_path)  # a new kernel for the same notebook
    with capture_output() as cap:
        hints.hint("ch04-fused")
    assert recorded(cap.outputs) == [("ch04-fused", 3)]
    # another notebook in the same folder has its own record
    _session(monkeypatch, tmp_path / "05_online_softmax.ipynb")
    with capture_output() as cap:
        hints.hint("ch04-fused")
    assert recorded(cap.outputs) == [("ch04-fused", 1)]
    assert set(json.loads((tmp_path / hints.RECORD_FILE).read_text())) == {nb_path.name, "05_online_softmax.ipynb"}


def test_a_restarted_kernel_goes_on_from_the_saved_notebook(tmp_path, monkeypatch):
    nb_path = tmp_path / "02_masks_and_padding.ipynb"
    nb_path.write_text(json.dumps({"metadata": {"softmax_lab": {"hints": {"ch02-masked-load-store": 3}}},
                                   "cells": []}))
    _session(monkeypatch, nb_path)
    assert hints.next_level("ch02-masked-load-store") == 3
    with capture_output() as cap:
        hints.hint("ch02-masked-load-store")
    assert "seen hints 1-3" in cap.outputs[0].data["text/plain"]
    assert cap.outputs[0].metadata == {"softmax_lab": {"hints": {"ch02-masked-load-store": 3}}}


def test_a_read_only_folder_still_records_in_the_outputs(tmp_path, monkeypatch):
    _session(monkeypatch, tmp_path / "missing-folder" / "x.ipynb")
    with capture_output() as cap:
        hints.hint("ch00-double", 2)
    assert recorded(cap.outputs) == [("ch00-double", 2)]


def _contents_manager(root):
    """The Jupyter server's own file manager with the hook `make lab` installs (softmax_lab.lab)."""
    from jupyter_server.services.contents.filemanager import FileContentsManager

    return FileContentsManager(root_dir=str(root), pre_save_hook="softmax_lab.hints.save_hook")


def _hint_output(ident, level):
    return {"output_type": "display_data", "data": {"text/plain": "hint"},
            "metadata": {"softmax_lab": {"hint": {"exercise": ident, "level": level}}}}


def test_save_hook_keeps_the_levels_in_the_notebook_metadata(tmp_path):
    import nbformat

    cm = _contents_manager(tmp_path)
    nb = nbformat.v4.new_notebook(metadata={"softmax_lab": {"chapter": "04"}})
    cell = nbformat.v4.new_code_cell('softmax_lab.hint("ch04-fused", 4)')
    cell.outputs = [nbformat.from_dict(_hint_output("ch04-fused", 4))]
    nb.cells = [cell]
    cm.save({"type": "notebook", "format": "json", "content": nb}, "04.ipynb")
    saved = json.loads((tmp_path / "04.ipynb").read_text())
    assert saved["metadata"]["softmax_lab"] == {"chapter": "04", "hints": {"ch04-fused": 4}}
    # the cell re-run with a lower level, then cleared, then deleted: every save keeps level 4
    cell.outputs = [nbformat.from_dict(_hint_output("ch04-fused", 1))]
    del nb.metadata["softmax_lab"]["hints"]   # the browser's copy of the notebook never had it
    for step in ("re-run", "cleared", "deleted"):
        if step == "cleared":
            cell.outputs = []
        if step == "deleted":
            nb.cells = []
        cm.save({"type": "notebook", "format": "json", "content": nb}, "04.ipynb")
        saved = json.loads((tmp_path / "04.ipynb").read_text())
        assert saved["metadata"]["softmax_lab"]["hints"] == {"ch04-fused": 4}, step
        assert grading_hints.levels_used(saved) == {"ch04-fused": 4}, step


def test_save_hook_reads_the_file_beside_the_notebook_and_never_breaks_a_save(tmp_path):
    import nbformat

    cm = _contents_manager(tmp_path)
    (tmp_path / hints.RECORD_FILE).write_text(json.dumps({"02.ipynb": {"ch02-masked-load-store": 2}}))
    nb = nbformat.v4.new_notebook()
    cm.save({"type": "notebook", "format": "json", "content": nb}, "02.ipynb")
    saved = json.loads((tmp_path / "02.ipynb").read_text())
    assert saved["metadata"]["softmax_lab"]["hints"] == {"ch02-masked-load-store": 2}
    # nothing recorded: nothing written; garbage beside it or in the model never stops a save
    cm.save({"type": "notebook", "format": "json", "content": nbformat.v4.new_notebook()}, "other.ipynb")
    assert "softmax_lab" not in json.loads((tmp_path / "other.ipynb").read_text())["metadata"]
    (tmp_path / hints.RECORD_FILE).write_text("{not json")
    nb2 = nbformat.v4.new_notebook(metadata={"softmax_lab": "garbage"})
    cm.save({"type": "notebook", "format": "json", "content": nb2}, "02.ipynb")
    cm.save({"type": "file", "format": "text", "content": "hello"}, "notes.txt")
    hints.save_hook(model=None, path="x", contents_manager=None)
    assert (tmp_path / "notes.txt").read_text() == "hello"


def test_make_lab_installs_the_save_hook(tmp_path):
    from softmax_lab import lab

    cmd = lab.jupyter_command(tmp_path, 8899, open_browser=False)
    assert "--ContentsManager.pre_save_hook=softmax_lab.hints.save_hook" in cmd


def test_level_4_names_the_cap_the_grader_applies(monkeypatch, tmp_path):
    """The cap in the text is the grader's: [grading] answer_hint_cap of the course's softmax-lab.toml."""
    from softmax_lab.grading import options

    assert hints.answer_cap() == grading_hints.DEFAULT_ANSWER_HINT_CAP == 0.5
    hints.table()  # the ladders, read from this checkout before its course file is swapped
    (tmp_path / "solutions").mkdir()
    (tmp_path / options.COURSE_CONFIG).write_text("[grading]\nanswer_hint_cap = 0.25\n")
    monkeypatch.setattr(hints, "_repo_solutions", lambda: tmp_path / "solutions")
    assert "earns at most 25% of its points" in hints.level_text("ch04-fused", 4)
    assert options.course_hint_cap(tmp_path / "solutions") == 0.25
