"""``fast_exp(z)``: exp in two GPU instructions instead of five.

``tl.exp(z)`` becomes ``ex2.approx.f32`` of ``z·log2(e)``, and that PTX instruction keeps denormal results: in
the machine code it is one ``MUFU.EX2`` plus a compare and two multiplies to scale tiny values in and out of
range. Its ``.ftz`` form ("flush to zero") is the bare ``MUFU.EX2``: results below 2**-126 (~1e-38) become 0,
which no softmax output can tell (they are far below float32's tolerance and 16-bit outputs' smallest value).

Why it matters: with one program per multiprocessor on a long 16-bit row, the plain kernel's arithmetic (exp
with its fix-ups, a division per element) takes a sizeable part of the row's memory time in instruction issue,
on top of it (count them with ``cuobjdump -sass`` or ``softmax_lab.machine_code``). Divide once (``1 / total``)
and use this exp, and the arithmetic hides behind the memory traffic (``docs/performance.md``).

The CPU interpreter has no PTX: there it is ``tl.exp`` itself, so CPU results are unchanged. ``memcount`` runs
kernels through the interpreter on a GPU machine too: while it counts, it sets ``PTX`` to False.
"""
import triton
import triton.language as tl

from ..device import ON_GPU

PTX = tl.constexpr(ON_GPU)  # read when a kernel is compiled: inline PTX only where there is PTX
LOG2_E = tl.constexpr(1.4426950408889634)


@triton.jit
def fast_exp(z):
    """exp(z) for float32 ``z`` (results below ~1e-38 flush to 0 on the GPU)."""
    if PTX:
        return tl.inline_asm_elementwise("ex2.approx.ftz.f32 $0, $1;", "=f,f", [z * LOG2_E], dtype=tl.float32,
                                         is_pure=True, pack=1)
    return tl.exp(z)
