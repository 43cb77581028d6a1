"""The performance goal, line by line, from a saved run of ``softmax-lab bench --lm-widths --peers``.

``softmax-lab bench --scorecard RUN.json [--since EARLIER.json]`` prints, with no GPU:

* the table: each shape's % of copy for torch, Liger, QuACK and ``softmax_lab.softmax`` (GPU time), the
  earlier run's figure, the speed against torch and QuACK, and the eager cost per call;
* the goal's four lines, each met or missed, and for a miss the shapes and the numbers that miss it:

  1. at least 90% of copy on every shape of 16 MB or more;
  2. at least 1.0x QuACK wherever QuACK runs, and at least 1.0x torch everywhere;
  3. eager calls: per call at most max(torch's, our GPU time + 3 us); the tiny inputs at most torch's;
  4. (with ``--since``) at least 95% of copy wherever the earlier run had it.

A run made with ``--rounds K`` timed every implementation K times in turn; the ratios are then the medians of
the K per-round ratios, and the table gives their range, so a 0.98x can be told from noise.
``softmax-lab bench --history RUN.json ...`` gives each line's ratio to QuACK in each of several runs, oldest first.
"""
from __future__ import annotations

import json
import statistics

COPY_SHARE = 90  # % of copy, on every shape of at least BIG_BYTES
BIG_BYTES = 16 * 10**6  # one input tensor's bytes
KEEP = 95  # % of copy kept wherever the earlier run had it
EAGER_SLACK_MS = 3e-3  # eager per call: at most max(torch's, GPU time + 3 µs)
TINY = {("forward", 1, 128, "float32"), ("forward", 32, 1024, "float32"), ("forward", 4096, 1024, "float32")}
OURS, TORCH, QUACK, LIGER, COPY = "softmax_lab.softmax", "torch.softmax", "quack", "liger", "copy"
SHORT = {"float32": "fp32", "float16": "fp16", "bfloat16": "bf16"}
ELEMENT_BYTES = {"float32": 4, "float16": 2, "bfloat16": 2}


def load(path: str) -> dict:
    """A saved run: ``{"meta": ..., "records": [...]}``, as ``softmax-lab bench`` writes it."""
    with open(path) as fh:
        data = json.load(fh)
    if not isinstance(data, dict) or not isinstance(data.get("records"), list):
        raise ValueError(f"{path} holds no 'records' list: not a file written by softmax-lab bench")
    return data


def by_shape(records) -> dict:
    """``{(kind, rows, cols, dtype): {impl: record}}``, shapes in the run's order."""
    shapes = {}
    for r in records:
        shapes.setdefault((r["kind"], r["rows"], r["cols"], r["dtype"]), {})[r["impl"]] = r
    return shapes


def speedup(other, ours, key="ms"):
    """How many times faster ours ran than ``other`` (its time over ours), with the (lowest, highest) of the
    per-round ratios when both were timed in rounds; None where either has no time."""
    if not other or not ours or key not in other or key not in ours:
        return None, None
    rounds = f"{key}_rounds"
    if rounds in other and rounds in ours and len(other[rounds]) == len(ours[rounds]) > 1:
        ratios = [o / s for o, s in zip(other[rounds], ours[rounds])]
        return statistics.median(ratios), (min(ratios), max(ratios))
    return other[key] / ours[key], None


def _pct(rec):
    if rec is None:
        return "–"
    if "error" in rec:
        return "refuses" if ("divisible" in rec["error"] or "Input N" in rec["error"]) else "fails"
    return f"{rec['pct_copy']:.1f}" if "pct_copy" in rec else "–"


def _ratio(ratio, digits=2):
    if ratio < 1 <= round(ratio, digits):  # a miss is never printed as 1.00
        digits += 2
    return f"{ratio:.{digits}f}"


def _times(ratio, spread, digits=2):
    if ratio is None:
        return "–"
    low_high = f" ({_ratio(spread[0], digits)}-{_ratio(spread[1], digits)})" if spread else ""
    return f"{_ratio(ratio, digits)}×{low_high}"


def _shape(key):
    kind, rows, cols, dtype = key
    return f"{'backward ' if kind == 'backward' else ''}{rows}×{cols} {SHORT.get(dtype, dtype)}"


def table(run: dict, since: dict | None = None) -> str:
    earlier = by_shape(since["records"]) if since else {}
    head = "| pass | shape | dtype | torch | Liger | QuACK | softmax_lab | earlier | vs torch | vs QuACK | " \
           "eager µs: ours (torch, QuACK; our GPU time) |"
    lines = [head, "|---|---|---|--:|--:|--:|--:|--:|--:|--:|---|"]
    for key, impls in by_shape(run["records"]).items():
        ours = impls.get(OURS)
        if ours is None:
            continue
        kind, rows, cols, dtype = key
        eager = (f"{_us(ours, 'eager_ms')} ({_us(impls.get(TORCH), 'eager_ms')}, {_us(impls.get(QUACK), 'eager_ms')}; "
                 f"{_us(ours, 'ms')})" if "eager_ms" in ours else "–")
        lines.append(f"| {kind} | {rows}×{cols} | {SHORT.get(dtype, dtype)} | {_pct(impls.get(TORCH))} | "
                     f"{_pct(impls.get(LIGER))} | {_pct(impls.get(QUACK))} | **{_pct(ours)}** | "
                     f"{_pct(earlier.get(key, {}).get(OURS))} | {_times(*speedup(impls.get(TORCH), ours))} | "
                     f"{_times(*speedup(impls.get(QUACK), ours))} | {eager} |")
    return "\n".join(lines)


def _us(rec, key):
    return f"{rec[key] * 1e3:.1f}" if rec and key in rec else "–"


def goal(run: dict, since: dict | None = None) -> list[tuple[str, bool, list[str]]]:
    """The goal's lines: ``(what, met, [the shapes that miss it, with their numbers])``."""
    shapes = by_shape(run["records"])
    big, quack, torch_, eager, keep = [], [], [], [], []
    n_big = n_quack = n_eager = n_keep = 0
    earlier = by_shape(since["records"]) if since else {}
    for key, impls in shapes.items():
        ours = impls.get(OURS)
        if ours is None or "ms" not in ours:
            continue
        kind, rows, cols, dtype = key
        pct = ours.get("pct_copy")
        if rows * cols * ELEMENT_BYTES.get(dtype, 4) >= BIG_BYTES and pct is not None:
            n_big += 1
            if pct < COPY_SHARE:
                big.append(f"{_shape(key)} {pct:.1f}%")
        ratio, spread = speedup(impls.get(QUACK), ours)
        if ratio is not None:
            n_quack += 1
            if ratio < 1.0:
                quack.append(f"{_shape(key)} {_times(ratio, spread, 3)}")
        ratio, spread = speedup(impls.get(TORCH), ours)
        if ratio is not None and ratio < 1.0:
            torch_.append(f"{_shape(key)} {_times(ratio, spread, 3)}")
        t = impls.get(TORCH, {})
        if "eager_ms" in ours and "eager_ms" in t:
            n_eager += 1
            bound = t["eager_ms"] if key in TINY else max(t["eager_ms"], ours["ms"] + EAGER_SLACK_MS)
            if ours["eager_ms"] > bound:
                eager.append(f"{_shape(key)} {ours['eager_ms'] * 1e3:.1f} µs against {bound * 1e3:.1f}"
                             + (" (torch's)" if bound == t["eager_ms"] else " (GPU time + 3)"))
        before = earlier.get(key, {}).get(OURS, {}).get("pct_copy")
        if before is not None and before >= KEEP and pct is not None:
            n_keep += 1
            if pct < KEEP:
                keep.append(f"{_shape(key)} {pct:.1f}% (was {before:.1f})")
    lines = [(f"≥ {COPY_SHARE}% of copy on every shape of ≥ 16 MB: {n_big - len(big)} of {n_big}", not big, big),
             (f"≥ 1.0× QuACK where it runs: {n_quack - len(quack)} of {n_quack}; ≥ 1.0× torch on every shape",
              not quack and not torch_, quack + [f"against torch: {m}" for m in torch_]),
             (f"eager ≤ max(torch's, GPU time + 3 µs), tiny inputs ≤ torch's: {n_eager - len(eager)} of {n_eager}",
              not eager, eager)]
    if since:
        lines.append((f"≥ {KEEP}% kept where the earlier run had it: {n_keep - len(keep)} of {n_keep}", not keep, keep))
    return lines


def history(runs) -> str:
    """How much each line's ratio to QuACK moves between runs: ``runs`` as ``(name, run)``, oldest first; one row a
    shape that QuACK runs in any of them, the ratio in each run, and the lowest and highest. A line that stays
    under 1.0 in every run is a real gap, not the drift between runs."""
    tables = [(name, by_shape(run["records"])) for name, run in runs]
    keys = list(dict.fromkeys(key for _, shapes in tables for key in shapes))
    lines = ["| shape | " + " | ".join(name for name, _ in tables) + " | lowest-highest |",
             "|---|" + "--:|" * (len(tables) + 1)]
    for key in keys:
        ratios = [speedup(shapes.get(key, {}).get(QUACK), shapes.get(key, {}).get(OURS))[0] for _, shapes in tables]
        seen = [r for r in ratios if r is not None]
        if seen:
            lines.append(f"| {_shape(key)} | " + " | ".join(_times(r, None, 3) for r in ratios)
                         + f" | {_ratio(min(seen), 3)}-{_ratio(max(seen), 3)} |")
    return "\n".join(lines)


def report(run: dict, since: dict | None = None) -> str:
    meta = run.get("meta", {})
    rounds = meta.get("rounds", 1)
    out = [f"{meta.get('device', '?')}, torch {meta.get('torch', '?')}, Triton {meta.get('triton', '?')}, "
           f"{meta.get('date', '?')}: `{meta.get('command', '?')}`"
           + (f" ({rounds} rounds; ratios: median of the rounds' (lowest-highest))" if rounds > 1 else ""), "",
           table(run, since), "", "The goal, line by line:"]
    for what, met, misses in goal(run, since):
        out.append(f"- {'met' if met else 'MISSED'}: {what}" + (f"; missed on {', '.join(misses)}" if misses else ""))
    return "\n".join(out)
