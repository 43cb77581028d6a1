"""Exercise ch09-shuffle-tail: ``warp_max``/``warp_sum`` by shuffles (checked on emulated warps) and a block kernel
that ends its tree with them."""
from __future__ import annotations

import math

import numpy as np
import torch

from ...device import DEVICE
from ...testing import randn
from .._pitfalls import Verdict, quiet
from ..common import Report
from ._blocks import NOT_IMPLEMENTED, _cl, _explain_error, _launcher, _not_implemented, _race_cases, _safe_output


def _emulate_warp(vals: np.ndarray, op, mode: str, offsets, combine: bool = True) -> np.ndarray:
    v = vals.astype(np.float64).copy()
    lanes = np.arange(32)
    for off in offsets:
        b = off & 31
        src = {"down": lanes + b, "xor": lanes ^ b, "up": lanes - b}[mode]
        src = np.where((src >= 0) & (src < 32), src, lanes)
        other = v[src]
        v = op(v, other) if combine else other
    return v


def _shuffle_mistake(got0: float, vals: np.ndarray, op, kind: str) -> str:
    named = [
        ("xor", (32, 16, 8, 4, 2, 1), True, "the first step used offset 32, the first step of a 64-lane AMD "
         "wavefront: an NVIDIA warp has 32 lanes, and a shuffle keeps only the offset's low 5 bits, so offset 32 "
         "pairs each lane with itself (a sum doubles) - start at 16"),
        ("down", (32, 16, 8, 4, 2, 1), True, None),
        ("xor", (8, 4, 2, 1), True, "the shuffles started at offset 8, so they combined only 16 of the warp's 32 "
         "lanes - start at 16 (half the warp) and halve down to 1"),
        ("down", (8, 4, 2, 1), True, None),
        ("xor", (4, 2, 1), True, "the shuffles started at offset 4 (8 lanes) - start at 16 and halve down to 1"),
        ("down", (4, 2, 1), True, None),
        ("xor", (16, 8, 4, 2), True, "the last step (offset 1) is missing: each lane combined only every other "
         "lane - halve the offset down to 1"),
        ("down", (16, 8, 4, 2), True, None),
        ("up", (16, 8, 4, 2, 1), True, "shfl_up_sync sends values up to higher lanes, so lane 0 gets nothing: "
         "use shfl_down_sync (result in lane 0) or shfl_xor_sync (result in every lane)"),
        ("down", (16, 8, 4, 2, 1), False, "each step replaced the value by the neighbour's instead of combining "
         "them: v = op(v, shuffle(v, offset))"),
        ("xor", (16, 8, 4, 2, 1), False, None),
    ]
    last = ""
    for mode, offs, comb, text in named:
        last = text or last
        want = _emulate_warp(vals, op, mode, offs, comb)[0]
        if math.isclose(got0, want, rel_tol=1e-5, abs_tol=1e-6) and not math.isclose(
                got0, _emulate_warp(vals, op, "xor", (16, 8, 4, 2, 1))[0], rel_tol=1e-5, abs_tol=1e-6):
            return f"{kind}: {last}"
    return f"{kind}: lane 0 holds the wrong value"


_PROBE_SRC = '''
def probe(vals, out):
    lane = cuda.threadIdx.x
    out[lane] = fn(vals[lane])
'''


def _probe(fn):
    cl = _cl()
    ns = {"cuda": cl.cuda, "fn": fn}
    exec(compile(_PROBE_SRC, "<softmax_lab warp probe>", "exec"), ns)
    return cl.cuda.jit(ns["probe"])


def _run_probe(probe, vals: np.ndarray) -> np.ndarray:
    cl = _cl()
    out = np.full(32, np.nan, dtype=np.float32)
    if cl.SIMULATOR:
        probe[1, 32](vals, out)
        return out
    d_vals, d_out = cl.cuda.to_device(vals), cl.cuda.to_device(out)
    probe[1, 32](d_vals, d_out)
    return d_out.copy_to_host()


def _warp_cases():
    g = np.random.default_rng(93)
    lanes = np.arange(32, dtype=np.float32)
    one = np.full(32, -np.inf, dtype=np.float32)
    one[17] = 2.5
    yield "lanes hold 0, 1, ..., 31", lanes
    yield "random lane values", (g.standard_normal(32) * 3).astype(np.float32)
    yield "largest value in lane 31", (lanes - 40).astype(np.float32)
    yield "all -inf but lane 17 (max only)", one


def _warp_problem(probe, fn_name: str, vals: np.ndarray, op) -> str:
    with quiet():
        got = _run_probe(probe, vals)
        want = _emulate_warp(vals, op, "xor", (16, 8, 4, 2, 1))[0]
    if np.isnan(got[0]):
        return f"{fn_name}: lane 0 got NaN"
    if math.isclose(float(got[0]), float(want), rel_tol=1e-5, abs_tol=1e-5) or got[0] == want:
        return ""
    return _shuffle_mistake(float(got[0]), vals, op, fn_name)


def check_shuffle_tail(warp_max, warp_sum, tail_kernel) -> Verdict:
    """Exercise ch09-shuffle-tail: ``warp_max(v)``/``warp_sum(v)`` (device functions: lane 0 at least gets the
    warp's max/sum) and ``tail_kernel(x, y, n_cols)``, the block kernel whose trees end in them."""
    report = Report("ch09-shuffle-tail")
    if _not_implemented(warp_max, warp_sum):
        report.add("warp_max and warp_sum", NOT_IMPLEMENTED)
        return Verdict(report.show())
    for fn, fn_name, op in [(warp_max, "warp_max", np.maximum), (warp_sum, "warp_sum", np.add)]:
        try:
            probe = _probe(fn)
        except Exception as err:
            report.add(f"{fn_name} in one warp", _explain_error(err))
            continue
        for name, vals in _warp_cases():
            if op is np.add and np.isinf(vals).any():
                continue
            report.run(f"{fn_name} in one warp: {name}",
                       lambda p=probe, v=vals, f=fn_name, o=op: _warp_problem(p, f, v, o))
    if not _race_cases(report, tail_kernel, [(2, 100, 128)], 94):
        return Verdict(report.show())
    launch = _launcher(tail_kernel, min_threads=64)
    for name, x, threads in [("random 2x300, 64 threads", randn((2, 300), device=DEVICE, seed=95), 64),
                             ("random 3x257, 128 threads", randn((3, 257), device=DEVICE, seed=96), 128),
                             ("random 1x1, 64 threads", randn((1, 1), device=DEVICE, seed=97), 64),
                             ("all-negative row [-1002, -1001, -1000], 64 threads",
                              torch.tensor([[-1002.0, -1001.0, -1000.0]], device=DEVICE), 64)]:
        report.run(name, lambda x=x, t=threads: _safe_output(launch, x, t))
    return Verdict(report.show())
