"""Reductions end to end: torch.compile(backend="inductor_lite") against eager and an fp64 reference.

Each case compiles a function with ``fallback_on_error=False`` (a graph that fails to
lower fails the test), runs it on fresh random inputs with every allocation of the
generated code poisoned (NaN / a sentinel), and checks:

- values: floating outputs against the function run in fp64 on the same inputs, to
  ``rtol = atol = TOL[dtype]`` plus twice eager's own distance from that reference
  (a long fp32 sum or a bf16 rounding is allowed what eager itself does, no more);
  NaN and infinities exactly where eager has them (an unexpected NaN never passes);
  integer and bool outputs (indices, ``any``/``all``, int sums) equal to eager;
- kernels: `inductor_lite.counters` ``kernels_generated`` and the kernel kind from the
  generated code (``per_`` persistent, ``red_`` looped, ``poi_`` pointwise);
- externs: no aten fallback at all, except where a case names the ones it allows
  (cross-entropy's ``gather``): no reduction, softmax, norm or loss is an extern.

Rows are short in count so the DSL interpreter stays fast on CPU; the row lengths pick
the persistent form (up to `heuristics.PERSISTENT_MAX_RBLOCK` after rounding up to a
power of two) and the looped form (longer rows, or a symbolic row length).
Every test runs on CPU and, marked `gpu`, on CUDA (skipped without a GPU).
"""

import glob
import re

import pytest
import torch
import torch.nn.functional as F
import torch.utils._pytree as pytree

import inductor_lite
from inductor_lite.codegen import heuristics, runtime_helpers
from inductor_lite.config import config
from conftest import assemble_launches

aten = torch.ops.aten
counters = inductor_lite.counters

TOL = {torch.float32: 1e-5, torch.bfloat16: 1e-2, torch.float16: 1e-3, torch.float64: 1e-9}

PERSISTENT_COLS = (300, 1024, 20000)
"""Row lengths reduced persistently: masked (300), a power of two (1024), long (20000)."""
LOOPED_COLS = heuristics.PERSISTENT_MAX_RBLOCK + 1000
"""A row just too long for the persistent form."""
ALL_COLS = PERSISTENT_COLS + (LOOPED_COLS,)


@pytest.fixture(autouse=True, params=["cpu", pytest.param("cuda", marks=pytest.mark.gpu)])
def device(request):
    with torch.device(request.param):
        yield request.param


@pytest.fixture(autouse=True)
def fresh(monkeypatch, device):
    torch._dynamo.reset()
    inductor_lite.reset_counters()

    def poison(t):
        return t.fill_(float("nan") if t.dtype.is_floating_point else (True if t.dtype == torch.bool else -77))

    for module, name in [(torch, "empty_strided"), (runtime_helpers, "empty_strided_cpu"),
                         (runtime_helpers, "empty_strided_cuda")]:
        original = getattr(module, name)
        monkeypatch.setattr(module, name, lambda *a, _original=original, **k: poison(_original(*a, **k)))
    with config.patch(fallback_on_error=False):
        yield
    torch._dynamo.reset()


# ---------------------------------------------------------------------------- helpers


def _to_fp64(x):
    return x.detach().double() if isinstance(x, torch.Tensor) and x.is_floating_point() else x


def assert_close(got, eager, ref64, what="output", magnitude=None):
    """``got`` against eager (dtype, shape, NaN/inf positions, integers) and the fp64
    reference (values): within the dtype's tolerance plus twice eager's own error, or
    one accumulation rounding (fp32's epsilon; fp64's for fp64) of ``magnitude``: the
    function of the inputs' absolute values, in fp64 (for a sum, the sum of absolute
    values, which bounds the rounding error of any summation order up to a log factor)."""
    assert got.dtype == eager.dtype and got.shape == eager.shape, f"{what}: {got.dtype}{list(got.shape)} " \
                                                                  f"vs eager {eager.dtype}{list(eager.shape)}"
    got = got.detach().cpu()
    eager = eager.detach().cpu()
    if not eager.dtype.is_floating_point:
        assert torch.equal(got, eager), f"{what}: {got} != eager {eager}"
        return
    tol = TOL[eager.dtype]
    epsilon = torch.finfo(torch.float64 if eager.dtype == torch.float64 else torch.float32).eps  # accumulation
    ref = ref64.detach().cpu().double()
    nan = torch.isnan(eager)
    assert torch.equal(torch.isnan(got), nan), f"{what}: NaN at {torch.isnan(got).nonzero().tolist()[:8]}, " \
                                               f"eager at {nan.nonzero().tolist()[:8]}"
    inf = torch.isinf(eager)
    assert torch.equal(torch.isinf(got), inf) and torch.equal(got[inf], eager[inf]), f"{what}: infinities differ"
    finite = ~(nan | inf)
    got, eager, ref = got[finite].double(), eager[finite].double(), ref[finite]
    if not got.numel():
        return
    assert torch.isfinite(ref).all(), f"{what}: the fp64 reference is not finite where eager is"
    slack = 2 * float((eager - ref).abs().max())
    if magnitude is not None and magnitude.numel():
        slack = max(slack, epsilon * float(magnitude.detach().cpu().double().abs().nan_to_num(0, 0, 0).max()))
    torch.testing.assert_close(got, ref, rtol=tol, atol=tol + slack, msg=lambda m: f"{what}: {m}")


def check_outputs(got, fn, args):
    """Compare ``got`` (a pytree of tensors) with ``fn(*args)`` in eager and in fp64."""
    eager = fn(*args)
    ref64 = fn(*[_to_fp64(a) for a in args])
    got_l, eager_l, ref_l = (pytree.tree_leaves(t) for t in (got, eager, ref64))
    assert len(got_l) == len(eager_l) == len(ref_l)
    try:  # fn of |inputs|: what rounding errors scale with (see `assert_close`)
        magnitudes = pytree.tree_leaves(fn(*[_to_fp64(a).abs() if _is_float(a) else a for a in args]))
    except Exception:  # noqa: BLE001 - some functions reject |x| (domains, indices): no extra slack
        magnitudes = []
    if len(magnitudes) != len(eager_l):
        magnitudes = [None] * len(eager_l)
    for i, (g, e, r, m) in enumerate(zip(got_l, eager_l, ref_l, magnitudes)):
        assert_close(g, e, r, f"output {i}", m if isinstance(m, torch.Tensor) and m.is_floating_point() else None)


def _is_float(x) -> bool:
    return isinstance(x, torch.Tensor) and x.is_floating_point()


def extern_ops():
    return {k[len("extern."):]: v for k, v in counters.items() if k.startswith("extern.")}


def kernel_names(debug_dir, kind="*"):
    """The generated kernel of each launch in the graphs dumped under ``debug_dir``
    (``kind``: ``fw``, ``bw``, ``inference`` or all): a kernel the wrapper defines once
    and launches for several groups counts at each launch."""
    names = []
    for path in sorted(glob.glob(str(debug_dir / f"graph_*_{kind}" / "output_code.py"))):
        source = open(path).read()
        defined = set(re.findall(r"^def ((?:poi|per|red)_\w+)\(", source, re.M))
        call = source[source.index("\ndef call("):]
        # CPU: `name[(grid,)](...)`; CUDA: `launch_name(...)`, `launch_name_<k>(...)`
        for launched in re.findall(r"^\s+(?:launch_)?((?:poi|per|red)_\w+?)[\[(]", call, re.M):
            names.append(launched if launched in defined else launched.rsplit("_", 1)[0])
    return names


def run_compiled(fn, *args, tmp_path, dynamic=None, allowed_externs=()):
    """``fn`` compiled and run on ``args``, checked against eager and fp64; returns the
    generated kernels' names and the outputs."""
    with config.patch(debug_dir=str(tmp_path)):
        got = torch.compile(fn, backend="inductor_lite", dynamic=dynamic)(*args)
    check_outputs(got, fn, args)
    assert counters["graphs_fallback"] == 0
    assert set(extern_ops()) <= set(allowed_externs), f"unexpected externs: {extern_ops()}"
    assert counters["extern_calls"] == sum(extern_ops().values())
    names = kernel_names(tmp_path)
    assert counters["kernels_generated"] == len(names)
    return names, got


@pytest.fixture
def unsplit(monkeypatch):
    """Row reductions over few long rows stay one kernel: these tests check its forms
    (split reductions have tests of their own)."""
    from inductor_lite.fx_lowering import reductions
    monkeypatch.setattr(reductions, "SPLIT_MIN_RNUMEL", 1 << 62)


def kind(cols):
    """The kernel prefix a row reduction over ``cols`` static elements gets."""
    return "per" if heuristics.next_power_of_2(cols) <= heuristics.PERSISTENT_MAX_RBLOCK else "red"


def randn(*shape, dtype=torch.float32):
    return torch.randn(*shape).to(dtype)


DTYPES = [torch.float32, torch.bfloat16]
DTYPE_IDS = ["fp32", "bf16"]


# ---------------------------------------------------------------------------- one kernel per pattern


def _safe_softmax(x):
    return aten._safe_softmax(x, -1)


ONE_KERNEL_PATTERNS = {
    # name: (fn, input shapes (the last ones are weights), kernel kind)
    "softmax": (lambda x: torch.softmax(x, -1), [(8, 300)], "per"),
    "log_softmax": (lambda x: torch.log_softmax(x, -1), [(8, 300)], "per"),
    "safe_softmax": (_safe_softmax, [(8, 300)], "per"),
    "add_layer_norm": (lambda x, y, w, b: F.layer_norm(x + y, (300,), w, b), [(8, 300), (8, 300), (300,), (300,)],
                       "per"),
    "rms_norm": (lambda x, w: F.rms_norm(x, (300,), w), [(8, 300), (300,)], "per"),
    "var_mean": (lambda x: torch.var_mean(x, -1), [(8, 300)], "per"),
    "global_avg_pool": (lambda x: x.mean((2, 3)), [(2, 16, 7, 7)], "per"),
    "transpose_add": (lambda x: x.t().contiguous() + 1, [(33, 65)], "poi"),
}


@pytest.mark.parametrize("dtype", DTYPES, ids=DTYPE_IDS)
@pytest.mark.parametrize("name", list(ONE_KERNEL_PATTERNS))
def test_pattern_is_one_kernel(name, dtype, tmp_path):
    fn, shapes, prefix = ONE_KERNEL_PATTERNS[name]
    args = [randn(*s, dtype=dtype) for s in shapes]
    names, _ = run_compiled(fn, *args, tmp_path=tmp_path)
    assert len(names) == 1 and names[0].startswith(prefix + "_"), names
    assert not extern_ops()


def test_safe_softmax_of_a_fully_masked_row_is_zero(tmp_path):
    x = torch.randn(4, 300)
    x[1] = float("-inf")
    x[2, :7] = float("-inf")
    names, out = run_compiled(_safe_softmax, x, tmp_path=tmp_path)
    assert len(names) == 1
    assert torch.equal(out[1], torch.zeros(300))


# ---------------------------------------------------------------------------- row reductions, persistent and looped


ROW_REDUCTIONS = {
    "sum": lambda x: x.sum(-1),
    "mean": lambda x: x.mean(-1),
    "prod": lambda x: (1 + x / x.shape[-1]).prod(-1),
    # +-1 with a few 2s and 0.5s: exact in every dtype, so the product must be exact too
    "prod_exact": lambda x: torch.where(x.abs() > 2.5, torch.where(x > 0, 2.0, 0.5), x.sign()).prod(-1),
    "amax": lambda x: x.amax(-1),
    "amin": lambda x: x.amin(-1),
    "argmax": lambda x: x.argmax(-1),
    "argmin": lambda x: x.argmin(-1),
    "max_dim": lambda x: tuple(x.max(-1)),
    "min_dim": lambda x: tuple(x.min(-1, keepdim=True)),
    "var_std_c0": lambda x: (x.var(-1, correction=0), x.std(-1, correction=0)),
    "var_std_c1": lambda x: (x.var(-1, correction=1), x.std(-1)),
    "any_all": lambda x: ((x > 3).any(-1), (x > -4).all(-1)),
    "logsumexp": lambda x: torch.logsumexp(x, -1),
    "vector_norm": lambda x: (torch.linalg.vector_norm(x, 2, -1), torch.linalg.vector_norm(x, 1, -1)),
    "softmax": lambda x: torch.softmax(x, -1),
    "log_softmax": lambda x: torch.log_softmax(x, -1),
    "layer_norm": lambda x: F.layer_norm(x, (x.shape[-1],)),
}


@pytest.mark.parametrize("cols", ALL_COLS)
@pytest.mark.parametrize("dtype", DTYPES, ids=DTYPE_IDS)
@pytest.mark.parametrize("name", list(ROW_REDUCTIONS))
def test_row_reduction(name, dtype, cols, tmp_path, unsplit):
    fn = ROW_REDUCTIONS[name]
    x = randn(3, cols, dtype=dtype)
    names, _ = run_compiled(fn, x, tmp_path=tmp_path)
    assert len(names) == 1 and names[0].startswith(kind(cols) + "_"), names


@pytest.mark.parametrize("cols", ALL_COLS)
def test_division_by_a_row_value(cols, tmp_path, unsplit):
    """Dividing by a per-row value keeps IEEE division's zeros, infinities and NaNs: rows summing to 0 (0/0, +-x/0), a row
    with an infinity (x/inf, inf/inf), a row of zeros, and ordinary rows (positive, so
    that no row sum cancels to near 0: a quotient by it would be ill-conditioned)."""
    x = torch.rand(6, cols) + 0.5
    x[0, :] = 0.0
    x[1, :] = 0.0
    x[1, 0], x[1, 1], x[1, 2] = 3.0, -3.0, 0.5
    x[1, 3] = -0.5
    x[2, 5] = float("inf")
    x[3, :] = x[3, :].abs() * 1e-30
    names, _ = run_compiled(lambda x: (x / x.sum(-1, keepdim=True), x / (2 * x.abs().amax(-1, keepdim=True))),
                            x, tmp_path=tmp_path)
    assert len(names) == 1 and names[0].startswith(kind(cols) + "_"), names


def test_a_quotient_recomputed_in_another_kernel_is_the_same():
    """A max's backward finds the maximum by equality with a quotient recomputed in a
    pointwise kernel; the forward's reduction kernel must have divided the same way
    (it multiplied by a per-row reciprocal: columns lost their gradient). And a
    subnormal per-row divisor divides as IEEE division does (its reciprocal was inf)."""
    def fn(x):
        return (x / x.std(0, keepdim=True)).amax(0)

    x = torch.randn(64, 8)
    leaf, eager_leaf = x.clone().requires_grad_(), x.clone().requires_grad_()
    torch.compile(fn, backend="inductor_lite")(leaf).sum().backward()
    fn(eager_leaf).sum().backward()
    torch.testing.assert_close(leaf.grad, eager_leaf.grad)  # before: columns of zeros
    tiny = torch.rand(8, 100) * 1e-41
    check_outputs(torch.compile(lambda x: x / x.sum(-1, keepdim=True), backend="inductor_lite")(tiny),
                  lambda x: x / x.sum(-1, keepdim=True), (tiny,))


@pytest.mark.parametrize("fn", [lambda x, c: (x * c).amax(-1), lambda x, c: (x.abs() + c).amax(-1)],
                         ids=["mul", "abs_add"])
def test_bf16_max_backward_compares_rounded_values(fn):
    """A bf16 max's backward finds the maximum by equality between the stored (rounded)
    maximum and the recomputed input, which a kernel keeps in fp32: the comparison
    rounds it first, as eager's bf16 tensor is (unrounded, no element matched and every
    gradient was NaN)."""
    x, c = randn(4, 300, dtype=torch.bfloat16), randn(300, dtype=torch.bfloat16)
    leaves, eager_leaves = [t.clone().requires_grad_() for t in (x, c)], [t.clone().requires_grad_() for t in (x, c)]
    torch.compile(fn, backend="inductor_lite")(*leaves).sum().backward()
    fn(*eager_leaves).sum().backward()
    for got, want in zip(leaves, eager_leaves):
        torch.testing.assert_close(got.grad, want.grad, atol=2e-2, rtol=2e-2)


@pytest.mark.parametrize("cols", ALL_COLS)
@pytest.mark.parametrize("dtype", [torch.int64, torch.int32], ids=["int64", "int32"])
def test_integer_sums_are_exact(dtype, cols, tmp_path, unsplit):
    x = torch.randint(-2 ** 20, 2 ** 20, (3, cols), dtype=dtype)
    x[0, 0] = 2 ** 30 if dtype == torch.int64 else 0  # an int64 sum beyond int32
    names, _ = run_compiled(lambda x: (x.sum(-1), (x * 3).sum(-1, keepdim=True)), x, tmp_path=tmp_path)
    assert len(names) == 1 and names[0].startswith(kind(cols) + "_")


@pytest.mark.parametrize("cols", ALL_COLS)
def test_welford_of_values_made_in_the_kernel(cols, tmp_path, unsplit):
    """``log`` of the 0 a masked-off lane loads is -inf: weighing nothing, it still made
    the Welford merge's ``inf * 0`` NaN for every row not a power of two long."""
    x = torch.rand(3, cols + 1) + 0.5  # never a power of two
    w = torch.randn(cols + 1)
    names, _ = run_compiled(lambda x, w: (x.log().var(-1), torch.var_mean(1 / x, -1),
                                          F.layer_norm(x.log(), (cols + 1,), w)), x, w, tmp_path=tmp_path)
    assert names


def test_any_all_of_uint8_are_uint8_as_in_eager(tmp_path):
    """Eager's ``any``/``all`` of a uint8 tensor are uint8 0 or 1, so ``~`` gives 255 or
    254 (it gave 1, a bool's logical not); over one element too."""
    x = torch.randint(0, 3, (4, 5), dtype=torch.uint8)
    x[1] = 0
    run_compiled(lambda x: (~x.all(0), x.any(1) * 200 + 100, x.any(1) - 1, x[:, :1].any(1) * 7), x,
                 tmp_path=tmp_path)


def test_looped_argmax_keeps_int64_indices(tmp_path, device, monkeypatch, kernel_launches):
    """A looped argmax/argmin over rows whose indices need int64 math (rows past 2**31
    elements; forced here by lowering the int32 limit) keeps its running index in int64,
    and the kernel compiles to PTX that assembles."""
    from inductor_lite.codegen import kernel
    from inductor_lite.dsl import assembler

    monkeypatch.setattr(kernel, "INT32_INDEX_LIMIT", 1000)
    monkeypatch.setattr(heuristics, "PERSISTENT_MAX_RBLOCK", 64)
    x = randn(3, 5000)
    x[1, 4321] = float("nan")
    names, _ = run_compiled(lambda x: (x.argmax(1), x.argmin(1), x[::2].max(1)), x, tmp_path=tmp_path)
    assert any(n.startswith("red_") for n in names), names
    if device == "cpu" and assembler.can_assemble():
        assemble_launches(kernel_launches, ccs=((9, 0),))


def test_full_sum_is_a_split_reduction(tmp_path):
    x = torch.randn(300, 300)
    names, _ = run_compiled(lambda x: x.sum(), x, tmp_path=tmp_path)
    assert len(names) == 2 and all(not n.startswith("poi_") for n in names), names


@pytest.mark.parametrize("dtype", DTYPES, ids=DTYPE_IDS)
def test_column_sum_is_an_outer_split_reduction(dtype, tmp_path):
    x = randn(2048, 64, dtype=dtype)
    names, _ = run_compiled(lambda x: x.sum(0), x, tmp_path=tmp_path)
    assert len(names) == 2 and all(not n.startswith("poi_") for n in names), names


def test_channels_last_mean_is_outer_with_dynamic_shapes(tmp_path, monkeypatch):
    """A mean over H*W of a channels-last tensor reduces along a stride of C: an outer
    reduction (contiguous outputs), with symbolic sizes too, where the stride along the
    outputs at the origin is ``1 % C``, decided at the shape environment's example sizes."""
    from inductor_lite.codegen import kernel

    axes = []
    original = kernel.reduction_axis
    monkeypatch.setattr(kernel, "reduction_axis", lambda group: axes.append(original(group)) or axes[-1])
    for n, c in [(2, 24), (3, 40)]:
        x = randn(n, c, 9, 7).contiguous(memory_format=torch.channels_last)
        run_compiled(lambda x: x.mean((2, 3)), x, tmp_path=tmp_path, dynamic=True)
    assert axes and set(axes) == {0}, axes


@pytest.mark.parametrize("layout", ["channels_last", "contiguous"])
def test_few_channel_statistics_are_a_split_welford(layout, tmp_path):
    """Batch norm's statistics over few channels and long rows (strided in channels-last,
    contiguous otherwise) split: a Welford over pieces of equal count, then their merge
    (two small sums in one kernel); mean and variance as fp64's, output poisoned."""
    x = randn(8, 6, 40, 64) * 3 + 5
    if layout == "channels_last":
        x = x.contiguous(memory_format=torch.channels_last)
    names, _ = run_compiled(lambda x: torch.var_mean(x, dim=(0, 2, 3), correction=1), x, tmp_path=tmp_path)
    assert len(names) == 2 and all(not n.startswith("poi_") for n in names), names


def test_split_welford_needs_equal_pieces(tmp_path):
    """Reduced elements with no power-of-two factor cannot split into equal pieces: one kernel."""
    x = randn(3, 5, 97, 101)
    names, _ = run_compiled(lambda x: torch.var_mean(x, dim=(0, 2, 3)), x, tmp_path=tmp_path)
    assert len(names) == 1, names


def test_channels_last_batch_norm_training_step(tmp_path):
    """A training batch norm over a channels-last activation (split statistics in the
    forward, column sums in the backward): values and gradients as fp64's."""
    x = (randn(4, 6, 48, 48) * 2 + 1).contiguous(memory_format=torch.channels_last).requires_grad_()
    w, b = randn(6).requires_grad_(), randn(6).requires_grad_()
    fn = lambda x, w, b: F.batch_norm(x, None, None, w, b, training=True).relu()  # noqa: E731
    with config.patch(debug_dir=str(tmp_path)):
        out = torch.compile(fn, backend="inductor_lite")(x, w, b)
    grad = randn(*out.shape)
    got = torch.autograd.grad(out, (x, w, b), grad)
    x64, w64, b64 = (t.detach().double().requires_grad_() for t in (x, w, b))
    out64 = fn(x64, w64, b64)
    ref = torch.autograd.grad(out64, (x64, w64, b64), grad.double())
    torch.testing.assert_close(out.double(), out64, atol=1e-4, rtol=1e-4)
    for g, r in zip(got, ref):
        torch.testing.assert_close(g.double(), r, atol=1e-3, rtol=1e-3)
    assert counters["graphs_fallback"] == 0


def test_cross_entropy_forward(tmp_path):
    x, target = torch.randn(16, 100), torch.randint(0, 100, (16,))
    target[3] = -100  # ignore_index
    names, _ = run_compiled(lambda x, t: F.cross_entropy(x, t), x, target, tmp_path=tmp_path,
                         allowed_externs=("aten.gather.default",))
    # log_softmax rows; the gather's index (where(target != ignore)) with the count of kept
    # rows; the masked mean of the gathered values. Without the gather extern: 2 kernels.
    assert len(names) == (3 if "aten.gather.default" in extern_ops() else 2), names


@pytest.mark.parametrize("cols", ALL_COLS)
def test_a_row_index_loaded_through_a_loaded_index(cols, tmp_path, unsplit):
    """BERT's embeddings at batch 1: a row's token type is gathered through its position
    id (a load through a loaded index), selects an embedding row for a LayerNorm, and
    is returned too. Its load is masked by the row's masks only, so the value stored
    per row has one element per row, not one per column."""
    ids, pos = torch.randint(0, 50, (1, 16)), torch.randperm(16)[None]
    types = torch.randint(0, 2, (1, 16))
    w_tok, w_type, w_pos = torch.randn(50, cols), torch.randn(2, cols), torch.randn(16, cols)

    def embed(ids, pos, types, w_tok, w_type, w_pos):
        token_type = torch.gather(types.expand(pos.shape[0], -1), 1, pos)
        x = F.embedding(ids, w_tok) + F.embedding(token_type, w_type) + F.embedding(pos, w_pos)
        return F.layer_norm(x, (cols,)), token_type

    names, _ = run_compiled(embed, ids, pos, types, w_tok, w_type, w_pos, tmp_path=tmp_path)
    assert len(names) == 1 and names[0].startswith(kind(cols) + "_"), names


# ---------------------------------------------------------------------------- NaN and ties


@pytest.mark.parametrize("cols", ALL_COLS)
@pytest.mark.parametrize("dtype", DTYPES, ids=DTYPE_IDS)
def test_nan_propagates_and_ties_take_the_first_index(dtype, cols, tmp_path, unsplit):
    x = torch.randn(6, cols)
    x[0, 7] = x[0, cols - 3] = float("nan")  # two NaNs: the first one's index
    x[1, cols - 1] = float("nan")  # a NaN in the last element (the last chunk of a looped row)
    x[2] = 1.0  # all ties: index 0
    x[3, 10] = x[3, cols - 10] = 50.0  # a tie far apart (in different chunks of a looped row)
    x[3, 20] = x[3, cols - 20] = -50.0
    x[4] = float("-inf")
    x[5, cols // 2] = float("inf")
    x = x.to(dtype)

    def fn(x):
        return x.amax(-1), x.argmax(-1), x.amin(-1), x.argmin(-1), *x.max(-1), *x.min(-1)

    names, out = run_compiled(fn, x, tmp_path=tmp_path)
    assert len(names) == 1
    assert out[1].tolist()[:5] == [7, cols - 1, 0, 10, 0] and out[3].tolist()[:4] == [7, cols - 1, 0, 20]


def test_nan_propagates_through_split_reductions(tmp_path):
    x = torch.randn(300, 300)
    x[100, 3] = float("nan")
    names, _ = run_compiled(lambda x: (x.sum(), x.amax(), x.amin(), x.argmax()), x, tmp_path=tmp_path)
    assert names and not extern_ops()


# ---------------------------------------------------------------------------- backward


def _run_backward(fn, args, requires_grad):
    leaves = [a.detach().clone().requires_grad_(r) for a, r in zip(args, requires_grad)]
    out = fn(*leaves)
    return out, leaves


@pytest.mark.parametrize("dtype", DTYPES, ids=DTYPE_IDS)
@pytest.mark.parametrize("name", ["softmax", "log_softmax", "layer_norm", "rms_norm"])
def test_training_backward(name, dtype, tmp_path):
    cols = 300
    fns = {
        "softmax": (lambda x: torch.softmax(x, -1), [(8, cols)], 1),
        "log_softmax": (lambda x: torch.log_softmax(x, -1), [(8, cols)], 1),
        # dx: row reductions; dw, db: column reductions (another group)
        "layer_norm": (lambda x, w, b: F.layer_norm(x, (cols,), w, b), [(8, cols), (cols,), (cols,)], 2),
        "rms_norm": (lambda x, w: F.rms_norm(x, (cols,), w), [(8, cols), (cols,)], 2),
    }
    fn, shapes, backward_kernels = fns[name]
    args = [randn(*s, dtype=dtype) for s in shapes]
    grad_out = randn(8, cols, dtype=dtype)
    compiled = torch.compile(fn, backend="inductor_lite")
    with config.patch(debug_dir=str(tmp_path)):
        out, leaves = _run_backward(compiled, args, [True] * len(args))
        out.backward(grad_out)
    eager_out, eager_leaves = _run_backward(fn, args, [True] * len(args))
    eager_out.backward(grad_out)
    ref_out, ref_leaves = _run_backward(fn, [_to_fp64(a) for a in args], [True] * len(args))
    ref_out.backward(_to_fp64(grad_out))
    assert_close(out, eager_out, ref_out, "forward")
    for i, (g, e, r) in enumerate(zip(leaves, eager_leaves, ref_leaves)):
        assert_close(g.grad, e.grad, r.grad, f"grad {i}")
    assert counters["graphs_compiled"] == 2 and counters["graphs_fallback"] == 0
    assert len(kernel_names(tmp_path, "fw")) == 1
    assert len(kernel_names(tmp_path, "bw")) == backward_kernels, kernel_names(tmp_path)
    assert not extern_ops()  # no _softmax_backward_data, native_layer_norm_backward, ...


@pytest.mark.parametrize("dtype", DTYPES, ids=DTYPE_IDS)
def test_rows_too_many_to_hold_in_registers_are_looped(dtype, tmp_path, monkeypatch, unsplit):
    """softmax's forward holds one row across its reductions, its backward two (the
    gradient and the output): at a row length whose two rows exceed
    `heuristics.PERSISTENT_MAX_RBLOCK`, the forward stays persistent and the backward
    is looped, with the same values."""
    monkeypatch.setattr(heuristics, "PERSISTENT_MAX_RBLOCK", 512)
    x, grad_out = randn(8, 300, dtype=dtype), randn(8, 300, dtype=dtype)
    compiled = torch.compile(lambda x: torch.softmax(x, -1), backend="inductor_lite")
    with config.patch(debug_dir=str(tmp_path)):
        out, (leaf,) = _run_backward(compiled, [x], [True])
        out.backward(grad_out)
    eager_out, (eager_leaf,) = _run_backward(lambda x: torch.softmax(x, -1), [x], [True])
    eager_out.backward(grad_out)
    ref_out, (ref_leaf,) = _run_backward(lambda x: torch.softmax(x, -1), [_to_fp64(x)], [True])
    ref_out.backward(_to_fp64(grad_out))
    assert_close(out, eager_out, ref_out, "forward")
    assert_close(leaf.grad, eager_leaf.grad, ref_leaf.grad, "grad")
    assert [n[:4] for n in kernel_names(tmp_path, "fw")] == ["per_"]
    assert [n[:4] for n in kernel_names(tmp_path, "bw")] == ["red_"]
    assert not extern_ops()


@pytest.fixture
def mix_order_small(monkeypatch):
    """Mix-order fusion for shapes small enough for the interpreter (the real limits
    keep it for inputs of 5M elements and up)."""
    from inductor_lite.scheduler import mix_order
    monkeypatch.setattr(mix_order, "MIX_ORDER_MIN_ELEMENTS", 1)
    monkeypatch.setattr(mix_order, "MIX_ORDER_MIN_ROWS", 64)


@pytest.mark.parametrize("mix_order", [True, False], ids=["mix", "nomix"])
@pytest.mark.parametrize("shape", [(1000, 48), (5, 200, 48), (1000, 32)], ids=["2d", "3d", "32cols"])
@pytest.mark.parametrize("dtype", DTYPES, ids=DTYPE_IDS)
@pytest.mark.parametrize("name", ["layer_norm", "rms_norm"])
def test_weight_gradients_are_summed_in_the_row_kernel(name, dtype, shape, mix_order, tmp_path, mix_order_small):
    """Mix-order fusion: the norm's weight (and bias) gradients, column sums over the
    rows, are computed in pieces of 32 rows by the kernel computing the input gradient
    (one pass over the rows; 1000 rows leave a last piece of 8), then one small kernel
    per gradient adds the pieces; ``mix_order_reduction`` off, they are a kernel of
    their own (split, then added up). Poisoned buffers catch a piece never stored. Rows
    of 32 make the pieces' own group equal the row kernel's."""
    cols = shape[-1]
    fns = {
        "layer_norm": (lambda x, w, b: F.layer_norm(x, (cols,), w, b), [shape, (cols,), (cols,)]),
        "rms_norm": (lambda x, w: F.rms_norm(x, (cols,), w), [shape, (cols,)]),
    }
    fn, shapes = fns[name]
    args = [randn(*s, dtype=dtype) for s in shapes]
    grad_out = randn(*shape, dtype=dtype)
    with config.patch(debug_dir=str(tmp_path), mix_order_reduction=mix_order):
        out, leaves = _run_backward(torch.compile(fn, backend="inductor_lite"), args, [True] * len(args))
        out.backward(grad_out)
    eager_out, eager_leaves = _run_backward(fn, args, [True] * len(args))
    eager_out.backward(grad_out)
    ref_out, ref_leaves = _run_backward(fn, [_to_fp64(a) for a in args], [True] * len(args))
    ref_out.backward(_to_fp64(grad_out))
    for i, (g, e, r) in enumerate(zip(leaves, eager_leaves, ref_leaves)):
        assert_close(g.grad, e.grad, r.grad, f"grad {i}")
    # the row kernel, (without mix-order the column sums,) one kernel adding each gradient's pieces
    assert len(kernel_names(tmp_path, "bw")) == len(args) + (not mix_order), kernel_names(tmp_path, "bw")
    assert not extern_ops()


@pytest.mark.parametrize("name", ["cycle", "across_rows", "other_size"])
def test_column_sums_that_cannot_join_a_row_kernel(name, tmp_path, mix_order_small):
    """A column sum beside a row reduction over the same rows, where one kernel cannot
    compute both, keeps the lowering's long pieces (two looped outer reductions), and
    compiles: the row reduction needs the column sum (a BatchNorm-like centring), or
    the sum reads its other input across the rows. A pointwise result of another size
    beside a mix-order kernel does not join it (only the final stage is looped)."""
    x, y, w = randn(1000, 48), randn(48, 1000), randn(48)
    fns = {
        "cycle": (lambda x: (x * x.sum(0)).sum(1), (x,)),
        "across_rows": (lambda x, y: (x.sum(1), (x * y.t()).sum(0)), (x, y)),
        "other_size": (lambda x, w: (x.sum(1), (x * w).sum(0), w * 3), (x, w)),
    }
    fn, args = fns[name]
    names, _ = run_compiled(fn, *args, tmp_path=tmp_path)
    assert sum(n.startswith("red_") for n in names) == (1 if name == "other_size" else 2), names


@pytest.mark.parametrize("dtype", DTYPES, ids=DTYPE_IDS)
def test_a_column_sum_without_a_row_kernel_keeps_its_split(dtype, tmp_path, mix_order_small):
    """A column sum of a mix-order shape that no row reduction shares its rows with
    keeps the lowering's few long pieces (a looped outer reduction), not pieces of rows."""
    names, _ = run_compiled(lambda x: (x * 2).sum(0), randn(1000, 48, dtype=dtype), tmp_path=tmp_path)
    assert len(names) == 2 and names[0].startswith("red_"), names


# ---------------------------------------------------------------------------- dynamic shapes


DYNAMIC = {
    "softmax": (lambda x: torch.softmax(x, -1), lambda r, c: [torch.randn(r, c)]),
    "layer_norm": (lambda x, w, b: F.layer_norm(x, (x.shape[-1],), w, b),
                   lambda r, c: [torch.randn(r, c), torch.randn(c), torch.randn(c)]),
    "sum": (lambda x: (x.sum(-1), x.mean(-1, keepdim=True)), lambda r, c: [torch.randn(r, c)]),
}


@pytest.mark.parametrize("name", list(DYNAMIC))
def test_dynamic_shapes_take_the_looped_form(name, tmp_path):
    fn, make = DYNAMIC[name]
    compiled = torch.compile(fn, backend="inductor_lite", dynamic=True)
    with config.patch(debug_dir=str(tmp_path)):
        for rows, cols in ((3, 7), (5, 64), (2, 300), (4, 2500), (2, LOOPED_COLS)):
            args = make(rows, cols)
            check_outputs(compiled(*args), fn, args)
    assert counters["graphs_compiled"] == 1 and counters["graphs_fallback"] == 0
    names = kernel_names(tmp_path)
    assert len(names) == 1 and names[0].startswith("red_"), names
    assert not extern_ops()


@pytest.mark.parametrize("dynamic", [False, True])
def test_mean_and_variance_over_a_single_element(dynamic):
    """A Welford reduction over one element is the element and 0 (pointwise): LayerNorm
    and var_mean over a size-1 dimension compile (dynamic=True lowered a reduction in a
    kernel with no reduction loop)."""
    def fn(x, w, b):
        return F.layer_norm(x, w.shape, w, b), torch.var_mean(x, -1, correction=0)

    compiled = torch.compile(fn, backend="inductor_lite", dynamic=dynamic)
    for shape in ((1, 2, 1), (3, 4, 1)):
        x, w, b = torch.randn(shape), torch.randn(1), torch.randn(1)
        check_outputs(compiled(x, w, b), fn, (x, w, b))
    assert counters["graphs_fallback"] == 0 and not extern_ops()
