"""softmax_lab.draw / lanemap: the learner's kernel drawn from its real memory operations, with findings that
name the usual mistakes (unmasked store, wrong row stride), and nothing reported for a correct kernel."""
import pytest
import torch

import softmax_lab
from softmax_lab import lanemap, pictures
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
    assert "stored more than once" in text and "stored outside every tensor" in text and "mask the store" in text
    assert m.outside["store"] == 6  # the last row's 6 padding lanes, switched off instead of corrupting memory


def test_wrong_row_stride_is_named():
    m = lanemap.lane_map(launcher(use_stride=False), strided())
    assert any("input row stride" in f for f in m.findings)
    assert (m.loads[3, :10] == lanemap.NONE).all(), "row 3 of x is never read"


def test_draw_returns_a_picture_and_prints_findings(capsys):
    fig = softmax_lab.draw(launcher(mask_store=False), strided(), title="mine")
    assert pictures.png(fig)[:4] == b"\x89PNG"
    assert "mask the store" in capsys.readouterr().out
    with pytest.raises(ValueError, match="small input"):
        lanemap.lane_map(fused_softmax, torch.randn(100, 100, device=DEVICE))
