"""Exercise ch09-shuffle-tail: ``warp_max``/``warp_sum`` by shuffles (checked one warp at a time) and the notebook's
block kernel that reduces every warp with them, then the warps' results with them again."""
from __future__ import annotations

import math

import numpy as np
import torch

from ...device import DEVICE
from ...testing import randn
from .._pitfalls import Verdict, quiet
from ..common import Report
from ..judging import Buf, NCase, NumbaJudge, cast, output_problem, rows_input, rows_output, softmax64, view_of
from ._blocks import (NOT_IMPLEMENTED, _cl, _explain_error, _launcher, _not_implemented, _race_cases, _safe_output,
                      race_problem)


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


def _lane0_weights(mode: str, offsets, combine: bool) -> np.ndarray:
    """How many times each lane's value ends up in lane 0's result (lane i starts with one copy of its own)."""
    v = np.eye(32)
    lanes = np.arange(32)
    for off in offsets:
        b = off & 31
        src = {"down": lanes + b, "xor": lanes ^ b, "up": lanes - b}[mode]
        src = np.where((src >= 0) & (src < 32), src, lanes)
        v = v + v[src] if combine else v[src]
    return v[0]


# Shuffle loops a learner may write: (mode, offsets, combine, what went wrong). The cause is named only when every
# loop that gives lane 0's value names the same one; otherwise the message says what lane 0 holds.
_SHUFFLE_LOOPS = [
    ("xor", (32, 16, 8, 4, 2, 1), True, "the first step used offset 32, the first step of a 64-lane AMD "
     "wavefront: an NVIDIA warp has 32 lanes, and a shuffle keeps only the offset's low 5 bits, so offset 32 "
     "pairs each lane with itself (a sum doubles)"),
    ("down", (32, 16, 8, 4, 2, 1), True, "offset 32 on a 32-lane warp"),
    ("up", (16, 8, 4, 2, 1), True, "shfl_up_sync sends values up to higher lanes, so lane 0 never receives "
     "the others' values"),
    ("up", (1, 2, 4, 8, 16), True, "shfl_up_sync sends values up to higher lanes, so lane 0 never receives "
     "the others' values"),
    ("down", (16, 8, 4, 2, 1), False, "each step replaced a lane's value by its partner's instead of combining "
     "the two"),
    ("xor", (16, 8, 4, 2, 1), False, "each step replaced a lane's value by its partner's instead of combining "
     "the two"),
] + [(mode, offs, True, None) for mode in ("xor", "down") for offs in [
    (8, 4, 2, 1), (4, 2, 1), (2, 1), (16, 8, 4, 2), (16, 8, 4), (1, 2, 4), (1, 2, 4, 8), (2, 4, 8, 16),
    (1, 2, 3, 4, 5), (5, 4, 3, 2, 1), tuple(range(1, 32)), tuple(range(16, 0, -1)), (16, 8, 4, 2, 1, 0)]]


def _lanes_text(lanes: list) -> str:
    if len(lanes) == 1:
        return f"lane {lanes[0]}"
    steps = {b - a for a, b in zip(lanes, lanes[1:])}
    if steps == {1}:
        return f"lanes {lanes[0]} to {lanes[-1]}"
    if len(steps) == 1:
        return f"every {steps.pop()}th lane from lane {lanes[0]}".replace("every 2th", "every other")
    return f"lanes {', '.join(map(str, lanes[:6]))}{', ...' if len(lanes) > 6 else ''}"


def _what_lane0_holds(w: np.ndarray, is_max: bool) -> str:
    """Lane 0's result described by the lanes it holds (and, for a sum, how often), not by a guessed cause."""
    lanes = [int(i) for i in np.flatnonzero(w)]
    held = f"only {_lanes_text(lanes)} ({len(lanes)} of the warp's 32 lanes)" if len(lanes) < 32 else "all 32 lanes"
    if len(lanes) == 1 and lanes[0] != 0:
        return (f"lane 0 ended with {_lanes_text(lanes)}'s value alone: a step put its partner's value in place of "
                "the one it had combined so far instead of combining the two")
    if lanes == [0]:
        return "lane 0 never combined another lane's value with its own"
    text = f"lane 0's {'max' if is_max else 'sum'} covers {held}: the other lanes' values never reached it"
    if len(lanes) == 32:
        text = "lane 0's sum covers all 32 lanes"
    if not is_max and len(lanes) == 32 and len(set(w)) == 1:
        return (f"lane 0's sum counts every lane's value {int(w[0])} times: a step paired each lane with itself "
                "(offset 0, or offset 32: a shuffle keeps only the offset's low 5 bits, and an NVIDIA warp has 32 "
                "lanes, not the 64 of an AMD wavefront)")
    if not is_max and w.max() > 1:
        j = int(np.argmax(w))
        text += (f"{',' if len(lanes) == 32 else ';'} and it counts some of them more than once (lane {j}'s value "
                 f"{int(w[j])} times): a step's partner held lanes lane 0 already had")
    return text


def _shuffle_mistake(got0: float, vals: np.ndarray, op, kind: str) -> str:
    is_max = op is np.maximum
    want = float(_emulate_warp(vals, op, "xor", (16, 8, 4, 2, 1))[0])
    causes, held = set(), {}
    for mode, offs, comb, cause in _SHUFFLE_LOOPS:
        w = _lane0_weights(mode, offs, comb)
        value = float(np.max(vals[w > 0])) if is_max else float(np.dot(w, vals.astype(np.float64)))
        if math.isclose(got0, value, rel_tol=1e-5, abs_tol=1e-6) and not math.isclose(
                value, want, rel_tol=1e-5, abs_tol=1e-6):
            causes.add(cause)
            key = tuple(w > 0) if is_max else tuple(w)
            held[key] = w
    if len(causes) == 1 and None not in causes:
        return f"{kind}: {causes.pop()}"
    if len(held) == 1:
        return f"{kind}: {_what_lane0_holds(next(iter(held.values())), is_max)}"
    if is_max and got0 < want:
        return (f"{kind}: lane 0's max never met lane {int(np.argmax(vals))}'s value, the warp's largest: the "
                "exchanges did not bring every lane's value to lane 0")
    return f"{kind}: lane 0 holds the wrong value"


PROBE = '''
def probe(vals, out):
    out[cuda.threadIdx.x] = fn(vals[cuda.threadIdx.x])
'''

# The cases, read by the notebook check and the grader's judge alike. One warp's lane values for warp_max and
# warp_sum (name, values: "lanes" 0..31, "random", "rising" with the largest in lane 31, "one finite" all -inf but
# lane 17: max only); the kernel's (name, rows, columns, threads, values, race check). The check draws random values
# from fixed seeds, the judge from the grader's seed.
WARP_CASES = [("lanes hold 0, 1, ..., 31", "lanes"), ("random lane values", "random"),
              ("largest value in lane 31", "rising"), ("all -inf but lane 17 (max only)", "one finite")]
TAIL_CASES = [
    ("race check in the simulator: 2x100, 128 threads (no hazard between barriers)", 2, 100, 128, "random", True),
    ("random 2x300, 64 threads", 2, 300, 64, "random", False),
    ("random 3x257, 128 threads", 3, 257, 128, "random", False),
    ("random 2x40, 32 threads (one warp)", 2, 40, 32, "random", False),
    ("random 1x1, 64 threads", 1, 1, 64, "random", False),
    ("all-negative row [-1002, -1001, -1000], 64 threads", 1, 3, 64, "negative", False),
]
OPS = {"warp_max": np.maximum, "warp_sum": np.add}


def warp_values(kind: str, rng: np.random.Generator) -> np.ndarray:
    lanes = np.arange(32, dtype=np.float32)
    if kind == "lanes":
        return lanes
    if kind == "rising":
        return (lanes - 40).astype(np.float32)
    if kind == "one finite":
        one = np.full(32, -np.inf, dtype=np.float32)
        one[17] = 2.5
        return one
    return (rng.standard_normal(32) * 3).astype(np.float32)


def _probe(fn):
    cl = _cl()
    ns = {"cuda": cl.cuda, "fn": fn}
    exec(compile(PROBE, "<softmax_lab warp probe>", "exec"), ns)
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


def warp_problem(got: np.ndarray, vals: np.ndarray, fn_name: str) -> str:
    """'' when lane 0 of ``got`` holds the warp's max/sum of ``vals``, else the shuffle mistake it looks like."""
    op = OPS[fn_name]
    want = _emulate_warp(vals, op, "xor", (16, 8, 4, 2, 1))[0]
    if np.isnan(got[0]):
        return f"{fn_name}: lane 0 got NaN"
    if math.isclose(float(got[0]), float(want), rel_tol=1e-5, abs_tol=1e-5) or got[0] == want:
        return ""
    if np.array_equal(np.asarray(got, np.float64), np.asarray(vals, np.float32).astype(np.float64)):
        return (f"{fn_name}: every lane got back the very value it passed in, so no lane's value reached another: "
                "nothing a shuffle handed over was combined into what the function returns")
    return _shuffle_mistake(float(got[0]), vals, op, fn_name)


def _warp_case(probe, vals, fn_name):
    with quiet():
        return warp_problem(_run_probe(probe, vals), vals, fn_name)


def _tail_values(kind: str, rows: int, cols: int, seed: int) -> torch.Tensor:
    if kind == "negative":
        return torch.tensor([[-1002.0, -1001.0, -1000.0]], device=DEVICE)
    return randn((rows, cols), device=DEVICE, seed=seed)


def check_shuffle_tail(warp_max, warp_sum, tail_kernel) -> Verdict:
    """Exercise ch09-shuffle-tail: ``warp_max(v)``/``warp_sum(v)`` (device functions: lane 0 at least gets the
    warp's max/sum) and ``tail_kernel(x, y, n_cols)``, the notebook's block kernel that reduces with them."""
    report = Report("ch09-shuffle-tail")
    if _not_implemented(warp_max, warp_sum):
        report.add("warp_max and warp_sum", NOT_IMPLEMENTED)
        return Verdict(report.show())
    for fn, fn_name in [(warp_max, "warp_max"), (warp_sum, "warp_sum")]:
        try:
            probe = _probe(fn)
        except Exception as err:
            report.add(f"{fn_name} in one warp", _explain_error(err))
            continue
        for i, (name, kind) in enumerate(WARP_CASES):
            if fn_name == "warp_sum" and kind == "one finite":
                continue
            vals = warp_values(kind, np.random.default_rng(93 + i))
            report.run(f"{fn_name} in one warp: {name}", lambda p=probe, v=vals, f=fn_name: _warp_case(p, v, f))
    races = [(rows, cols, threads) for _, rows, cols, threads, _, race in TAIL_CASES if race]
    if not _race_cases(report, tail_kernel, races, 94):
        return Verdict(report.show())
    launch = _launcher(tail_kernel)
    for i, (name, rows, cols, threads, kind, race) in enumerate(TAIL_CASES):
        if not race:
            x = _tail_values(kind, rows, cols, 95 + i)
            report.run(name, lambda x=x, t=threads: _safe_output(launch, x, t))
    return Verdict(report.show())


def _judge_cases(rng: np.random.Generator) -> list:
    out = []
    for fn_name in ("warp_max", "warp_sum"):
        for name, kind in WARP_CASES:
            if fn_name == "warp_sum" and kind == "one finite":
                continue
            vals = warp_values(kind, rng).astype(np.float64)
            bufs = {"vals": Buf(cast(vals, "float32"), shape=(32,)),
                    "out": Buf(np.full(32, np.nan), output=True, shape=(32,))}
            out.append(NCase(f"{fn_name} in one warp: {name}", fn_name, 1, 32, bufs,
                             [("buf", "vals"), ("buf", "out")], probe=PROBE, spec={"warp": fn_name}))
    for name, rows, cols, threads, kind, race in TAIL_CASES:
        x = np.array([[-1002.0, -1001.0, -1000.0]]) if kind == "negative" else rng.normal(0, 3, (rows, cols))
        xin = rows_input(rng, x)
        y = rows_output(softmax64(view_of(xin, xin.storage)))
        out.append(NCase(name.replace(" in the simulator", ""), "my_tail_kernel", rows, threads, {"x": xin, "y": y},
                         [("buf", "x"), ("buf", "y"), ("int", cols)], race=race, shared_bytes=threads * 4))
    return out


def _judge_problem(case: NCase, outputs: dict, race: dict | None) -> str:
    if "warp" in case.spec:
        return warp_problem(outputs["out"], case.buffers["vals"].storage, case.spec["warp"])
    if race is not None and not race["ok"]:
        return race_problem(race["kinds"], race["first"])
    return output_problem(case.buffers["y"], outputs["y"])


JUDGES = {"ch09-shuffle-tail": NumbaJudge(("warp_max", "warp_sum", "my_tail_kernel"), _judge_cases, _judge_problem)}
