"""Where a learner's function comes from: the package's own kernels and functions are recognised, whether imported
under another name, aliased, or wrapped (a partial, a decorator, a lambda or a function that only calls them).

    origin.is_package_object(my_fused_kernel)
    # -> "softmax_lab.kernels.fused.fused_softmax_kernel"                 (imported or aliased)
    # -> "softmax_lab.kernels.fused.fused_softmax, called by my_fused_softmax"   (wrapped)
    # -> None                                                             (the learner's own code)

A check prints "this is softmax_lab's kernel, not yours" when it gets a name back. Code pasted from the package
is the learner's own object (defined in the notebook): ``softmax-lab similarity`` is what catches that.
"""
from __future__ import annotations

import functools
import sys
import types
from pathlib import Path

PACKAGE = Path(__file__).resolve().parent
# What a learner's code may call freely: tools that compute no answer, and helpers an exercise's own skeleton calls
# (qualified-name prefixes; a check adds more with ``allowed=``).
ALLOWED = ("softmax_lab.hints.", "softmax_lab.measure.", "softmax_lab.doctor.", "softmax_lab.pictures.",
           "softmax_lab.widgets.", "softmax_lab.device.", "softmax_lab.lanemap.",
           "softmax_lab.cuda_layer.kernels.launch_rows", "softmax_lab.kernels._launch.default_num_warps")
LIBRARIES = tuple({str(Path(p).resolve()) for p in (sys.prefix, sys.base_prefix, sys.exec_prefix)})
DEPTH = 4  # how many of the learner's own functions deep a call to the package is followed


def _inner(obj):
    """The Python function under a kernel or wrapper (Triton's JITFunction, Autotuner, Heuristics: ``.fn``;
    numba's dispatcher: ``.py_func``; functools: ``.func`` / ``__wrapped__``; a bound method: ``__func__``)."""
    for _ in range(10):
        for attr in ("fn", "py_func", "func", "__wrapped__", "__func__"):
            inner = getattr(obj, attr, None)
            if inner is not None and inner is not obj and callable(inner):
                obj = inner
                break
        else:
            return obj
    return obj


def _in_package(path: str | None) -> bool:
    try:
        return path is not None and PACKAGE in Path(path).resolve().parents
    except (OSError, ValueError):
        return False


def _qualified(obj) -> str:
    """module.qualname, from where its code lives when it has code (a copy under another name keeps it)."""
    fn = _inner(obj)
    code = getattr(fn, "__code__", None)
    if code is not None and _in_package(code.co_filename):
        rel = Path(code.co_filename).resolve().relative_to(PACKAGE.parent).with_suffix("")
        parts = rel.parts[:-1] if rel.name == "__init__" else rel.parts
        return ".".join((*parts, code.co_qualname))
    module = getattr(fn, "__module__", None) or getattr(obj, "__module__", None) or "softmax_lab"
    return f"{module}.{getattr(fn, '__qualname__', None) or getattr(obj, '__name__', repr(obj))}"


def _package_callable(obj, allowed: tuple[str, ...]) -> str | None:
    """The qualified name when ``obj`` itself (unwrapped) is the package's: its code lives in the package."""
    op = getattr(obj, "_qualified_op_name", None) or getattr(obj, "_name", None)
    if isinstance(op, str) and op.startswith("softmax_lab::"):  # torch.ops.softmax_lab.*
        return "torch.ops." + op.split(".")[0].replace("::", ".")
    if isinstance(obj, types.ModuleType):
        return None
    fn = _inner(obj)
    code = getattr(fn, "__code__", None)
    module = getattr(fn, "__module__", None) or ""
    mine = _in_package(code.co_filename) if code is not None else module.startswith("softmax_lab")
    if not mine:
        return None
    name = _qualified(obj)
    return None if name.startswith((*ALLOWED, *allowed)) else name


def _learner_code(fn) -> bool:
    """Code of the learner's own (a notebook cell, a script): not the package's, not a library's."""
    code = getattr(fn, "__code__", None)
    if code is None or _in_package(code.co_filename):
        return False
    path = code.co_filename
    return not (path.startswith("<frozen") or "-packages" in path or path.startswith(LIBRARIES))


def _codes(code: types.CodeType):
    yield code
    for const in code.co_consts:
        if isinstance(const, types.CodeType):
            yield from _codes(const)


def _referenced(fn) -> list:
    """The objects a function's code reaches through its globals and closure: ``name`` and ``name.attr.attr``."""
    code = getattr(fn, "__code__", None)
    if code is None:
        return []
    scope = dict(getattr(fn, "__globals__", {}) or {})
    for name, cell in zip(code.co_freevars, getattr(fn, "__closure__", None) or ()):
        try:
            scope[name] = cell.cell_contents
        except ValueError:  # an empty cell
            pass
    found = []
    for c in _codes(code):
        attrs = set(c.co_names)
        for name in (*c.co_names, *c.co_freevars):
            if name not in scope:
                continue
            obj = scope[name]
            found.append(obj)
            frontier = [obj]
            for _ in range(3):  # K.fused_softmax_kernel, softmax_lab.kernels.fused.fused_softmax
                frontier = [getattr(o, a) for o in frontier if isinstance(o, types.ModuleType)
                            for a in attrs if hasattr(o, a)]
                found += frontier
    return found


def is_package_object(obj, allowed: tuple[str, ...] = ()) -> str | None:
    """``softmax_lab``'s qualified name of ``obj`` when it is, or calls, one of the package's own functions or
    kernels (followed through the learner's own functions), else None. ``allowed``: more qualified-name prefixes
    the exercise lets learners call (``ALLOWED`` always is)."""
    seen: set[int] = set()

    def walk(candidate, depth: int) -> str | None:
        found = _package_callable(candidate, allowed)
        if found:
            return found
        if isinstance(candidate, functools.partial):
            return walk(candidate.func, depth)
        fn = _inner(candidate)
        if id(fn) in seen or depth >= DEPTH or not isinstance(fn, types.FunctionType) or not _learner_code(fn):
            return None
        seen.add(id(fn))
        for ref in _referenced(fn):
            if isinstance(ref, types.ModuleType) or not callable(ref):
                continue
            inner = walk(ref, depth + 1)
            if inner:
                own = getattr(fn, "__qualname__", getattr(fn, "__name__", "your function"))
                return inner if ", called by " in inner else f"{inner}, called by {own}"
        return None

    return walk(obj, 0)


def describe(obj, what: str = "kernel") -> str | None:
    """The sentence a check prints, or None for the learner's own code."""
    found = is_package_object(obj)
    if found is None:
        return None
    return (f"this is softmax_lab's {what}, not yours ({found}): write your own in the exercise cell "
            "(importing, renaming or wrapping the course's code earns no points)")


__all__ = ["is_package_object", "describe"]

if __name__ == "__main__":  # python -m softmax_lab.origin module:name
    import importlib

    mod, _, attr = sys.argv[1].partition(":")
    print(is_package_object(getattr(importlib.import_module(mod), attr)))
