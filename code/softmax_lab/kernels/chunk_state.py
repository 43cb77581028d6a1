"""The online softmax state ``(m, l)`` of each thread, folded chunk by chunk as a row lands in shared memory.

The shared-memory kernels (``resident.py``, ``unaligned_resident.py``, ``clustered.py``) copy a whole row in and
then read it back: once for the max, once for the sum of exp(x - max), once to store. With ``ONLINE`` they take
the max *and* the sum in the first read, as each chunk lands, while the rest of the row is still on its way, so
the sum's pass goes away. Each thread keeps one state per 16-byte vector it copies in a chunk (the rule of
``combine.py``): a chunk's vector of VEC values moves that state's max to m' = max(m, max of the vector), and

    l' = l·exp(m - m') + Σ exp(x - m')

one exp per value and one per vector (VEC = 4 to 8 values), where the passes take one per value.
(Gluon kernels cannot call ``combine.py``'s ``@triton.jit`` helpers, so the rule is written here again.)

The kernels take exp(x - m) as exp2(x·log2 e - m·log2 e), one fused multiply-add, so the state keeps the max
*scaled*, ``s = m·log2 e`` (rounded once, as the store pass rounds it): a thread's sum relative to its own ``s``,
moved to the row's by exp2(s - s_row), then matches the store pass's exp2(x·log2 e - s_row) to a few ulps. (Kept
unscaled, each thread's rounding of m·log2 e differed from the row's: values near -1000 came out 1e-5 off in fp32.)
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
def fold(s, l, x, VEC: gl.constexpr):
    """Each thread's state ``(s, l)`` (``[vectors]``) with its vector of ``x`` (1-D, -inf outside the row) added."""
    xv = gl.convert_layout(gl.reshape(x, [x.shape[0] // VEC, VEC]), vector_layout(VEC, gl.num_warps()))
    s_new = gl.maximum(s, gl.max(xv, axis=1) * LOG2E)
    shift = gl.where(s_new == float("-inf"), 0.0, s_new)  # (all -inf so far: l stays 0)
    return s_new, l * gl.exp2(s - shift) + gl.sum(gl.exp2(xv * LOG2E - shift[:, None]), axis=1)


@gluon.jit
def start(CHUNK: gl.constexpr, VEC: gl.constexpr):
    """The empty state: s = -inf, l = 0 for each thread."""
    layout: gl.constexpr = gl.SliceLayout(1, vector_layout(VEC, gl.num_warps()))
    return (gl.full([CHUNK // VEC], float("-inf"), gl.float32, layout),
            gl.zeros([CHUNK // VEC], gl.float32, layout))


@gluon.jit
def finish(s, l):
    """The row's scaled max and 1 / its sum (what the store pass needs), from its threads' states."""
    s_all = gl.max(s, axis=0)
    return s_all, 1.0 / gl.sum(l * gl.exp2(s - gl.where(s_all == float("-inf"), 0.0, s_all)), axis=0)


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
def fold_parts(s, l, x, VEC: gl.constexpr):
    PARTS: gl.constexpr = x.shape[0]
    xv = gl.convert_layout(gl.reshape(x, [PARTS, x.shape[1] // VEC, VEC]),
                           parts_vector_layout(VEC, gl.num_warps(), PARTS))
    s_new = gl.maximum(s, gl.max(xv, axis=2) * LOG2E)
    shift = gl.where(s_new == float("-inf"), 0.0, s_new)
    return s_new, l * gl.exp2(s - shift) + gl.sum(gl.exp2(xv * LOG2E - shift[:, :, None]), axis=2)


@gluon.jit
def finish_parts(s, l, layout: gl.constexpr):
    """Each program's (scaled max, sum) of its slice, ``[PARTS]`` in ``layout``."""
    s_all = gl.max(s, axis=1)
    l_all = gl.sum(l * gl.exp2(s - gl.where(s_all == float("-inf"), 0.0, s_all)[:, None]), axis=1)
    return gl.convert_layout(s_all, layout), gl.convert_layout(l_all, layout)

