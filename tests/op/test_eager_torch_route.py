"""Plain eager calls on small CUDA inputs can run PyTorch's own kernel (``op.torch_is_quicker``, off by default
since round 17: ``tuning.TORCH_EAGER_BYTES``): which inputs, and that the results, gradients and the switch behave
with the route on (4 MiB, round 5's size). (tests/conftest.py switches it off for the other tests.)"""
from __future__ import annotations

import os
import subprocess
import sys

import pytest
import torch
from conftest import captured

import softmax_lab
from softmax_lab import op
from softmax_lab.testing import randn

GPU = pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA GPU")
ROUTED_BYTES = 4 << 20  # (SOFTMAX_LAB_TORCH_BELOW=4194304)


@pytest.fixture
def routed(monkeypatch):
    """Routing on, and ``calls``: how many times torch's forward and backward kernels were called."""
    monkeypatch.setattr(op, "TORCH_BELOW", ROUTED_BYTES)
    monkeypatch.setattr(op, "BACKWARD_ON_TORCH", True)
    calls = {"forward": 0, "backward": 0}
    forward, backward = torch._softmax, torch._softmax_backward_data

    def spy_forward(*args):
        calls["forward"] += 1
        return forward(*args)

    def spy_backward(*args):
        calls["backward"] += 1
        return backward(*args)

    monkeypatch.setattr(torch, "_softmax", spy_forward)
    monkeypatch.setattr(torch, "_softmax_backward_data", spy_backward)
    op._PLANS.clear(), op._BACKWARD_PLANS.clear()
    yield calls
    op._PLANS.clear(), op._BACKWARD_PLANS.clear()


def test_the_switch_is_read_at_import():
    code = "import softmax_lab.op as op; print(op.TORCH_BELOW)"
    env = {k: v for k, v in os.environ.items() if k != "SOFTMAX_LAB_TORCH_BELOW"}
    out = subprocess.run([sys.executable, "-c", code], env=env, capture_output=True, text=True, check=True)
    assert int(out.stdout) == 0  # (routed calls cost as much host time as ours, and twice the GPU time: round 17)
    out = subprocess.run([sys.executable, "-c", code], env=dict(env, SOFTMAX_LAB_TORCH_BELOW=str(ROUTED_BYTES)),
                         capture_output=True, text=True, check=True)
    assert int(out.stdout) == ROUTED_BYTES


def test_cpu_inputs_never_take_torch(routed):
    x = randn((4, 128), device="cpu")
    assert not op.torch_is_quicker(x, 1)
    if not softmax_lab.ON_GPU:  # (the package runs on the GPU where there is one, and refuses CPU tensors there)
        torch.testing.assert_close(softmax_lab.softmax(x), torch.softmax(x.double(), -1).float())


@GPU
def test_which_inputs_take_torch(routed):
    def quick(shape, dtype=torch.float32, dim=-1, view=None):
        x = torch.empty(shape, dtype=dtype, device="cuda")
        x = view(x) if view else x
        return op.torch_is_quicker(x, dim % max(x.dim(), 1))

    assert quick((1, 128)) and quick((1024, 1024)) and quick((2048, 1024), torch.bfloat16)
    assert quick((4, 8, 16)) and quick((4, 8, 16), dim=1) and quick((64, 16384))
    assert not quick((1025, 1024))  # more than 4 MiB
    assert not quick((4, 70001), torch.bfloat16)  # rows past 16,384: torch gives each a block
    assert not quick((64, 256), view=lambda x: x.t())  # not contiguous
    assert not quick((64, 128), torch.float64) and not quick(())


@GPU
@pytest.mark.parametrize("dtype", [torch.float32, torch.float16, torch.bfloat16], ids=str)
def test_routed_calls_give_torchs_results(routed, dtype):
    for shape, dim in [((1, 128), -1), ((32, 1024), -1), ((4, 16, 77), 1), ((3, 5, 7), 0)]:
        x = randn(shape, dtype=dtype, device="cuda")
        for i in range(2):  # the first call makes the plan, the second runs it
            before = routed["forward"]
            assert torch.equal(softmax_lab.softmax(x, dim), torch.softmax(x, dim))
            assert routed["forward"] == before + 1, (shape, i)
    big = randn((2048, 1024), device="cuda")  # 8 MiB: the course's kernel
    want = softmax_lab.dispatch.softmax_2d(big)
    before = routed["forward"]
    for _ in range(2):
        assert torch.equal(softmax_lab.softmax(big), want)
    assert routed["forward"] == before


@GPU
def test_routed_backward_and_autograd(routed):
    y = torch.softmax(randn((64, 1000), device="cuda"), -1)
    dy = randn((64, 1000), device="cuda")
    for _ in range(2):
        assert torch.equal(op.softmax_backward(y, dy), torch._softmax_backward_data(dy, y, 1, y.dtype))
    assert routed["backward"] == 4  # two routed calls, two references
    op._BACKWARD_PLANS.clear()
    op.BACKWARD_ON_TORCH = False  # (monkeypatched below: restored by the fixture's monkeypatch)
    want = softmax_lab.kernels.softmax_backward(y, dy)
    for _ in range(2):
        assert torch.equal(op.softmax_backward(y, dy), want)
    op.BACKWARD_ON_TORCH = True
    big_y, big_dy = torch.softmax(randn((2048, 1024), device="cuda"), -1), randn((2048, 1024), device="cuda")
    want = softmax_lab.kernels.softmax_backward(big_y, big_dy)  # 8 MiB: the course's kernel
    for _ in range(2):
        assert torch.equal(op.softmax_backward(big_y, big_dy), want)
    assert routed["backward"] == 4
    x = randn((8, 300), device="cuda").requires_grad_()
    w = randn((8, 300), device="cuda")
    before = dict(routed)
    (softmax_lab.softmax(x) * w).sum().backward()
    assert routed["forward"] == before["forward"] + 1  # (the backward: torch's autograd of ours, the operator's)
    xr = x.detach().double().requires_grad_()
    (torch.softmax(xr, -1) * w.double()).sum().backward()
    torch.testing.assert_close(x.grad.double(), xr.grad, atol=1e-6, rtol=1e-5)
    y = softmax_lab.softmax(x.detach().t().contiguous().t())  # a transposed view: the course's kernels
    torch.testing.assert_close(y.double(), torch.softmax(x.detach().double(), -1), atol=1e-6, rtol=1e-5)
    assert y.is_contiguous()


@GPU
def test_a_captured_call_runs_the_course_kernel(routed):
    # In a CUDA graph a call costs GPU time alone: the course's kernel, not torch's, is captured.
    x = randn((32, 1024), device="cuda")
    want = softmax_lab.dispatch.softmax_2d(x)
    assert torch.equal(softmax_lab.softmax(x), torch.softmax(x, -1))  # eager: torch's kernel
    before = routed["forward"]
    graph, y = captured(lambda: softmax_lab.softmax(x))
    assert routed["forward"] == before + 1  # the warm-up, eager, ran torch's kernel; the capture did not
    graph.replay()
    torch.cuda.synchronize()
    assert torch.equal(y, want)
    dy = randn((32, 1024), device="cuda")
    want = softmax_lab.kernels.softmax_backward(y, dy)
    assert torch.equal(op.softmax_backward(y, dy), torch._softmax_backward_data(dy, y, 1, y.dtype))
    before = routed["backward"]
    graph, dx = captured(lambda: op.softmax_backward(y, dy))
    assert routed["backward"] == before + 1  # the warm-up only
    graph.replay()
    torch.cuda.synchronize()
    assert torch.equal(dx, want)


def test_backward_fast_path_gives_the_usual_path_results_and_errors():
    # The backward's plan is looked up before any check (op.softmax_backward): a second call of a kind must give
    # what the first gave, and the errors of the checked path must still come.
    device = softmax_lab.DEVICE
    y = torch.softmax(randn((5, 33), device=device), -1)
    dy = randn((5, 33), device=device)
    first = op.softmax_backward(y, dy)
    for dim in (-1, 1):
        torch.testing.assert_close(op.softmax_backward(y, dy, dim), first, atol=0, rtol=0)
    along_0 = softmax_lab.kernels.softmax_backward(y.t().contiguous(), dy.t().contiguous()).t()
    torch.testing.assert_close(op.softmax_backward(y, dy, 0), along_0, atol=0, rtol=0)
    with pytest.raises(IndexError, match="out of range"):
        op.softmax_backward(y, dy, 2)
    with pytest.raises(IndexError, match="out of range"):
        op.softmax_backward(y, dy, -3)
    with pytest.raises(TypeError, match="dim"):
        op.softmax_backward(y, dy, True)
    with pytest.raises(ValueError, match="shape"):
        op.softmax_backward(y, dy[:, :32])
    y3 = torch.softmax(randn((2, 3, 4), device=device), -1)
    for _ in range(2):  # same rows, other shape: refused as torch refuses it, before and after a plan exists
        with pytest.raises(ValueError, match=r"dy has shape \(3, 2, 4\) but y has shape \(2, 3, 4\)"):
            op.softmax_backward(y3, randn((3, 2, 4), device=device))
        op.softmax_backward(y3, randn((2, 3, 4), device=device))
