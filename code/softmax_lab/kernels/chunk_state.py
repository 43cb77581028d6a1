"""The online softmax state ``(m, l)`` of each thread, folded chunk by chunk as a row lands in shared memory.

The shared-memory kernels (``resident.py``, ``unaligned_resident.py``, ``clustered.py``) copy a whole row in and
then read it back: once for the max, once for the sum of exp(x - max), once to store. With ``ONLINE`` they take
the max *and* the sum in the first read, as each chunk lands, while the rest of the row is still on its way, so
the sum's pass goes away. Each thread keeps one state for its 16-byte vectors (the rule of ``combine.py``):
a chunk's vector of VEC values moves the thread's max to m' = max(m, max of the vector), and

    l' = l·exp(m - m') + Σ exp(x - m')

one exp per value and one per vector (VEC = 4 to 8 values), where the passes take one per value.
(Gluon kernels cannot call ``combine.py``'s ``@triton.jit`` helpers, so the rule is written here again.)
"""
from triton.experimental import gluon
from triton.experimental.gluon import language as gl
from triton.runtime.jit import constexpr_function

LOG2E = gl.constexpr(1.4426950408889634)


@constexpr_function
def vector_layout(vec, num_warps):
    """``[vectors, VEC]``: one 16-byte vector a thread, as the 1-D ``BlockedLayout([VEC], [32], [num_warps])``."""
    return gl.BlockedLayout([1, vec], [32, 1], [num_warps, 1], [1, 0])


@gluon.jit
def fold(m, l, x, VEC: gl.constexpr):
    """Each thread's state ``(m, l)`` (``[vectors]``) with its vector of ``x`` (1-D, -inf outside the row) added."""
    xv = gl.convert_layout(gl.reshape(x, [x.shape[0] // VEC, VEC]), vector_layout(VEC, gl.num_warps()))
    m_new = gl.maximum(m, gl.max(xv, axis=1))
    shift = gl.where(m_new == float("-inf"), 0.0, m_new) * LOG2E  # (all -inf so far: l stays 0)
    return m_new, l * gl.exp2(m * LOG2E - shift) + gl.sum(gl.exp2(xv * LOG2E - shift[:, None]), axis=1)


@gluon.jit
def start(CHUNK: gl.constexpr, VEC: gl.constexpr):
    """The empty state: m = -inf, l = 0 for each thread."""
    layout: gl.constexpr = gl.SliceLayout(1, vector_layout(VEC, gl.num_warps()))
    return (gl.full([CHUNK // VEC], float("-inf"), gl.float32, layout),
            gl.zeros([CHUNK // VEC], gl.float32, layout))


@gluon.jit
def finish(m, l):
    """The block's state from its threads': (max, sum rescaled to it)."""
    m_all = gl.max(m, axis=0)
    shift = gl.where(m_all == float("-inf"), 0.0, m_all) * LOG2E
    return m_all, gl.sum(l * gl.exp2(m * LOG2E - shift), axis=0)


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
    shift = gl.where(m_new == float("-inf"), 0.0, m_new) * LOG2E
    return m_new, l * gl.exp2(m * LOG2E - shift) + gl.sum(gl.exp2(xv * LOG2E - shift[:, :, None]), axis=2)


@gluon.jit
def finish_parts(m, l, layout: gl.constexpr):
    m_all = gl.max(m, axis=1)
    shift = gl.where(m_all == float("-inf"), 0.0, m_all) * LOG2E
    l_all = gl.sum(l * gl.exp2(m * LOG2E - shift[:, None]), axis=1)
    return gl.convert_layout(m_all, layout), gl.convert_layout(l_all, layout)
