"""memcount: counts of loads/stores from a kernel's real memory operations (guards Triton interpreter internals)."""
import softmax_lab

import pytest
import torch
import triton
import triton.language as tl
from triton.runtime.jit import JITFunction

from softmax_lab.memcount import count_calls, count_memory, kernel_function

# Triton 3.6's interpreter warns about numpy scalar conversion on every loop; not ours to fix.
pytestmark = pytest.mark.filterwarnings("ignore::DeprecationWarning")


def _row_max_plus_copy(out_ptr, in_ptr, n_cols, stride, BLOCK: tl.constexpr):
    # one program per row: a masked load of the row, one scalar store of its max, a masked copy
    row = tl.program_id(0)
    offs = tl.arange(0, BLOCK)
    x = tl.load(in_ptr + row * stride + offs, mask=offs < n_cols, other=float("-inf"))
    tl.store(out_ptr + row * stride + offs, x, mask=offs < n_cols)
    first = tl.load(in_ptr + row * stride)
    tl.store(out_ptr + row * stride, tl.maximum(tl.max(x, axis=0), first))


row_kernel = triton.jit(_row_max_plus_copy)


def launcher(x):
    out = torch.zeros_like(x)
    row_kernel[(x.shape[0],)](out, x, x.shape[1], x.stride(0), BLOCK=triton.next_power_of_2(x.shape[1]), num_warps=4)
    return out


def test_counts_only_lanes_whose_mask_is_true():
    x = torch.randn(3, 5)
    out = torch.zeros_like(x)
    c = count_memory(row_kernel, (3,), out, x, 5, x.stride(0), BLOCK=8, num_warps=4)
    assert (c.loads, c.stores) == (3 * (5 + 1), 3 * (5 + 1))
    assert (c.load_bytes, c.store_bytes) == (4 * c.loads, 4 * c.stores)
    assert (c.load_ops, c.store_ops, c.programs, c.launches) == (6, 6, 3, 1)
    assert c.loads_of == {"in_ptr": 18} and c.stores_of == {"out_ptr": 18}
    assert c.distinct_loads == 15
    # and the kernel really ran: row max written to column 0, the rest copied
    assert torch.equal(out[:, 1:], x[:, 1:]) and torch.equal(out[:, 0], x.amax(1))


def test_strided_rows_and_a_grid_function():
    big = torch.randn(4, 16)
    x = big[:, :3]
    out = torch.zeros_like(big)[:, :3]
    c = count_memory(row_kernel, lambda meta: (4,), out, x, 3, x.stride(0), BLOCK=4)
    assert c.loads == 4 * 4 and c.stores == 4 * 4 and c.distinct_loads == 12


def test_count_calls_counts_every_launch_and_returns_the_result():
    x = torch.randn(2, 7, device=softmax_lab.DEVICE)
    y, c = count_calls(lambda t: (launcher(t), launcher(t))[1], x)
    assert c.launches == 2 and c.loads == 2 * 2 * 8 and c.stores == 2 * 2 * 8
    assert torch.equal(y[:, 1:], x[:, 1:])
    # launches are back to normal afterwards (no counting, still correct)
    assert torch.equal(launcher(x)[:, 1:], x[:, 1:])


def test_a_compiled_style_jitfunction_is_interpreted_too():
    """On a GPU machine kernels are JITFunctions; counting must interpret them the same way."""
    compiled = JITFunction(_row_max_plus_copy)
    assert kernel_function(compiled) is _row_max_plus_copy
    x = torch.randn(2, 3)
    out = torch.zeros_like(x)
    c = count_memory(compiled, (2,), out, x, 3, x.stride(0), BLOCK=4)
    assert c.loads == 8 and c.stores == 8


def test_naive_kernel_reads_each_row_2n2_plus_n_times():
    naive = __import__("softmax_lab.kernels.naive", fromlist=["naive_softmax"])
    for n in (3, 8):
        x = torch.randn(2, n, device=softmax_lab.DEVICE)
        y, c = count_calls(naive.naive_softmax, x)
        assert c.loads == 2 * (2 * n * n + n) and c.stores == 2 * n
        torch.testing.assert_close(y, torch.softmax(x, -1))


def test_load_map_says_which_program_read_which_element():
    naive = __import__("softmax_lab.kernels.naive", fromlist=["naive_softmax"])
    x = torch.randn(2, 3, device=softmax_lab.DEVICE)
    _, c = count_calls(naive.naive_softmax, x)
    m = c.load_map("in_ptr", x.numel())
    assert m.shape == (6, 6)
    # program p reads its own row twice, plus its own element once more; nothing of the other row
    expected = torch.zeros(6, 6, dtype=torch.int64)
    for p in range(6):
        r = p // 3
        expected[p, 3 * r: 3 * r + 3] = 2
        expected[p, p] += 1
    assert (torch.from_numpy(m) == expected).all()


def test_counting_works_when_tritons_own_jit_functions_are_compiled(tmp_path):
    # On a GPU machine tl.max, tl.sum ... are compiled-mode JITFunctions; counting must still interpret them.
    import os
    import subprocess
    import sys

    script = tmp_path / "gpu_like.py"
    script.write_text(
        "import os\n"
        "os.environ.pop('TRITON_INTERPRET', None)\n"
        "import triton.language as tl\n"
        "from triton.runtime.jit import JITFunction\n"
        "assert isinstance(tl.standard.max, JITFunction)\n"
        "import torch, softmax_lab\n"
        "from softmax_lab.memcount import count_calls\n"
        "from softmax_lab.kernels import ALL\n"
        "def snapshot():\n"
        "    mods = [tl, tl.core, tl.core.tensor, tl.math]\n"
        "    return {(id(m), k): v for m in mods for k, v in vars(m).items()}\n"
        "before = snapshot()\n"
        "x = torch.randn(4, 100, device=softmax_lab.DEVICE)\n"
        "y, c = count_calls(ALL['fused'], x)\n"
        "torch.testing.assert_close(y, torch.softmax(x, -1))\n"
        "changed = [k for k, v in snapshot().items() if before.get(k, v) is not v]\n"
        "assert not changed, f'triton.language still patched after counting: {changed[:5]}'\n"
        "print(c.loads, c.stores)\n")
    env = {k: v for k, v in os.environ.items() if k != "TRITON_INTERPRET"}
    proc = subprocess.run([sys.executable, str(script)], capture_output=True, text=True, env=env, timeout=120)
    assert proc.returncode == 0, proc.stderr[-2000:]
    assert proc.stdout.split() == ["400", "400"]
