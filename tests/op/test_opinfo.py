"""softmax_lab.softmax tested the way PyTorch tests its own operators: as OpInfo entries.

Three entries (``softmax_lab.softmax``, its ``with_dtype`` variant and the ``masked`` variant) with sample inputs
(the plain ones are PyTorch's own softmax samples, ``sample_inputs_softmax_variant``), run through PyTorch's
OpInfo machinery (``@ops`` and ``instantiate_device_type_tests``, one test per entry and dtype) and its
operator checks where they are shipped with torch: ``optests.fake_check`` (test_ops' TestFakeTensor),
``optests.aot_autograd_check`` (test_aotdispatch), ``optests.make_fx_check`` (test_proxy_tensor),
``gradcheck``/``gradgradcheck`` with batched and forward-mode gradients (test_ops_gradients). PyTorch's
functorch templates (vmap exhaustive, jvp, vjp, grad of grad, linearize) and TestMathBits' neg view live in
PyTorch's test folder, which is not installed: they are written out below the same way (every vmap in_dims
pattern against a loop over the batch; transforms against torch.softmax's in float64).

Each result is compared with ``torch.softmax`` (``aten._safe_softmax`` with a mask) in float64. On the CPU
(Triton's interpreter) the tensors are tiny; on a GPU the same tests run on CUDA:
``pytest tests/op/test_opinfo.py -m gpu``.
"""
import threading
import warnings
from functools import partial

import pytest
import torch
from torch.testing import make_tensor
from torch.testing._internal.common_device_type import instantiate_device_type_tests, ops
from torch.testing._internal.common_utils import TestCase
from torch.testing._internal.opinfo.core import OpInfo, SampleInput
from torch.testing._internal.opinfo.definitions._masked import sample_inputs_softmax_variant
from torch.testing._internal.optests import aot_autograd_check, fake_check, make_fx_check

import softmax_lab
import softmax_lab.op

FLOATS = (torch.float16, torch.bfloat16, torch.float32, torch.float64)


# ---------------------------------------------------------------------------------------------------------
# The entries: the operator, its reference, its sample inputs

def masked(input, mask, dim=-1):
    """The masked variant with the mask positional, so that transforms (vmap, jvp) see it as an input."""
    return softmax_lab.softmax(input, dim, mask=mask)


def reference(op_name, input, *args, dtype=None, **kwargs):
    """What the entry must equal: torch in float64 (``aten._safe_softmax`` under a mask: masked rows give 0)."""
    if op_name == "masked":
        mask, dim = args[0], kwargs.get("dim", args[1] if len(args) > 1 else -1)
        s = input.double()
        s = s.masked_fill(~mask, float("-inf")) if mask.dtype == torch.bool else s + mask.double()
        return torch.ops.aten._safe_softmax(s, dim)
    return torch.softmax(input.double() if dtype is None else input.to(dtype).double(), *args)


def registered(op_name, input, *args, dtype=None, **kwargs):
    """The same call through the dispatcher: the torch.library operators themselves."""
    if op_name == "masked":
        mask, dim = args[0], kwargs.get("dim", args[1] if len(args) > 1 else -1)
        return torch.ops.softmax_lab.masked_softmax(input, mask, dim)
    x = input if dtype is None else input.to(dtype)
    return torch.ops.softmax_lab.softmax(x, *args)


def sample_inputs_masked(op_info, device, dtype, requires_grad, **kwargs):
    """Scores and SDPA-style masks: bool (True takes part) and float (added, with -inf), broadcast shapes, a
    fully masked row, a strided input, a 0-d and an empty input."""
    make = partial(make_tensor, device=device, dtype=dtype, low=-4, high=4)

    def float_mask(*shape, inf=True):
        m = make_tensor(shape, device=device, dtype=dtype, low=-2, high=2)
        if inf:
            m.view(-1)[0] = float("-inf")
        return m.requires_grad_(requires_grad)

    def keep(*shape, empty_row=None):
        k = torch.rand(shape, device=device) > 0.4
        k[..., 0] = True
        if empty_row is not None:
            k[empty_row] = False  # everything masked: zeros
        return k

    yield SampleInput(make((5, 5), requires_grad=requires_grad), args=(keep(5),), kwargs=dict(dim=-1))
    yield SampleInput(make((2, 3, 5), requires_grad=requires_grad), args=(keep(3, 5, empty_row=1),),
                      kwargs=dict(dim=-1))
    yield SampleInput(make((2, 3, 6), requires_grad=requires_grad), args=(float_mask(3, 1, inf=False),),
                      kwargs=dict(dim=1))
    yield SampleInput(make((2, 1, 2, 6), requires_grad=requires_grad), args=(float_mask(2, 1, 1, 6),),
                      kwargs=dict(dim=-1))
    wide = make((4, 9))
    yield SampleInput(wide[:, 1:8].requires_grad_(requires_grad), args=(keep(7),), kwargs=dict(dim=0))  # strided
    yield SampleInput(make((), requires_grad=requires_grad), args=(torch.tensor(True, device=device),),
                      kwargs=dict(dim=0))
    yield SampleInput(make((0, 5), requires_grad=requires_grad), args=(keep(5),), kwargs=dict(dim=-1))


op_db = [
    OpInfo("softmax_lab.softmax", op=softmax_lab.softmax, dtypes=FLOATS,
           sample_inputs_func=sample_inputs_softmax_variant,
           supports_out=False, supports_forward_ad=True, supports_fwgrad_bwgrad=True),
    OpInfo("softmax_lab.softmax", variant_test_name="with_dtype", op=softmax_lab.softmax, dtypes=FLOATS,
           sample_inputs_func=partial(sample_inputs_softmax_variant, with_dtype=True),
           supports_out=False, supports_forward_ad=True, supports_fwgrad_bwgrad=True),
    OpInfo("softmax_lab.softmax", variant_test_name="masked", op=masked, dtypes=FLOATS,
           sample_inputs_func=sample_inputs_masked, supports_out=False, supports_forward_ad=True,
           supports_fwgrad_bwgrad=True),
]


# The with_dtype entry casts before the same kernels: it joins the value tests, not the (slow, on the interpreter)
# transform and tracer tests, where it would repeat the plain entry's work.
# (On a GPU everything runs: entries, dtypes and samples.)
ON_GPU = softmax_lab.ON_GPU
transform_db = op_db if ON_GPU else [op for op in op_db if op.variant_test_name != "with_dtype"]
PRECISIONS = FLOATS if ON_GPU else (torch.float32, torch.float64)  # 16-bit inputs take float32's paths


def few(samples, most=4, numel=64):
    """The first ``most`` samples of at most ``numel`` elements: the interpreter runs programs one after another,
    so the tests that launch kernels many times per sample (gradcheck, tracers) take the small ones on the CPU."""
    return list(samples) if ON_GPU else [s for s in samples if s.input.numel() <= numel][:most]


def name_of(op) -> str:
    return op.variant_test_name or "plain"


def tolerance(dtype):
    """(atol, rtol) against the float64 reference: the kernels compute in float32 and round to the dtype."""
    return {torch.float16: (1e-3, 1e-3), torch.bfloat16: (8e-3, 1.6e-2), torch.float32: (1e-6, 1e-5),
            torch.float64: (1e-12, 1e-10)}[dtype]


def assert_matches(got, want, dtype, msg=""):
    atol, rtol = tolerance(dtype)
    torch.testing.assert_close(got.double(), want.double(), atol=atol, rtol=rtol, equal_nan=True, msg=msg or None)


def split(sample):
    """(tensor positions, function of those tensors) for a sample: the ints and kwargs stay fixed."""
    values = [sample.input, *sample.args]
    where = [i for i, v in enumerate(values) if isinstance(v, torch.Tensor)]
    return values, where


def differentiable(values):
    return [i for i, v in enumerate(values) if isinstance(v, torch.Tensor) and v.dtype.is_floating_point]


def as_function(op, sample, positions, values):
    """f(*tensors at positions) = op(sample with those tensors replaced)."""
    def f(*tensors):
        args = list(values)
        for i, t in zip(positions, tensors):
            args[i] = t
        return op(*args, **sample.kwargs)
    return f


def ref_function(op, sample, positions, values):
    name = name_of(op)

    def f(*tensors):
        args = list(values)
        for i, t in zip(positions, tensors):
            args[i] = t
        return reference(name, *args, **sample.kwargs)
    return f


def quietly(fn, *args, **kwargs):
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # deprecations (jit.trace), TracerWarnings, "not double precision"
        return fn(*args, **kwargs)


# ---------------------------------------------------------------------------------------------------------
# The tests: one per PyTorch template

class TestSoftmaxLabOpInfo(TestCase):
    @ops(op_db, allowed_dtypes=FLOATS)
    def test_variant_consistency(self, device, dtype, op):
        # test_ops' variant consistency: every way of calling the operator gives torch's values
        name = name_of(op)
        for sample in op.sample_inputs(device, dtype):
            want = reference(name, sample.input, *sample.args, **sample.kwargs)
            eager = op(sample.input, *sample.args, **sample.kwargs)
            out_dtype = sample.kwargs.get("dtype") or dtype
            self.assertEqual(eager.dtype, out_dtype)
            self.assertEqual(eager.shape, sample.input.shape)
            assert_matches(eager, want, out_dtype, f"eager, {sample}")
            assert_matches(registered(name, sample.input, *sample.args, **sample.kwargs), want, out_dtype,
                           f"torch.ops.softmax_lab, {sample}")
            grad_input = sample.input.detach().clone().requires_grad_()
            assert_matches(op(grad_input, *sample.args, **sample.kwargs), want, out_dtype, f"autograd, {sample}")

    @ops(op_db, allowed_dtypes=PRECISIONS)
    def test_fake(self, device, dtype, op):
        # test_ops' TestFakeTensor: fake and real runs agree on shape, dtype, strides (CrossRefFakeMode)
        name = name_of(op)
        for sample in op.sample_inputs(device, dtype):
            fake_check(partial(registered, name), (sample.input, *sample.args), sample.kwargs)
            real = op(sample.input, *sample.args, **sample.kwargs)
            with torch._subclasses.fake_tensor.FakeTensorMode(allow_non_fake_inputs=True) as mode:
                values = [mode.from_tensor(v) if isinstance(v, torch.Tensor) else v
                          for v in (sample.input, *sample.args)]
                fake = op(*values, **sample.kwargs)
            self.assertEqual((fake.shape, fake.dtype, fake.stride()), (real.shape, real.dtype, real.stride()))

    @ops(transform_db, allowed_dtypes=(torch.float32,))
    def test_vmap_exhaustive(self, device, dtype, op):
        # functorch's vmap exhaustive: every tensor argument batched at dim 0, at its last dim, or not at all,
        # against a Python loop over the batch; and vmap of vmap
        batch = 2
        for sample in op.sample_inputs(device, dtype):
            values, where = split(sample)
            f = as_function(op, sample, where, values)
            tensors = [values[i] for i in where]
            for pattern in _in_dim_patterns(tensors):
                batched = [t if d is None else _batch(t, d, batch) for t, d in zip(tensors, pattern)]
                got = torch.func.vmap(f, in_dims=tuple(pattern))(*batched)
                loop = torch.stack([f(*[t if d is None else t.select(d, b) for t, d in zip(batched, pattern)])
                                    for b in range(batch)])
                assert_matches(got, loop, dtype, f"in_dims={pattern}, {sample}")
            nested = [_batch(_batch(t, 0, batch), 0, 3) for t in tensors]
            got = torch.func.vmap(torch.func.vmap(f))(*nested)
            loop = torch.stack([torch.stack([f(*[t[i, j] for t in nested]) for j in range(batch)]) for i in range(3)])
            assert_matches(got, loop, dtype, f"vmap of vmap, {sample}")

    @ops(transform_db, allowed_dtypes=(torch.float32,))
    def test_jvp(self, device, dtype, op):
        for sample in op.sample_inputs(device, dtype):
            f, f64, primals = self._differentiable(op, sample)
            tangents = [torch.randn_like(p) for p in primals]
            out, tangent = torch.func.jvp(f, tuple(primals), tuple(tangents))
            out64, tangent64 = torch.func.jvp(f64, tuple(p.double() for p in primals),
                                              tuple(t.double() for t in tangents))
            assert_matches(out, out64, dtype)
            assert_matches(tangent, tangent64.nan_to_num(), dtype, f"jvp, {sample}")

    @ops(transform_db, allowed_dtypes=(torch.float32,))
    def test_vjp(self, device, dtype, op):
        for sample in op.sample_inputs(device, dtype):
            f, f64, primals = self._differentiable(op, sample)
            out, vjp_fn = torch.func.vjp(f, *primals)
            cotangent = torch.randn_like(out)
            out64, vjp64 = torch.func.vjp(f64, *[p.double() for p in primals])
            for got, want in zip(vjp_fn(cotangent), vjp64(cotangent.double())):
                assert_matches(got, want.nan_to_num(), dtype, f"vjp, {sample}")
            # per-sample gradients: vmap of vjp
            cotangents = torch.stack([cotangent, torch.randn_like(out)])
            for got, want in zip(torch.func.vmap(vjp_fn)(cotangents), torch.func.vmap(vjp64)(cotangents.double())):
                assert_matches(got, want.nan_to_num(), dtype, f"vmap(vjp), {sample}")

    @ops(transform_db, allowed_dtypes=(torch.float32,))
    def test_grad_of_grad(self, device, dtype, op):
        # Hessian-vector products: reverse over reverse, and forward over reverse (jvp of grad)
        for sample in op.sample_inputs(device, dtype):
            f, f64, primals = self._differentiable(op, sample)
            if primals[0].numel() == 0:
                continue
            w = torch.randn_like(primals[0])
            v = [torch.randn_like(p) for p in primals]
            argnums = tuple(range(len(primals)))

            def hvp(fn, ps, vs, w):
                g = torch.func.grad(lambda *a: (fn(*a) * w).sum(), argnums=argnums)
                return torch.func.grad(lambda *a: sum((gi * vi).sum() for gi, vi in zip(g(*a), vs)),
                                       argnums=argnums)(*ps)

            want = hvp(f64, [p.double() for p in primals], [t.double() for t in v], w.double())
            for got, ref in zip(hvp(f, primals, v, w), want):
                assert_matches(got, ref.nan_to_num(), dtype, f"grad of grad, {sample}")
            g = torch.func.grad(lambda *a: (f(*a) * w).sum(), argnums=argnums)
            g64 = torch.func.grad(lambda *a: (f64(*a) * w.double()).sum(), argnums=argnums)
            _, fwd = torch.func.jvp(g, tuple(primals), tuple(v))
            _, fwd64 = torch.func.jvp(g64, tuple(p.double() for p in primals), tuple(t.double() for t in v))
            for got, ref in zip(fwd, fwd64):
                assert_matches(got, ref.nan_to_num(), dtype, f"jvp of grad, {sample}")

    @ops(transform_db, allowed_dtypes=(torch.float32,))
    def test_linearize(self, device, dtype, op):
        for sample in op.sample_inputs(device, dtype):
            f, f64, primals = self._differentiable(op, sample)
            tangents = [torch.randn_like(p) for p in primals]
            out, jvp_fn = quietly(torch.func.linearize, f, *primals)
            _, want = torch.func.jvp(f64, tuple(p.double() for p in primals), tuple(t.double() for t in tangents))
            assert_matches(jvp_fn(*tangents), want.nan_to_num(), dtype, f"linearize, {sample}")

    @ops(transform_db, allowed_dtypes=(torch.float32,))
    def test_aot_dispatch(self, device, dtype, op):
        # test_aotdispatch: forward and backward under AOTAutograd equal eager, static and dynamic shapes
        for i, sample in enumerate(few(op.sample_inputs(device, dtype, requires_grad=True))):
            args = (sample.input, *sample.args)
            aot_autograd_check(op.op, args, sample.kwargs, dynamic=bool(i % 2), check_gradients="auto")

    @ops(transform_db, allowed_dtypes=(torch.float32,))
    def test_make_fx(self, device, dtype, op):
        # test_proxy_tensor: a traced graph (real, fake and symbolic shapes) computes what eager does
        for i, sample in enumerate(few(op.sample_inputs(device, dtype))):
            mode = ("real", "fake", "symbolic")[i % 3]
            quietly(make_fx_check, op.op, (sample.input, *sample.args), sample.kwargs, mode)

    @ops(op_db, allowed_dtypes=PRECISIONS)
    def test_neg_view(self, device, dtype, op):
        # TestMathBits: op(torch._neg_view(x)) (x in memory, the negative bit set) equals op(torch.neg(x)), values
        # and gradients (the incoming gradient a neg view too)
        for sample in op.sample_inputs(device, dtype, requires_grad=dtype == torch.float64):
            values, _ = split(sample)
            floats = differentiable(values)
            physical = [torch.neg(v) if i in floats else v for i, v in enumerate(values)]
            views = [torch._neg_view(v) if i in floats else v for i, v in enumerate(values)]
            self.assertTrue(views[0].is_neg())
            want, got = op(*physical, **sample.kwargs), op(*views, **sample.kwargs)
            assert_matches(got, want, sample.kwargs.get("dtype") or dtype, f"neg view, {sample}")
            leaves = [values[i] for i in floats if values[i].requires_grad]
            if leaves and want.numel():
                dy = torch.randn_like(want)
                for a, b in zip(torch.autograd.grad(got, leaves, torch._neg_view(-dy)),
                                torch.autograd.grad(want, leaves, dy)):
                    assert_matches(a, b, dtype, f"neg view gradient, {sample}")

    @ops(transform_db, allowed_dtypes=(torch.float32,))
    def test_conj_view(self, device, dtype, op):
        # TestMathBits' conj view applies to complex tensors, which softmax takes nowhere (torch refuses them too);
        # a real tensor's conj() is the tensor itself. Both are checked.
        for sample in op.sample_inputs(device, dtype):
            self.assertIs(sample.input.conj(), sample.input)
        x = torch.randn(3, 4, dtype=torch.complex64, device=device)
        with self.assertRaises(RuntimeError):  # NotImplementedError: not implemented for 'ComplexFloat'
            torch.softmax(x, -1)
        with self.assertRaisesRegex(TypeError, "floating-point|float16, bfloat16"):
            if name_of(op) != "masked":
                op(x.conj(), -1)
            else:
                op(x.conj(), torch.ones(4, dtype=torch.bool, device=device))

    @ops(transform_db, allowed_dtypes=(torch.float64,))
    def test_gradcheck(self, device, dtype, op):
        # test_ops_gradients: gradcheck and gradgradcheck with OpInfo's defaults: batched gradients, forward mode,
        # forward over reverse
        for sample in few(op.sample_inputs(device, dtype, requires_grad=True), most=5, numel=40):
            f, _, primals = self._differentiable(op, sample)
            primals = [p.detach().requires_grad_() for p in primals]
            check = dict(check_batched_grad=True, fast_mode=True)
            self.assertTrue(torch.autograd.gradcheck(f, primals, check_forward_ad=True,
                                                     check_batched_forward_grad=True, **check))
            self.assertTrue(torch.autograd.gradgradcheck(f, primals, check_fwd_over_rev=True, **check))

    @ops(transform_db, allowed_dtypes=(torch.float32,))
    def test_jit_trace(self, device, dtype, op):
        # a trace replays the operator with the dims as written (a negative dim stays negative)
        for sample in op.sample_inputs(device, dtype):
            values, where = split(sample)
            f = as_function(op, sample, where, values)
            tensors = [values[i] for i in where]
            traced = quietly(torch.jit.trace, f, tuple(tensors), check_trace=False)
            assert_matches(quietly(traced, *tensors), f(*tensors), dtype, f"jit.trace, {sample}")
            dim = sample.kwargs.get("dim", sample.args[0] if sample.args and isinstance(sample.args[0], int) else None)
            if isinstance(dim, int) and dim < 0 and sample.input.dim() > 0 and sample.input.numel():
                taller = [_batch(tensors[0], 0, 2), *tensors[1:]]  # one more leading dim: -1 is still the last
                assert_matches(quietly(traced, *taller), f(*taller), dtype, f"jit.trace on a higher rank, {sample}")

    @ops(op_db, allowed_dtypes=PRECISIONS)
    def test_threads(self, device, dtype, op):
        # concurrent calls (Triton's interpreter is not thread-safe; the plan cache is shared)
        samples = list(op.sample_inputs(device, dtype))
        serial = [op(s.input, *s.args, **s.kwargs) for s in samples]
        results, errors = {}, []

        def work(k):
            try:
                for j, s in enumerate(samples):
                    results[k, j] = op(s.input, *s.args, **s.kwargs)
            except Exception as e:
                errors.append(repr(e))

        threads = [threading.Thread(target=work, args=(k,)) for k in range(4)]
        for t in threads:
            t.start()
        for t in threads:
            t.join()
        self.assertEqual(errors, [])
        for (_k, j), got in results.items():
            torch.testing.assert_close(got, serial[j], atol=0, rtol=0, equal_nan=True)

    @ops(transform_db, allowed_dtypes=(torch.float32,))
    def test_compile(self, device, dtype, op):
        # torch.compile(fullgraph=True): Inductor on a GPU; on the CPU aot_eager (the same tracing, no C++ build)
        backend = "inductor" if device.startswith("cuda") else "aot_eager"
        for sample in few(op.sample_inputs(device, dtype)):
            values, where = split(sample)
            f = as_function(op, sample, where, values)
            tensors = [values[i] for i in where]
            compiled = torch.compile(f, backend=backend, fullgraph=True)
            assert_matches(compiled(*tensors), f(*tensors), dtype, f"compiled, {sample}")
        torch._dynamo.reset()

    # helpers
    def _differentiable(self, op, sample):
        """(f, f64, primals): the operator and its float64 reference as functions of the sample's float tensors."""
        values, _ = split(sample)
        positions = differentiable(values)
        primals = [values[i].detach() for i in positions]
        return as_function(op, sample, positions, values), ref_function(op, sample, positions, values), primals


def _in_dim_patterns(tensors):
    """Every assignment of None / 0 / -1 (batched at the last dim) to the tensors, except all None."""
    patterns = [[]]
    for _ in tensors:
        patterns = [p + [d] for p in patterns for d in (None, 0, -1)]
    return [p for p in patterns if any(d is not None for d in p)]


def _batch(t, dim, size):
    """``t`` and ``size - 1`` other tensors like it, stacked along ``dim`` (-1: after t's last dim)."""
    others = [t]
    for _ in range(size - 1):
        other = (torch.rand(t.shape, device=t.device) > 0.4) | t if t.dtype == torch.bool else t + torch.randn_like(t)
        others.append(other.detach())
    return torch.stack(others, dim=t.dim() if dim == -1 else dim)


instantiate_device_type_tests(TestSoftmaxLabOpInfo, globals(), only_for=softmax_lab.DEVICE.type)
if "TestSoftmaxLabOpInfoCUDA" in globals():  # made by instantiate_device_type_tests above
    globals()["TestSoftmaxLabOpInfoCUDA"].pytestmark = [pytest.mark.gpu]
