"""softmax_lab.softmax as a PyTorch operator: torch.library registration, torch.compile, export,
FakeTensor, CUDA graphs, autograd to any order (float64 references), forward AD, vmap, and the raw launchers'
refusals (inputs that require grad, unsafe out=, bad knobs).

Everything runs on the CPU (Triton's interpreter) with tiny shapes; the CUDA-graph test needs a GPU.
"""
import math
import textwrap
import warnings

import os

import pytest
import torch
import torch.autograd.forward_ad as fwAD

import softmax_lab
from softmax_lab import kernels, op
from softmax_lab.testing import randn

DEV = softmax_lab.DEVICE


def sm(*args, **kw):
    return softmax_lab.softmax(*args, **kw)


def ref(x, dim=-1):
    return torch.softmax(x.double(), dim)


def close(a, b, atol=1e-6, rtol=1e-5):
    torch.testing.assert_close(a.double().cpu(), b.double().cpu(), atol=atol, rtol=rtol)


def ops():
    return torch.ops.softmax_lab


# ---------------------------------------------------------------------------------------------------------
# 1. Registration: fake implementations, torch.compile, export, FakeTensor, CUDA graphs

def test_the_operators_pass_opcheck():
    # torch.library.opcheck: schema, fake (meta) implementation vs the real one, autograd registration, and
    # AOTAutograd tracing with dynamic shapes.
    x = randn((3, 9), device=DEV, seed=1).requires_grad_()
    y = sm(x.detach())
    dy = randn((3, 9), device=DEV, seed=2)
    float_mask = randn((9,), device=DEV, seed=3).requires_grad_()
    bool_mask = torch.rand(3, 9, device=DEV) > 0.3
    cases = [(ops().softmax.default, (x, 1)), (ops().softmax.default, (x, 0)),
             (ops().softmax_backward.default, (y.requires_grad_(), dy, 1)),
             (ops().masked_softmax.default, (x, float_mask, 1)), (ops().masked_softmax.default, (x, bool_mask, 0))]
    for overload, args in cases:
        torch.library.opcheck(overload, args)


def test_compile_fullgraph_no_graph_break():
    x = randn((2, 3, 40), device=DEV, seed=4)
    mask = torch.rand(3, 40, device=DEV) > 0.2
    for fn in (lambda t: sm(t, -1), lambda t: sm(t, 1), lambda t: sm(t, -1, torch.float32, mask=mask) * 2):
        compiled = torch.compile(fn, fullgraph=True, backend="aot_eager")  # fullgraph: a graph break raises
        torch.testing.assert_close(compiled(x), fn(x))
        assert torch._dynamo.explain(fn)(x).graph_break_count == 0
    torch._dynamo.reset()


def test_compile_dynamic_shapes_and_backward():
    fn = torch.compile(lambda t: (sm(t, -1) ** 2).sum(), fullgraph=True, backend="aot_eager", dynamic=True)
    for shape in [(3, 7), (5, 33)]:
        x = randn(shape, device=DEV, seed=5).requires_grad_()
        (g,) = torch.autograd.grad(fn(x), x)
        x64 = x.detach().double().requires_grad_()
        (g64,) = torch.autograd.grad((torch.softmax(x64, -1) ** 2).sum(), x64)
        close(g, g64)
    torch._dynamo.reset()


class Attention(torch.nn.Module):
    """A small causal self-attention block with softmax_lab.softmax (bool mask) on the scores."""

    def __init__(self, d=8, heads=2):
        super().__init__()
        self.heads, self.qkv, self.proj = heads, torch.nn.Linear(d, 3 * d), torch.nn.Linear(d, d)

    def forward(self, x, mask, softmax_fn=None):
        B, S, D = x.shape
        q, k, v = self.qkv(x).view(B, S, 3, self.heads, D // self.heads).permute(2, 0, 3, 1, 4)
        scores = q @ k.transpose(-2, -1) / math.sqrt(D // self.heads)
        p = sm(scores, -1, mask=mask) if softmax_fn is None else softmax_fn(scores, mask)
        return self.proj((p @ v).transpose(1, 2).reshape(B, S, D))


def test_compiled_attention_block():
    # Inductor on the GPU; on the CPU aot_eager (Dynamo + AOTAutograd with FakeTensors, the same tracing
    # Inductor gets), because Inductor's C++ code generation costs about a minute of CI time on 2 cores.
    torch.manual_seed(6)
    block = Attention().to(DEV)
    x = torch.randn(2, 6, 8).to(DEV).requires_grad_()
    causal = torch.ones(6, 6, dtype=torch.bool, device=DEV).tril()
    compiled = torch.compile(block, fullgraph=True, backend="inductor" if softmax_lab.ON_GPU else "aot_eager")
    out = compiled(x, causal)
    eager = block(x, causal)
    torch.testing.assert_close(out, eager, atol=1e-5, rtol=1e-5)
    g_c = torch.autograd.grad(out.sum(), [x, *block.parameters()])
    g_e = torch.autograd.grad(eager.sum(), [x, *block.parameters()])
    for a, b in zip(g_c, g_e):
        torch.testing.assert_close(a, b, atol=1e-5, rtol=1e-4)
    # and against float64 PyTorch
    plain = lambda s, m: torch.softmax(s.masked_fill(~m, float("-inf")), -1)
    block64 = Attention().to(DEV).double()
    block64.load_state_dict(block.state_dict())
    close(out, block64(x.double(), causal, plain), atol=1e-5, rtol=1e-4)
    torch._dynamo.reset()


@pytest.mark.parametrize("strict", [False, True])
def test_export(strict):
    class M(torch.nn.Module):
        def forward(self, s, m):
            return sm(s, -1, mask=m) + sm(s, 1, dtype=torch.float32)

    s = randn((2, 3, 8), device=DEV, seed=7)
    m = randn((3, 8), device=DEV, seed=8)
    ep = torch.export.export(M(), (s, m), strict=strict)
    targets = {str(n.target) for n in ep.graph.nodes if n.op == "call_function"}
    assert {"softmax_lab.masked_softmax.default", "softmax_lab.softmax.default"} <= targets
    torch.testing.assert_close(ep.module()(s, m), M()(s, m))


def test_fake_tensor_mode():
    from torch._subclasses.fake_tensor import FakeTensorMode

    with FakeTensorMode():
        x = torch.empty(4, 6, 5, dtype=torch.float16, device=DEV)
        for y, shape, dtype in [(sm(x, 0), (4, 6, 5), torch.float16),
                                (sm(x, 1, dtype=torch.float32), (4, 6, 5), torch.float32),
                                (sm(x, -1, mask=torch.ones(5, dtype=torch.bool, device=DEV)), (4, 6, 5), torch.float16),
                                (sm(x.transpose(0, 2), 0), (5, 6, 4), torch.float16)]:
            assert y.shape == shape and y.dtype == dtype and y.is_contiguous()
        xr = torch.empty(3, 4, device=DEV, requires_grad=True)
        (g,) = torch.autograd.grad(sm(xr, 0).sum(), xr)
        assert g.shape == (3, 4)


def test_jit_trace():
    x = randn((3, 10), device=DEV, seed=9)
    traced = torch.jit.trace(lambda t: sm(t, -1), (x,))
    close(traced(randn((3, 10), device=DEV, seed=10)), ref(randn((3, 10), device=DEV, seed=10)))


@pytest.mark.gpu  # CUDA graphs need a GPU
def test_cuda_graph_capture():
    x = randn((64, 1000), device=DEV, seed=11)
    mask = torch.rand(1000, device=DEV) > 0.1
    torch.cuda.synchronize()
    for _ in range(2):  # warm up (compile the kernels) before capturing
        sm(x), sm(x, 0), sm(x, mask=mask)
    graph = torch.cuda.CUDAGraph()
    with torch.cuda.graph(graph):
        outs = (sm(x), sm(x, 0), sm(x, mask=mask))
    x.copy_(randn((64, 1000), device=DEV, seed=12))
    graph.replay()
    torch.cuda.synchronize()
    close(outs[0], ref(x))
    close(outs[1], ref(x, 0))
    close(outs[2], ref(x.masked_fill(~mask, float("-inf"))))
    # torch.compile's CUDA-graph mode
    f = torch.compile(lambda t: sm(t, -1) * 2, mode="reduce-overhead", fullgraph=True)
    for seed in (13, 14, 15):
        x = randn((64, 1000), device=DEV, seed=seed)
        close(f(x), 2 * ref(x))
    torch._dynamo.reset()


# ---------------------------------------------------------------------------------------------------------
# 2. Autograd: right to any order, or refusing

def _f32_check(check, fn, inputs):
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", UserWarning)  # "inputs are not double precision"
        return check(fn, inputs, eps=1e-2, atol=2e-3, rtol=1e-2)


@pytest.mark.parametrize("dim", [-1, 0])
def test_gradcheck_and_gradgradcheck(dim):
    x = randn((3, 7), device=DEV, seed=16, scale=1.0).requires_grad_()
    assert _f32_check(torch.autograd.gradcheck, lambda t: sm(t, dim), (x,))
    assert _f32_check(torch.autograd.gradgradcheck, lambda t: sm(t, dim), (x,))


def test_gradgradcheck_float_mask():
    x = randn((2, 3, 5), device=DEV, seed=17, scale=1.0).requires_grad_()
    m = randn((3, 5), device=DEV, seed=18, scale=1.0).requires_grad_()
    assert _f32_check(torch.autograd.gradcheck, lambda a, b: sm(a, -1, mask=b), (x, m))
    assert _f32_check(torch.autograd.gradgradcheck, lambda a, b: sm(a, -1, mask=b), (x, m))


def test_hessian_and_hvp_match_float64():
    x = randn((2, 6), device=DEV, seed=19)
    w, v = randn((2, 6), device=DEV, seed=20), randn((2, 6), device=DEV, seed=21)
    f = lambda t: (sm(t, -1) * w).sum()
    f64 = lambda t: (torch.softmax(t, -1) * w.double()).sum()
    close(torch.autograd.functional.hessian(f, x), torch.autograd.functional.hessian(f64, x.double()))
    close(torch.autograd.functional.hvp(f, x, v)[1], torch.autograd.functional.hvp(f64, x.double(), v.double())[1])
    close(torch.autograd.functional.vhp(f, x, v)[1], torch.autograd.functional.vhp(f64, x.double(), v.double())[1])
    # double backward by hand, along another dim
    xr = x.clone().requires_grad_()
    (g,) = torch.autograd.grad((sm(xr, 0) * w).sum(), xr, create_graph=True)
    (hv,) = torch.autograd.grad(g, xr, v)
    x64 = x.double().requires_grad_()
    (g64,) = torch.autograd.grad((torch.softmax(x64, 0) * w.double()).sum(), x64, create_graph=True)
    (hv64,) = torch.autograd.grad(g64, x64, v.double())
    close(hv, hv64)
    # torch.func's Hessian (forward over reverse) and reverse over forward
    H64 = torch.func.hessian(f64)(x.double())
    close(torch.func.hessian(f)(x), H64)
    close(torch.func.jacrev(torch.func.jacfwd(f))(x), H64)


def test_third_order():
    x = randn((5,), device=DEV, seed=22)
    w = randn((5,), device=DEV, seed=23)
    f = lambda t: (sm(t, 0) * w).sum()
    f64 = lambda t: (torch.softmax(t, 0) * w.double()).sum()
    close(torch.func.jacrev(torch.func.hessian(f))(x), torch.func.jacrev(torch.func.hessian(f64))(x.double()))


def test_float_mask_gradient_with_broadcast():
    s = randn((2, 2, 4, 6), device=DEV, seed=24).requires_grad_()
    dy = randn((2, 2, 4, 6), device=DEV, seed=25)
    for mshape in [(2, 2, 4, 6), (4, 6), (2, 1, 1, 6), (6,), (1, 4, 1)]:
        m = randn(mshape, device=DEV, seed=26).requires_grad_()
        m_inf = m.detach().clone()
        m_inf.view(-1)[0] = float("-inf")  # a masked entry: zero gradient there
        for mask in (m, m_inf.requires_grad_()) if mshape[-1] > 1 else (m,):  # (1, 4, 1): no fully -inf rows
            gs, gm = torch.autograd.grad(sm(s, -1, mask=mask), (s, mask), dy)
            s64, m64 = s.detach().double().requires_grad_(), mask.detach().double().requires_grad_()
            gs64, gm64 = torch.autograd.grad(torch.softmax(s64 + m64, -1), (s64, m64), dy.double())
            close(gs, gs64)
            close(gm, gm64)
            assert gm.shape == mask.shape and gm.dtype == mask.dtype
            close(gm, gs.sum_to_size(mask.shape))  # the input's gradient, summed where the mask broadcast
    # only the mask requires grad (a learned bias on fixed scores)
    m = randn((4, 6), device=DEV, seed=27).requires_grad_()
    (gm,) = torch.autograd.grad(sm(s.detach(), -1, mask=m), m, dy)
    m64 = m.detach().double().requires_grad_()
    close(gm, torch.autograd.grad(torch.softmax(s.detach().double() + m64, -1), m64, dy.double())[0])


def test_bool_mask_gradient_and_fully_masked_rows():
    s = randn((1, 2, 4, 6), device=DEV, seed=28).requires_grad_()
    keep = torch.rand(4, 6, device=DEV) > 0.4
    keep[1] = False
    keep[2, 0] = True
    dy = randn(s.shape, device=DEV, seed=29)
    (g,) = torch.autograd.grad(sm(s, -1, mask=keep), s, dy)
    s64 = s.detach().double().requires_grad_()
    y64 = torch.softmax(s64.masked_fill(~keep, float("-inf")), -1).nan_to_num(0.0)  # fully masked: zeros
    (g64,) = torch.autograd.grad(y64, s64, dy.double())
    close(g, g64)
    assert (g[:, :, 1] == 0).all() and (g[~keep.expand_as(g)] == 0).all()


def test_forward_ad():
    x, t = randn((3, 8), device=DEV, seed=30), randn((3, 8), device=DEV, seed=31)
    _, jvp64 = torch.func.jvp(lambda a: torch.softmax(a, 0), (x.double(),), (t.double(),))
    with fwAD.dual_level():
        y = sm(fwAD.make_dual(x, t), 0)
        tangent = fwAD.unpack_dual(y).tangent
    assert tangent is not None
    close(tangent, jvp64)
    y_formula = ref(x, 0)
    close(tangent, y_formula * (t.double() - (y_formula * t.double()).sum(0, keepdim=True)))
    _, jvp = torch.func.jvp(lambda a: sm(a, 0), (x,), (t,))
    close(jvp, jvp64)
    # a float mask's tangent counts, like the input's
    m, mt = randn((8,), device=DEV, seed=32), randn((8,), device=DEV, seed=33)
    _, j = torch.func.jvp(lambda a, b: sm(a, -1, mask=b), (x, m), (t, mt))
    _, j64 = torch.func.jvp(lambda a, b: torch.softmax(a + b, -1), (x.double(), m.double()), (t.double(), mt.double()))
    close(j, j64)
    # the ch08 autograd Function too
    with fwAD.dual_level():
        yk = op.SoftmaxFunction.apply(fwAD.make_dual(x, t), kernels.fused_softmax)
        tangent = fwAD.unpack_dual(yk).tangent
    close(tangent, torch.func.jvp(lambda a: torch.softmax(a, -1), (x.double(),), (t.double(),))[1])


def test_vmap():
    x = randn((4, 3, 10), device=DEV, seed=34)
    close(torch.func.vmap(lambda t: sm(t, -1))(x), ref(x))
    close(torch.func.vmap(lambda t: sm(t, 0), in_dims=2)(x), ref(x, 0).movedim(2, 0))
    close(torch.func.vmap(torch.func.vmap(lambda t: sm(t, 0)))(x), ref(x))
    # per-sample gradients
    w = randn((3, 10), device=DEV, seed=35)
    per_sample = torch.func.vmap(torch.func.grad(lambda t: (sm(t, -1) * w).sum()))(x)
    x64 = x.double().requires_grad_()
    close(per_sample, torch.autograd.grad((torch.softmax(x64, -1) * w.double()).sum(), x64)[0])
    # a batch of masks over one x, and a batch of x with one mask
    masks = randn((5, 10), device=DEV, seed=36)
    xs = x[0]
    close(torch.func.vmap(lambda m: sm(xs, -1, mask=m))(masks), ref(xs[None] + masks[:, None]))
    keep = torch.rand(3, 10, device=DEV) > 0.3
    close(torch.func.vmap(lambda t: sm(t, -1, mask=keep))(x), ref(x.masked_fill(~keep, float("-inf"))))


def test_empty_and_scalar_inputs_with_grad():
    for shape, dim in [((0, 5), -1), ((5, 0), -1), ((2, 0, 3), 1), ((0,), 0)]:
        x = torch.empty(shape, device=DEV, requires_grad=True)
        y = sm(x, dim)
        assert y.shape == shape and y.grad_fn is not None
        y.sum().backward()
        assert x.grad.shape == shape
        s = torch.empty(shape, device=DEV, requires_grad=True)
        sm(s, dim, mask=torch.ones(shape, dtype=torch.bool, device=DEV)).sum().backward()
        assert s.grad.shape == shape
    x = torch.tensor(0.5, device=DEV, requires_grad=True)
    y = sm(x, 0)
    y.backward()
    assert float(y) == 1.0 and float(x.grad) == 0.0


def test_dtype_argument_and_grad():
    x = randn((3, 50), torch.float16, DEV, seed=37, scale=4.0).requires_grad_()
    y = sm(x, -1, torch.float32)
    assert y.dtype == torch.float32
    close(y, torch.softmax(x.detach().float(), -1, dtype=torch.float32), atol=1e-6, rtol=1e-5)
    dy = randn((3, 50), device=DEV, seed=38)
    (g,) = torch.autograd.grad(y, x, dy)
    assert g.dtype == torch.float16
    x32 = x.detach().float().requires_grad_()
    close(g, torch.autograd.grad(torch.softmax(x32, -1), x32, dy)[0], atol=1e-3, rtol=1e-2)


# ---------------------------------------------------------------------------------------------------------
# The raw launchers: they record no gradient, so they refuse inputs that require grad

def test_raw_kernels_refuse_inputs_that_require_grad():
    x = randn((2, 40), device=DEV, seed=39).requires_grad_()
    for launch in kernels.ALL.values():
        with pytest.raises(RuntimeError, match="requires grad.*softmax_lab.softmax"):
            launch(x)
        with torch.no_grad():
            close(launch(x), ref(x))  # fine without grad mode
        close(launch(x.detach()), ref(x))
    with pytest.raises(RuntimeError, match="requires grad"):
        kernels.masked_softmax(x)
    with pytest.raises(RuntimeError, match="mask requires grad"):
        kernels.masked_softmax(x.detach(), torch.zeros(40, device=DEV, requires_grad=True))
    y = ref(x.detach()).float()
    with pytest.raises(RuntimeError, match="requires grad"):
        kernels.softmax_backward(y.requires_grad_(), torch.ones_like(y))


def test_softmax_function_double_backward_is_right():
    # chapter 8's SoftmaxFunction: its backward is differentiable now (it used to drop the softmax term).
    x, w, v = (randn((2, 6), device=DEV, seed=s) for s in (40, 41, 42))
    f = lambda t: (op.SoftmaxFunction.apply(t, kernels.fused_softmax) * w).sum()
    f64 = lambda t: (torch.softmax(t, -1) * w.double()).sum()
    close(torch.autograd.functional.hvp(f, x, v)[1], torch.autograd.functional.hvp(f64, x.double(), v.double())[1])


# ---------------------------------------------------------------------------------------------------------
# 4. out= and knobs

IN_PLACE_SAFE = ["row_serial", "three_pass", "fused", "multirow", "online", "split_row"]


@pytest.mark.parametrize("name", list(kernels.ALL))
def test_out_checks(name):
    launch = kernels.ALL[name]
    x = randn((3, 40), device=DEV, seed=43)
    expected = ref(x)
    # out overlapping x, shifted by one element: always refused
    big = x.new_empty(3 * 40 + 1)
    big[:120].copy_(x.view(-1))
    with pytest.raises(ValueError, match="overlaps"):
        launch(big[:120].view(3, 40), out=big[1:].view(3, 40))
    # out = x itself: allowed only where every element is read before anything overwrites it
    x_copy = x.clone()
    if name in IN_PLACE_SAFE:
        y = launch(x_copy, out=x_copy)
        assert y.data_ptr() == x_copy.data_ptr()
        close(x_copy, expected)
    else:
        with pytest.raises(ValueError, match="overlaps"):
            launch(x_copy, out=x_copy)
    # internal overlap (an expanded row)
    with pytest.raises(ValueError, match="internal overlap"):
        launch(x, out=torch.empty(1, 40, device=DEV).expand(3, 40))
    # out requiring grad
    with pytest.raises(RuntimeError, match="automatic differentiation"):
        launch(x, out=torch.empty(3, 40, device=DEV, requires_grad=True))
    # a strided but non-overlapping out is fine
    wide = torch.full((3, 50), float("nan"), device=DEV)
    launch(x, out=wide[:, 5:45])
    close(wide[:, 5:45], expected)
    assert torch.isnan(wide[:, :5]).all() and torch.isnan(wide[:, 45:]).all()
    # x and out side by side in one buffer: they share the buffer, not an element
    both = torch.full((3, 80), float("nan"), device=DEV)
    both[:, :40] = x
    launch(both[:, :40], out=both[:, 40:])
    close(both[:, 40:], expected)
    close(both[:, :40], x)


KNOBS = {
    "naive": ["BLOCK", "num_warps"], "row_serial": ["num_warps"], "three_pass": ["BLOCK", "num_warps"],
    "fused": ["BLOCK", "num_warps"], "multirow": ["ROWS", "BLOCK", "num_warps"],
    "online": ["BLOCK", "num_warps", "programs"], "split_row": ["chunks", "BLOCK", "num_warps", "rows_per_launch"],
}


@pytest.mark.parametrize("name", list(kernels.ALL))
def test_knobs_are_validated(name):
    launch = kernels.ALL[name]
    x = randn((2, 20), device=DEV, seed=44)
    for knob in KNOBS[name]:
        for bad in (0, -2):  # 0 must not silently mean "the default"; negative knobs launched nothing
            with pytest.raises(ValueError, match=f"{knob} must be a positive integer"):
                launch(x, **{knob: bad})
        with pytest.raises(TypeError, match=f"{knob} must be an int"):
            launch(x, **{knob: 2.0})
        if knob in ("BLOCK", "ROWS", "num_warps"):
            with pytest.raises(ValueError, match=f"{knob} must be a power of two"):
                launch(x, **{knob: 48 if knob == "BLOCK" else 3})
    if "num_warps" in KNOBS[name]:
        with pytest.raises(ValueError, match="num_warps must be at most 32"):
            launch(x, num_warps=64)
    # the check comes before the empty-input shortcut
    with pytest.raises(ValueError, match="num_warps"):
        launch(torch.empty(0, 20, device=DEV), num_warps=0)
    with pytest.raises(ValueError, match="num_warps"):
        kernels.masked_softmax(x, num_warps=6)


@pytest.mark.parametrize("knob", [dict(ROWS=0), dict(BLOCK=3), dict(num_warps=64), dict(chunks=-1)])
def test_backward_launcher_validates_its_knobs(knob):
    from softmax_lab.kernels import softmax_backward

    y = torch.softmax(torch.randn(2, 8, device=softmax_lab.DEVICE), -1)
    with pytest.raises(ValueError, match=next(iter(knob))):
        softmax_backward(y, torch.randn_like(y), **knob)


def test_direct_op_calls_refuse_forward_ad_instead_of_dropping_tangents():
    import softmax_lab.op

    x, t = randn((2, 5), device=softmax_lab.DEVICE), randn((2, 5), device=softmax_lab.DEVICE)
    with fwAD.dual_level():
        dual = fwAD.make_dual(x, t)
        with pytest.raises(RuntimeError, match="forward-mode AD"):
            torch.ops.softmax_lab.softmax(dual, 1)
        y = softmax_lab.softmax(dual, 1)  # the public function carries the tangent
        assert fwAD.unpack_dual(y).tangent is not None


# ---------------------------------------------------------------------------------------------------------
# 5. Edge cases that a review written the way PyTorch tests its operators found wrong (4 of them silently)

def test_registered_ops_take_negative_dims_under_vmap():
    # The vmap rules used to pass dim + 1, turning -1 into the batch dim (max error 0.8, no exception).
    import softmax_lab.op  # noqa: F401 - registers torch.ops.softmax_lab

    x = randn((4, 3, 6), device=DEV, seed=50)
    dy = randn((4, 3, 6), device=DEV, seed=51)
    m = randn((3, 6), device=DEV, seed=52)
    y64 = ref(x)
    for dim in (-1, -2, 1, 0):
        close(torch.vmap(lambda t: ops().softmax(t, dim))(x), torch.softmax(x.double(), dim % 2 + 1))
        close(torch.vmap(lambda t: ops().softmax(t, dim), in_dims=1)(x),
              torch.softmax(x.double(), [0, 2][dim % 2]).movedim(1, 0))
    close(torch.vmap(lambda t, g: ops().softmax_backward(t, g, -1))(y64.float(), dy),
          y64 * (dy.double() - (dy.double() * y64).sum(-1, keepdim=True)))
    close(torch.vmap(lambda t: ops().masked_softmax(t, m, -1))(x), ref(x + m))
    close(torch.vmap(lambda mm: ops().masked_softmax(x[0], mm, -2))(x), torch.softmax(x[0].double() + x.double(), -2))
    # eager, out of range: torch's IndexError
    with pytest.raises(IndexError, match="Dimension out of range"):
        ops().softmax(x, -4)


def test_jit_trace_keeps_a_negative_dim():
    traced = torch.jit.trace(lambda t: sm(t, -1), (randn((3, 4), device=DEV, seed=53),))
    x3 = randn((2, 3, 5), device=DEV, seed=54)  # a higher rank than traced: -1 is still the last dim
    close(traced(x3), ref(x3))
    masked = torch.jit.trace(lambda t, mm: sm(t, -1, mask=mm),
                             (randn((3, 4), device=DEV), torch.ones(4, dtype=torch.bool, device=DEV)))
    keep = torch.rand(5, device=DEV) > 0.3
    keep[0] = True
    close(masked(x3, keep), ref(x3.masked_fill(~keep, float("-inf"))))


def test_threads_share_the_interpreter_and_the_plan_cache(monkeypatch):
    # Triton's interpreter keeps its state in globals: concurrent launches raised InterpreterError or were wrong.
    import threading

    from softmax_lab import op

    monkeypatch.setattr(op, "MAX_PLANS", 3)  # plans created and evicted while other threads use them
    failures = []

    def work(seed):
        for i in range(5):
            x = randn((2 + i, 9 + seed), device=DEV, seed=100 * seed + i)
            keep = torch.rand(9 + seed, device=DEV) > 0.3
            keep[0] = True
            try:
                checks = [(sm(x, -1), ref(x)), (sm(x, 0), ref(x, 0)),
                          (kernels.masked_softmax(x, keep), ref(x.masked_fill(~keep, float("-inf")))),
                          (kernels.fused_softmax(x), ref(x))]
                for got, want in checks:
                    err = float((got.double() - want).abs().max())
                    if err > 1e-5:
                        failures.append(f"thread {seed}: error {err}")
            except Exception as e:
                failures.append(f"thread {seed}: {e!r}"[:200])

    threads = [threading.Thread(target=work, args=(s,)) for s in range(4)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert not failures, failures


def test_negative_bit_views_are_read_as_their_values():
    # torch._neg_view(x) keeps x's memory and means -x (PyTorch's test_neg_view); the kernels read memory.
    x = randn((3, 7), device=DEV, seed=55)
    n = torch._neg_view(x)
    assert n.is_neg()
    close(sm(n, -1), ref(-x))
    close(sm(n, 0), ref(-x, 0))
    close(ops().softmax(n, 1), ref(-x))
    m = randn((7,), device=DEV, seed=56)
    close(sm(x, -1, mask=torch._neg_view(m)), ref(x - m))
    close(sm(x.double(), -1, mask=torch._neg_view(m.double())), ref(x - m))
    # autograd: the input, the incoming gradient and the mask as views
    xr = x.clone().requires_grad_()
    dy = randn((3, 7), device=DEV, seed=57)
    (g,) = torch.autograd.grad(sm(torch._neg_view(xr), -1), xr, torch._neg_view(dy))
    x64 = x.double().requires_grad_()
    close(g, torch.autograd.grad(torch.softmax(-x64, -1), x64, -dy.double())[0])


SUBPROCESS_CHECK = """
import torch
x = torch.randn(3, 5)
y = softmax_lab.softmax(x, -1)
torch.testing.assert_close(y, torch.softmax(x, -1))
from softmax_lab.kernels import masked_softmax
dropped = torch.tensor([False, True, False, False, False])
torch.testing.assert_close(masked_softmax(x, ~dropped), torch.softmax(x.masked_fill(dropped, float("-inf")), -1))
print("ok")
"""


@pytest.mark.parametrize("first", [
    "import triton",
    # Dynamo imports triton when it compiles anything, even with a CPU backend
    "import torch\ntorch.compile(lambda t: t + 1, backend='aot_eager')(torch.ones(2))",
    # a learner's own kernel, decorated before softmax_lab was imported
    "import triton, triton.language as tl\n"
    "@triton.jit\n"
    "def copy(x_ptr, y_ptr, BLOCK: tl.constexpr):\n"
    "    offs = tl.arange(0, BLOCK)\n"
    "    tl.store(y_ptr + offs, tl.max(tl.load(x_ptr + offs)[None, :], axis=0))\n",
])
def test_import_order_does_not_matter(first, tmp_path):
    import os
    import subprocess
    import sys

    if softmax_lab.ON_GPU:
        pytest.skip("the import order matters only for the CPU interpreter")
    script = tmp_path / "order.py"
    extra = ("x4 = torch.arange(4.0); y4 = torch.zeros(4); copy[(1,)](x4, y4, BLOCK=4); "
             "assert y4.tolist() == [0, 1, 2, 3], y4\n") if "def copy" in first else ""
    script.write_text(first + "\nimport softmax_lab\n" + SUBPROCESS_CHECK + extra)
    env = {k: v for k, v in os.environ.items() if k not in ("TRITON_INTERPRET", "SOFTMAX_LAB_DEVICE")}
    proc = subprocess.run([sys.executable, str(script)], capture_output=True, text=True, env=env, timeout=300)
    assert proc.returncode == 0 and proc.stdout.strip() == "ok", proc.stderr[-3000:]


def test_threads_after_torch_then_softmax_lab_then_triton(tmp_path):
    # torch first, softmax_lab, triton last: the import hook must still put the interpreter's lock in place.
    import os
    import subprocess
    import sys

    if softmax_lab.ON_GPU:
        pytest.skip("the interpreter's lock is a CPU matter")
    script = tmp_path / "threads.py"
    script.write_text(textwrap.dedent("""
        import threading, torch, softmax_lab
        from softmax_lab.kernels import fused_softmax
        errors = []
        def work(seed):
            for i in range(6):
                x = torch.randn(3, 9 + seed)
                try:
                    torch.testing.assert_close(fused_softmax(x), torch.softmax(x, -1))
                except Exception as e:
                    errors.append(repr(e)[:200])
        threads = [threading.Thread(target=work, args=(s,)) for s in range(4)]
        [t.start() for t in threads]
        [t.join() for t in threads]
        print(errors or "ok")
    """))
    env = {k: v for k, v in os.environ.items() if k not in ("TRITON_INTERPRET", "SOFTMAX_LAB_DEVICE")}
    proc = subprocess.run([sys.executable, str(script)], capture_output=True, text=True, env=env, timeout=300)
    assert proc.returncode == 0 and proc.stdout.strip() == "ok", proc.stdout[-2000:] + proc.stderr[-2000:]


def test_gradcheck_with_batched_grads_and_legacy_vmap():
    x = randn((3, 5), device=DEV, seed=58).double().requires_grad_()
    m = randn((5,), device=DEV, seed=59).double().requires_grad_()
    assert torch.autograd.gradcheck(lambda t: sm(t, -1), (x,), check_batched_grad=True)
    assert torch.autograd.gradcheck(lambda t, mm: sm(t, 0, mask=mm), (x, m), check_batched_grad=True)
    assert torch.autograd.gradgradcheck(lambda t: sm(t, -1), (x,), check_batched_grad=True)
    from torch._vmap_internals import _vmap

    xs = randn((4, 3, 5), device=DEV, seed=60)
    close(_vmap(lambda t: sm(t, -1))(xs), ref(xs))
    close(_vmap(lambda t: sm(t, 0, mask=m.detach().float()))(xs), torch.softmax(xs.double() + m.detach(), 1))


def test_compiled_grad_and_per_sample_grads():
    w = randn((3, 5), device=DEV, seed=61)
    f = lambda t: (sm(t, -1) * w).sum()
    f64 = lambda t: (torch.softmax(t, -1) * w.double()).sum()
    x = randn((3, 5), device=DEV, seed=62)
    close(torch.compile(torch.func.grad(f), backend="aot_eager", fullgraph=True)(x), torch.func.grad(f64)(x.double()))
    xs = randn((4, 3, 5), device=DEV, seed=63)
    per_sample = torch.compile(torch.vmap(torch.func.grad(f)), backend="aot_eager", fullgraph=True)(xs)
    close(per_sample, torch.vmap(torch.func.grad(f64))(xs.double()))
    torch._dynamo.reset()


def test_linearize_and_make_fx_of_jvp():
    from torch.fx.experimental.proxy_tensor import make_fx

    x, t = randn((3, 6), device=DEV, seed=64), randn((3, 6), device=DEV, seed=65)
    jvp64 = torch.func.jvp(lambda a: torch.softmax(a, -1), (x.double(),), (t.double(),))[1]
    y, jvp_fn = torch.func.linearize(lambda a: sm(a, -1), x)
    close(y, ref(x))
    close(jvp_fn(t), jvp64)
    graph = make_fx(lambda a, b: torch.func.jvp(lambda u: sm(u, -1), (a,), (b,)))(x, t)
    close(graph(x, t)[1], jvp64)


def test_functionalize():
    x = randn((3, 6), device=DEV, seed=66)
    keep = torch.rand(6, device=DEV) > 0.3
    keep[0] = True
    close(torch.func.functionalize(lambda t: sm(t, -1))(x), ref(x))
    close(torch.func.functionalize(lambda t: sm(t, 0, mask=keep))(x),
          torch._safe_softmax(x.double().masked_fill(~keep, float("-inf")), 0))  # masked columns: zeros
    from torch.fx.experimental.proxy_tensor import make_fx

    graph = make_fx(torch.func.functionalize(lambda t: sm(t, -1)))(x)
    close(graph(x), ref(x))


def test_vmap_over_a_1d_tensor():
    v = randn((4,), device=DEV, seed=67)
    assert torch.equal(torch.vmap(lambda t: sm(t, 0))(v), torch.ones(4, device=DEV))
    assert torch.equal(torch.vmap(lambda t: sm(t, -1, mask=torch.tensor(True, device=DEV)))(v),
                       torch.ones(4, device=DEV))
    assert torch.equal(torch.vmap(torch.func.grad(lambda t: sm(t, 0)))(v), torch.zeros(4, device=DEV))
    assert torch.equal(torch.vmap(lambda t: ops().softmax(t, -1))(v), torch.ones(4, device=DEV))


# ---------------------------------------------------------------------------------------------------------
# 6. float64: computed in float64, with torch's dtype= semantics

def test_float64_matches_torch_in_float64():
    for shape, dim in [((3, 7), -1), ((2, 3, 5), 1), ((1, 3000), -1), ((5,), 0), ((), 0), ((0, 4), -1)]:
        x = torch.randn(shape, dtype=torch.float64, device=DEV) * 5
        torch.testing.assert_close(sm(x, dim), torch.softmax(x, dim), atol=1e-13, rtol=1e-12)
    x = torch.randn(4, 6, dtype=torch.float64, device=DEV)
    x[1] = float("-inf")  # an all -inf row: NaN, as torch
    x[2, 3] = float("nan")
    x[3, 0] = float("inf")
    torch.testing.assert_close(sm(x, -1), torch.softmax(x, -1), equal_nan=True)


def test_float64_masked_rows_and_gradients():
    x = torch.randn(2, 4, 6, dtype=torch.float64, device=DEV)
    keep = torch.rand(4, 6, device=DEV) > 0.4
    keep[1] = False  # a fully masked row: zeros, like aten._safe_softmax
    keep[2, 0] = True
    y = sm(x, -1, mask=keep)
    want = torch._safe_softmax(x.masked_fill(~keep, float("-inf")), -1)
    torch.testing.assert_close(y, want, atol=1e-13, rtol=1e-12)
    assert (y[:, 1] == 0).all()
    bias = torch.randn(6, dtype=torch.float64, device=DEV)
    torch.testing.assert_close(sm(x, 1, mask=bias), torch.softmax(x + bias, 1), atol=1e-13, rtol=1e-12)
    # float64 gradients pass gradcheck at its default (float64) tolerances, to second order
    xr = torch.randn(3, 5, dtype=torch.float64, device=DEV, requires_grad=True)
    br = torch.randn(5, dtype=torch.float64, device=DEV, requires_grad=True)
    assert torch.autograd.gradcheck(lambda t: sm(t, 0), (xr,))
    assert torch.autograd.gradgradcheck(lambda t: sm(t, -1), (xr,))
    assert torch.autograd.gradcheck(lambda t, b: sm(t, -1, mask=b), (xr, br))


def test_dtype_argument_follows_torch():
    x = randn((3, 9), device=DEV, seed=68)
    y = sm(x, -1, dtype=torch.float64)  # cast first, compute and return float64
    assert y.dtype == torch.float64
    torch.testing.assert_close(y, torch.softmax(x, -1, dtype=torch.float64), atol=1e-13, rtol=1e-12)
    y = sm(x.double(), -1, dtype=torch.float32)
    assert y.dtype == torch.float32
    close(y, ref(x))
    ints = torch.arange(6, device=DEV).view(2, 3)
    torch.testing.assert_close(sm(ints, -1, dtype=torch.float64), torch.softmax(ints, -1, dtype=torch.float64))
    with pytest.raises(TypeError, match=r"dtype=torch.int32 is not a floating-point dtype"):
        sm(x, -1, dtype=torch.int32)
    with pytest.raises(TypeError, match="must be a torch.dtype"):
        sm(x, -1, dtype="float64")
    # gradient flows back through the cast, in the input's dtype
    xr = x.clone().requires_grad_()
    (g,) = torch.autograd.grad(sm(xr, -1, dtype=torch.float64).sum(), xr)
    assert g.dtype == torch.float32


def test_long_masked_rows_are_computed_in_float64():
    # Rows longer than the masked kernel takes (kernels/masked.py MAX_COLS) go to the float64 kernels.
    x = randn((2, 70000), device=DEV, seed=69)
    keep = x > -1
    keep[1] = False
    y = sm(x, -1, mask=keep)
    close(y, torch.ops.aten._safe_softmax(x.double().masked_fill(~keep, float("-inf")), -1))
    assert y.dtype == torch.float32 and (y[1] == 0).all()


# ---------------------------------------------------------------------------------------------------------
# 7. The GPU operators' triton_op bodies (traced.py): what torch.compile traces and Inductor launches on a GPU

def test_triton_op_bodies_compute_the_operator(monkeypatch):
    # On the CPU the kernels are interpreted functions, which wrap_triton refuses: launch them directly.
    from softmax_lab import traced

    monkeypatch.setattr(traced, "wrap_triton", lambda kernel: kernel)
    x = randn((2, 3, 4, 5), device=DEV, seed=70)
    for dim in (-1, 0, 2):
        close(traced.softmax(x, dim), ref(x, dim))
        close(traced.softmax(x.double(), dim), ref(x, dim), atol=1e-12, rtol=1e-10)
        close(traced.softmax(torch._neg_view(x), dim), ref(-x, dim))
    keep = torch.rand(4, 5, device=DEV) > 0.3
    keep[:, 0] = True
    keep[2] = False
    want = torch.ops.aten._safe_softmax(x.double().masked_fill(~keep, float("-inf")), -1)
    close(traced.masked_softmax(x, keep, -1), want)
    close(traced.masked_softmax(x.double(), keep, -1), want, atol=1e-12, rtol=1e-10)
    bias = randn((3, 1, 5), device=DEV, seed=71)
    close(traced.masked_softmax(x, bias, 2), torch.softmax(x.double() + bias.double(), 2))
    y, dy = ref(x, 1), randn(x.shape, device=DEV, seed=72)
    dx = y * (dy.double() - (dy.double() * y).sum(1, keepdim=True))
    close(traced.softmax_backward(y.float(), dy, 1), dx)
    close(traced.softmax_backward(y, dy.double(), -3), dx, atol=1e-12, rtol=1e-10)
    assert float(traced.softmax(torch.tensor(2.0, device=DEV), 0)) == 1.0
    long = randn((2, 70000), device=DEV, seed=73)
    close(traced.softmax(long, -1), ref(long))
    wide = randn((3, 20000), device=DEV, seed=74)  # past the backward tile: the float64 kernel
    yw = ref(wide)
    close(traced.softmax_backward(yw.float(), wide, -1),
          yw * (wide.double() - (wide.double() * yw).sum(-1, keepdim=True)))


@pytest.mark.gpu
@pytest.mark.skipif(os.environ.get("SOFTMAX_LAB_OPS") == "custom_op",
                    reason="SOFTMAX_LAB_OPS=custom_op: the opaque operators (docs/operator.md)")
def test_inductor_launches_the_kernels_itself():
    # triton_op: Inductor's code launches the Triton kernels (no call of the operator through the dispatcher)
    from torch._inductor.utils import run_and_get_code

    torch.manual_seed(75)
    block = Attention(d=64, heads=4).to(DEV)
    x = torch.randn(2, 128, 64, device=DEV, requires_grad=True)
    causal = torch.ones(128, 128, dtype=torch.bool, device=DEV).tril()
    compiled = torch.compile(block, fullgraph=True)

    def step():
        out = compiled(x, causal)
        out.sum().backward()
        return out

    out, codes = run_and_get_code(step)
    code = "\n".join(codes)
    assert "masked_softmax_kernel" in code and "softmax_backward_kernel" in code, code[:3000]
    import re

    assert not re.search(r"torch\.ops\.softmax_lab\.\w+\.default\(", code)  # no call of the operator itself
    torch.testing.assert_close(out, block(x, causal), atol=1e-5, rtol=1e-5)
    torch._dynamo.reset()


def test_triton_op_bodies_trace_with_symbolic_shapes(monkeypatch):
    # What torch.compile does with them on a GPU, minus the GPU: the bodies trace on FakeTensors with symbolic
    # shapes (no addresses read, no size turned into an int): the grids stay symbolic, block sizes are guarded.
    from torch.fx.experimental.proxy_tensor import make_fx

    from softmax_lab import traced

    launches = []

    class Recorder:  # stands in for wrap_triton: records each launch instead of making a graph node
        def __init__(self, kernel):
            self.kernel = kernel

        def __getitem__(self, grid):
            return lambda *args, **kwargs: launches.append((self.kernel.__name__, grid, kwargs["BLOCK"]))

    monkeypatch.setattr(traced, "wrap_triton", Recorder)
    x = torch.randn(2, 3, 7, 100, device=DEV)
    keep = torch.rand(7, 100, device=DEV) > 0.5
    y = torch.softmax(x, 1)
    make_fx(lambda a, m: traced.masked_softmax(a, m, -1), tracing_mode="symbolic")(x, keep)
    make_fx(lambda a: traced.softmax(a, 1), tracing_mode="symbolic")(x)
    make_fx(lambda a, b: traced.softmax_backward(a, b, 1), tracing_mode="symbolic")(y, y)
    make_fx(lambda a: traced.softmax(a, -1), tracing_mode="symbolic")(x.double())
    names = [name for name, _, _ in launches]
    assert names == ["masked_softmax_kernel", "masked_softmax_kernel", "softmax_backward_kernel",
                     "double_softmax_kernel"]
    assert all(not isinstance(grid[0], int) for _, grid, _ in launches)  # symbolic programs counts
    assert [block for _, _, block in launches] == [128, 4, 4, 128]


def test_the_backward_operator_keeps_float64_to_second_order():
    # op.softmax_backward's own derivatives (grad with respect to y, its forward-mode tangent) are written with
    # torch ops: in float64 they stay in float64 (they once went through float32: 1.75e-7 off).
    y = torch.softmax(randn((3, 6), device=DEV, seed=61).double(), -1).requires_grad_()
    dy = randn((3, 6), device=DEV, seed=62).double().requires_grad_()
    assert torch.autograd.gradcheck(lambda a, b: op.softmax_backward(a, b, -1), (y, dy))
    assert torch.autograd.gradgradcheck(lambda a, b: op.softmax_backward(a, b, -1), (y, dy))
    g = randn((3, 6), device=DEV, seed=63).double()
    (grad_y,) = torch.autograd.grad(op.softmax_backward(y, dy, -1), y, g)
    yy, dd = y.detach().requires_grad_(), dy.detach()
    (want,) = torch.autograd.grad(yy * (dd - (dd * yy).sum(-1, keepdim=True)), yy, g)
    torch.testing.assert_close(grad_y, want, atol=1e-14, rtol=1e-12)
    y_t = randn((3, 6), device=DEV, seed=64).double()
    with fwAD.dual_level():
        tangent = fwAD.unpack_dual(op.softmax_backward(fwAD.make_dual(y.detach(), y_t), dy.detach(), -1)).tangent
    _, want_t = torch.func.jvp(lambda a: a * (dd - (dd * a).sum(-1, keepdim=True)), (y.detach(),), (y_t,))
    torch.testing.assert_close(tangent, want_t, atol=1e-14, rtol=1e-12)


def test_the_backward_operator_refuses_y_and_dy_unlike():
    # As torch's _softmax_backward_data: dx comes in y's dtype, so a float64 dy beside a float32 y is refused, not
    # computed in float32 without a word; every way in says so, the compiled one included.
    y = torch.softmax(randn((3, 6), device=DEV, seed=65), -1)
    dy = randn((3, 6), device=DEV, seed=66)
    for call in (op.softmax_backward, torch.ops.softmax_lab.softmax_backward,
                 torch.compile(lambda a, b, d: op.softmax_backward(a, b, d), backend="aot_eager", fullgraph=True)):
        with pytest.raises(Exception, match=r"dy is torch.float64 but y is torch.float32.*dy.to\(torch.float32\)"):
            call(y, dy.double(), -1)
        with pytest.raises(Exception, match="dy has shape"):
            call(y, dy[:, :5], -1)
    torch.testing.assert_close(op.softmax_backward(y, dy, -1), y * (dy - (dy * y).sum(-1, keepdim=True)))


def test_meta_tensors_get_shapes_as_torch_gives_them():
    # Shape inference on the meta device (models built there): the operators' fake implementations answer, and a
    # plan made for a CPU tensor of the same shape is never taken for a meta one (both have get_device() == -1).
    x = randn((3, 5), device=DEV, seed=89)
    close(softmax_lab.softmax(x), ref(x))
    m = torch.empty(3, 5, device="meta")
    for got in (softmax_lab.softmax(m), softmax_lab.softmax(m, 0), softmax_lab.softmax(m, dtype=torch.float64),
                softmax_lab.softmax(m, mask=torch.ones(3, 5, dtype=torch.bool, device="meta")),
                op.softmax_backward(m, m, -1)):
        assert got.device.type == "meta" and got.shape == (3, 5)
    assert softmax_lab.softmax(m, dtype=torch.float64).dtype == torch.float64
    grad = torch.empty(3, 5, device="meta", requires_grad=True)
    softmax_lab.softmax(grad).sum().backward()
    assert grad.grad.device.type == "meta" and grad.grad.shape == (3, 5)
    with pytest.raises(ValueError, match="is on meta but"):
        kernels.fused_softmax(m)  # the raw launchers run kernels: no meta tensors there
    with pytest.raises(ValueError, match="dy is on meta but y is on"):  # not a meta result for a real y
        op.softmax_backward(x, m, -1)
    with pytest.raises(ValueError, match="dy is on .* but y is on meta"):
        op.softmax_backward(m, x, -1)


def test_dim_may_be_a_numpy_integer():
    import numpy as np

    x = randn((3, 5), device=DEV, seed=90)
    close(softmax_lab.softmax(x, np.int64(0)), ref(x, 0))
    close(softmax_lab.softmax(x, np.int32(-1), mask=torch.ones(3, 5, dtype=torch.bool, device=DEV)), ref(x))
    y = ref(x, 0).float()
    close(op.softmax_backward(y, x, np.int64(0)), y * (x - (x * y).sum(0, keepdim=True)))
    with pytest.raises(TypeError, match="must be int, not float"):
        softmax_lab.softmax(x, 1.0)


def test_a_saved_program_loads_in_a_new_process_after_importing_the_operators(tmp_path):
    # docs/operator.md: the operators are registered by `import softmax_lab.op`; a process that loads a saved
    # program imports it first (a bare `import softmax_lab` stays light and registers nothing).
    import subprocess
    import sys

    class Model(torch.nn.Module):
        def forward(self, t):
            return softmax_lab.softmax(t, -1) * 2

    x = randn((2, 8), device=DEV, seed=91)
    torch.export.save(torch.export.export(Model(), (x,)), tmp_path / "model.pt2")
    torch.save(x, tmp_path / "x.pt")
    load = textwrap.dedent(f"""
        import torch, softmax_lab{{}}
        program = torch.export.load({str(tmp_path / "model.pt2")!r})
        x = torch.load({str(tmp_path / "x.pt")!r})
        print(float((program.module()(x) - 2 * torch.softmax(x.double(), -1)).abs().max()))
    """)
    env = dict(os.environ, PYTHONPATH=os.pathsep.join(sys.path))
    run = lambda extra: subprocess.run([sys.executable, "-c", load.format(extra)], capture_output=True, text=True,
                                       env=env, timeout=300)
    bare, with_op = run(""), run("\nimport softmax_lab.op")
    assert bare.returncode != 0 and "softmax_lab.softmax" in bare.stderr
    assert with_op.returncode == 0, with_op.stderr
    assert float(with_op.stdout.split()[-1]) < 1e-5


def test_forward_mode_through_a_function_whose_launcher_changes_the_dtype():
    # SoftmaxFunction's jvp passes the tangent in y's dtype (softmax_backward asks for y and dy alike)
    x = randn((3, 8), device=DEV, seed=92).half()
    t = randn((3, 8), device=DEV, seed=93).half()
    with fwAD.dual_level():
        y = op.SoftmaxFunction.apply(fwAD.make_dual(x, t), lambda z: torch.softmax(z.float(), -1))
        tangent = fwAD.unpack_dual(y).tangent
    y64 = torch.softmax(x.double(), -1)
    assert tangent.dtype == torch.float32
    close(tangent, y64 * (t.double() - (t.double() * y64).sum(-1, keepdim=True)), atol=1e-3, rtol=1e-3)
