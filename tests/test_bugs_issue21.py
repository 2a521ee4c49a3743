"""Issue 21's bug list, one test (or a few) per bug; each failed before its fix.

Compiled results are compared with eager exactly where torch is exact (NaN positions
and the sign of zero included), with fallback to eager off, so a lowering error shows.
Tests that compile run on CPU (interpreter) and, marked `gpu`, on CUDA.
"""

import logging
import os
import subprocess
import sys
import warnings

import pytest
import torch

import inductor_lite
import inductor_lite.dsl as dl
from inductor_lite import backend as backend_module
from inductor_lite import debug, logs
from inductor_lite.config import Config, ConfigError, config
from inductor_lite.dsl import assembler, compiler

INF, NAN = float("inf"), float("nan")


@pytest.fixture(params=["cpu", pytest.param("cuda", marks=pytest.mark.gpu)])
def device(request):
    with torch.device(request.param):
        yield request.param


@pytest.fixture(autouse=True)
def fresh(monkeypatch):
    torch._dynamo.reset()
    inductor_lite.reset_counters()
    monkeypatch.setattr(backend_module, "_warned", False)
    with config.patch(fallback_on_error=False):
        yield
    torch._dynamo.reset()


def compiled(fn):
    return torch.compile(fn, backend="inductor_lite")


def assert_identical(got, expected):
    """Same dtype, shape, values, NaN positions and signs of zero."""
    assert got.dtype == expected.dtype and got.shape == expected.shape
    if expected.dtype.is_floating_point:
        assert torch.equal(got.isnan(), expected.isnan()), (got, expected)
        keep = ~expected.isnan()
        assert torch.equal(got[keep], expected[keep]), (got, expected)
        assert torch.equal(got[keep].signbit(), expected[keep].signbit()), (got, expected)
    else:
        assert torch.equal(got, expected), (got, expected)


def check(fn, *args):
    expected = fn(*args)
    got = compiled(fn)(*args)
    for g, e in zip(*(x if isinstance(x, tuple) else (x,) for x in (got, expected))):
        if e.is_complex():
            torch.testing.assert_close(g, e)
        else:
            torch.testing.assert_close(g, e, equal_nan=True)
    assert inductor_lite.counters["graphs_fallback"] == 0


# ----------------------------------------------------------------------------- 1. zero-size dimensions

ZERO_SIZE_CASES = {
    "abs": (torch.abs, [(3, 0)]),
    "exp": (torch.exp, [(0, 4)]),
    "relu": (torch.relu, [(2, 0, 3)]),
    "softmax": (lambda x: torch.softmax(x, -1), [(3, 0)]),
    "softmax_over_nonempty_dim": (lambda x: torch.softmax(x, 0), [(3, 0)]),
    "sum_over_empty_dim": (lambda x: x.sum(-1), [(3, 0)]),
    "sum_over_nonempty_dim": (lambda x: x.sum(0), [(3, 0)]),
    "prod_over_empty_dim": (lambda x: x.prod(1), [(4, 0)]),
    "mean_over_empty_dim": (lambda x: x.mean(1), [(4, 0)]),
    "zeros_like": (torch.zeros_like, [(3, 0)]),
    "new_zeros": (lambda x: x.new_zeros([2, 0]) + x.sum(), [(3,)]),
    "cat_with_empty_pieces": (lambda a, b: torch.cat([a, b, a]) * 2, [(0, 3), (2, 3)]),
    "broadcast": (lambda a, b: a * b + 1, [(3, 1), (1, 0)]),
    "views": (lambda x: (x.t().reshape(2, 0, 5) + 1).permute(2, 1, 0), [(0, 10)]),
    "pad": (lambda x: torch.nn.functional.pad(x, (1, 1)) + 1, [(3, 0)]),
}


@pytest.mark.parametrize("name", list(ZERO_SIZE_CASES))
def test_zero_size_dimensions_compile_and_match_eager(name, device, monkeypatch):
    fn, shapes = ZERO_SIZE_CASES[name]
    args = [torch.randn(s) for s in shapes]
    check(fn, *args)


def test_empty_kernels_do_not_launch(device, monkeypatch):
    def launched(*args, **kwargs):
        raise AssertionError("a kernel over 0 elements was launched")

    monkeypatch.setattr(inductor_lite.dsl.interpreter, "run", launched)
    monkeypatch.setattr(inductor_lite.runtime.launcher, "precompile", launched)
    x = torch.randn(3, 0)
    assert compiled(lambda t: t.exp() + 1)(x).shape == (3, 0)
    assert inductor_lite.counters["kernels_generated"] == 0 and inductor_lite.counters["extern_calls"] == 0


def test_reduction_without_identity_over_empty_dim_raises_like_eager(device):
    x = torch.randn(3, 0)
    with pytest.raises(IndexError, match="non-zero size"):
        x.amax(-1)
    with pytest.raises(Exception, match="zero-size"):
        compiled(lambda t: t.amax(-1))(x)


# ----------------------------------------------------------------------------- 2. dtypes the DSL lacks


COMPLEX_CASES = {
    "fft_abs": (lambda x: torch.fft.fft(x).abs() + 1, torch.float32),
    "rfft_scaled": (lambda x: torch.fft.rfft(x) * 2, torch.float32),
    "cfloat_arith": (lambda c: c * 2 + c, torch.cfloat),
    "to_cfloat": (lambda x: x.to(torch.cfloat) * 3, torch.float32),
    "view_as_real": (lambda c: torch.view_as_real(c) + 1, torch.cfloat),
    "view_as_complex": (lambda x: torch.view_as_complex(x * 2), None),
    "complex_permute_cat": (lambda c: torch.cat([c.t(), c.t()]).contiguous(), torch.cfloat),
    "complex_sum": (lambda c: c.sum(0), torch.cfloat),
    "complex_sgn": (lambda c: torch.sgn(c), torch.cfloat),
    "eigvals": (lambda x: torch.linalg.eigvals(x), torch.float32),
}


@pytest.mark.parametrize("name", list(COMPLEX_CASES))
def test_complex_ops_become_externs_at_lowering(name, device):
    fn, dtype = COMPLEX_CASES[name]
    x = torch.randn(4, 3, 2) if dtype is None else torch.randn(4, 4, dtype=dtype)
    if name == "eigvals" and device == "cuda":
        x = x.cpu()
    check(fn, x)
    assert inductor_lite.counters["extern_calls"] >= 1


def test_real_part_of_a_complex_graph_still_runs_our_kernels(device):
    c = torch.randn(8, dtype=torch.cfloat)
    check(lambda c: torch.view_as_real(c * 2).relu() + 1, c)
    assert inductor_lite.counters["kernels_generated"] == 1


# ----------------------------------------------------------------------------- 3. with_effects


LINALG_CASES = {
    "inv": lambda a, b: torch.linalg.inv(a) * 2,
    "solve": lambda a, b: torch.linalg.solve(a, b) + 1,
    "cholesky": lambda a, b: torch.linalg.cholesky(a @ a.T).relu(),
    "matrix_power": lambda a, b: torch.linalg.matrix_power(a, -2),
}


@pytest.mark.parametrize("name", list(LINALG_CASES))
def test_linalg_error_checks_under_with_effects(name, device):
    a, b = torch.randn(4, 4) + 4 * torch.eye(4), torch.randn(4, 2)
    check(LINALG_CASES[name], a, b)
    assert inductor_lite.counters["extern.aten._linalg_check_errors.default"] == 1


def test_linalg_error_check_raises_like_eager(device):
    singular = torch.zeros(3, 3)
    with pytest.raises(torch.linalg.LinAlgError, match="singular"):
        torch.linalg.inv(singular)  # on CUDA too: the check reads the info tensor back
    with pytest.raises(torch.linalg.LinAlgError, match="singular"):
        compiled(lambda a: torch.linalg.inv(a) + 1)(singular)


@pytest.fixture
def linalg_check_without_effects(monkeypatch):
    """``aten._linalg_check_errors`` as torch 2.11 has it (not registered as effectful, not
    side-effectful; 2.13 registers it and marks it side-effectful on its first use through
    ``with_effects``: both are undone for the test), then with the backend's fix applied."""
    from torch._higher_order_ops import effects

    op = torch.ops.aten._linalg_check_errors.default
    monkeypatch.setattr(torch.fx.node, "_side_effectful_functions", torch.fx.node._side_effectful_functions - {op})
    get, register = getattr(effects, "_get_effect", None), getattr(effects, "_register_effectful_op", None)
    previous = get(op) if get and register else None
    if previous is not None:
        register(op, None)
    backend_module._keep_linalg_error_checks()
    try:
        yield
    finally:
        if previous is not None:
            register(op, previous)


def test_linalg_error_check_survives_without_with_effects(device, linalg_check_without_effects):
    a = torch.randn(4, 4) + 4 * torch.eye(4)
    check(LINALG_CASES["inv"], a, None)
    assert inductor_lite.counters["extern.aten._linalg_check_errors.default"] == 1
    torch._dynamo.reset()
    with pytest.raises(torch.linalg.LinAlgError, match="singular"):
        compiled(lambda a: torch.linalg.inv(a) + 1)(torch.zeros(3, 3))


def test_linalg_inv_backward(device):
    a = (torch.randn(4, 4) + 4 * torch.eye(4)).requires_grad_()
    compiled(lambda t: torch.linalg.inv(t).sum())(a).backward()
    got, a.grad = a.grad, None
    torch.linalg.inv(a).sum().backward()
    torch.testing.assert_close(got, a.grad)


# ----------------------------------------------------------------------------- 4. arange


# The device is explicit: under the `torch.device` context (the `device` fixture), Dynamo of
# torch 2.11 traced these aranges onto the CPU where eager puts them on CUDA (as in
# pytorch/pytorch#151202).
ARANGE_CASES = {
    "bool_end": lambda x: torch.arange(True, device=x.device) + x,
    "bool_start_end": lambda x: torch.arange(False, True, device=x.device) + x,
    "bool_step": lambda x: torch.arange(0, 5, True, device=x.device) * x,
    "float_args_int_dtype": lambda x: torch.arange(0.5, 7.5, 1.5, dtype=torch.int64, device=x.device) + 1,
    "negative_float_step_int_dtype": lambda x: torch.arange(5.7, 0, -1.5, dtype=torch.int32, device=x.device) * 2,
    "float_args_uint8": lambda x: torch.arange(2.0, 5.0, 1.0, dtype=torch.uint8, device=x.device) + 1,
    "bool_step_float": lambda x: torch.arange(1.5, 5, True, device=x.device) + x,
}


@pytest.mark.parametrize("name", list(ARANGE_CASES))
def test_arange_odd_arguments(name, device):
    x = torch.randn(1)
    fn = ARANGE_CASES[name]
    assert_identical(compiled(fn)(x), fn(x))


def test_arange_of_bool_raises_like_eager(device):
    with pytest.raises(Exception, match="not implemented for 'Bool'"):
        torch.arange(0, 1, dtype=torch.bool)
    with pytest.raises(Exception, match="not implemented for 'Bool'"):
        compiled(lambda x: (torch.arange(0, 1, dtype=torch.bool), x + 1))(torch.randn(1))


# ----------------------------------------------------------------------------- 5. floor division

EDGE_VALUES = [1.0, 5.5, INF, -5.0, 0.0, -0.0, -INF, NAN, 3.0, -3.0, 7.0, -7.5, 0.1, 1.1, 2.0, 1e-3, 1e6]

DIVISIONS = {
    "floordiv_operator": lambda x, y: x // y,
    "div_floor": lambda x, y: torch.div(x, y, rounding_mode="floor"),
    "floor_divide": torch.floor_divide,
    "floor_divide_scalar": lambda x, y: x // 0.1,
    "div_trunc": lambda x, y: torch.div(x, y, rounding_mode="trunc"),
    "remainder": torch.remainder,
    "remainder_scalar": lambda x, y: x % -2.0,
    "fmod": torch.fmod,
}


def test_float_floor_division_matches_the_issue_example(device):
    x, y = torch.tensor([1.0, 5.5, INF, -5.0]), torch.tensor([0.1, 1.1, 1.0, INF])
    for fn in list(DIVISIONS.values())[:3]:
        torch._dynamo.reset()
        got = compiled(fn)(x, y)
        assert_identical(got, torch.tensor([9.0, 4.0, NAN, -1.0]))
        assert_identical(got, fn(x, y))


@pytest.mark.parametrize("dtype", [torch.float32, torch.float64])
@pytest.mark.parametrize("name", list(DIVISIONS))
def test_division_rounding_modes_match_eager_on_edge_values(name, dtype, device):
    grid = torch.tensor(EDGE_VALUES, dtype=dtype)
    x, y = grid.repeat_interleave(len(EDGE_VALUES)), grid.repeat(len(EDGE_VALUES))
    fn = DIVISIONS[name]
    assert_identical(compiled(fn)(x, y), fn(x, y))


def test_floor_division_identity_and_huge_quotients(device):
    x, y = torch.randn(1000) * 100, torch.randn(1000)
    q, r = compiled(lambda x, y: (x // y, x % y))(x, y)
    assert_identical(q, x // y)
    torch.testing.assert_close(q * y + r, x, rtol=1e-5, atol=1e-4)
    # fmod of a huge quotient is exact in the interpreter too (torch's vectorized float32 CPU fmod is not)
    big, tiny = torch.full((64,), 1e30), torch.full((64,), 1e-30)
    assert_identical(compiled(lambda x, y: x // y)(big, tiny), torch.full((64,), INF))


@pytest.mark.parametrize("dtype", [torch.float16, torch.bfloat16])
def test_half_rounding_modes(dtype, device):
    x, y = torch.tensor([1.0, 5.5, INF, -5.0, 1.1, 7.0], dtype=dtype), torch.tensor([0.1, 1.1, 1.0, INF, 0.1, -2.0],
                                                                                     dtype=dtype)
    for fn in (DIVISIONS["div_floor"], DIVISIONS["div_trunc"], DIVISIONS["remainder"]):
        torch._dynamo.reset()
        assert_identical(compiled(fn)(x, y), fn(x, y))


def test_integer_floor_division_and_remainder(device):
    x, y = torch.randint(-50, 50, (300,)), torch.randint(1, 7, (300,)) * torch.randint(0, 2, (300,)).mul(2).sub(1)
    for fn in (DIVISIONS["floordiv_operator"], DIVISIONS["remainder"], DIVISIONS["fmod"]):
        torch._dynamo.reset()
        assert_identical(compiled(fn)(x, y), fn(x, y))


# ----------------------------------------------------------------------------- 6. sign


@pytest.mark.parametrize("dtype", [torch.float32, torch.float64, torch.float16, torch.bfloat16, torch.int64,
                                   torch.int8, torch.uint8, torch.bool])
@pytest.mark.parametrize("op", [torch.sign, torch.sgn])
def test_sign_matches_eager(op, dtype, device):
    if dtype.is_floating_point:
        x = torch.tensor([NAN, -NAN, 1.0, -2.0, 0.0, -0.0, INF, -INF], dtype=dtype)
    else:
        x = torch.tensor([-3, 0, 5, 1]).to(dtype)
    assert_identical(compiled(op)(x), op(x))
    assert inductor_lite.counters["kernels_generated"] == 1


# ----------------------------------------------------------------------------- 7. configuration


@pytest.mark.parametrize("variable, value, message", [
    ("INDUCTOR_LITE_XBLOCK", "0", "INDUCTOR_LITE_XBLOCK=0: must be a power of two between 16 and 4096"),
    ("INDUCTOR_LITE_XBLOCK", "3", "INDUCTOR_LITE_XBLOCK=3: must be a power of two between 16 and 4096"),
    ("INDUCTOR_LITE_XBLOCK", "-64", "INDUCTOR_LITE_XBLOCK=-64: must be a power of two between 16 and 4096"),
    ("INDUCTOR_LITE_XBLOCK", "8192", "INDUCTOR_LITE_XBLOCK=8192: must be a power of two"),
    ("INDUCTOR_LITE_XBLOCK", "big", "INDUCTOR_LITE_XBLOCK=big: expected an integer"),
    ("INDUCTOR_LITE_NUM_WARPS", "3", "INDUCTOR_LITE_NUM_WARPS=3: must be a power of two between 1 and 32"),
    ("INDUCTOR_LITE_NUM_WARPS", "64", "INDUCTOR_LITE_NUM_WARPS=64: must be a power of two between 1 and 32"),
    ("INDUCTOR_LITE_LOGS", "output_code,bogus", "INDUCTOR_LITE_LOGS=output_code,bogus: unknown artifact.*bogus.*"
                                                "known: output_code, fusion, schedule, cache, ptx, fallbacks"),
    ("INDUCTOR_LITE_INTERPRET", "maybe", "INDUCTOR_LITE_INTERPRET=maybe: expected 0 or 1"),
])
def test_bad_environment_variables_are_named_at_validation(variable, value, message):
    bad = Config.from_env({variable: value})  # reading never raises: importing the package must not
    with pytest.raises(ConfigError, match=message):
        bad.validate()
    assert issubclass(ConfigError, ValueError)


def test_good_environment_variables_are_read():
    good = Config.from_env({"INDUCTOR_LITE_XBLOCK": "256", "INDUCTOR_LITE_NUM_WARPS": "8",
                            "INDUCTOR_LITE_LOGS": "fusion, all", "INDUCTOR_LITE_AUTOTUNE": "0"})
    good.validate()
    assert (good.xblock, good.num_warps, good.logs, good.autotune) == (256, 8, "fusion, all", False)
    assert Config.from_env({}) == Config()


@pytest.mark.parametrize("options, message", [
    ({"xblock": -64}, "option xblock=-64: must be a power of two between 16 and 4096"),
    ({"xblock": 0}, "option xblock=0: must be a power of two"),
    ({"xblock": 3}, "option xblock=3: must be a power of two"),
    ({"num_warps": 3}, "option num_warps=3: must be a power of two between 1 and 32"),
    ({"logs": "bogus"}, "option logs='bogus': unknown artifact"),
])
def test_bad_options_raise_even_with_fallback_on(options, message):
    with config.patch(fallback_on_error=True), pytest.raises(Exception, match=message):
        torch.compile(lambda x: x + 1, backend="inductor_lite", options=options)(torch.randn(4))
    assert inductor_lite.counters["graphs_fallback"] == 0


def test_bad_patch_and_bad_assignment_raise(monkeypatch):
    with pytest.raises(ConfigError, match="config xblock=3: must be a power of two"):
        with config.patch(xblock=3):
            pass
    with pytest.raises(ConfigError, match="config logs='bogus': unknown artifact"):
        with config.patch(logs="bogus"):
            pass
    monkeypatch.setattr(config, "xblock", -64)
    with config.patch(fallback_on_error=True), pytest.raises(Exception, match="config xblock=-64"):
        compiled(lambda x: x + 1)(torch.randn(4))
    assert inductor_lite.counters["graphs_fallback"] == 0


def test_bad_environment_imports_then_raises_at_first_compile():
    script = (
        "import torch, torch._dynamo\n"
        "import inductor_lite\n"
        "assert 'inductor_lite' in torch._dynamo.list_backends()\n"
        "try:\n"
        "    torch.compile(lambda x: x + 1, backend='inductor_lite')(torch.randn(4))\n"
        "except Exception as e:\n"
        "    print('RAISED', e)\n"
    )
    env = dict(os.environ, INDUCTOR_LITE_XBLOCK="-64", INDUCTOR_LITE_LOGS="bogus", INDUCTOR_LITE_FALLBACK_ON_ERROR="1")
    repo = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
    out = subprocess.run([sys.executable, "-c", script], env=env, cwd=repo, capture_output=True, text=True,
                         timeout=300)
    assert out.returncode == 0, out.stderr
    assert "RAISED" in out.stdout and "ConfigError" in out.stdout
    assert "INDUCTOR_LITE_XBLOCK=-64: must be a power of two between 16 and 4096" in out.stdout
    assert "INDUCTOR_LITE_LOGS=bogus: unknown artifact" in out.stdout


# ----------------------------------------------------------------------------- 8. debug dump and logging


def test_debug_dump_failure_warns_once_and_compiles(tmp_path, monkeypatch, device):
    monkeypatch.setattr(debug, "_warned", False)
    not_a_dir = tmp_path / "file"
    not_a_dir.write_text("")
    x = torch.randn(8)
    with config.patch(debug_dir=str(not_a_dir / "dump"), fallback_on_error=True):
        with warnings.catch_warnings(record=True) as caught:
            warnings.simplefilter("always")
            check(lambda t: t.exp() + 1, x)
            torch._dynamo.reset()
            check(lambda t: t.sin() * 2, x)
    dump_warnings = [w for w in caught if "debug dump" in str(w.message)]
    assert len(dump_warnings) == 1 and "INDUCTOR_LITE_DEBUG_DIR" in str(dump_warnings[0].message)
    assert inductor_lite.counters["graphs_compiled"] == 2 and inductor_lite.counters["kernels_generated"] == 2


def test_logging_failure_warns_once_and_compiles(monkeypatch, device):
    class Broken(logging.Filter):
        def filter(self, record):
            raise RuntimeError("broken log filter")

    monkeypatch.setattr(logs, "_warned_failure", False)
    logger = logging.getLogger("inductor_lite.output_code")
    broken = Broken()
    logger.addFilter(broken)
    try:
        with config.patch(logs="output_code", fallback_on_error=True):
            with warnings.catch_warnings(record=True) as caught:
                warnings.simplefilter("always")
                check(lambda t: t.exp() + 1, torch.randn(8))
                torch._dynamo.reset()
                check(lambda t: t.cos() + 1, torch.randn(8))
    finally:
        logger.removeFilter(broken)
    assert len([w for w in caught if "broken log filter" in str(w.message)]) == 1
    assert inductor_lite.counters["graphs_compiled"] == 2


# ----------------------------------------------------------------------------- 9. overflowing float literals


@pytest.mark.parametrize("dtype", [torch.float32, torch.float16, torch.bfloat16, torch.float64])
def test_overflowing_literals_give_inf_like_eager(dtype, device):
    x = torch.tensor([1.0, -2.0, 0.0, 1e-39, NAN], dtype=dtype)
    fn = lambda t: (t * 1e39, t + -1e39, t * 1e-46, t * 70000.0)  # noqa: E731
    for got, expected in zip(compiled(fn)(x), fn(x)):
        assert_identical(got, expected)


def _scale(x_ptr, out_ptr, BLOCK: dl.constexpr):
    i = dl.arange(0, BLOCK)
    dl.store(out_ptr + i, dl.load(x_ptr + i) * 1e39 + 1e-46)


def test_overflowing_literal_in_a_dsl_kernel(device):
    kernel = dl.kernel(_scale)
    x = torch.tensor([1.0, -1.0, 0.0, 2.0] * 4)
    out = torch.empty_like(x)
    kernel[(1,)](x, out, BLOCK=16)
    assert_identical(out, x * 1e39 + 1e-46)


@pytest.mark.parametrize("cc", [(8, 0), (9, 0)])
def test_overflowing_literal_ptx_assembles(cc):
    kernel = dl.kernel(_scale)
    spec = kernel.specialize_signature({"x_ptr": "*fp32", "out_ptr": "*fp32"}, {"BLOCK": 128})
    ptx = compiler.compile_ptx(kernel.build_ir(spec), cc=cc, num_warps=4).ptx
    assert "0f7F800000" in ptx  # the literal is +inf in fp32
    if assembler.can_assemble():
        assembler.check_ptx_assembles(ptx, cc)
