"""The performance goal, line by line, from a saved run of ``softmax-lab bench --lm-widths --peers``.

``softmax-lab bench --scorecard RUN.json [--since EARLIER.json]`` prints, with no GPU:

* the table: each shape's % of copy (GPU time) for torch, Liger, QuACK and ``softmax_lab.softmax``, the earlier
  run's figure, the speed against torch and QuACK, and the eager cost per call;
* the goal, line by line: met, MISSED (with the shapes and numbers that miss it) or NOT JUDGED (the run holds
  nothing that line applies to: no peers, no eager times, no shape of 16 MB):

  1. at least 90% of copy on every shape of 16 MB (16·10⁶ bytes of input) or more;
  2. at least 1.0x QuACK wherever QuACK runs;
  3. at least 1.0x torch on every shape;
  4. eager calls: per call at most max(torch's, our GPU time + 3 µs); the tiny inputs at most torch's;
  5. (with ``--since``) at least 95% of copy wherever the earlier run had it.

  A shape where ``softmax_lab.softmax`` failed, gave a wrong result or was not timed misses every line it
  belongs to; a number that misses is never printed as its bound (0.99971x, not 1.00x; 89.96%, not 90.0%).

A run made with ``--rounds K`` timed every implementation K times in turn; each ratio is then the median of the K
rounds' ratios, with their range, so that a 0.98x can be told from the drift between rounds.
``softmax-lab bench --history RUN.json ...`` gives each line's ratio to QuACK in several runs, oldest first.
"""
from __future__ import annotations

import json
import os
import statistics

COPY_SHARE = 90  # % of copy, on every shape of at least BIG_BYTES
BIG_BYTES = 16 * 10**6  # one input tensor's bytes ("16 MB", as the goal says)
KEEP = 95  # % of copy kept wherever the earlier run had it
EAGER_SLACK_MS = 3e-3  # eager per call: at most max(torch's, GPU time + 3 µs)
TINY = {("forward", 1, 128, "float32"), ("forward", 32, 1024, "float32"), ("forward", 4096, 1024, "float32")}
OURS, TORCH, QUACK, LIGER, COPY = "softmax_lab.softmax", "torch.softmax", "quack", "liger", "copy"
SHORT = {"float32": "fp32", "float16": "fp16", "bfloat16": "bf16"}
ELEMENT_BYTES = {"float32": 4, "float16": 2, "bfloat16": 2}
REFUSALS = ("divisible", "Input N", "exceeds the recommended")  # a peer that turns the shape down before running
FIELDS = ("kind", "rows", "cols", "dtype", "impl")


def load(path: str) -> dict:
    """A saved run, ``{"meta": {...}, "records": [...]}`` as ``softmax-lab bench`` writes it; ValueError naming
    the file and what is wrong with it otherwise."""
    try:
        with open(path) as fh:
            data = json.load(fh)
    except (OSError, UnicodeDecodeError, json.JSONDecodeError) as err:
        raise ValueError(f"{path}: {type(err).__name__}: {err}") from None
    if not isinstance(data, dict) or not isinstance(data.get("records"), list):
        raise ValueError(f"{path} holds no 'records' list: not a file written by softmax-lab bench")
    if not isinstance(data.get("meta", {}), dict):
        raise ValueError(f"{path}: its 'meta' is not an object")
    for i, r in enumerate(data["records"]):
        lacks = [f for f in FIELDS if not isinstance(r, dict) or f not in r]
        if lacks:
            raise ValueError(f"{path}: record {i} lacks {', '.join(lacks)} (each record of softmax-lab bench names its "
                             "kind, rows, cols, dtype and impl)")
    return data


def by_shape(records) -> dict:
    """``{(kind, rows, cols, dtype): {impl: record}}``, shapes in the run's order."""
    shapes = {}
    for r in records:
        shapes.setdefault((r["kind"], r["rows"], r["cols"], r["dtype"]), {})[r["impl"]] = r
    return shapes


def _time(rec, key):
    t = rec.get(key) if rec else None
    return t if isinstance(t, (int, float)) and t > 0 else None


def speedup(other, ours, key="ms"):
    """How many times faster ours ran than ``other`` (its time over ours), with the (lowest, highest) of the
    per-round ratios when both were timed in the same rounds; (None, None) where either has no time."""
    if _time(other, key) is None or _time(ours, key) is None:
        return None, None
    a, b = other.get(f"{key}_rounds") or [], ours.get(f"{key}_rounds") or []
    if len(a) == len(b) > 1 and all(isinstance(t, (int, float)) and t > 0 for t in a + b):
        ratios = [o / s for o, s in zip(a, b)]
        return statistics.median(ratios), (min(ratios), max(ratios))
    return other[key] / ours[key], None


def failure(ours) -> str:
    """'' when softmax_lab.softmax ran, was timed and gave the right result on this shape; else what went wrong."""
    if ours is None:
        return "not run"
    if "error" in ours:
        return f"fails ({str(ours['error'])[:80]})"
    if ours.get("checked") not in (None, "", "ok", "not checked"):
        return f"wrong result ({str(ours['checked'])[:80]})"
    return "" if _time(ours, "ms") is not None else "not timed"


def _below(value, bound, digits=1):
    """``value`` to ``digits`` places, or more where that would print it as ``bound`` or past it."""
    while digits < 9 and (value < bound) != (round(value, digits) < bound):
        digits += 1
    return f"{value:.{digits}f}"


def _apart(value, bound, digits=1):
    """``value`` and ``bound`` to as many places as it takes to print the one above the other as it is."""
    while digits < 9 and (round(value, digits) > round(bound, digits)) != (value > bound):
        digits += 1
    return f"{value:.{digits}f}", f"{bound:.{digits}f}"


def _ratio(ratio, digits=2):
    return _below(ratio, 1.0, digits) if ratio < 1 else f"{ratio:.{digits}f}"


def _times(ratio, spread, digits=2):
    if ratio is None:
        return "–"
    low_high = f" ({_ratio(spread[0], digits)}-{_ratio(spread[1], digits)})" if spread else ""
    return f"{_ratio(ratio, digits)}×{low_high}"


def _pct(rec, bound=None):
    if rec is None:
        return "–"
    if "error" in rec:
        return "refuses" if any(s in str(rec["error"]) for s in REFUSALS) else "fails"
    pct = rec.get("pct_copy")
    if not isinstance(pct, (int, float)):
        return "–"
    return _below(pct, bound) if bound and pct < bound else f"{pct:.1f}"


def _us(rec, key):
    return f"{rec[key] * 1e3:.1f}" if _time(rec, key) is not None else "–"


def _shape(key):
    kind, rows, cols, dtype = key
    return f"{'backward ' if kind == 'backward' else ''}{rows}×{cols} {SHORT.get(dtype, dtype)}"


def table(run: dict, since: dict | None = None, since_name: str = "earlier") -> str:
    earlier = by_shape(since["records"]) if since else {}
    lines = [f"| pass | shape | dtype | torch | Liger | QuACK | softmax_lab | {since_name} | vs torch | vs QuACK | "
             "eager µs: ours (torch, QuACK; our GPU time) |", "|---|---|---|--:|--:|--:|--:|--:|--:|--:|---|"]
    for key, impls in by_shape(run["records"]).items():
        ours = impls.get(OURS)
        if ours is None:
            continue
        kind, rows, cols, dtype = key
        mine = _pct(ours, COPY_SHARE) + (" (wrong result)" if failure(ours).startswith("wrong") else "")
        eager = (f"{_us(ours, 'eager_ms')} ({_us(impls.get(TORCH), 'eager_ms')}, {_us(impls.get(QUACK), 'eager_ms')}; "
                 f"{_us(ours, 'ms')})" if _time(ours, "eager_ms") else "–")
        lines.append(f"| {kind} | {rows}×{cols} | {SHORT.get(dtype, dtype)} | {_pct(impls.get(TORCH))} | "
                     f"{_pct(impls.get(LIGER))} | {_pct(impls.get(QUACK))} | **{mine}** | "
                     f"{_pct(earlier.get(key, {}).get(OURS))} | {_times(*speedup(impls.get(TORCH), ours))} | "
                     f"{_times(*speedup(impls.get(QUACK), ours))} | {eager} |")
    return "\n".join(lines)


class _Line:
    """One line of the goal: how many shapes it applies to, and those that miss it."""

    def __init__(self, what, none_why):
        self.what, self.none_why, self.counted, self.misses = what, none_why, 0, []

    def judge(self, key, failed, miss=None):
        self.counted += 1
        if failed or miss:
            self.misses.append(f"{_shape(key)} {failed or miss}")

    def verdict(self):
        if not self.counted:
            return f"{self.what} ({self.none_why})", None, []
        met = not self.misses
        return f"{self.what}: {self.counted - len(self.misses)} of {self.counted}", met, self.misses


def goal(run: dict, since: dict | None = None) -> list[tuple[str, bool | None, list[str]]]:
    """The goal's lines: ``(what, met, [the shapes that miss it, with their numbers])``; ``met`` is None where
    the run holds nothing the line applies to."""
    big = _Line(f"≥ {COPY_SHARE}% of copy on every shape of ≥ 16 MB", "no shape of 16 MB or more")
    quack = _Line("≥ 1.0× QuACK where it runs", "QuACK ran no shape of this run")
    torch_ = _Line("≥ 1.0× torch on every shape", "torch was not timed")
    eager = _Line("eager ≤ max(torch's, GPU time + 3 µs), tiny inputs ≤ torch's", "no eager times in this run")
    keep = _Line(f"≥ {KEEP}% kept where the earlier run had it", f"no shape at {KEEP}% or more in the earlier run")
    shapes = by_shape(run["records"])
    for key, impls in shapes.items():
        ours = impls.get(OURS)
        if ours is None:
            continue
        kind, rows, cols, dtype = key
        failed = failure(ours)
        pct = ours.get("pct_copy") if isinstance(ours.get("pct_copy"), (int, float)) else None
        if rows * cols * ELEMENT_BYTES.get(dtype, 4) >= BIG_BYTES:
            big.judge(key, failed, "no copy timed beside it" if pct is None else
                      pct < COPY_SHARE and f"{_below(pct, COPY_SHARE)}%")
        for line, peer in ((quack, impls.get(QUACK)), (torch_, impls.get(TORCH))):
            if _time(peer, "ms") is not None:
                ratio, spread = speedup(peer, ours)
                line.judge(key, failed, ratio is not None and ratio < 1.0 and _times(ratio, spread, 3))
        t = impls.get(TORCH)
        if _time(t, "eager_ms") is not None and (failed or _time(ours, "eager_ms") is not None):
            bound = t["eager_ms"] if key in TINY else max(t["eager_ms"], ours.get("ms", 0) + EAGER_SLACK_MS)
            mine, why = ours.get("eager_ms"), ""
            if mine is not None and mine > bound:
                mine_us, bound_us = _apart(mine * 1e3, bound * 1e3)
                whose = " (torch's)" if bound == t["eager_ms"] else " (GPU time + 3)"
                why = f"{mine_us} µs against {bound_us}{whose}"
            eager.judge(key, failed, why)
    for key, impls in (by_shape(since["records"]) if since else {}).items():
        before = impls.get(OURS, {}).get("pct_copy")
        if isinstance(before, (int, float)) and before >= KEEP:
            ours = shapes.get(key, {}).get(OURS)
            pct = ours.get("pct_copy") if ours and isinstance(ours.get("pct_copy"), (int, float)) else None
            keep.judge(key, failure(ours) if ours else "not in this run",
                       "no copy timed beside it" if pct is None else
                       pct < KEEP and f"{_below(pct, KEEP)}% (was {before:.1f})")
    return [line.verdict() for line in (big, quack, torch_, eager) + ((keep,) if since else ())]


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


def report(run: dict, since: dict | None = None, since_name: str = "earlier") -> str:
    meta = run.get("meta", {})
    rounds = meta.get("rounds", 1)
    head = (f"{meta.get('device', '?')}, torch {meta.get('torch', '?')}, Triton {meta.get('triton', '?')}, "
            f"{meta.get('date', '?')}: `{meta.get('command', '?')}`")
    if isinstance(rounds, int) and rounds > 1:
        head += f" ({rounds} rounds; each ratio the median of the rounds' ratios (lowest-highest))"
    out = [head, "", f"torch, Liger, QuACK, softmax_lab, {since_name}: % of a copy of the same bytes, GPU time "
           "(refuses: the peer turns the shape down; fails: it raised)", "", table(run, since, since_name), "",
           "The goal, line by line:"]
    for what, met, misses in goal(run, since):
        verdict = "met" if met else "MISSED" if met is False else "NOT JUDGED"
        out.append(f"- {verdict}: {what}" + (f"; missed on {', '.join(misses)}" if misses else ""))
    return "\n".join(out)


def run_name(path: str) -> str:
    """A run's name in the tables: its file's name without the folder and ``.json``."""
    return os.path.basename(path).removesuffix(".json")
