"""Codegen: the DSL kernel text, the wrapper module, and running both in the DSL interpreter."""

import inspect

import pytest
import sympy
import torch
import torch.nn.functional as F
from torch.fx.experimental.proxy_tensor import make_fx
from torch.utils._sympy.functions import FloorDiv, Max, Min, ModularIndexing

from inductor_lite.codegen import runtime_helpers
from inductor_lite.codegen import heuristics
from inductor_lite.codegen.kernel import literal
from inductor_lite.codegen.printer import kexpr, pexpr
from inductor_lite.codegen.wrapper import generate_wrapper, load_module
from inductor_lite.config import config
from inductor_lite.fx_lowering.decompositions import decomposition_table
from inductor_lite.fx_lowering.graph import GraphLowering
from inductor_lite.scheduler.scheduler import Scheduler


def build(fn, *inputs, mode="fake"):
    gm = make_fx(fn, tracing_mode=mode, decomposition_table=decomposition_table())(*inputs)
    graph = GraphLowering(gm)
    graph.run()
    sched = Scheduler(graph)
    return generate_wrapper(graph, sched, "test")


def _poison(t):
    return t.fill_(float("nan") if t.dtype.is_floating_point else (True if t.dtype == torch.bool else -77))


@pytest.fixture
def poison_empty(monkeypatch):
    """Allocations made by generated code start as NaN / a sentinel, so unwritten elements show."""
    for module, name in [(torch, "empty_strided"), (runtime_helpers, "empty_strided_cpu"),
                         (runtime_helpers, "empty_strided_cuda")]:
        original = getattr(module, name)
        monkeypatch.setattr(module, name, lambda *a, _original=original, **k: _poison(_original(*a, **k)))


def run(code, *inputs):
    call, namespace = load_module(code)
    return call(list(inputs)), namespace


def test_kernel_text_follows_the_1d_template():
    code = build(lambda x, y: F.gelu(x + y), torch.randn(4, 8), torch.randn(8))
    (kernel,) = code.kernels
    assert kernel.name == "poi_fused_add_gelu_0"
    lines = kernel.source.splitlines()
    assert lines[0] == "@dl.kernel"
    assert lines[1] == "def poi_fused_add_gelu_0(in_ptr0, in_ptr1, out_ptr0, xnumel, XBLOCK: dl.constexpr):"
    assert lines[2] == "    # FX nodes: add, gelu"
    assert lines[3] == "    xindex = dl.program_id(0) * XBLOCK + dl.arange(0, XBLOCK)"
    assert lines[4] == "    xmask = xindex < xnumel"
    assert "    x0 = (xindex % 8)" in lines
    assert "    tmp0 = dl.load(in_ptr0 + (xindex), mask=xmask)" in lines
    assert '    tmp1 = dl.load(in_ptr1 + (x0), mask=xmask, eviction_policy="evict_last")' in lines  # a broadcast
    assert lines[-1].startswith("    dl.store(out_ptr0 + (xindex), tmp")
    assert "dl.erf(" in kernel.source
    assert kernel.rnumel == 1
    assert (kernel.config.kwargs, kernel.config.num_warps) == ({"XBLOCK": 32}, 1)


def test_int64_indexing_for_huge_or_symbolic_sizes():
    with torch._subclasses.FakeTensorMode():
        big = torch.empty(2 ** 31 + 8, dtype=torch.float16)
        code = build(lambda x: x * 2, big)
    assert "dl.program_id(0).to(dl.int64)" in code.kernels[0].source
    code = build(lambda x: x + torch.arange(0, 10 ** 12, 10 ** 11), torch.randn(10))
    assert "dl.program_id(0).to(dl.int64)" in code.kernels[0].source  # index values, not just offsets
    code = build(lambda x: x * 2, torch.randn(5, 3), mode="symbolic")
    (kernel,) = code.kernels
    assert "dl.program_id(0).to(dl.int64)" in kernel.source
    assert kernel.source.splitlines()[1].endswith("(in_ptr0, out_ptr0, xnumel, XBLOCK: dl.constexpr):")


def test_loaded_indices_keep_int32_index_math():
    """An index loaded from memory lies in the dimension it indexes wherever it is used
    (loads through it are masked or asserted), so small sizes keep int32 index math."""
    fn = lambda w, i: F.embedding(i, w) * 2  # noqa: E731
    w, i = torch.randn(50, 8), torch.randint(0, 50, (16,))
    code = build(fn, w, i)
    assert not any("dl.program_id(0).to(dl.int64)" in k.source for k in code.kernels)
    outs, _ = run(code, w, i)
    torch.testing.assert_close(outs[0], fn(w, i))


def test_symbolic_sizes_become_kernel_arguments():
    code = build(lambda x, y: x + y[:, :1], torch.randn(5, 3), torch.randn(5, 4), mode="symbolic")
    (kernel,) = code.kernels
    params = kernel.source.splitlines()[1]
    assert params.startswith(f"def {kernel.name}(in_ptr0, in_ptr1, out_ptr0, xnumel, s")
    assert [kind for kind, _ in kernel.call_args][-2:] == ["expr", "expr"]


def test_block_size_choice():
    def default(numel):
        config = heuristics.pointwise(numel, 4, 1024, 4)[0]
        return config.kwargs["XBLOCK"], config.num_warps

    assert default(100) == (128, 4)
    assert default(5) == (8, 1)
    assert default(10 ** 6) == (1024, 4)
    assert default(sympy.Symbol("s0", positive=True, integer=True)) == (1024, 4)


def test_literals_and_printers():
    assert literal(float("inf"), torch.float32) == 'float("inf")'
    assert literal(float("-inf"), torch.float16) == 'float("-inf")'
    assert literal(float("nan"), torch.float32) == 'float("nan")'
    assert literal(3, torch.float32) == "3.0" and literal(2.9, torch.int64) == "2"
    assert literal(1, torch.bool) == "True"
    x = sympy.Symbol("xindex", integer=True, nonnegative=True)
    s = sympy.Symbol("s0", integer=True, positive=True)
    assert pexpr(FloorDiv(x, 4)) == "(xindex // 4)"
    assert pexpr(ModularIndexing(x, 4, s)) == "((xindex // 4) % s0)"
    assert pexpr(s ** 2) == "(s0 * s0)"
    assert pexpr(Max(s, 3)) == "max(3, s0)" and kexpr(Min(s, 3)) == "dl.minimum(3, s0)"
    with pytest.raises(NotImplementedError):
        pexpr(x / 2)


def test_wrapper_module_runs_and_frees(poison_empty):
    fn = lambda x, w: (torch.relu((x * 2) @ w) + 1).sum(0) * (x.exp()[0, :3])  # noqa: E731
    x, w = torch.randn(4, 5), torch.randn(5, 3)
    code = build(fn, x, w)
    src = code.source
    assert "def call(args):" in src and "args.clear()" in src
    assert "aten_mm_default = direct_op(aten.mm.default)" in src and "aten_mm_default(" in src and "del " in src
    (out,), namespace = run(code, x.clone(), w.clone())
    torch.testing.assert_close(out, fn(x, w))
    kernel = namespace[code.kernels[0].name]
    assert "def " + code.kernels[0].name in inspect.getsource(kernel.fn)


def _softmaxes_into_gemms(x, y, w, v):
    """Two row softmaxes of one shape, each feeding a GEMM (an extern), and one of another shape."""
    return torch.softmax(x, -1) @ w, torch.softmax(y, -1) @ w, torch.softmax(v, -1)


def _softmax_inputs(device="cpu"):
    return tuple(torch.randn(*s, device=device) for s in ((8, 64), (8, 64), (64, 64), (8, 16)))


def test_groups_with_the_same_kernel_source_share_one_kernel(poison_empty):
    inputs = _softmax_inputs()
    code = build(_softmaxes_into_gemms, *inputs)
    assert len(code.kernel_calls) == 3 and len(code.kernels) == 2
    assert code.kernel_calls[0] == code.kernel_calls[1] != code.kernel_calls[2]
    outs, _ = run(code, *(t.clone() for t in inputs))
    for got, expected in zip(outs, _softmaxes_into_gemms(*inputs)):
        torch.testing.assert_close(got, expected)


def test_the_same_source_over_other_dtypes_is_another_kernel():
    """A launcher assumes the dtypes of its first launch: the same text over float32
    and float64 tensors is two kernels (each with its own launcher, binary and tuning)."""
    with torch._subclasses.FakeTensorMode(allow_non_fake_inputs=True):
        x, w = torch.empty(16, 16, device="cuda:0"), torch.empty(16, 16, device="cuda:0")
        y = torch.empty(16, 16, device="cuda:0", dtype=torch.float64)
        code = build(lambda x, y, w: (torch.mm(x.neg(), w), y.neg()), x, y, w)
    assert len(code.kernels) == 2 and len(set(code.kernel_calls)) == 2
    assert code.source.count("= bind_tuned_launcher(") == 2


@pytest.mark.gpu
def test_launches_of_one_kernel_share_a_launcher_on_cuda(poison_empty):
    inputs = _softmax_inputs("cuda")
    code = build(_softmaxes_into_gemms, *inputs)
    launcher = f"launch_{code.kernel_calls[0]}"
    assert code.source.count(f"{launcher} = bind_tuned_launcher(") == 1
    assert code.source.count(f"    {launcher}(") == 2
    outs, _ = run(code, *inputs)
    for got, expected in zip(outs, _softmaxes_into_gemms(*inputs)):
        torch.testing.assert_close(got, expected)


def test_intermediates_are_neither_allocated_nor_stored(poison_empty):
    fn = lambda x: (lambda a: (a + 1, a * 2))(x.exp() * 3)  # noqa: E731
    x = torch.randn(4, 6)
    code = build(fn, x)
    assert code.source.count("empty_strided_cpu(") == 2  # the two outputs only
    (kernel,) = code.kernels
    assert kernel.source.count("dl.store(") == 2
    outs, _ = run(code, x)
    for got, expected in zip(outs, fn(x)):
        torch.testing.assert_close(got, expected)


@pytest.mark.parametrize("dtype", [torch.float32, torch.float16, torch.bfloat16])
def test_masked_loads_cat_and_pad(dtype, poison_empty):
    fn = lambda x, y: (torch.cat([x.exp(), y, x], dim=1), F.pad(x, (1, 2, 0, 1), value=-1.5))  # noqa: E731
    x, y = torch.randn(3, 4).to(dtype), torch.randn(3, 2).to(dtype)
    code = build(fn, x, y)
    assert any("mask=tmp" in k.source for k in code.kernels)
    assert not any("dl.int64" in k.source for k in code.kernels)  # small static sizes: int32 index math
    outs, _ = run(code, x, y)
    tol = 1e-5 if dtype == torch.float32 else 1e-2
    for got, expected in zip(outs, fn(x, y)):
        torch.testing.assert_close(got, expected, rtol=tol, atol=tol)


def test_integer_floor_semantics(poison_empty):
    fn = lambda a, b: (a // b, a % b, torch.div(a, b, rounding_mode="trunc"), a.fmod(b))  # noqa: E731
    a = torch.randint(-50, 50, (64,))
    b = torch.randint(1, 9, (64,)) * (torch.randint(0, 2, (64,)) * 2 - 1)
    code = build(fn, a, b)
    outs, _ = run(code, a, b)
    for got, expected in zip(outs, fn(a, b)):
        assert torch.equal(got, expected)


@pytest.mark.parametrize("fn, store_index", [
    (lambda x: torch.dot(x, x) * 2 + 1, "dl.full([XBLOCK], 0, dl.int32)"),  # pointwise kernel after an extern
    (lambda x: x.sum() * 2 + 1, "dl.full([XBLOCK, 1], 0, dl.int32)"),  # reduction with a fused epilogue
], ids=["pointwise", "reduction"])
def test_zero_dim_output_store_is_a_block(poison_empty, fn, store_index):
    x = torch.randn(7)
    code = build(fn, x)
    (kernel,) = code.kernels
    assert f"dl.store(out_ptr0 + ({store_index}), " in kernel.source
    (out,), _ = run(code, x)
    assert out.shape == ()
    torch.testing.assert_close(out, fn(x))


def test_kernels_get_debug_dir(tmp_path):
    code = build(lambda x: x + 1, torch.randn(3))
    _, namespace = load_module(code, str(tmp_path))
    assert namespace[code.kernels[0].name].debug_dir == str(tmp_path)


def test_views_into_externs_are_reinterpret_tensor_calls():
    code = build(lambda x, w: x.t() @ w, torch.randn(5, 4), torch.randn(5, 3))
    assert "reinterpret_tensor(x_1, (4, 5), (1, 4), 0)" in code.source
    assert not code.kernels



def test_poison_reaches_generated_allocations(poison_empty, monkeypatch):
    """The fixture above must patch what generated code allocates with, or it proves nothing."""
    from inductor_lite.dsl.kernel import Kernel

    monkeypatch.setattr(Kernel, "run", lambda *args, **kwargs: None)
    code = build(lambda x, i: (x + 1, i * 2), torch.randn(5), torch.randint(0, 9, (3,)))
    (out, out_int), _ = run(code, torch.randn(5), torch.randint(0, 9, (3,)))
    assert out.isnan().all() and (out_int == -77).all()


def test_wrapper_lines_use_the_fast_runtime_helpers():
    code = build(lambda x, w: torch.relu(x @ w.t()).sum(0), torch.randn(4, 5), torch.randn(3, 5))
    src = code.source
    call = src[src.index("def call(args):"):]
    assert "aten_mm_default = direct_op(aten.mm.default)" in src
    assert "buf0 = aten_mm_default(x_1, reinterpret_tensor(w_1, (5, 3), (1, 5), 0))" in call
    assert "empty_strided_cpu((3,), (1,), torch.float32)" in call  # the (relu fused into) sum's output
    assert "aten." not in call and "torch.device" not in call and "with " not in call


def test_cuda_graph_runs_under_a_device_guard_and_allocates_on_the_current_device():
    with torch._subclasses.FakeTensorMode(allow_non_fake_inputs=True):
        x, y = torch.empty(4, 5, device="cuda:0"), torch.empty(5, device="cuda:0")
        code = build(lambda x, y: ((x + y) @ x.t()).relu(), x, y)
    call = code.source[code.source.index("def call(args):"):].splitlines()
    assert call[1] == "    with torch.cuda.device(0):"
    assert all(line.startswith("        ") for line in call[2:])
    assert sum("empty_strided_cuda((4, 5), (5, 1), torch.float32)" in line for line in call) == 1
    assert not any("empty_strided(" in line for line in call)


@pytest.mark.gpu
def test_cuda_wrapper_runs_and_matches_eager(poison_empty):
    fn = lambda x, y, w: (torch.relu((x + y) @ w.t()), (x * 2)[:, 1:].sum(0))  # noqa: E731
    x, y, w = (torch.randn(*s, device="cuda") for s in ((6, 5), (5,), (4, 5)))
    code = build(fn, x, y, w)
    assert "    with torch.cuda.device(0):" in code.source and "empty_strided_cuda(" in code.source
    device_before = torch.cuda.current_device()
    outs, _ = run(code, x, y, w)
    assert torch.cuda.current_device() == device_before
    for got, expected in zip(outs, fn(x, y, w)):
        torch.testing.assert_close(got, expected)
        assert got.stride() == expected.stride() and got.device == expected.device

def test_graph_on_two_cuda_devices_allocates_with_explicit_devices():
    with torch._subclasses.FakeTensorMode(allow_non_fake_inputs=True):
        x, y = torch.empty(5, 5, device="cuda:0"), torch.empty(5, 5, device="cuda:1")
        # .t(): the product is not written over the copy it reads, so each device allocates
        code = build(lambda x, y: x * (y + 1).to("cuda:0").t(), x, y)
    call = code.source[code.source.index("def call(args):"):]
    assert "with " not in call and "empty_strided_cuda(" not in call
    assert "device=device_0, dtype=torch.float32)" in call and "device=device_1, dtype=torch.float32)" in call


@torch.library.custom_op("inductor_lite_test::follow_layout", mutates_args=())
def follow_layout(x: torch.Tensor) -> torch.Tensor:
    """``x + 1`` laid out like ``x`` (``empty_like`` semantics): an extern whose output strides follow its input."""
    return x + 1


@follow_layout.register_fake
def _(x):
    return torch.empty_like(x)


def test_extern_output_with_unexpected_strides_is_copied_to_the_assumed_layout(poison_empty):
    fn = lambda x: (follow_layout(x) * 2, follow_layout(x))  # noqa: E731
    x = torch.randn(6, 7)
    code = build(fn, x)
    call, namespace = load_module(code)
    # a column-major result: what a backend kernel could return where the meta function said row-major
    namespace["torch_ops_inductor_lite_test_follow_layout_default"] = lambda a: (a + 1).t().contiguous().t()
    outs = call([x])
    for got, expected in zip(outs, fn(x)):
        torch.testing.assert_close(got, expected)
        assert got.stride() == expected.stride()


def test_extern_outputs_with_fixed_layouts_are_not_checked_at_run_time(poison_empty):
    """mm, addmm, bmm and a convolution of contiguous tensors always return row-major
    results: no stride check after them; the values still match eager."""
    def fn(x, w, b, y, img, k):
        h = torch.addmm(b, x, w.t()).relu()
        return h @ w, torch.bmm(y, y.transpose(1, 2)) + 1, F.conv2d(img, k) * 2

    inputs = [torch.randn(4, 5), torch.randn(5, 5), torch.randn(5), torch.randn(3, 4, 6), torch.randn(2, 3, 8, 8),
              torch.randn(4, 3, 3, 3)]
    code = build(fn, *inputs)
    assert code.stride_checks == []
    assert "ensure_strides(" not in code.source[code.source.index("def call(args):"):]
    outs, _ = run(code, *inputs)
    for got, expected in zip(outs, fn(*inputs)):
        torch.testing.assert_close(got, expected)
        assert got.stride() == expected.stride()


def test_extern_outputs_whose_layout_follows_an_input_are_checked(poison_empty):
    x = torch.randn(6, 7)
    code = build(lambda x: follow_layout(x.t()) * 2, x)
    assert len(code.stride_checks) == 1
    outs, _ = run(code, x)
    torch.testing.assert_close(outs[0], (x.t() + 1) * 2)
    # convolution over a channels-last input: the backend decides the output's memory format
    img, k = torch.randn(2, 3, 8, 8).to(memory_format=torch.channels_last), torch.randn(4, 3, 3, 3)
    code = build(lambda img, k: F.conv2d(img, k) * 2, img, k)
    assert len(code.stride_checks) == 1
    # flash attention's output is laid out like the query, its log-sum-exp from sizes alone
    q = torch.randn(2, 8, 3, 16).transpose(1, 2)
    code = build(lambda q: torch.ops.aten._scaled_dot_product_flash_attention_for_cpu(q, q, q), q)
    assert len(code.stride_checks) == 1


@pytest.mark.gpu
@pytest.mark.parametrize("dtype", [torch.float16, torch.float32])
def test_cuda_externs_without_stride_checks_match_eager(poison_empty, dtype):
    def fn(x, w, img, k, q):
        attention = F.scaled_dot_product_attention(q, q, q, is_causal=True)
        return torch.addmm(w[0], x, w).relu() @ w, F.conv2d(img, k) * 2, attention * 2

    inputs = [torch.randn(*s, device="cuda", dtype=dtype) for s in
              ((16, 32), (32, 32), (2, 3, 16, 16), (8, 3, 3, 3), (2, 4, 64, 32))]
    code = build(fn, *inputs)
    # only attention outputs that follow the query or whose sizes torch versions disagree on keep a check
    assert all(f"{name} = buf" in code.source and f"{name} = aten" not in code.source for name in code.stride_checks)
    outs, _ = run(code, *inputs)
    tolerance = {"atol": 2e-2, "rtol": 2e-2} if dtype == torch.float16 else {}
    for got, expected in zip(outs, fn(*inputs)):
        torch.testing.assert_close(got, expected, **tolerance)
        assert got.stride() == expected.stride()


def test_fixed_layout_rule():
    from inductor_lite.fx_lowering.extern_layouts import fixed_layout
    from inductor_lite.ir.nodes import Layout

    aten = torch.ops.aten
    row_major = Layout(torch.device("cpu"), torch.float32, [4, 3], [3, 1])
    column_major = Layout(torch.device("cpu"), torch.float32, [4, 3], [1, 4])
    assert fixed_layout(aten.mm.default, [], None, row_major)
    assert not fixed_layout(aten.mm.default, [], None, column_major)  # not what mm returns: keep checking
    assert fixed_layout(aten.mm.default, [], None, Layout(torch.device("cpu"), torch.float32, [1, 3], [7, 1]))
    assert not fixed_layout(aten.cumsum.default, [], None, row_major)
    assert not fixed_layout(aten._scaled_dot_product_flash_attention.default, [], 0, row_major)
    assert fixed_layout(aten._scaled_dot_product_flash_attention.default, [], 1, row_major)
    assert fixed_layout(aten._scaled_dot_product_efficient_attention.default, [], 0, column_major)


def test_ensure_strides():
    t = torch.randn(3, 4)
    assert runtime_helpers.ensure_strides(t, (3, 4), (4, 1)) is t
    column_major = t.t().contiguous().t()
    fixed = runtime_helpers.ensure_strides(column_major, (3, 4), (4, 1))
    assert fixed.stride() == (4, 1) and torch.equal(fixed, t)
    # size-1 dimensions place no element differently: kept as the op returned it
    row = torch.randn(1, 5)
    assert runtime_helpers.ensure_strides(row, (1, 5), (99, 1)) is row
    with pytest.raises(RuntimeError, match=r"size \(3, 4\), expected \(4, 3\)"):
        runtime_helpers.ensure_strides(t, (4, 3), (3, 1))


def test_runtime_helpers_match_their_python_equivalents():
    base = torch.randn(6, 7)[1:, 2:]  # storage offset 9
    got = runtime_helpers.reinterpret_tensor(base, (2, 3), (1, 7), 4)
    expected = runtime_helpers._reinterpret_tensor(base, (2, 3), (1, 7), 4)
    assert (got.shape, got.stride(), got.storage_offset()) == (expected.shape, expected.stride(), 13)
    assert torch.equal(got, expected)
    got = runtime_helpers.empty_strided_cpu((2, 3), (1, 2), torch.float16)
    expected = runtime_helpers._empty_strided_cpu((2, 3), (1, 2), torch.float16)
    assert (got.shape, got.stride(), got.dtype, got.device) == (expected.shape, expected.stride(),
                                                                expected.dtype, expected.device)


def test_direct_op():
    mm = torch.ops.aten.mm.default
    a, b = torch.randn(2, 3), torch.randn(3, 4)
    assert runtime_helpers.direct_op(mm) is mm._op
    torch.testing.assert_close(runtime_helpers.direct_op(mm)(a, b), a @ b)
    assert runtime_helpers.direct_op(torch.mm) is torch.mm  # not an OpOverload: unchanged

PTX_CASES = {
    "fused_chain_fp16": (lambda x, y: F.gelu(x * y) + x, [torch.randn(8, 16).half(), torch.randn(16).half()]),
    "masked_cat_pad": (lambda x, y: (torch.cat([x, y.exp()], 1), F.pad(x, (1, 1), value=-2.0)),
                       [torch.randn(4, 3), torch.randn(4, 5)]),
    "int_floor_div_bool": (lambda a, b: (a // b, a % b, (a > b) | (b == 0)), [torch.randint(-9, 9, (40,)),
                                                                           torch.randint(1, 5, (40,))]),
    "zero_dim_store": (lambda x: x.sum() + 1, [torch.randn(5)]),
    "persistent_softmax_bf16": (lambda x: torch.softmax(x, -1), [torch.randn(6, 300).bfloat16()]),
    "persistent_argmax_argmin_bf16": (lambda x: (x.argmax(-1), x.argmin(-1)), [torch.randn(6, 300).bfloat16()]),
    "persistent_layer_norm": (lambda x, w: F.layer_norm(x, (64,), w), [torch.randn(5, 64), torch.randn(64)]),
    "looped_softmax_argmax": (lambda x: (torch.softmax(x, -1), x.argmax(-1)), [torch.randn(3, 20000)]),
    "looped_var_mean_any": (lambda x: (*torch.var_mean(x, -1), (x > 3).any(-1)), [torch.randn(3, 20000)]),
    "outer_split_sum": (lambda x: x.sum(0), [torch.randn(2048, 64)]),
    "tiled_transpose_add": (lambda x: x.t().contiguous() + 1, [torch.randn(64, 96)]),
    "tiled_channels_last_bf16": (lambda x: x.contiguous(memory_format=torch.channels_last).relu(),
                                 [torch.randn(2, 24, 8, 8).bfloat16()]),
    "tiled_permute_int64": (lambda x: x.permute(2, 0, 1) * 3, [torch.randint(-9, 9, (16, 8, 40))]),
}


@pytest.mark.parametrize("name", sorted(PTX_CASES))
def test_generated_kernels_compile_to_ptx(name, monkeypatch):
    """Every kernel codegen emits goes through the NVPTX compiler and assembles for sm_80 and sm_90."""
    from inductor_lite.dsl import assembler, compiler
    from inductor_lite.dsl.kernel import Kernel

    if not assembler.can_assemble():
        pytest.skip("neither nvJitLink nor ptxas is available")
    launches = []
    original = Kernel.run

    def record(self, grid, args, constexprs, num_warps=None, num_stages=1, maxnreg=None):
        launches.append((self, tuple(args), dict(constexprs), num_warps))
        return original(self, grid, args, constexprs, num_warps, num_stages)

    monkeypatch.setattr(Kernel, "run", record)
    fn, inputs = PTX_CASES[name]
    symbolic = name == "fused_chain_fp16"
    code = build(fn, *inputs, mode="symbolic" if symbolic else "fake")
    run(code, *inputs)
    assert len(launches) == len(code.kernels) >= 1
    for kernel, args, constexprs, num_warps in launches:
        ir_fn = kernel.build_ir(kernel.specialize(args, constexprs))
        for cc in ((8, 0), (9, 0)):
            compiled = compiler.compile_ptx(ir_fn, cc=cc, num_warps=num_warps)
            assembler.check_ptx_assembles(compiled.ptx, cc)


def test_streamed_persistent_reduction(monkeypatch):
    """A persistent reduction is a grid-stride loop over row blocks: a grid shorter
    than the rows (a streamed launch, `Config` ``PROGRAMS_PER_SM``) gives the same
    rows, and the streamed candidates' loop pipelines through shared memory
    (``num_stages=2``) into PTX that assembles."""
    from inductor_lite.dsl import assembler, compiler

    x = torch.randn(5, 8192).bfloat16()
    code = build(lambda x: torch.softmax(x, -1), x)
    (kernel,) = code.kernels
    streamed = [c for c in kernel.configs if "PROGRAMS_PER_SM" in c.kwargs]
    assert streamed and all(c.num_stages == 2 and c.kwargs["XBLOCK"] == 1 for c in streamed)
    _, namespace = load_module(code)
    out = torch.full_like(x, float("nan"))
    blocks = {k: v for k, v in streamed[0].kwargs.items() if k != "PROGRAMS_PER_SM"}
    namespace[kernel.name][(2,)](x, out, 5, 8192, **blocks, num_warps=streamed[0].num_warps)
    torch.testing.assert_close(out, torch.softmax(x.float(), -1).bfloat16(), atol=1e-2, rtol=1e-2)
    if not assembler.can_assemble():
        pytest.skip("neither nvJitLink nor ptxas is available")
    dsl_kernel = namespace[kernel.name]
    ir_fn = dsl_kernel.build_ir(dsl_kernel.specialize((x, out, 5, 8192), blocks))
    compiled = compiler.compile_ptx(ir_fn, cc=(9, 0), num_warps=streamed[0].num_warps, num_stages=2)
    assert "cp.async" in compiled.ptx
    assembler.check_ptx_assembles(compiled.ptx, (9, 0))


def _load_hints(source):
    """Each pointer's loads' eviction hints, in source order."""
    import re

    hints = {}
    for ptr, rest in re.findall(r"dl\.load\((in_ptr\d+) \+ (.*)", source):
        policy = re.search(r'eviction_policy="(\w+)"', rest)
        hints.setdefault(ptr, []).append(policy.group(1) if policy else "")
    return hints


@pytest.mark.parametrize("cols", [64, 40000])
def test_load_cache_hints(cols):
    """A norm's weight, read by every row, stays in cache (evict_last); a looped
    reduction's earlier passes over a row ask to keep it for the next pass (evict_last)
    and its last pass lets it go first (evict_first); a row read once has no hint."""
    x, w = torch.randn(64, cols), torch.randn(cols)  # 64 rows: not split (few long rows would be)
    (kernel,) = build(lambda x, w: F.layer_norm(x, (cols,), w), x, w).kernels
    hints = _load_hints(kernel.source)
    (rows,) = [h for ptr, h in hints.items() if f"{ptr} + (rindex + {cols}*xindex)" in kernel.source]
    (weight,) = [h for ptr, h in hints.items() if f"{ptr} + (rindex)" in kernel.source]
    assert weight == ["evict_last"]
    if cols == 64:
        assert rows == [""]
    else:  # looped: two passes over the row
        assert rows == ["evict_last", "evict_first"]


def test_complex_scalar_extern_argument():
    """A complex Python scalar passed to an extern (polar's backward multiplies by 1j)
    is written into the wrapper as a complex literal, not rejected."""
    def fn(abs_, angle):
        out = torch.polar(abs_, angle)
        return torch.autograd.grad(out.real.sum() + 2 * out.imag.sum(), [abs_, angle])

    torch._dynamo.reset()
    inputs = [torch.rand(5, requires_grad=True) for _ in range(2)]
    expected = fn(*inputs)
    with config.patch(fallback_on_error=False):
        compiled = torch.compile(lambda a, b: torch.polar(a, b), backend="inductor_lite")
        out = compiled(*inputs)
        got = torch.autograd.grad(out.real.sum() + 2 * out.imag.sum(), inputs)
    torch._dynamo.reset()
    for g, e in zip(got, expected):
        torch.testing.assert_close(g, e)


@pytest.mark.parametrize("emulate", [False, True])
@pytest.mark.parametrize("dtype", [torch.bfloat16, torch.float16])
def test_fused_16_bit_intermediates_stay_fp32_unless_emulated(dtype, emulate):
    """(a + b) - a with b a quarter of a's ulp: eager rounds a + b back to a (0); a fused
    kernel keeps a + b in fp32 (b, as Inductor's kernels do) unless told to emulate
    eager's rounding. The stored result is rounded either way."""
    import inductor_lite  # noqa: F401  (registers the backend)

    ulp = 2.0 ** -7 if dtype == torch.bfloat16 else 2.0 ** -10
    a = torch.full((64,), 1.0, dtype=dtype)
    b = torch.full((64,), ulp / 4, dtype=dtype)
    torch._dynamo.reset()
    with config.patch(emulate_precision_casts=emulate):
        out = torch.compile(lambda a, b: ((a + b) - a) * 2, backend="inductor_lite")(a, b)
    expected = torch.zeros_like(a) if emulate else torch.full_like(a, ulp / 2)
    assert out.dtype == dtype
    torch.testing.assert_close(out, expected, rtol=0, atol=0)


def test_comparisons_that_the_index_ranges_decide_are_folded():
    """A comparison of an index value with a constant that holds (or fails) over the
    whole kernel domain is a literal: a pooling window's ``x0 - 1 < 56`` for ``x0 =
    (xindex // 56) % 56``; one the domain does not decide stays a comparison."""
    from inductor_lite.codegen.kernel import KernelCodegen
    from inductor_lite.ir.ops import ops, set_ops_handler
    from inductor_lite.scheduler.dependencies import FLAT

    cg = KernelCodegen(sympy.Integer(2 * 3136), sympy.Integer(1), False, 1, torch.int32, layouts=None)
    row = ModularIndexing(FLAT, 56, 56)

    def c(v):
        return ops.constant(v, torch.int64)

    with set_ops_handler(cg):
        i = ops.index_expr(row - 1, torch.int64)  # -1 .. 54
        assert [ops.lt(i, c(56)).value, ops.gt(i, c(54)).value, ops.ne(i, c(-5)).value,
                ops.eq(i, c(55)).value, ops.le(c(-1), i).value, ops.ge(c(-2), i).value] == [True, False, True,
                                                                                           False, True, False]
        undecided = [ops.ge(i, c(0)), ops.lt(i, c(54)), ops.eq(i, c(3)), ops.ne(i, c(3)), ops.eq(i, c(-1))]
        assert not any(u.is_literal for u in undecided)
