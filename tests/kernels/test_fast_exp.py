"""The GPU code of the dispatcher's kernels, checked without a GPU: Triton compiles for an H200 (sm_90) on any
machine (its wheel ships ptxas). ``kernels/fast_exp.py``: exp as one ``ex2.approx.ftz`` and one division per
row, not the five-instruction exp and a division per element that cost 16-bit long rows their arithmetic time
on top of the memory's (docs/performance.md)."""
import subprocess
import sys
import textwrap

from conftest import ROOT

SCRIPT = textwrap.dedent("""
    import torch
    torch.cuda.is_available = lambda: True  # compile as for a GPU: fast_exp takes its PTX branch
    from softmax_lab.kernels.cooperative import cooperative_softmax_kernel
    from softmax_lab.kernels.fused import fused_softmax_kernel
    from softmax_lab.kernels.multirow import multirow_softmax_kernel
    from softmax_lab.machine_code import compile_for_h200, ptx_counts

    def ptx(fn, sig, consts, warps):
        return ptx_counts(compile_for_h200(fn, sig, consts, warps))

    rows = {"out_ptr": "*bf16", "in_ptr": "*bf16", "in_row_stride": "i32", "out_row_stride": "i32"}
    fused = ptx(fused_softmax_kernel, {**rows, "n_cols": "i32", "BLOCK": "constexpr", "VEC": "constexpr"},
                {"BLOCK": 32768, "VEC": 8}, 32)
    multi = ptx(multirow_softmax_kernel, {**rows, "n_rows": "i32", "n_cols": "i32", "BLOCK": "constexpr",
                                          "ROWS": "constexpr", "VEC": "constexpr"},
               {"BLOCK": 512, "ROWS": 2, "VEC": 8}, 2)
    coop = ptx(cooperative_softmax_kernel, {**rows, "pair_ptr": "*fp32", "count_ptr": "*i32", "n_cols": "i32",
               "n_chunks": "i32", "BLOCK": "constexpr", "TILES": "constexpr", "CHUNKS": "constexpr",
               "KEEP_16": "constexpr", "PUBLISH": "constexpr", "FINISH": "constexpr", "VEC": "constexpr"},
               {"BLOCK": 8192, "TILES": 1, "CHUNKS": 8, "KEEP_16": False, "PUBLISH": True, "FINISH": True, "VEC": 8}, 4)
    for name, n in (("fused", fused), ("multirow", multi), ("cooperative", coop)):
        print(name, n["ptx div"], n["ptx ex2.ftz"], n["ptx ex2 (keeps denormals)"])
    """)


def test_kernels_divide_once_per_row_and_use_the_bare_exp2():
    """Per thread: fused bf16 32768 at 32 warps holds 32 elements, multirow 2x512 at 2 warps 16, cooperative 8192
    fp32 at 4 warps 64: every one of their exps is ex2.approx.ftz, and there is at most one division per row."""
    run = subprocess.run([sys.executable, "-c", SCRIPT], capture_output=True, text=True, cwd=ROOT, timeout=300)
    assert run.returncode == 0, run.stderr[-3000:]
    got = {name: tuple(map(int, rest)) for name, *rest in (line.split() for line in run.stdout.splitlines())}
    assert got["fused"][0] == 1 and got["fused"][1] == 32 and got["fused"][2] == 0, got
    assert got["multirow"][0] <= 2 and got["multirow"][1] == 16 and got["multirow"][2] == 0, got
    assert got["cooperative"][0] <= 2 and got["cooperative"][1] >= 64, got  # + scalar exps and divisions of the combine


def test_counting_interpreter_runs_kernels_that_use_fast_exp():
    """On a GPU machine fast_exp's PTX branch is on, but memcount runs kernels through the interpreter, which has
    no inline PTX: while it counts, fast_exp is tl.exp. Here (CPU) the GPU's setting is simulated."""
    import torch

    import softmax_lab
    import triton.language as tl

    from softmax_lab.kernels import cooperative_softmax, fast_exp, fused_softmax
    from softmax_lab.memcount import count_calls

    x = torch.randn(3, 40).to(softmax_lab.DEVICE)
    saved = fast_exp.PTX
    fast_exp.PTX = tl.constexpr(True)  # as on a GPU
    try:
        for launch in (fused_softmax, lambda x: cooperative_softmax(x, BLOCK=16)):
            y, count = count_calls(launch, x)
            torch.testing.assert_close(y, torch.softmax(x, -1))
            assert count.launches >= 1 and count.loads >= x.numel()
        assert fast_exp.PTX.value is True  # put back after counting
    finally:
        fast_exp.PTX = saved


def test_machine_code_counts_what_chapter_10_shows(monkeypatch):
    from softmax_lab.machine_code import instruction_counts

    # The README's switch to compare with the interpreter: the fresh compiling process must not inherit it.
    monkeypatch.setenv("SOFTMAX_LAB_DEVICE", "cpu")

    first, now = instruction_counts().values()
    assert first["ptx div"] == 32 and first["ptx ex2 (keeps denormals)"] == 32 and first["ptx ex2.ftz"] == 0
    assert now["ptx div"] == 1 and now["ptx ex2.ftz"] == 32 and now["ptx ex2 (keeps denormals)"] == 0
    assert now["total"] < first["total"] - 100 and now["FMUL"] < first["FMUL"] // 2
    assert first["LDG"] == now["LDG"] == 4  # 128-bit loads: 4 x 8 bf16 = 32 elements per thread



def test_rows_of_whole_vectors_move_16_bytes_at_a_time():
    """With VEC = the elements of a 16-byte vector (the ints passed divided by it), every load and store of the
    fused, multirow and backward kernels is 16 bytes wide even where the row length and strides are not
    multiples of 16; the control, VEC=1 (plain elements), compiles to narrow ones, as many per element."""
    from softmax_lab.machine_code import WIDTH_KERNELS, access_widths

    got = access_widths(WIDTH_KERNELS)
    for name in WIDTH_KERNELS:
        for dtype, vec in (("fp32", 4), ("bf16", 8)):
            narrow, wide = got[name][dtype]["1"], got[name][dtype][str(vec)]
            assert narrow and not any(op.endswith(".128") for op in narrow), (name, dtype, narrow)
            assert wide and all(op.endswith(".128") for op in wide), (name, dtype, wide)
            assert sum(narrow.values()) == vec * sum(wide.values()), (name, dtype, narrow, wide)
