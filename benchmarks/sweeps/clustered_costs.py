"""Where the clustered kernel's time goes (``kernels/clustered.py``): the same kernel with parts of its work taken
out, beside QuACK, on the LM widths where it runs at 83-86% of copy and QuACK at 96. GPU machine (sm_90),
repository root, QuACK importable for its line (``benchmarks/bench_with_peers.sh`` shows how):

    PYTHONPATH=code python3 benchmarks/sweeps/clustered_costs.py OUT.json

``MODE`` (a constexpr) takes work out; only ``full`` computes the softmax, the rest are timed to see what the
missing work cost (their records say the check failed, which is expected):

* ``full``: the library kernel's steps as of round 8 (copy in, max pass, sum pass, partials through global memory
  and the cluster barrier, store pass; its maxes unscaled, as the library's are again since round 12;
  rounds 10-11 kept them times log2 e);
* ``local``: no exchange: each program scales its slice by its own max and sum (no global partials, no barrier);
* ``barrier``: copy in, the exchange (partials, barrier, partials back), the store pass: no max or sum passes;
* ``copy``: copy in, wait, store each chunk from shared memory as it is (no passes, no exchange);
* ``dsmem``: ``full`` with the partials exchanged through the partners' shared memory instead of global memory
  (``cluster_exchange.py``), as QuACK exchanges them: a softmax, checked like ``full``.

Each runs with the dispatcher's knobs for the shape and with QuACK's shape of launch (8 programs of 8 warps at
128,256; 4 of 8 at 65,536), at 1024 rows and at 4096 (a longer run: less of it is the last wave); and
``full``, ``local`` and ``dsmem`` at 512×151936 fp32, where the cooperative kernel runs today (88%).

Its run: ``benchmarks/records/h200-clustered-costs-round8.json``; what it showed: docs/performance.md, round 8.
"""
import sys

import torch
from triton.experimental import gluon
from triton.experimental.gluon import language as gl
from triton.experimental.gluon.language.nvidia.ampere import async_copy as cp

from softmax_lab import bench
from softmax_lab.kernels._launch import cdiv, row_vector
from softmax_lab.kernels.clustered import cluster_barrier, shared_layout, slices, split_layout, whole_cluster_layout
from softmax_lab.kernels.cluster_exchange import cluster_arrive, exchange_max_sum

MODES = {"full": 0, "local": 1, "barrier": 2, "copy": 3, "dsmem": 4}
LOG2E = gl.constexpr(1.4426950408889634)


@gluon.jit
def costs_kernel(out_ptr, in_ptr, partial_ptr, n_cols, n_cols_v, in_stride_v, out_stride_v,
                 SLICE: gl.constexpr, CHUNK: gl.constexpr, PARTS: gl.constexpr, OUT_VEC: gl.constexpr,
                 MODE: gl.constexpr):
    VEC: gl.constexpr = 128 // in_ptr.dtype.element_ty.primitive_bitwidth
    N: gl.constexpr = SLICE // CHUNK
    layout: gl.constexpr = split_layout(VEC, gl.num_warps(), PARTS)
    row_smem = gl.allocate_shared_memory(in_ptr.dtype.element_ty, [N, PARTS, CHUNK], shared_layout(PARTS))
    row = gl.program_id(0).to(gl.int64)
    part = gl.arange(0, PARTS, layout=gl.SliceLayout(1, layout))
    cols = part[:, None] * SLICE + gl.arange(0, CHUNK, layout=gl.SliceLayout(0, layout))[None, :]
    src = in_ptr + row * (in_stride_v * VEC)
    for c in gl.static_range(N):
        cp.async_copy_global_to_shared(row_smem.index(c), src + c * CHUNK + cols,
                                       mask=c * CHUNK + cols < n_cols_v * VEC)
        cp.commit_group()
    if MODE == 4:
        cluster_arrive()
    m_part = gl.zeros([PARTS], gl.float32, gl.SliceLayout(1, layout))
    l_part = gl.full([PARTS], 1.0, gl.float32, gl.SliceLayout(1, layout))
    if MODE <= 1 or MODE == 4:
        m = gl.full([PARTS, CHUNK], float("-inf"), gl.float32, layout)
        for c in gl.static_range(N):
            cp.wait_group(N - 1 - c)
            x = row_smem.index(c).load(layout).to(gl.float32)
            m = gl.maximum(m, gl.where(c * CHUNK + cols < n_cols, x, float("-inf")))
        m_part = gl.max(m, axis=1)
        shift = gl.where(m_part == float("-inf"), 0.0, m_part) * LOG2E
        total = gl.zeros([PARTS, CHUNK], gl.float32, layout)
        for c in range(N):
            x = row_smem.index(c).load(layout).to(gl.float32)
            total += gl.where(c * CHUNK + cols < n_cols, gl.exp2(x * LOG2E - shift[:, None]), 0.0)
        l_part = gl.sum(total, axis=1)
    else:
        cp.wait_group(0)
    dst = out_ptr + row * (out_stride_v * OUT_VEC)
    end = n_cols_v * VEC if OUT_VEC == VEC else n_cols
    if MODE == 3:
        gl.thread_barrier()
        for c in range(N):
            x = row_smem.index(c).load(layout)
            gl.store(dst + c * CHUNK + cols, x.to(out_ptr.dtype.element_ty), mask=c * CHUNK + cols < end)
    else:
        if MODE == 1:
            m_row = m_part[:, None]
            scale = (1.0 / l_part)[:, None]
        elif MODE == 4:
            m_all, r_all = exchange_max_sum(m_part, l_part, PARTS)
            m_row = m_all[:, None]
            scale = r_all[:, None]
        else:
            mine = partial_ptr + row * (2 * PARTS) + part * 2
            gl.store(mine, m_part)
            gl.store(mine + 1, l_part)
            cluster_barrier()
            every = gl.arange(0, PARTS, layout=whole_cluster_layout(gl.num_warps(), PARTS))
            theirs = partial_ptr + row * (2 * PARTS) + every * 2
            m_all = gl.load(theirs, volatile=True)
            l_all = gl.load(theirs + 1, volatile=True)
            m_max = gl.max(m_all, axis=0)
            m_row = m_max
            scale = 1.0 / gl.sum(l_all * gl.exp2((m_all - m_max) * LOG2E), axis=0)
        for c in range(N):
            x = row_smem.index(c).load(layout).to(gl.float32)
            y = gl.exp2(x * LOG2E - m_row * LOG2E) * scale
            gl.store(dst + c * CHUNK + cols, y.to(out_ptr.dtype.element_ty), mask=c * CHUNK + cols < end)


def costs_softmax(x, out=None, mode="full", parts=None, num_warps=None, vectors=None):
    n_rows, n_cols = x.shape
    y = torch.empty_like(x) if out is None else out
    vec = 16 // x.element_size()
    o = slices(n_cols, x.element_size(), parts, num_warps, vectors)
    o["OUT_VEC"] = out_vec = row_vector(n_cols, y)
    partials = torch.empty(n_rows * 2 * o["PARTS"], dtype=torch.float32, device=x.device)
    costs_kernel[(n_rows,)](y, x, partials, n_cols, cdiv(n_cols, vec), x.stride(0) // vec, y.stride(0) // out_vec,
                            MODE=MODES[mode], **o)
    return y


def main(path):
    bf16 = torch.bfloat16
    knobs = {65536: [dict(parts=4, num_warps=4, vectors=2), dict(parts=4, num_warps=8, vectors=1)],
             128256: [dict(parts=8, num_warps=2, vectors=1), dict(parts=8, num_warps=8, vectors=1)]}
    cases = []
    for n_cols, settings in knobs.items():
        for n_rows in (1024, 4096):
            cands = bench.peer_candidates()
            for k in settings:
                for mode in MODES:
                    cands.append((f"costs {mode}", lambda x, out, k=k, mode=mode: costs_softmax(x, out, mode, **k),
                                  dict(k, mode=mode)))
            cases.append((n_rows, n_cols, bf16, cands))
    cands = bench.peer_candidates()  # fp32 rows of the Qwen vocabulary, where the cooperative kernel runs today
    for k in (dict(parts=16, num_warps=4, vectors=1), dict(parts=8, num_warps=8, vectors=1)):
        for mode in ("full", "local", "dsmem"):
            cands.append((f"costs {mode}", lambda x, out, k=k, mode=mode: costs_softmax(x, out, mode, **k),
                          dict(k, mode=mode)))
    cases.append((512, 151936, torch.float32, cands))
    bench.sweep(path, cases, "PYTHONPATH=code python3 benchmarks/sweeps/clustered_costs.py OUT.json")


if __name__ == "__main__":
    main(sys.argv[1])
