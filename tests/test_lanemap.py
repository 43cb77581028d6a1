"""softmax_lab.draw / lanemap: the learner's kernel drawn from its real memory operations, with findings that
name the usual mistakes (unmasked store, wrong row stride), and nothing reported for a correct kernel."""
import importlib.util
from pathlib import Path

import nbformat
import pytest
import torch

import softmax_lab
from softmax_lab import lanemap, pictures
from softmax_lab.checks import ch02, ch04, ch05, ch06, ch08
from softmax_lab.checks.ch05 import online_kernel
from softmax_lab.checks.ch06 import masked
from softmax_lab.kernels import fused_softmax, multirow_softmax, online_softmax

from lanemap_kernels import _kernel  # a plain module: Triton's interpreter and pytest's assertion rewriting clash

DEVICE = softmax_lab.DEVICE


def launcher(use_stride=True, mask_store=True):
    def run(x):
        y = torch.empty(x.shape, device=x.device)
        _kernel[(x.shape[0],)](y, x, x.stride(0), y.stride(0), x.shape[1], BLOCK=16, USE_STRIDE=use_stride,
                               MASK_STORE=mask_store)
        return y
    return run


def strided():
    return torch.randn(4, 14, device=DEVICE)[:, :10]


@pytest.mark.parametrize("good", [fused_softmax, multirow_softmax, online_softmax, launcher()])
def test_correct_kernels_have_no_findings(good):
    m = lanemap.lane_map(good, strided())
    assert m.findings == []
    assert (m.stores[:, :10] >= 0).all() and (m.store_counts[:, :10] == 1).all()
    assert (m.loads[:, 10:] == lanemap.NONE).all(), "nothing in the gap of the strided input is read"


def test_unmasked_store_is_named():
    m = lanemap.lane_map(launcher(mask_store=False), strided())
    text = " ".join(m.findings)
    assert "stored more than once" in text and "stored outside every tensor" in text
    assert "the store is not masked" in text
    assert m.outside["store"] == 6  # the last row's 6 padding lanes, switched off instead of corrupting memory


def test_wrong_row_stride_is_named():
    m = lanemap.lane_map(launcher(use_stride=False), strided())
    assert any("its input row offset is wrong" in f for f in m.findings), m.findings
    assert not any("output row offset" in f for f in m.findings), m.findings
    assert (m.loads[3, :10] == lanemap.NONE).all(), "row 3 of x is never read"


def test_a_wrong_output_row_step_blames_the_output(tmp_path):
    """The review (2026-12-02): the output stepped by the input's stride was blamed on the input's row stride.
    Every input row was read whole by its own program: the output's row offsets are what is wrong."""
    def edit(src):
        return src.replace("out_ptr + row * out_row_stride", "out_ptr + row * in_row_stride")

    fn = exercise("04_three_kernels_to_one.ipynb", "ch04-fused", tmp_path, edit).my_fused_softmax
    m = lanemap.lane_map(ch04.lane_launch(fn), strided())
    assert any("its output row offset is wrong" in f for f in m.findings), m.findings
    assert not any("input row offset" in f for f in m.findings), m.findings


def test_draw_returns_a_picture_and_prints_findings(capsys):
    fig = softmax_lab.draw(launcher(mask_store=False), strided(), title="mine")
    assert pictures.png(fig)[:4] == b"\x89PNG"
    assert "the store is not masked" in capsys.readouterr().out
    with pytest.raises(ValueError, match="small input"):
        lanemap.lane_map(fused_softmax, torch.randn(100, 100, device=DEVICE))


# --- the lane map after a FAIL in the chapters' kernel checks -------------------------------------------------

ROOT = Path(__file__).resolve().parents[1]
HEADER = "import softmax_lab\nimport math\nimport torch\nimport triton\nimport triton.language as tl\n\n"
CHAPTERS = [  # (solution notebook, exercise, checks module, check, the launcher's name)
    ("02_masks_and_padding.ipynb", "ch02-masked-load-store", ch02, ch02.check_masked_rows, "softmax_rows"),
    ("04_three_kernels_to_one.ipynb", "ch04-fused", ch04, ch04.check_fused, "my_fused_softmax"),
    ("05_online_softmax.ipynb", "ch05-online-kernel", online_kernel, ch05.check_online_softmax, "online_softmax"),
    ("06_half_precision_and_attention.ipynb", "ch06-masked", masked, ch06.check_masked_softmax,
     "masked_attention_softmax"),
    ("08_backward.ipynb", "ch08-backward", ch08, ch08.check_softmax_backward, "softmax_backward"),
]


def exercise(notebook, ex, tmp_path, edit=None, folder_nb=None):
    """The exercise cell (of the solution, or of ``folder_nb``, a notebook object), optionally edited, imported
    from a real file (Triton needs the source)."""
    nb = folder_nb or nbformat.read(ROOT / "solutions" / notebook, as_version=4)
    source = next(c.source for c in nb.cells if f"exercise:{ex}" in c.metadata.get("tags", []))
    path = tmp_path / f"{ex.replace('-', '_')}.py"
    path.write_text(HEADER + (edit(source) if edit else source) + "\n")
    spec = importlib.util.spec_from_file_location(path.stem, path)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


@pytest.mark.parametrize("notebook,ex,checks,check,name", CHAPTERS, ids=[c[1] for c in CHAPTERS])
def test_solutions_draw_without_findings(notebook, ex, checks, check, name, tmp_path):
    fn = getattr(exercise(notebook, ex, tmp_path), name)
    x = checks.lane_input() if checks.lane_input else None
    m = lanemap.lane_map(checks.lane_launch(fn), x if x is not None else strided())
    assert m.findings == [], m.findings


def test_a_failing_check_shows_the_lane_map_before_its_verdict(tmp_path, capsys):
    # ch02 with the store's mask removed: padding lanes written into the next row and past the end.
    def unmask(src):
        return src.replace("tl.store(out_ptr + row * n_cols + cols, y, mask=mask)",
                           "tl.store(out_ptr + row * n_cols + cols, y)")

    fn = exercise("02_masks_and_padding.ipynb", "ch02-masked-load-store", tmp_path, unmask).softmax_rows
    assert not ch02.check_masked_rows(fn)
    lines = capsys.readouterr().out.strip().splitlines()
    k = next(i for i, line in enumerate(lines)
             if line.startswith("lane map of your kernel on a 4 x 10 input (contiguous); its padding lanes read -inf"))
    assert any("the store is not masked" in line for line in lines[k + 1:-1])
    assert lines[-1].startswith("ch02-masked-load-store: FAILED"), "the verdict line stays last (the grader reads it)"


def test_a_blank_exercise_gets_no_lane_map(tmp_path, capsys):
    from softmax_lab.course import build

    blank = build.learner_notebook(nbformat.read(ROOT / "solutions" / "04_three_kernels_to_one.ipynb", as_version=4))
    module = exercise(None, "ch04-fused", tmp_path, folder_nb=blank)
    assert not ch04.check_fused(module.my_fused_softmax)
    assert "lane map" not in capsys.readouterr().out
