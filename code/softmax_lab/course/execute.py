"""`softmax-lab build --execute`: re-run solution notebooks in place and store their outputs reproducibly.

A pipeline of nbconvert preprocessors: ``ExecutePreprocessor`` (nbclient, the course kernel, no timing
metadata), ``DropTransientMetadata``, nbconvert's ``CoalesceStreamsPreprocessor`` (consecutive stdout/stderr
chunks joined, as nbval does before comparing: how a print loop is split into chunks depends on timing), and
``StableWidgetState`` (widget model ids renamed in a fixed order). Re-running an unchanged chapter gives the same
file.
"""
from __future__ import annotations

import hashlib
import json
import re
from pathlib import Path

from nbconvert.preprocessors import CoalesceStreamsPreprocessor, ExecutePreprocessor, Preprocessor

from .notebook import KERNEL_NAME, KERNELSPEC, TRANSIENT_METADATA, BuildError, dumps, read

_MODEL_REF = re.compile(r"IPY_MODEL_([0-9a-f]{32})")
WIDGET_VIEW = "application/vnd.jupyter.widget-view+json"
WIDGET_STATE = "application/vnd.jupyter.widget-state+json"


def stable_widget_state(nb, salt: str) -> None:
    """Make saved widget state reproducible: widget model ids are random uuids, so rename them in a fixed
    order (displayed widgets in cell order, then the models they refer to) and drop models no view uses."""
    state = nb.metadata.get("widgets", {}).get(WIDGET_STATE, {}).get("state")
    views = [out["data"][WIDGET_VIEW]["model_id"] for cell in nb.cells if cell.cell_type == "code"
             for out in cell.get("outputs", []) if WIDGET_VIEW in out.get("data", {})]
    if state is None:
        return
    order: list[str] = []

    def visit(mid: str) -> None:
        if mid in order or mid not in state:
            return
        order.append(mid)
        model_state = state[mid].get("state", {})
        for key in sorted(model_state):
            for ref in _MODEL_REF.findall(json.dumps(model_state[key], sort_keys=True)):
                visit(ref)

    for mid in views:
        visit(mid)
    new_id = {mid: hashlib.md5(f"{salt}:{k}".encode()).hexdigest() for k, mid in enumerate(order)}

    def rename(obj):
        if isinstance(obj, dict):
            return {new_id.get(k, k): rename(v) for k, v in obj.items()}
        if isinstance(obj, list):
            return [rename(v) for v in obj]
        if isinstance(obj, str):
            if obj in new_id:
                return new_id[obj]
            return _MODEL_REF.sub(lambda m: "IPY_MODEL_" + new_id.get(m.group(1), m.group(1)), obj)
        return obj

    nb.metadata["widgets"][WIDGET_STATE]["state"] = rename({mid: state[mid] for mid in order})
    for cell in nb.cells:
        for out in cell.get("outputs", []) if cell.cell_type == "code" else []:
            if WIDGET_VIEW in out.get("data", {}):
                out["data"][WIDGET_VIEW] = rename(out["data"][WIDGET_VIEW])


class StableWidgetState(Preprocessor):
    """Saved widget state made reproducible (``stable_widget_state``, salted with the notebook's name)."""

    def preprocess(self, nb, resources):
        stable_widget_state(nb, resources.get("salt", ""))
        return nb, resources


class DropTransientMetadata(Preprocessor):
    """nbclient's per-cell ``execution`` timing and the kernelspec it may rewrite."""

    def preprocess(self, nb, resources):
        for cell in nb.cells:
            for key in TRANSIENT_METADATA:
                cell.metadata.pop(key, None)
        nb.metadata["kernelspec"] = dict(KERNELSPEC)
        return nb, resources


def execute(path: Path, timeout: int = 300, log=print) -> None:
    """Re-run one solution notebook in place with the course kernel and store its outputs deterministically."""
    from nbclient.exceptions import CellExecutionError

    nb = read(path)
    resources = {"metadata": {"path": str(path.parent)}, "salt": path.stem}
    steps = [ExecutePreprocessor(timeout=timeout, kernel_name=KERNEL_NAME, record_timing=False),
             DropTransientMetadata(), CoalesceStreamsPreprocessor(), StableWidgetState()]
    try:
        for step in steps:
            nb, resources = step.preprocess(nb, resources)
    except CellExecutionError as err:
        raise BuildError(f"solutions/{path.name} failed to execute:\n{err}") from None
    path.write_text(dumps(nb), encoding="utf-8")
    log(f"executed solutions/{path.name}")
