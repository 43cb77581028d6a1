"""Small ipywidgets used by the chapters: a stepper that walks through a computation one step at a time.

    Stepper([("find the max", "max = 1002"), ("shift", "x - max = [-2, -1, 0]")], title="[1000, 1001, 1002]")

shows one step with "◀ prev" / "next ▶" buttons. Works offline in JupyterLab 4 with ipywidgets 8 (no CDN).
The rendered step also goes to ``stepper.text`` so tests can read what is shown.
"""
from __future__ import annotations

import html

import ipywidgets as widgets


class Stepper(widgets.VBox):
    """Step through ``steps``: a list of (title, body) pairs; body is plain text (shown monospaced)."""

    def __init__(self, steps: list[tuple[str, str]], title: str = ""):
        if not steps:
            raise ValueError("Stepper needs at least one step")
        self.steps = list(steps)
        self.index = 0
        self.prev_button = widgets.Button(description="◀ prev", layout=widgets.Layout(width="90px"))
        self.next_button = widgets.Button(description="next ▶", layout=widgets.Layout(width="90px"))
        self.counter = widgets.Label()
        self.view = widgets.HTML()
        self.prev_button.on_click(lambda _: self.go(self.index - 1))
        self.next_button.on_click(lambda _: self.go(self.index + 1))
        header = [widgets.HTML(f"<b>{html.escape(title)}</b>")] if title else []
        controls = widgets.HBox([self.prev_button, self.next_button, self.counter])
        super().__init__(header + [controls, self.view])
        self.add_class("softmax-lab-stepper")
        self.go(0)

    @property
    def text(self) -> str:
        step_title, body = self.steps[self.index]
        return f"Step {self.index + 1}/{len(self.steps)}: {step_title}\n{body}"

    def go(self, i: int) -> None:
        self.index = max(0, min(i, len(self.steps) - 1))
        step_title, body = self.steps[self.index]
        self.counter.value = f"step {self.index + 1} of {len(self.steps)}"
        self.view.value = (f"<div class='softmax-lab-step'><b>{html.escape(step_title)}</b>"
                           f"<pre style='margin:4px 0'>{html.escape(body)}</pre></div>")
        self.prev_button.disabled = self.index == 0
        self.next_button.disabled = self.index == len(self.steps) - 1


def padding_trace(row, block: int, pad: float) -> list[tuple[str, list[float]]]:
    """What one program computes for ``row`` in a block of ``block`` lanes whose padding lanes read ``pad``.

    Returns [(step, values per lane)] in float32, as a kernel would: loaded, minus max, exp, sum, output.
    """
    import torch

    n = len(row)
    if block < n:
        raise ValueError(f"block ({block}) must hold the row ({n})")
    x = torch.tensor(list(row) + [pad] * (block - n), dtype=torch.float32)
    m = x.max()
    e = torch.exp(x - m)
    s = e.sum()
    y = e / s
    return [("loaded lanes", x.tolist()), ("max", [m.item()]), ("x - max", (x - m).tolist()),
            ("exp(x - max)", e.tolist()), ("sum", [s.item()]), ("output (stored lanes only)", y[:n].tolist())]


def _fmt(v: float) -> str:
    if v != v:
        return "nan"
    if v in (float("inf"), float("-inf")):
        return "-inf" if v < 0 else "inf"
    if v == int(v):
        return str(int(v))
    return f"{v:.4f}" if abs(v) >= 1e-4 else f"{v:.2e}"


class PaddingExplorer(widgets.VBox):
    """Switch the value padding lanes read (-inf or 0) and watch the max, the exps, the sum and the output.

        PaddingExplorer([-1002, -1001, -1000], block=4)
    """

    PADS = {"-inf": float("-inf"), "0": 0.0}

    def __init__(self, row, block: int = 4, title: str = ""):
        self.row = [float(v) for v in row]
        self.block = block
        self.toggle = widgets.ToggleButtons(options=list(self.PADS), value="-inf", description="padding:")
        self.view = widgets.HTML()
        self.toggle.observe(lambda change: self._render(), names="value")
        header = [widgets.HTML(f"<b>{html.escape(title)}</b>")] if title else []
        super().__init__(header + [self.toggle, self.view])
        self.add_class("softmax-lab-padding")
        self._render()

    def set_padding(self, name: str) -> None:
        self.toggle.value = name

    @property
    def steps(self):
        return padding_trace(self.row, self.block, self.PADS[self.toggle.value])

    @property
    def text(self) -> str:
        lines = [f"row {self.row} in a block of {self.block}, padding = {self.toggle.value}"]
        lines += [f"{name:<28}" + "  ".join(_fmt(v) for v in values) for name, values in self.steps]
        return "\n".join(lines)

    def _render(self) -> None:
        n = len(self.row)
        rows = []
        for name, values in self.steps:
            cells = []
            for i, v in enumerate(values):
                pad_lane = len(values) == self.block and i >= n
                style = " style='color:#b00'" if pad_lane else ""
                cells.append(f"<td{style}>{html.escape(_fmt(v))}</td>")
            rows.append(f"<tr><th style='text-align:left'>{html.escape(name)}</th>{''.join(cells)}</tr>")
        self.view.value = ("<table class='softmax-lab-padding-table'>" + "".join(rows) + "</table>"
                           "<small>red: padding lanes (never stored, but they take part in max and sum)</small>")


def padding_stepper(row, block: int = 4, pad: float = float("-inf"), title: str = "") -> Stepper:
    """A Stepper through ``padding_trace``: what one program computes for ``row``, one step at a time."""
    steps = []
    for name, values in padding_trace(row, block, pad):
        shown = _fmt(values[0]) if len(values) == 1 else "[" + ", ".join(_fmt(v) for v in values) + "]"
        steps.append((name, f"{name} = {shown}"))
    shown_row = "[" + ", ".join(_fmt(v) for v in row) + "]"
    return Stepper(steps, title=title or f"{shown_row} in a block of {block}, padding lanes read {_fmt(pad)}")
