"""Runs inside a judge sandbox (``python /grader/judge_harness.py``): launch the learner's code on the grader's
inputs and save what comes out. It decides nothing: the grader reads /grader-out and judges, outside.

Standalone on purpose: the ``softmax_lab`` package is not in this sandbox (so no check helper can be called).

/grader/judge.json lists exercises:

* ``kind: kernel``: only the ``@triton.jit`` functions of the learner's cell are defined (after a check of their
  syntax tree: Triton code only; every name is an argument, a local, a few builtins, ``tl.*``/``triton.*`` API
  or another kernel of the cell; every attribute is Triton's public API, resolved here, never a path into
  Python's builtins, modules or the interpreter), with no Python builtins but those few, and the named one is
  launched with the grader's buffers (``/grader/<file>.npy``), grid and arguments. Every output buffer is kept
  whole (guard zones included). On the CPU interpreter, pointer offsets computed from ``tl.program_id`` in
  fewer than 64 bits are recorded; parameters annotated ``tl.int64`` are 64 bits there, as on a GPU
  (``/grader/interpreter_ints.py``, the course's ``interpreter_ints``).
* ``kind: python``: the cell is run, and the named functions are called with the grader's arguments.
* ``kind: numba``: only the ``@cuda.jit`` functions of the learner's cell are defined (after a check of their syntax
  tree, as for Triton: names are arguments, locals, a few builtins, ``cuda.*``/``math.*`` API, numba's scalar types
  or another function of the cell), then the grader's own helpers of the exercise (sent in judge.json); they run in
  numba's CUDA simulator, with the course's simulator additions (warp shuffles, the shared-memory race recorder),
  copied here as ``/grader/cuda_sim.py``: they compute no answer. Each case launches a kernel one block per row,
  or a probe kernel (grader's source) that calls a device function once per thread, and sends back its output
  and, when asked, the race recorder's report.

Results go back on this process's standard output, which nothing else may write to (the learner's prints go to
/dev/null): one JSON line ``{"results": ..., "files": [[name, size], ...]}`` then the ``.npy`` files' bytes.
The grader reads at most what it expects, and decides everything.
"""
from __future__ import annotations

import ast
import builtins
import inspect
import io
import json
import linecache
import math
import os
import sys
import traceback


GPU = (os.environ.get("SOFTMAX_LAB_DEVICE", "").lower() not in ("cpu", "interpreter")
       and any(os.path.exists(p) for p in ("/dev/nvidia0", "/dev/dxg")))
if not GPU:
    os.environ["TRITON_INTERPRET"] = "1"

import numpy as np  # noqa: E402 - this and the rest after TRITON_INTERPRET is decided
import torch  # noqa: E402
import triton  # noqa: E402
import triton.language as tl  # noqa: E402

if GPU and not torch.cuda.is_available():
    GPU = False
DEVICE = torch.device("cuda" if GPU else "cpu")
IN = "/grader"
FILES: dict[str, bytes] = {}  # output name -> .npy bytes, sent after the results

# ------------------------------------------------------------------------------------- kernel source check

# What a kernel's parameter may be annotated with: tl.constexpr, or a type compiled Triton honours (`tl.int64`)
ANNOTATIONS = {f"{m}.{t}" for m in ("tl", "triton.language") for t in (
    "constexpr", "int8", "int16", "int32", "int64", "uint8", "uint16", "uint32", "uint64", "float16", "bfloat16",
    "float32", "float64")}
ALLOWED_BUILTINS = {"range", "float", "int", "min", "max", "len", "bool", "True", "False", "None"}
FORBIDDEN_NODES = (ast.Import, ast.ImportFrom, ast.Lambda, ast.Global, ast.Nonlocal, ast.With, ast.AsyncWith,
                   ast.Try, ast.Yield, ast.YieldFrom, ast.Await, ast.Delete, ast.ClassDef, ast.AsyncFunctionDef,
                   ast.ListComp, ast.SetComp, ast.DictComp, ast.GeneratorExp, ast.NamedExpr, ast.JoinedStr)
# Modules a kernel may name on its way to a function (tl.math.exp, tl.extra.cuda.libdevice.fast_expf ...).
API_MODULES = ("triton.language", "triton.language.math", "triton.language.random", "triton.language.standard",
               "triton.language.extra")
TRITON_TOP = {"cdiv", "next_power_of_2", "language"}  # triton.X a kernel may use
# Attributes of values (tensors, dtypes, constexprs): Triton's public tensor API, nothing that leads out of it.
VALUE_ATTRS = ({n for cls in (tl.tensor, tl.dtype, tl.constexpr, tl.pointer_type, tl.block_type) for n in dir(cls)
                if not n.startswith("_")}
               | {"dtype", "shape", "type", "numel", "value", "T", "element_ty", "scalar", "name", "primitive_bitwidth",
                  "int_bitwidth", "int_signedness", "fp_mantissa_width", "address_space"}) - {"handle"}


class SourceRejected(Exception):
    pass


def _is_jit(dec) -> bool:
    target = dec.func if isinstance(dec, ast.Call) else dec
    return (isinstance(target, ast.Attribute) and target.attr == "jit" and isinstance(target.value, ast.Name)
            and target.value.id == "triton")


def _chain(node) -> tuple[str | None, list[str]]:
    """``a.b.c`` -> ('a', ['b', 'c']); (None, attrs) when the chain starts at an expression."""
    attrs = []
    while isinstance(node, ast.Attribute):
        attrs.append(node.attr)
        node = node.value
    return (node.id if isinstance(node, ast.Name) else None), attrs[::-1]


def _api_module(obj) -> bool:
    if not inspect.ismodule(obj):
        return False
    return obj is tl or any(obj.__name__ == m or obj.__name__.startswith(m + ".") for m in API_MODULES[1:])


def _api_value(obj) -> bool:
    """A function, type or constant of Triton's language (its @jit library functions included), or a number."""
    if isinstance(obj, (bool, int, float)):
        return True
    homes = [getattr(obj, "__module__", None), getattr(getattr(obj, "fn", None), "__module__", None)]
    if type(obj).__module__.startswith("triton.runtime") and isinstance(homes[1], str):
        homes = homes[1:]  # a @triton.jit library function (tl.max, tl.sum ...): where its Python function lives
    elif not isinstance(homes[0], str):
        homes = [type(obj).__module__]
    return all(isinstance(h, str) and (h.startswith("triton.language") or h.startswith("triton._C")) for h in homes[:1])


def _check_api(fn: str, root: str, attrs: list[str]) -> None:
    """``tl.a.b`` / ``triton.a.b``: resolved here on the real modules; every step must stay in Triton's API."""
    text = ".".join([root, *attrs])
    if root == "triton":
        if not attrs or attrs[0] not in TRITON_TOP:
            raise SourceRejected(f"{fn}: `{text}` is not Triton language API")
        if attrs[0] != "language":
            if len(attrs) > 1:
                raise SourceRejected(f"{fn}: `{text}`")
            return
        attrs = attrs[1:]
    if not attrs:
        raise SourceRejected(f"{fn}: `{text}`: the module itself may not be used as a value")
    obj = tl
    for a in attrs:
        if a.startswith("_") or not _api_module(obj):
            if a in VALUE_ATTRS and not inspect.ismodule(obj):
                continue  # tl.float32.primitive_bitwidth: an attribute of an API value
            raise SourceRejected(f"{fn}: `{text}` is not Triton language API")
        obj = getattr(obj, a, None)
        if obj is None:
            raise SourceRejected(f"{fn}: `{text}` does not exist")
        if inspect.ismodule(obj):
            if not _api_module(obj):
                raise SourceRejected(f"{fn}: `{text}` leaves Triton's language API")
        elif not _api_value(obj):
            raise SourceRejected(f"{fn}: `{text}` leaves Triton's language API")
    if inspect.ismodule(obj):
        raise SourceRejected(f"{fn}: `{text}`: a module may not be used as a value")


def _check_kernel(fn: ast.FunctionDef, kernels: set[str]) -> None:
    """Triton code only: names are arguments, locals, tl/triton API, a few builtins and the cell's kernels;
    attributes are Triton's public API (checked against the real modules), never a way out of it."""
    for dec in fn.decorator_list:
        if not _is_jit(dec):
            raise SourceRejected(f"{fn.name}: only @triton.jit may decorate a kernel")
        if isinstance(dec, ast.Call):
            for v in list(dec.args) + [k.value for k in dec.keywords]:
                if not isinstance(v, ast.Constant):
                    raise SourceRejected(f"{fn.name}: @triton.jit(...) arguments must be constants")
    args = fn.args
    names = {a.arg for a in args.posonlyargs + args.args + args.kwonlyargs}
    for default in args.defaults + [d for d in args.kw_defaults if d is not None]:
        if not isinstance(default, ast.Constant):
            raise SourceRejected(f"{fn.name}: default values must be constants")
    for a in args.posonlyargs + args.args + args.kwonlyargs:
        if a.annotation is not None and ast.unparse(a.annotation) not in ANNOTATIONS:
            raise SourceRejected(f"{fn.name}: argument annotations other than tl.constexpr and tl's types")
    if args.vararg or args.kwarg:
        raise SourceRejected(f"{fn.name}: *args/**kwargs")
    parents = {}
    for node in ast.walk(fn):
        for child in ast.iter_child_nodes(node):
            parents[child] = node
    decorators = {id(x) for d in fn.decorator_list for x in ast.walk(d)}
    body = [n for n in ast.walk(fn) if n is not fn and id(n) not in decorators]
    for node in body:
        if isinstance(node, FORBIDDEN_NODES) or isinstance(node, ast.FunctionDef):
            raise SourceRejected(f"{fn.name}: `{type(node).__name__}` is not Triton code")
        if isinstance(node, ast.Attribute) and node.attr.startswith("_"):
            raise SourceRejected(f"{fn.name}: attribute `{node.attr}`")
        if isinstance(node, (ast.Name, ast.arg)):
            ident = node.id if isinstance(node, ast.Name) else node.arg
            if ident.startswith("__"):
                raise SourceRejected(f"{fn.name}: name `{ident}`")
        if isinstance(node, ast.Name) and isinstance(node.ctx, ast.Store):
            if node.id in ("tl", "triton") or node.id in kernels or node.id in ALLOWED_BUILTINS:
                raise SourceRejected(f"{fn.name}: assigns to `{node.id}`")
            names.add(node.id)
    for node in body:
        if isinstance(node, ast.Name) and isinstance(node.ctx, ast.Load):
            if node.id not in names and node.id not in ALLOWED_BUILTINS | {"tl", "triton"} | kernels:
                raise SourceRejected(f"{fn.name}: uses `{node.id}`, defined outside the kernel")
            if node.id in ("tl", "triton") and not isinstance(parents.get(node), ast.Attribute):
                raise SourceRejected(f"{fn.name}: `{node.id}` may only be used as `{node.id}.<function>`")
        outer = parents.get(node)
        if isinstance(node, ast.Attribute) and not (isinstance(outer, ast.Attribute) and outer.value is node):
            root, attrs = _chain(node)
            if root in ("tl", "triton") and root not in names:
                _check_api(fn.name, root, attrs)
            else:
                bad = [a for a in attrs if a not in VALUE_ATTRS]
                if bad:
                    raise SourceRejected(f"{fn.name}: attribute `.{bad[0]}` is not part of Triton's tensor API")
        if isinstance(node, ast.Call):
            f = node.func
            if isinstance(f, ast.Name) and not (f.id in kernels or f.id in names or f.id in ALLOWED_BUILTINS):
                raise SourceRejected(f"{fn.name}: calls `{ast.unparse(node.func)}`")
            if not isinstance(f, (ast.Name, ast.Attribute)):
                raise SourceRejected(f"{fn.name}: calls `{ast.unparse(node.func)}`")


KERNEL_BUILTINS = {n: getattr(builtins, n) for n in ALLOWED_BUILTINS - {"True", "False", "None"}}


def define_kernels(source: str) -> dict:
    """The cell's @triton.jit functions, defined alone (nothing else of the cell runs)."""
    tree = ast.parse(source)
    defs = [n for n in tree.body if isinstance(n, ast.FunctionDef) and any(_is_jit(d) for d in n.decorator_list)]
    kernels = {d.name for d in defs}
    for d in defs:
        _check_kernel(d, kernels)
    module = ast.Module(body=defs, type_ignores=[])
    text = ast.unparse(module) + "\n"
    filename = "<learner-kernels>"
    linecache.cache[filename] = (len(text), None, text.splitlines(True), filename)  # triton reads the source
    ns = {"triton": triton, "tl": tl, "__name__": "learner_kernels", "__builtins__": dict(KERNEL_BUILTINS)}
    exec(compile(text, filename, "exec"), ns)
    return {name: ns[name] for name in kernels}


# ------------------------------------------------------------------------ 64-bit offsets in the interpreter


class _FromPid(np.ndarray):
    """A numpy array derived from tl.program_id (numpy carries the subclass through arithmetic)."""


NARROW = []  # (kernel argument position unknown) one entry per addptr with a narrow pid-derived offset


def _honour_int_annotations() -> None:
    """Parameters annotated ``tl.int64`` take 64-bit ints in the interpreter too, as on a GPU (the course's
    ``interpreter_ints``, copied here as /grader/interpreter_ints.py: it computes no answer)."""
    from triton.runtime import interpreter as it

    if IN not in sys.path:
        sys.path.insert(0, IN)
    import interpreter_ints

    interpreter_ints.honour(it)


def _arm_int64_probe() -> None:
    from triton.runtime import interpreter as it

    B = it.InterpreterBuilder
    if getattr(B, "_judge_armed", False):
        return
    B._judge_armed = True
    get_pid, addptr, splat, bcast = B.create_get_program_id, B.create_addptr, B.create_splat, B.create_broadcast

    def create_get_program_id(self, axis):
        h = get_pid(self, axis)
        h.data = h.data.view(_FromPid)
        return h

    def create_addptr(self, ptr, offset):
        if isinstance(offset.data, _FromPid) and offset.data.dtype.itemsize < 8 and PROBE["on"]:
            NARROW.append(str(offset.data.dtype))
        return addptr(self, ptr, offset)

    def tagged(h, src):
        if isinstance(src.data, _FromPid) and not isinstance(h.data, _FromPid):
            h.data = np.asarray(h.data).view(_FromPid)
        return h

    B.create_get_program_id, B.create_addptr = create_get_program_id, create_addptr
    B.create_splat = lambda self, ret_ty, arg: tagged(splat(self, ret_ty, arg), arg)
    B.create_broadcast = lambda self, arg, shape: tagged(bcast(self, arg, shape), arg)


PROBE = {"on": False}

# ---------------------------------------------------------------------------------------------- buffers

DTYPES = {"float32": torch.float32, "float16": torch.float16, "bfloat16": torch.bfloat16, "float64": torch.float64,
          "int32": torch.int32, "int64": torch.int64}


def _load_buffer(spec: dict) -> torch.Tensor:
    arr = np.load(os.path.join(IN, os.path.basename(spec["file"])), allow_pickle=False)
    t = torch.from_numpy(np.ascontiguousarray(arr))
    if spec["dtype"] == "bfloat16":
        t = t.view(torch.int16).view(torch.bfloat16)
    if not spec.get("size"):
        return t.to(DEVICE)
    big = torch.zeros(int(spec["size"]), dtype=t.dtype, device=DEVICE)  # windows of values, zeros elsewhere
    at = 0
    for start, length in spec["windows"]:
        big[int(start): int(start) + int(length)] = t[at: at + int(length)].to(DEVICE)
        at += int(length)
    return big


def _pointer(t: torch.Tensor, spec: dict) -> torch.Tensor:
    return t[int(spec.get("base", 0)):] if spec.get("base") else t


def _save_buffer(t: torch.Tensor, dtype: str, name: str, spec: dict | None = None) -> None:
    if spec and spec.get("size"):
        t = torch.cat([t[int(s): int(s) + int(n)] for s, n in spec["windows"]])
    t = t.detach().cpu()
    arr = t.view(torch.int16).numpy() if dtype == "bfloat16" else t.numpy()
    buf = io.BytesIO()
    np.save(buf, arr, allow_pickle=False)
    FILES[name] = buf.getvalue()


def _error_text(err: BaseException) -> str:
    text = f"{type(err).__name__}: {err}"
    return text.encode("utf-8", "replace").decode("utf-8", "replace")[:600]


def run_kernel_exercise(ex: dict) -> dict:
    try:
        kernels = define_kernels(ex["source"])
    except SourceRejected as err:
        return {"status": "rejected", "message": str(err)[:400]}
    except SyntaxError as err:
        return {"status": "rejected", "message": f"the cell does not parse: {err.msg} (line {err.lineno})"}
    except Exception as err:
        return {"status": "rejected", "message": _error_text(err)}
    kernel = kernels.get(ex["kernel"])
    if kernel is None:
        return {"status": "no-kernel", "message": ""}
    if not GPU:
        _honour_int_annotations()
    if ex.get("int64") and not GPU:
        _arm_int64_probe()
    cases = []
    for k, case in enumerate(ex["cases"]):
        bufs = {name: _load_buffer(spec) for name, spec in case["buffers"].items()}
        args = []
        for a in case["args"]:
            if "buf" in a:
                args.append(_pointer(bufs[a["buf"]], case["buffers"][a["buf"]]))
            elif "int" in a:
                args.append(int(a["int"]))
            else:
                args.append(float(a["float"]))
        del NARROW[:]
        PROBE["on"] = bool(case.get("int64"))
        rec = {"status": "ok", "message": ""}
        try:
            kernel[tuple(case["grid"])](*args, **case.get("constexprs", {}))
            if GPU:
                torch.cuda.synchronize()
        except Exception as err:
            rec = {"status": "raised", "message": _error_text(err)}
        PROBE["on"] = False
        rec["narrow_offsets"] = len(NARROW)
        for name in case["outputs"]:
            try:
                _save_buffer(bufs[name], case["buffers"][name]["dtype"],
                             f"{os.path.basename(ex.get('out_prefix', ''))}c{k}_{name}.npy", case["buffers"][name])
            except Exception as err:
                rec = {"status": "raised", "message": _error_text(err), "narrow_offsets": 0}
        del bufs
        if GPU:
            torch.cuda.empty_cache()
        cases.append(rec)
    return {"status": "ran", "cases": cases}


# ----------------------------------------------------------------------------------------- python exercises


def _arg(a):
    if isinstance(a, dict) and "dtype" in a and len(a) == 1:
        return DTYPES[a["dtype"]]
    if isinstance(a, dict) and "strided" in a:  # rows of a 2-D view: {"shape": [r, c], "stride": [s, 1], "dtype": ...}
        shape, stride = (tuple(int(v) for v in a["strided"][k]) for k in ("shape", "stride"))
        if (len(shape) != 2 or len(stride) != 2 or stride[1] != 1
                or not all(0 < v <= 1 << 16 for v in (*shape, *stride))):
            raise ValueError(f"strided argument out of range: {shape} {stride}")
        # (a meta tensor: shape, strides and dtype without memory, all a function of rows needs to be given)
        return torch.empty_strided(shape, stride, dtype=DTYPES[a["strided"]["dtype"]], device="meta")
    if isinstance(a, dict) and "tensor" in a:
        return torch.tensor([float(v) for v in a["tensor"]], dtype=DTYPES[a.get("tensor_dtype", "float64")])
    return a


def _plain(value, depth=0):
    """The learner's return value as JSON data (numbers, lists), or a string saying what it was."""
    if depth > 3:
        return "<nested too deep>"
    if isinstance(value, bool):
        return value
    if isinstance(value, (int, float)):
        return value
    if isinstance(value, torch.Tensor) and value.numel() == 1:
        return value.item()
    if isinstance(value, torch.Tensor) and value.numel() <= 1000:  # e.g. ch05-combine on 1-D tensors
        return _plain(value.tolist(), depth + 1)
    if isinstance(value, (np.integer, np.floating)):
        return value.item()
    if isinstance(value, (list, tuple)) and len(value) <= 1000:
        return [_plain(v, depth + 1) for v in value]
    if isinstance(value, dict) and len(value) <= 100 and all(isinstance(k, str) for k in value):
        return {k[:100]: _plain(v, depth + 1) for k, v in value.items()}  # e.g. ch07-targets' knobs
    return f"<{type(value).__name__}>"


def run_python_exercise(ex: dict) -> dict:
    ns = {"__name__": "__main__", "math": math, "torch": torch, "triton": triton, "tl": tl, "np": np}
    try:
        exec(compile(ex["source"], "<exercise cell>", "exec"), ns)
    except BaseException as err:
        return {"status": "raised", "message": _error_text(err)}
    results = []
    for call in ex["calls"]:
        fn = ns.get(call["fn"])
        if not callable(fn):
            results.append({"status": "missing", "message": call["fn"]})
            continue
        try:
            if "fold" in call:  # (m, l) = fn(m, l, tile) over the tiles of a row
                m, l, steps = -math.inf, 0.0, []
                row = [float(v) for v in call["fold"]]
                for s in range(0, len(row), call["tile"]):
                    m, l = fn(m, l, torch.tensor(row[s:s + call["tile"]], dtype=torch.float64))
                    m, l = float(m), float(l)
                    steps.append([m, l])
                value = steps
            else:
                value = fn(*[_arg(a) for a in call["args"]])
            results.append({"status": "ok", "value": _plain(value)})
        except Exception as err:
            results.append({"status": "raised", "message": _error_text(err)})
    return {"status": "ran", "results": results}


# ------------------------------------------------------------------------------- numba exercises (chapter 9)

CUDA_API = {"threadIdx", "blockIdx", "blockDim", "gridDim", "x", "y", "z", "shared", "local", "array", "syncthreads",
            "syncwarp", "shfl_sync", "shfl_up_sync", "shfl_down_sync", "shfl_xor_sync", "activemask", "laneid",
            "warpsize", "grid", "gridsize", "atomic", "add", "max", "min"}  # (cuda.jit: decorators only)
NUMBA_TYPES = {"float32", "float64", "int32", "int64"}
NUMBA_VALUE_ATTRS = {"shape", "size", "ndim"}


def _is_cuda_jit(dec) -> bool:
    target = dec.func if isinstance(dec, ast.Call) else dec
    return (isinstance(target, ast.Attribute) and target.attr == "jit" and isinstance(target.value, ast.Name)
            and target.value.id == "cuda")


def _check_cuda_function(fn: ast.FunctionDef, functions: set[str]) -> None:
    """numba kernel code only: names are arguments, locals, a few builtins, cuda.*/math.* API, numba's scalar
    types and the cell's functions; no import, no attribute that leads out of that API."""
    for dec in fn.decorator_list:
        if not _is_cuda_jit(dec):
            raise SourceRejected(f"{fn.name}: only @cuda.jit may decorate a kernel")
        if isinstance(dec, ast.Call) and (dec.args or any(k.arg != "device" or not isinstance(k.value, ast.Constant)
                                                           for k in dec.keywords)):
            raise SourceRejected(f"{fn.name}: @cuda.jit(...) takes only device=True here")
    args = fn.args
    if args.vararg or args.kwarg or args.kwonlyargs or args.defaults or args.posonlyargs:
        raise SourceRejected(f"{fn.name}: plain positional arguments only")
    names = {a.arg for a in args.args}
    decorators = {id(x) for d in fn.decorator_list for x in ast.walk(d)}
    body = [n for n in ast.walk(fn) if n is not fn and id(n) not in decorators]
    parents = {child: node for node in ast.walk(fn) for child in ast.iter_child_nodes(node)}
    apis = {"cuda", "math"} | NUMBA_TYPES
    for node in body:
        if isinstance(node, FORBIDDEN_NODES) or isinstance(node, (ast.FunctionDef, ast.Starred)):
            raise SourceRejected(f"{fn.name}: `{type(node).__name__}` is not kernel code")
        if isinstance(node, ast.Attribute) and node.attr.startswith("_"):
            raise SourceRejected(f"{fn.name}: attribute `{node.attr}`")
        if isinstance(node, ast.Name) and node.id.startswith("__"):
            raise SourceRejected(f"{fn.name}: name `{node.id}`")
        if isinstance(node, ast.Name) and isinstance(node.ctx, ast.Store):
            if node.id in apis or node.id in functions or node.id in ALLOWED_BUILTINS:
                raise SourceRejected(f"{fn.name}: assigns to `{node.id}`")
            names.add(node.id)
    for node in body:
        if isinstance(node, ast.Name) and isinstance(node.ctx, ast.Load):
            if node.id not in names | ALLOWED_BUILTINS | {"abs", "NotImplementedError"} | apis | functions:
                raise SourceRejected(f"{fn.name}: uses `{node.id}`, defined outside the cell's @cuda.jit functions")
            if node.id in ("cuda", "math") and not isinstance(parents.get(node), ast.Attribute):
                raise SourceRejected(f"{fn.name}: `{node.id}` may only be used as `{node.id}.<name>`")
        outer = parents.get(node)
        if isinstance(node, ast.Attribute) and not (isinstance(outer, ast.Attribute) and outer.value is node):
            root, attrs = _chain(node)
            if root == "cuda" and root not in names:
                bad = [a for a in attrs if a not in CUDA_API]
            elif root == "math" and root not in names:
                bad = [a for a in attrs[1:]] + [a for a in attrs[:1] if not callable(getattr(math, a, None))
                                                and not isinstance(getattr(math, a, None), float)]
            else:
                bad = [a for a in attrs if a not in NUMBA_VALUE_ATTRS]
            if bad:
                raise SourceRejected(f"{fn.name}: `{ast.unparse(node)}` is not numba's CUDA kernel API")
        if isinstance(node, ast.Call) and not isinstance(node.func, (ast.Name, ast.Attribute)):
            raise SourceRejected(f"{fn.name}: calls `{ast.unparse(node.func)}`")


def define_cuda_functions(source: str, cuda, numba, given: tuple = ()) -> dict:
    """The cell's @cuda.jit functions, defined alone (nothing else of the cell runs), in the simulator; ``given``:
    names of the grader's helpers they may call."""
    tree = ast.parse(source)
    defs = [n for n in tree.body if isinstance(n, ast.FunctionDef) and any(_is_cuda_jit(d) for d in n.decorator_list)]
    functions = {d.name for d in defs} | set(given)
    for d in defs:
        _check_cuda_function(d, functions)
    text = ast.unparse(ast.Module(body=defs, type_ignores=[])) + "\n"
    filename = "<learner-cuda>"
    linecache.cache[filename] = (len(text), None, text.splitlines(True), filename)  # the race report quotes lines
    ns = {"cuda": cuda, "math": math, **{t: getattr(numba, t) for t in NUMBA_TYPES}, "__name__": "learner_cuda",
          "__builtins__": dict(KERNEL_BUILTINS, abs=abs, NotImplementedError=NotImplementedError)}
    exec(compile(text, filename, "exec"), ns)
    return ns


def _numba_buffer(spec: dict):
    """A float32 numpy array of the grader's: the whole storage, and the (rows, cols) view the kernel gets."""
    arr = np.load(os.path.join(IN, os.path.basename(spec["file"])), allow_pickle=False).astype(np.float32)
    shape, step = spec["shape"], int(spec["step"])
    if len(shape) == 1:
        return arr, arr[: int(shape[0])]
    rows, cols = int(shape[0]), int(shape[1])
    return arr, arr[: rows * step].reshape(rows, step)[:, :cols]


def _race_summary(rec) -> dict:
    """The race recorder's report, and the most shared elements one thread touched between two barriers."""
    report = rec.report()
    groups = report.grouped()
    count: dict = {}
    for (block, _, _, epoch), cell in rec.cells.items():
        for tid in set(cell["r"]) | set(cell["w"]):
            count[(block, tid, epoch)] = count.get((block, tid, epoch), 0) + 1
    return {"ok": bool(report.ok), "kinds": sorted(report.kinds()), "barriers": int(report.barriers),
            "first": groups[0][0][:600] if groups else "", "widest": max(count.values(), default=0)}


def run_numba_exercise(ex: dict) -> dict:
    os.environ["NUMBA_ENABLE_CUDASIM"] = "1"  # before numba.cuda is imported: always the simulator here
    os.environ["NUMBA_CUDA_LOW_OCCUPANCY_WARNINGS"] = "0"
    if IN not in sys.path:
        sys.path.insert(0, IN)
    import numba
    from numba import cuda

    from numba.cuda.simulator.cudadrv.devicearray import FakeCUDAArray

    import cuda_sim  # the course's simulator additions: shuffles, the race recorder (no answers)

    helpers = ex.get("helpers") or ""
    given = tuple(n.name for n in ast.parse(helpers).body if isinstance(n, ast.FunctionDef))
    try:
        ns = define_cuda_functions(ex["source"], cuda, numba, given)
    except SourceRejected as err:
        return {"status": "rejected", "message": str(err)[:400]}
    except SyntaxError as err:
        return {"status": "rejected", "message": f"the cell does not parse: {err.msg} (line {err.lineno})"}
    except Exception as err:
        return {"status": "rejected", "message": _error_text(err)}
    missing = [n for n in ex["functions"] if n not in ns]
    if missing:
        return {"status": "no-kernel", "message": ", ".join(missing)}
    if helpers:  # the grader's own device functions the exercise's kernel calls (they win over the cell's)
        exec(compile(helpers, "<grader helpers>", "exec"), ns)
    cases = []
    for k, case in enumerate(ex["cases"]):
        bufs = {name: _numba_buffer(spec) for name, spec in case["buffers"].items()}
        rec = {"status": "ok", "message": ""}
        try:
            fn = ns[case["function"]]
            if case.get("probe"):
                pns = {"cuda": cuda, "math": math, "float32": numba.float32, "fn": fn}
                exec(compile(case["probe"], "<grader probe>", "exec"), pns)
                kernel = cuda.jit(pns["probe"])
            else:
                kernel = fn
            # the simulator's own device-array wrapper: strided views go in as they are, written in place
            args = [FakeCUDAArray(bufs[a["buf"]][1]) if "buf" in a else int(a["int"]) for a in case["args"]]
            launch = kernel[int(case["blocks"]), int(case["threads"]), 0, int(case["shared_bytes"])]
            if case.get("race"):
                with cuda_sim.record_races() as races:
                    launch(*args)
                rec["race"] = _race_summary(races)
            else:
                launch(*args)
        except Exception as err:
            rec = {"status": "raised", "message": _error_text(err)}
        for name in case["outputs"]:
            buf = io.BytesIO()
            np.save(buf, bufs[name][0], allow_pickle=False)
            FILES[f"{os.path.basename(ex.get('out_prefix', ''))}c{k}_{name}.npy"] = buf.getvalue()
        cases.append(rec)
    return {"status": "ran", "cases": cases}


def main() -> int:
    results_fd = os.dup(1)  # the grader's channel; fd 1 itself (print, C code) goes to /dev/null from now on
    os.dup2(os.open(os.devnull, os.O_WRONLY), 1)
    sys.stdout = open(os.devnull, "w")
    spec = json.load(open(os.path.join(IN, "judge.json"), encoding="utf-8"))
    out = {}
    for ex in spec["exercises"]:
        try:
            run_exercise = {"kernel": run_kernel_exercise, "numba": run_numba_exercise}.get(ex["kind"],
                                                                                          run_python_exercise)
            out[ex["id"]] = run_exercise(ex)
        except BaseException as err:
            out[ex["id"]] = {"status": "raised", "message": _error_text(err),
                             "trace": traceback.format_exc()[-1500:]}
    header = json.dumps({"results": out, "files": [[k, len(v)] for k, v in FILES.items()]}, ensure_ascii=True,
                        default=str)
    with os.fdopen(results_fd, "wb") as f:
        f.write(header.encode("ascii") + b"\n")
        for v in FILES.values():
            f.write(v)
    return 0


if __name__ == "__main__":
    sys.exit(main())
