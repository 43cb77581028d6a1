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
