"""The drawings (softmax_lab.pictures) and the steppers that show them: numbers from the real computation, a
static picture beside every drawn widget, and the learner's own rows."""
import math

import pytest
import torch

import softmax_lab
from softmax_lab import pictures, widgets
from softmax_lab.kernels import three_pass_softmax
from softmax_lab.memcount import count_calls
from softmax_lab.reference import softmax_ref


def texts(fig) -> list[str]:
    return [t.get_text() for ax in fig.axes for t in ax.texts]


def test_trace_steps_are_the_stable_softmax_in_float32():
    row = [1000.0, 1001.0, 1002.0]
    steps = dict(pictures.trace_steps(row, block=4))
    assert steps["load x"] == [1000.0, 1001.0, 1002.0, float("-inf")]
    assert steps["row max m"] == [1002.0]
    want = softmax_ref(torch.tensor([row], dtype=torch.float64))[0].tolist()
    assert steps["y = p / s"][:3] == pytest.approx(want, rel=1e-6) and steps["y = p / s"][3] == 0.0
    with pytest.raises(ValueError, match="must hold the row"):
        pictures.trace_steps(row, block=2)


def test_lanes_draw_every_lane_and_mark_padding_and_shared_values():
    fig = pictures.trace([-1002.0, -1001.0, -1000.0], block=4, pad=0.0, highlight=1)
    shown = texts(fig)
    assert "lane 3 (pad)" in shown and "0  (shared by every lane)" in shown  # 0-padding wins the max: the bug
    assert shown.count("-1002") == 2  # loaded, and x - m with m = 0
    assert pictures.png(fig)[:8] == b"\x89PNG\r\n\x1a\n"


def test_online_walk_is_the_seed_example():
    states = pictures.online_states([1, 2, 3, 0], 2)
    assert [(m, round(l, 3)) for _, m, l in states] == [(2.0, 1.368), (3.0, 1.553)]
    row = [0.5, 4.0, 1.0, 2.0, 6.0, -1.0, float("-inf")]
    m, l = pictures.online_states(row, 3)[-1][1:]
    assert m == 6.0 and l == pytest.approx(sum(math.exp(v - 6.0) for v in row))
    assert "m = 3\nl = 1.553" in texts(pictures.online_walk([1, 2, 3, 0], 2, highlight=1))


def test_split_row_combines_to_the_whole_row():
    row = [1.0, 2.0, 3.0, 0.0, 5.0, -1.0]
    total = sum(math.exp(v - 5.0) for v in row)
    assert any(f"L = {total:.3f}" in t for t in texts(pictures.split_row(row, 3)))


def test_dataflow_bytes_are_what_three_pass_really_moves():
    x = torch.randn(3, 40, device=softmax_lab.DEVICE)
    _, counted = count_calls(three_pass_softmax, x)
    assert counted.load_bytes + counted.store_bytes == pictures.three_pass_bytes(3, 40, 4)
    assert any("80.1 MiB moved" in t for t in (a.get_title(loc="left") for a in pictures.dataflow(4096, 1024).axes))


def test_stepper_draws_each_step_and_carries_a_static_picture():
    s = widgets.trace_stepper([3.0, 1.0, -2.0])
    first = s.image.value
    s.go(4)
    assert s.image.value != first and s.image.value == s.png(4)
    bundle = s._repr_mimebundle_()
    assert {"image/png", "text/plain", "application/vnd.jupyter.widget-view+json"} <= set(bundle)
    assert bundle["text/plain"].count("Step ") == 6 and "y = p / s" in bundle["text/plain"]
    with pytest.raises(TypeError, match="picture must be a function"):
        widgets.Stepper([("a", "b")], picture="not a function")
    plain = widgets.Stepper([("a", "b")])
    assert plain.image is None and "image/png" not in plain._repr_mimebundle_()


def test_padding_and_online_steppers_draw_too():
    pad = widgets.padding_stepper([-1002.0, -1001.0, -1000.0], block=4, pad=0.0)
    assert "not stored" in texts(pad.picture(5))
    online = widgets.online_stepper([1, 2, 3, 0], 2)
    assert online.text == "Step 1/2: tile 1 = [1, 2]\nm = 2, l = 1.368"


def test_padding_explorer_draws_the_chosen_padding_and_keeps_a_static_picture():
    ex = widgets.PaddingExplorer([-1002.0, -1001.0, -1000.0], block=4)
    minus_inf = ex.image.value
    ex.set_padding("0")
    assert ex.image.value != minus_inf and ex.image.value == ex.png("0")
    bundle = ex._repr_mimebundle_()
    assert "padding = -inf" in bundle["text/plain"] and "padding = 0" in bundle["text/plain"]
    assert ex.toggle.value == "0", "rendering the static picture does not change what the learner chose"


def test_make_lab_saves_widget_state_so_pictures_survive_a_reopen(tmp_path, monkeypatch):
    """`softmax-lab lab` writes the ipywidgets manager's saveState as this environment's JupyterLab default;
    JupyterLab's own settings loader reads it (tests/ui/test_reopen.py reopens a saved chapter in a browser with it)."""
    import json
    from pathlib import Path

    from jupyterlab_server.settings_utils import _get_overrides

    from softmax_lab import lab

    monkeypatch.setenv("JUPYTERLAB_DIR", str(tmp_path))
    path = lab.widget_settings()
    assert path == tmp_path / "settings" / "overrides.d" / "softmax-lab.json"
    overrides, error = _get_overrides(str(tmp_path / "settings"))
    assert not error and overrides["@jupyter-widgets/jupyterlab-manager:plugin"] == {"saveState": True}
    schema = (Path(lab.sys.prefix) / "share/jupyter/labextensions/@jupyter-widgets/jupyterlab-manager/schemas"
              / "@jupyter-widgets/jupyterlab-manager/plugin.json")
    if schema.is_file():  # the setting exists under that name in the installed extension
        assert "saveState" in json.loads(schema.read_text())["properties"]
    assert lab.widget_settings() == path  # idempotent
