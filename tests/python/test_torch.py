# Kernels as torch operators: eager calls, torch.compile(fullgraph=True) without graph breaks,
# autograd through a backward kernel, and zero-copy inputs.
import pytest

torch = pytest.importorskip("torch")

import neuron  # noqa: E402
import neuron.language as nl  # noqa: E402
import neuron.torch as nt  # noqa: E402


def rmsnorm(x, w):
    out = nl.ndarray(x.shape, x.dtype, buffer=nl.shared_hbm)
    wt = nl.load(w)
    for i in nl.affine_range(x.shape[0] // 128):
        t = nl.load(x[i * 128:(i + 1) * 128, :], dtype=nl.float32)
        r = nl.rsqrt(nl.mean(nl.square(t), axis=1) + 1e-6)
        nl.store(out[i * 128:(i + 1) * 128, :], nl.multiply(t * r, wt, dtype=x.dtype))
    return out


rmsnorm_op = nt.custom_op("neuron_test::rmsnorm", rmsnorm)


def rmsnorm_ref(x, w):
    x64 = x.double()
    return x64 / torch.sqrt((x64 * x64).mean(1, keepdim=True) + 1e-6) * w.double().repeat(
        x.shape[0] // 128, 1)


class Norm(torch.nn.Module):
    def __init__(self):
        super().__init__()
        self.w = torch.nn.Parameter(torch.rand(128, 64), requires_grad=False)

    def forward(self, x):
        return rmsnorm_op(x * 2, self.w) + 1


def test_custom_op_in_a_module_eager_and_compiled():
    m = Norm()
    x = torch.randn(256, 64)
    eager = m(x)
    torch.testing.assert_close(eager.double(), rmsnorm_ref(x * 2, m.w) + 1, rtol=1e-5,
                               atol=1e-5)
    compiled = torch.compile(m, fullgraph=True, backend="aot_eager")
    torch.testing.assert_close(compiled(x), eager)


def cube(x):
    out = nl.ndarray(x.shape, x.dtype, buffer=nl.shared_hbm)
    t = nl.load(x)
    nl.store(out, t * t * t)
    return out


def cube_backward(grad, x):
    dx = nl.ndarray(x.shape, x.dtype, buffer=nl.shared_hbm)
    t = nl.load(x)
    nl.store(dx, nl.load(grad) * (t * t) * 3.0)
    return dx


cube_op = nt.custom_op("neuron_test::cube", cube, backward=cube_backward)


def test_autograd_through_a_backward_kernel():
    x = torch.randn(128, 32, requires_grad=True)
    y = cube_op(x)
    y.sum().backward()
    torch.testing.assert_close(x.grad, 3 * x.detach() ** 2)


def test_contiguous_torch_inputs_are_not_copied():
    seen = []

    def peek(x):
        out = nl.ndarray(x.shape, x.dtype, buffer=nl.shared_hbm)
        nl.store(out, nl.load(x))
        return out

    from neuron import runtime
    x = torch.arange(128 * 4, dtype=torch.float32).reshape(128, 4)
    seen.append(runtime.to_numpy(x))
    assert seen[0].__array_interface__["data"][0] == x.data_ptr()
    out = neuron.kernel(peek)(x)
    assert torch.equal(out, x)
    # an output returned as a torch tensor shares the NumPy output's memory: writes show up
    arr = out.numpy()
    arr[0, 0] = 42.0
    assert out[0, 0].item() == 42.0


# ---- inputs a kernel cannot take: fallback with a one-time warning, or strict errors ----

def scale2(x):
    out = nl.ndarray(x.shape, x.dtype, buffer=nl.shared_hbm)
    nl.store(out, nl.load(x) * 2.0)  # the whole tensor as one tile: at most 128 rows
    return out


def scale2_ref(x):
    return x * 2


scale2_op = nt.custom_op("neuron_test::scale2", scale2, reference=scale2_ref)
scale2_strict = nt.custom_op("neuron_test::scale2_strict", scale2, reference=scale2_ref,
                             strict=True)
scale2_noref = nt.custom_op("neuron_test::scale2_noref", scale2)


def _count(op, kind):
    return nt.fallback_counts().get((op, kind), 0)


def test_supported_inputs_run_the_kernel_not_the_reference():
    x = torch.randn(64, 16)
    before = dict(nt.fallback_counts())
    torch.testing.assert_close(scale2_op(x), x * 2)
    torch.testing.assert_close(scale2_op(x.t().contiguous().t()), x * 2)  # non-contiguous: copied
    assert nt.fallback_counts() == before


def test_unsupported_dtype_falls_back_once_with_a_warning_naming_the_reason():
    x = torch.randn(64, 16, dtype=torch.float64)
    n0 = _count("neuron_test::scale2", "dtype")
    with pytest.warns(nt.FallbackWarning, match="float64 has no neuron type"):
        y = scale2_op(x)
    assert y.dtype == torch.float64
    torch.testing.assert_close(y, x * 2)
    import warnings
    with warnings.catch_warnings():
        warnings.simplefilter("error")  # the second fallback is counted, not warned again
        scale2_op(x)
    assert _count("neuron_test::scale2", "dtype") == n0 + 2


def test_shapes_the_kernel_rejects_fall_back_also_under_torch_compile():
    x = torch.randn(200, 16)  # 200 partitions: the kernel's partition-size rule rejects it
    with pytest.warns(nt.FallbackWarning, match="partition"):
        torch.testing.assert_close(scale2_op(x), x * 2)
    compiled = torch.compile(lambda t: scale2_op(t) + 1, fullgraph=True, backend="aot_eager")
    torch.testing.assert_close(compiled(x), x * 2 + 1)


def test_strict_mode_raises_instead_of_falling_back(monkeypatch):
    x = torch.randn(64, 16, dtype=torch.float64)
    with pytest.raises(neuron.NeuronError, match="strict mode") as e:
        scale2_strict(x)
    assert e.value.rule == "unsupported-input"
    monkeypatch.setenv("NEURON_STRICT", "1")
    with pytest.raises(neuron.NeuronError, match="float64"):
        scale2_op(x)


def test_without_a_reference_the_error_says_how_to_get_one():
    with pytest.raises(neuron.NeuronError, match="reference="):
        scale2_noref(torch.randn(200, 16))
    with pytest.raises(neuron.NeuronError, match="float64"):
        scale2_noref(torch.randn(64, 16, dtype=torch.float64))


def test_meta_tensors_get_shapes_from_the_traced_kernel():
    y = scale2_op(torch.empty(64, 16, device="meta"))
    assert y.device.type == "meta" and tuple(y.shape) == (64, 16) and y.dtype == torch.float32


# ---- parameters, optional tensors, and a backward that reads what the forward saved ----------

def softmax_lse(x):
    """Row softmax of one [128, F] tile and its logsumexp (what flash attention saves)."""
    y = nl.ndarray(x.shape, x.dtype, buffer=nl.shared_hbm)
    lse = nl.ndarray((x.shape[0], 1), nl.float32, buffer=nl.shared_hbm)
    t = nl.load(x)
    m = nl.max(t, axis=1)
    e = nl.exp(t - m)
    s = nl.sum(e, axis=1)
    nl.store(y, e * nl.reciprocal(s))
    nl.store(lse, nl.log(s) + m)
    return y, lse


def softmax_lse_backward(grad_y, x, lse):
    """dx = p * (g - rowsum(g * p)), p recomputed from x and the saved logsumexp."""
    dx = nl.ndarray(x.shape, x.dtype, buffer=nl.shared_hbm)
    p = nl.exp(nl.load(x) - nl.load(lse))
    g = nl.load(grad_y)
    nl.store(dx, p * (g - nl.sum(g * p, axis=1)))
    return dx


softmax_lse_op = nt.custom_op(
    "neuron_test::softmax_lse", softmax_lse, num_outputs=2, backward=softmax_lse_backward,
    save=lambda inputs, outputs: (inputs[0], outputs[1]), grads=(0,))


def scaled_exp(x, scale=1.0):
    out = nl.ndarray(x.shape, x.dtype, buffer=nl.shared_hbm)
    nl.store(out, nl.exp(nl.load(x) * scale))
    return out


def scaled_exp_backward(grad, y, scale=1.0):
    """d exp(s x) / dx = s * y: needs the forward's output and its parameter."""
    dx = nl.ndarray(y.shape, y.dtype, buffer=nl.shared_hbm)
    nl.store(dx, nl.load(grad) * nl.load(y) * scale)
    return dx


scaled_exp_op = nt.custom_op("neuron_test::scaled_exp", scaled_exp, backward=scaled_exp_backward,
                             save=lambda inputs, outputs: outputs)


def _softmax_grad_reference(x, w):
    x64 = x.detach().double().requires_grad_()
    (torch.softmax(x64, dim=1) * w.double()).sum().backward()
    return x64.grad


@pytest.mark.parametrize("compiled", [False, True])
def test_backward_receives_a_saved_forward_output(compiled):
    torch.manual_seed(0)
    x = torch.randn(128, 48, requires_grad=True)
    w = torch.randn(128, 48)

    def loss(x):
        y, lse = softmax_lse_op(x)
        return (y * w).sum(), lse

    f = torch.compile(loss, fullgraph=True, backend="aot_eager") if compiled else loss
    value, lse = f(x)
    assert not lse.requires_grad  # outputs without a gradient are non-differentiable
    torch.testing.assert_close(lse.double(), torch.logsumexp(x.detach().double(), 1,
                                                             keepdim=True), rtol=1e-6, atol=1e-6)
    value.backward()
    torch.testing.assert_close(x.grad.double(), _softmax_grad_reference(x, w), rtol=1e-5,
                               atol=1e-6)


@pytest.mark.parametrize("compiled", [False, True])
def test_operator_parameters_reach_forward_and_backward(compiled):
    x = torch.linspace(-1, 1, 128 * 8).reshape(128, 8).requires_grad_()
    f = (lambda t: scaled_exp_op(t, scale=0.5))
    if compiled:
        f = torch.compile(f, fullgraph=True, backend="aot_eager")
    y = f(x)
    x64 = x.detach().double()
    torch.testing.assert_close(y.double(), torch.exp(0.5 * x64), rtol=1e-6, atol=1e-6)
    y.sum().backward()
    torch.testing.assert_close(x.grad.double(), 0.5 * torch.exp(0.5 * x64), rtol=1e-6,
                               atol=1e-6)
    schema = str(torch.ops.neuron_test.scaled_exp.default._schema)
    assert "float scale=1." in schema


def add_bias(x, bias=None):
    out = nl.ndarray(x.shape, x.dtype, buffer=nl.shared_hbm)
    t = nl.load(x)
    nl.store(out, t if bias is None else t + nl.load(bias))
    return out


add_bias_op = nt.custom_op("neuron_test::add_bias", add_bias)


def test_optional_tensor_arguments_of_an_operator():
    x, b = torch.randn(128, 8), torch.randn(128, 8)
    torch.testing.assert_close(add_bias_op(x), x)
    torch.testing.assert_close(add_bias_op(x, b), x + b)
    compiled = torch.compile(lambda t, u: add_bias_op(t, u) + add_bias_op(t), fullgraph=True,
                             backend="aot_eager")
    torch.testing.assert_close(compiled(x, b), 2 * x + b)


def test_parameters_torch_operators_cannot_take_are_refused_when_registering():
    def k(x, dtype=nl.float32):
        return x
    with pytest.raises(TypeError, match="parameter 'dtype'.*no torch operator type"):
        nt.custom_op("neuron_test::bad_param", k)
