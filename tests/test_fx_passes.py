"""Graph passes over the aten graph (inductor_lite.fx_passes): each fires on its
pattern (counters), keeps the values of eager, and stays away where it must."""

from __future__ import annotations

import copy
import importlib
import logging
import math

import pytest
import torch
import torch.nn.functional as F
from torch.fx.experimental.proxy_tensor import make_fx
from torch.nn.attention import SDPBackend, sdpa_kernel

import inductor_lite  # noqa: F401  (registers the backend)
from inductor_lite.config import config
from inductor_lite.counters import counters, reset
from inductor_lite.fx_passes import run_passes
from inductor_lite.fx_passes.common import GRAPH_KIND
from inductor_lite.fx_passes.layout_optimization import layout_optimization
from inductor_lite.fx_passes.pad_mm import pad_mm
from inductor_lite.fx_passes.split_conv_bias import split_conv_bias

aten = torch.ops.aten
TOL = {torch.float32: dict(atol=1e-5, rtol=1e-5), torch.bfloat16: dict(atol=2e-2, rtol=2e-2),
       torch.float64: dict(atol=1e-10, rtol=1e-10)}


@pytest.fixture(autouse=True)
def _fresh():
    torch._dynamo.reset()
    reset()
    with config.patch(fallback_on_error=False):
        yield


def _compile(fn, **kwargs):
    return torch.compile(fn, backend="inductor_lite", **kwargs)


def _rand(*shape, dtype=torch.float32, requires_grad=False):
    return torch.randn(*shape, dtype=dtype).requires_grad_(requires_grad)


# ---------------------------------------------------------------- attention

def sdpa_math(q, k, v, mask=None, scale=None):
    """SDPA's math path, the form attention reaches the aten graph in when no fused
    kernel was picked at trace time (what CUDA gives BERT under torch.compile)."""
    return aten._scaled_dot_product_attention_math(q, k, v, mask, scale=scale)[0]


def sdpa_math_upcast(q, k, v, mask):
    """The CUDA math path for bf16: q, k, v upcast to fp32, the result cast back."""
    return sdpa_math(q.float(), k.float(), v.float(), mask.float()).to(q.dtype)


def bert_eager_attention(q, k, v, mask):
    """HF BERT's eager attention: matmul, divide by sqrt(d), add the mask, softmax, matmul."""
    scores = torch.matmul(q, k.transpose(-1, -2)) / math.sqrt(q.shape[-1])
    return torch.matmul(F.softmax(scores + mask, dim=-1), v)


def _qkv(b=2, h=3, lq=8, lk=8, e=16, dtype=torch.float32, requires_grad=False):
    return (_rand(b, h, lq, e, dtype=dtype, requires_grad=requires_grad),
            _rand(b, h, lk, e, dtype=dtype, requires_grad=requires_grad),
            _rand(b, h, lk, e, dtype=dtype, requires_grad=requires_grad))


def _reference(fn, *args):
    """``fn`` in fp64 on fp64 copies of the floating arguments (on CPU)."""
    return fn(*(a.detach().cpu().double() if isinstance(a, torch.Tensor) and a.is_floating_point()
                else a.cpu() if isinstance(a, torch.Tensor) else a for a in args))


@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16])
def test_attention_math_is_fused(dtype):
    q, k, v = _qkv(dtype=dtype)
    mask = _rand(2, 1, 8, 8, dtype=dtype)
    with torch.no_grad():
        out = _compile(sdpa_math)(q, k, v, mask, 0.3)
    assert counters["pass.fuse_attention"] == 1
    assert counters["extern.aten._scaled_dot_product_flash_attention_for_cpu.default"] == 1
    assert not any(key.startswith("extern.aten.bmm") for key in counters)
    assert out.dtype == dtype
    torch.testing.assert_close(out.double(), _reference(sdpa_math, q, k, v, mask, 0.3), **TOL[dtype])


def test_attention_cuda_emission_on_cpu(monkeypatch):
    # the CUDA form (the composite op, torch picks the kernel at run time), run on CPU
    fuse = importlib.import_module("inductor_lite.fx_passes.fuse_attention")
    monkeypatch.setitem(fuse.FUSED_CALLS, "cpu", fuse.FUSED_CALLS["cuda"])
    x, w, mask = _rand(2, 16, 32), _rand(32, 96) / math.sqrt(32), _rand(2, 1, 16, 16)
    with torch.no_grad():
        out = _compile(projected_attention)(x, w, mask)
    assert counters["pass.fuse_attention"] == 1
    assert counters["extern.aten.scaled_dot_product_attention.default"] == 1
    torch.testing.assert_close(out.double(), _reference(projected_attention, x, w, mask), **TOL[torch.float32])


@pytest.mark.parametrize("pick", ["math", "error", "flash"])
def test_attention_left_alone_where_torch_picks_math(pick, monkeypatch):
    # CUDA: where torch's run-time pick for these tensors is its math kernels, the
    # composite op would run them as eager kernels, and where no kernel fits it would
    # fail; the pattern is compiled instead
    fuse = importlib.import_module("inductor_lite.fx_passes.fuse_attention")
    monkeypatch.setitem(fuse.FUSED_CALLS, "cpu", fuse.FUSED_CALLS["cuda"])
    backend = {"math": SDPBackend.MATH, "error": SDPBackend.ERROR, "flash": SDPBackend.FLASH_ATTENTION}[pick]
    monkeypatch.setattr(fuse, "fused_sdp_choice", lambda *args: int(backend))
    x, w, mask = _rand(2, 16, 32), _rand(32, 96) / math.sqrt(32), _rand(2, 1, 16, 16)
    with torch.no_grad():
        out = _compile(projected_attention)(x, w, mask)
    assert counters["pass.fuse_attention"] == (pick == "flash")
    assert counters["extern.aten.scaled_dot_product_attention.default"] == (pick == "flash")
    torch.testing.assert_close(out.double(), _reference(projected_attention, x, w, mask), **TOL[torch.float32])


@pytest.mark.parametrize("mask", ["3d_fp32", "4d_fp16"])
def test_attention_left_alone_leaves_the_graph_untouched(mask, monkeypatch):
    # a mask needing a cast or an unsqueeze: the nodes built for it are erased again
    fuse = importlib.import_module("inductor_lite.fx_passes.fuse_attention")
    monkeypatch.setitem(fuse.FUSED_CALLS, "cpu", fuse.FUSED_CALLS["cuda"])
    monkeypatch.setattr(fuse, "fused_sdp_choice", lambda *args: int(SDPBackend.MATH))
    q, k, v = _qkv(dtype=torch.float32)
    m = _rand(1, 8, 8) if mask == "3d_fp32" else _rand(2, 1, 8, 8, dtype=torch.float16)
    gm = _fake_graph(lambda q, k, v, m: sdpa_math(q, k, v, m), q, k, v, m)
    before = [(n.op, n.target) for n in gm.graph.nodes]
    assert fuse.fuse_attention(gm) == 0
    assert [(n.op, n.target) for n in gm.graph.nodes] == before


def test_attention_upcast_runs_in_low_precision():
    q, k, v = _qkv(dtype=torch.bfloat16)
    mask = _rand(2, 1, 1, 8, dtype=torch.bfloat16)
    with torch.no_grad():
        out = _compile(sdpa_math_upcast)(q, k, v, mask)
    assert counters["pass.fuse_attention"] == 1
    assert counters["extern.aten._scaled_dot_product_flash_attention_for_cpu.default"] == 1
    assert counters["extern.aten._to_copy.default"] == 0  # no fp32 copies of q, k, v remain
    assert out.dtype == torch.bfloat16
    torch.testing.assert_close(out.double(), _reference(sdpa_math, q, k, v, mask), **TOL[torch.bfloat16])


def test_attention_upcast_with_a_wider_mask_not_fused():
    """An fp32 mask of -1e9 beside fp16 q, k, v: in fp16 it would be -inf, and a fully
    masked row would give zeros instead of eager's mean of v, so the math form stays."""
    q, k, v = _qkv(dtype=torch.float16)
    mask = torch.zeros(2, 1, 1, 8)
    mask[0] = -1e9  # batch 0 fully masked
    with torch.no_grad():
        out = _compile(sdpa_math_upcast)(q, k, v, mask)
        expected = sdpa_math_upcast(q, k, v, mask)
    assert counters["pass.fuse_attention"] == 0
    torch.testing.assert_close(out, expected, **TOL[torch.bfloat16])


def test_bert_eager_attention_without_mask_scale_folded():
    q, k, v = _qkv(e=32)
    mask = torch.zeros(2, 1, 1, 8)
    mask[1, :, :, 5:] = torch.finfo(torch.float32).min  # padding tokens of the second sequence
    with torch.no_grad():
        out = _compile(bert_eager_attention)(q, k, v, mask)
    assert counters["pass.fuse_attention"] == 1
    torch.testing.assert_close(out.double(), _reference(bert_eager_attention, q, k, v, mask), **TOL[torch.float32])


def projected_attention(x, w, mask):
    """q, k, v as views of one projection, the output transposed back (BERT's layout):
    the fused output's strides differ from the math output's, and the views after it
    must follow."""
    b, length, _ = x.shape
    qkv = (x @ w).view(b, length, 3, 2, 16)
    q, k, v = (qkv[:, :, i].transpose(1, 2) for i in range(3))
    scores = torch.matmul(q, k.transpose(-1, -2)) * 0.25 + mask
    return torch.matmul(F.softmax(scores, dim=-1), v).transpose(1, 2).reshape(b, length, 32) + 1


def test_attention_on_projection_views():
    x, w, mask = _rand(2, 16, 32), _rand(32, 96) / math.sqrt(32), _rand(2, 1, 16, 16)
    with torch.no_grad():
        out = _compile(projected_attention)(x, w, mask)
    assert counters["pass.fuse_attention"] == 1
    torch.testing.assert_close(out.double(), _reference(projected_attention, x, w, mask), **TOL[torch.float32])


def viewed_output(x):
    # q, k, v in (B, L, H, E) memory; the fused output keeps that layout, so the view
    # after it can no longer be a view of it
    q = x.transpose(1, 2)
    return sdpa_math(q, q * 2, q + 1).view(4, 8, 16) * 2


def batched_3d(x):
    # attention written over [B * H, L, E] tensors: the fused result is reshaped back
    q, v = x.transpose(1, 2).reshape(4, 8, 16), (x + 1).transpose(1, 2).reshape(4, 8, 16)
    probs = torch.softmax(torch.bmm(q, q.transpose(1, 2)) * 0.25, dim=-1)
    return torch.bmm(probs, v) * 2


@pytest.mark.parametrize("fn", [viewed_output, batched_3d])
def test_attention_output_layout_followed(fn):
    x = _rand(2, 8, 2, 16)
    with torch.no_grad():
        out = _compile(fn)(x)
    assert counters["pass.fuse_attention"] == 1
    torch.testing.assert_close(out.double(), _reference(fn, x), **TOL[torch.float32])


def t5_attention(q, k, v, position_bias):
    """T5's attention: no scaling, a learned bias as the mask, softmax in fp32."""
    scores = torch.matmul(q, k.transpose(3, 2)) + position_bias
    return torch.matmul(F.softmax(scores.float(), dim=-1).type_as(scores), v)


def test_t5_attention_bf16_softmax_in_fp32():
    q, k, v = _qkv(dtype=torch.bfloat16)
    bias = _rand(1, 3, 8, 8, dtype=torch.bfloat16)
    with torch.no_grad():
        out = _compile(t5_attention)(q, k, v, bias)
    assert counters["pass.fuse_attention"] == 1
    assert out.dtype == torch.bfloat16
    torch.testing.assert_close(out.double(), _reference(t5_attention, q, k, v, bias), **TOL[torch.bfloat16])


def test_attention_fully_masked_rows_are_zero_as_in_eager():
    q, k, v = _qkv()
    mask = torch.zeros(2, 1, 8, 8)
    mask[0, :, 3] = -math.inf  # query row 3 of batch 0 sees nothing: _safe_softmax gives 0
    with torch.no_grad():
        out = _compile(sdpa_math)(q, k, v, mask)
    assert counters["pass.fuse_attention"] == 1
    expected = _reference(sdpa_math, q, k, v, mask)
    assert not expected.isnan().any()
    torch.testing.assert_close(out.double(), expected, **TOL[torch.float32])


def test_attention_dynamic_shapes():
    fn = _compile(sdpa_math, dynamic=True)
    with torch.no_grad():
        for lq in (8, 12):
            q, k, v = _qkv(lq=lq, lk=lq + 2)
            mask = _rand(2, 1, lq, lq + 2)
            # an explicit scale: the default 1/sqrt(E) of a symbolic E is a SymFloat
            torch.testing.assert_close(fn(q, k, v, mask, 0.25).double(), _reference(sdpa_math, q, k, v, mask, 0.25),
                                       **TOL[torch.float32])
    assert counters["pass.fuse_attention"] >= 1


def test_a_replaced_node_gives_its_aliases_its_storage():
    """The pass replaces the second GEMM with a reshape of the fused op's output; the
    ``dequantize`` after it (which returns its input) keeps its sizes and strides, but
    its fake value must name the new storage: the lowering tells from it that the
    result aliases its input, and a stale value let the next kernel take that storage
    while the result was still to be read."""
    b, h, lq, e = 2, 3, 8, 16

    def fn(q, k, v, x):
        p = torch.softmax(q @ k.transpose(-2, -1) * 0.25, -1)
        o = torch.bmm(p.reshape(b * h, lq, lq), v.reshape(b * h, lq, e))  # a 3-D output
        z = (x + 1) * 3  # as many bytes as o
        return torch.dequantize(o) @ z.transpose(1, 2), z

    q, k, v = _qkv(b, h, lq, lq, e)
    x = _rand(b * h, lq, e)
    with torch.no_grad():
        got = _compile(fn)(q, k, v, x)
    assert counters["pass.fuse_attention"] == 1
    for g, w in zip(got, fn(q, k, v, x)):  # eager: dequantize makes an fp64 reference fp32
        torch.testing.assert_close(g, w, **TOL[torch.float32])


def test_attention_training_matches_eager():
    # The forward graph saves the probabilities for the backward, so the pattern's
    # intermediates have users outside it: the pass must leave it alone.
    q, k, v = _qkv(requires_grad=True)
    mask = _rand(2, 1, 8, 8)
    out = _compile(sdpa_math)(q, k, v, mask)
    grad = torch.randn_like(out)
    out.backward(grad)
    assert counters["pass.fuse_attention"] == 0
    refs = [t.detach().double().requires_grad_() for t in (q, k, v)]
    expected = sdpa_math(*refs, mask.double())
    expected.backward(grad.double())
    torch.testing.assert_close(out.double(), expected, **TOL[torch.float32])
    for t, ref in zip((q, k, v), refs):
        torch.testing.assert_close(t.grad.double(), ref.grad, **TOL[torch.float32])


def _grows_scores(q, k, v, mask):
    # a [2, ...] mask added to [1, ...] scores makes the softmax input bigger than them
    return torch.matmul(torch.softmax(torch.matmul(q, k.transpose(-1, -2)) + mask, dim=-1), v)


def _scaled_mask(q, k, v, mask):
    return torch.matmul(torch.softmax((torch.matmul(q, k.transpose(-1, -2)) + mask) * 0.5, dim=-1), v)


def _softmax_other_dim(q, k, v, mask):
    return torch.matmul(torch.softmax(torch.matmul(q, k.transpose(-1, -2)) + mask, dim=-2), v)


def _scores_also_returned(q, k, v, mask):
    scores = torch.matmul(q, k.transpose(-1, -2)) + mask
    return torch.matmul(torch.softmax(scores, dim=-1), v), scores


def _probs_transposed(q, k, v, mask):
    return torch.matmul(torch.softmax(torch.matmul(q, k.transpose(-1, -2)) + mask, dim=-1).transpose(-1, -2), v)


@pytest.mark.parametrize("fn, batch", [(_grows_scores, 1), (_scaled_mask, 2), (_softmax_other_dim, 2),
                                       (_scores_also_returned, 2), (_probs_transposed, 2)])
def test_attention_not_fused(fn, batch):
    q, k, v = _qkv(b=batch)
    mask = _rand(2, 3, 8, 8)
    with torch.no_grad():
        out = _compile(fn)(q, k, v, mask)
    assert counters["pass.fuse_attention"] == 0
    expected = _reference(fn, q, k, v, mask)
    torch.testing.assert_close(out, expected, check_dtype=False, **TOL[torch.float32])


def test_attention_with_dropout_not_fused():
    q, k, v = _qkv()
    out = _compile(lambda q, k, v: torch.matmul(F.dropout(torch.softmax(q @ k.transpose(-1, -2), -1), 0.5), v))(q, k, v)
    assert counters["pass.fuse_attention"] == 0
    assert out.shape == q.shape and out.isfinite().all()


def test_passes_are_logged(caplog):
    q, k, v = _qkv()
    with config.patch(logs="passes"), torch.no_grad():
        logger = logging.getLogger("inductor_lite.passes")
        logger.addHandler(caplog.handler)
        try:
            _compile(sdpa_math)(q, k, v)
        finally:
            logger.removeHandler(caplog.handler)
    assert any("fuse_attention rewrote 1" in r.getMessage() for r in caplog.records)


# ---------------------------------------------------------------- addmm split

class _LinearGelu(torch.nn.Module):
    def __init__(self):
        super().__init__()
        self.linear = torch.nn.Linear(16, 24)

    def forward(self, x):
        return F.gelu(self.linear(x)) * 2


@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16])
def test_addmm_split_fuses_bias_into_consumer(dtype):
    model = _LinearGelu().to(dtype)
    x = _rand(2, 5, 16, dtype=dtype)
    with torch.no_grad():
        out = _compile(model)(x)
        expected = model.double()(x.double())
    if dtype == torch.float32:
        assert counters["pass.split_addmm"] == 1
        assert counters["extern.aten.mm.default"] == 1 and counters["extern.aten.addmm.default"] == 0
    else:  # kept whole in half precision: no rounding between the GEMM and the bias add
        assert counters["pass.split_addmm"] == 0
        assert counters["extern.aten.addmm.default"] == 1
    assert counters["kernels_generated"] == 1  # (bias add +) gelu + mul in one kernel
    torch.testing.assert_close(out.double(), expected, **TOL[dtype])


class _LinearTanh(_LinearGelu):
    def forward(self, x):
        # tanh's backward reads tanh's output, so the addmm's output is not saved
        return torch.tanh(self.linear(x) * 3)


def test_addmm_split_training():
    model = _LinearTanh()
    x = _rand(4, 16, requires_grad=True)
    out = _compile(model)(x)
    out.sum().backward()
    assert counters["pass.split_addmm"] == 1
    ref_model = _LinearTanh().double()
    ref_model.load_state_dict(model.state_dict())
    x_ref = x.detach().double().requires_grad_()
    ref_model(x_ref).sum().backward()
    torch.testing.assert_close(x.grad.double(), x_ref.grad, **TOL[torch.float32])
    torch.testing.assert_close(model.linear.weight.grad.double(), ref_model.linear.weight.grad, **TOL[torch.float32])
    torch.testing.assert_close(model.linear.bias.grad.double(), ref_model.linear.bias.grad, **TOL[torch.float32])


def test_addmm_kept_when_output_is_returned():
    linear = torch.nn.Linear(16, 24)
    x = _rand(4, 16)
    with torch.no_grad():
        out = _compile(lambda t: (linear(t), linear(t).relu()))(x)
        y = linear(x)
    # dynamo's graph computes linear(t) twice: the returned addmm stays, the other splits
    assert counters["pass.split_addmm"] == 1
    assert counters["extern.aten.addmm.default"] == 1
    torch.testing.assert_close(out[0], y)
    torch.testing.assert_close(out[1], y.relu())


# ---------------------------------------------------------------- GEMM padding

def _fake_graph(fn, *args, tracing_mode="fake"):
    return make_fx(fn, tracing_mode=tracing_mode)(*args)


GEMMS = {
    "mm": (lambda a, b: a @ b, lambda dtype: (_rand(5, 6, dtype=dtype), _rand(6, 7, dtype=dtype))),
    "bmm": (torch.bmm, lambda dtype: (_rand(3, 5, 6, dtype=dtype), _rand(3, 6, 7, dtype=dtype))),
    "addmm": (lambda c, a, b: torch.addmm(c, a, b, beta=0.5, alpha=2.0),
              lambda dtype: (_rand(7, dtype=dtype), _rand(5, 6, dtype=dtype), _rand(6, 7, dtype=dtype))),
    "addmm_2d_bias": (torch.addmm,
                      lambda dtype: (_rand(5, 7, dtype=dtype), _rand(5, 6, dtype=dtype), _rand(6, 7, dtype=dtype))),
}


@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16])
@pytest.mark.parametrize("name", sorted(GEMMS))
def test_pad_mm_forced_keeps_values(name, dtype):
    fn, make_args = GEMMS[name]
    args = make_args(dtype)
    gm = _fake_graph(fn, *args)
    assert pad_mm(gm, force=True) == 1
    gm.graph.eliminate_dead_code()
    gm.recompile()
    pads = [n for n in gm.graph.nodes if n.target is aten.constant_pad_nd.default]
    assert pads, "nothing was padded"
    for n in gm.graph.nodes:
        if n.target in (aten.mm.default, aten.bmm.default, aten.addmm.default):
            m, n_ = n.meta["val"].shape[-2:]
            assert m % 4 == 0 and n_ % 4 == 0
    out = gm(*args)
    expected = fn(*args)
    assert out.shape == expected.shape
    torch.testing.assert_close(out, expected, **TOL[dtype])


def test_pad_mm_through_backend_forced():
    a, b = _rand(5, 6), _rand(6, 7)

    def forced(gm):
        return pad_mm(gm, force=True)

    from inductor_lite import fx_passes
    saved = list(fx_passes.PASSES)
    fx_passes.PASSES[:] = [("pad_mm", forced)]
    try:
        # the transpose reads the sliced, padded result: its strides are not the mm's
        out = _compile(lambda x, y: (x @ y).t().relu())(a, b)
    finally:
        fx_passes.PASSES[:] = saved
    assert counters["pass.pad_mm"] == 1
    torch.testing.assert_close(out, (a @ b).t().relu())


@pytest.mark.parametrize("case", ["conv2d_relu", "channels_last_depthwise", "conv1d_output", "transposed"])
def test_split_conv_bias(case, monkeypatch):
    """The bias of a (CUDA; forced here) convolution is added by a generated kernel,
    fused with the pointwise consumer where there is one; values and layouts as eager's."""
    from inductor_lite import fx_passes
    monkeypatch.setattr(fx_passes, "PASSES", [("split_conv_bias", lambda gm: split_conv_bias(gm, force=True))])
    if case == "conv2d_relu":
        x, w, b = _rand(2, 3, 9, 9), _rand(8, 3, 3, 3), _rand(8)
        fn = lambda x, w, b: F.conv2d(x, w, b, padding=1).relu()
    elif case == "channels_last_depthwise":
        x = _rand(2, 8, 9, 9).contiguous(memory_format=torch.channels_last)
        w, b = _rand(8, 1, 7, 7), _rand(8)
        fn = lambda x, w, b: F.conv2d(x, w, b, padding=3, groups=8).permute(0, 2, 3, 1).sin()
    elif case == "conv1d_output":
        x, w, b = _rand(2, 3, 10), _rand(4, 3, 3), _rand(4)
        fn = lambda x, w, b: F.conv1d(x, w, b)
    else:
        x, w, b = _rand(2, 4, 5, 5), _rand(4, 3, 2, 2), _rand(3)
        fn = lambda x, w, b: F.conv_transpose2d(x, w, b, stride=2) * 2
    with torch.no_grad():
        out = _compile(fn)(x, w, b)
        expected = fn(x, w, b)
    assert counters["pass.split_conv_bias"] == 1
    assert counters["extern.aten.convolution.default"] == 1
    assert counters["kernels_generated"] == 1  # the bias add, with its consumer where there is one
    assert out.stride() == expected.stride()
    torch.testing.assert_close(out, expected, **TOL[torch.float32])


def test_split_conv_bias_dynamic_graph_runs_eagerly(monkeypatch):
    """Under dynamic shapes the bias view takes -1, not a SymInt the graph's code cannot
    name: the rewritten graph still runs as the eager fallback."""
    from inductor_lite import backend, fx_passes
    monkeypatch.setattr(fx_passes, "PASSES", [("split_conv_bias", lambda gm: split_conv_bias(gm, force=True))])

    def fail(*args, **kwargs):
        raise NotImplementedError("lowering fails: the graph runs eagerly")

    monkeypatch.setattr(backend, "_compile", fail)
    x, w, b = _rand(2, 3, 9, 9), _rand(8, 3, 3, 3), _rand(8)
    fn = lambda x, w, b: F.conv2d(x, w, b, padding=1).relu()
    with config.patch(fallback_on_error=True):
        out = _compile(fn, dynamic=True)(x, w, b)
    assert counters["pass.split_conv_bias"] == 1
    torch.testing.assert_close(out, fn(x, w, b), **TOL[torch.float32])


def test_pad_mm_result_layout(monkeypatch):
    """A padded GEMM's result read through as_strided, or a view the padded rows do not
    allow, has the contiguous layout eager gives it; returned, or through a view only the
    output reads, it keeps the padded row stride (as TorchInductor returns it)."""
    from inductor_lite import fx_passes
    monkeypatch.setattr(fx_passes, "PASSES", [("pad_mm", lambda gm: pad_mm(gm, force=True))])
    a, b = _rand(6, 7), _rand(7, 9)

    def strided(x, y):
        return torch.as_strided(x @ y, (4, 9), (9, 1), 9) * 2

    torch.testing.assert_close(_compile(strided)(a, b), strided(a, b))
    out = _compile(torch.mm)(a, b)
    assert out.stride() == (12, 1)  # 9 columns padded to 12 (fp32 aligns to 4)
    torch.testing.assert_close(out, a @ b)
    out = _compile(lambda x, y: (x @ y).view(2, 3, 9))(a, b)
    assert out.stride() == (36, 12, 1)
    torch.testing.assert_close(out, (a @ b).view(2, 3, 9))
    flat = _compile(lambda x, y: (x @ y).view(-1))(a, b)  # needs contiguous rows: a copy
    torch.testing.assert_close(flat, (a @ b).view(-1))
    assert counters["pass.pad_mm"] == 4


@pytest.mark.parametrize("transpose", [torch.t, lambda t: t.permute(1, 0), lambda t: t.transpose(-1, -2)],
                         ids=["t", "permute", "transpose"])
def test_pad_mm_pads_a_shared_operand_once(transpose):
    """A linear layer's backward GEMMs, ``dY @ W`` and ``dY.t() @ X``, pad ``dY`` once:
    the transposed operand's pad is the same pad of its source."""
    g, w, x = _rand(5, 7), _rand(7, 6), _rand(5, 6)

    def fn(g, w, x):
        return g @ w, transpose(g) @ x

    gm = _fake_graph(fn, g, w, x)
    assert pad_mm(gm, force=True) == 2
    gm.graph.eliminate_dead_code()
    gm.recompile()
    (g_node,) = [n for n in gm.graph.nodes if n.op == "placeholder" and n.name.startswith("g")]
    assert sum(n.target is aten.constant_pad_nd.default for n in g_node.users) == 1
    for got, expected in zip(gm(g, w, x), fn(g, w, x)):
        torch.testing.assert_close(got, expected)


@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16])
def test_pad_mm_padded_forward_result_saved_for_backward(monkeypatch, dtype):
    """A padded GEMM result the forward saves for the backward keeps its padded rows; the
    backward graph is compiled for those strides (reported to AOTAutograd), so its
    gradients are right. (They were wrong when it assumed eager's contiguous rows.)"""
    from inductor_lite import fx_passes
    from inductor_lite.config import config
    monkeypatch.setattr(fx_passes, "PASSES", [("pad_mm", lambda gm: pad_mm(gm, force=True))])
    h, w = _rand(16, 64, dtype=dtype), _rand(1001, 64, dtype=dtype)
    labels = torch.randint(0, 1001, (16,))

    def loss_fn(h, w, labels):
        return F.cross_entropy((h @ w.t()).float(), labels)

    def grads(fn):
        hh, ww = h.clone().requires_grad_(), w.clone().requires_grad_()
        loss = fn(hh, ww, labels)
        loss.backward()
        return loss.detach(), hh.grad, ww.grad

    with config.patch(fallback_on_error=False):
        got = grads(_compile(loss_fn))
    assert counters["pass.pad_mm"] >= 1
    for g, e in zip(got, grads(loss_fn)):
        torch.testing.assert_close(g, e, **TOL[dtype])
    # loaded from AOTAutograd's cache, the forward reports its padded strides again
    torch._dynamo.reset()
    with config.patch(fallback_on_error=False):
        got = grads(_compile(loss_fn))
    assert counters["aot_cache_hits"] == 2
    for g, e in zip(got, grads(loss_fn)):
        torch.testing.assert_close(g, e, **TOL[dtype])


def test_pad_mm_leaves_cpu_aligned_and_symbolic_gemms():
    a, b = _rand(5, 6), _rand(6, 7)
    assert pad_mm(_fake_graph(torch.mm, a, b)) == 0  # CPU without force
    assert pad_mm(_fake_graph(torch.mm, _rand(8, 4), _rand(4, 12)), force=True) == 0  # aligned
    assert pad_mm(_fake_graph(torch.mm, a, b, tracing_mode="symbolic"), force=True) == 0
    assert pad_mm(_fake_graph(torch.mm, a.double(), b.double()), force=True) == 0  # no alignment rule


def test_run_passes_counts_and_recompiles():
    q, k, v = _qkv()
    # without decompositions the graph keeps aten._safe_softmax whole
    gm = make_fx(lambda q, k, v: sdpa_math(q, k, v), tracing_mode="fake")(q, k, v)
    assert any(n.target is aten._safe_softmax.default for n in gm.graph.nodes)
    assert run_passes(gm, "test") == {"fuse_attention": 1}
    assert counters["pass.fuse_attention"] == 1
    assert not any(n.target is aten.bmm.default for n in gm.graph.nodes)
    torch.testing.assert_close(gm(q, k, v), sdpa_math(q, k, v))


@pytest.mark.gpu
@pytest.mark.skipif(not torch.cuda.is_available(), reason="needs CUDA")
@pytest.mark.parametrize("dtype", [torch.float16, torch.bfloat16])
def test_gpu_attention_upcast_math_fused(dtype):
    q, k, v = (t.cuda() for t in _qkv(h=4, lq=128, lk=128, e=64, dtype=dtype))
    mask = _rand(2, 1, 1, 128, dtype=dtype).cuda()
    with torch.no_grad():
        out = _compile(sdpa_math_upcast)(q, k, v, mask)
    assert counters["pass.fuse_attention"] == 1
    assert counters["extern.aten.scaled_dot_product_attention.default"] == 1
    torch.testing.assert_close(out.cpu().double(), _reference(sdpa_math, q, k, v, mask), **TOL[torch.bfloat16])


@pytest.mark.gpu
@pytest.mark.skipif(not torch.cuda.is_available(), reason="needs CUDA")
def test_gpu_attention_math_pick_left_compiled():
    # torch's pick asked on fake tensors at compile time: with only the math kernels
    # enabled the pattern stays, compiled (its softmax one generated kernel)
    q, k, v = (t.cuda() for t in _qkv(h=4, lq=128, lk=128, e=64, dtype=torch.bfloat16))
    mask = _rand(2, 1, 1, 128, dtype=torch.bfloat16).cuda()
    with torch.no_grad(), sdpa_kernel([SDPBackend.MATH]):
        out = _compile(sdpa_math_upcast)(q, k, v, mask)
    assert counters["pass.fuse_attention"] == 0
    assert counters["extern.aten.scaled_dot_product_attention.default"] == 0
    torch.testing.assert_close(out.cpu().double(), _reference(sdpa_math, q, k, v, mask), **TOL[torch.bfloat16])


def hf_sdpa_attention(q, k, v, padding):
    """HF BERT's attention under torch.compile: F.scaled_dot_product_attention with the
    padding mask expanded to a [B, 1, L, S] bool mask."""
    b, _, length, _ = q.shape
    mask = padding[:, None, None, :].expand(b, 1, length, length)
    return F.scaled_dot_product_attention(q, k, v, attn_mask=mask, scale=q.shape[-1] ** -0.5)


@pytest.mark.gpu
@pytest.mark.skipif(not torch.cuda.is_available(), reason="needs CUDA")
def test_gpu_bert_attention_runs_fused():
    # issue 20: on an H100 this reached the aten graph as SDPA's math form (fp32 bmm);
    # either AOTAutograd keeps a fused op or fuse_attention restores one
    q, k, v = (t.cuda() for t in _qkv(b=4, h=12, lq=128, lk=128, e=64, dtype=torch.bfloat16))
    padding = torch.ones(4, 128, dtype=torch.bool, device="cuda")
    padding[1, 100:] = False
    with torch.no_grad():
        out = _compile(hf_sdpa_attention)(q, k, v, padding)
    assert counters["extern.aten.bmm.default"] == 0
    expected = _reference(hf_sdpa_attention, q, k, v, padding)
    torch.testing.assert_close(out.cpu().double(), expected, **TOL[torch.bfloat16])


@pytest.mark.gpu
@pytest.mark.skipif(not torch.cuda.is_available(), reason="needs CUDA")
def test_gpu_pad_mm_lm_head(monkeypatch):
    # GPT-2's LM head shape: N = 50257 is padded to 50264 where timing says it pays
    pad_mm_module = importlib.import_module("inductor_lite.fx_passes.pad_mm")
    x = _rand(512, 768, dtype=torch.bfloat16).cuda()
    w = _rand(50257, 768, dtype=torch.bfloat16).cuda() * 0.05
    expected = x.float() @ w.float().t()
    for forced in (True, None):  # padded, then as this GPU's timing decides
        monkeypatch.setattr(pad_mm_module, "_decisions", {})
        if forced:
            monkeypatch.setattr(pad_mm_module, "padding_pays", lambda *args, **kwargs: True)
        else:
            monkeypatch.undo()
        torch._dynamo.reset()
        reset()
        with torch.no_grad():
            out = _compile(lambda a, b: a @ b.t())(x, w)
        if forced:
            assert counters["pass.pad_mm"] == 1 and out.stride() == (50264, 1)
        torch.testing.assert_close(out.float(), expected, atol=5e-2, rtol=2e-2)


@pytest.mark.parametrize("times, pays", [((1.0, 0.5), True), ((1.0, 0.95), False)])
@pytest.mark.parametrize("consumer, copies", [
    (lambda z: z, False),  # returned with its padded rows
    (torch.relu, False),  # the copy fuses into the pointwise consumer
    (lambda z: z.sum(0), True),
], ids=["returned", "pointwise", "reduced"])
def test_pad_mm_pads_where_timing_says_it_pays(monkeypatch, times, pays, consumer, copies):
    """Off CUDA the pass never times (no padding); `padding_pays` itself times the
    unpadded GEMM against the padded one, copy included where the result is copied,
    once per signature."""
    from inductor_lite.runtime.timing import Timer
    pad_mm_module = importlib.import_module("inductor_lite.fx_passes.pad_mm")  # the package exports the function
    monkeypatch.setattr(pad_mm_module, "_decisions", {})
    timed = []

    def median_seconds(self, contenders):
        for calls in contenders:
            calls[0]()  # both contenders run on real tensors
        timed.append(len(contenders))
        return list(times)

    monkeypatch.setattr(Timer, "median_seconds", median_seconds)
    copied = []
    real_contiguous = torch.Tensor.contiguous
    monkeypatch.setattr(torch.Tensor, "contiguous", lambda self, *a, **k: copied.append(1) or real_contiguous(self))
    a, b = _rand(5, 6), _rand(6, 7)
    gm = _fake_graph(lambda x, y: consumer(x @ y), a, b)
    (node,) = [n for n in gm.graph.nodes if n.target is aten.mm.default]
    assert pad_mm_module.padding_pays(node, 3, 2, 1) is pays
    assert pad_mm_module.padding_pays(node, 3, 2, 1) is pays  # decided once
    assert timed == [2]
    assert bool(copied) == copies


@pytest.mark.parametrize("shared, pays", [(frozenset(), False), (frozenset({0}), False), (frozenset({0, 1}), True)])
def test_pad_mm_shared_pads_need_only_parity(monkeypatch, shared, pays):
    """A GEMM whose every pad an earlier GEMM made pads when it is no slower padded (it
    spares the unpadded operand); with a pad of its own it must be `MIN_SPEEDUP` faster."""
    from inductor_lite.runtime.timing import Timer
    pad_mm_module = importlib.import_module("inductor_lite.fx_passes.pad_mm")
    monkeypatch.setattr(pad_mm_module, "_decisions", {})
    monkeypatch.setattr(Timer, "median_seconds", lambda self, contenders: [1.0, 0.98])
    gm = _fake_graph(lambda x, y: x @ y, _rand(5, 6), _rand(6, 7))
    (node,) = [n for n in gm.graph.nodes if n.target is aten.mm.default]
    assert pad_mm_module.padding_pays(node, 3, 2, 1, shared=shared) is pays


# ---------------------------------------------------------------- joint-graph passes

def _cross_entropy(x, w, t):
    return F.cross_entropy((x @ w).float(), t)


def test_sink_gather_moves_the_gather_to_the_logits():
    from inductor_lite.fx_passes.sink_gather import sink_gather
    from inductor_lite.fx_lowering.decompositions import decomposition_table
    x, w, t = _rand(16, 8), _rand(8, 50), torch.randint(0, 50, (16,))
    gm = make_fx(_cross_entropy, tracing_mode="fake", decomposition_table=decomposition_table())(x, w, t)
    assert sink_gather(gm) == 2  # past `- log(sum)` and `- amax`
    (gather,) = [n for n in gm.graph.nodes if n.target is aten.gather.default]
    assert gather.args[0].target is not aten.sub.Tensor
    torch.testing.assert_close(gm(x, w, t), _cross_entropy(x, w, t))
    # a subtrahend that varies along the gathered dimension stays where it is
    gm = make_fx(lambda a, b, i: torch.gather(a - b, 1, i), tracing_mode="fake")(_rand(4, 6), _rand(4, 6),
                                                                               torch.zeros(4, 1, dtype=torch.long))
    assert sink_gather(gm) == 0


def test_cross_entropy_training_saves_no_fp32_log_probabilities():
    """The partition of a bf16 cross-entropy step saves the bf16 logits and per-row
    statistics, not a [rows, classes] fp32 tensor, and the step's values hold."""
    from functorch.compile import aot_function
    from inductor_lite.backend import _partition
    from inductor_lite.fx_lowering.decompositions import decomposition_table
    x = _rand(64, 32, dtype=torch.bfloat16).requires_grad_()
    w = _rand(32, 1000, dtype=torch.bfloat16).requires_grad_()
    t = torch.randint(0, 1000, (64,))
    saved = []

    def forward_compiler(gm, args):
        (output,) = [n for n in gm.graph.nodes if n.op == "output"]
        saved.extend(tensor.meta["val"] for tensor in output.args[0][1:] if isinstance(tensor, torch.fx.Node))
        return gm

    step = aot_function(_cross_entropy, fw_compiler=forward_compiler, bw_compiler=lambda gm, args: gm,
                        decompositions=decomposition_table(), partition_fn=_partition)
    loss = step(x, w, t)
    loss.backward()
    assert not any(v.dtype == torch.float32 and tuple(v.shape) == (64, 1000) for v in saved)
    assert counters["pass.sink_gather"] == 2
    expected_x = x.detach().clone().requires_grad_()
    expected = _cross_entropy(expected_x, w.detach(), t)
    expected.backward()
    torch.testing.assert_close(loss, expected)
    torch.testing.assert_close(x.grad, expected_x.grad)


def _relu_ffn(x, w1, w2):
    # T5's feed-forward layer: under autocast the GEMMs run in bf16, and the ReLU output
    # goes to the weights' dtype (fp32) and back to bf16 for the second GEMM
    hidden = torch.relu(x @ w1).to(w2.dtype)
    return x + hidden @ w2


def test_relu_training_saves_a_mask_not_a_second_activation():
    """ReLU's backward decomposes to ``where(x <= 0, 0, grad)``, so the partition of an
    autocast step saves the one-byte mask beside the bf16 activation the second GEMM's
    backward needs, not a second bf16 activation (the pre-ReLU GEMM output), and the
    gradients hold."""
    x, w1, w2 = _rand(64, 32), _rand(32, 128), _rand(128, 32)
    leaves = [t.clone().requires_grad_() for t in (x, w1, w2)]
    saved = []

    def pack(tensor):
        saved.append(tensor)
        return tensor

    with torch.autograd.graph.saved_tensors_hooks(pack, lambda t: t), torch.autocast("cpu", dtype=torch.bfloat16):
        out = torch.compile(_relu_ffn, backend="inductor_lite")(*leaves)
    out.float().square().mean().backward()
    assert counters["graphs_fallback"] == 0
    # the activation is saved transposed, for the second GEMM's weight gradient
    assert sorted(str(t.dtype) for t in saved if t.numel() == 64 * 128) == ["torch.bfloat16", "torch.bool"]
    expected_leaves = [t.clone().requires_grad_() for t in (x, w1, w2)]
    with torch.autocast("cpu", dtype=torch.bfloat16):
        expected = _relu_ffn(*expected_leaves)
    expected.float().square().mean().backward()
    for got, want in zip(leaves, expected_leaves):
        torch.testing.assert_close(got.grad, want.grad, atol=2e-2, rtol=2e-2)


def _tanh_gelu_mlp(x, w1, w2):
    h = x @ w1
    return (0.5 * h * (1.0 + torch.tanh(0.7978845608 * (h + 0.044715 * h.pow(3)))) @ w2).square().mean()


def test_training_recomputes_a_detached_result_instead_of_saving_it():
    """Autograd saves tanh's output for its backward through a ``detach``. The partition
    must be free to recompute it from the GEMM's output, which the backward keeps anyway
    (GPT-2's tanh GELU saved both: an extra activation per layer)."""
    from functorch.compile import aot_function
    from inductor_lite.backend import _partition
    from inductor_lite.fx_lowering.decompositions import decomposition_table
    x, w1, w2 = (_rand(64, 32).requires_grad_(), _rand(32, 128).requires_grad_(), _rand(128, 32).requires_grad_())
    saved = []

    def forward_compiler(gm, args):
        (output,) = [n for n in gm.graph.nodes if n.op == "output"]
        saved.extend(n for n in output.args[0][1:] if isinstance(n, torch.fx.Node))
        return gm

    step = aot_function(_tanh_gelu_mlp, fw_compiler=forward_compiler, bw_compiler=lambda gm, args: gm,
                        decompositions=decomposition_table(), partition_fn=_partition)
    loss = step(x, w1, w2)
    loss.backward()
    assert counters["pass.alias_detach"] >= 1
    assert not any(n.target is torch.ops.aten.tanh.default for n in saved)
    hidden = [n for n in saved if n.meta["val"].numel() == 64 * 128]
    assert len(hidden) == 2  # the GEMM's output (for the GELU's backward) and the GELU's output (for w2's)
    inputs = [t.detach().double().requires_grad_() for t in (x, w1, w2)]
    expected = _tanh_gelu_mlp(*inputs)
    expected.backward()
    torch.testing.assert_close(loss.double(), expected, rtol=1e-4, atol=1e-5)
    for t, ref in zip((x, w1, w2), inputs):
        torch.testing.assert_close(t.grad.double(), ref.grad, rtol=1e-4, atol=1e-5)


# ---------------------------------------------------------------- layout optimization

def _conv_block(x, w1, w2):
    y = F.conv2d(x, w1, padding=1).relu()
    z = (F.conv2d(y, w2, padding=1, groups=w2.shape[0]) + y).relu()
    return z.mean((2, 3)), z, z.view(z.shape[0], -1)


def _conv_block_args(dtype=torch.float32):
    return _rand(2, 3, 8, 8, dtype=dtype), _rand(16, 3, 3, 3, dtype=dtype), _rand(16, 1, 3, 3, dtype=dtype)


def test_layout_optimization_forced_graph():
    """Both convolutions read channels-last tensors, copied once each (the input, the
    first weight; the depthwise weight already is one), the activations between them stay
    channels-last, and the outputs keep eager's layout through one shared copy back."""
    args = _conv_block_args()
    gm = _fake_graph(_conv_block, *args)
    before = [n.meta["val"].stride() for n in gm.graph.find_nodes(op="output")[0].args[0]]
    assert layout_optimization(gm, force=True) == 3
    gm.graph.eliminate_dead_code()
    gm.recompile()
    convs = [n for n in gm.graph.nodes if n.target is aten.convolution.default]
    for conv in convs:
        for arg in conv.args[:2]:
            assert arg.meta["val"].is_contiguous(memory_format=torch.channels_last)
        assert conv.meta["val"].is_contiguous(memory_format=torch.channels_last)
    after = [n.meta["val"].stride() for n in gm.graph.find_nodes(op="output")[0].args[0]]
    assert after == before
    for out, expected in zip(gm(*args), _conv_block(*args)):
        assert out.stride() == expected.stride()
        torch.testing.assert_close(out, expected, **TOL[torch.float32])


def _fake_cuda_conv_graph(kind, in_channels, out_channels, groups=1, kernel=3):
    """A traced ``conv2d(x, w).relu()`` on fake CUDA tensors (no GPU needed)."""
    from torch._subclasses.fake_tensor import FakeTensorMode

    with FakeTensorMode():
        x = torch.empty(8, in_channels, 32, 32, device="cuda")
        w = torch.empty(out_channels, in_channels // groups, kernel, kernel, device="cuda")
    gm = make_fx(lambda x, w: F.conv2d(x, w, padding=kernel // 2, groups=groups).relu())(x, w)
    gm.meta[GRAPH_KIND] = kind
    return gm


@pytest.mark.parametrize("kind, in_channels, out_channels, groups, kernel, converted", [
    ("inference", 64, 128, 1, 3, True),     # a plain convolution: faster channels-last
    ("inference", 128, 128, 2, 3, False),   # grouped with 64 channels a group: slower
    ("inference", 128, 128, 128, 3, True),  # depthwise is not "grouped"
    ("inference", 32, 32, 1, 3, True),      # small: 0.783 of the NCHW time
    ("fw", 64, 128, 1, 3, False),           # training steps stay as traced
    ("bw", 64, 128, 1, 3, False),
])
def test_layout_optimization_heuristic(kind, in_channels, out_channels, groups, kernel, converted):
    gm = _fake_cuda_conv_graph(kind, in_channels, out_channels, groups, kernel)
    assert (layout_optimization(gm) > 0) is converted


def test_layout_optimization_left_alone():
    """Off by the knob, on CPU tensors unforced, and under symbolic sizes: no rewrite."""
    gm = _fake_cuda_conv_graph("inference", 64, 128)
    with config.patch(layout_optimization=False):
        assert layout_optimization(gm) == 0
    assert layout_optimization(_fake_graph(_conv_block, *_conv_block_args())) == 0
    symbolic = _fake_graph(_conv_block, *_conv_block_args(), tracing_mode="symbolic")
    assert layout_optimization(symbolic, force=True) == 0


@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16])
def test_layout_optimization_through_backend(dtype, monkeypatch):
    """Inference through the backend with the pass forced: eager's values and layouts."""
    from inductor_lite import fx_passes
    monkeypatch.setattr(fx_passes, "PASSES", [
        ("layout_optimization", lambda gm: layout_optimization(gm, force=True))])
    args = _conv_block_args(dtype)
    with torch.no_grad():
        outs = _compile(_conv_block)(*args)
        expected = _conv_block(*args)
    assert counters["pass.layout_optimization"] == 3
    for out, ref in zip(outs, expected):
        assert out.stride() == ref.stride()
        torch.testing.assert_close(out, ref, **TOL[dtype])


def test_layout_optimization_training(monkeypatch):
    """A training step with the forward laid out channels-last: the backward graph is
    compiled for the channels-last activations the forward saves, and its gradients are
    eager's (fp64 reference)."""
    from inductor_lite import fx_passes
    monkeypatch.setattr(fx_passes, "PASSES", [
        ("layout_optimization", lambda gm: layout_optimization(gm, force=True))])
    torch.manual_seed(0)
    model = torch.nn.Sequential(
        torch.nn.Conv2d(3, 16, 3, padding=1), torch.nn.BatchNorm2d(16), torch.nn.ReLU(),
        torch.nn.Conv2d(16, 16, 3, padding=1, groups=4), torch.nn.BatchNorm2d(16), torch.nn.ReLU(),
        torch.nn.AdaptiveAvgPool2d(1), torch.nn.Flatten(), torch.nn.Linear(16, 10))
    reference = copy.deepcopy(model).double()
    x = _rand(4, 3, 8, 8)
    _compile(model)(x).square().sum().backward()
    reference(x.double()).square().sum().backward()
    assert counters["pass.layout_optimization"] > 0
    for p, ref in zip(model.parameters(), reference.parameters()):
        assert p.grad.stride() == p.stride()
        torch.testing.assert_close(p.grad, ref.grad.float(), atol=1e-4, rtol=1e-4)


def _conv_then(tail):
    def fn(x, w):
        return tail(F.conv2d(x, w, padding=1).relu())
    return fn


@pytest.mark.parametrize("name, tail", [
    ("as_strided", lambda z: z.as_strided((2, 16, 4, 4), (1024, 64, 16, 2)) * 2),
    ("channel_slice", lambda z: z[:, :4]),
    ("permuted", lambda z: z.permute(0, 2, 3, 1)),
])
def test_layout_optimization_keeps_what_the_user_sees(name, tail, monkeypatch):
    """Where a converted tensor would reach the user laid out unlike eager (a slice or
    permute of it returned) or an ``as_strided`` reads it, the graph stays as traced:
    eager's values and strides."""
    from inductor_lite import fx_passes
    monkeypatch.setattr(fx_passes, "PASSES", [
        ("layout_optimization", lambda gm: layout_optimization(gm, force=True))])
    fn = _conv_then(tail)
    x, w = _rand(2, 3, 8, 8), _rand(16, 3, 3, 3)
    out, expected = _compile(fn)(x, w), fn(x, w)
    assert counters["pass.layout_optimization"] == 0
    assert out.stride() == expected.stride()
    torch.testing.assert_close(out, expected, **TOL[torch.float32])


def test_layout_optimization_not_with_effect_tokens(monkeypatch):
    """A training graph threading an effect token (``aten._print``) is left as traced:
    AOTAutograd reads its outputs' strides at positions that disagree with the tokens
    in place. Gradients are eager's."""
    from inductor_lite import fx_passes
    monkeypatch.setattr(fx_passes, "PASSES", [
        ("layout_optimization", lambda gm: layout_optimization(gm, force=True))])

    def fn(x, w, y):
        z = F.conv2d(x, w, padding=1)
        torch.ops.aten._print("layout")
        return (z * y).sin()

    args = [_rand(2, 16, 8, 8, requires_grad=True), _rand(16, 16, 3, 3, requires_grad=True),
            _rand(2, 16, 8, 8, requires_grad=True)]
    ref_args = [a.detach().clone().requires_grad_() for a in args]
    out = _compile(fn)(*args)
    expected = fn(*ref_args)
    out.square().sum().backward()
    expected.square().sum().backward()
    assert counters["pass.layout_optimization"] == 0
    assert out.stride() == expected.stride()
    for a, r in zip(args, ref_args):
        torch.testing.assert_close(a.grad, r.grad, atol=1e-4, rtol=1e-4)
