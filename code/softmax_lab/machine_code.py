"""What an H200 would run, on any machine: compile a kernel for sm_90 and count its instructions.

Triton's wheel ships NVIDIA's assembler (``ptxas``) and disassembler (``cuobjdump``), so a kernel compiles to the
GPU's machine code (SASS) without a GPU. Counting the instructions per thread shows the arithmetic a kernel
issues for each element, which is what held 16-bit long rows back (chapter 10): a memory-bound kernel
stays at copy speed only while its arithmetic hides behind its memory traffic.

``access_widths()`` compiles the register kernels for rows that are whole 16-byte vectors but whose length is not
a multiple of 16, and counts their loads and stores by width (chapter 7: the compiler sees only the ints).

``instruction_counts()`` compiles the fused kernel for a bf16 row of 32768 elements (32 warps, so 32 elements
per thread) twice: as first written (``tl.exp``, a division per element) and as the package has it
(``fast_exp``, one division per row). The compiler's choice between the two depends on the device picked when
``softmax_lab`` is imported, so the counting runs in a fresh Python process that compiles as for a GPU.
"""
from __future__ import annotations

import inspect
import json
import os
import re
import subprocess
import sys
import tempfile
from collections import Counter
from pathlib import Path

SHAPE = dict(dtype="bf16", BLOCK=32768, num_warps=32)


def instruction_counts(timeout: float = 300) -> dict:
    """``{"tl.exp, / per element": {...}, "fast_exp, one division": {...}}``, each with the SASS instructions per
    thread (``total``, ``FMUL``, ``FADD``, ``MUFU.EX2``, loads and stores), the registers per thread, and the PTX
    divisions and exps. The same on every machine with the same Triton (the target is fixed: sm_90)."""
    return _in_fresh_process(["counts"], timeout)


def _in_fresh_process(args: list, timeout: float) -> dict:
    """``python -m softmax_lab.machine_code *args`` (which compiles as for a GPU: the device is picked when
    softmax_lab is imported, so not in this process), its JSON output."""
    run = subprocess.run([sys.executable, "-m", "softmax_lab.machine_code", *args], capture_output=True, text=True,
                         timeout=timeout, env=_compile_environment())
    if run.returncode != 0:
        raise RuntimeError(f"compiling for sm_90 failed:\n{run.stderr[-2000:]}")
    return json.loads(run.stdout)


def _compile_environment() -> dict:
    """This process's environment without the switches that force the interpreter (``SOFTMAX_LAB_DEVICE=cpu``,
    ``TRITON_INTERPRET=1``): the fresh process compiles for the GPU whatever this one runs on."""
    return {k: v for k, v in os.environ.items() if k not in ("SOFTMAX_LAB_DEVICE", "TRITON_INTERPRET")}


WIDTH_KERNELS = ("fused", "multirow", "backward")


def access_widths(kernels=("fused",), timeout: float = 600) -> dict:
    """``{kernel: {dtype: {VEC: {"LDG.E.128": n, ...}}}}``: the global loads and stores per thread, by SASS
    instruction (``.U16``: 2 bytes, no suffix: 4, ``.128``: 16), of ``kernels`` (of ``WIDTH_KERNELS``) compiled
    for sm_90 with BLOCK = 1024 and 4 warps, with their ints marked as not multiples of 16 (as for rows of 1,000
    elements, whole 16-byte vectors): with the ints in elements (VEC = 1) and in vectors (VEC = 4 for fp32, 8
    for bf16). The same on every machine with the same Triton."""
    return _in_fresh_process(["widths", *kernels], timeout)


def _widths(kernels) -> dict:
    from softmax_lab.kernels.backward import softmax_backward_kernel
    from softmax_lab.kernels.fused import fused_softmax_kernel
    from softmax_lab.kernels.multirow import multirow_softmax_kernel

    out = {}
    for name in kernels:
        kernel, ptrs, ints, consts = {
            "fused": (fused_softmax_kernel, ("out_ptr", "in_ptr"), ("in_row_stride", "out_row_stride", "n_cols"), {}),
            "multirow": (multirow_softmax_kernel, ("out_ptr", "in_ptr"),
                         ("in_row_stride", "out_row_stride", "n_rows", "n_cols"), {"ROWS": 2}),
            "backward": (softmax_backward_kernel, ("dx_ptr", "y_ptr", "dy_ptr"),
                         ("y_row_stride", "dy_row_stride", "dx_row_stride", "n_rows", "n_cols"), {"ROWS": 2}),
        }[name]
        for dtype, vec in (("fp32", 4), ("bf16", 8)):
            for v in (1, vec):
                sig = {**{p: f"*{dtype}" for p in ptrs}, **{i: "i32" for i in ints},
                       **{c: "constexpr" for c in (*consts, "BLOCK", "VEC")}}
                ops, _ = sass_ops(compile_for_h200(kernel, sig, {**consts, "BLOCK": 1024, "VEC": v}, 4, unaligned=ints))
                memory = {op: n for op, n in sorted(ops.items()) if op.startswith(("LDG", "STG"))}
                out.setdefault(name, {}).setdefault(dtype, {})[str(v)] = memory
    return out


def compile_for_h200(kernel, signature: dict, constexprs: dict, num_warps: int, num_ctas: int = 1,
                     unaligned: tuple = ()):
    """``kernel`` compiled as Triton compiles it for an H200 (sm_90) when its pointers and ints are 16-byte
    aligned, except the arguments named in ``unaligned`` (ints that are not multiples of 16: Triton then knows
    nothing of their divisibility); ``num_ctas``: programs per cluster. Run it in a process that imported
    softmax_lab as for a GPU (``_in_fresh_process`` shows how)."""
    import triton
    from triton.backends.compiler import GPUTarget
    from triton.compiler import ASTSource
    from triton.experimental.gluon._runtime import GluonASTSource, GluonJITFunction

    # Every constexpr with a default is passed too: Triton's cache key for a compile like this one lists the
    # constexprs' values without their names, so DSMEM=True and ONLINE=True (each with the other left out) would
    # share one key, and the second compile would get the first's kernel.
    constexprs = dict(constexprs)
    for p in kernel.params:
        if p.is_constexpr and p.name not in constexprs and p.default is not inspect.Parameter.empty:
            constexprs[p.name] = p.default
    signature = {p.name: signature.get(p.name, "constexpr") for p in kernel.params
                 if p.name in signature or p.name in constexprs}
    aligned = {(p.num,): [["tt.divisibility", 16]] for p in kernel.params
               if signature.get(p.name, "constexpr") != "constexpr" and p.name not in unaligned}
    source = GluonASTSource if isinstance(kernel, GluonJITFunction) else ASTSource  # (Gluon kernels too)
    src = source(fn=kernel, signature=signature, constexprs=constexprs, attrs=aligned)
    return triton.compile(src, target=GPUTarget("cuda", 90, 32), options=dict(num_warps=num_warps, num_ctas=num_ctas))


def ptx_counts(compiled) -> dict:
    """The PTX divisions and exps of a compiled kernel (the exps with and without flushing denormals)."""
    ops = [line.split()[0] for line in compiled.asm["ptx"].splitlines() if line.strip().startswith(("div", "ex2"))]
    return {"ptx div": sum(op.startswith("div") for op in ops),
            "ptx ex2 (keeps denormals)": sum(op == "ex2.approx.f32" for op in ops),
            "ptx ex2.ftz": sum(op == "ex2.approx.ftz.f32" for op in ops)}


def sass_ops(compiled) -> tuple[Counter, int]:
    """The SASS instructions of a compiled kernel, by full name (``LDGSTS.E.BYPASS.128``), and its registers
    per thread (``cuobjdump -sass`` and ``-res-usage``, from Triton's wheel)."""
    import triton

    tool = Path(triton.__file__).parent / "backends" / "nvidia" / "bin" / "cuobjdump"
    with tempfile.TemporaryDirectory() as tmp:
        cubin = Path(tmp) / "kernel.cubin"
        cubin.write_bytes(compiled.asm["cubin"])
        sass = subprocess.run([str(tool), "-sass", str(cubin)], capture_output=True, text=True).stdout
        usage = subprocess.run([str(tool), "-res-usage", str(cubin)], capture_output=True, text=True).stdout
    ops = Counter(re.findall(r"/\*[0-9a-f]{4,}\*/\s+(?:@!?U?P\w+\s+)?([A-Z0-9_]+(?:\.[A-Z0-9_]+)*)", sass))
    return ops, int(re.search(r"REG:(\d+)", usage).group(1))


def _sass_counts(compiled) -> dict:
    full, registers = sass_ops(compiled)
    ops = Counter()
    for name, n in full.items():
        ops[name.split(".")[0]] += n
    return {"total": sum(ops.values()), "FMUL": ops["FMUL"], "FADD": ops["FADD"], "MUFU": ops["MUFU"],
            "LDG": ops["LDG"], "STG": ops["STG"], "registers": registers, **ptx_counts(compiled)}


def _counts() -> dict:
    import triton
    import triton.language as tl

    from softmax_lab.kernels.fused import fused_softmax_kernel

    @triton.jit
    def first_fused_kernel(out_ptr, in_ptr, in_row_stride, out_row_stride, n_cols, BLOCK: tl.constexpr):
        row = tl.program_id(0).to(tl.int64)
        cols = tl.arange(0, BLOCK)
        mask = cols < n_cols
        x = tl.load(in_ptr + row * in_row_stride + cols, mask=mask, other=float("-inf")).to(tl.float32)
        x = x - tl.max(x, axis=0)
        num = tl.exp(x)
        y = num / tl.sum(num, axis=0)
        tl.store(out_ptr + row * out_row_stride + cols, y.to(out_ptr.dtype.element_ty), mask=mask)

    dt = SHAPE["dtype"]
    sig = {"out_ptr": f"*{dt}", "in_ptr": f"*{dt}", "in_row_stride": "i32", "out_row_stride": "i32",
           "n_cols": "i32", "BLOCK": "constexpr"}
    block = {"BLOCK": SHAPE["BLOCK"]}
    versions = (("tl.exp, / per element", first_fused_kernel, sig, block),  # (VEC=1: ints in elements)
                ("fast_exp, one division", fused_softmax_kernel, {**sig, "VEC": "constexpr"}, {**block, "VEC": 1}))
    return {name: _sass_counts(compile_for_h200(kernel, s, c, SHAPE["num_warps"])) for name, kernel, s, c in versions}


if __name__ == "__main__":  # counts | widths KERNEL...
    import torch

    torch.cuda.is_available = lambda: True  # compile as for a GPU (nothing is launched)
    print(json.dumps(_widths(sys.argv[2:]) if sys.argv[1] == "widths" else _counts()))
