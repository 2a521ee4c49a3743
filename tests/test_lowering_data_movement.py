"""Gather-style indexing and data movement through the backend, against eager.

Each op runs on fresh random inputs (fp32, bf16 and int64: these ops only move
data, so results must be exact) and must no longer be an extern call. Every test runs
on CPU (the DSL interpreter) and, marked `gpu`, on CUDA.
"""

import os
import subprocess
import sys

import pytest
import torch
import torch.nn.functional as F

import inductor_lite
from inductor_lite.config import config
from inductor_lite.dsl import assembler
from conftest import assemble_launches

DTYPES = [torch.float32, torch.bfloat16, torch.int64]


@pytest.fixture(autouse=True, params=["cpu", pytest.param("cuda", marks=pytest.mark.gpu)])
def device(request):
    with torch.device(request.param):
        yield request.param


@pytest.fixture(autouse=True)
def fresh():
    torch._dynamo.reset()
    inductor_lite.reset_counters()
    with config.patch(fallback_on_error=False):
        yield
    torch._dynamo.reset()


def rand(*size, dtype=torch.float32):
    if dtype.is_floating_point:
        return torch.randn(size).to(dtype)
    return torch.randint(-1000, 1000, size, dtype=dtype)


def check(fn, *args, externs=(), dynamic=False):
    """``fn`` compiled gives eager's result exactly, with one kernel or more and no
    extern call but ``externs``."""
    got = torch.compile(fn, backend="inductor_lite", dynamic=dynamic)(*args)
    expected = fn(*args)
    for g, e in zip(got if isinstance(got, tuple) else (got,), expected if isinstance(expected, tuple) else (expected,)):
        assert g.dtype == e.dtype and g.shape == e.shape
        torch.testing.assert_close(g, e, rtol=0, atol=0)
    counters = inductor_lite.counters
    called = sorted(k for k in counters if k.startswith("extern.") and k not in externs)
    assert not called, called
    assert counters["kernels_generated"] >= 1 and counters["graphs_fallback"] == 0


# ---------------------------------------------------------------------------- gather-style


@pytest.mark.parametrize("dtype", DTYPES)
def test_gather(dtype):
    x = rand(5, 7, dtype=dtype)
    check(lambda x, i, j: (torch.gather(x, 1, i), torch.gather(x, 0, j)), x, torch.randint(0, 7, (5, 3)),
          torch.randint(0, 5, (2, 7)))


def test_gather_fuses_with_its_consumer_and_producer():
    x, i = torch.randn(6, 9), torch.randint(0, 9, (6, 4))
    check(lambda x, i: torch.gather(x.exp(), -1, i + 0) * 2, x, i)
    assert inductor_lite.counters["kernels_generated"] == 1


@pytest.mark.parametrize("fn, bad", [
    (lambda x, i: torch.gather(x, 1, i), torch.tensor([[0, 7]] * 5)),
    (lambda x, i: torch.index_select(x, 0, i), torch.tensor([1, -1])),
    (lambda x, i: F.embedding(i, x), torch.tensor([2, 5])),
    (lambda x, i: x[i] * 2, torch.tensor([0, 5])),
])
def test_out_of_range_index_read_raises(fn, bad, device):
    # eager raises; a masked load would give 0 silently
    if device == "cuda":
        pytest.skip("a device-side assert leaves the CUDA context unusable: "
                    "test_out_of_range_index_read_stops_the_gpu_kernel runs it in a child process")
    with pytest.raises(AssertionError, match="index out of bounds"):
        torch.compile(fn, backend="inductor_lite")(torch.randn(5, 7), bad)


@pytest.mark.gpu
def test_out_of_range_index_read_stops_the_gpu_kernel(device):
    """On the GPU the bounds check traps: the launch fails (the next synchronising call
    raises) instead of a masked load giving 0. The trap kills the CUDA context, so the
    kernel runs in a child process."""
    if device == "cpu":
        pytest.skip("the GPU's trap; test_out_of_range_index_read_raises covers the interpreter")
    child = (
        "import torch, inductor_lite\n"
        "x, i = torch.randn(5, 7, device='cuda'), torch.tensor([[0, 7]] * 5, device='cuda')\n"
        "out = torch.compile(lambda x, i: torch.gather(x, 1, i), backend='inductor_lite')(x, i)\n"
        "torch.cuda.synchronize()\n"
        "print('no error:', out.tolist())\n"
    )
    env = dict(os.environ, INDUCTOR_LITE_FALLBACK_ON_ERROR="0")
    proc = subprocess.run([sys.executable, "-c", child], env=env, capture_output=True, text=True, timeout=300)
    assert proc.returncode != 0 and "no error" not in proc.stdout, proc.stdout
    assert "CUDA" in proc.stderr or "cuda" in proc.stderr, proc.stderr[-2000:]


@pytest.mark.parametrize("dtype", DTYPES)
def test_index_select(dtype):
    x = rand(4, 6, 3, dtype=dtype)
    check(lambda x, i, j: (torch.index_select(x, 1, i), torch.index_select(x, 0, j)), x, torch.randint(0, 6, (8,)),
          torch.randint(0, 4, (2,), dtype=torch.int32))


@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16])
def test_embedding(dtype):
    weight = rand(11, 8, dtype=dtype)
    check(lambda w, i, j: (F.embedding(i, w), F.embedding(j, w, padding_idx=0) + 1), weight,
          torch.randint(0, 11, (3, 5)), torch.randint(0, 11, (7,)))


def test_embedding_backward_of_a_model():
    emb = torch.nn.Embedding(10, 4)
    i = torch.randint(0, 10, (3, 6))
    out = torch.compile(lambda i: emb(i).sum(), backend="inductor_lite")(i)
    out.backward()
    expected_grad = emb.weight.grad.clone()
    emb.weight.grad = None
    emb(i).sum().backward()
    torch.testing.assert_close(expected_grad, emb.weight.grad)
    assert "extern.aten.embedding.default" not in inductor_lite.counters


@pytest.mark.parametrize("dtype", DTYPES)
def test_advanced_indexing(dtype):
    x = rand(5, 4, 6, dtype=dtype)
    i, j = torch.randint(-5, 5, (3,)), torch.randint(-6, 6, (2, 1))
    check(lambda x, i, j: (
        x[i],  # negative indices count from the end
        x[i, :, j],  # not adjacent: the index shape comes first
        x[:, j.clamp(-4, 3)],  # adjacent, after a kept dimension
        x[:, i.clamp(-4, 3), j],
    ), x, i, j)


def test_take_along_dim():
    x = torch.randn(4, 6)
    check(lambda x, i, j: (torch.take_along_dim(x, i, 1), torch.take_along_dim(x, j, 0)), x,
          torch.randint(0, 6, (4, 3)), torch.randint(0, 4, (1, 6)))


def test_cross_entropy_forward_has_no_extern():
    x, target = torch.randn(8, 10), torch.randint(0, 10, (8,))
    loss = torch.compile(F.cross_entropy, backend="inductor_lite")(x, target)
    torch.testing.assert_close(loss, F.cross_entropy(x, target))
    assert not [k for k in inductor_lite.counters if k.startswith("extern.")]


def test_cross_entropy_backward():
    # the backward scatters -1 at the targets: an indexed write (a scatter kernel)
    x, target = torch.randn(8, 10, requires_grad=True), torch.randint(0, 10, (8,))
    (grad,) = torch.autograd.grad(torch.compile(F.cross_entropy, backend="inductor_lite")(x, target), x)
    (expected,) = torch.autograd.grad(F.cross_entropy(x, target), x)
    torch.testing.assert_close(grad, expected)
    assert not [k for k in inductor_lite.counters if k.startswith("extern.")]


def test_bounds_checked_reads_compile_to_ptx(kernel_launches, device):
    """Kernels that assert their gathered indices (pointwise, and inside the row
    reductions of cross-entropy's forward and backward) go through the NVPTX compiler
    and assemble for sm_80 and sm_90."""
    if device == "cuda":
        pytest.skip("records interpreter launches; on CUDA the other tests run these kernels")
    if not assembler.can_assemble():
        pytest.skip("needs nvJitLink or ptxas")
    x, i = torch.randn(6, 9), torch.randint(0, 9, (6, 4))
    check(lambda x, i: torch.gather(x, 1, i) * 2, x, i)
    check(lambda w, i: F.embedding(i, w) + 1, torch.randn(11, 8), torch.randint(0, 11, (3, 5)))
    logits = torch.randn(8, 10, requires_grad=True)
    torch.compile(lambda x, t: F.cross_entropy(x, t), backend="inductor_lite")(
        logits, torch.randint(0, 10, (8,))).backward()
    assert len(kernel_launches) >= 4
    assemble_launches(kernel_launches)


def test_scatters_at_a_symbolic_position_of_either_sign():
    # an int argument turned symbolic (dynamic=True): no guard fixes its sign, so a
    # negative one must count from the end on every call (a fuzzing helper's find)
    def grad_of_select(x, a):
        x = x.clone().requires_grad_()
        (x[a] * torch.arange(1.0, 4.0, device=x.device)).sum().backward()
        return x.grad

    with config.patch(fallback_on_error=True):
        scatters = [torch.compile(f, backend="inductor_lite", dynamic=True) for f in (
            lambda x, a: x.slice_scatter(torch.ones(2, 3, device=x.device), 0, a, a + 2),
            lambda x, a: x.select_scatter(torch.full((3,), 7.0, device=x.device), 0, a),
        )]
        grads = torch.compile(grad_of_select, backend="inductor_lite", dynamic=True)
        x = torch.randn(6, 3)
        for a in (2, -4, 1, -3):
            assert torch.equal(scatters[0](x, a), x.slice_scatter(torch.ones(2, 3), 0, a, a + 2))
            assert torch.equal(scatters[1](x, a), x.select_scatter(torch.full((3,), 7.0), 0, a))
            assert torch.equal(grads(x, a), grad_of_select(x, a))
    assert inductor_lite.counters["graphs_fallback"] == 0


def test_gather_dynamic_shapes():
    fn = torch.compile(lambda x, i: torch.gather(x, 1, i) + 1, backend="inductor_lite", dynamic=True)
    for rows in (3, 5):
        x, i = torch.randn(rows, 7), torch.randint(0, 7, (rows, 2))
        torch.testing.assert_close(fn(x, i), torch.gather(x, 1, i) + 1)


# ---------------------------------------------------------------------------- data movement


@pytest.mark.parametrize("dtype", DTYPES)
def test_flip_roll_repeat_tile_stack(dtype):
    x, y = rand(4, 5, 6, dtype=dtype), rand(4, 5, 6, dtype=dtype)
    check(lambda x, y: (torch.flip(x, [0, 2]), torch.roll(x, (2, -7), (1, 2)), torch.roll(x, 11), x.repeat(2, 1, 1, 3),
                        x.tile((2,)), torch.stack([x, y, x], 1), torch.stack([x, y], -1)), x, y)


def test_index_arithmetic_on_negative_dividends_is_floor_arithmetic():
    """``flip`` after ``roll``, or after a transposed reshape, leaves indices such as
    ``(-x0) % 6`` and ``(-x0) // 2`` (torch's ``FloorDiv`` takes the multiples of the
    divisor out of ``(6 - x0)``): kernels divide as C does, and printed plainly these
    read out of bounds or the wrong element. Also through a scan and a backward."""
    x = rand(6, dtype=torch.int64)  # exact sums
    check(lambda x: (x.roll(-1).flip(0) + 1, x.roll(5, 0).flip(0).cumsum(0), x.roll(-1).flip(0).sum()), x)
    check(lambda x: x.t().reshape(12)[:7].flip(0) + 1, rand(3, 4))
    a = rand(6).requires_grad_()
    b = a.detach().clone().requires_grad_()
    torch.compile(lambda t: t.cumsum(0).roll(1, 0), backend="inductor_lite")(a).backward(torch.arange(6.0))
    b.cumsum(0).roll(1, 0).backward(torch.arange(6.0))
    torch.testing.assert_close(a.grad, b.grad)


@pytest.mark.parametrize("dtype", DTYPES)
def test_copy_variants_of_views(dtype):
    def fn(x):
        return (torch.permute_copy(x, (1, 0)), torch.transpose_copy(x, 0, 1) + 0, torch.view_copy(x, (3, 8)),
                torch.expand_copy(x[:, :1], (4, 6)), torch.slice_copy(x, 1, 1, 5, 2), torch.select_copy(x, 0, -1),
                torch.unsqueeze_copy(x, 1), torch.t_copy(x), *torch.split_copy(x, 4, 1), *torch.unbind_copy(x, 0),
                torch.narrow_copy(x, 1, 2, 3))

    check(fn, rand(4, 6, dtype=dtype))


@pytest.mark.parametrize("dtype", DTYPES)
def test_reflection_and_replication_padding(dtype):
    def fn(x1, x2, x3):
        return tuple(out for mode in ("reflect", "replicate") for out in (
            F.pad(x1, (2, 3), mode=mode), F.pad(x2, (3, 1, 0, 2), mode=mode), F.pad(x3, (1, 2, 2, 1, 1, 1), mode=mode)))

    check(fn, rand(2, 3, 8, dtype=dtype), rand(2, 3, 5, 7, dtype=dtype), rand(1, 2, 3, 4, 5, dtype=dtype))


def test_roll_by_a_symbolic_shift_is_an_extern():
    """``roll(x, x.shape[-1] // 2)`` under dynamic shapes: the shift is a size symbol, so
    the roll runs as an extern call (it raised inside the kernel's index function)."""
    with config.patch(fallback_on_error=False):
        fn = torch.compile(lambda x: torch.roll(x, x.shape[-1] // 2, -1) * 2, backend="inductor_lite", dynamic=True)
        for n in (6, 9):
            x = torch.randn(2, n)
            torch.testing.assert_close(fn(x), torch.roll(x, n // 2, -1) * 2)
    assert inductor_lite.counters["extern.aten.roll.default"] >= 1


def test_padding_flip_roll_dynamic_shapes():
    fn = torch.compile(lambda x: F.pad(torch.roll(x.flip(-1), 3, -1), (2, 1), mode="reflect"),
                       backend="inductor_lite", dynamic=True)
    for n in (6, 9):
        x = torch.randn(2, n)
        torch.testing.assert_close(fn(x), F.pad(torch.roll(x.flip(-1), 3, -1), (2, 1), mode="reflect"))


def test_negative_roll_dynamic_shapes():
    """``roll`` by a negative shift under dynamic shapes indexes with ``Mod(i - 3, n)``,
    whose dividend may be negative: floor modulo, not C's (it read out of bounds), and so
    does the backward of a positive roll."""
    fn = torch.compile(lambda x: x.roll(-3, 0) * 2, backend="inductor_lite", dynamic=True)
    for n in (7, 5, 11):
        x = torch.randn(n, 2)
        torch.testing.assert_close(fn(x), x.roll(-3, 0) * 2, rtol=0, atol=0)
    x = torch.randn(6, 3, requires_grad=True)
    x_ref = x.detach().clone().requires_grad_()
    torch.compile(lambda x: x.roll(1, 0).exp(), backend="inductor_lite", dynamic=True)(x).sum().backward()
    x_ref.roll(1, 0).exp().sum().backward()
    torch.testing.assert_close(x.grad, x_ref.grad)


def test_symbolic_negative_positions_count_from_the_end():
    """Under dynamic shapes ``x[:, -b:]`` slices from a symbolic ``-s0``: its backward
    (``slice_backward``), ``slice_scatter``, ``select_backward`` and ``select_scatter``
    count it from the end, as a literal negative position (the slice's backward read out
    of bounds; the selects silently left the column alone)."""
    def sliced(x, b):
        return x[:, -b:] * 2

    def scatters(x, s, t, b):
        return (torch.select_scatter(x, s, 1, -b), torch.slice_scatter(x, t, 1, -b),
                torch.ops.aten.select_backward(s, list(x.shape), 1, -b))

    fn = torch.compile(sliced, backend="inductor_lite", dynamic=True)
    fn_scatters = torch.compile(scatters, backend="inductor_lite", dynamic=True)
    for n, b in ((8, 2), (10, 3), (6, 1)):
        x = torch.randn(2, n, requires_grad=True)
        x_ref = x.detach().clone().requires_grad_()
        fn(x, b).sum().backward()
        sliced(x_ref, b).sum().backward()
        torch.testing.assert_close(x.grad, x_ref.grad, rtol=0, atol=0)
        args = (torch.randn(2, n), torch.randn(2), torch.randn(2, b), b)
        for got, want in zip(fn_scatters(*args), scatters(*args)):
            torch.testing.assert_close(got, want, rtol=0, atol=0)
    assert inductor_lite.counters["graphs_fallback"] == 0


def test_symbolic_slice_bounds_outside_the_dim_are_clamped():
    """A symbolic slice bound beyond either end of its dim (``x[:, b:]`` with ``b = -8``
    on 5 columns) is clamped as torch clamps it: the fused kernel read from ``-3``
    (silently wrong sums, or out of bounds). A symbolic step that empties a dim before a
    reduction compiles (the stride hints divided by its example size, 0)."""
    def sums(x, start):
        return (x * 2)[1:, start:].sum(-1), (x * 2)[start:, :].sum(0)

    def pointwise(x, start, end):
        return (x * 2)[:, start:end] + 1

    def stepped(x, start, step):
        return (x[..., start::step] * 2).sum(1)

    fn_sums, fn_pointwise, fn_stepped = (torch.compile(f, backend="inductor_lite", dynamic=True)
                                         for f in (sums, pointwise, stepped))
    x = torch.randn(3, 5)
    for start in (-8, -3, 2, 7):
        for got, want in zip(fn_sums(x, start), sums(x, start)):
            torch.testing.assert_close(got, want)
    for start, end in ((-8, 9), (1, 12), (-2, -1), (3, 100)):
        torch.testing.assert_close(fn_pointwise(x, start, end), pointwise(x, start, end))
    for y, start, step in ((torch.randn(3, 4, 2), 6, 3), (torch.randn(3, 4, 9), 1, 3)):
        got, want = fn_stepped(y, start, step), stepped(y, start, step)
        assert got.shape == want.shape
        torch.testing.assert_close(got, want)
    assert inductor_lite.counters["graphs_fallback"] == 0


def test_broadcast_of_a_symbolic_size_that_is_one():
    """Under dynamic shapes a size can be 1 without being the literal 1 (a diagonal of
    ``Min(1, s0 - 1)`` elements): broadcast against a longer operand, it must read its
    one element, not index past it (it gave [20, 80] for [20, 40])."""
    def f(x, y):
        return x.reshape(-1).unfold(0, 1, 1).diagonal(1, 1, 0) * y

    fn = torch.compile(f, backend="inductor_lite", dynamic=True)
    for n, m in [(5, 1), (6, 2), (7, 3)]:
        x, y = torch.arange(float(n)).view(n, 1) + 1, torch.arange(m) * 10.0 + 10
        torch.testing.assert_close(fn(x, y), f(x, y), rtol=0, atol=0)


def test_cat_of_a_broadcast_sum_dynamic_shapes():
    """A tiled ``cat`` under dynamic shapes picks its input by ``(s1*yindex + xindex) //
    (s0*s1)``: simplified to ``yindex // s0`` (``xindex < s1``), masked-off lanes past the
    row no longer select the other input and load out of bounds."""
    fn = torch.compile(lambda x, y: torch.cat([(x + y)[3:], (x + y)[:3]], 0), backend="inductor_lite",
                       dynamic=True)
    for n in (6, 4, 7):
        x, y = torch.randn(n, 2, 3), torch.randn(n, 2, 1)
        torch.testing.assert_close(fn(x, y), torch.cat([(x + y)[3:], (x + y)[:3]], 0))
