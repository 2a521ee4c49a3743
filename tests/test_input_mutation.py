"""In-place updates of graph inputs in inference graphs (AOTAutograd's
``keep_inference_input_mutations``): the graph stores the new value into the input
(`ir.nodes.MutationBuffer`), or scatters into it directly (``index_copy_``,
``index_put_``), after every reader of the old value.

Values and the inputs' contents are compared with eager on fresh random inputs; CPU
runs go through the interpreter, the same tests marked `gpu` run the compiled PTX.
"""

import pytest
import torch

import inductor_lite
from inductor_lite.dsl import assembler
from conftest import assemble_launches


@pytest.fixture(params=["cpu", pytest.param("cuda", marks=pytest.mark.gpu)])
def device(request):
    with torch.device(request.param):
        yield request.param


def check(fn, *args, kernels=None, dynamic=False, mode=None):
    """``fn`` compiled returns what eager returns and leaves every argument as eager
    leaves it (and launches ``kernels`` kernels, if given)."""
    torch._dynamo.reset()
    inductor_lite.reset_counters()
    mine = [a.clone() if isinstance(a, torch.Tensor) else a for a in args]
    with torch.no_grad():
        got = torch.compile(fn, backend="inductor_lite", dynamic=dynamic, mode=mode)(*mine)
        want = fn(*args)
    torch.testing.assert_close(got, want, rtol=1e-5, atol=1e-5)
    for a, b in zip(mine, args):
        if isinstance(a, torch.Tensor):
            torch.testing.assert_close(a, b, rtol=1e-5, atol=1e-5)  # exact for integers
    assert inductor_lite.counters["graphs_fallback"] == 0
    if kernels is not None:
        assert inductor_lite.counters["kernels_generated"] == kernels


def test_update_runs_after_the_readers_of_the_old_value(device):
    def fn(x, y):
        before = x + 1  # reads the old x
        x.mul_(y)
        return before, x * 3

    check(fn, torch.randn(8, 5), torch.randn(8, 5))


def test_update_joins_the_kernel_reading_the_same_elements(device):
    # read and overwritten element by element: one kernel, the update last in it
    check(lambda x, y: (x.add_(y) * 3, x.sum()), torch.randn(8, 5), torch.randn(8, 5))
    inductor_lite.reset_counters()
    check(lambda x, y: x.add_(y) * 3, torch.randn(8, 5), torch.randn(8, 5), kernels=1)

    def old_flipped(x):
        old = x.flip(0) * 1  # another element's old value: not in the update's kernel
        x.mul_(2)
        return old

    check(old_flipped, torch.randn(40), kernels=2)


def test_update_that_reads_other_elements_is_computed_first(device):
    # x.flip(0) read and written in one pass would see half-updated values
    def flip(x):
        x.copy_(x.flip(0) * 2)

    def transpose(x):
        x.copy_(x.t() + x)

    check(flip, torch.randn(3000))  # several programs
    check(transpose, torch.randn(60, 60))


def test_inputs_updated_from_each_other(device):
    # each value reads the other input's old value: both cannot be computed in place
    # after the other's readers (Adam's parameter and moment with weight decay)
    def swap(a, b):
        a_old = a.clone()
        a.copy_(b * 2)
        b.copy_(a_old + 1)

    check(swap, torch.randn(40), torch.randn(40))
    for cls, kwargs in [(torch.optim.SGD, dict(momentum=0.9, nesterov=True, weight_decay=0.1)),
                        (torch.optim.Adam, dict(amsgrad=True, weight_decay=0.1)),
                        (torch.optim.Adamax, {})]:
        check_optimizer_steps(cls, kwargs, [torch.randn(5, 4), torch.randn(7)])


@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16])
def test_optimizer_steps_built_from_addcmul_and_addcdiv_have_no_extern(device, dtype):
    # Dynamo writes x.addcmul_(a, b, value=v) and x.addcdiv_(...) as TorchInductor's
    # prims.fma: lowered, a step is kernels only
    tol = dict(rtol=1e-5, atol=1e-6) if dtype == torch.float32 else dict(rtol=2e-2, atol=1e-2)
    for cls, kwargs in [(torch.optim.Adam, dict(foreach=False)), (torch.optim.AdamW, dict(foreach=False)),
                        (torch.optim.RMSprop, dict(foreach=False, momentum=0.5)),
                        (torch.optim.Adagrad, dict(foreach=False))]:
        check_optimizer_steps(cls, kwargs, [torch.randn(6, 5, dtype=dtype), torch.randn(9, dtype=dtype)], **tol)
        externs = [k for k in inductor_lite.counters if k.startswith("extern.")]
        assert not externs, (cls.__name__, externs)


def check_optimizer_steps(cls, kwargs, params, rtol=1e-5, atol=1e-6):
    """Three steps of optimizer ``cls(**kwargs)`` over copies of ``params``, its ``step``
    compiled and eager, on the same random gradients, leave the same parameters."""
    eager_params = [p.clone().requires_grad_() for p in params]
    mine = [p.clone().requires_grad_() for p in params]
    eager_opt, my_opt = cls(eager_params, lr=0.01, **kwargs), cls(mine, lr=0.01, **kwargs)
    torch._dynamo.reset()
    inductor_lite.reset_counters()
    step = torch.compile(my_opt.step, backend="inductor_lite")
    for _ in range(3):
        for p, q in zip(eager_params, mine):
            p.grad = torch.randn_like(p)
            q.grad = p.grad.clone()
        eager_opt.step()
        with torch.no_grad():
            step()
    for p, q in zip(eager_params, mine):
        torch.testing.assert_close(q, p, rtol=rtol, atol=atol, msg=cls.__name__)
    assert inductor_lite.counters["graphs_fallback"] == 0


def test_reads_through_an_extern_alias_of_the_input(device):
    # x.view(torch.int32) is an extern call whose result shares x's memory
    def read_then_update(x, y, w):
        out = x.view(torch.int32) + 1
        x.copy_(y @ w)
        return out

    def update_from_alias(x):
        x.copy_(x.view(torch.int32).flip(0).to(torch.float32))

    check(read_then_update, torch.randn(16, 8), torch.randn(16, 4), torch.randn(4, 8))
    check(update_from_alias, torch.randn(64))


def test_a_scatter_chain_into_an_input_that_nothing_reads(device):
    # include_self=False scatters zeros into x, then adds into that: both must run
    def fn(x, i, s):
        x.scatter_reduce_(0, i, s, "sum", include_self=False)

    check(fn, torch.randn(6, 3), torch.randint(0, 6, (9, 3)), torch.randn(9, 3))


def test_training_forward_saves_the_old_value_of_a_buffer_it_updates(device):
    # the partitioner may save buf itself for the backward to recompute sin(buf + 1):
    # the backward must see the value from before buf.mul_(2)
    def fn(w, buf):
        y = (w * torch.sin(buf + 1)).sum()
        buf.mul_(2)
        return y

    torch._dynamo.reset()
    w, buf = torch.randn(64, requires_grad=True), torch.randn(64)
    w_ref, buf_ref = w.detach().clone().requires_grad_(), buf.clone()
    torch.compile(fn, backend="inductor_lite")(w, buf).backward()
    fn(w_ref, buf_ref).backward()
    torch.testing.assert_close(w.grad, w_ref.grad)
    assert torch.equal(buf, buf_ref)


def test_several_inputs_views_dtypes_and_offsets(device):
    def fn(a, b, c):
        a.add_(b.sum())
        b[1:, ::2].neg_()
        c.copy_(a[:, :3])  # fp32 into bf16
        return a.mean()

    a, b = torch.randn(6, 4), torch.randn(5, 7)
    c = torch.randn(8, 6, 3).to(torch.bfloat16)[2]  # an input with a storage offset
    check(fn, a, b, c)
    check(fn, a.t().contiguous().t(), b, c)  # a column-major input


def test_masked_fill_in_place(device):
    x = torch.randn(4, 9)
    check(lambda x, m: x.masked_fill_(m, 0.5).sum(1), x, x > 0, kernels=2)


@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16])
def test_index_copy_into_a_cache_scatters_into_it(device, dtype):
    # a KV cache's update: one scatter kernel into the cache itself, no copy of it
    cache, pos, k = torch.randn(2, 3, 16, 4).to(dtype), torch.tensor([5, 9]), torch.randn(2, 3, 2, 4).to(dtype)
    check(lambda c, p, k: c.index_copy_(2, p, k), cache, pos, k, kernels=1)
    check(lambda c, p, k, q: (q @ c.index_copy_(2, p, k).transpose(-1, -2)).softmax(-1), cache, pos, k,
          torch.randn(2, 3, 1, 4).to(dtype))


def test_index_put_into_an_input(device):
    x = torch.randn(10, 3)
    check(lambda x, i, v: x.index_put_((i,), v, accumulate=True), x, torch.randint(0, 10, (25,)),
          torch.randn(25, 3), kernels=1)

    def read_before(x, i, v):
        old = x.sum()
        x[i] = v
        return old

    check(read_before, x, torch.randperm(10)[:4], torch.randn(4, 3))


def test_dynamic_shapes(device):
    for n in (5, 9):
        check(lambda x, y: x.add_(y).sum(), torch.randn(n, 3), torch.randn(n, 3), dynamic=True)


def test_reduce_overhead_keeps_updates_correct(device):
    check(lambda x, y: x.add_(y) * 2, torch.randn(16), torch.randn(16), mode="reduce-overhead")


def test_update_kernels_compile_to_ptx(kernel_launches):
    """An update fused with its reader, one computed through a buffer, and a scatter
    into a cache go through the NVPTX compiler and assemble for sm_80 and sm_90."""
    if not assembler.can_assemble():
        pytest.skip("needs nvJitLink or ptxas")
    check(lambda x, y: x.add_(y) * 3, torch.randn(8, 5), torch.randn(8, 5))
    check(lambda x: x.copy_(x.flip(0) * 2).sum(), torch.randn(33))
    check(lambda c, p, k: c.index_copy_(2, p, k), torch.randn(2, 3, 16, 4), torch.tensor([5, 9]),
          torch.randn(2, 3, 2, 4))
    assert len(kernel_launches) >= 4
    assemble_launches(kernel_launches)

