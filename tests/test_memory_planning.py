"""Memory planning in the wrapper: buffer reuse, in-place kernels, aliasing, symbolic
sizes, the planned peak, and runs with every (re)used buffer poisoned first."""

import dataclasses
import glob
import os

import pytest
import sympy
import torch
import torch.nn as nn
import torch.nn.functional as F
from torch.fx.experimental.proxy_tensor import make_fx

import inductor_lite
import inductor_lite.backend
from inductor_lite.codegen import heuristics, wrapper
from inductor_lite.codegen.memory_planning import (
    AllocateLine, BufferSpec, ExternAllocationLine, FreeIfNotReusedLine, FreeLine, ReuseLine,
    plan_memory,
)
from inductor_lite.codegen.kernel import generate_kernel
from inductor_lite.codegen.wrapper import WrapperCodegen, generate_wrapper, load_module
from inductor_lite.config import config
from inductor_lite.fx_lowering.decompositions import decomposition_table
from inductor_lite.fx_lowering import graph as graph_lowering
from inductor_lite.fx_lowering import reductions
from inductor_lite.fx_lowering.graph import GraphLowering
from inductor_lite.ir.indexing import known_equal
from inductor_lite.scheduler.fusion import KernelGroup
from inductor_lite.scheduler.scheduler import Scheduler


@pytest.fixture(autouse=True)
def fresh():
    torch._dynamo.reset()
    inductor_lite.reset_counters()
    with config.patch(fallback_on_error=False):
        yield
    torch._dynamo.reset()


def build(fn, *inputs, mode="fake", donated=()):
    """``fn``'s generated wrapper and schedule; ``donated``: positions of inputs flagged
    as a backward's donated inputs."""
    gm = make_fx(fn, tracing_mode=mode, decomposition_table=decomposition_table())(*inputs)
    placeholders = [n for n in gm.graph.nodes if n.op == "placeholder"]
    for i in donated:
        placeholders[i].meta[graph_lowering.DONATED] = True
    graph = GraphLowering(gm)
    graph.run()
    scheduler = Scheduler(graph)
    return generate_wrapper(graph, scheduler, "test"), scheduler


def _poison_source(buf: BufferSpec) -> str:
    value = 'float("nan")' if buf.dtype.is_floating_point else "True" if buf.dtype == torch.bool else "-77"
    return f"    {buf.name}.fill_({value})"


@pytest.fixture
def poison_reused(monkeypatch):
    """Generated wrappers fill every buffer with NaN (or a sentinel) right after it is
    allocated or takes a freed buffer's storage, before its kernel writes it; a read of a
    donor after its reuse, or an element the kernel leaves unwritten, then shows. In-place
    outputs are not poisoned: their kernel reads the donor's values."""
    render = WrapperCodegen._render

    def poisoning_render(self, lines):
        out = []
        for line in lines:
            out.append(line)
            if isinstance(line, AllocateLine):
                out.append(_poison_source(line.buffer))
            elif isinstance(line, ReuseLine) and not line.inplace:
                out.append(_poison_source(line.new))
        return render(self, out)

    monkeypatch.setattr(WrapperCodegen, "_render", poisoning_render)


@pytest.fixture
def planned_only(monkeypatch):
    """No kernel writes over an extern output in place, so that the rules for the
    wrapper's own buffers show alone (most tests make those with ``relu(x @ w)``);
    extern outputs as donors: `test_a_kernel_writes_over_the_extern_output_it_reads`."""
    reusable = WrapperCodegen._reusable_buffers
    monkeypatch.setattr(WrapperCodegen, "_reusable_buffers", lambda self: (reusable(self)[0], set()))


def run(code, *inputs):
    call, _ = load_module(code)
    return call([x.clone() for x in inputs])


def assert_matches(code, fn, *inputs):
    expected = fn(*inputs)
    torch.testing.assert_close(run(code, *inputs), expected if isinstance(expected, tuple) else (expected,))


def _step_reads(step) -> set:
    return step.reads() if isinstance(step, KernelGroup) else step.read_names()


def check_plan(plan, scheduler):
    """The plan's safety property: for each reuse, every read of the donor happens
    before the new buffer's first write (in place: in the kernel that writes it, and
    never after); each storage has one owner at a time; reuse never raises the peak."""
    steps = scheduler.steps
    owners = {}
    for line in plan.lines:
        if not isinstance(line, ReuseLine):
            continue
        writer = steps[line.step]
        assert isinstance(writer, KernelGroup) and line.new.name in writer.names  # its first write
        reads = [i for i, step in enumerate(steps) if line.old.name in _step_reads(step)]
        assert reads, line
        if line.inplace:
            assert max(reads) == line.step and line.donor_step == line.step
            assert line.old.same_storage(line.new)
        else:
            assert max(reads) <= line.donor_step < line.step
        assert line.old.name not in scheduler.output_names
        assert line.old.name not in owners.values(), "a storage handed on twice"
        owners[line.new.name] = line.old.name
        if line.new.name in scheduler.output_names:
            assert known_equal(line.old.nbytes(), line.new.nbytes())
    assert plan.peak_bytes <= plan.unplanned_peak_bytes


def assert_written_in_place(fn, *inputs, mode="fake"):
    """``fn``'s one kernel writes its output over the extern result it reads: one
    in-place reuse, no allocation, a safe plan, and eager's values on fresh inputs laid
    out as ``inputs`` (``torch.randn_like`` keeps their strides)."""
    code, scheduler = build(fn, *inputs, mode=mode)
    check_plan(code.memory_plan, scheduler)
    (reuse,) = code.memory_plan.reuses()
    assert reuse.inplace and not code.memory_plan.allocations()
    assert_matches(code, fn, *[torch.randn_like(x) for x in inputs])


def test_a_chain_of_layers_reuses_one_buffer(poison_reused):
    def fn(x, w):
        for _ in range(4):
            x = torch.relu(x @ w).t().contiguous()  # read across the mm's output: not in place over it
        return x

    x, w = torch.randn(16, 16), torch.randn(16, 16)
    code, scheduler = build(fn, x, w)
    plan = code.memory_plan
    check_plan(plan, scheduler)
    # each relu writes into the storage of the one before (dead after the mm reading it)
    assert len(plan.allocations()) == 1 and len(plan.reuses()) == 3
    assert not any(line.inplace for line in plan.reuses())
    assert_matches(code, fn, torch.randn(16, 16), torch.randn(16, 16))


def test_a_kernel_writes_over_the_extern_output_it_reads(poison_reused):
    def fn(x, w):
        for _ in range(4):
            x = torch.relu(x @ w)
        return x

    x, w = torch.randn(8, 16), torch.randn(16, 16)
    code, scheduler = build(fn, x, w)
    plan = code.memory_plan
    check_plan(plan, scheduler)
    # every relu takes the mm output it reads (a new tensor, dead after it): no allocation
    assert not plan.allocations() and len(plan.reuses()) == 4
    assert all(line.inplace and line.old.name.startswith("buf") for line in plan.reuses())
    assert_matches(code, fn, torch.randn(8, 16), torch.randn(16, 16))


def test_conv_then_batch_norm_relu_runs_in_the_convolution_output(poison_reused):
    conv, bn = nn.Conv2d(4, 8, 3, padding=1, bias=False), nn.BatchNorm2d(8).eval()
    bn.running_mean.normal_(), bn.running_var.uniform_(0.5, 2)

    def fn(x):
        return torch.relu(bn(conv(x)))

    with torch.no_grad():
        assert_written_in_place(fn, torch.randn(2, 4, 10, 10), mode="real")


def test_a_reshaped_extern_output_is_taken_in_place(poison_reused):
    """A kernel reading a GEMM's output through a view of another shape (same bytes,
    same element order: a linear layer's GELU) writes over it; a transposed read does not."""
    def fn(x, w):
        return torch.relu((x @ w).view(2, 4, 16))

    def transposed(x, w):
        return torch.relu((x @ w).view(2, 4, 16).transpose(1, 2)).contiguous()

    x, w = torch.randn(8, 16), torch.randn(16, 16)
    assert_written_in_place(fn, x, w)
    code, scheduler = build(transposed, x, w)
    check_plan(code.memory_plan, scheduler)
    assert not code.memory_plan.reuses() and len(code.memory_plan.allocations()) == 1
    assert_matches(code, transposed, torch.randn(8, 16), torch.randn(16, 16))


def test_inplace_over_a_dead_input_of_the_same_layout(poison_reused, planned_only):
    def fn(x, w, v):
        d = torch.relu(x @ w)
        return d * (d @ v)

    x, w, v = torch.randn(8, 16), torch.randn(16, 16), torch.randn(16, 16)
    code, scheduler = build(fn, x, w, v)
    plan = code.memory_plan
    check_plan(plan, scheduler)
    (reuse,) = plan.reuses()
    assert reuse.inplace and reuse.new.name in scheduler.output_names
    assert len(plan.allocations()) == 1
    # without the in-place write, d, d @ v and the output are live at once
    assert plan.peak_bytes == 2 * 8 * 16 * 4 and plan.unplanned_peak_bytes == 3 * 8 * 16 * 4
    assert_matches(code, fn, torch.randn(8, 16), torch.randn(16, 16), torch.randn(16, 16))


def test_a_donated_input_is_written_over_in_place_and_reused(poison_reused):
    """A backward's donated inputs (saved tensors nothing reads after it) are storage
    the wrapper owns once dead: the softmax is written over the logits in place, and
    the other donated input's storage is handed on too. The inputs are clones, so values
    are compared on what each kernel really read."""
    def fn(logits, scale, h, w):
        grad = (logits.softmax(-1) * scale).view(4, 8, 24)
        return grad, torch.relu(h * 2) @ w

    inputs = (torch.randn(32, 24), torch.randn(32, 1), torch.randn(16, 16), torch.randn(16, 16))
    code, scheduler = build(fn, *inputs, donated=(0, 2))
    plan = code.memory_plan
    check_plan(plan, scheduler)
    by_old = {line.old.name: line for line in plan.reuses()}
    assert by_old["logits_1"].inplace and "h_1" in by_old
    assert_matches(code, fn, *inputs)
    # not donated: never written
    code, scheduler = build(fn, *inputs)
    assert not {line.old.name for line in code.memory_plan.reuses()} & {"logits_1", "h_1"}


@pytest.mark.parametrize("form", ["persistent", "looped"])
def test_training_reuses_the_saved_logits_for_their_gradient(tmp_path, monkeypatch, form):
    """Cross-entropy training: the backward writes the logits' gradient over the saved
    logits (donated by AOTAutograd), and the gradients match eager's. A looped backward
    kernel (a vocabulary too long for registers) reads the logits in one of its loops
    only, so it does too."""
    if form == "looped":
        monkeypatch.setattr(heuristics, "PERSISTENT_MAX_RBLOCK", 16)
    torch.manual_seed(0)
    model = nn.Sequential(nn.Linear(16, 32), nn.GELU(), nn.Linear(32, 50))
    x, target = torch.randn(12, 16), torch.randint(0, 50, (12,))

    def step(loss):
        loss(x).backward()
        return [p.grad.clone() for p in model.parameters()]

    def loss(x):
        return F.cross_entropy(model(x), target)

    expected = step(loss)
    model.zero_grad()
    with config.patch(debug_dir=str(tmp_path)):
        got = step(torch.compile(loss, backend="inductor_lite"))
    for g, e in zip(got, expected):
        torch.testing.assert_close(g, e, rtol=1e-4, atol=1e-5)
    (folder,) = glob.glob(str(tmp_path / "*_bw"))
    plan = open(os.path.join(folder, "memory_plan.txt")).read()
    assert f"in place over addmm_1, {12 * 50 * 4} bytes" in plan, plan
    # the kernel's form, by its name's prefix
    assert f"\ndef {'red' if form == 'looped' else 'per'}_fused" in open(os.path.join(folder, "output_code.py")).read()


@pytest.mark.parametrize("device", ["cpu", pytest.param("cuda", marks=pytest.mark.gpu)])
def test_a_retained_graph_backward_twice_over_donated_saved_tensors(device):
    """``backward(retain_graph=True)`` then ``backward()``: the backward writes the
    logits' gradient over the donated saved logits, so on a retained graph it works
    on copies and the second backward reads the saved values again. Twice: compiled,
    then loaded from AOTAutograd's cache (whose entry compiled the backward with the
    forward)."""
    torch.manual_seed(0)
    with torch.device(device):
        model = nn.Sequential(nn.Linear(16, 32), nn.GELU(), nn.Linear(32, 50))
        x, target = torch.randn(12, 16), torch.randint(0, 50, (12,))

    def loss(x):
        return F.cross_entropy(model(x), target)

    def twice(fn):
        model.zero_grad()
        out = fn(x)
        out.backward(retain_graph=True)
        first = [p.grad.clone() for p in model.parameters()]
        out.backward()
        return first, [p.grad.clone() for p in model.parameters()]

    expected = twice(loss)
    for load in (False, True):
        torch._dynamo.reset()
        inductor_lite.reset_counters()
        got = twice(torch.compile(loss, backend="inductor_lite"))
        assert inductor_lite.counters["aot_cache_hits"] == (2 if load else 0)
        for g, e in zip(got[0] + got[1], expected[0] + expected[1]):
            torch.testing.assert_close(g, e, rtol=1e-4, atol=1e-5)


@pytest.mark.parametrize("view", [lambda y: y[:, ::2], lambda y: y[:, 1:4], lambda y: y.t()[::2],
                                  lambda y: y[:, :1].expand(-1, 6)])
def test_a_retained_graph_over_a_donated_view(view):
    """A donated saved tensor that is a strided view (a step, an offset, a transpose, an
    expansion) is copied with its layout when the graph is retained: the backward
    reads it with the strides it was compiled for."""
    a, b = torch.randn(6, 5, requires_grad=True), torch.randn(5, 8, requires_grad=True)

    def loss(a, b):
        y = view(a @ b)
        return (y * y.sin()).sum()

    grads = []
    for fn in (loss, torch.compile(loss, backend="inductor_lite")):
        out = fn(a, b)
        out.backward(retain_graph=True)
        out.backward()
        grads.append((a.grad, b.grad))
        a.grad = b.grad = None
    for g, e in zip(grads[1], grads[0]):
        torch.testing.assert_close(g, e, rtol=1e-4, atol=1e-5)


@pytest.mark.parametrize("case", ["graph input", "read later", "transposed read", "graph output", "other dtype"])
def test_no_inplace_when_unsafe(case, poison_reused, planned_only):
    def fn(x, w, v):
        d = torch.relu(x @ w)
        e = d @ v
        if case == "graph input":
            return x * e
        if case == "read later":
            return (d * e) @ v, d.sum(0)
        if case == "transposed read":
            return e * d.t()  # the output follows e's layout: d is read across it
        if case == "graph output":
            return d * e, d
        return (d * e).double()  # the kernel's output is float64, d float32

    x, w, v = (torch.randn(16, 16) for _ in range(3))
    code, scheduler = build(fn, x, w, v)
    check_plan(code.memory_plan, scheduler)
    assert not any(line.inplace for line in code.memory_plan.reuses())
    assert_matches(code, fn, *(torch.randn(16, 16) for _ in range(3)))


def test_a_looped_reduction_does_not_write_over_an_input_a_later_loop_reads(monkeypatch, planned_only):
    monkeypatch.setattr(graph_lowering, "REALIZE_REUSED_OPS", -1)  # d is read by two kernels, not recomputed
    monkeypatch.setattr(reductions, "SPLIT_MIN_RNUMEL", 1 << 62)  # two long rows: one looped kernel, not split

    def fn(x, w):
        d = torch.relu(x @ w) * 3
        t = d + torch.cumsum(d, -1)  # a row too long for a persistent reduction
        return t, torch.softmax(t, dim=-1)

    x, w = torch.randn(2, 16), torch.randn(16, 33000)
    code, scheduler = build(fn, x, w)
    assert code.kernels[-1].name.startswith("red_")
    check_plan(code.memory_plan, scheduler)
    assert not any(line.inplace for line in code.memory_plan.reuses())
    # the check matters: a later loop recomputes t from d after the first stored t over d
    def one_pass(*args):
        kernel = generate_kernel(*args)
        return dataclasses.replace(kernel, passes={name: frozenset({0}) for name in kernel.passes})

    monkeypatch.setattr(wrapper, "generate_kernel", one_pass)
    code, _ = build(fn, x, w)
    assert any(line.inplace for line in code.memory_plan.reuses())
    assert run(code, x, w)[1].isnan().any()


def test_persistent_softmax_writes_over_its_dead_input(poison_reused, planned_only):
    def fn(x, w):
        d = torch.relu(x @ w) * 3
        return torch.softmax(d + torch.sort(d, -1).values, dim=-1)  # reads d and dies there

    x, w = torch.randn(8, 16), torch.randn(16, 32)
    code, scheduler = build(fn, x, w)
    check_plan(code.memory_plan, scheduler)
    assert [line.inplace for line in code.memory_plan.reuses()] == [True]
    assert_matches(code, fn, torch.randn(8, 16), torch.randn(16, 32))


def test_a_buffer_an_extern_view_aliases_is_not_reused(poison_reused, monkeypatch, planned_only):
    def fn(x, w, v):
        d = torch.relu(x @ w)
        u = d.unfold(0, 2, 2)  # an extern view of d: d's storage lives on in u
        return torch.relu(x @ v), u * 2

    inputs = [torch.randn(8, 8) for _ in range(3)]
    code, scheduler = build(fn, *inputs)
    check_plan(code.memory_plan, scheduler)
    assert not code.memory_plan.reuses()
    assert_matches(code, fn, *inputs)
    # the check matters: planned as if views did not alias, relu(x @ v) overwrites u
    monkeypatch.setattr(graph_lowering, "may_alias_inputs", lambda *args: False)
    code, _ = build(fn, *inputs)
    assert code.memory_plan.reuses()
    x, w, v = inputs
    torch.testing.assert_close(run(code, *inputs)[1], torch.relu(x @ v).unfold(0, 2, 2) * 2)


def test_an_extern_that_returns_its_input_keeps_that_storage(poison_reused, planned_only):
    """``dequantize`` returns a float input itself, though its schema has no alias
    annotation: the kernel after it may not take that input's storage while the result
    is still to be read (it did, and the GEMM multiplied ``z`` by itself)."""
    def fn(a, b):
        y = torch.dequantize(a * 2)
        z = (b + 1) * 3
        return y @ z, z

    inputs = [torch.randn(16, 16) for _ in range(2)]
    code, scheduler = build(fn, *inputs)
    check_plan(code.memory_plan, scheduler)
    assert not code.memory_plan.reuses()
    assert_matches(code, fn, *inputs)


def test_symbolic_sizes_reuse_only_provably_equal_storage(poison_reused, planned_only):
    def fn(x, w, v):
        a = torch.relu(x @ w)  # (s0, s1)
        b = torch.relu(a @ v)  # (s0, s2): a's storage is not provably as large
        return torch.relu(b @ v.t())  # (s0, s1): takes a's storage

    x, w, v = torch.randn(5, 3), torch.randn(3, 3), torch.randn(3, 7)
    code, scheduler = build(fn, x, w, v, mode="symbolic")
    plan = code.memory_plan
    check_plan(plan, scheduler)
    (reuse,) = plan.reuses()
    assert reuse.new.name in scheduler.output_names and known_equal(reuse.old.nbytes(), reuse.new.nbytes())
    assert reuse.old.nbytes().free_symbols and len(plan.allocations()) == 2
    for sizes in [(6, 4, 9), (2, 11, 3)]:  # other sizes through the same code
        s0, s1, s2 = sizes
        assert_matches(code, fn, torch.randn(s0, s1), torch.randn(s1, s1), torch.randn(s1, s2))


def _line_buf(name, nbytes):
    return BufferSpec(name, torch.device("cpu"), torch.uint8, (sympy.Integer(nbytes),), (sympy.Integer(1),))


def test_plan_takes_nearly_equal_sizes_and_keeps_the_peak():
    a, b, c, big = _line_buf("a", 1000), _line_buf("b", 980), _line_buf("c", 900), _line_buf("big", 5000)
    lines = [AllocateLine(0, a), FreeIfNotReusedLine(0, a), AllocateLine(1, b), FreeIfNotReusedLine(1, b),
             AllocateLine(2, c)]
    plan = plan_memory(lines, 3)
    # b fits a's storage (2% larger); c would waste 10% of b's (a's)
    assert [(r.old.name, r.new.name) for r in plan.reuses()] == [("a", "b")]
    assert [line.buffer.name for line in plan.allocations()] == ["a", "c"]
    assert plan.peak_bytes == 1000 and plan.unplanned_peak_bytes == 1000
    # graph outputs take exact sizes only
    lines[2] = AllocateLine(1, b, is_output=True)
    assert not plan_memory(lines, 3).reuses()
    # holding a's storage over a gap whose live bytes already make the peak would raise it
    d = _line_buf("d", 1000)
    lines = [AllocateLine(0, a), FreeIfNotReusedLine(0, a), ExternAllocationLine(1, big), FreeLine(1, "big"),
             AllocateLine(2, d)]
    plan = plan_memory(lines, 3)
    assert not plan.reuses() and plan.peak_bytes == 5000
    lines[1:1] = [ExternAllocationLine(0, _line_buf("e", 5000)), FreeLine(0, "e")]  # step 0 is higher: a fits
    plan = plan_memory(lines, 3)
    assert [(r.old.name, r.new.name) for r in plan.reuses()] == [("a", "d")] and plan.peak_bytes == 6000


def test_extern_aliasing_from_the_schema_and_the_fake_run():
    from torch._subclasses.fake_tensor import FakeTensorMode

    from inductor_lite.fx_lowering.extern_layouts import may_alias_inputs

    aten = torch.ops.aten
    with FakeTensorMode():
        x, new = torch.randn(4, 4), torch.randn(4, 4)
        dequantized = aten.dequantize.self(x)
    assert not may_alias_inputs(aten.mm.default, [x, x], [new])
    assert not may_alias_inputs(aten.sort.default, [x], [new, new])
    assert may_alias_inputs(aten.unfold.default, [x], [new]) and may_alias_inputs(aten.view.dtype, [x], [new])
    assert may_alias_inputs(aten.dequantize.self, [x], [dequantized])  # the fake run returned x
    assert may_alias_inputs(torch.ops._c10d_functional.wait_tensor.default, [x], [new])
    assert may_alias_inputs(lambda v: v, [x], [new])  # no schema: assume it may


def _record_plans(monkeypatch) -> list:
    plans = []

    def recording(graph, scheduler, title):
        code = generate_wrapper(graph, scheduler, title)
        plans.append((code.memory_plan, scheduler))
        return code

    monkeypatch.setattr(inductor_lite.backend, "generate_wrapper", recording)
    return plans


def test_training_matches_eager_with_every_reused_buffer_poisoned(poison_reused, monkeypatch, tmp_path):
    plans = _record_plans(monkeypatch)
    torch.manual_seed(0)
    model = nn.Sequential(nn.Linear(16, 32), nn.LayerNorm(32), nn.ReLU(), nn.Linear(32, 32), nn.Softmax(dim=-1))
    reference = [p.detach().clone() for p in model.parameters()]
    x = torch.randn(12, 16, requires_grad=True)
    with config.patch(debug_dir=str(tmp_path)):
        out = torch.compile(model, backend="inductor_lite")(x)
        (out * torch.arange(32.0)).sum().backward()
    grads = [x.grad] + [p.grad for p in model.parameters()]
    eager = nn.Sequential(*[m for m in model])
    with torch.no_grad():
        for p, r in zip(eager.parameters(), reference):
            p.copy_(r)
            p.grad = None
    x2 = x.detach().clone().requires_grad_(True)
    out2 = eager(x2)
    (out2 * torch.arange(32.0)).sum().backward()
    torch.testing.assert_close(out, out2)
    for got, expected in zip(grads, [x2.grad] + [p.grad for p in eager.parameters()]):
        torch.testing.assert_close(got, expected)
    assert inductor_lite.counters["graphs_fallback"] == 0
    assert len(plans) == 2
    for plan, scheduler in plans:
        check_plan(plan, scheduler)
    assert any(plan.reuses() for plan, _ in plans)
    dumps = [open(p).read() for p in sorted(glob.glob(str(tmp_path / "graph_*" / "memory_plan.txt")))]
    assert len(dumps) == 2 and all("planned" in d for d in dumps)
    assert any(" reuses " in d or " in place over " in d for d in dumps)


def test_backward_with_dynamic_shapes_plans_at_size_hints(poison_reused, monkeypatch):
    plans = _record_plans(monkeypatch)
    model = nn.Sequential(nn.Linear(8, 8), nn.Tanh(), nn.Linear(8, 8), nn.Tanh())
    compiled = torch.compile(model, backend="inductor_lite", dynamic=True)
    for rows in (5, 7):
        x = torch.randn(rows, 8, requires_grad=True)
        compiled(x).sum().backward()
        x2 = x.detach().clone().requires_grad_(True)
        model(x2).sum().backward()
        torch.testing.assert_close(x.grad, x2.grad)
    assert plans and inductor_lite.counters["graphs_fallback"] == 0
    for plan, scheduler in plans:
        check_plan(plan, scheduler)
    assert any(plan.peak_bytes > 0 for plan, _ in plans)  # symbolic sizes counted at their hints


@pytest.mark.gpu
def test_inplace_kernels_survive_autotuning_on_cuda(monkeypatch):
    plans = _record_plans(monkeypatch)

    def fn(x, w, v):
        d = torch.relu(x @ w)
        return d * (d @ v)

    x, w, v = (torch.randn(1024, 1024, device="cuda") for _ in range(3))
    with config.patch(autotune=True):
        out = torch.compile(fn, backend="inductor_lite")(x, w, v)
    assert any(line.inplace for plan, _ in plans for line in plan.reuses())
    torch.testing.assert_close(out, fn(x, w, v), rtol=1e-4, atol=1e-4)


@pytest.mark.parametrize("fn", [lambda a: torch.linalg.cholesky(a, upper=True),  # effect tokens in the graph
                                lambda a: (a.softmax(-1) * 3).sin()])
def test_the_callers_gradient_is_never_written_over(fn):
    """Only saved tensors are donated: the gradient passed to ``backward`` (the
    caller's tensor) keeps its values, also where effect tokens shift AOTAutograd's
    donated indices (cholesky's error check)."""
    a = torch.randn(6, 6)
    a = (a @ a.t() + 6 * torch.eye(6)).requires_grad_()
    grad = torch.randn(6, 6)
    kept = grad.clone()
    torch.compile(fn, backend="inductor_lite")(a).backward(grad)
    assert torch.equal(grad, kept)
    expected = a.grad.clone()
    a.grad = None
    fn(a).backward(grad)
    torch.testing.assert_close(expected, a.grad)


def test_an_extern_that_returns_its_input_is_never_written_over():
    # aten.dequantize.self returns a float input itself, though its schema marks no alias
    def fn(x, w):
        return torch.dequantize(x).sin() @ w + x

    x, w = torch.randn(8, 8), torch.randn(8, 8)
    x0 = x.clone()
    compiled = torch.compile(fn, backend="inductor_lite")
    first = compiled(x, w)
    assert torch.equal(x, x0)  # the caller's input is untouched
    torch.testing.assert_close(first, fn(x0, w))
    torch.testing.assert_close(compiled(x, w), fn(x0, w))


def test_only_ops_that_always_allocate_are_extern_donors():
    from inductor_lite.codegen.memory_planning import returns_new_tensor

    aten = torch.ops.aten
    assert all(returns_new_tensor(op) for op in (aten.convolution.default, aten.mm.default, aten.addmm.default,
                                                 aten.bmm.default, aten._to_copy.default, aten.clone.default))
    # no alias in the schema, yet the input comes back; out= variants; views
    assert not any(returns_new_tensor(op) for op in (aten.dequantize.self, aten.lift.default, aten.mm.out,
                                                     aten.unfold.default, lambda x: x))


def test_a_transposed_read_written_at_the_same_offset_is_in_place(poison_reused):
    """``relu(mm.t())`` is laid out as its input (transposed strides), so each element is
    written where it was read: the kernel takes the GEMM's output in place. A
    channels-last convolution's output read through ``flatten(2)`` does too."""
    def transposed(x, w):
        return torch.relu((x @ w).t())

    conv = nn.Conv2d(4, 8, 3, padding=1, bias=False)

    def conv_flatten(x):
        return torch.relu(conv(x).flatten(2))

    assert_written_in_place(transposed, torch.randn(8, 16), torch.randn(16, 16))
    with torch.no_grad():
        assert_written_in_place(conv_flatten, torch.randn(2, 4, 6, 6).contiguous(memory_format=torch.channels_last),
                                mode="real")
