"""The fast path's launch through torch's C++ launcher (``kernels/_launch.static_launch``), checked without a GPU:
the kernels are compiled for an H200 (sm_90) on this machine and the argument types handed to
``torch._C._StaticCudaLauncher`` are compared with the compiled kernel's own parameter list (its PTX ``.entry``).
A wrong type or a missing parameter would make the GPU read garbage arguments, so this is what must hold."""
import subprocess
import sys
import textwrap

from conftest import ROOT

SCRIPT = textwrap.dedent("""
    import re
    import torch
    torch.cuda.is_available = lambda: True  # compile as for a GPU
    from softmax_lab.kernels._launch import static_launch
    from softmax_lab.kernels.fused import fused_softmax_kernel
    from softmax_lab.kernels.multirow import multirow_softmax_kernel
    from softmax_lab.machine_code import compile_for_h200

    PTX_CODE = {".u64 .ptr": "O", ".u32": "i", ".u64": "l", ".f32": "f"}

    def entry_codes(compiled):
        params = re.findall(r"\\.param (\\.\\w+(?: \\.ptr)?)", compiled.asm["ptx"].split(")")[0])
        return "".join(PTX_CODE[p] for p in params)

    rows = {"out_ptr": "*bf16", "in_ptr": "*bf16", "in_row_stride": "i32", "out_row_stride": "i32"}
    values = dict(out_ptr=1 << 40, in_ptr=2 << 40, in_row_stride=3, out_row_stride=4, n_rows=5, n_cols=6,
                  BLOCK=512, ROWS=2)
    cases = {
        "fused": (fused_softmax_kernel, {**rows, "n_cols": "i32", "BLOCK": "constexpr"}, {"BLOCK": 512}, 4),
        "fused, 64-bit strides": (fused_softmax_kernel, {**rows, "in_row_stride": "i64", "out_row_stride": "i64",
                                  "n_cols": "i32", "BLOCK": "constexpr"}, {"BLOCK": 512}, 4),
        # Triton compiles an int argument equal to 1 in as a constant: it is not passed at launch
        "multirow, one row": (multirow_softmax_kernel, {**rows, "n_rows": "constexpr", "n_cols": "i32",
                              "BLOCK": "constexpr", "ROWS": "constexpr"}, {"n_rows": 1, "BLOCK": 512, "ROWS": 2}, 2),
    }
    for name, (kernel, signature, constexprs, warps) in cases.items():
        compiled = compile_for_h200(kernel, signature, constexprs, warps)
        types, rest = static_launch(compiled, values)
        print(f"{name}|{types}|{entry_codes(compiled)}|{list(rest)}")
    """)


def test_static_launch_passes_exactly_the_compiled_kernels_parameters():
    run = subprocess.run([sys.executable, "-c", SCRIPT], capture_output=True, text=True, cwd=ROOT, timeout=300)
    assert run.returncode == 0, run.stderr[-3000:]
    got = {name: (types, entry, rest) for name, types, entry, rest in
           (line.split("|") for line in run.stdout.splitlines())}
    assert set(got) == {"fused", "fused, 64-bit strides", "multirow, one row"}
    for name, (types, entry, rest) in got.items():
        assert types == entry, f"{name}: launch types {types} but the kernel's parameters are {entry}"
    assert got["fused"][0] == "OOiiiOO" and got["fused"][2] == "[3, 4, 6, None, None]"
    assert got["fused, 64-bit strides"][0] == "OOlliOO"
    assert got["multirow, one row"][0] == "OOiiiOO" and got["multirow, one row"][2] == "[3, 4, 6, None, None]"
