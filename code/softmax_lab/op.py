"""``softmax_lab.softmax(input, dim=-1, dtype=None, *, mask=None)``: the course's kernels as a PyTorch operator.

Three custom operators are registered with ``torch.library`` (namespace ``softmax_lab``):

* ``softmax(Tensor x, int dim) -> Tensor``: softmax along ``dim`` on the dispatcher's kernel (``dispatch.py``);
* ``softmax_backward(Tensor y, Tensor dy, int dim) -> Tensor``: ``dx = y·(dy - Σ dy·y)``, the backward kernel;
* ``masked_softmax(Tensor x, Tensor mask, int dim) -> Tensor``: the SDPA-style masked kernel (bool mask: True
  takes part; float mask: added; fully masked rows give zeros).

Each has a fake (meta) implementation, so FakeTensor, ``torch.compile(fullgraph=True)`` and ``torch.export``
see one node per call, a vmap rule (the vmapped dim is folded into the leading dims; negative dims count from
the end of one sample) and an autograd formula. On a GPU they are ``triton_op``s whose bodies (``traced.py``)
launch the kernels through ``wrap_triton``, so Inductor sees and launches the kernels itself; on the CPU (Triton's
interpreter cannot be traced), or with ``SOFTMAX_LAB_OPS=custom_op``, they are opaque ``custom_op``s.

Gradients are right to any order: the backward is itself a differentiable operator (its own backward and
forward-mode rules are written below), so double backward, Hessian-vector products and Hessians are exact.
Forward mode uses the same kernel, since the Jacobian diag(y) - y yᵀ is symmetric: ``ẏ = y·(ẋ - Σ y·ẋ)``.

In eager mode ``softmax`` routes each call the cheapest correct way: a plain call (no grad, no transform, no
tracing) launches the kernel directly, skipping the dispatcher (its per-call cost: ``docs/performance.md``), small
inputs too (``torch_is_quicker`` can send them to PyTorch's own kernel: off since round 17, as cheap on the host);
calls that need autograd, forward AD or ``torch.func`` go through an ``autograd.Function`` that calls the
operators; ``torch.compile``/``torch.export``/``torch.jit.trace`` see the operators themselves.
"""
from __future__ import annotations

import os
import threading

import torch
import torch.autograd.forward_ad as forward_ad
from torch import Tensor

from .device import ON_GPU
from .dispatch import choose, plan_2d, plan_backward_2d, softmax_2d
from .kernels import double
from .kernels._launch import check_mask, check_tensor
from .kernels.tuning import TORCH_EAGER_BYTES, TORCH_EAGER_COLS
from .kernels.backward import softmax_backward as backward_2d
from .kernels.masked import MAX_COLS as MASKED_MAX_COLS
from .kernels.masked import masked_softmax as masked_kernel
from .rows import as_dim, as_rows, from_rows, normalize_dim, refuse_tangents, refuse_unlike
from . import traced


# ---------------------------------------------------------------------------------------------------------
# Implementations on real tensors: move `dim` last, fold the leading dims into rows, launch, move it back.
# Outputs are contiguous tensors shaped like the input (the fake implementations promise exactly that).

def _softmax_rows(x: Tensor, dim: int) -> Tensor:
    if x.dim() == 0:
        return _softmax_rows(x.reshape(1), 0).reshape(())
    if x.numel() == 0:
        return torch.empty(x.shape, dtype=x.dtype, device=x.device)
    rows = double.softmax if x.dtype == torch.float64 else softmax_2d  # float64 computes in float64
    return from_rows(rows(as_rows(x, dim)), x.shape, dim)


def _softmax_impl(x: Tensor, dim: int) -> Tensor:
    """Softmax of a checked ``x`` along ``dim``, through the plan for its kind of input (what the operator and the
    autograd Functions run; plain eager calls look their plan up in ``softmax`` directly)."""
    x = x.resolve_neg()  # a negative-bit view (torch._neg_view) keeps x in memory and means -x: the kernels read memory
    dim = normalize_dim(dim, x.dim())
    if x.dtype == torch.float64:
        return _softmax_rows(x, dim)
    ptr = x.data_ptr()
    key = (x.shape, x.stride(), x.dtype, x.get_device(), ptr & 15, dim)
    plan = _PLANS.get(key)
    if plan is None:
        with _PLANS_LOCK:  # threads may create and evict plans at the same time
            if len(_PLANS) >= MAX_PLANS:
                _PLANS.clear()
            plan = _PLANS[key] = _plan(x, dim)
    return plan(x, ptr)


def _backward_impl(y: Tensor, dy: Tensor, dim: int) -> Tensor:
    refuse_unlike(y, dy)
    y, dy = y.resolve_neg(), dy.resolve_neg()
    dim = normalize_dim(dim, y.dim())
    if y.layout is not torch.strided or dy.layout is not torch.strided:
        return _backward_rows(y, dy, dim)
    y_ptr, dy_ptr = y.data_ptr(), dy.data_ptr()
    key = _backward_key(y, dy, y_ptr, dy_ptr, dim)
    plan = _BACKWARD_PLANS.get(key)
    if plan is None:
        with _PLANS_LOCK:
            if len(_BACKWARD_PLANS) >= MAX_PLANS:
                _BACKWARD_PLANS.clear()
            plan = _BACKWARD_PLANS[key] = _backward_plan(y, dy, dim)
    return plan(y, dy, y_ptr, dy_ptr)


def _backward_key(y: Tensor, dy: Tensor, y_ptr: int, dy_ptr: int, dim: int) -> tuple:
    """The kind of a backward call (dim non-negative), which its plan in ``_BACKWARD_PLANS`` is made for."""
    return (y.shape, y.stride(), dy.shape, dy.stride(), y.dtype, dy.dtype, y.get_device(), dy.get_device(),
            y_ptr & 15, dy_ptr & 15, dim)


def _backward_rows(y: Tensor, dy: Tensor, dim: int) -> Tensor:
    if y.dim() == 0:
        return _backward_impl(y.reshape(1), dy.reshape(1), 0).reshape(())
    if y.numel() == 0:
        return torch.empty(y.shape, dtype=y.dtype, device=y.device)
    rows = double.softmax_backward if y.dtype == torch.float64 else backward_2d
    return from_rows(rows(as_rows(y, dim), as_rows(dy, dim)), y.shape, dim)


def _masked_impl(x: Tensor, mask: Tensor, dim: int) -> Tensor:
    x, mask = x.resolve_neg(), mask.resolve_neg()
    dim = normalize_dim(dim, x.dim())
    if x.dim() == 0:
        return _masked_impl(x.reshape(1), mask.reshape(1), 0).reshape(())
    mask = mask.expand(x.shape)  # stride 0 along broadcast dims, no copy
    if x.dtype == torch.float64 or x.shape[dim] > MASKED_MAX_COLS:  # (longer rows: computed in float64 too)
        if x.numel() == 0:
            return torch.empty(x.shape, dtype=x.dtype, device=x.device)
        return from_rows(double.softmax(as_rows(x, dim), as_rows(mask, dim)), x.shape, dim)
    last = x.dim() - 1
    if dim == last:
        return masked_kernel(x, mask)
    return masked_kernel(x.movedim(dim, last), mask.movedim(dim, last)).movedim(last, dim).contiguous()


# ---------------------------------------------------------------------------------------------------------
# The operators, their fake implementations and vmap rules.

def _softmax_eager(x: Tensor, dim: int) -> Tensor:
    refuse_tangents("softmax", x)
    return _softmax_impl(x, dim)


def _backward_eager(y: Tensor, dy: Tensor, dim: int) -> Tensor:
    refuse_tangents("softmax_backward", y, dy)
    return _backward_impl(y, dy, dim)


def _masked_eager(x: Tensor, mask: Tensor, dim: int) -> Tensor:
    refuse_tangents("masked_softmax", x, mask)
    return _masked_impl(x, mask, dim)


# On a GPU the operators are triton_ops (``traced.py``: wrap_triton launches that Inductor sees and launches itself);
# on the CPU, or with SOFTMAX_LAB_OPS=custom_op (read at import), opaque custom ops that torch.compile calls through
# the dispatcher.
if ON_GPU and os.environ.get("SOFTMAX_LAB_OPS", "").strip() != "custom_op":
    softmax_op = torch.library.triton_op("softmax_lab::softmax", traced.softmax, mutates_args=())
    softmax_backward_op = torch.library.triton_op("softmax_lab::softmax_backward", traced.softmax_backward,
                                                  mutates_args=())
    masked_softmax_op = torch.library.triton_op("softmax_lab::masked_softmax", traced.masked_softmax, mutates_args=())
else:
    softmax_op = torch.library.custom_op("softmax_lab::softmax", _softmax_eager, mutates_args=())
    softmax_backward_op = torch.library.custom_op("softmax_lab::softmax_backward", _backward_eager, mutates_args=())
    masked_softmax_op = torch.library.custom_op("softmax_lab::masked_softmax", _masked_eager, mutates_args=())
    # The outputs: new contiguous tensors shaped like the input.
    softmax_op.register_fake(lambda x, dim: x.new_empty(x.shape))
    softmax_backward_op.register_fake(lambda y, dy, dim: refuse_unlike(y, dy) or y.new_empty(y.shape))
    masked_softmax_op.register_fake(lambda x, mask, dim: x.new_empty(x.shape))


def _batch_first(t: Tensor, bdim: int | None, size: int) -> Tensor:
    return t.movedim(bdim, 0) if bdim is not None else t.unsqueeze(0).expand(size, *t.shape)


def _sample_dim(t: Tensor, bdim: int | None, dim: int) -> int:
    """``dim`` of one vmapped sample (negative counts from the sample's end), made non-negative."""
    return normalize_dim(dim, t.dim() - (bdim is not None))


# The vmap rules: a row-wise op, so the vmapped dim becomes one more leading dim, and the sample's `dim` moves one to
# the right. Samples that are 0-d (vmap over a 1-D tensor) get a dim of length 1 for the call.

@softmax_op.register_vmap
def _(info, in_dims, x, dim):
    scalar = x.dim() - (in_dims[0] is not None) == 0
    dim = _sample_dim(x, in_dims[0], dim)
    x = _batch_first(x, in_dims[0], info.batch_size)
    if scalar:
        return softmax_op(x.unsqueeze(-1), 1).squeeze(-1), 0
    return softmax_op(x, dim + 1), 0


@softmax_backward_op.register_vmap
def _(info, in_dims, y, dy, dim):
    n = info.batch_size
    scalar = y.dim() - (in_dims[0] is not None) == 0
    dim = _sample_dim(y, in_dims[0], dim)
    y, dy = _batch_first(y, in_dims[0], n), _batch_first(dy, in_dims[1], n)
    if scalar:
        return softmax_backward_op(y.unsqueeze(-1), dy.unsqueeze(-1), 1).squeeze(-1), 0
    return softmax_backward_op(y, dy, dim + 1), 0


@masked_softmax_op.register_vmap
def _(info, in_dims, x, mask, dim):
    scalar = x.dim() - (in_dims[0] is not None) == 0
    dim = _sample_dim(x, in_dims[0], dim)
    x = _batch_first(x, in_dims[0], info.batch_size)
    if scalar:
        x = x.unsqueeze(-1)
    if in_dims[1] is not None:  # line the mask's batch dim up with x's (masks broadcast from the right)
        mask = mask.movedim(in_dims[1], 0)
        mask = mask.reshape(mask.shape[0], *[1] * (x.dim() - mask.dim()), *mask.shape[1:])
    y = masked_softmax_op(x, mask, 1 if scalar else dim + 1)
    return (y.squeeze(-1) if scalar else y), 0


# ---------------------------------------------------------------------------------------------------------
# Routing: the fastest correct path for each call.
PLAIN, FUNCTION, FUNCTORCH, OP, COMPOSITE = 0, 1, 2, 3, 4


def _route(a: Tensor, b: Tensor | None = None) -> int:
    """OP when a tracer must see the operator (torch.compile, export, jit.trace, a dispatch or function mode,
    a tensor subclass such as FakeTensor, a legacy batched tensor of ``gradcheck(check_batched_grad=True)``, a meta
    tensor: the operators' fake implementations give its shape), or under ``torch.func.functionalize`` alone;
    FUNCTORCH under other torch.func transforms, FUNCTION for autograd or forward AD (the autograd.Functions
    below); PLAIN for a plain eager call: launch the kernels directly.
    COMPOSITE under torch.func transforms inside torch.compile (``compile(grad(f))``, ``compile(vmap(grad(f)))``):
    Dynamo runs the transforms on the operator itself, whose autograd (``register_autograd``) functorch refuses,
    and inlines autograd.Functions, so there PyTorch's own softmax is traced instead (``_composite``).
    (Written out for one or two tensors: this runs on every call.)"""
    if torch._C._are_functorch_transforms_active():
        if torch.compiler.is_compiling():
            return COMPOSITE
        top = torch._C._functorch.peek_interpreter_stack()
        return OP if top is not None and top.key() == _FUNCTIONALIZE else FUNCTORCH
    if torch.compiler.is_compiling() or torch._C._get_tracing_state() is not None:
        return OP
    if forward_ad._current_level >= 0 or (torch.is_grad_enabled() and (
            a.requires_grad or (b is not None and b.requires_grad))):
        return FUNCTION
    if (torch._C._len_torch_dispatch_stack() or torch._C._is_torch_function_mode_enabled()
            or type(a) is not Tensor or (b is not None and type(b) is not Tensor)
            or _legacy_batched(a) or (b is not None and _legacy_batched(b)) or a.is_meta
            or (b is not None and b.is_meta)):
        return OP
    return PLAIN


_FUNCTIONALIZE = torch._C._functorch.TransformType.Functionalize


def _composite(x: Tensor, mask: Tensor | None, dim: int) -> Tensor:
    """The operator in PyTorch's own ops, same values and semantics (fully masked rows give zeros, as
    ``aten._safe_softmax``): what torch.compile traces under torch.func transforms (see ``_route``)."""
    if mask is None:
        return torch.softmax(x, dim)
    s = x.to(torch.promote_types(x.dtype, torch.float32))
    s = s.masked_fill(~mask, float("-inf")) if mask.dtype == torch.bool else s + mask.to(s.dtype)
    return torch.ops.aten._safe_softmax(s, dim).to(x.dtype)
_legacy_batched = torch._C._functorch.is_legacy_batchedtensor  # torch._vmap_internals (gradcheck's batched grads)


def softmax_backward(y: Tensor, dy: Tensor, dim: int = -1) -> Tensor:
    """Differentiable ``dx = y·(dy - Σ dy·y)`` along ``dim`` (y: a softmax output, dy: its gradient; alike in shape
    and dtype, as torch's ``_softmax_backward_data`` asks)."""
    if (type(dim) is int and type(y) is Tensor and type(dy) is Tensor and y.layout is torch.strided
            and dy.layout is torch.strided and _route(y, dy) == PLAIN and not y.is_neg() and not dy.is_neg()):
        # The fast path: a plain eager call of a kind seen before (see _backward_plan): no checks, no choices.
        y_ptr, dy_ptr = y.data_ptr(), dy.data_ptr()
        d = dim + y.dim() if dim < 0 else dim
        plan = _BACKWARD_PLANS.get(_backward_key(y, dy, y_ptr, dy_ptr, d))
        if plan is not None:
            return plan(y, dy, y_ptr, dy_ptr)
    if isinstance(y, Tensor) and isinstance(dy, Tensor):
        refuse_unlike(y, dy)
    dim = as_dim(dim)
    d = normalize_dim(dim, y.dim())
    route = _route(y, dy)
    if route == PLAIN:
        return _backward_impl(y, dy, d)
    if route == OP:
        return softmax_backward_op(y, dy, dim)
    if route == COMPOSITE:
        return (_wide(y) * (_wide(dy) - _dot(dy, y, d))).to(y.dtype)
    return (_Backward if route == FUNCTION else _BackwardForFunc).apply(y, dy, d)


def _wide(t: Tensor) -> Tensor:
    """``t`` in float32, or float64 as it is: the composite formulas compute in at least float32."""
    return t if t.dtype == torch.float64 else t.float()


def _dot(a: Tensor, b: Tensor, dim: int) -> Tensor:
    return (_wide(a) * _wide(b)).sum(dim, keepdim=True)


def _backward_grads(y, dy, g, dim, need_y, need_dy):
    """Gradients of dx = y·(dy - s), s = Σ dy·y, given g = ∂L/∂dx: ∂L/∂dy = y·(g - Σ g·y) (the same
    symmetric Jacobian), ∂L/∂y = g·(dy - s) - dy·Σ g·y. Written with differentiable ops (any order)."""
    grad_y = grad_dy = None
    if need_y:
        grad_y = (_wide(g) * (_wide(dy) - _dot(dy, y, dim)) - _wide(dy) * _dot(g, y, dim)).to(y.dtype)
    if need_dy:
        grad_dy = softmax_backward(y, g, dim).to(dy.dtype)
    return grad_y, grad_dy


def _backward_tangent(y, dy, y_t, dy_t, dim):
    """Forward mode of dx = y·(dy - s), s = Σ dy·y: ẋ = y·(ḋy - Σ ḋy·y) + ẏ·(dy - s) - y·Σ dy·ẏ."""
    parts = []
    if dy_t is not None:
        parts.append(softmax_backward(y, dy_t, dim))
    if y_t is not None:
        parts.append((_wide(y_t) * (_wide(dy) - _dot(dy, y, dim)) - _wide(y) * _dot(dy, y_t, dim)).to(y.dtype))
    return parts[0] if len(parts) == 1 else parts[0] + parts[1]


# Each operator has two autograd.Functions with the same backward and jvp rules: a ctx-style one for plain
# autograd and forward AD (cheap to call), and a setup_context-style one, which torch.func transforms need
# (autograd.Function.apply binds its arguments with inspect.signature for that style, on every call).

class _SoftmaxRules:
    @staticmethod
    def backward(ctx, dy):
        (y,) = ctx.saved_tensors
        return softmax_backward(y, dy, ctx.dim), None

    @staticmethod
    def jvp(ctx, x_t, _):
        (y,) = ctx.saved_tensors
        return softmax_backward(y, x_t.to(y.dtype), ctx.dim)  # J ẋ, and J is symmetric


def _save(ctx, dim, *tensors):
    ctx.dim = dim
    ctx.save_for_backward(*tensors)
    ctx.save_for_forward(*tensors)


class _Softmax(_SoftmaxRules, torch.autograd.Function):
    @staticmethod
    def forward(ctx, x, dim):
        y = _softmax_impl(x, dim) if _route(x) == PLAIN else softmax_op(x, dim)
        _save(ctx, dim, y)
        return y


class _SoftmaxForFunc(_SoftmaxRules, torch.autograd.Function):
    generate_vmap_rule = True  # vmap runs forward/backward/jvp under vmap: the operators' vmap rules batch them

    @staticmethod
    def forward(x, dim):
        return softmax_op(x, dim)

    @staticmethod
    def setup_context(ctx, inputs, output):
        _save(ctx, inputs[1], output)


class _BackwardRules:
    @staticmethod
    def backward(ctx, g):
        y, dy = ctx.saved_tensors
        grad_y, grad_dy = _backward_grads(y, dy, g, ctx.dim, ctx.needs_input_grad[0], ctx.needs_input_grad[1])
        return grad_y, grad_dy, None

    @staticmethod
    def jvp(ctx, y_t, dy_t, _):
        y, dy = ctx.saved_tensors
        return _backward_tangent(y, dy, y_t, dy_t, ctx.dim)


class _Backward(_BackwardRules, torch.autograd.Function):
    @staticmethod
    def forward(ctx, y, dy, dim):
        _save(ctx, dim, y, dy)
        return _backward_impl(y, dy, dim) if _route(y, dy) == PLAIN else softmax_backward_op(y, dy, dim)


class _BackwardForFunc(_BackwardRules, torch.autograd.Function):
    generate_vmap_rule = True

    @staticmethod
    def forward(y, dy, dim):
        return softmax_backward_op(y, dy, dim)

    @staticmethod
    def setup_context(ctx, inputs, output):
        _save(ctx, inputs[2], inputs[0], inputs[1])


class _MaskedRules:
    @staticmethod
    def backward(ctx, dy):
        (y,) = ctx.saved_tensors
        dx = softmax_backward(y, dy, ctx.dim)  # masked entries have y = 0, so dx = 0 there
        # A float mask is added to the scores: its gradient is dx, summed over the dims it was broadcast along.
        dmask = dx.sum_to_size(ctx.mask_shape).to(ctx.mask_dtype) if ctx.needs_input_grad[1] else None
        return (dx if ctx.needs_input_grad[0] else None), dmask, None

    @staticmethod
    def jvp(ctx, x_t, mask_t, _):
        (y,) = ctx.saved_tensors
        t = x_t
        if mask_t is not None:
            t = mask_t.to(y.dtype).expand(y.shape) + (0 if t is None else t)
        return softmax_backward(y, t.to(y.dtype), ctx.dim)


def _save_masked(ctx, mask, dim, y):
    ctx.mask_shape, ctx.mask_dtype = mask.shape, mask.dtype
    _save(ctx, dim, y)


class _Masked(_MaskedRules, torch.autograd.Function):
    @staticmethod
    def forward(ctx, x, mask, dim):
        y = _masked_impl(x, mask, dim) if _route(x, mask) == PLAIN else masked_softmax_op(x, mask, dim)
        _save_masked(ctx, mask, dim, y)
        return y


class _MaskedForFunc(_MaskedRules, torch.autograd.Function):
    generate_vmap_rule = True

    @staticmethod
    def forward(x, mask, dim):
        return masked_softmax_op(x, mask, dim)

    @staticmethod
    def setup_context(ctx, inputs, output):
        _save_masked(ctx, inputs[1], inputs[2], output)


# Chapter 8's autograd Function: any forward launcher of the course, with the backward operator behind it.

class SoftmaxFunction(torch.autograd.Function):
    """``SoftmaxFunction.apply(x, forward)``: y = forward(x) (any softmax over the last dim that keeps x's
    shape, e.g. ``fused_softmax``); the backward pass runs the backward kernel.

    Example: ``y = SoftmaxFunction.apply(x, fused_softmax); y.sum().backward()``.

    The backward is itself differentiable (``softmax_backward`` above), so double backward and Hessian-vector
    products are right; forward mode (``jvp``) uses the same kernel, since the Jacobian is symmetric.
    ``torch.func`` transforms and ``torch.compile`` need ``softmax_lab.softmax`` (the operator).
    """

    @staticmethod
    def forward(ctx, x, forward):
        y = forward(x)
        ctx.save_for_backward(y)
        ctx.save_for_forward(y)
        return y

    @staticmethod
    def backward(ctx, dy):
        (y,) = ctx.saved_tensors
        return softmax_backward(y, dy, -1), None

    @staticmethod
    def jvp(ctx, x_t, _):
        (y,) = ctx.saved_tensors
        return softmax_backward(y, x_t.to(y.dtype), -1)  # ẏ = J ẋ = y·(ẋ - Σ y·ẋ)


# Autograd formulas for the operators themselves (what torch.compile and torch.export use).
def _setup_softmax(ctx, inputs, output):
    ctx.dim = inputs[1]
    ctx.save_for_backward(output)


def _setup_backward(ctx, inputs, output):
    y, dy, ctx.dim = inputs
    ctx.save_for_backward(y, dy)


def _setup_masked(ctx, inputs, output):
    _, mask, ctx.dim = inputs
    ctx.mask_shape, ctx.mask_dtype = mask.shape, mask.dtype
    ctx.save_for_backward(output)


# The backward formulas are the autograd.Functions' own (the Rules classes above).
softmax_op.register_autograd(_SoftmaxRules.backward, setup_context=_setup_softmax)
softmax_backward_op.register_autograd(_BackwardRules.backward, setup_context=_setup_backward)
masked_softmax_op.register_autograd(_MaskedRules.backward, setup_context=_setup_masked)


# ---------------------------------------------------------------------------------------------------------
# The public function, with torch.softmax's signature.

def _check(x, mask, dtype) -> None:
    if dtype is not None and not (isinstance(dtype, torch.dtype) and dtype.is_floating_point):
        if not isinstance(dtype, torch.dtype):
            raise TypeError(f"softmax(): argument 'dtype' must be a torch.dtype or None, got {type(dtype).__name__}")
        raise TypeError(f"softmax(): dtype={dtype} is not a floating-point dtype; softmax returns probabilities: "
                        "pass torch.float16, torch.bfloat16, torch.float32, torch.float64 or None")
    want = x.dtype if dtype is None and isinstance(x, Tensor) else dtype
    # the checks every entry point shares (kernels/_launch.py); float64 runs on its own kernels (kernels/double.py)
    check_tensor(x, "input", torch.float32 if want == torch.float64 else dtype, meta_ok=True)
    if mask is not None:
        check_mask(mask, x)


# The fast path of plain eager calls: one plan per kind of input (shape, strides, dtype, device, pointer
# alignment, dim), made on the first call. A plan only allocates the output and launches the compiled kernel.
_PLANS: dict = {}
_PLANS_LOCK = threading.Lock()
MAX_PLANS = 256


# Inputs up to this many bytes (0, the default since round 17: none) run torch's kernel in eager calls;
# SOFTMAX_LAB_TORCH_BELOW=<bytes> (read at import) sends inputs up to that size there.
TORCH_BELOW = int(os.environ.get("SOFTMAX_LAB_TORCH_BELOW", TORCH_EAGER_BYTES))


def torch_is_quicker(x: Tensor, dim: int) -> bool:
    """Whether an eager call on x (a CUDA tensor, checked) runs PyTorch's own kernel: contiguous
    float16/bfloat16/float32 inputs of at most ``TORCH_BELOW`` bytes (0 by default: none) and rows of at most
    16,384, where a call's cost is its launch (``kernels/tuning.py`` says why it is off). Same results within
    rounding."""
    return (x.device.type == "cuda" and x.dim() > 0 and x.dtype in _PLANNED_DTYPES and x.is_contiguous()
            and x.numel() * x.element_size() <= TORCH_BELOW and x.shape[dim] <= TORCH_EAGER_COLS)


def _plan(x: Tensor, dim: int):
    """The function ``plan(x, x.data_ptr())`` that a plain call ``softmax(x, dim)`` (checked, dim non-negative)
    runs for inputs like x: allocate, launch the compiled kernel (``dispatch.plan_2d``), or PyTorch's where
    that is quicker (``torch_is_quicker``) and no CUDA graph is being captured (a graph's replays cost GPU time
    alone, and there the course's kernels are the quicker); else the usual path."""
    ours = _kernel_plan(x, dim)
    if x.numel() and torch_is_quicker(x, dim):
        capturing = torch._C._cuda_isCurrentStreamCapturing
        return lambda x, x_ptr: ours(x, x_ptr) if capturing() else torch._softmax(x, dim, False)
    return ours


def _kernel_plan(x: Tensor, dim: int):
    if x.numel() and dim == x.dim() - 1 and (x.is_contiguous() or (x.dim() == 2 and x.stride(1) == 1)):
        x2 = x if x.dim() == 2 else x.view(-1, x.shape[-1])
        run = plan_2d(x2)
        if run is not None:
            empty_like = torch.empty_like  # contiguous for a contiguous x, and faster than torch.empty
            if not x.is_contiguous():
                shape, dtype, device = x.shape, x.dtype, x.device
                empty_like = lambda x: torch.empty(shape, dtype=dtype, device=device)

            def fast(x, x_ptr):
                y = empty_like(x)
                run(y.data_ptr(), x_ptr)
                return y

            return fast
    return lambda x, x_ptr: _softmax_rows(x, dim)


_BACKWARD_PLANS: dict = {}


def _backward_plan(y: Tensor, dy: Tensor, dim: int):
    """``plan(y, dy, y.data_ptr(), dy.data_ptr())`` for backward calls like this one (checked dims): allocate dx
    and launch the compiled kernel (``dispatch.plan_backward_2d``), where y and dy are float tensors alike with
    contiguous rows along the last dim, or PyTorch's kernel where that is quicker (``torch_is_quicker``, as in
    ``_plan``, and ``BACKWARD_ON_TORCH``); else the usual path."""
    ours = _backward_kernel_plan(y, dy, dim)
    if (BACKWARD_ON_TORCH and y.numel() and dy.dtype == y.dtype and dy.is_contiguous() and type(dy) is Tensor
            and torch_is_quicker(y, dim)):  # (shapes alike: _backward_impl checked them)
        capturing = torch._C._cuda_isCurrentStreamCapturing
        return lambda y, dy, y_ptr, dy_ptr: (ours(y, dy, y_ptr, dy_ptr) if capturing()
                                             else torch._softmax_backward_data(dy, y, dim, y.dtype))
    return ours


# Whether small backward calls run torch's kernel too: no. Measured on the H200, a routed backward call cost
# 16-29 µs against 13-25 on the course's kernel (docs/performance.md, "Issue 28, round 5"); the switch stays for
# the tests and the next measurement.
BACKWARD_ON_TORCH = False


def _backward_kernel_plan(y: Tensor, dy: Tensor, dim: int):
    def rows_of(t):
        return t.is_contiguous() or (t.dim() == 2 and t.stride(1) == 1)

    if (y.numel() and y.dtype in _PLANNED_DTYPES and dy.dtype == y.dtype and dy.shape == y.shape
            and dim == y.dim() - 1 and rows_of(y) and rows_of(dy) and type(y) is Tensor and type(dy) is Tensor):
        n = y.shape[-1]
        run = plan_backward_2d(y.view(-1, n) if y.dim() != 2 else y, dy.view(-1, n) if dy.dim() != 2 else dy)
        if run is not None:
            shape, dtype, device = y.shape, y.dtype, y.device
            empty_like = torch.empty_like  # contiguous for a contiguous y, and faster than torch.empty
            if not y.is_contiguous():
                empty_like = lambda y: torch.empty(shape, dtype=dtype, device=device)

            def fast(y, dy, y_ptr, dy_ptr):
                dx = empty_like(y)
                run(dx.data_ptr(), y_ptr, dy_ptr)
                return dx

            return fast
    return lambda y, dy, y_ptr, dy_ptr: _backward_rows(y, dy, dim)


_PLANNED_DTYPES = (torch.float16, torch.bfloat16, torch.float32)


def softmax(input: Tensor, dim: int = -1, dtype: torch.dtype | None = None, *, mask: Tensor | None = None) -> Tensor:
    """Softmax of ``input`` along ``dim``, like ``torch.softmax``, on the fastest kernel for its shape.

    ``dtype``: cast the input to it first, as torch does (e.g. float16 in, float32 out; float32 in,
    ``dtype=torch.float64``: computed and returned in float64). float16, bfloat16 and float32 compute in
    float32, float64 in float64 (``kernels/double.py``). The result is a new contiguous tensor. NaN and ±inf follow
    ``torch.softmax`` (a row with NaN or +inf gives NaN; an all -inf row gives NaN), except with ``mask``
    (SDPA convention: bool True = takes part, float = added; broadcast to ``input``): rows where everything
    is masked give zeros. Differentiable to any order, in reverse and forward mode, under ``torch.func``,
    ``torch.compile(fullgraph=True)`` and ``torch.export``; a float mask gets a gradient too.
    """
    if (mask is None and dtype is None and type(input) is Tensor and type(dim) is int
            and input.layout is torch.strided and _route(input) == PLAIN and not input.is_neg()):
        # The fast path: a plain eager call of a kind seen before (see _plan): no checks, no choices.
        ptr = input.data_ptr()
        d = dim + input.dim() if dim < 0 else dim
        plan = _PLANS.get((input.shape, input.stride(), input.dtype, input.get_device(), ptr & 15, d))
        if plan is not None:
            return plan(input, ptr)
    dim = as_dim(dim)
    _check(input, mask, dtype)
    x = input if dtype is None or input.dtype == dtype else input.to(dtype)
    d = normalize_dim(dim, x.dim())  # checked here, with torch's errors; tracers get `dim` as given (a trace keeps -1)
    if mask is None:
        route = _route(x)
        if route == PLAIN:
            return _softmax_impl(x, d)
        if route == OP:
            return softmax_op(x, dim)
        if route == COMPOSITE:
            return _composite(x, None, d)
        return (_Softmax if route == FUNCTION else _SoftmaxForFunc).apply(x, d)
    route = _route(x, mask)
    if route == PLAIN:
        return _masked_impl(x, mask, d)
    if route == OP:
        return masked_softmax_op(x, mask, dim)
    if route == COMPOSITE:
        return _composite(x, mask, d)
    return (_Masked if route == FUNCTION else _MaskedForFunc).apply(x, mask, d)


softmax.choose = choose  # softmax_lab.softmax.choose(n_rows, n_cols, dtype): what the dispatcher would run
