"""Drive a notebook in JupyterLab 4 through Chromium, as a learner would: open, run, read what is shown, type.

Clicks and keys go through the page (menus, buttons, the CodeMirror editor). To *read* state reliably the test
server runs with ``--LabApp.expose_app_in_browser``, so ``window.jupyterapp`` gives the kernel status and the cell
models (outputs, execution counts); what must be *seen* (figures, widgets, stepper text) is read from the DOM.

Every failure goes through ``Notebook.fail``: a screenshot under test-output/ui/ and a message naming it.
"""
from __future__ import annotations

import contextlib
import re
import time
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
OUT = ROOT / "test-output" / "ui"  # screenshots and the JupyterLab log
FIXTURES = ROOT / "tests" / "fixtures" / "ui"
WIDGET_MIME = "application/vnd.jupyter.widget-view+json"

# The open notebook panel, its kernel and cells, from the exposed application.
JS_PANEL = "(() => { const w = window.jupyterapp && window.jupyterapp.shell.currentWidget;" \
           " return (w && w.content && w.sessionContext) ? w : null; })()"


class Notebook:
    def __init__(self, page, lab, rel_path: str, out_dir: Path, label: str):
        self.page, self.lab, self.rel_path, self.out, self.label = page, lab, rel_path, out_dir, label
        self.out.mkdir(parents=True, exist_ok=True)
        self.t0 = time.monotonic()

    def log(self, what: str) -> None:
        """Progress with elapsed seconds (shown with -s, and kept in test-output/ui/timings.log)."""
        line = f"[{self.label}] {time.monotonic() - self.t0:6.1f}s {what}"
        print(line)
        with open(self.out / "timings.log", "a") as fh:
            fh.write(line + "\n")

    # ------------------------------------------------------------------ failures and screenshots
    def screenshot(self, name: str) -> Path:
        path = self.out / f"{name}.png"
        self.page.screenshot(path=str(path))
        return path

    def fail(self, message: str):
        try:
            shot = f"screenshot: {self.screenshot(f'FAILED-{self.label}')}"
        except Exception as err:
            shot = f"(no screenshot: {err})"
        console = [c for c in getattr(self.page, "console_errors", []) if "favicon" not in c][-5:]
        extra = ("\nbrowser console errors:\n  " + "\n  ".join(c[:300] for c in console)) if console else ""
        pytest.fail(f"[{self.label}: {self.rel_path}] {message}\n{shot}{extra}", pytrace=False)

    def check(self, ok: bool, message: str) -> None:
        if not ok:
            self.fail(message)

    @contextlib.contextmanager
    def step(self, what: str):
        """Turn an unexpected exception (a Playwright timeout, say) into a clear failure with a screenshot."""
        try:
            yield
        except pytest.fail.Exception:
            raise
        except Exception as err:
            self.fail(f"while {what}: {type(err).__name__}: {str(err).splitlines()[0] if str(err) else ''}")

    def wait_for(self, js: str, what: str, timeout: float, arg=None, poll: float = 0.25, describe: str = ""):
        """Poll a JS function (of arg) until truthy; fail naming `what` (and `describe`'s state) when it never is."""
        deadline = time.monotonic() + timeout
        value = None
        while time.monotonic() < deadline:
            value = self.page.evaluate(js, arg)
            if value:
                return value
            time.sleep(poll)
        state = self.page.evaluate(describe) if describe else value
        self.fail(f"timed out after {timeout:.0f}s waiting for {what} (last state: {state!r})")

    # ------------------------------------------------------------------ open and run
    def open(self, timeout: float = 90) -> None:
        workspace = re.sub(r"[^a-z0-9]+", "-", self.label.lower())
        with self.step("loading JupyterLab"):
            self.page.goto(self.lab.url(f"/lab/workspaces/{workspace}/tree/{self.rel_path}?reset"),
                           wait_until="domcontentloaded", timeout=60_000)
        self.wait_for(f"""() => {{
            if (!window.jupyterapp) return false;  // JupyterLab still loading
            const w = {JS_PANEL};
            if (w && w.context.isReady && w.context.path === {self.rel_path!r}) return true;
            window.__uiOpen = w ? `open: ${{w.context.path}}, ready: ${{w.context.isReady}}` :
                `current widget: ${{(window.jupyterapp.shell.currentWidget || {{}}).id}}`;
            return false; }}""", "the notebook to open", timeout,
                      describe="() => window.__uiOpen || 'no window.jupyterapp (expose_app_in_browser off?)'")
        self.log("notebook open")
        self.page.evaluate("() => window.jupyterapp.shell.collapseLeft()")  # more notebook in screenshots
        self.wait_idle(timeout, "the kernel to start")
        self.log("kernel idle")

    def kernel_state(self) -> str:
        return self.page.evaluate(f"""() => {{ const w = {JS_PANEL}; if (!w) return 'no notebook';
            const k = w.sessionContext.session && w.sessionContext.session.kernel;
            const dialog = document.querySelector('.jp-Dialog');
            if (dialog) return 'dialog: ' + dialog.innerText.slice(0, 200);
            return k ? k.status + '/' + k.connectionStatus : 'no kernel'; }}""")

    def wait_idle(self, timeout: float, what: str) -> None:
        deadline = time.monotonic() + timeout
        state = ""
        while time.monotonic() < deadline:
            state = self.kernel_state()
            if state == "idle/connected":
                return
            if state.startswith("dialog:"):
                self.fail(f"a dialog blocks the notebook while waiting for {what}: {state}")
            time.sleep(0.25)
        self.fail(f"timed out after {timeout:.0f}s waiting for {what}: kernel is {state!r}")

    def menu(self, top: str, item: str) -> None:
        with self.step(f"choosing {top} > {item} in the menu bar"):
            self.page.locator(".lm-MenuBar-itemLabel", has_text=re.compile(rf"^{re.escape(top)}$")).click()
            self.page.locator(".lm-Menu-itemLabel", has_text=re.compile(rf"^{re.escape(item)}$")).click()

    def run_state(self) -> dict:
        """Code cells (non-blank): queued or running ('*' prompt), and done; executions seen since arm_run()."""
        return self.page.evaluate(f"""() => {{ const w = {JS_PANEL}; const s = {{busy: 0, done: 0, code: 0}};
            for (const c of w.content.widgets) {{
              if (c.model.type !== 'code' || !c.model.sharedModel.getSource().trim()) continue;
              s.code++;
              const p = (c.node.querySelector('.jp-InputPrompt') || {{}}).textContent || '';
              if (p.includes('*')) s.busy++; else if (c.model.executionCount != null) s.done++;
            }}
            const k = w.sessionContext.session && w.sessionContext.session.kernel;
            s.kernel = k ? k.status : 'none';
            s.executed = window.__uiRun ? window.__uiRun.inputs : -1; return s; }}""")

    def arm_run(self) -> None:
        """Count execute_input messages from the kernel from now on: a solution notebook's stored execution
        counts must not pass for a finished run."""
        self.page.evaluate(f"""() => {{ const w = {JS_PANEL}; const k = w.sessionContext.session.kernel;
            if (!window.__uiRun || window.__uiRun.kernel !== k.id) {{
              window.__uiRun = {{kernel: k.id, inputs: 0}};
              k.iopubMessage.connect((_, msg) => {{
                if (msg.header.msg_type === 'execute_input') window.__uiRun.inputs++; }});
            }}
            window.__uiRun.inputs = 0; }}""")

    def wait_run(self, timeout: float, what: str) -> dict:
        """After arm_run() and a run command: wait until a cell ran, no cell is queued and the kernel is idle."""
        deadline = time.monotonic() + timeout
        quiet_since = None
        state: dict = {}
        while time.monotonic() < deadline:
            state = self.run_state()
            if state["executed"] > 0 and state["busy"] == 0 and state["kernel"] == "idle":
                quiet_since = quiet_since or time.monotonic()
                if time.monotonic() - quiet_since > 0.5:  # idle between two queued cells is brief
                    return state
            else:
                quiet_since = None
            time.sleep(0.25)
        self.fail(f"timed out after {timeout:.0f}s waiting for {what}: {state}")

    def run_all(self, timeout: float) -> dict:
        self.arm_run()
        self.menu("Run", "Run All Cells")
        state = self.wait_run(timeout, "Run All Cells")
        self.log(f"Run All Cells done: {state}")
        return state

    # ------------------------------------------------------------------ what the notebook shows
    def cells(self) -> list[dict]:
        """One dict per cell: type, source, tags, outputs (nbformat JSON) and the output area's visible text."""
        return self.page.evaluate(f"""() => {{ const w = {JS_PANEL};
            return w.content.widgets.map((c, i) => ({{
              index: i, type: c.model.type, source: c.model.sharedModel.getSource(),
              tags: (c.model.getMetadata && c.model.getMetadata('tags')) || [],
              count: c.model.type === 'code' ? c.model.executionCount : null,
              outputs: c.model.type === 'code' ? c.model.outputs.toJSON() : [],
              shown: ((c.node.querySelector('.jp-OutputArea') || {{}}).innerText || '') }})); }}""")

    def errors(self) -> list[str]:
        found = []
        for cell in self.cells():
            for out in cell["outputs"]:
                if out.get("output_type") == "error":
                    first = cell["source"].strip().splitlines()[0][:80] if cell["source"].strip() else ""
                    found.append(f"cell {cell['index']} ({first!r}): {out.get('ename')}: "
                                 f"{str(out.get('evalue'))[:300]}")
        return found

    def check_no_errors(self, when: str) -> None:
        """Fail, with the first failing cell in the screenshot, when any cell shows an error output."""
        errors = self.errors()
        if errors:
            first = int(errors[0].split()[1])
            with contextlib.suppress(Exception):
                self.cell_locator(first).evaluate("n => n.scrollIntoView({block: 'center'})")
            self.fail(f"cells show errors {when}:\n  " + "\n  ".join(errors))

    def figures(self) -> dict:
        """image outputs in the model versus <img> shown in output areas (loaded: naturalWidth > 0)."""
        return self.page.evaluate(f"""() => {{ const w = {JS_PANEL}; let model = 0;
            for (const c of w.content.widgets) if (c.model.type === 'code')
              for (const o of c.model.outputs.toJSON()) if (o.data && o.data['image/png']) model++;
            const imgs = [...w.content.node.querySelectorAll('.jp-OutputArea-output img')];
            return {{model, shown: imgs.length, loaded: imgs.filter(i => i.complete && i.naturalWidth > 0).length}};
        }}""")

    def wait_figures(self, timeout: float = 20) -> dict:
        deadline = time.monotonic() + timeout
        while True:
            f = self.figures()
            if f["loaded"] >= f["model"] or time.monotonic() > deadline:
                return f
            time.sleep(0.25)

    def widget_views(self) -> list[dict]:
        """Each widget output in the cell models, and whether a widget view rendered in its output area."""
        return self.page.evaluate(f"""() => {{ const w = {JS_PANEL}; const views = [];
            for (const c of w.content.widgets) {{
              if (c.model.type !== 'code') continue;
              const area = c.node.querySelector('.jp-OutputArea');
              const children = area ? [...area.children].filter(n => n.classList.contains('jp-OutputArea-child'))
                                    : [];
              c.model.outputs.toJSON().forEach((o, j) => {{
                if (!(o.data && o.data['{WIDGET_MIME}'])) return;
                const n = children[j];
                views.push({{ cell: c.model.sharedModel.getSource().split('\\n')[0].slice(0, 60),
                  rendered: !!(n && n.querySelector('.jupyter-widgets')),
                  text: n ? n.innerText.slice(0, 200) : '(no output area)' }});
              }});
            }}
            return views; }}""")

    # ------------------------------------------------------------------ steppers
    def steppers(self):
        return self.page.locator(".jp-Notebook .softmax-lab-stepper")

    @staticmethod
    def _shown(stepper) -> tuple[str, str]:
        counter = re.search(r"step \d+ of \d+", stepper.inner_text())
        return stepper.locator(".softmax-lab-step").inner_text(), counter.group(0) if counter else ""

    def walk_stepper(self, k: int, timeout: float = 15) -> list[str]:
        """Press "next ▶" through stepper k; return the text shown at each step. Checks the counter and prev."""
        stepper = self.steppers().nth(k)
        with self.step(f"reading stepper {k + 1}"):
            stepper.scroll_into_view_if_needed()
            text, counter = self._shown(stepper)
        m = re.fullmatch(r"step 1 of (\d+)", counter.strip())
        self.check(bool(m), f"stepper {k + 1} should start at 'step 1 of N', shows {counter!r}")
        self.check(bool(text.strip()), f"stepper {k + 1} shows an empty step")
        n = int(m.group(1))
        texts = [text]
        nxt = stepper.get_by_role("button", name="next ▶")
        prev = stepper.get_by_role("button", name="◀ prev")
        for i in range(1, n):
            with self.step(f"pressing 'next ▶' on stepper {k + 1} (step {i} of {n})"):
                nxt.click(timeout=5000)
            expected_counter = f"step {i + 1} of {n}"
            deadline = time.monotonic() + timeout
            while True:
                text, counter = self._shown(stepper)
                if counter.strip() == expected_counter and text != texts[-1]:
                    break
                if time.monotonic() > deadline:
                    self.fail(f"stepper {k + 1}: pressing 'next ▶' at step {i} of {n} did not change what is shown "
                              f"within {timeout:.0f}s (still {counter!r}: {texts[-1]!r}); is the kernel "
                              f"connected and the widget's comm alive?")
                time.sleep(0.1)
            texts.append(text)
        self.log(f"stepper {k + 1}: walked {n} steps")
        with self.step(f"reading the buttons of stepper {k + 1}"):
            self.check(n == 1 or nxt.is_disabled(), f"stepper {k + 1}: 'next ▶' still enabled at the last step")
            if n > 1:
                prev.click(timeout=5000)
        if n > 1:
            deadline = time.monotonic() + timeout
            while self._shown(stepper)[0] != texts[-2]:
                if time.monotonic() > deadline:
                    self.fail(f"stepper {k + 1}: '◀ prev' from the last step did not go back to step {n - 1}")
                time.sleep(0.1)
        return texts

    def stepper_goto(self, k: int, index: int, timeout: float = 15) -> None:
        """Press prev/next on stepper k until it shows step index + 1."""
        stepper = self.steppers().nth(k)
        deadline = time.monotonic() + timeout
        while True:
            counter = self._shown(stepper)[1]
            m = re.fullmatch(r"step (\d+) of \d+", counter.strip())
            if m and int(m.group(1)) == index + 1:
                return
            if time.monotonic() > deadline:
                self.fail(f"stepper {k + 1} did not reach step {index + 1} (shows {counter!r})")
            name = "◀ prev" if m and int(m.group(1)) > index + 1 else "next ▶"
            with self.step(f"pressing {name!r} on stepper {k + 1}"):
                stepper.get_by_role("button", name=name).click(timeout=5000)
                self.page.wait_for_function(
                    "([n, c]) => !(n.innerText.match(/step \\d+ of \\d+/) || [''])[0].startsWith(c)",
                    arg=[stepper.element_handle(), counter.strip()], timeout=timeout * 1000)

    # ------------------------------------------------------------------ padding explorers (chapter 2)
    def explorers(self):
        return self.page.locator(".jp-Notebook .softmax-lab-padding")

    def _table(self, explorer) -> dict[str, str]:
        return explorer.evaluate("""n => Object.fromEntries([...n.querySelectorAll('table tr')].map(tr => [
            (tr.querySelector('th') || {innerText: ''}).innerText.trim(),
            [...tr.querySelectorAll('td')].map(td => td.innerText.trim()).join(' ')]))""")

    def toggle_explorer(self, k: int, timeout: float = 15) -> dict[str, dict[str, str]]:
        """Click each padding option of explorer k; return {option: table shown as {row: values}}."""
        explorer = self.explorers().nth(k)
        with self.step(f"reading padding explorer {k + 1}"):
            explorer.scroll_into_view_if_needed()
            buttons = explorer.locator("button.widget-toggle-button")
            options = [b.strip() for b in buttons.all_inner_texts()]
            active = explorer.locator("button.widget-toggle-button.mod-active").inner_text().strip()
            first = self._table(explorer)
        self.check(len(options) >= 2 and bool(first), f"padding explorer {k + 1}: expected padding buttons and a "
                                                       f"table, got buttons {options} and table {first}")
        tables = {active: first}
        for option in [o for o in options if o != active] + [active]:
            before = self._table(explorer)
            with self.step(f"clicking padding {option!r} in explorer {k + 1}"):
                explorer.get_by_role("button", name=option, exact=True).click(timeout=5000)
            deadline = time.monotonic() + timeout
            while True:
                table = self._table(explorer)
                if option == active and table == first or option != active and table != before:
                    break
                if time.monotonic() > deadline:
                    self.fail(f"padding explorer {k + 1}: clicking {option!r} did not change the table within "
                              f"{timeout:.0f}s (shows {table}); is the widget's comm to the kernel alive?")
                time.sleep(0.1)
            tables.setdefault(option, table)
        self.log(f"padding explorer {k + 1}: toggled {options}")
        return tables

    # ------------------------------------------------------------------ editing
    def cell_locator(self, index: int):
        return self.page.locator(".jp-Notebook .jp-Cell").nth(index)

    def replace_source(self, index: int, source: str) -> None:
        """Click into cell `index`, select all, and paste `source` (through the clipboard, as a learner would)."""
        cell = self.cell_locator(index)
        editor = cell.locator(".cm-content")
        holds = """([i, want]) => window.jupyterapp.shell.currentWidget.content.widgets[i].model.sharedModel
                                   .getSource() === want"""
        with self.step(f"pasting into cell {index}"):
            cell.evaluate("n => n.scrollIntoView({block: 'center'})")
            editor.click()
            self.page.keyboard.press("ControlOrMeta+a")
            self.page.evaluate("t => navigator.clipboard.writeText(t)", source)
            self.page.keyboard.press("ControlOrMeta+v")
            try:
                self.page.wait_for_function(holds, arg=[index, source], timeout=5000)
                return
            except Exception:
                self.log("clipboard paste did not arrive; dispatching a paste event instead")
            editor.click()
            self.page.keyboard.press("ControlOrMeta+a")
            editor.evaluate("""(n, t) => { const data = new DataTransfer(); data.setData('text/plain', t);
                n.dispatchEvent(new ClipboardEvent('paste', {clipboardData: data, bubbles: true, cancelable: true}));
            }""", source)
        shown = self.wait_for(holds, f"cell {index} to hold the pasted solution", 10, arg=[index, source])
        self.check(bool(shown), f"cell {index} does not hold the pasted solution")

    def execution_count(self, index: int):
        return self.page.evaluate("i => window.jupyterapp.shell.currentWidget.content.widgets[i].model"
                                  ".executionCount", index)

    def run_cells(self, first: int, n: int, timeout: float) -> None:
        """Click into cell `first` and press Shift+Enter n times (run, move on); wait until all n ran."""
        before = [self.execution_count(first + j) or 0 for j in range(n)]
        with self.step(f"running cells {first}..{first + n - 1} with Shift+Enter"):
            cell = self.cell_locator(first)
            cell.scroll_into_view_if_needed()
            cell.locator(".cm-content").click()
            for _ in range(n):
                self.page.keyboard.press("Shift+Enter")
        self.wait_for("""([first, before]) => { const cells = window.jupyterapp.shell.currentWidget.content.widgets;
                           return before.every((b, j) => (cells[first + j].model.executionCount || 0) > b); }""",
                      f"cells {first}..{first + n - 1} to run", timeout, arg=[first, before])
        self.wait_idle(timeout, f"cells {first}..{first + n - 1} to finish")
