"""The online softmax state ``(m, l)`` of each thread, folded chunk by chunk as a row lands in shared memory.

The shared-memory kernels (``resident.py``, ``unaligned_resident.py``, ``clustered.py``) copy a whole row in and
then read it back: once for the max, once for the sum of exp(x - max), once to store. With ``ONLINE`` they take
the max *and* the sum in the first read, as each chunk lands, while the rest of the row is still on its way, so
the sum's pass goes away. Each thread keeps one state per 16-byte vector it copies in a chunk (the rule of
``combine.py``): a chunk's vector of VEC values moves that state's max to m' = max(m, max of the vector), and

    l' = l·exp(m - m') + Σ exp(x - m')

one exp per value and one per vector (VEC = 4 to 8 values), where the passes take one per value.
(Gluon kernels cannot call ``combine.py``'s ``@triton.jit`` helpers, so the rule is written here again.)

Every exp of the passes after the max is ``exp_minus(x, m)``, exp(x - m) as 2**((x - m)·log2 e): the difference
first, then the scaling, so rows of huge finite values are right (past 2.36e38, m·log2 e overflows to inf) and each
exponent is rounded relative to the small difference, not to a large max; the store pass's ``exp_minus_times``
takes the scaling by 1 / sum into the same fused multiply-add, as log2 of it.

The fold takes one fused multiply-add an element, 2**(x·log2 e - s) with s = m·log2 e rounded (the difference
first would cost an instruction more an element: 0.5-1.7 points of copy on 16-bit rows, docs/performance.md,
round 12). Each product x·log2 e is exact inside the multiply-add, so each exponent is off from (x - m)·log2 e by
the same m·log2 e - s, and ``finish`` takes it out of the sum (``fma`` gives it exactly). That is right while s is
within a few units of m·log2 e: while each thread's max stays within 2**24 of 0, all along the row. ``finish``
says whether the row is *far*: a thread's last max beyond that, or a sum that is not a finite number (a thread
whose max was far, -1e10 say, and rose later: its exps overflowed to inf, then inf·0). There the kernel takes the
sum again in a pass of its own with ``exp_minus``. Every exp is the bare ``MUFU.EX2`` (its ``.ftz`` form, as
``fast_exp.py``): results below 2**-126 (1.2e-38) come out 0 where torch gives a subnormal, an absolute error under
1.2e-38. (The store pass rounds (x - m)·log2 e + log2(1/sum) once, at the ulp of log2 of the sum: on fp32 rows of
tens of thousands of nearly equal values, up to ~6e-7 relative, where the product form was under 1e-7.)
"""
from triton.experimental import gluon
from triton.experimental.gluon import language as gl
from triton.runtime.jit import constexpr_function

LOG2E = gl.constexpr(1.4426950408889634)


FAR = gl.constexpr(16777216.0)  # 2**24: up to here m·log2 e rounded is within a unit of it


@gluon.jit
def _ex2(z):
    return gl.inline_asm_elementwise("ex2.approx.ftz.f32 $0, $1;", "=f,f", [z], dtype=gl.float32, is_pure=True,
                                     pack=1)


@gluon.jit
def exp_minus(x, m):
    """exp(x - m) (floats; results below ~1e-38 flush to 0)."""
    return _ex2((x - m) * LOG2E)


@gluon.jit
def exp_minus_times(x, m, log2_scale):
    """exp(x - m)·scale, given log2(scale): 2**((x - m)·log2 e + log2(scale)), one fused multiply-add."""
    return _ex2(gl.fma(x - m, LOG2E, log2_scale))


@gluon.jit
def scaled(m):
    """m·log2 e rounded (``mul.rn``: never fused into a later add, so every use sees the same rounding)."""
    return gl.inline_asm_elementwise("mul.rn.f32 $0, $1, 0f3FB8AA3B;", "=f,f", [m], dtype=gl.float32, is_pure=True,
                                     pack=1)


@gluon.jit
def shift_of(s):
    """What the exps subtract: s, or 0 where s is -inf (a state of -inf only, or below -2.36e38: l is 0)."""
    return gl.where(s == float("-inf"), 0.0, s)


@constexpr_function
def vector_layout(vec, num_warps):
    """``[vectors, VEC]``: one 16-byte vector a thread, as the 1-D ``BlockedLayout([VEC], [32], [num_warps])``."""
    return gl.BlockedLayout([1, vec], [32, 1], [num_warps, 1], [1, 0])


@gluon.jit
def fold(m, l, x, VEC: gl.constexpr):
    """Each thread's state ``(m, l)`` (``[vectors]``) with its vector of ``x`` (1-D, -inf outside the row) added;
    l is kept against ``scaled(m)``."""
    xv = gl.convert_layout(gl.reshape(x, [x.shape[0] // VEC, VEC]), vector_layout(VEC, gl.num_warps()))
    m_new = gl.maximum(m, gl.max(xv, axis=1))
    shift = shift_of(scaled(m_new))
    return m_new, l * _ex2(scaled(m) - shift) + gl.sum(_ex2(gl.fma(xv, LOG2E, -shift[:, None])), axis=1)


@gluon.jit
def start(CHUNK: gl.constexpr, VEC: gl.constexpr):
    """The empty state: m = -inf, l = 0 for each thread."""
    layout: gl.constexpr = gl.SliceLayout(1, vector_layout(VEC, gl.num_warps()))
    return (gl.full([CHUNK // VEC], float("-inf"), gl.float32, layout),
            gl.zeros([CHUNK // VEC], gl.float32, layout))


@gluon.jit
def finish(m, l):
    """The row's max, its sum of exp(x - max) from its threads' states, and whether it is far (see above)."""
    m_row = gl.max(m, axis=0)
    shift = shift_of(scaled(m_row))
    total = gl.sum(l * _ex2(scaled(m) - shift), axis=0)
    off = gl.fma(shift_of(m_row), LOG2E, -shift)  # m_row·log2 e - shift, exactly
    total = total * _ex2(-off)
    far = (gl.max(gl.abs(shift_of(m)), axis=0) > FAR) | (total != total) | (total == float("inf"))
    return m_row, total, far


# The same for clustered.py's ``[PARTS, CHUNK]`` tensors (row p of them in program p of the cluster): the
# states are ``[PARTS, vectors]``, and ``finish_parts`` gives each program's ``[PARTS]``. Their fold takes each exp
# from x - max (``exp_minus``): a program holds its own slice of those tensors only, and Triton 3.6 cannot reduce
# across a cluster, so no program could take a far test's branch.
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

