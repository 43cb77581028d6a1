"""The cluster's partials exchanged through distributed shared memory, for the clustered sweeps
(``clustered_costs.py``, ``clustered_backward.py``).

``kernels/clustered.py`` exchanges each program's partial through global memory: store, cluster barrier, load
from L2. A Hopper GPU can instead store straight into a partner's shared memory (``mapa`` gives the address of a
shared variable in another program of the cluster, ``st.shared::cluster`` writes there), which is how QuACK
combines its partials. Triton 3.6's Gluon has no operation for it, so these helpers write the PTX themselves:
each program's thread t < PARTS stores the program's partial into program t's slot for it; after the cluster
barrier every program reads the PARTS slots from its own shared memory. The slots are a static ``.shared``
array declared in the assembly, beside the memory Triton allocates.

A program may write into a partner's shared memory only once the partner runs: every thread calls
``cluster_arrive`` (relaxed: it does not wait) once, early in the kernel (both kernels: once their copies are
issued), and the exchange waits on it before its stores; so a kernel exchanges once, after exactly one arrive. No
program touches another's memory after the exchange's barrier, so none leaves while a partner still writes to it.
(The slots are static shared memory, which Triton does not count: 8 bytes a program at most, beside slices that are
whole multiples of 512 bytes.)
"""
from triton.experimental import gluon
from triton.experimental.gluon import language as gl
from triton.runtime.jit import constexpr_function

LOG2E_HEX = "0f3FB8AA3B"  # 1.4426950408889634 as a PTX float


@gluon.jit
def cluster_arrive():
    """This thread arrives at the cluster barrier without waiting (the exchange waits later)."""
    gl.inline_asm_elementwise("barrier.cluster.arrive.relaxed.aligned;\nmov.u32 $0, 0;", "=r", [], dtype=gl.int32,
                              is_pure=False, pack=1)


@constexpr_function
def _store_mine(parts: int, words: int, values: str) -> str:
    """PTX: wait for the partners to run, then thread t < parts stores this program's ``words`` floats into
    program t's slot for this program; then the barrier that makes every slot seen."""
    return f"""
    .reg .pred %p;
    .reg .b32 %xrank, %xtid, %a, %ra;
    .shared .align 16 .b32 slots[{parts * words}];
    mov.u32 %xrank, %cluster_ctarank;
    mov.u32 %xtid, %tid.x;
    barrier.cluster.wait.aligned;
    setp.lt.u32 %p, %xtid, {parts};
    mov.u32 %a, slots;
    mad.lo.u32 %a, %xrank, {4 * words}, %a;
    @%p mapa.shared::cluster.u32 %ra, %a, %xtid;
    @%p st.shared::cluster.{'v2.' if words == 2 else ''}f32 [%ra], {values};
    barrier.cluster.arrive.release.aligned;
    barrier.cluster.wait.acquire.aligned;"""


@constexpr_function
def max_sum_asm(parts, scaled=False):
    """$0 = the row's max, $1 = 1 / the row's sum of exp(x - max), from each program's ($2, $3) = (max, sum of
    exp(x - max)) of its slice (the rule of ``combine.py``); ``scaled``: the maxes are times log2 e already."""
    loads = "\n".join(f"    ld.shared.v2.f32 {{%m{i}, %l{i}}}, [slots+{8 * i}];" for i in range(parts))
    maxes = "\n".join(f"    max.f32 $0, $0, %m{i};" for i in range(1, parts))
    to_log2 = "" if scaled else f"\n    mul.f32 %t, %t, {LOG2E_HEX};"
    sums = "\n".join(f"    sub.f32 %t, %m{i}, $0;{to_log2}\n    ex2.approx.f32 %t, %t;\n"
                     f"    fma.rn.f32 %s, %l{i}, %t, %s;" for i in range(parts))
    return gl.constexpr(f"""{{
    .reg .f32 %m<{parts}>, %l<{parts}>, %t, %s;{_store_mine(parts, 2, "{$2, $3}")}
{loads}
    mov.f32 $0, %m0;
{maxes}
    mov.f32 %s, 0f00000000;
{sums}
    rcp.rn.f32 $1, %s;
}}""")


@constexpr_function
def sum_asm(parts):
    """$0 = the sum over the cluster of each program's $1."""
    adds = "\n".join(f"    ld.shared.f32 %t, [slots+{4 * i}];\n    add.f32 $0, $0, %t;" for i in range(1, parts))
    return gl.constexpr(f"""{{
    .reg .f32 %t;{_store_mine(parts, 1, "$1")}
    ld.shared.f32 $0, [slots];
{adds}
}}""")


@gluon.jit
def exchange_max_sum(m_part, l_part, PARTS: gl.constexpr, SCALED: gl.constexpr = False):
    """(the row's max, 1 / its sum) from each program's (max, sum) of its slice (``SCALED``: maxes times log2 e)."""
    return gl.inline_asm_elementwise(max_sum_asm(PARTS, SCALED), "=f,=f,f,f", [m_part, l_part],
                                     dtype=(gl.float32, gl.float32), is_pure=False, pack=1)


@gluon.jit
def exchange_sum(part, PARTS: gl.constexpr):
    """The sum of every program's ``part``."""
    return gl.inline_asm_elementwise(sum_asm(PARTS), "=f,f", [part], dtype=gl.float32, is_pure=False, pack=1)
