"""The online softmax state ``(m, l)`` of each thread, folded chunk by chunk as a row lands in shared memory.

The shared-memory kernels (``resident.py``, ``unaligned_resident.py``, ``clustered.py``) copy a whole row in and
then read it back: once for the max, once for the sum of exp(x - max), once to store. With ``ONLINE`` they take
the max *and* the sum in the first read, as each chunk lands, while the rest of the row is still on its way, so
the sum's pass goes away. Each thread keeps one state per 16-byte vector it copies in a chunk (the rule of
``combine.py``): a chunk's vector of VEC values moves that state's max to m' = max(m, max of the vector), and

    l' = l·exp(m - m') + Σ exp(x - m')

one exp per value and one per vector (VEC = 4 to 8 values), where the passes take one per value.
(Gluon kernels cannot call ``combine.py``'s ``@triton.jit`` helpers, so the rule is written here again.)

Every exp of these kernels is ``exp_minus(x, m)``, exp(x - m) as 2**((x - m)·log2 e): the difference first, then
the scaling, so a row of huge finite values (past 2.36e38, where m·log2 e overflows to inf and x·log2 e - m·log2 e
is inf - inf, NaN) is right, and each exponent is rounded relative to the small difference, not to a large max.
That is one instruction more than x·log2 e - m·log2 e (a fused multiply-add); the bare ``MUFU.EX2`` (its ``.ftz``
form, as ``fast_exp.py``) gives back three: results below 2**-126 flush to 0, which no softmax output can tell.
The state keeps m as it is; a thread's sum moves to the row's max by exp_minus(m, m_row).
"""
from triton.experimental import gluon
from triton.experimental.gluon import language as gl
from triton.runtime.jit import constexpr_function

LOG2E = gl.constexpr(1.4426950408889634)


@gluon.jit
def exp_minus(x, m):
    """exp(x - m) (floats; results below ~1e-38 flush to 0)."""
    return gl.inline_asm_elementwise("ex2.approx.ftz.f32 $0, $1;", "=f,f", [(x - m) * LOG2E], dtype=gl.float32,
                                     is_pure=True, pack=1)


@constexpr_function
def vector_layout(vec, num_warps):
    """``[vectors, VEC]``: one 16-byte vector a thread, as the 1-D ``BlockedLayout([VEC], [32], [num_warps])``."""
    return gl.BlockedLayout([1, vec], [32, 1], [num_warps, 1], [1, 0])


@gluon.jit
def fold(m, l, x, VEC: gl.constexpr):
    """Each thread's state ``(m, l)`` (``[vectors]``) with its vector of ``x`` (1-D, -inf outside the row) added."""
    xv = gl.convert_layout(gl.reshape(x, [x.shape[0] // VEC, VEC]), vector_layout(VEC, gl.num_warps()))
    m_new = gl.maximum(m, gl.max(xv, axis=1))
    shift = gl.where(m_new == float("-inf"), 0.0, m_new)  # (all -inf so far: l stays 0)
    return m_new, l * exp_minus(m, shift) + gl.sum(exp_minus(xv, shift[:, None]), axis=1)


@gluon.jit
def start(CHUNK: gl.constexpr, VEC: gl.constexpr):
    """The empty state: m = -inf, l = 0 for each thread."""
    layout: gl.constexpr = gl.SliceLayout(1, vector_layout(VEC, gl.num_warps()))
    return (gl.full([CHUNK // VEC], float("-inf"), gl.float32, layout),
            gl.zeros([CHUNK // VEC], gl.float32, layout))


@gluon.jit
def finish(m, l):
    """The row's max and 1 / its sum (what the store pass needs), from its threads' states."""
    m_all = gl.max(m, axis=0)
    return m_all, 1.0 / gl.sum(l * exp_minus(m, gl.where(m_all == float("-inf"), 0.0, m_all)), axis=0)


# The same for clustered.py's ``[PARTS, CHUNK]`` tensors (row p of them in program p of the cluster): the
# states are ``[PARTS, vectors]``, and ``finish_parts`` gives each program's ``[PARTS]``.
@constexpr_function
def parts_vector_layout(vec, num_warps, parts):
    cluster = [[1 << i, 0, 0] for i in range(parts.bit_length() - 1)]
    return gl.BlockedLayout([1, 1, vec], [1, 32, 1], [1, num_warps, 1], [2, 1, 0], cluster)


@gluon.jit
def start_parts(PARTS: gl.constexpr, CHUNK: gl.constexpr, VEC: gl.constexpr):
    layout: gl.constexpr = gl.SliceLayout(2, parts_vector_layout(VEC, gl.num_warps(), PARTS))
    return (gl.full([PARTS, CHUNK // VEC], float("-inf"), gl.float32, layout),
            gl.zeros([PARTS, CHUNK // VEC], gl.float32, layout))


@gluon.jit
def fold_parts(m, l, x, VEC: gl.constexpr):
    PARTS: gl.constexpr = x.shape[0]
    xv = gl.convert_layout(gl.reshape(x, [PARTS, x.shape[1] // VEC, VEC]),
                           parts_vector_layout(VEC, gl.num_warps(), PARTS))
    m_new = gl.maximum(m, gl.max(xv, axis=2))
    shift = gl.where(m_new == float("-inf"), 0.0, m_new)
    return m_new, l * exp_minus(m, shift) + gl.sum(exp_minus(xv, shift[:, :, None]), axis=2)


@gluon.jit
def finish_parts(m, l, layout: gl.constexpr):
    """Each program's (max, sum) of its slice, ``[PARTS]`` in ``layout``."""
    m_all = gl.max(m, axis=1)
    l_all = gl.sum(l * exp_minus(m, gl.where(m_all == float("-inf"), 0.0, m_all)[:, None]), axis=1)
    return gl.convert_layout(m_all, layout), gl.convert_layout(l_all, layout)

