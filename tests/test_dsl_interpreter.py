"""The DSL through the interpreter: the kernel corpus against torch, launch-time
validation and dispatch, and the interpreter's memory and integer semantics."""

import functools
import sys

import pytest
import torch

import dsl_corpus
import inductor_lite.dsl as dl
from dsl_corpus import copy_kernel
from inductor_lite.config import config
from inductor_lite.dsl import interpreter

CASES = dsl_corpus.cases()


@pytest.mark.parametrize("case", CASES, ids=[c.name for c in CASES])
def test_corpus_matches_torch(case):
    dsl_corpus.check(case)


@functools.lru_cache(maxsize=None)
def _gpu_cases() -> dict:
    return {c.name: c for c in dsl_corpus.cases("cuda")}


@pytest.mark.gpu
@pytest.mark.parametrize("case", CASES, ids=[c.name for c in CASES])
def test_corpus_matches_torch_on_gpu(case):
    dsl_corpus.check(_gpu_cases()[case.name])


@pytest.mark.gpu
def test_interpret_mode_runs_cuda_tensors():
    case = next(c for c in dsl_corpus.cases("cuda") if c.name == "softmax_torch.float32_37x100")
    with config.patch(interpret=True):
        dsl_corpus.check(case)


@dl.kernel
def copy_all_but_last(x_ptr, out_ptr, n, BLOCK: dl.constexpr):
    offs = dl.program_id(0) * BLOCK + dl.arange(0, BLOCK)
    dl.store(out_ptr + offs, dl.load(x_ptr + offs, mask=offs < n), mask=offs < n - 1)


def test_poisoned_outputs_expose_unwritten_elements():
    x = torch.randn(50)
    case = dsl_corpus.Case("skip_last", copy_all_but_last, (x, dsl_corpus.poison_like(x), 50), {"BLOCK": 64},
                           (1,), {1: x})
    with pytest.raises(AssertionError, match="skip_last"):
        dsl_corpus.check(case)


def test_empty_grid_launches_nothing():
    out = torch.full((4,), 7.0)
    dsl_corpus.add_kernel[(0,)](torch.ones(4), torch.ones(4), out, 4, BLOCK=4)
    dsl_corpus.add_kernel[lambda meta: (dl.cdiv(0, meta["BLOCK"]),)](torch.ones(4), torch.ones(4), out, 0, BLOCK=4)
    assert torch.equal(out, torch.full((4,), 7.0))


@dl.kernel
def grid3d_kernel(out_ptr, BLOCK: dl.constexpr):
    p0, p1, p2 = dl.program_id(0), dl.program_id(1), dl.program_id(2)
    n0, n1, n2 = dl.num_programs(0), dl.num_programs(1), dl.num_programs(2)
    pid = (p2 * n1 + p1) * n0 + p0
    offs = pid * BLOCK + dl.arange(0, BLOCK)
    code = p0 * 10000 + p1 * 100 + p2 + 1000000 * (n0 + n1 + n2)
    dl.store(out_ptr + offs, code + dl.arange(0, BLOCK) * 0)


@pytest.mark.parametrize("chunk", [1, 8, 1 << 22])
def test_program_ids_across_chunks(monkeypatch, chunk):
    monkeypatch.setattr(interpreter, "CHUNK_ELEMENTS", chunk)
    g = (5, 3, 2)
    out = torch.full((30 * 4,), -1, dtype=torch.int32)
    grid3d_kernel[g](out, BLOCK=4)
    p0, p1, p2 = torch.meshgrid(torch.arange(5), torch.arange(3), torch.arange(2), indexing="ij")
    want = (p0 * 10000 + p1 * 100 + p2 + 1000000 * 10).permute(2, 1, 0).reshape(-1).repeat_interleave(4)
    assert torch.equal(out, want.to(torch.int32))


@dl.kernel
def unmasked_copy_kernel(x_ptr, out_ptr, BLOCK: dl.constexpr):
    offs = dl.program_id(0) * BLOCK + dl.arange(0, BLOCK)
    dl.store(out_ptr + offs, dl.load(x_ptr + offs))


def test_views_use_storage_offset_and_leave_the_rest_of_the_storage_alone():
    src = torch.randn(100)
    dst = torch.full((100,), -99.0)
    copy_kernel[(2,)](src[10:27], dst[50:67], 17, BLOCK=16)
    want = torch.full((100,), -99.0)
    want[50:67] = src[10:27]
    assert torch.equal(dst, want)


def test_unmasked_out_of_bounds_access_raises_index_error_naming_the_line():
    with pytest.raises(IndexError, match=r"unmasked_copy_kernel: load out of bounds.*x_ptr.*dl\.load"):
        unmasked_copy_kernel[(2,)](torch.randn(20), torch.empty(32), BLOCK=16)
    with pytest.raises(IndexError, match=r"store out of bounds.*out_ptr"):
        unmasked_copy_kernel[(2,)](torch.randn(32), torch.empty(20), BLOCK=16)


def test_masked_lanes_of_an_empty_tensor_are_not_touched():
    out = torch.empty(0)
    copy_kernel[(1,)](torch.empty(0), out, 0, BLOCK=16)


@dl.kernel
def div_kernel(a_ptr, b_ptr, q_ptr, r_ptr, n, BLOCK: dl.constexpr):
    offs = dl.arange(0, BLOCK)
    mask = offs < n
    a = dl.load(a_ptr + offs, mask=mask)
    b = dl.load(b_ptr + offs, mask=mask)  # masked-off lanes divide by 0
    dl.store(q_ptr + offs, a // b, mask=mask)
    dl.store(r_ptr + offs, a % b, mask=mask)


def test_integer_division_never_traps():
    a = torch.tensor([-2**31, 7, -7, 0], dtype=torch.int32)
    b = torch.tensor([-1, -2, 2, 5], dtype=torch.int32)
    q, r = torch.empty(4, dtype=torch.int32), torch.empty(4, dtype=torch.int32)
    div_kernel[(1,)](a, b, q, r, 3, BLOCK=4)  # lane 3 masked off; lane 0 is INT_MIN // -1
    assert q[1:3].tolist() == [-3, -3] and r[1:3].tolist() == [1, -1]
    assert q[0] == -2**31 and r[0] == 0


def test_loop_bounds_that_depend_on_program_id_run_one_program_at_a_time():
    x = torch.randn(5000)
    out = torch.full((5000,), float("nan"))
    dsl_corpus.grid_stride_kernel[(7,)](x, out, 5000, BLOCK=128)
    assert torch.equal(out, x * 2)


def test_interpret_flag_and_cpu_tensors_use_the_interpreter(monkeypatch):
    calls = []
    monkeypatch.setattr(interpreter, "run", lambda *a: calls.append(a))
    x = torch.randn(8)
    with config.patch(interpret=True):
        copy_kernel[(1,)](x, x, 8, BLOCK=8)
    copy_kernel[(1,)](x, x, 8, BLOCK=8)
    assert [c[1] for c in calls] == [(1,), (1,)]


def test_cuda_tensors_dispatch_to_the_runtime_launcher(monkeypatch):
    launched = []
    fake = type(sys)("inductor_lite.runtime.launcher")
    fake.launch = lambda *a: launched.append(a)
    monkeypatch.setitem(sys.modules, "inductor_lite.runtime.launcher", fake)
    monkeypatch.setattr(dl.Kernel, "_device_of", lambda self, args: torch.device("cuda", 0))
    x = torch.randn(8)
    copy_kernel[lambda meta: (meta["BLOCK"] // 4, meta["num_warps"], meta["num_stages"])](x, x, 8, BLOCK=8)
    copy_kernel[(3,)](x, x, 8, BLOCK=8, num_warps=8, num_stages=3, maxnreg=40)
    assert launched[0] == (copy_kernel, (2, config.num_warps, 1), (x, x, 8), {"BLOCK": 8}, config.num_warps, 1, None)
    assert launched[1] == (copy_kernel, (3,), (x, x, 8), {"BLOCK": 8}, 8, 3, 40)


def test_arguments_bind_by_keyword_too():
    x, out = torch.randn(8), torch.zeros(8)
    copy_kernel[(1,)](x, out_ptr=out, n=8, BLOCK=8)
    assert torch.equal(out, x)


@pytest.mark.parametrize("call, error, match", [
    (lambda: copy_kernel[(1,)](torch.randn(4), torch.randn(4), BLOCK=4), TypeError, r"copy_kernel.*missing.*\['n'\]"),
    (lambda: copy_kernel[(1,)](torch.randn(4), torch.randn(4), 4, 5, BLOCK=4), TypeError, "copy_kernel takes 3"),
    (lambda: copy_kernel[(1,)](torch.randn(4), torch.randn(4), 4), TypeError, r"missing constexpr.*BLOCK"),
    (lambda: copy_kernel[(1,)](torch.randn(4), torch.randn(4), 4, BLOCK=4, XBLOCK=2), TypeError, "XBLOCK"),
    (lambda: copy_kernel[(1,)](torch.randn(4), torch.randn(4), 4, n=4, BLOCK=4), TypeError, "multiple values"),
    (lambda: copy_kernel.run((1,), (torch.randn(4), torch.randn(4)), {"BLOCK": 4}), TypeError, "got 2"),
    (lambda: copy_kernel.run((1,), (torch.randn(4),) * 3, {"BLOCK": 4, "n": 4}), TypeError, "runtime arguments"),
    (lambda: copy_kernel[(1,)](torch.randn(4), torch.randn(4), "4", BLOCK=4), TypeError, "argument n .* str"),
    (lambda: copy_kernel[(1,)](torch.randn(4), torch.float32, 4, BLOCK=4), TypeError, "out_ptr .* dtype"),
    (lambda: copy_kernel[(1,)](torch.randn(4), torch.zeros(4, dtype=torch.complex64), 4, BLOCK=4), TypeError,
     "out_ptr is a torch.complex64 tensor"),
    (lambda: copy_kernel[(1,)](torch.randn(4), torch.randn(4), 2**70, BLOCK=4), ValueError, "int64"),
    (lambda: copy_kernel[(1,)](torch.randn(4), torch.randn(4), 4, BLOCK=[4]), TypeError, "constexpr BLOCK"),
    (lambda: copy_kernel[(1,)](torch.randn(4), torch.empty(4, device="meta"), 4, BLOCK=4), ValueError,
     "out_ptr is on meta"),
    (lambda: copy_kernel[(1,)](torch.empty(4, device="meta"), torch.empty(4, device="meta"), 4, BLOCK=4),
     ValueError, "not supported"),
    (lambda: copy_kernel[(1, 1, 1, 1)](torch.randn(4), torch.randn(4), 4, BLOCK=4), ValueError, "grid"),
    (lambda: copy_kernel[(-1,)](torch.randn(4), torch.randn(4), 4, BLOCK=4), ValueError, "grid"),
    (lambda: copy_kernel[("a",)](torch.randn(4), torch.randn(4), 4, BLOCK=4), TypeError, "grid"),
    (lambda: copy_kernel[(1,)](torch.randn(4), torch.randn(4), 4, BLOCK=4, num_warps=3), ValueError, "num_warps"),
    (lambda: copy_kernel[(1,)](torch.randn(4), torch.randn(4), 4, BLOCK=3), dl.CompilationError, "power of 2"),
    (lambda: copy_kernel(torch.randn(4), torch.randn(4), 4, BLOCK=4), TypeError, r"copy_kernel\[grid\]"),
])
def test_bad_launches_raise_documented_errors(call, error, match):
    with pytest.raises(error, match=match):
        call()


def test_stubs_raise_outside_kernels_and_cdiv_works_everywhere():
    with pytest.raises(RuntimeError, match="dl.load can only be called inside a @dl.kernel"):
        dl.load(None)
    with pytest.raises(RuntimeError, match="dl.exp"):
        dl.exp(1.0)
    assert dl.cdiv(10, 4) == 3 and dl.cdiv(0, 4) == 0 and dl.cdiv(8, 4) == 2


@pytest.mark.parametrize("n", [1, 5, 8])
def test_welford_tree_reduction_matches_two_pass_statistics(n):
    # Odd lengths (IR from outside the DSL) are padded with a weight-0 state.
    x = torch.randn(3, n, dtype=torch.float64) * 2 + 1
    mean, m2, w = interpreter._welford_reduce(x, torch.zeros_like(x), torch.ones_like(x), dim=1)
    var, want_mean = torch.var_mean(x, 1, correction=0)
    torch.testing.assert_close(mean, want_mean)
    torch.testing.assert_close(m2 / n, var)
    assert torch.equal(w, torch.full((3,), float(n), dtype=torch.float64))


@dl.kernel
def ticket_kernel(count_ptr, out_ptr, value, GROUPS: dl.constexpr):
    pid = dl.program_id(0)
    dl.store(out_ptr + pid, dl.atomic_add(count_ptr + pid % GROUPS, value, mask=pid % 5 != 4))


@pytest.mark.parametrize("chunk", [1, 1 << 22])
@pytest.mark.parametrize("dtype", [torch.int32, torch.int64, torch.float32, torch.float64])
def test_atomic_add_serialises_the_programs_in_order(monkeypatch, chunk, dtype):
    # Program p adds `value` to count[p % 3] unless p % 5 == 4 (masked off: it adds
    # nothing and gets 0); in program order, the k-th unmasked program of a group sees
    # k * value.
    monkeypatch.setattr(interpreter, "CHUNK_ELEMENTS", chunk)
    count = torch.tensor([10, 20, 30], dtype=dtype)
    out = torch.full((23,), -1, dtype=dtype)
    ticket_kernel[(23,)](count, out, 3, GROUPS=3)
    want, seen = [], [10, 20, 30]
    for p in range(23):
        if p % 5 == 4:
            want.append(0)
        else:
            want.append(seen[p % 3])
            seen[p % 3] += 3
    assert out.tolist() == want and count.tolist() == seen


def test_split_row_sum_leaves_its_counters_at_zero():
    case = next(c for c in dsl_corpus.cases() if c.name.startswith("split_row_sum"))
    for _ in range(2):  # the second launch relies on the first having reset the counts
        case.args[3].copy_(dsl_corpus.poison_like(case.expected[3]))
        dsl_corpus.check(case)
        assert not case.args[2].any()
