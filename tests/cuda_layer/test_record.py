"""The GPU record's timing loop (softmax_lab.cuda_layer.record.timings) launches each row of its progression on the
i-th rotating buffer: checked here on the CPU with stand-in launchers (timing itself needs a GPU)."""
import torch

from softmax_lab.cuda_layer.record import _timed_call


def _buffers(n_buf=3, shape=(2, 5)):
    xs = [torch.randn(shape) + i for i in range(n_buf)]
    return xs, [torch.empty(shape) for _ in range(n_buf)]


def test_copy_and_torch_softmax_use_the_ith_buffer():
    xs, outs = _buffers()
    _timed_call("copy", None, {}, xs, outs, 5)(2)
    assert torch.equal(outs[2], xs[2])
    got = _timed_call("torch_softmax", None, {}, xs, outs, 5)(1)
    torch.testing.assert_close(got, torch.softmax(xs[1], dim=-1))


def test_kernels_get_their_knobs_and_the_wide_block():
    xs, outs = _buffers()
    calls = []

    def launcher(x, out, **knobs):
        calls.append((x, out, knobs))

    _timed_call("block_tree_256", launcher, {"threads": 256}, xs, outs, 5)(1)
    _timed_call("triton_wide", launcher, "wide", xs, outs, 5)(2)
    assert calls[0][0] is xs[1] and calls[0][1] is outs[1] and calls[0][2] == {"threads": 256}
    # "wide": BLOCK = 2 x the row rounded up to a power of two (5 -> 8 -> 16), 8 warps
    assert calls[1][0] is xs[2] and calls[1][1] is outs[2] and calls[1][2] == {"BLOCK": 16, "num_warps": 8}
