"""Your kernel, drawn: which program loaded and stored each element, from the kernel's real memory operations.

    fig = softmax_lab.draw(my_fused_softmax, x)     # x small, e.g. 4 x 10: a picture, plus findings printed
    maps = lane_map(my_fused_softmax, x)            # the numbers behind it: maps.loads, maps.stores, maps.findings

The launcher runs once through Triton's interpreter (``softmax_lab.memcount``, on CPU copies; also on a GPU
machine, so the picture is the same everywhere). Every lane whose mask is true is recorded with its program;
lanes that would touch memory outside every tensor of the launch are recorded and switched off, so a wrong kernel
cannot corrupt anything while it is drawn. Each element of the input is coloured by the program that loaded it
and each element of the output by the program that stored it; the findings say in words what looks wrong:
elements never stored, elements stored by two programs (padding lanes spilling into the next row), programs
that read one row and wrote another (a wrong row stride), lanes outside every tensor. The padding lanes (the
lanes of a block past the end of the row, masked off) are drawn too, with the value they read: with
``padding="-inf"`` (a softmax over the row), a padding lane that read anything else is a finding.
"""
from __future__ import annotations

from dataclasses import dataclass, field

import numpy as np
import torch
from matplotlib.figure import Figure
from matplotlib.patches import Rectangle

from . import pictures
from .memcount import count_calls

NONE, SEVERAL = -1, -2
PALETTE = ["#0072B2", "#E69F00", "#009E73", "#CC79A7", "#56B4E9", "#F0E442", "#D55E00", "#999999"]


@dataclass
class LaneMaps:
    """Per element of the input ``x`` and the output ``y`` ([rows, row stride] grids; columns past the row
    length are the gap of a strided view): the program that loaded / stored it (NONE, SEVERAL), how often."""
    x: np.ndarray
    y: np.ndarray
    n_cols: int
    loads: np.ndarray
    stores: np.ndarray
    store_counts: np.ndarray
    outside: dict = field(default_factory=dict)   # "load"/"store" -> lanes outside every tensor
    findings: list = field(default_factory=list)
    padding: dict = field(default_factory=dict)   # program -> the values its masked-off lanes read (floats)
    x_step: int = 0                               # elements between the input's rows
    y_step: int = 0                               # elements between the output's rows


def _grid(t: torch.Tensor) -> tuple[int, int, int]:
    """(rows, row stride, storage offset) of a 2-D tensor with unit column stride (or one column)."""
    rows, cols = t.shape
    stride = t.stride(0) if rows > 1 else cols
    return rows, max(stride, cols), t.storage_offset()


def _owner_map(log, launch_names, shape, offset) -> tuple[np.ndarray, np.ndarray]:
    rows, stride = shape
    owner = np.full(rows * stride, NONE, dtype=np.int64)
    counts = np.zeros(rows * stride, dtype=np.int64)
    for launch, program, name, idx in log:
        if (launch, name) not in launch_names:
            continue
        k = idx - offset
        k = k[(k >= 0) & (k < rows * stride)]
        pid = program[0] + 1000 * program[1]
        seen = owner[k]
        owner[k] = np.where((seen == NONE) | (seen == pid), pid, SEVERAL)
        np.add.at(counts, k, 1)
    return owner.reshape(rows, stride), counts.reshape(rows, stride)


def _padding_reads():
    """While active, the values read by masked-off lanes of floating-point loads, per program: {program: [arrays]}.
    (The interpreter fills them with the load's ``other=``, or 0 without one.)"""
    from triton.runtime import interpreter as interp

    builder = interp.interpreter_builder
    original = builder.create_masked_load
    found: dict = {}

    def spy(ptrs, mask, other, *rest):
        out = original(ptrs, mask, other, *rest)
        values = np.asarray(out.data)
        if values.dtype.kind == "f":
            active = np.broadcast_to(np.asarray(mask.data, dtype=bool), values.shape)
            if (~active).any():
                grid = builder.grid_idx if builder.grid_idx is not None else (0, 0, 0)
                found.setdefault(int(grid[0]) + 1000 * int(grid[1]), []).append(values[~active].astype(np.float64))
        return out

    return builder, original, spy, found


def lane_map(launcher, x: torch.Tensor, padding: str | None = None, effect: bool = False, **kwargs) -> LaneMaps:
    """Run ``launcher(x, **kwargs)`` once, interpreted, and map its memory operations onto ``x`` and its output.
    ``padding``: what masked-off lanes must read ("-inf" for a softmax over the row), judged in the findings."""
    if not isinstance(x, torch.Tensor) or x.dim() != 2:
        raise ValueError("lane_map draws a launcher on a 2-D tensor x, e.g. torch.randn(4, 10)")
    if x.numel() > 4096:
        raise ValueError(f"x has {x.numel()} elements: draw a small input (at most 4096 elements, e.g. 4 x 10)")
    builder, original, spy, pads = _padding_reads()
    builder.create_masked_load = spy  # count_calls wraps whatever load it finds, so this sees every load
    try:
        y, count = count_calls(launcher, x, _guard=True, **kwargs)
    finally:
        builder.create_masked_load = original
    if isinstance(y, tuple):
        y = y[0]
    if not isinstance(y, torch.Tensor) or y.shape != x.shape:
        raise ValueError("the launcher should return the output tensor, shaped like x")
    names = {}
    for (launch, name), ptr in count._storage_of.items():
        names.setdefault(ptr, set()).add((launch, name))
    xr, xs, xo = _grid(x)
    yr, ys, yo = _grid(y)
    loads, _ = _owner_map(count._load_log, names.get(x.untyped_storage().data_ptr(), set()), (xr, xs), xo)
    stores, store_counts = _owner_map(count._store_log, names.get(y.untyped_storage().data_ptr(), set()), (yr, ys), yo)
    outside: dict = {}
    for _, _, kind, n in count._outside_log:
        outside[kind] = outside.get(kind, 0) + n
    maps = LaneMaps(x.detach().cpu().float().numpy(), y.detach().cpu().float().numpy(), x.shape[1], loads, stores,
                    store_counts, outside, x_step=xs, y_step=ys)
    # lanes switched off because they lay outside every tensor were not masked by the kernel: no padding to show
    maps.padding = {} if outside.get("load") else {p: np.concatenate(v) for p, v in sorted(pads.items())}
    maps.findings = diagnose(maps, padding, effect)
    return maps


def padding_values(m: LaneMaps) -> list[float]:
    """The distinct values the padding lanes read (at most 4), in order."""
    values = np.unique(np.concatenate(list(m.padding.values()))) if m.padding else np.array([])
    return [float(v) for v in values[:4]]


def padding_counted(m: LaneMaps) -> bool:
    """Whether a padding lane read a value that can reach a row's max or sum (in fp32: one within ~100 of the
    input's values; -inf, or a value far below, adds nothing)."""
    read = padding_values(m)
    low = float(m.x.min()) - 100.0 if m.x.size else 0.0
    return any(v != float("-inf") and v > low for v in read)


def diagnose(m: LaneMaps, padding: str | None = None, effect: bool = False) -> list[str]:
    """What looks wrong, in words (an empty list when every output element was stored once, by its own row's
    program, from that row's input, and the padding lanes read ``padding`` when it is given). ``effect``: name
    what the padding lanes did to the row, not the value they should have read (where that is the exercise)."""
    found = []
    n = m.n_cols
    read = padding_values(m)
    if effect and padding == "-inf" and not m.outside.get("load") and padding_counted(m):
        shown = ", ".join(pictures.fmt(v) for v in read)
        found.append(f"the padding lanes (past column {n - 1} of each block) read {shown} and took part in each "
                     "row's max and sum: each added exp(value - max) > 0 to a sum that should hold the row alone")
    elif not effect and padding == "-inf" and not m.outside.get("load") and any(v != float("-inf") for v in read):
        shown = " and ".join(pictures.fmt(v) for v in read)
        if float("-inf") in read:  # several loads of the same lanes, with different other= values
            found.append(f"the padding lanes (past column {n - 1} of each block) read {shown}: each row was loaded "
                         "more than once")
        else:
            found.append(f"the padding lanes (past column {n - 1} of each block) read {shown}: they take part in "
                         "each row's max and sum, so every row shorter than its block comes out wrong")
    view = m.stores[:, :n]
    never = np.argwhere(view == NONE)
    if len(never):
        rows = sorted({int(r) for r, _ in never})
        found.append(f"{len(never)} output element(s) were never stored (rows {_list(rows)})")
    twice = np.argwhere(m.store_counts[:, :n] > 1)
    if len(twice):
        found.append(f"{len(twice)} output element(s) were stored more than once, e.g. row {twice[0][0]}, column "
                     f"{twice[0][1]}: lanes past the end of a row (padding) stored into the next row: the store is "
                     "not masked")
    gap = int((m.stores[:, n:] != NONE).sum())
    if gap:
        found.append(f"{gap} lane(s) were stored in the gap between the rows of a strided output: the rows were "
                     "not stepped by the output's own row stride, or the store is not masked")
    gap = int((m.loads[:, n:] != NONE).sum())
    if gap:
        found.append(f"{gap} lane(s) were loaded from the gap between the rows of a strided input: the rows were "
                     "not stepped by the input's own row stride, or the load is not masked")
    if m.outside.get("store"):
        found.append(f"{m.outside['store']} lane(s) were stored outside every tensor (past the end of the output): "
                     "lanes past a row's end were stored, or whole rows landed beyond the output's last row")
    if m.outside.get("load"):
        found.append(f"{m.outside['load']} lane(s) were loaded from outside every tensor: the load is not masked")
    # A program that wrote one row but read another: the side whose rows each came whole from one program is
    # the right one, so the other side's row offsets are wrong (when both look torn, either may be).
    reads_whole, writes_whole = _whole_rows(m.loads, n), _whole_rows(m.stores, n)
    for r in range(m.stores.shape[0]):
        writers = {int(p) for p in m.stores[r, :n] if p >= 0}
        readers = {int(p) for p in np.unique(m.loads[r, :n]) if p >= 0}
        for p in sorted(writers - readers):
            read_rows = sorted({int(q) for q in np.argwhere(m.loads[:, :n] == p)[:, 0]})
            if not read_rows:
                continue
            if reads_whole and not writes_whole:
                found.append(f"program {p} read input row(s) {_list(read_rows)} whole but wrote into output row "
                             f"{r}: its output row offset is wrong (the output's rows are {m.y_step} apart)")
            elif writes_whole and not reads_whole:
                found.append(f"program {p} wrote output row {r} but read input row(s) {_list(read_rows)}: its "
                             f"input row offset is wrong (the input's rows are {m.x_step} apart)")
            else:
                found.append(f"program {p} wrote row {r} but read row(s) {_list(read_rows)}: its input or its "
                             "output row offset is wrong")
    return found


def _whole_rows(owner: np.ndarray, n: int) -> bool:
    """Whether every row's first ``n`` elements were all loaded (or stored) by one and the same program."""
    view = owner[:, :n]
    return bool((view >= 0).all() and (view == view[:, :1]).all())


def _list(values: list[int], most: int = 6) -> str:
    shown = ", ".join(str(v) for v in values[:most])
    return shown + (f", … ({len(values)} in all)" if len(values) > most else "")


def _row_padding(m: LaneMaps, rows: int) -> list[list[float]]:
    """The values each row's program read in its padding lanes (one program per row), or [] per row."""
    return [list(m.padding.get(r, np.array([]))[:8]) for r in range(rows)]


def draw_maps(m: LaneMaps, title: str = "") -> Figure:
    """Two grids over the tensors: x coloured by the program that loaded each element, y by the one that stored it.
    After each row of x, hatched: the padding lanes of that row's program and the value each one read."""
    rows = m.loads.shape[0]
    pads = _row_padding(m, rows) if m.padding and len(m.padding) <= rows else [[] for _ in range(rows)]
    n_pad = max((len(p) for p in pads), default=0)
    widest = max(m.loads.shape[1] + (n_pad + 0.5 if n_pad else 0), m.stores.shape[1])
    show_values = rows * m.n_cols <= 96
    fig = Figure(figsize=(1.0 + 0.42 * widest, 1.0 + 0.3 * 2 * rows))
    axes = fig.subplots(2, 1)
    for ax, owner, values, label in ((axes[0], m.loads, m.x, "input x: program that loaded each element"),
                                     (axes[1], m.stores, m.y, "output y: program that stored each element")):
        stride = owner.shape[1]
        for r in range(rows):
            for c in range(stride):
                p = int(owner[r, c])
                in_view = c < m.n_cols
                face = ("white" if p == NONE else "#D55E00" if p == SEVERAL else PALETTE[p % len(PALETTE)])
                ax.add_patch(Rectangle((c, rows - 1 - r), 0.95, 0.9, facecolor=face, alpha=0.85 if p != NONE else 1,
                                       edgecolor="black" if in_view else "#999999", hatch=None if in_view else "//"))
                text = "" if p == NONE else "2+" if p == SEVERAL else str(p)
                if show_values and in_view and owner is m.stores:
                    text += ("\n" if text else "") + ("never" if p == NONE else f"{values[r, c]:.2f}")
                elif p == NONE and owner is m.stores and in_view:
                    text = "—"
                ax.text(c + 0.475, rows - 1 - r + 0.45, text, ha="center", va="center", fontsize=7)
            if owner is m.loads:  # the padding lanes of this row's program, after a gap
                for k, v in enumerate(pads[r]):
                    bad = v != float("-inf")
                    ax.add_patch(Rectangle((stride + 0.5 + k, rows - 1 - r), 0.95, 0.9, facecolor="#FAD7C4" if bad
                                           else "#EEEEEE", edgecolor="#999999", hatch="//"))
                    ax.text(stride + 0.5 + k + 0.475, rows - 1 - r + 0.45, pictures.fmt(v), ha="center",
                            va="center", fontsize=7, color="#D55E00" if bad else "#555555")
        if owner is m.loads and n_pad:
            ax.text(stride + 0.5 + n_pad / 2, rows + 0.1, "padding lanes: value read", ha="center", va="bottom",
                    fontsize=7, color="#555555")
        ax.set_xlim(0, widest)
        ax.set_ylim(0, rows)
        ax.set_yticks([rows - 1 - r + 0.45 for r in range(rows)], [f"row {r}" for r in range(rows)])
        ax.set_xticks([c + 0.475 for c in range(stride)], [str(c) for c in range(stride)], fontsize=7)
        ax.set_title(label, loc="left", fontsize=pictures.FONT - 2)
        for side in ("top", "right", "left", "bottom"):
            ax.spines[side].set_visible(False)
        ax.tick_params(length=0)
    if title:  # the findings are printed beside the picture; the picture keeps only its title
        fig.suptitle(title, x=0.01, ha="left", fontsize=pictures.FONT - 1)
    fig.tight_layout()
    return fig


def draw(launcher, x: torch.Tensor, title: str = "", **kwargs) -> Figure:
    """``softmax_lab.draw``: the lane map of ``launcher(x)`` (a small 2-D ``x``), with what looks wrong printed."""
    maps = lane_map(launcher, x, padding="-inf", **kwargs)
    for line in maps.findings:
        print("  " + line)
    return draw_maps(maps, title)


def show_on_failure(launcher, make_input=None, title: str = "", padding: str | None = "-inf",
                    effect: bool = False) -> None:
    """What a kernel check prints after a FAIL: the lane map of ``launcher(x)`` on a small input (by default 4 rows
    of 10 in a tensor with rows of 14, so both the padding and the row stride show): a compact picture where a
    notebook can show one, then its findings as text (the check's verdict line follows, last). Drawing problems
    never hide the check's own verdict. ``effect``: the text says what the padding lanes did to the rows, not
    which value they read (for chapters where choosing that value is the exercise)."""
    from .device import DEVICE

    gen = torch.Generator().manual_seed(0)
    x = make_input() if make_input else torch.randn(4, 14, generator=gen).to(DEVICE)[:, :10]
    layout = "contiguous" if x.is_contiguous() else f"a view with rows {x.stride(0)} apart"
    try:
        maps = lane_map(launcher, x, padding=padding, effect=effect)
    except Exception as err:
        print(f"(no lane map: your kernel raised {type(err).__name__} on a {x.shape[0]} x {x.shape[1]} input)")
        return
    try:
        from IPython import get_ipython
        from IPython.display import Image, display
    except ImportError:
        get_ipython = None
    if get_ipython is not None and get_ipython() is not None:
        display(Image(pictures.png(draw_maps(maps, title), dpi=72)))
    read = padding_values(maps)
    pads = f"; its padding lanes read {', '.join(pictures.fmt(v) for v in read)}" if read else ""
    if effect and read:
        pads = ("; its padding lanes took part in the rows' max and sum" if padding_counted(maps)
                else "; its padding lanes added nothing to any row's max or sum")
    if maps.y_step != x.shape[1]:
        layout += f", into an output with rows {maps.y_step} apart"
    print(f"lane map of your kernel on a {x.shape[0]} x {x.shape[1]} input ({layout}){pads}:")
    for line in maps.findings or ["no lane out of place: every output element stored once, by its own row's program"]:
        print("  " + line)
