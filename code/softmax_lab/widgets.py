"""Small ipywidgets used by the chapters: a stepper that walks through a computation one step at a time.

    Stepper([("find the max", "max = 1002"), ("shift", "x - max = [-2, -1, 0]")], title="[1000, 1001, 1002]")

shows one step with "◀ prev" / "next ▶" buttons. Works offline in JupyterLab 4 with ipywidgets 8 (no CDN).
The rendered step also goes to ``stepper.text`` so tests can read what is shown. With ``picture=f``
(``f(i)`` a matplotlib Figure of step i, ``f(None)`` of all steps; see ``softmax_lab.pictures``) each step is also
drawn, and the saved notebook carries a static PNG of all steps beside the widget, so GitHub, nbviewer and the web
edition show a picture where no widget can run. ``trace_stepper(row)`` and ``online_stepper(row, tile)`` draw your
own row.
"""
from __future__ import annotations

import base64
import html

import ipywidgets as widgets

from . import pictures


class Stepper(widgets.VBox):
    """Step through ``steps``: a list of (title, body) pairs; body is plain text (shown monospaced)."""

    def __init__(self, steps: list[tuple[str, str]], title: str = "", picture=None):
        if not steps:
            raise ValueError("Stepper needs at least one step")
        if picture is not None and not callable(picture):
            raise TypeError("picture must be a function: picture(i) -> matplotlib Figure (i = None: all steps)")
        self.steps = list(steps)
        self.index = 0
        self.picture = picture
        self._pngs: dict = {}
        self.image = widgets.Image(format="png") if picture is not None else None
        self.prev_button = widgets.Button(description="◀ prev", layout=widgets.Layout(width="90px"))
        self.next_button = widgets.Button(description="next ▶", layout=widgets.Layout(width="90px"))
        self.counter = widgets.Label()
        self.view = widgets.HTML()
        self.prev_button.on_click(lambda _: self.go(self.index - 1))
        self.next_button.on_click(lambda _: self.go(self.index + 1))
        header = [widgets.HTML(f"<b>{html.escape(title)}</b>")] if title else []
        controls = widgets.HBox([self.prev_button, self.next_button, self.counter])
        super().__init__(header + [controls, self.view] + ([self.image] if self.image is not None else []))
        self.add_class("softmax-lab-stepper")
        self.go(0)

    def png(self, i: int | None) -> bytes:
        """The drawing of step ``i`` (None: every step), as PNG bytes."""
        if i not in self._pngs:
            self._pngs[i] = pictures.png(self.picture(i))
        return self._pngs[i]

    def _repr_mimebundle_(self, **kwargs):
        # The widget, plus what shows where no widget runs: every step as text, and the drawing of all steps.
        bundle = super()._repr_mimebundle_(**kwargs)
        bundle["text/plain"] = "\n\n".join(f"Step {k + 1}/{len(self.steps)}: {t}\n{b}"
                                            for k, (t, b) in enumerate(self.steps))
        if self.picture is not None:
            bundle["image/png"] = base64.b64encode(self.png(None)).decode("ascii")
        return bundle

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
        if self.image is not None:
            _show_png(self.image, self.png(self.index))


def trace_stepper(row, block: int | None = None, pad: float = float("-inf"), title: str = "") -> Stepper:
    """The stable softmax of your own ``row``, step by step, drawn as lanes (padded to ``block`` lanes)."""
    block = block or len(row)
    steps = pictures.trace_steps(row, block, pad)
    shown = [(name, f"{name} = " + (pictures.fmt(v[0]) if len(v) == 1
                                    else "[" + ", ".join(pictures.fmt(u) for u in v) + "]"))
             for name, v in steps]
    return Stepper(shown, title=title or f"softmax of [{', '.join(pictures.fmt(float(v)) for v in row)}]",
                   picture=lambda i: pictures.trace(row, block, pad, highlight=i))


def online_stepper(row, tile: int, title: str = "") -> Stepper:
    """Online softmax of your own ``row`` in tiles of ``tile``: the running (m, l) drawn after each tile."""
    states = pictures.online_states(row, tile)
    steps = [(f"tile {k + 1} = [{', '.join(pictures.fmt(v) for v in t)}]", f"m = {pictures.fmt(m)}, l = {l:.3f}")
             for k, (t, m, l) in enumerate(states)]
    return Stepper(steps, title=title or f"online softmax, tiles of {tile}",
                   picture=lambda i: pictures.online_walk(row, tile, highlight=i))


def padding_trace(row, block: int, pad: float) -> list[tuple[str, list[float]]]:
    """What one program computes for ``row`` in a block of ``block`` lanes whose padding lanes read ``pad``.

    Returns [(step, values per lane)] in float32, as a kernel would: loaded, minus max, exp, sum, output
    (``pictures.trace_steps``, named as this chapter names them; the output only on the row's own lanes).
    """
    names = ["loaded lanes", "max", "x - max", "exp(x - max)", "sum", "output (stored lanes only)"]
    steps = [(name, values) for name, (_, values) in zip(names, pictures.trace_steps(row, block, pad))]
    steps[-1] = (steps[-1][0], steps[-1][1][:len(row)])
    return steps


def _show_png(image: widgets.Image, data: bytes) -> None:
    """Show PNG ``data`` in ``image`` at its natural width (read from the PNG header)."""
    image.value = data
    image.layout.width = f"{int.from_bytes(data[16:20], 'big')}px"


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
        self.image = widgets.Image(format="png")
        self.toggle.observe(lambda change: self._render(), names="value")
        header = [widgets.HTML(f"<b>{html.escape(title)}</b>")] if title else []
        super().__init__(header + [self.toggle, self.view, self.image])
        self.add_class("softmax-lab-padding")
        self._pngs: dict = {}
        self._render()

    def png(self, name: str) -> bytes:
        """The lanes drawn with padding ``name`` ('-inf' or '0')."""
        if name not in self._pngs:
            self._pngs[name] = pictures.png(pictures.trace(self.row, self.block, self.PADS[name]))
        return self._pngs[name]

    def _repr_mimebundle_(self, **kwargs):
        # Where no widget runs (GitHub, nbviewer, the web edition): both paddings as text, and the -inf drawing.
        bundle = super()._repr_mimebundle_(**kwargs)
        bundle["text/plain"] = "\n\n".join(self._text(name) for name in self.PADS)
        bundle["image/png"] = base64.b64encode(self.png("-inf")).decode("ascii")
        return bundle

    def set_padding(self, name: str) -> None:
        self.toggle.value = name

    @property
    def steps(self):
        return padding_trace(self.row, self.block, self.PADS[self.toggle.value])

    @property
    def text(self) -> str:
        return self._text(self.toggle.value)

    def _text(self, name: str) -> str:
        lines = [f"row {self.row} in a block of {self.block}, padding = {name}"]
        lines += [f"{step:<28}" + "  ".join(pictures.fmt(v) for v in values)
                  for step, values in padding_trace(self.row, self.block, self.PADS[name])]
        return "\n".join(lines)

    def _render(self) -> None:
        n = len(self.row)
        rows = []
        for name, values in self.steps:
            cells = []
            for i, v in enumerate(values):
                pad_lane = len(values) == self.block and i >= n
                style = " style='color:#b00'" if pad_lane else ""
                cells.append(f"<td{style}>{html.escape(pictures.fmt(v))}</td>")
            rows.append(f"<tr><th style='text-align:left'>{html.escape(name)}</th>{''.join(cells)}</tr>")
        self.view.value = ("<table class='softmax-lab-padding-table'>" + "".join(rows) + "</table>"
                           "<small>red: padding lanes (never stored, but they take part in max and sum)</small>")
        _show_png(self.image, self.png(self.toggle.value))


def padding_stepper(row, block: int = 4, pad: float = float("-inf"), title: str = "") -> Stepper:
    """A Stepper through ``padding_trace``: what one program computes for ``row``, one step at a time."""
    fmt = pictures.fmt
    trace = padding_trace(row, block, pad)
    steps = [(name, f"{name} = " + (fmt(v[0]) if len(v) == 1 else "[" + ", ".join(fmt(u) for u in v) + "]"))
             for name, v in trace]
    shown_row = "[" + ", ".join(fmt(v) for v in row) + "]"
    name, stored = trace[-1]  # drawn over the whole block: the padding lanes are "not stored" (nan)
    drawn = trace[:-1] + [(name, stored + [float("nan")] * (block - len(row)))]
    return Stepper(steps, title=title or f"{shown_row} in a block of {block}, padding lanes read {fmt(pad)}",
                   picture=lambda i: pictures.lanes(drawn, len(row), i, title=f"{shown_row}, padding reads {fmt(pad)}"))
