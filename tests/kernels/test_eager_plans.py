"""Eager plans for every kernel the dispatcher runs, the cooperative ones and the backward pass included.

The cooperative kernels set their counters back to 0 as they finish (``cooperative.take_ticket``, ``count_in``),
so a stream's scratch (``_launch.scratch``) serves every launch on it and a plan launches them with no allocation
and no zeroing. Tested here: the counters are 0 after every kind of launch (the CPU interpreter's two-launch path
too), and on a GPU each plan gives the launcher's bits on repeated calls, alternating shapes, strided and
misaligned views and two streams at once."""
import pytest
import torch
from conftest import captured

import softmax_lab
from softmax_lab import dispatch, op
from softmax_lab.kernels import softmax_backward
from softmax_lab.kernels._launch import _SCRATCH, scratch
from softmax_lab.kernels.cooperative import cooperative_backward_kernel, cooperative_softmax_kernel
from softmax_lab.kernels.unaligned import unaligned_cooperative_kernel
from softmax_lab.reference import softmax_backward_ref
from softmax_lab.testing import randn, tolerance

DEV = softmax_lab.DEVICE
BF16 = torch.bfloat16
GPU = pytest.mark.gpu


def _launch_twice_or_once(kernel, args, grid, one, **knobs):
    if one:
        kernel[grid](*args, PUBLISH=True, FINISH=True, **knobs)
    else:
        kernel[grid](*args, PUBLISH=True, FINISH=False, **knobs)
        kernel[grid](*args, PUBLISH=False, FINISH=True, **knobs)


@pytest.mark.parametrize("one", [False, True] if softmax_lab.ON_GPU else [False])
def test_cooperative_kernels_leave_their_counters_at_zero(one):
    # 3 rows of 4 chunks: the ticket and each row's counter go up to 4, then back to 0.
    n_rows, n_cols, block = 3, 61, 16
    x = randn((n_rows, n_cols), device=DEV)
    y = torch.empty_like(x)
    pairs = torch.empty(2 * n_rows * 8, device=DEV)  # (room for the unaligned launch's 5 chunks a row too)
    counts = torch.zeros(1 + n_rows, dtype=torch.int32, device=DEV)
    for _ in range(2):  # twice: the second launch starts from what the first left
        _launch_twice_or_once(cooperative_softmax_kernel, (y, x, pairs, counts, n_cols, n_cols, n_cols, 4),
                              (n_rows * 4,), one, BLOCK=block, TILES=1, CHUNKS=4, KEEP_16=False)
        assert counts.tolist() == [0] * (1 + n_rows)
        torch.testing.assert_close(y, torch.softmax(x, -1))
    dy = randn((n_rows, n_cols), device=DEV)
    dx = torch.empty_like(x)
    _launch_twice_or_once(cooperative_backward_kernel, (dx, y, dy, pairs, counts, n_cols, n_cols, n_cols, n_cols, 4),
                          (n_rows * 4,), one, BLOCK=block, CHUNKS=4)
    assert counts.tolist() == [0] * (1 + n_rows)
    torch.testing.assert_close(dx.double(), softmax_backward_ref(y.double(), dy.double()), atol=1e-5, rtol=1e-4)
    xb = randn((n_rows, n_cols), dtype=BF16, device=DEV)  # 61 bf16 elements a row: rows off 16 bytes
    yb = torch.empty_like(xb)
    _launch_twice_or_once(unaligned_cooperative_kernel, (yb, xb, pairs, counts, 0, n_cols, 0, n_cols, n_cols, 5),
                          (n_rows * 5,), one, BLOCK=block, CHUNKS=8, VEC=8, SAME_HEADS=True)
    assert counts.tolist() == [0] * (1 + n_rows)
    atol, rtol = tolerance(BF16)
    torch.testing.assert_close(yb.double(), torch.softmax(xb.double(), -1), atol=atol, rtol=rtol)


def test_scratch_on_the_cpu_is_new_and_zero():
    floats, counts = scratch(torch.device("cpu"), 5, 3)
    assert floats.numel() == 5 and counts.tolist() == [0, 0, 0] and floats.dtype == torch.float32


def test_backward_plans_on_the_cpu_take_the_usual_path():
    # No compiled kernels in the interpreter: the plan is the checked path, and gives its results and errors.
    op._BACKWARD_PLANS.clear()
    y = torch.softmax(randn((5, 33), device=DEV), -1)
    dy = randn((5, 33), device=DEV)
    for _ in range(2):
        torch.testing.assert_close(op.softmax_backward(y, dy), softmax_backward(y, dy), atol=0, rtol=0)
    with pytest.raises(ValueError, match="shape"):
        op.softmax_backward(y, dy[:, :32])


# --- On a GPU -------------------------------------------------------------------------------------------------

def _rand(shape, dtype=torch.float32):
    return (torch.randn(shape, device="cuda") * 3).to(dtype)


FORWARD_CASES = [((3, 500000), torch.float32, "cooperative"), ((16, 300000), torch.float32, "cooperative"),
                 ((2, 1100000), torch.float32, "l2_reread"), ((4, 70001), BF16, "unaligned_cooperative"),
                 ((3, 300000), torch.float16, "cooperative")]


@GPU
@pytest.mark.parametrize("shape, dtype, kernel", FORWARD_CASES, ids=str)
def test_cooperative_plans_match_the_launchers(shape, dtype, kernel):
    op._PLANS.clear()
    big = _rand((shape[0], shape[1] + 16), dtype)
    for i, x in enumerate((_rand(shape, dtype), big[:, :shape[1]], big[:, 3:shape[1] + 3])):
        name, knobs = dispatch._runnable(x)
        # planned where one launch fits (a view 12 bytes in may compile to more registers: fewer programs at once)
        one = dispatch.COOPERATIVE[name](torch.empty(x.shape, dtype=dtype, device="cuda"), x, **knobs)[5]
        assert (dispatch.plan_2d(x) is not None) == one and (one or i == 2), (name, x.shape, x.stride())
        want = dispatch.LAUNCHERS[name](x, **knobs)
        for _ in range(3):
            torch.testing.assert_close(softmax_lab.softmax(x), want, atol=0, rtol=0)
    assert dispatch._runnable(_rand(shape, dtype))[0] == kernel


@GPU
def test_cooperative_plans_alternate_shapes_and_streams():
    # Shapes that share a stream's scratch one after another, and two streams at once (each its own scratch).
    op._PLANS.clear()
    xs = [_rand((3, 500000)), _rand((2, 1100000)), _rand((4, 70001), BF16), _rand((64, 1024)), _rand((9, 300000))]
    wants = [dispatch.LAUNCHERS[dispatch._runnable(x)[0]](x, **dispatch._runnable(x)[1]) for x in xs]
    for _ in range(3):
        for x, want in zip(xs, wants):
            torch.testing.assert_close(softmax_lab.softmax(x), want, atol=0, rtol=0)
    streams = [torch.cuda.Stream(), torch.cuda.Stream()]
    torch.cuda.synchronize()
    outs = {}
    for round_ in range(4):
        for s, stream in enumerate(streams):
            with torch.cuda.stream(stream):
                outs[round_, s] = [softmax_lab.softmax(x) for x in xs[s::2]]
    torch.cuda.synchronize()
    for (_, s), ys in outs.items():
        for y, want in zip(ys, wants[s::2]):
            torch.testing.assert_close(y, want, atol=0, rtol=0)
    keys = [k for k in _SCRATCH if k[1] in (streams[0].cuda_stream, streams[1].cuda_stream)]
    assert len(keys) == 2 and all(_SCRATCH[k][1].count_nonzero().item() == 0 for k in keys)


@GPU
def test_cooperative_plans_in_a_cuda_graph():
    # Captured calls take new counters (graph replays may run on any stream); replays give the eager bits.
    op._PLANS.clear()
    x = _rand((3, 500000))
    want = softmax_lab.softmax(x)
    graph, y = captured(lambda: softmax_lab.softmax(x))
    for _ in range(3):
        graph.replay()
        torch.testing.assert_close(y, want, atol=0, rtol=0)


BACKWARD_CASES = [((4096, 1024), torch.float32), ((64, 77), torch.float32), ((300, 130), BF16),
                  ((4, 70001), BF16), ((8, 100000), torch.float32), ((2, 50257), BF16), ((33, 20000), torch.float16),
                  ((16, 128256), BF16)]  # (20000 fp16, 100000 fp32, 128256 bf16: the TMA backward, contiguous)


@GPU
@pytest.mark.parametrize("shape, dtype", BACKWARD_CASES, ids=str)
def test_backward_plans_match_the_launcher(shape, dtype):
    op._BACKWARD_PLANS.clear()
    n_rows, n_cols = shape
    y = torch.softmax(_rand(shape), -1).to(dtype)
    big_y = torch.empty((n_rows, n_cols + 8), dtype=dtype, device="cuda")
    big_dy = torch.empty((n_rows, n_cols + 8), dtype=dtype, device="cuda")
    for first in (0, 1):  # contiguous, then views one element in (rows off 16 bytes, lying alike)
        yv = big_y[:, first:first + n_cols].copy_(y) if first else y
        dy = big_dy[:, first:first + n_cols].copy_(_rand(shape, dtype)) if first else _rand(shape, dtype)
        want = softmax_backward(yv, dy)
        for _ in range(3):
            torch.testing.assert_close(op.softmax_backward(yv, dy), want, atol=0, rtol=0)
        atol, rtol = tolerance(dtype)
        rows = [0, n_rows - 1]
        torch.testing.assert_close(want[rows].double(), softmax_backward_ref(yv[rows].double(), dy[rows].double()),
                                   atol=10 * atol, rtol=rtol)
    assert len(op._BACKWARD_PLANS) == 2


@GPU
def test_backward_plans_on_two_streams_and_3d():
    op._BACKWARD_PLANS.clear()
    cases = [(torch.softmax(_rand((8, 100000)), -1), _rand((8, 100000))),
             (torch.softmax(_rand((4, 70001)), -1).to(BF16), _rand((4, 70001), BF16)),
             (torch.softmax(_rand((4, 16, 1024)), -1), _rand((4, 16, 1024)))]
    wants = [softmax_backward(y.view(-1, y.shape[-1]), dy.view(-1, y.shape[-1])).view(y.shape) for y, dy in cases]
    streams = [torch.cuda.Stream(), torch.cuda.Stream()]
    torch.cuda.synchronize()
    outs = []
    for _ in range(3):
        for stream in streams:
            with torch.cuda.stream(stream):
                outs.append([op.softmax_backward(y, dy) for y, dy in cases])
    torch.cuda.synchronize()
    for got in outs:
        for dx, want in zip(got, wants):
            torch.testing.assert_close(dx, want, atol=0, rtol=0)


@GPU
def test_planned_calls_launch_directly_and_still_reach_a_profilers_hook(monkeypatch):
    # _launch.relauncher: a planned call goes straight to Triton's launcher while Triton's launch-hook chains are
    # empty (round 16: an empty chain counted as a hook, so every planned call took Triton's runner, 11-12 µs a
    # call against 4-6); a hook added to the chain (a profiler's) still sees every planned launch, with its name.
    from triton import knobs
    from triton.backends.nvidia.driver import CudaLauncher

    op.TORCH_BELOW, below = 0, op.TORCH_BELOW  # (small inputs on the course's kernels, not torch's)
    try:
        op._PLANS.clear()
        x = randn((32, 1024), device=DEV)
        want = torch.softmax(x.double(), -1)
        softmax_lab.softmax(x)  # (the plan, made)
        through_runner = []
        real = CudaLauncher.__call__
        monkeypatch.setattr(CudaLauncher, "__call__", lambda self, *a: through_runner.append(1) or real(self, *a))
        for _ in range(3):
            torch.testing.assert_close(softmax_lab.softmax(x).double(), want, atol=1e-6, rtol=1e-5)
        assert not through_runner  # straight to the compiled launcher
        seen = []
        hook = lambda metadata: seen.append(metadata.get()["name"])  # (a LazyDict, as Triton gives its hooks)
        knobs.runtime.launch_enter_hook.add(hook)
        try:
            torch.testing.assert_close(softmax_lab.softmax(x).double(), want, atol=1e-6, rtol=1e-5)
        finally:
            knobs.runtime.launch_enter_hook.remove(hook)
        assert seen and "softmax" in seen[0] and through_runner, seen
        softmax_lab.softmax(x)
        assert len(seen) == 1 and len(through_runner) == 1  # (the hook gone, the direct launch again)
    finally:
        op.TORCH_BELOW = below
        op._PLANS.clear()
