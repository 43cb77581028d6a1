"""Drawings of what a softmax kernel does, from real numbers (yours, if you pass your own row).

* ``lanes(steps, n_valid)``: one program's lanes through max → shift → exp → sum → divide; padding lanes greyed,
  the row max and sum drawn as one value shared by the whole row.
* ``dataflow(n_rows, n_cols, elem_bytes)``: three launches linked by buffers in global memory, versus one program
  per row, with the bytes each step moves.
* ``online_walk(row, tile)``: the running ``(m, l)`` of online softmax after each tile (``online_steps`` and
  ``online_states`` give the numbers, from the definition: each tile's parts, and the pair after it).
* ``split_row(row, chunks)``: one row cut over several programs, their partial ``(m, l)`` combined.

Every function returns a matplotlib Figure (shown as a picture in a notebook); ``png(fig)`` gives its bytes.
Colours come from the Okabe-Ito palette, which stays distinct for colour-blind readers.
"""
from __future__ import annotations

import io
import math

# Figure() rather than pyplot: no global state, and nothing is shown twice in a notebook.
from matplotlib.figure import Figure
from matplotlib.patches import FancyArrowPatch, Rectangle

BLUE, ORANGE, GREEN, VERMILLION, SKY, PURPLE, GREY = ("#0072B2", "#E69F00", "#009E73", "#D55E00", "#56B4E9",
                                                      "#CC79A7", "#999999")
FONT = 11


def fmt(v: float) -> str:
    """A value as short text (the widgets' text uses it too): -inf, nan, integers plainly, else 4 digits."""
    if v != v:
        return "nan"
    if math.isinf(v):
        return "-inf" if v < 0 else "inf"
    if v == int(v):
        return str(int(v))
    return f"{v:.4f}" if abs(v) >= 1e-4 else f"{v:.2e}"


def png(fig: Figure, dpi: int = 100) -> bytes:
    buf = io.BytesIO()
    fig.savefig(buf, format="png", dpi=dpi, bbox_inches="tight")
    return buf.getvalue()


def _box(ax, x, y, w, h, text, face, edge="black", hatch=None, alpha=1.0, bold=False, color="black"):
    ax.add_patch(Rectangle((x, y), w, h, facecolor=face, edgecolor=edge, hatch=hatch, alpha=alpha, lw=1.2))
    ax.text(x + w / 2, y + h / 2, text, ha="center", va="center", fontsize=FONT, color=color,
            fontweight="bold" if bold else "normal", alpha=max(alpha, 0.35))


def lanes(steps: list[tuple[str, list[float]]], n_valid: int, highlight: int | None = None, title: str = "") -> Figure:
    """Rows of lanes, one row per step. A step with one value is shared by the row (max, sum)."""
    block = max(len(v) for _, v in steps)
    fig = Figure(figsize=(2.4 + 1.15 * block, 0.62 * len(steps) + (0.6 if title else 0.3)))
    ax = fig.add_axes([0, 0, 1, 1])
    for r, (name, values) in enumerate(steps):
        y = len(steps) - 1 - r
        faded = highlight is not None and r != highlight
        alpha = 0.3 if faded else 1.0
        ax.text(-0.15, y + 0.4, name, ha="right", va="center", fontsize=FONT, alpha=max(alpha, 0.45),
                fontweight="bold" if r == highlight else "normal")
        if len(values) == 1:  # one value for the whole row
            _box(ax, 0, y, block, 0.8, f"{values[0]:.4g}  (shared by every lane)" if not math.isinf(values[0])
                 else f"{fmt(values[0])}  (shared by every lane)", SKY, alpha=alpha, bold=r == highlight)
            continue
        for i, v in enumerate(values):
            pad = i >= n_valid
            face = "#EEEEEE" if pad else ("#FFF3C4" if r == highlight else "white")
            color = VERMILLION if pad and v == v and not math.isinf(v) and v != 0 else ("#555555" if pad else "black")
            text = "not stored" if pad and v != v else fmt(v)
            _box(ax, i, y, 0.95, 0.8, text, face, edge=GREY if pad else "black", hatch="//" if pad else None,
                 alpha=alpha, color=color)
    for i in range(block):
        ax.text(i + 0.475, len(steps) - 0.05, f"lane {i}" + (" (pad)" if i >= n_valid else ""), ha="center",
                va="bottom", fontsize=FONT - 2, color=GREY)
    if title:
        ax.set_title(title, fontsize=FONT + 1, loc="left", pad=18)
    ax.set_xlim(-2.6, block + 0.1)
    ax.set_ylim(-0.2, len(steps) + 0.4)
    ax.axis("off")
    return fig


def trace_steps(row, block: int | None = None, pad: float = float("-inf")) -> list[tuple[str, list[float]]]:
    """The stable softmax of ``row`` as one program computes it in float32, padded to ``block`` lanes."""
    import torch

    n = len(row)
    block = block or n
    if block < n:
        raise ValueError(f"block ({block}) must hold the row ({n} elements)")
    x = torch.tensor([float(v) for v in row] + [pad] * (block - n), dtype=torch.float32)
    m = x.max()
    p = torch.exp(x - m)
    s = p.sum()
    y = p / s
    return [("load x", x.tolist()), ("row max m", [m.item()]), ("x - m", (x - m).tolist()),
            ("p = exp(x - m)", p.tolist()), ("sum s", [s.item()]), ("y = p / s", y.tolist())]


def trace(row, block: int | None = None, pad: float = float("-inf"), highlight: int | None = None) -> Figure:
    block = block or len(row)
    title = f"softmax of [{', '.join(fmt(float(v)) for v in row)}]"
    if block > len(row):
        title += f" in a block of {block}, padding lanes read {fmt(pad)}"
    return lanes(trace_steps(row, block, pad), len(row), highlight, title=title)


def _flow_box(ax, x, y, w, h, text, face):
    ax.add_patch(Rectangle((x, y), w, h, facecolor=face, edgecolor="black", lw=1.2))
    ax.text(x + w / 2, y + h / 2, text, ha="center", va="center", fontsize=FONT)


def _arrow(ax, a, b, label=""):
    ax.add_patch(FancyArrowPatch(a, b, arrowstyle="-|>", mutation_scale=14, lw=1.3, color="black"))
    if label:
        ax.text((a[0] + b[0]) / 2, (a[1] + b[1]) / 2 + 0.12, label, ha="center", va="bottom", fontsize=FONT - 1,
                color=BLUE)


def _mb(n: float) -> str:
    return f"{n / 2**20:.1f} MiB" if n >= 2**20 else f"{n / 2**10:.1f} KiB"


def three_pass_bytes(n_rows: int, n_cols: int, elem_bytes: int = 4) -> int:
    """Bytes three_pass_softmax moves: x read twice, y written once; the float32 buffer p written and read;
    the per-row max and sum (float32) each written and read."""
    return 3 * n_rows * n_cols * elem_bytes + 2 * n_rows * n_cols * 4 + 4 * n_rows * 4


def dataflow(n_rows: int, n_cols: int, elem_bytes: int = 4) -> Figure:
    """Three launches (max; exp and sum into a buffer; divide) versus one program per row, bytes per arrow."""
    x = n_rows * n_cols * elem_bytes
    e = n_rows * n_cols * 4  # the exp buffer is float32
    r = n_rows * 4
    fig = Figure(figsize=(11, 5.2))
    top, bottom = fig.subplots(2, 1, gridspec_kw={"height_ratios": [1.25, 1]})
    for ax in (top, bottom):
        ax.set_xlim(0, 11)
        ax.set_ylim(0, 2.2)
        ax.axis("off")
    top.set_title(f"three launches, {n_rows}×{n_cols}: {_mb(three_pass_bytes(n_rows, n_cols, elem_bytes))} moved",
                  loc="left",
                  fontsize=FONT + 1)
    for name, xpos in (("x", 0.2), ("x", 4.0)):
        _flow_box(top, xpos, 1.3, 0.9, 0.6, name, "white")
    _flow_box(top, 1.6, 1.3, 1.6, 0.6, "launch 1\nrow max", ORANGE)
    _flow_box(top, 5.4, 1.3, 1.6, 0.6, "launch 2\nexp, sum", ORANGE)
    _flow_box(top, 8.6, 1.3, 1.6, 0.6, "launch 3\ndivide", ORANGE)
    _flow_box(top, 3.2, 0.15, 1.3, 0.55, "m (global)", SKY)
    _flow_box(top, 7.0, 0.15, 1.6, 0.55, "p, s (global)", SKY)
    _flow_box(top, 10.3, 0.15, 0.6, 0.55, "y", "white")
    _arrow(top, (1.1, 1.6), (1.6, 1.6), _mb(x))
    _arrow(top, (3.2, 1.45), (3.6, 0.7), _mb(r))
    _arrow(top, (3.85, 0.7), (5.4, 1.4), _mb(r))
    _arrow(top, (4.9, 1.6), (5.4, 1.6), _mb(x))
    _arrow(top, (7.0, 1.45), (7.6, 0.7), _mb(e + r))
    _arrow(top, (8.2, 0.7), (8.6, 1.4), _mb(e + r))
    _arrow(top, (10.2, 1.4), (10.55, 0.7), _mb(x))
    bottom.set_title(f"one program per row: {_mb(2 * x)} moved (each element read once, written once)",
                     loc="left", fontsize=FONT + 1)
    _flow_box(bottom, 0.2, 0.8, 0.9, 0.6, "x", "white")
    _flow_box(bottom, 2.6, 0.7, 5.0, 0.8, "one program per row: load, max, exp, sum, divide\n"
                                           "(m, p and s stay in registers)", GREEN)
    _flow_box(bottom, 9.4, 0.8, 0.9, 0.6, "y", "white")
    _arrow(bottom, (1.1, 1.1), (2.6, 1.1), _mb(x))
    _arrow(bottom, (7.6, 1.1), (9.4, 1.1), _mb(x))
    fig.tight_layout()
    return fig


def online_steps(row, tile: int) -> list[tuple[list[float], float, float, float, float, float, float]]:
    """What the online recurrence must produce after each tile, computed from the definition (not from the
    recurrence, which is chapter 5's exercise): (tile values, m before, m after, l before, the elements read
    before this tile summed against the new max, this tile's elements against it, l after), in float64. While
    the max is still -inf every exponential shifts by 0 instead, so nothing becomes NaN."""
    values = [float(v) for v in row]
    out, m, l = [], float("-inf"), 0.0
    for start in range(0, len(values), tile):
        before, t = values[:start], values[start:start + tile]
        m_new = max(before + t)
        shift = 0.0 if math.isinf(m_new) else m_new
        earlier = sum(math.exp(v - shift) for v in before)
        added = sum(math.exp(v - shift) for v in t)
        out.append((t, m, m_new, l, earlier, added, earlier + added))
        m, l = m_new, earlier + added
    return out


def online_states(row, tile: int) -> list[tuple[list[float], float, float]]:
    """(tile values, m, l) after each tile of the online recurrence (``online_steps`` without the parts)."""
    return [(t, m_new, l_new) for t, _, m_new, _, _, _, l_new in online_steps(row, tile)]


def online_walk(row, tile: int, highlight: int | None = None) -> Figure:
    """The row in tiles, and under each tile the running (m, l) once that tile has been read."""
    states = online_states(row, tile)
    n = len(row)
    fig = Figure(figsize=(1.6 + 1.15 * n, 2.6))
    ax = fig.add_axes([0, 0, 1, 1])
    for k, (t, m, l) in enumerate(states):
        faded = highlight is not None and k != highlight
        alpha = 0.3 if faded else 1.0
        x0 = k * tile
        for j, v in enumerate(t):
            _box(ax, x0 + j, 1.5, 0.95, 0.7, fmt(v), "#FFF3C4" if k == highlight else "white", alpha=alpha)
        ax.text(x0 + len(t) / 2 - 0.03, 2.35, f"tile {k + 1}", ha="center", fontsize=FONT, color=GREY)
        _box(ax, x0, 0.35, len(t) - 0.05, 0.75, f"m = {fmt(m)}\nl = {l:.3f}", SKY, alpha=alpha, bold=k == highlight)
        _arrow(ax, (x0 + len(t) / 2, 1.5), (x0 + len(t) / 2, 1.12))
        if k:
            prev_m = states[k - 1][1]
            ax.text(x0 - 0.03, 0.2, f"old l × e^({fmt(prev_m)} − {fmt(m)})", ha="center", va="top",
                    fontsize=FONT - 2, color=VERMILLION if prev_m != m else GREY, alpha=max(alpha, 0.45))
    ax.set_title(f"online softmax of [{', '.join(fmt(float(v)) for v in row)}], tiles of {tile}: "
                 "(m, l) after each tile",
                 fontsize=FONT + 1, loc="left")
    ax.set_xlim(-0.3, n + 0.3)
    ax.set_ylim(-0.3, 2.8)
    ax.axis("off")
    return fig


def split_row(row, chunks: int) -> Figure:
    """One row over ``chunks`` programs: each reduces its chunk to (m_c, l_c); the pairs combine to the row's
    (M, L), drawn as values (the merge itself is exercise ch05-combine)."""
    n = len(row)
    size = -(-n // chunks)
    parts = [[float(v) for v in row[i:i + size]] for i in range(0, n, size)]
    pairs = []
    for p in parts:
        m = max(p)
        pairs.append((m, sum(math.exp(v - m) for v in p)))
    big_m = max(float(v) for v in row)
    big_l = sum(math.exp(float(v) - big_m) for v in row)  # from the definition: the merge is ch05-combine
    fig = Figure(figsize=(1.4 + 1.15 * n, 3.3))
    ax = fig.add_axes([0, 0, 1, 1])
    x0 = 0
    for k, (p, (m, l)) in enumerate(zip(parts, pairs)):
        for j, v in enumerate(p):
            _box(ax, x0 + j, 2.2, 0.95, 0.65, fmt(v), "white")
        ax.text(x0 + len(p) / 2, 3.0, f"program {k}", ha="center", fontsize=FONT, color=GREY)
        _box(ax, x0, 1.15, len(p) - 0.05, 0.7, f"m = {fmt(m)}, l = {l:.3f}", SKY)
        _arrow(ax, (x0 + len(p) / 2, 2.2), (x0 + len(p) / 2, 1.87))
        _arrow(ax, (x0 + len(p) / 2, 1.15), (n / 2, 0.78))
        x0 += len(p)
    # the merged pair's values only: how to merge is chapter 5's exercise ch05-combine
    _box(ax, n / 2 - 2.2, 0.05, 4.4, 0.7, f"the whole row: M = {fmt(big_m)},  L = {big_l:.3f}", GREEN)
    ax.set_title(f"split row: {len(parts)} programs share one row of {n}", fontsize=FONT + 1, loc="left")
    ax.set_xlim(-0.3, n + 0.3)
    ax.set_ylim(-0.1, 3.4)
    ax.axis("off")
    return fig
