"""The staged kernel (kernels/staged.py), on any machine: a Gluon kernel, which Triton's CPU interpreter cannot
run, so on the CPU the dispatcher keeps the cooperative kernel and the launcher says why it refuses; and its
machine code for an H200 (sm_90), compiled here: 16-byte asynchronous copies into shared memory, no register
spills, the shared memory its stages need. Its results are tested on the GPU (tests/test_gpu.py)."""
import subprocess
import sys
import textwrap

import pytest
import torch

import softmax_lab
from conftest import ROOT
from softmax_lab import softmax
from softmax_lab.kernels import staged_softmax
from softmax_lab.kernels.staged import max_cols

SCRIPT = textwrap.dedent("""
    import os, re, subprocess, tempfile
    from collections import Counter
    from pathlib import Path
    os.environ.pop("TRITON_INTERPRET", None)  # (Triton reads it when its own library is imported)
    import torch
    torch.cuda.is_available = lambda: True  # compile as for a GPU (nothing is launched)
    import triton
    from triton.backends.compiler import GPUTarget
    from triton.experimental.gluon._runtime import GluonASTSource
    from softmax_lab.kernels.staged import staged_softmax_kernel

    tool = Path(triton.__file__).parent / "backends" / "nvidia" / "bin" / "cuobjdump"
    for dtype, block, stages in (("bf16", 32768, 3), ("fp16", 32768, 1), ("fp32", 16384, 2)):
        sig = {"out_ptr": f"*{dtype}", "in_ptr": f"*{dtype}", "n_rows": "i32", "n_cols": "i32", "n_cols_v": "i32",
               "in_stride_v": "i32", "out_row_stride": "i32", "BLOCK": "constexpr", "STAGES": "constexpr"}
        src = GluonASTSource(fn=staged_softmax_kernel, signature=sig, constexprs={"BLOCK": block, "STAGES": stages},
                             attrs={(0,): [["tt.divisibility", 16]], (1,): [["tt.divisibility", 16]]})
        compiled = triton.compile(src, target=GPUTarget("cuda", 90, 32), options=dict(num_warps=32))
        with tempfile.TemporaryDirectory() as tmp:
            cubin = Path(tmp) / "k.cubin"
            cubin.write_bytes(compiled.asm["cubin"])
            sass = subprocess.run([str(tool), "-sass", str(cubin)], capture_output=True, text=True).stdout
        ops = Counter(re.findall(r"/\\*[0-9a-f]{4}\\*/\\s+(?:@!?U?P\\w+\\s+)?([A-Z0-9_]+(?:\\.[A-Z0-9_]+)*)", sass))
        copies = sum(n for op, n in ops.items() if op.startswith("LDGSTS"))
        wide = sum(n for op, n in ops.items() if op.startswith("LDGSTS") and op.endswith(".128"))
        spills = sum(n for op, n in ops.items() if op.split(".")[0] in ("STL", "LDL"))
        loads = sum(n for op, n in ops.items() if op.split(".")[0] == "LDG")
        print(dtype, block, stages, compiled.metadata.shared, copies, wide, spills, loads)
    """)


def test_the_machine_code_copies_16_bytes_at_a_time_into_shared_memory():
    run = subprocess.run([sys.executable, "-c", SCRIPT], capture_output=True, text=True, cwd=ROOT, timeout=300)
    assert run.returncode == 0, run.stderr[-3000:]
    for line in run.stdout.splitlines():
        dtype, block, stages, shared, copies, wide, spills, loads = line.split()
        row_bytes = int(block) * (2 if dtype in ("bf16", "fp16") else 4)
        assert int(stages) * row_bytes <= int(shared) <= int(stages) * row_bytes + 1024, line  # + reduction scratch
        assert int(copies) > 0 and int(wide) == int(copies), line  # every copy asynchronous, 16 bytes
        assert int(spills) == 0, line  # the row fits the registers
        assert int(loads) == 0, line  # no plain global loads: the row comes through shared memory


@pytest.mark.skipif(softmax_lab.ON_GPU, reason="the CPU side; tests/test_gpu.py tests the kernel itself")
def test_on_the_cpu_the_dispatcher_keeps_the_cooperative_kernel_and_the_launcher_says_why():
    x = torch.randn(2, 20000).to(torch.bfloat16)
    assert softmax.choose(2, 20000, torch.bfloat16)[0] == "cooperative"
    with pytest.raises(ValueError, match="needs a GPU: it is a Gluon kernel"):
        staged_softmax(x)
    ref = torch.softmax(x.double(), -1)
    torch.testing.assert_close(softmax(x).double(), ref, atol=2e-2, rtol=2e-2)


def test_bad_inputs_get_clear_messages():
    assert (max_cols(torch.bfloat16), max_cols(torch.float16), max_cols(torch.float32)) == (65536, 65536, 32768)
    dev = softmax_lab.DEVICE
    with pytest.raises(ValueError, match="supports rows of up to 32768 elements"):
        staged_softmax(torch.zeros(2, 40000, device=dev))
    with pytest.raises(TypeError, match="floating-point"):
        staged_softmax(torch.zeros(2, 40, dtype=torch.int32, device=dev))
    with pytest.raises(ValueError, match="2-D"):
        staged_softmax(torch.zeros(40, device=dev))
    with pytest.raises(ValueError, match="must be a positive integer"):
        staged_softmax(torch.zeros(2, 40, device=dev), STAGES=0)
