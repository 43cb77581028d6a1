"""The Gluon kernels (kernels/staged.py, resident.py, clustered.py, unaligned_resident.py, resident_backward.py), on
any machine. Triton's CPU interpreter cannot run Gluon, so on the CPU the dispatcher keeps the fused and cooperative
kernels and the launchers say why they refuse; their machine code for an H200 (sm_90) is compiled here and read:
16-byte asynchronous copies into shared memory, no plain global loads, no register spills, and, for the resident
kernel, few enough registers that shared memory, not registers, decides how many programs share a multiprocessor.
Their results are tested on the GPU (tests/kernels/test_gpu.py)."""
import subprocess
import sys
import textwrap

import pytest
import torch

import softmax_lab
from conftest import ROOT
from softmax_lab import softmax
from softmax_lab.kernels import clustered_softmax, resident_softmax, staged_softmax
from softmax_lab.kernels._launch import shared_memory_cols


def compiled_lines(script: str, expected: int | None = None) -> list[str]:
    """Run one of the compile scripts below in a fresh process (as for a GPU, nothing launched) and return its
    output lines, ``expected`` of them when given."""
    run = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, cwd=ROOT, timeout=600)
    assert run.returncode == 0, run.stderr[-3000:]
    lines = run.stdout.splitlines()
    assert expected is None or len(lines) == expected, run.stdout
    return lines

SCRIPT = textwrap.dedent("""
    import os
    os.environ.pop("TRITON_INTERPRET", None)  # (Triton reads it when its own library is imported)
    import torch
    torch.cuda.is_available = lambda: True  # compile as for a GPU (nothing is launched)
    from softmax_lab.kernels.resident import resident_softmax_kernel
    from softmax_lab.kernels.staged import staged_softmax_kernel
    from softmax_lab.machine_code import compile_for_h200, sass_ops

    ROWS = {"n_cols": "i32", "n_cols_v": "i32", "in_stride_v": "i32"}
    cases = [("staged", staged_softmax_kernel, dtype, dict(BLOCK=block, STAGES=stages), 32)
             for dtype, block, stages in (("bf16", 32768, 3), ("fp16", 32768, 1), ("fp32", 16384, 2))]
    cases += [("resident", resident_softmax_kernel, dtype,
               dict(BLOCK=block, CHUNK=chunk, OVERLAP=overlap, OUT_VEC=4 if dtype == "fp32" else 8, ONLINE=online), 8)
              for dtype, block, chunk in (("bf16", 32768, 2048), ("fp16", 16384, 2048), ("fp32", 16384, 1024))
              for overlap, online in ((True, False), (False, False), (True, True))]  # (the dispatcher runs
    # 16-bit rows up to 16384 with OVERLAP and ONLINE at 8 warps, longer ones at 16 since round 11: compiled at 8
    # here; ONLINE: the sum with the max, chunk_state.py)
    for name, kernel, dtype, constexprs, warps in cases:
        ints = dict(n_rows="i32", **ROWS, out_row_stride="i32") if name == "staged" else \
            dict(**ROWS, out_stride_v="i32")
        sig = {"out_ptr": f"*{dtype}", "in_ptr": f"*{dtype}", **ints, **{k: "constexpr" for k in constexprs}}
        compiled = compile_for_h200(kernel, sig, constexprs, warps)
        ops, regs = sass_ops(compiled)
        copies = sum(n for op, n in ops.items() if op.startswith("LDGSTS"))
        wide = sum(n for op, n in ops.items() if op.startswith("LDGSTS") and op.endswith(".128"))
        spills = sum(n for op, n in ops.items() if op.split(".")[0] in ("STL", "LDL"))
        loads = sum(n for op, n in ops.items() if op.split(".")[0] == "LDG")
        narrow_stores = sum(n for op, n in ops.items() if op.split(".")[0] == "STG" and not op.endswith(".128"))
        print(name, dtype, constexprs["BLOCK"], constexprs.get("STAGES", 1), compiled.metadata.shared, copies, wide,
              spills, loads, regs, narrow_stores)
    """)


def test_the_machine_code_copies_16_bytes_at_a_time_into_shared_memory():
    lines = compiled_lines(SCRIPT, 12)
    for line in lines:
        name, dtype, block, rows, shared, copies, wide, spills, loads, regs, narrow_stores = line.split()
        row_bytes = int(block) * (2 if dtype in ("bf16", "fp16") else 4)
        assert int(rows) * row_bytes <= int(shared) <= int(rows) * row_bytes + 1024, line  # + reduction scratch
        assert int(copies) > 0 and int(wide) == int(copies), line  # every copy asynchronous, 16 bytes
        assert int(spills) == 0, line  # nothing spills to local memory
        assert int(loads) == 0, line  # no plain global loads: the row comes through shared memory
        if name == "resident":  # 3 programs of 8 warps need <= 85 registers a thread; it is far below
            assert int(regs) <= 64, line
            assert narrow_stores == "0", line  # the output stored 16 bytes at a time (OUT_VEC)


@pytest.mark.skipif(softmax_lab.ON_GPU, reason="the CPU side; tests/kernels/test_gpu.py tests the kernels themselves")
def test_on_the_cpu_the_dispatcher_keeps_the_other_kernels_and_the_launchers_say_why():
    assert softmax.choose(2, 12000, torch.bfloat16)[0] == "fused"
    assert softmax.choose(2, 20000, torch.bfloat16)[0] == "cooperative"  # "resident" on an H100/H200
    assert softmax.choose(2, 20000, torch.float32)[0] == "fused"  # "resident" there too
    for launch, name in ((staged_softmax, "staged_softmax"), (resident_softmax, "resident_softmax")):
        with pytest.raises(ValueError, match=f"{name} needs a GPU: it is a Gluon kernel"):
            launch(torch.randn(2, 20000).to(torch.bfloat16))
    x = torch.randn(2, 20000).to(torch.bfloat16)
    torch.testing.assert_close(softmax(x).double(), torch.softmax(x.double(), -1), atol=2e-2, rtol=2e-2)


@pytest.mark.parametrize("launch", [staged_softmax, resident_softmax], ids=["staged", "resident"])
def test_bad_inputs_get_clear_messages(launch):
    assert [shared_memory_cols(t) for t in (torch.bfloat16, torch.float16, torch.float32)] == [65536, 65536, 32768]
    dev = softmax_lab.DEVICE
    with pytest.raises(ValueError, match="supports rows of up to 32768 elements"):
        launch(torch.zeros(2, 40000, device=dev))
    with pytest.raises(TypeError, match="floating-point"):
        launch(torch.zeros(2, 40, dtype=torch.int32, device=dev))
    with pytest.raises(ValueError, match="2-D"):
        launch(torch.zeros(40, device=dev))
    with pytest.raises(ValueError, match="must be a power of two"):
        launch(torch.zeros(2, 40, device=dev), num_warps=3)


def test_the_gpu_and_its_shared_memory_decide_before_a_launch():
    # Older GPUs have no cp.async; smaller ones less shared memory than an H200's 227 KB (RTX 4090: 99 KB).
    from softmax_lab.kernels._launch import device_refusal

    assert device_refusal("resident_softmax", (9, 0), 232448, 65536) == ""
    assert device_refusal("resident_softmax", (8, 0), 166912, 65536) == ""
    assert "cp.async" in device_refusal("resident_softmax", (7, 5), 65536, 65536)  # a T4 (Colab, Kaggle)
    assert "101376 bytes" in device_refusal("resident_softmax", (8, 9), 101376, 131072)


def test_rows_must_start_on_16_bytes_and_the_last_vector_must_be_inside_x():
    from softmax_lab.kernels._launch import vector_refusal

    bf16 = torch.bfloat16
    big = torch.zeros(3, 20008, dtype=bf16)
    assert vector_refusal(big[:, :20000], "k") == ""  # stride 20008 = 2501 vectors
    assert vector_refusal(big[:, :19999], "k") == ""  # the last vector is inside big's memory
    assert "16-byte boundary" in vector_refusal(big[:, 1:20001], "k")  # rows start 2 bytes in
    assert "16-byte boundary" in vector_refusal(torch.zeros(3, 20001, dtype=bf16), "k")  # stride 20001
    assert "passes the end" in vector_refusal(torch.zeros(1, 8193, dtype=bf16), "k")  # 7 elements past the end
    assert vector_refusal(torch.zeros(1, 8192, dtype=bf16), "k") == ""
    assert vector_refusal(torch.zeros(0, 8193, dtype=bf16), "k") == ""


CLUSTERED_SCRIPT = textwrap.dedent("""
    import os
    os.environ.pop("TRITON_INTERPRET", None)
    import torch
    torch.cuda.is_available = lambda: True
    from softmax_lab.kernels.clustered import clustered_softmax_kernel, slices
    from softmax_lab.machine_code import compile_for_h200, sass_ops

    EXTRA = dict()  # (the tests below put DSMEM=True and ONLINE=True here)
    ARGS = {"partial_ptr": "*fp32", "n_cols": "i32", "n_cols_v": "i32", "in_stride_v": "i32", "out_stride_v": "i32"}
    for dtype, n_cols, knobs in (("bf16", 65536, dict(parts=4, num_warps=4, vectors=2)),
                                 ("fp32", 65536, dict(parts=8, num_warps=2, vectors=2)),
                                 ("fp16", 131072, dict(parts=4, num_warps=4, vectors=1)),
                                 ("fp32", 100000, dict(parts=8, num_warps=4, vectors=1))):  # (the dispatcher's)
        o = slices(n_cols, 4 if dtype == "fp32" else 2, **knobs)
        constexprs = dict(SLICE=o["SLICE"], CHUNK=o["CHUNK"], PARTS=o["PARTS"], OUT_VEC=4 if dtype == "fp32" else 8,
                          **EXTRA)
        sig = {"out_ptr": f"*{dtype}", "in_ptr": f"*{dtype}", **ARGS, **{k: "constexpr" for k in constexprs}}
        compiled = compile_for_h200(clustered_softmax_kernel, sig, constexprs, o["num_warps"], o["num_ctas"])
        ops, regs = sass_ops(compiled)
        count = lambda *names: sum(n for op, n in ops.items() if op.split(".")[0] in names)
        wide = sum(n for op, n in ops.items() if op.startswith("LDGSTS") and op.endswith(".128"))
        narrow = sum(n for op, n in ops.items() if op.startswith("STG") and not op.endswith(".128"))
        ex2 = sum(line.strip().startswith("ex2") for line in compiled.asm["ptx"].splitlines())
        print(dtype, o["SLICE"], o["PARTS"], compiled.metadata.num_ctas, compiled.metadata.shared, count("LDGSTS"),
              wide, count("STL", "LDL"), count("LDG"), count("UCGABAR_ARV"), count("UCGABAR_WAIT"), regs, narrow, ex2)
    """)


def clustered_script(**extra) -> str:
    script = CLUSTERED_SCRIPT.replace("EXTRA = dict()", f"EXTRA = dict(**{extra!r})")
    assert script != CLUSTERED_SCRIPT
    return script


@pytest.mark.parametrize("online", [False, True], ids=["passes", "online"])
def test_the_clustered_kernel_copies_its_slice_and_meets_its_cluster_once(online):
    # (online: the sum taken with the max, chunk_state.py; the same copies, stores and one barrier)
    lines = compiled_lines(clustered_script(ONLINE=online), 4)
    for line in lines:
        dtype, slice_, parts, ctas, shared, copies, wide, spills, loads, arrive, wait, regs, narrow, _ = line.split()
        slice_bytes = int(slice_) * (4 if dtype == "fp32" else 2)
        assert ctas == parts, line  # one cluster of PARTS programs per row
        assert slice_bytes <= int(shared) <= slice_bytes + 1024, line  # the slice, in shared memory
        assert int(copies) > 0 and int(wide) == int(copies), line  # every copy asynchronous, 16 bytes
        assert int(spills) == 0, line
        assert int(loads) == 2, line  # no plain loads of x: only the partners' (max, sum)
        assert arrive == wait == "1", line  # one cluster barrier
        assert int(regs) <= 96, line
        assert narrow == "2", line  # the output stored 16 bytes at a time; two 4-byte stores: the partials


@pytest.mark.parametrize("online", [False, True], ids=["passes", "online"])
def test_the_clustered_kernel_exchanges_through_shared_memory_with_dsmem(online):
    # cluster_exchange.py: the partials go into the partners' shared memory (one generic store each, to the
    # address mapa gives), nothing through global memory; an arrive at the top, then the exchange's barrier.
    for line in compiled_lines(clustered_script(DSMEM=True, ONLINE=online), 4):
        dtype, slice_, parts, ctas, shared, copies, wide, spills, loads, arrive, wait, regs, narrow, _ = line.split()
        assert ctas == parts and int(copies) == int(wide) > 0 and int(spills) == 0, line
        assert loads == "0" and narrow == "0", line  # no partials in global memory: every store is the output's
        assert arrive == wait == "2", line


def test_online_takes_the_sum_with_the_max():
    # ONLINE really compiles the other kernel (one exp a value as the chunks land, one a vector, the store's):
    # more exps in the PTX than the passes' loops, with either exchange; cluster_exchange's maxes, once scaled,
    # are not multiplied by log2 e again.
    from softmax_lab.kernels.cluster_exchange import max_sum_asm

    for dsmem in (False, True):
        passes = [int(line.split()[-1]) for line in compiled_lines(clustered_script(DSMEM=dsmem), 4)]
        online = [int(line.split()[-1]) for line in compiled_lines(clustered_script(DSMEM=dsmem, ONLINE=True), 4)]
        assert all(o > p for o, p in zip(online, passes)), (dsmem, passes, online)
    assert max_sum_asm(4).value.count("mul.f32") == 4 and "mul.f32" not in max_sum_asm(4, True).value


CLUSTERED_BACKWARD_SCRIPT = textwrap.dedent("""
    import os
    os.environ.pop("TRITON_INTERPRET", None)
    import torch
    torch.cuda.is_available = lambda: True
    from softmax_lab.kernels.clustered_backward import backward_slices, clustered_backward_kernel
    from softmax_lab.machine_code import compile_for_h200, sass_ops

    INTS = {"n_cols_v": "i32", "y_stride_v": "i32", "dy_stride_v": "i32", "dx_stride_v": "i32"}
    for dtype, n_cols, knobs in (("bf16", 128256, dict()), ("fp32", 151936, dict(parts=16, num_warps=8)),
                                 ("fp16", 65536, dict(parts=4, num_warps=8))):
        for dsmem in (False, True):
            o = backward_slices(n_cols, 4 if dtype == "fp32" else 2, **knobs)
            constexprs = dict(SLICE=o["SLICE"], CHUNK=o["CHUNK"], PARTS=o["PARTS"], DSMEM=dsmem)
            sig = {"dx_ptr": f"*{dtype}", "y_ptr": f"*{dtype}", "dy_ptr": f"*{dtype}", "partial_ptr": "*fp32", **INTS,
                   **{k: "constexpr" for k in constexprs}}
            compiled = compile_for_h200(clustered_backward_kernel, sig, constexprs, o["num_warps"], o["num_ctas"])
            ops, regs = sass_ops(compiled)
            count = lambda *names: sum(n for op, n in ops.items() if op.split(".")[0] in names)
            wide = sum(n for op, n in ops.items() if op.startswith("LDGSTS") and op.endswith(".128"))
            narrow = sum(n for op, n in ops.items() if op.startswith("STG") and not op.endswith(".128"))
            print(dtype, o["SLICE"], o["PARTS"], int(dsmem), compiled.metadata.shared, count("LDGSTS"), wide,
                  count("STL", "LDL"), count("LDG"), count("UCGABAR_ARV"), narrow)
    """)


def test_the_clustered_backward_keeps_y_and_dy_in_shared_memory():
    # kernels/clustered_backward.py: each program's slices of y and dy copied in 16 bytes at a time (and nothing
    # else loaded but, through global memory, the partners' parts), no spills, dx stored 16 bytes at a time.
    for line in compiled_lines(CLUSTERED_BACKWARD_SCRIPT, 6):
        dtype, slice_, parts, dsmem, shared, copies, wide, spills, loads, arrive, narrow = line.split()
        slice_bytes = 2 * int(slice_) * (4 if dtype == "fp32" else 2)
        assert slice_bytes <= int(shared) <= slice_bytes + 1024, line
        assert int(copies) == int(wide) > 0 and int(spills) == 0, line
        assert (loads, arrive, narrow) == (("0", "2", "0") if dsmem == "1" else ("1", "1", "1")), line


@pytest.mark.skipif(softmax_lab.ON_GPU, reason="the CPU side; tests/kernels/test_gpu.py tests the kernel itself")
def test_the_clustered_backward_says_it_needs_a_gpu():
    from softmax_lab.kernels.clustered_backward import clustered_backward

    with pytest.raises(ValueError, match="clustered_backward needs a GPU"):
        clustered_backward(torch.rand(2, 64), torch.rand(2, 64))
    with pytest.raises(ValueError, match="one dtype"):
        clustered_backward(torch.rand(2, 64), torch.rand(2, 64).half())
    with pytest.raises(ValueError, match="whole 16-byte vectors"):
        clustered_backward(torch.rand(2, 63), torch.rand(2, 63))
    with pytest.raises(ValueError, match="parts must be a power of two"):
        clustered_backward(torch.rand(2, 64), torch.rand(2, 64), parts=3)


@pytest.mark.skipif(softmax_lab.ON_GPU, reason="the CPU side; tests/kernels/test_gpu.py tests the kernel itself")
def test_on_the_cpu_long_rows_keep_the_cooperative_kernel():
    for n, dtype in ((65536, torch.float32), (65536, torch.bfloat16), (131072, torch.float16)):
        assert softmax.choose(2, n, dtype)[0] == "cooperative"  # "clustered" on an H100/H200
    assert softmax.choose(2, 12000, torch.float16)[0] == "fused"  # "resident" there
    with pytest.raises(ValueError, match="clustered_softmax needs a GPU: it is a Gluon kernel"):
        clustered_softmax(torch.randn(2, 65536))


def test_clustered_knobs_and_rows_get_clear_messages():
    from softmax_lab.kernels._launch import device_refusal, whole_chunks
    from softmax_lab.kernels.clustered import slices

    dev = softmax_lab.DEVICE
    with pytest.raises(ValueError, match="supports rows of up to 524288 elements"):
        clustered_softmax(torch.zeros(1, 524289, device=dev))
    with pytest.raises(ValueError, match="parts must be a power of two"):
        clustered_softmax(torch.zeros(2, 40, device=dev), parts=3)
    with pytest.raises(ValueError, match="parts must be at most 16"):
        clustered_softmax(torch.zeros(2, 40, device=dev), parts=32)
    with pytest.raises(ValueError, match="64 chunks of 512 elements; at most 32"):
        slices(65536, 4, parts=2, num_warps=4, vectors=1)  # 32768 elements a program
    assert slices(65536, 4, parts=8, num_warps=2, vectors=2) == dict(SLICE=8192, CHUNK=512, PARTS=8, num_warps=2,
                                                                        num_ctas=8)
    assert slices(1048576, 2)["PARTS"] == 8  # by default clusters every Hopper GPU launches (256 KB: refused)
    assert slices(1048576, 2, parts=16) == dict(SLICE=65536, CHUNK=2048, PARTS=16, num_warps=4, num_ctas=16)
    assert slices(100000, 4, parts=8)["SLICE"] == 14336  # 28 chunks of 512 for 12500 elements (not 32: 16384)
    assert [whole_chunks(n, 512) for n in (1, 512, 513, 4608, 4609, 12500, 16384)] == [1, 1, 2, 10, 10, 28, 32]
    assert "cannot launch" in device_refusal("clustered_softmax", (8, 0), 166912, 65536, clusters=True)  # A100
    assert device_refusal("clustered_softmax", (9, 0), 232448, 65536, clusters=True) == ""


STORES_SCRIPT = textwrap.dedent("""
    import os
    os.environ.pop("TRITON_INTERPRET", None)
    import torch
    torch.cuda.is_available = lambda: True
    from softmax_lab.kernels.clustered import clustered_softmax_kernel
    from softmax_lab.kernels.resident import resident_softmax_kernel
    from softmax_lab.machine_code import compile_for_h200, sass_ops

    ODD = ("n_cols", "n_cols_v", "in_stride_v", "out_stride_v")  # a row of 8200 bf16: 1025 vectors
    ints = {name: "i32" for name in ODD}
    for out_vec in (8, 1):
        sig = {"out_ptr": "*bf16", "in_ptr": "*bf16", **ints, "BLOCK": "constexpr", "CHUNK": "constexpr",
               "OVERLAP": "constexpr", "OUT_VEC": "constexpr"}
        c = compile_for_h200(resident_softmax_kernel, sig, dict(BLOCK=10240, CHUNK=2048, OVERLAP=True,
                             OUT_VEC=out_vec), 8, unaligned=ODD)
        ops, _ = sass_ops(c)
        print("resident", out_vec, *sorted(op for op in ops if op.startswith("STG")))
        sig = {"out_ptr": "*bf16", "in_ptr": "*bf16", "partial_ptr": "*fp32", **ints, "SLICE": "constexpr",
               "CHUNK": "constexpr", "PARTS": "constexpr", "OUT_VEC": "constexpr"}
        c = compile_for_h200(clustered_softmax_kernel, sig, dict(SLICE=2048, CHUNK=1024, PARTS=4, OUT_VEC=out_vec),
                             4, num_ctas=4, unaligned=ODD)
        ops, _ = sass_ops(c)
        print("clustered", out_vec, *sorted(op for op in ops if op.startswith("STG") and op != "STG.E"))
    """)


def test_rows_of_odd_vectors_are_still_stored_16_bytes_at_a_time():
    # Triton knows an int argument is a multiple of 16 only when it is. A row of 8200 bf16 elements (stride 8200,
    # 1025 vectors) with the stride and the mask's end passed as elements is stored 2 bytes at a time (24% of
    # copy on the H200); passed as vectors (OUT_VEC=8) it is stored 16 bytes at a time. Both are compiled here.
    stores = {tuple(line.split()[:2]): line.split()[2:] for line in compiled_lines(STORES_SCRIPT)}
    assert stores[("resident", "8")] == ["STG.E.128"] and stores[("clustered", "8")] == ["STG.E.128"], stores
    assert stores[("resident", "1")] == ["STG.E.U16"] and stores[("clustered", "1")] == ["STG.E.U16"], stores


WINDOW_SCRIPT = textwrap.dedent("""
    import os
    os.environ.pop("TRITON_INTERPRET", None)
    import torch
    torch.cuda.is_available = lambda: True  # compile as for a GPU (nothing is launched)
    from softmax_lab.kernels.unaligned_resident import shared_window, unaligned_resident_kernel
    from softmax_lab.machine_code import compile_for_h200, sass_ops

    INTS = ("in_first", "in_row_stride", "out_first", "out_row_stride", "n_cols")
    for dtype, n, warps, line, online in (("bf16", 50257, 8, 16, 0), ("fp16", 10001, 2, 16, 0),
                                          ("fp32", 50257, 16, 16, 0), ("bf16", 50257, 8, 128, 0),
                                          ("fp32", 50257, 16, 128, 0), ("bf16", 50257, 16, 128, 1)):
        block, chunk = shared_window(n, 4 if dtype == "fp32" else 2, warps, line)
        sig = {"out_ptr": f"*{dtype}", "in_ptr": f"*{dtype}", **{i: "i32" for i in INTS}, "BLOCK": "constexpr",
               "CHUNK": "constexpr", "LINE": "constexpr", "ONLINE": "constexpr"}
        compiled = compile_for_h200(unaligned_resident_kernel, sig,  # (online: the sum with the max, chunk_state.py)
                                    dict(BLOCK=block, CHUNK=chunk, LINE=line, ONLINE=bool(online)), warps,
                                    unaligned=INTS)  # (odd widths and strides: no int is a multiple of 16)
        ops, regs = sass_ops(compiled)
        count = lambda *prefixes: sum(n for op, n in ops.items() if op.startswith(prefixes))
        copies = count("LDGSTS")
        print(dtype, n, line, block, compiled.metadata.shared, copies, copies - count("LDGSTS.E.BYPASS.128"),
              count("STG.E.128"), count("STG") - count("STG.E.128"), count("LDG."),
              count("STL", "LDL"), regs)
    """)


def test_the_window_kernel_copies_whole_vectors_and_stores_the_row_body_16_bytes_at_a_time():
    # kernels/unaligned_resident.py: rows that do not start on 16 bytes still arrive in 16-byte asynchronous copies
    # (the window from the vector boundary before the row), the whole vectors inside the row leave 16 bytes at a
    # time, and only the head and tail pieces go one element at a time (one load, one store a thread).
    lines = compiled_lines(WINDOW_SCRIPT, 6)
    for line in lines:
        dtype, n, start, block, shared, copies, narrow_copies, wide_stores, narrow_stores, loads, spills, regs = \
            line.split()
        size = 4 if dtype == "fp32" else 2
        assert int(n) + int(start) // size - 1 <= int(block) <= int(shared) // size, line
        assert int(shared) <= int(block) * size + 1024, line
        assert int(copies) > 0 and narrow_copies == "0", line
        assert int(wide_stores) >= 1 and narrow_stores == "1" and loads == "1", line  # (the pieces)
        assert spills == "0", line
    for bf16 in (lines[0].split(), lines[3].split()):  # (windows from 16 and from 128 bytes before the row)
        assert 2 * int(bf16[4]) <= 227 * 1024, bf16  # two programs of a 50,257-element bf16 row share a multiprocessor


def test_the_window_kernel_refuses_what_it_cannot_take():
    from softmax_lab.kernels._launch import device_refusal
    from softmax_lab.kernels.unaligned_resident import shared_window

    assert shared_window(50257, 2, 8) == (51200, 2048)  # 25 chunks of one 16-byte vector a thread
    assert shared_window(9, 2, 1) == (256, 256)
    assert "shared memory" in device_refusal("unaligned_resident_softmax", (9, 0), 232448, 60000 * 4)
    if not softmax_lab.ON_GPU:
        from softmax_lab.kernels.unaligned_resident import unaligned_resident_softmax

        with pytest.raises(ValueError, match="needs a GPU"):
            unaligned_resident_softmax(torch.zeros(2, 77))
        with pytest.raises(ValueError, match="2-D"):
            unaligned_resident_softmax(torch.zeros(77))


BACKWARD_SCRIPT = textwrap.dedent("""
    import os
    os.environ.pop("TRITON_INTERPRET", None)
    import torch
    torch.cuda.is_available = lambda: True  # compile as for a GPU (nothing is launched)
    from softmax_lab.kernels.resident_backward import resident_backward_kernel, shared_windows
    from softmax_lab.machine_code import compile_for_h200, sass_ops

    INTS = ("first", "y_row_stride", "dy_row_stride", "dx_row_stride", "n_rows", "n_cols")
    for dtype, n, warps, line in (("bf16", 50257, 16, 16), ("fp16", 16385, 4, 16), ("fp32", 20001, 8, 16),
                                  ("bf16", 50257, 16, 128)):
        block, chunk = shared_windows(n, 4 if dtype == "fp32" else 2, warps, line)
        sig = {"dx_ptr": f"*{dtype}", "y_ptr": f"*{dtype}", "dy_ptr": f"*{dtype}", **{i: "i32" for i in INTS},
               "BLOCK": "constexpr", "CHUNK": "constexpr", "LINE": "constexpr"}
        compiled = compile_for_h200(resident_backward_kernel, sig, dict(BLOCK=block, CHUNK=chunk, LINE=line), warps,
                                    unaligned=INTS)  # (odd widths and strides: no int is a multiple of 16)
        ops, regs = sass_ops(compiled)
        count = lambda *prefixes: sum(n for op, n in ops.items() if op.startswith(prefixes))
        print(dtype, n, block, chunk, compiled.metadata.shared, count("LDGSTS"), count("LDGSTS.E.BYPASS.128"),
              count("STG.E.128"), count("STG") - count("STG.E.128"), count("LDG."), count("STL", "LDL"))
    """)


def test_the_resident_backward_copies_whole_vectors_and_stores_the_row_body_16_bytes_at_a_time():
    # kernels/resident_backward.py: y and dy arrive in 16-byte asynchronous copies, two windows a chunk for the
    # first row and two for each next row (copied in as the store pass leaves room), with windows from each row's
    # vector or its 128-byte line; dx's whole vectors leave 16 bytes at a time, the head and tail pieces one
    # element at a time (two loads, one store a thread).
    lines = compiled_lines(BACKWARD_SCRIPT, 4)
    for line in lines:
        dtype, n, block, chunk, shared, copies, wide_copies, wide_stores, narrow_stores, loads, spills = line.split()
        size = 4 if dtype == "fp32" else 2
        assert int(n) + 16 // size - 1 <= int(block) and 2 * int(block) * size <= int(shared), line
        assert int(copies) == int(wide_copies) == 4 * int(block) // int(chunk), line  # (y and dy, twice a chunk)
        assert int(wide_stores) == int(block) // int(chunk) and narrow_stores == "1" and loads == "2", line
        assert spills == "0", line


TMA_SCRIPT = textwrap.dedent("""
    import os
    os.environ.pop("TRITON_INTERPRET", None)
    import torch
    torch.cuda.is_available = lambda: True
    from triton.runtime.jit import mangle_type
    from softmax_lab.kernels.clustered_tma import clustered_tma_kernel, descriptors, tiles
    from softmax_lab.machine_code import compile_for_h200, sass_ops


    def synced_before_inval(ptx):  # (Triton's wait on the copies' mbarrier, then bar.sync, then its inval)
        wait, inval = ptx.find("waitLoop:"), ptx.find("mbarrier.inval")
        return 0 <= wait < inval and "bar.sync" in ptx[wait:inval]

    DTYPES = {"bf16": torch.bfloat16, "fp16": torch.float16, "fp32": torch.float32}
    for dtype, n_cols, parts, warps, stream in (
            ("bf16", 65536, 4, 4, True), ("fp16", 81920, 8, 4, False), ("bf16", 128256, 8, 4, True),
            ("fp32", 65536, 8, 8, False), ("fp32", 100000, 16, 4, False), ("fp32", 151936, 16, 4, True),
            ("fp32", 151936, 8, 8, False),  # (the dispatcher's, and the held form where it streams now)
            ("bf16", 73728, 8, 4, False), ("bf16", 163840, 8, 8, True), ("bf16", 262144, 16, 4, True),
            ("fp32", 200000, 16, 8, True),  # (round 14's ranges)
            ("bf16", 8200, 16, 4, False), ("bf16", 8200, 16, 4, True)):  # (slices past the row's end, one wholly)
        x = torch.empty((2, n_cols), dtype=DTYPES[dtype])  # (on the CPU: only its dtype, shape and strides count)
        big, box = descriptors(x, parts, warps)
        o = tiles(n_cols, parts, warps)
        constexprs = dict(N_COLS=n_cols, SLICE=o["SLICE"], MAIN=o["MAIN"], TAIL=o["TAIL"], PARTS=parts,
                          OUT_VEC=4 if dtype == "fp32" else 8, STREAM=stream)
        sig = {"out_ptr": f"*{dtype}", "big_desc": mangle_type(big), "box_desc": mangle_type(box),
               "out_stride_v": "i32", **{k: "constexpr" for k in constexprs}}
        compiled = compile_for_h200(clustered_tma_kernel, sig, constexprs, warps, parts,
                                    unaligned=("big_desc", "box_desc"))
        ops, regs = sass_ops(compiled)
        count = lambda *names: sum(n for op, n in ops.items() if op.split(".")[0] in names)
        narrow = sum(n for op, n in ops.items() if op.startswith("STG") and not op.endswith(".128"))
        ptx = compiled.asm["ptx"]
        print(dtype, n_cols, parts, stream, compiled.metadata.num_ctas, compiled.metadata.shared, count("UTMALDG"),
              count("LDG", "LDGSTS"), count("STL", "LDL"), narrow, count("STG"), regs, ptx.count("st.async"),
              ptx.count("barrier.cluster.arrive"), ptx.count("barrier.cluster.wait"),
              ptx.count(".shared .align 128 .b8 xchg[128]") + ptx.count(".shared .align 128 .b8 xchg[256]"),
              ptx.count("mbarrier.inval"), synced_before_inval(ptx))
    """)


def test_the_tma_clustered_kernel_copies_by_tma_and_never_spills():
    # kernels/clustered_tma.py, compiled for an H200 at the dispatcher's settings: the slice copied by TMA (no
    # loads of x by the threads, no cp.async), held in registers or streamed from shared memory (then 48 registers
    # at most), without a spill, stored 16 bytes at a time; the partials sent by st.async into the partners' shared
    # memory, one cluster barrier (an arrive at the top, its wait before the sends); the exchange's static array a
    # whole number of 128 bytes (TMA's shared destinations follow it and must lie on 128 bytes: round 12's first
    # run faulted without it); the copies' mbarrier invalidated once waited on (round 14's race).
    for line in compiled_lines(TMA_SCRIPT, 13):
        (dtype, n_cols, parts, stream, ctas, shared, tma_copies, loads, spills, narrow, stores, regs, st_async,
         arrive, wait, padded, invalidated, synced) = line.split()
        assert ctas == parts, line
        assert int(tma_copies) > 0 and loads == "0" and spills == "0", line
        assert narrow == "0" and int(stores) > 0, line
        assert int(regs) <= (48 if stream == "True" else 168), line
        assert st_async == arrive == wait == padded == "1", line
        assert invalidated == "1", line  # (the copies' mbarrier, before the reductions' scratch reuses its bytes)
        assert synced == "True", line  # (a CTA barrier between the wait and the inval: every thread has waited)
        size = 4 if dtype == "fp32" else 2
        assert int(shared) >= -(-int(n_cols) // int(parts)) * size, line  # the slice, in shared memory


TMA_BACKWARD_SCRIPT = textwrap.dedent("""
    import os
    os.environ.pop("TRITON_INTERPRET", None)
    import torch
    torch.cuda.is_available = lambda: True
    from triton.runtime.jit import mangle_type
    from softmax_lab.kernels.clustered_tma import descriptors, tiles
    from softmax_lab.kernels.clustered_tma_backward import clustered_tma_backward_kernel
    from softmax_lab.machine_code import compile_for_h200, sass_ops

    DTYPES = {"bf16": torch.bfloat16, "fp16": torch.float16, "fp32": torch.float32}
    for dtype, n_cols, parts, warps, held in (
            ("fp32", 151936, 16, 4, 0), ("fp32", 151936, 8, 8, 0), ("bf16", 128256, 8, 4, 0),
            ("fp32", 65536, 8, 4, 0), ("bf16", 8200, 16, 4, 0), ("fp16", 262144, 16, 8, 0),
            ("fp32", 151936, 16, 4, 1), ("fp32", 151936, 16, 8, 1), ("bf16", 151936, 16, 4, 1),
            ("fp32", 131076, 16, 4, 1),  # (held: 256 columns, fewer than a sub-tile's 512: threads hold copies)
            ("fp32", 50257, 16, 4, 0), ("bf16", 20001, 4, 8, 0),
            ("fp32", 20001, 4, 8, 0)):  # (held: HELD columns in registers; the last three: flat, the last a TAIL tile)
        x = torch.empty((2, n_cols), dtype=DTYPES[dtype])
        flat = n_cols % (4 if dtype == "fp32" else 8) != 0
        big, box = descriptors(x, parts, warps, flat)
        o = tiles(n_cols, parts, warps, 256 if flat else 0)
        tail, held = (0, o["TAIL"]) if held else (o["TAIL"], 0)
        constexprs = dict(N_COLS=n_cols, SLICE=o["SLICE"], MAIN=o["MAIN"], TAIL=tail, PARTS=parts,
                          OUT_VEC=1 if flat else 4 if dtype == "fp32" else 8, HELD=held)
        sig = {"dx_ptr": f"*{dtype}", "y_big": mangle_type(big), "y_box": mangle_type(box),
               "dy_big": mangle_type(big), "dy_box": mangle_type(box), "y_ptr": f"*{dtype}", "dy_ptr": f"*{dtype}",
               "dx_stride_v": "i32", "y_stride_v": "i32", "dy_stride_v": "i32",
               **{k: "constexpr" for k in constexprs}}
        compiled = compile_for_h200(clustered_tma_backward_kernel, sig, constexprs, warps, parts,
                                    unaligned=("y_big", "y_box", "dy_big", "dy_box"))
        ops, regs = sass_ops(compiled)
        count = lambda *names: sum(n for op, n in ops.items() if op.split(".")[0] in names)
        narrow = sum(n for op, n in ops.items() if op.startswith("STG") and not op.endswith(".128"))
        ptx = compiled.asm["ptx"]
        wait, inval = ptx.find("waitLoop:"), ptx.find("mbarrier.inval")
        synced = 0 <= wait < inval and "bar.sync" in ptx[wait:inval]
        wide_loads = sum(n for op, n in ops.items() if op.startswith("LDG") and op.endswith(".128"))
        sub = 32 * warps * (4 if dtype == "fp32" else 8)
        held_vectors = 2 * -(-held // sub)  # (a y and a dy vector each, a thread)
        print(dtype, n_cols, parts, held_vectors, compiled.metadata.num_ctas, compiled.metadata.shared,
              count("UTMALDG"), wide_loads, count("LDG", "LDGSTS") - wide_loads, count("STL", "LDL"), narrow,
              count("STG") - narrow, regs,
              ptx.count("st.async"), ptx.count("barrier.cluster.arrive"), ptx.count("barrier.cluster.wait"),
              ptx.count("mbarrier.inval"), synced)
    """)


def test_the_tma_clustered_backward_copies_by_tma_and_never_spills():
    # kernels/clustered_tma_backward.py, compiled for an H200: y and dy copied by TMA (no loads by the threads but
    # the held columns' 16-byte loads, with held=True), streamed from shared memory in few registers, no spill, dx
    # stored 16 bytes at a time (in the flat form, rows off 16 bytes, too, but for the vector it shares with each
    # neighbour: an element at a time, in the main tile and in the tail tile); the parts sent by st.async, one
    # cluster barrier; the copies' mbarrier invalidated once waited on, after a CTA barrier (the forward's round-14
    # race).
    for line in compiled_lines(TMA_BACKWARD_SCRIPT, 13):
        (dtype, n_cols, parts, held, ctas, shared, tma_copies, wide_loads, loads, spills, narrow, wide, regs,
         st_async, arrive, wait, invalidated, synced) = line.split()
        flat = int(n_cols) % (4 if dtype == "fp32" else 8) != 0
        assert ctas == parts, line
        assert int(tma_copies) > 0 and loads == "0" and spills == "0", line
        # held: the columns past MAIN loaded by the threads, 16 bytes at a time (a vector of y and one of dy for
        # each 16 bytes a thread holds), kept in registers beside the streamed sub-tiles
        assert (0 < int(wide_loads) <= int(held)) if held != "0" else wide_loads == "0", line  # (fewer: the
        # compiler drops the vectors always past the slice)
        assert int(wide) > 0 and int(regs) <= (96 if held != "0" else 48), line
        # (fp32 peels the main tile's first sub-tile: three bodies with a TAIL tile, helper-88's review)
        assert int(narrow) <= (3 * (4 if dtype == "fp32" else 8) if flat else 0), line
        assert st_async == arrive == wait == invalidated == "1" and synced == "True", line
        size = 4 if dtype == "fp32" else 2
        if held == "0":
            assert int(shared) >= 2 * (-(-int(n_cols) // int(parts))) * size, line  # y's and dy's slices


def test_the_tma_launches_name_every_constexpr():
    # The dispatcher's plans (``_launch.relauncher``) pass every argument past the tensors from launch_setup's
    # options by name: a constexpr left to its default there (HELD, round 17) failed only on the GPU.
    from softmax_lab.kernels import clustered_tma, clustered_tma_backward

    for n, held in ((151936, True), (151936, False), (50257, False), (8200, False)):
        y = torch.empty((2, n))
        setups = [clustered_tma_backward.launch_setup(torch.empty_like(y), y, y, 16, 4, held)]
        if n % 4 == 0:  # (the forward takes whole vectors only)
            setups += [clustered_tma.launch_setup(torch.empty_like(y), y, 16, 4, stream) for stream in (False, True)]
        for kernel, _, args, options in setups:
            assert set(kernel.arg_names[len(args):]) <= set(options), (kernel, n, held)


def test_the_tma_clustered_backward_says_what_it_cannot_take():
    from softmax_lab.kernels.clustered_tma_backward import clustered_tma_backward

    y = torch.softmax(torch.randn(2, 65536), -1)
    with pytest.raises(ValueError, match="clustered_tma_backward needs a GPU"):
        clustered_tma_backward(y, y)
    with pytest.raises(ValueError, match="one dtype"):
        clustered_tma_backward(y, y.half())
    with pytest.raises(ValueError, match="power of two"):
        clustered_tma_backward(y, y, parts=3)
    with pytest.raises(ValueError, match="parts must be 2 to 16"):
        clustered_tma_backward(y, y, parts=1)
    with pytest.raises(ValueError, match="num_warps must be 4 or 8"):  # (with 1 or 2 the unrolled copies spill)
        clustered_tma_backward(y, y, num_warps=2)
    with pytest.raises(ValueError, match="one dtype"):  # (empty inputs too)
        clustered_tma_backward(y[:0], y[:0].half())
    # held=True: rows of whole vectors only, and a tail a thread can hold (helper-92's review, round 17)
    odd = torch.softmax(torch.randn(2, 50257), -1)
    with pytest.raises(ValueError, match="held=True is for rows of whole 16-byte vectors"):
        clustered_tma_backward(odd, odd, parts=16, held=True)
    wide = torch.softmax(torch.randn(2, 98304), -1)  # (4 programs: slices of 16,384 + a tail of 8,192)
    with pytest.raises(ValueError, match="would keep 128 elements of y and dy a thread in registers, at most 64"):
        clustered_tma_backward(wide, wide, parts=4, held=True)
    with pytest.raises(ValueError, match="needs a GPU"):  # (8 warps: 64, which fits)
        clustered_tma_backward(wide, wide, parts=4, num_warps=8, held=True)
    # the flat form's plans: a last copy starting past the end of the rows is refused (helper-87's review)
    from softmax_lab.kernels.clustered_tma_backward import box_past_end

    assert box_past_end(1, 255, 4, 2, 4) and box_past_end(4, 32767, 4, 8, 4) and box_past_end(4, 65535, 4, 16, 4)
    assert not any(box_past_end(r, n, size, p, w) for r, n in ((64, 50257), (5, 77), (3, 20001), (2048, 50257))
                   for size in (2, 4) for p, w in ((2, 8), (4, 4), (8, 4), (8, 8), (16, 4), (16, 8)))
    # the dispatcher's rows for it (tuning.TMA_BACKWARD); off the GPU, softmax_backward keeps the cooperative kernel
    from softmax_lab.kernels.backward import launch_setup, tma_knobs
    from softmax_lab.kernels.tuning import TMA_BACKWARD, pick

    assert pick(TMA_BACKWARD[4], 16384) is None and pick(TMA_BACKWARD[4], 128256) == dict(parts=16, num_warps=4)
    assert pick(TMA_BACKWARD[4], 131073) == pick(TMA_BACKWARD[4], 163840) == dict(parts=16, num_warps=8, held=True)
    assert pick(TMA_BACKWARD[4], 200000) is None and pick(TMA_BACKWARD[2], 16376) is None
    assert pick(TMA_BACKWARD[2], 128256) == dict(parts=16, num_warps=4) and pick(TMA_BACKWARD[2], 262152) is None
    assert tma_knobs(y, y, y) is None
    assert launch_setup(torch.empty_like(y), y, y)[0].fn.__name__ == "cooperative_backward_kernel"


def test_the_tma_clustered_kernel_says_what_it_cannot_take():
    from softmax_lab.kernels import clustered_tma_softmax
    from softmax_lab.kernels.clustered_tma import tiles

    with pytest.raises(ValueError, match="clustered_tma_softmax needs a GPU"):
        clustered_tma_softmax(torch.randn(2, 65536))
    with pytest.raises(ValueError, match="power of two"):
        clustered_tma_softmax(torch.randn(2, 65536), parts=3)
    with pytest.raises(ValueError, match="supports rows of up to"):
        clustered_tma_softmax(torch.randn(1, 16 * 65536 + 8, dtype=torch.bfloat16))
    assert softmax.choose(2, 65536, torch.float32)[0] == "cooperative"  # ("clustered_tma" on an H100/H200)
    # slices of whole 256-element boxes, as a power-of-two tile and a narrower one where that holds them in less
    assert tiles(151936, 8, 8) == dict(N_COLS=151936, SLICE=19200, MAIN=16384, TAIL=4096, PARTS=8, num_warps=8,
                                      num_ctas=8)
    assert (tiles(100000, 16, 4)["MAIN"], tiles(100000, 16, 4)["TAIL"]) == (8192, 0)
    assert [tiles(8200, 16, 4)[k] for k in ("SLICE", "MAIN", "TAIL")] == [768, 512, 256]
    # what needs no GPU to refuse: knobs, the slice a thread holds, the rows' layout, the grid (helper-82's review)
    from softmax_lab.kernels.clustered_tma import shape_refusal

    assert shape_refusal(4, 65536, 65536, 0, 2, 8, 4) == ""
    assert shape_refusal(1, 65536, 3, 0, 2, 8, 4) == ""  # (one row: its stride does not matter)
    assert "parts must be 2 to 16" in shape_refusal(4, 65536, 65536, 0, 2, 1, 4)
    assert "at most 80 with 16 warps" in shape_refusal(2, 131072, 131072, 0, 2, 2, 16)  # (it spilled)
    assert "at most 128 with 4 warps" in shape_refusal(2, 65536, 65536, 0, 4, 2, 4)
    assert "or stream=True" in shape_refusal(2, 65536, 65536, 0, 4, 2, 4)
    assert shape_refusal(2, 65536, 65536, 0, 4, 2, 4, stream=True) == ""  # (streamed: shared memory decides)
    with pytest.raises(ValueError, match="stream must be True or False"):
        clustered_tma_softmax(torch.randn(2, 65536), stream="no")
    assert "overlap" in shape_refusal(4, 65536, 0, 0, 4, 8, 8)  # expand()ed rows
    assert "not a multiple of 4" in shape_refusal(4, 65535, 65536, 0, 4, 8, 8)
    assert "start on 16 bytes" in shape_refusal(4, 65536, 65538, 0, 4, 8, 8)
    assert "start on 16 bytes" in shape_refusal(4, 65536, 65536, 4, 4, 8, 8)
    assert "2**31 programs" in shape_refusal(2**28, 8, 8, 0, 2, 16, 4)  # (the grid would wrap: rows unwritten)


def test_the_tma_kernels_ask_the_driver_about_big_clusters_once(monkeypatch):
    # clustered_tma.cluster_fits: a cluster of more than 8 programs must fit one group of multiprocessors; the
    # forward and the backward (flat rows too) build their launch on one row, ask once per GPU, dtype, row and knobs,
    # and answer in their own names.
    from softmax_lab.kernels import clustered_tma
    from softmax_lab.kernels import clustered_tma_backward as backward

    asked = []

    def refusal(kernel, grid, args, options):
        asked.append((kernel.fn.__name__, grid, options["PARTS"], options["num_warps"]))
        return "clustered_softmax: too big a cluster (with more warps or vectors)"

    monkeypatch.setattr(clustered_tma, "cluster_refusal", refusal)
    monkeypatch.setattr(clustered_tma, "_CLUSTERS", {})
    x = torch.empty(4, 131072, dtype=torch.bfloat16)
    y = torch.empty(4, 50257)  # (not whole 16-byte vectors: the flat launch)
    for _ in range(2):
        assert clustered_tma.clusters_fit(x, 16, 4, True) == "clustered_tma_softmax: too big a cluster"
        assert backward.clusters_fit(y, y, 16, 8) == "clustered_tma_backward: too big a cluster"
    assert asked == [("clustered_tma_kernel", (1,), 16, 4), ("clustered_tma_backward_kernel", (1,), 16, 8)]
