"""Integer annotations in Triton's interpreter (the CPU), as on the GPU.

A compiled kernel takes a parameter annotated ``stride: tl.int64`` as a 64-bit int, so ``row * stride`` is
formed in 64 bits. Triton 3.6's interpreter ignores the annotation: every Python int that fits arrives as 32 bits,
so the same kernel's product wraps on the CPU where it is right on the GPU. ``honour(interpreter)`` makes the
interpreter do as the GPU does.

Standalone (no ``softmax_lab`` import): the grader copies this file into its judge sandbox.
"""
import numpy as np

_WIDE = {"i64": np.int64, "u64": np.uint64}


class _Wide(int):
    """An int bound to a parameter annotated as 64 bits (``dtype``: its numpy type)."""
    dtype = np.int64


def honour(interpreter) -> None:
    """Patch Triton's interpreter module so that int arguments of ``tl.int64``/``tl.uint64`` parameters arrive
    as 64-bit ints. Idempotent."""
    import triton.language as tl
    from triton.runtime.jit import _normalize_ty

    executor = interpreter.GridExecutor
    if getattr(executor, "_ints_honoured", False):
        return
    copy_args, convert = executor._init_args_hst, interpreter._implicit_cvt

    def wide(name, value, kinds):
        if name in kinds and type(value) is int:
            marked = _Wide(value)
            marked.dtype = _WIDE[kinds[name]]
            return marked
        return value

    def init_args(self, args_dev, kwargs):
        args, kwargs = copy_args(self, args_dev, kwargs)
        notes = getattr(self.fn, "__annotations__", {}) or {}
        kinds = {n: k for n, k in ((n, _normalize_ty(t)) for n, t in notes.items()) if k in _WIDE}
        if not kinds:
            return args, kwargs
        return ([wide(n, v, kinds) for n, v in zip(self.arg_names, args)],
                {n: wide(n, v, kinds) for n, v in kwargs.items()})

    def implicit_cvt(arg):
        if isinstance(arg, _Wide):
            ty = tl.int64 if arg.dtype is np.int64 else tl.uint64
            return tl.tensor(interpreter.TensorHandle(np.array([int(arg)], dtype=arg.dtype), ty), ty)
        return convert(arg)

    executor._init_args_hst, interpreter._implicit_cvt = init_args, implicit_cvt
    executor._ints_honoured = True
