"""Tests of the DSL's NVPTX compiler: block IR -> LLVM IR -> PTX -> cubin.

On CPU: every corpus kernel (tests/dsl_corpus.py) and the kernels below compile for
sm_80 and sm_90 and assemble (nvJitLink or ptxas), a representative set for every
``num_warps`` in 1..32; the PTX uses 16-byte accesses where the axis analysis can
prove them and not elsewhere, and 64-bit index math for int64 indices; layouts place
every element; errors name the kernel. On a GPU (``gpu`` marker): every case runs and
matches torch (the representative set under every ``num_warps``), and a kernel runs
over 2**31 + 17 elements.
"""

from __future__ import annotations

import dataclasses
import functools
import itertools
import os
import re
import sys

import pytest
import torch

import inductor_lite.dsl as dl
from inductor_lite.dsl import assembler, axis_info, compiler, ir, libdevice, nvptx, nvptx_reduce
from inductor_lite.dsl.layout import BlockedLayout, SliceLayout, default_blocked_layout, distribute

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import dsl_corpus  # noqa: E402

CCS = [(8, 0), (9, 0)]
needs_assembler = pytest.mark.skipif(not assembler.can_assemble(), reason="needs nvJitLink or ptxas")


# ----------------------------------------------------------------------------- helpers


class FnBuilder:
    """Builds an `ir.Function` op by op, for IR the DSL frontend does not emit."""

    def __init__(self, name: str):
        self.name = name
        self.args: list[ir.ArgSpec] = []
        self.values: list[ir.Value] = []
        self.ops: list[ir.Op] = []

    def arg(self, name, elem, *, ptr=False, div16=False) -> ir.Value:
        t = ir.BlockType(ir.PointerType(elem) if ptr else elem)
        self.args.append(ir.ArgSpec(name, t, divisible_by_16=div16))
        self.values.append(ir.Value(t, name))
        return self.values[-1]

    def op(self, opcode, operands, types, **attrs):
        results = [ir.Value(t) for t in types]
        self.ops.append(ir.Op(opcode, list(operands), results, attrs))
        return results[0] if len(results) == 1 else results

    def const(self, value, elem, shape=()):
        return self.op("constant", [], [ir.BlockType(elem, shape)], value=value)

    def splat(self, x, shape):
        return self.op("splat", [x], [x.type.with_shape(shape)])

    def arange(self, n):
        return self.op("arange", [], [ir.BlockType(ir.int32, (n,))], start=0, end=n)

    def binary(self, kind, a, b):
        return self.op("binary", [a, b], [a.type], op=kind)

    def load(self, ptr):
        return self.op("load", [ptr], [ptr.type.with_element(ptr.type.element.element)])

    def store(self, ptr, value):
        self.op("store", [ptr, value], [])

    def function(self) -> ir.Function:
        return ir.Function(self.name, self.args, self.values, ir.Block(self.ops))


def scalar_sum_kernel(n: int) -> ir.Function:
    """out[0] = sum(x[0:n]) as a scalar reduction stored by one thread."""
    b = FnBuilder("scalar_sum")
    x_ptr = b.arg("x_ptr", ir.float32, ptr=True, div16=True)
    out_ptr = b.arg("out_ptr", ir.float32, ptr=True, div16=True)
    x = b.load(b.binary("add", b.splat(x_ptr, (n,)), b.arange(n)))
    total = b.op("reduce", [x], [ir.BlockType(ir.float32)], axis=0, combine="sum")
    b.store(out_ptr, total)
    return b.function()


# ----------------------------------------------------------------------------- extra DSL kernels


@dl.kernel
def col_sum_kernel(x_ptr, out_ptr, rows, cols, XBLOCK: dl.constexpr, RBLOCK: dl.constexpr):
    # Outer reduction: the reduced axis (rows) is not the contiguous one.
    col = dl.program_id(0) * XBLOCK + dl.arange(0, XBLOCK)[None, :]
    row = dl.arange(0, RBLOCK)[:, None]
    mask = (col < cols) & (row < rows)
    x = dl.load(x_ptr + row * cols + col, mask=mask, other=0.0)
    dl.store(out_ptr + col, dl.sum(x, 0)[None, :], mask=col < cols)


@dl.kernel
def wide_row_kernel(x_ptr, sum_ptr, max_ptr, arg_ptr, cols, RBLOCK: dl.constexpr):
    # One row per program, spread over every warp: reductions cross warps through shared memory.
    row = dl.program_id(0)
    col = dl.arange(0, RBLOCK)
    mask = col < cols
    x = dl.load(x_ptr + row * cols + col, mask=mask, other=float("-inf"))
    dl.store(sum_ptr + row, dl.sum(dl.where(mask, x, 0.0), 0))
    dl.store(max_ptr + row, dl.max(x, 0))
    dl.store(arg_ptr + row, dl.argmax(x, 0))


@dl.kernel
def slice_store_kernel(x_ptr, out_ptr, rows, cols, XBLOCK: dl.constexpr, RBLOCK: dl.constexpr):
    # The 1-D reduction result is stored through a 1-D index, without [:, None].
    row1 = dl.program_id(0) * XBLOCK + dl.arange(0, XBLOCK)
    row = row1[:, None]
    col = dl.arange(0, RBLOCK)[None, :]
    x = dl.load(x_ptr + row * cols + col, mask=(row < rows) & (col < cols), other=0.0)
    dl.store(out_ptr + row1, dl.sum(x, 1), mask=row1 < rows)


@dl.kernel
def row_sum_acc1d_kernel(x_ptr, out_ptr, rows, cols, XBLOCK: dl.constexpr, RBLOCK: dl.constexpr):
    # A 1-D accumulator fed by reductions: it should live in the reductions' layout.
    row = dl.program_id(0) * XBLOCK + dl.arange(0, XBLOCK)
    acc = dl.zeros([XBLOCK], dl.float32)
    for start in range(0, cols, RBLOCK):
        col = start + dl.arange(0, RBLOCK)[None, :]
        mask = (row[:, None] < rows) & (col < cols)
        acc += dl.sum(dl.load(x_ptr + row[:, None] * cols + col, mask=mask, other=0.0), 1)
    dl.store(out_ptr + row, acc, mask=row < rows)


@dl.kernel
def reshape_sum_kernel(x_ptr, out_ptr, A: dl.constexpr, B: dl.constexpr):
    x = dl.load(x_ptr + dl.arange(0, A * B))
    dl.store(out_ptr + dl.arange(0, A), dl.sum(dl.reshape(x, [A, B]), 1))


@dl.kernel
def cube_kernel(x_ptr, out_ptr, A: dl.constexpr, B: dl.constexpr, C: dl.constexpr):
    a = dl.arange(0, A)[:, None, None]
    b = dl.arange(0, B)[None, :, None]
    c = dl.arange(0, C)[None, None, :]
    x = dl.load(x_ptr + a * (B * C) + b * C + c)
    dl.store(out_ptr + dl.arange(0, A)[:, None] * C + dl.arange(0, C)[None, :], dl.sum(x, 1))


@dl.kernel
def copy_kernel(x_ptr, out_ptr, n, BLOCK: dl.constexpr):
    offs = dl.program_id(0) * BLOCK + dl.arange(0, BLOCK)
    mask = offs < n
    dl.store(out_ptr + offs, dl.load(x_ptr + offs, mask=mask, other=0), mask=mask)


@dl.kernel
def unmasked_scale_kernel(x_ptr, out_ptr, BLOCK: dl.constexpr):
    offs = dl.program_id(0) * BLOCK + dl.arange(0, BLOCK)
    dl.store(out_ptr + offs, dl.load(x_ptr + offs) * 3.0)


@dl.kernel
def positive_kernel(x_ptr, out_ptr, n, BLOCK: dl.constexpr):
    offs = dl.program_id(0) * BLOCK + dl.arange(0, BLOCK)
    mask = offs < n
    dl.store(out_ptr + offs, dl.load(x_ptr + offs, mask=mask, other=0.0) > 0.0, mask=mask)


@dl.kernel
def int64_index_kernel(x_ptr, out_ptr, n, BLOCK: dl.constexpr):
    offs = dl.program_id(0).to(dl.int64) * BLOCK + dl.arange(0, BLOCK)
    mask = offs < n
    dl.store(out_ptr + offs, dl.load(x_ptr + offs, mask=mask, other=0.0) + 1.0, mask=mask)


@dl.kernel
def add_one_kernel(x_ptr, out_ptr, n, BLOCK: dl.constexpr):
    offs = dl.program_id(0).to(dl.int64) * BLOCK + dl.arange(0, BLOCK)
    mask = offs < n
    dl.store(out_ptr + offs, dl.load(x_ptr + offs, mask=mask) + 1, mask=mask)


@dl.kernel
def evict_kernel(x_ptr, w_ptr, out_ptr, n, BLOCK: dl.constexpr):
    offs = dl.program_id(0) * BLOCK + dl.arange(0, BLOCK)
    mask = offs < n
    x = dl.load(x_ptr + offs, mask=mask, other=0.0, eviction_policy="evict_first")
    w = dl.load(w_ptr + dl.arange(0, BLOCK), eviction_policy="evict_last")
    dl.store(out_ptr + offs, x * w, mask=mask)


@dl.kernel
def cache_modifier_kernel(x_ptr, w_ptr, out_ptr, n, BLOCK: dl.constexpr):
    offs = dl.program_id(0) * BLOCK + dl.arange(0, BLOCK)
    mask = offs < n
    x = dl.load(x_ptr + offs, mask=mask, cache_modifier=".cg")
    y = dl.load(x_ptr + offs, mask=mask, cache_modifier=".cg", eviction_policy="evict_first")
    w = dl.load(w_ptr + dl.arange(0, BLOCK), cache_modifier=".ca")
    v = dl.load(w_ptr + dl.arange(0, BLOCK), cache_modifier=".cv")
    dl.store(out_ptr + offs, x * w + y * v, mask=mask)


@dl.kernel
def rms_rows_kernel(x_ptr, out_ptr, RBLOCK: dl.constexpr):
    """One bf16 row a program, used twice after widening: x * rsqrt(mean(x * x))."""
    offs = dl.program_id(0) * RBLOCK + dl.arange(0, RBLOCK)
    x = dl.load(x_ptr + offs).to(dl.float32)
    dl.store(out_ptr + offs, x * dl.rsqrt(dl.sum(x * x, 0) * (1.0 / RBLOCK)))


def extra_cases(device: str, seed: int = 1) -> list[dsl_corpus.Case]:
    """Cases for the kernels above, in the corpus's format."""
    c = dsl_corpus._Builder(device, seed)

    def small_ints(*shape):  # integer-valued floats: fp32 sums are exact in any order
        return c.randint(-8, 8, *shape).float()

    x = small_ints(100, 48)
    c.add("col_sum", col_sum_kernel, (x, None, 100, 48), {"XBLOCK": 16, "RBLOCK": 128}, (3,), {1: x.sum(0)})
    for cols, warps in [(3000, 8), (1000, 4), (64, 1)]:
        x = small_ints(3, cols)
        x[1, 5] = x[1, cols - 1] = float("nan")
        x[2, cols // 2:] = x[2, :cols // 2].max() + 1  # ties in later warps: argmax is the first
        rblock = 1 << (cols - 1).bit_length()
        c.add(f"wide_row_{cols}_w{warps}", wide_row_kernel, (x, None, None, None, cols), {"RBLOCK": rblock},
              (3,), {1: x.sum(1), 2: x.amax(1), 3: x.argmax(1).to(torch.int32)}, num_warps=warps)
    x = small_ints(19, 33)
    c.add("slice_store", slice_store_kernel, (x, None, 19, 33), {"XBLOCK": 8, "RBLOCK": 64}, (3,), {1: x.sum(1)})
    x = small_ints(21, 200)
    c.add("row_sum_acc1d", row_sum_acc1d_kernel, (x, None, 21, 200), {"XBLOCK": 4, "RBLOCK": 64}, (6,),
          {1: x.sum(1)})
    x = c.randn(64)
    c.add("reshape_sum", reshape_sum_kernel, (x, None), {"A": 8, "B": 8}, (1,), {1: x.reshape(8, 8).sum(1)})
    x = c.randn(4, 8, 16, dtype=torch.float64)
    c.add("cube_sum_fp64", cube_kernel, (x, None), {"A": 4, "B": 8, "C": 16}, (1,), {1: x.sum(1)})
    for dtype in (torch.float32, torch.float16, torch.bfloat16, torch.float64, torch.int8, torch.int64):
        n = 4096
        x = c.randn(n, dtype=dtype) if dtype.is_floating_point else c.randint(-100, 100, n, dtype=dtype)
        c.add(f"copy_aligned_{dtype}", copy_kernel, (x, None, n), {"BLOCK": 2048}, (2,), {1: x.clone()})
    x = c.randn(1025)[1:]  # data_ptr 4 bytes past a 16-byte boundary: no vector accesses
    c.add("copy_misaligned", copy_kernel, (x, None, 1024), {"BLOCK": 256}, (4,), {1: x.clone()})
    x = c.randn(2048)
    c.add("unmasked_scale", unmasked_scale_kernel, (x, None), {"BLOCK": 512}, (4,), {1: x * 3.0})
    x = c.randn(999)
    c.add("store_bool", positive_kernel, (x, None, 999), {"BLOCK": 256}, (4,), {1: x > 0})
    x = c.randn(999)
    c.add("int64_index", int64_index_kernel, (x, None, 999), {"BLOCK": 128}, (8,), {1: x + 1.0})
    x = c.randint(-100, 100, 999, dtype=torch.int8)
    c.add("int64_index_int8", add_one_kernel, (x, None, 999), {"BLOCK": 128}, (8,), {1: x + 1})
    for n in (1024, 1000):  # full blocks (unmasked hinted loads) and a partial last block
        x, w = c.randn(n), c.randn(256)
        c.add(f"eviction_hints_{n}", evict_kernel, (x, w, None, n), {"BLOCK": 256}, (4,),
              {2: x * w.repeat(4)[:n]})
        c.add(f"cache_modifiers_{n}", cache_modifier_kernel, (x, w, None, n), {"BLOCK": 256}, (4,),
              {2: 2 * x * w.repeat(4)[:n]})
    for dtype in (torch.bfloat16, torch.float16):
        x = c.randn(3, 2048, dtype=dtype)
        xf = x.double()
        want = (xf * torch.rsqrt((xf * xf).mean(1, keepdim=True))).to(dtype)
        c.add(f"rms_rows_{dtype}", rms_rows_kernel, (x, None), {"RBLOCK": 2048}, (3,), {1: want})
    return c.cases


def _all_cases(device: str) -> list[dsl_corpus.Case]:
    return dsl_corpus.cases(device) + extra_cases(device)


def _compile_case(case: dsl_corpus.Case, cc) -> compiler.CompiledPTX:
    spec = case.kernel.specialize(case.args, case.constexprs)
    fn = case.kernel.build_ir(spec)
    return compiler.compile_ptx(fn, cc=cc, num_warps=case.num_warps or 4, num_stages=case.num_stages)


def _unique_cases():
    seen, out = set(), []
    for case in _all_cases("cpu"):
        key = (case.kernel.name, case.kernel.specialize(case.args, case.constexprs).key(), case.num_warps)
        if key not in seen:
            seen.add(key)
            out.append(case)
    return out


_CPU_CASES = _unique_cases()
_CASES_BY_NAME = {c.name: c for c in _CPU_CASES}


# ----------------------------------------------------------------------------- CPU: compile + assemble


@pytest.mark.parametrize("case", extra_cases("cpu"), ids=lambda c: c.name)
def test_extra_cases_match_in_interpreter(case):
    # The interpreter is the reference semantics: this checks the expectations the GPU
    # test holds the compiled kernels to.
    dsl_corpus.check(case)



@needs_assembler
@pytest.mark.parametrize("name", sorted(_CASES_BY_NAME))
def test_case_compiles_and_assembles(name):
    case = _CASES_BY_NAME[name]
    for cc in CCS:
        out = _compile_case(case, cc)
        assert out.name == case.kernel.name
        assert f".entry {out.name}(" in out.ptx
        assert f".target sm_{cc[0]}{cc[1]}" in out.ptx
        assert len(out.param_types) == len(case.kernel.runtime_arg_names)
        called = set(re.findall(r"@(llvm\.[\w.]+)", out.llvm_ir))
        assert not [f for f in called if compiler._FORBIDDEN_INTRINSIC.match(f)]
        assembler.check_ptx_assembles(out.ptx, cc)


@needs_assembler
def test_scalar_reduction_is_stored_by_one_thread():
    out = compiler.compile_ptx(scalar_sum_kernel(1024), cc=(9, 0), num_warps=4)
    assembler.check_ptx_assembles(out.ptx, (9, 0))
    assert out.shared_bytes > 0 and "bar.sync" in out.ptx  # 4 warps combine through shared memory
    assert "@%p" in out.ptx  # the scalar store is predicated (thread 0 only)


@needs_assembler
@pytest.mark.parametrize("cc", [(7, 5), (8, 6), (8, 9), (10, 0), (12, 0)])
def test_other_targets_assemble(cc):
    out = _compile_case(_CASES_BY_NAME["softmax_torch.float16_5x17"], cc)
    assembler.check_ptx_assembles(out.ptx, cc)


def _ptx(name, cc=(9, 0)) -> str:
    return _compile_case(_CASES_BY_NAME[name], cc).ptx


def test_vector_width_follows_axis_analysis():
    # 16-byte accesses: fp32 x4, fp16/bf16 x8 and int8 x16 as four 32-bit words, fp64 x2.
    for dtype in ("float32", "float16", "bfloat16", "int8"):
        ptx = _ptx(f"copy_aligned_torch.{dtype}")
        assert "ld.global.v4.b32" in ptx and "st.global.v4.b32" in ptx, dtype
    ptx = _ptx("copy_aligned_torch.float64")
    assert "ld.global.v2.b64" in ptx and "st.global.v2.b64" in ptx
    # A misaligned input rules out vector loads (the aligned output still gets vector
    # stores); a mask not uniform over 4 elements (n = 1000, not divisible by 16) rules
    # out both.
    ptx = _ptx("copy_misaligned")
    assert "ld.global.v" not in ptx and "st.global.v" in ptx
    ptx = _ptx("add_torch.float32_1000")
    assert ".v4." not in ptx and ".v2." not in ptx
    # Unmasked accesses are plain LLVM vector loads (no predication).
    ptx = _ptx("unmasked_scale")
    assert "ld.global.v4" in ptx and "@%p" not in ptx


def test_eviction_policy_becomes_cache_hints():
    """evict_first / evict_last: L1 eviction priority, plus an L2 access policy from
    sm_80 (createpolicy), on vector loads whether masked or not."""
    ptx = _ptx("eviction_hints_1024")
    assert "createpolicy.fractional.L2::evict_first.b64" in ptx
    assert re.search(r"ld\.global\.L1::evict_first\.L2::cache_hint\.v2\.b32 .*%l2_policy;", ptx)
    assert re.search(r"ld\.global\.L1::evict_last\.L2::cache_hint\.v2\.b32 .*%l2_policy;", ptx)
    old = _ptx("eviction_hints_1000", cc=(7, 5))
    assert "createpolicy" not in old and "@%p" in old and "ld.global.L1::evict_first" in old
    assert "ld.global.L1::evict_last.v2.b32" in old
    plain = _ptx("unmasked_scale")
    assert "evict" not in plain and "cache_hint" not in plain


def test_cache_modifier_becomes_cache_operator():
    """.cg/.ca/.cv are PTX cache operators; with an eviction policy too, the operator
    replaces the L1 priority (PTX has no form with both) and the L2 policy stays."""
    ptx = _ptx("cache_modifiers_1024")
    assert re.search(r"ld\.global\.cg\.v2\.b32 ", ptx)
    assert re.search(r"ld\.global\.cg\.L2::cache_hint\.v2\.b32 .*%l2_policy;", ptx)
    assert re.search(r"ld\.global\.ca\.v2\.b32 ", ptx) and re.search(r"ld\.global\.cv\.v2\.b32 ", ptx)
    assert "L1::evict" not in ptx
    assert re.search(r"@%p\d+ ld\.global\.cg\.b32 ", _ptx("cache_modifiers_1000"))  # masked, unaligned


def test_bad_cache_modifier_is_a_compilation_error():
    @dl.kernel
    def bad(x_ptr, BLOCK: dl.constexpr):
        dl.load(x_ptr + dl.arange(0, BLOCK), cache_modifier=".cs")

    with pytest.raises(dl.CompilationError, match=r"cache_modifier must be '', '\.ca', '\.cg', '\.cv'; got '\.cs'"):
        bad.build_ir(bad.specialize_signature({"x_ptr": "*fp32"}, {"BLOCK": 4}))


_WIDENING = re.compile(r"(shl\.b32\s+\S+, \S+, 16;|and\.b32\s+\S+, \S+, (0xffff0000|-65536);)")


def _rms_rows_ptx(dtype: str, maxnreg) -> str:
    spec = rms_rows_kernel.specialize_signature({"x_ptr": f"*{dtype}", "out_ptr": f"*{dtype}"}, {"RBLOCK": 2048},
                                                divisible_by_16=[0, 1])
    return compiler.compile_ptx(rms_rows_kernel.build_ir(spec), cc=(9, 0), num_warps=4, maxnreg=maxnreg).ptx


def test_maxnreg_caps_registers_and_rematerialises_half_widening():
    """Under maxnreg the widened bf16 row (16 values a thread) is widened again at its
    second use from the loaded words, not kept live as fp32: twice the widenings."""
    free, capped = _rms_rows_ptx("bf16", None), _rms_rows_ptx("bf16", 40)
    assert ".maxnreg" not in free and re.search(r"\.maxnreg 40\b", capped)
    assert len(_WIDENING.findall(free)) == 16
    assert len(_WIDENING.findall(capped)) == 32
    fp16 = _rms_rows_ptx("fp16", 40)
    assert len(re.findall(r"cvt\.f32\.f16", fp16)) == 32
    if assembler.can_assemble():
        assembler.check_ptx_assembles(capped, (9, 0))


@pytest.mark.parametrize("maxnreg", [8, 256, True, 64.0])
def test_bad_maxnreg_is_rejected(maxnreg):
    x = torch.randn(2048, dtype=torch.bfloat16)
    with pytest.raises(ValueError, match="maxnreg must be None or an int in \\[16, 255\\]"):
        rms_rows_kernel[(1,)](x, torch.empty_like(x), RBLOCK=2048, maxnreg=maxnreg)


def test_maxnreg_launch_runs_in_the_interpreter():
    x = torch.randn(2, 2048, dtype=torch.bfloat16)
    out = torch.full_like(x, float("nan"))
    rms_rows_kernel[(2,)](x, out, RBLOCK=2048, maxnreg=64)
    xf = x.double()
    torch.testing.assert_close(out.double(), xf * torch.rsqrt((xf * xf).mean(1, keepdim=True)), rtol=1e-2, atol=1e-2)


def _exp2_fma(x_ptr, y_ptr, out_ptr, BLOCK: dl.constexpr):
    i = dl.arange(0, BLOCK)
    y = dl.load(y_ptr + i)
    dl.store(out_ptr + i, dl.exp2(dl.load(x_ptr + i)) * y + y)


def _exp2_fma_ptx(kernel) -> str:
    spec = kernel.specialize_signature({"x_ptr": "*fp32", "y_ptr": "*fp32", "out_ptr": "*fp32"}, {"BLOCK": 128})
    return compiler.compile_ptx(kernel.build_ir(spec), cc=(9, 0), num_warps=4).ptx


def test_ftz_kernels_take_libdevice_flush_to_zero_paths():
    """@dl.kernel(ftz=True): exp2 is one ex2.approx.ftz; by default subnormal results
    are kept (ex2.approx without .ftz, behind a range check)."""
    ftz_kernel = dl.kernel(ftz=True)(_exp2_fma)
    spec = ftz_kernel.specialize_signature({"x_ptr": "*fp32", "y_ptr": "*fp32", "out_ptr": "*fp32"}, {"BLOCK": 128})
    assert ") ftz {" in ir.format_function(ftz_kernel.build_ir(spec))
    fast, exact = _exp2_fma_ptx(ftz_kernel), _exp2_fma_ptx(dl.kernel(_exp2_fma))
    assert "ex2.approx.ftz.f32" in fast
    assert "ex2.approx.f32" in exact and ".ftz" not in exact
    with pytest.raises(TypeError, match="ftz"):
        dl.kernel(ftz=1)(_exp2_fma)
    with pytest.raises(AttributeError):
        ftz_kernel.ftz = False  # the IR cache and the disk key must agree


def _divide(x_ptr, y_ptr, out_ptr, BLOCK: dl.constexpr):
    i = dl.arange(0, BLOCK)
    y = dl.load(y_ptr + i)
    dl.store(out_ptr + i, dl.fast_dividef(dl.load(x_ptr + i), y) + dl.fast_dividef(1.0, y))


def test_fast_dividef_is_an_approximate_division():
    """fp32: div.approx (.ftz in ftz kernels, where 1 / y is one rcp.approx.ftz), never
    the IEEE div.rn; fp64 divides exactly."""
    sig = {"x_ptr": "*fp32", "y_ptr": "*fp32", "out_ptr": "*fp32"}
    for ftz, want in ((False, ["div.approx.f32", "div.approx.f32"]),
                      (True, ["div.approx.ftz.f32", "rcp.approx.ftz.f32"])):
        kernel = dl.kernel(ftz=ftz)(_divide)
        ptx = compiler.compile_ptx(kernel.build_ir(kernel.specialize_signature(sig, {"BLOCK": 128})),
                                   cc=(9, 0), num_warps=4).ptx
        assert sorted(re.findall(r"(?:div|rcp)\.[a-z0-9.]+", ptx)) == sorted(want), ftz
    kernel = dl.kernel(_divide)
    sig = {"x_ptr": "*fp64", "y_ptr": "*fp64", "out_ptr": "*fp64"}
    ptx = compiler.compile_ptx(kernel.build_ir(kernel.specialize_signature(sig, {"BLOCK": 128})),
                               cc=(9, 0), num_warps=4).ptx
    assert "div.rn.f64" in ptx and "approx" not in ptx


@dl.kernel
def divide_rows_kernel(x_ptr, d_ptr, out_ptr, cols, XBLOCK: dl.constexpr, RBLOCK: dl.constexpr):
    # Every register of a row divides by the row's one divisor register.
    row = dl.program_id(0) * XBLOCK + dl.arange(0, XBLOCK)[:, None]
    col = dl.program_id(1) * RBLOCK + dl.arange(0, RBLOCK)[None, :]
    d = dl.load(d_ptr + row)
    dl.store(out_ptr + row * cols + col, dl.load(x_ptr + row * cols + col) / d)


def _f32(bits: int) -> float:
    return torch.tensor([bits], dtype=torch.int32).view(torch.float32).item()


def _check_divide_rows(x: torch.Tensor, d: torch.Tensor) -> None:
    rows, cols = x.shape
    out = torch.full_like(x, float("nan"))
    divide_rows_kernel[(rows // 2, cols // 1024)](x, d, out, cols, XBLOCK=2, RBLOCK=1024, num_warps=4)
    want = x / d[:, None]  # eager CUDA: div.rn.f32
    same = (out.view(torch.int32) == want.view(torch.int32)) | (out.isnan() & want.isnan())
    bad = (~same).nonzero()
    assert bad.numel() == 0, [(x[r, c].item(), d[r].item(), out[r, c].item(), want[r, c].item())
                              for r, c in bad[:5].tolist()]


@pytest.mark.gpu
def test_division_by_a_shared_divisor_is_ieee_division_on_gpu():
    """A divisor shared by a thread's registers takes one reciprocal and Markstein's
    correction an element (`ScalarCodegen.divide`); the quotient must be div.rn's to
    the bit: over every mantissa at the domain's edges, for divisors of every kind
    (inside the fast domain, on and just past its edges, negative, zero, subnormal,
    infinite, NaN), and for dividends that leave it (signed zeros, subnormals,
    infinities, NaNs, tiny and huge values) beside rows that stay in it."""
    torch.manual_seed(0)
    # 1. Every mantissa: x in [1, 2) scaled to the domain's extremes, over divisors
    # with many mantissas and exponents (quotients from 2**-100 to 2**120).
    mant = (torch.arange(2 ** 23, dtype=torch.int32) | 0x3F800000).view(torch.float32).cuda()
    d_mant = torch.cat([torch.tensor([1.0, _f32(0x3F800001), _f32(0x3FFFFFFF), 1.5, 1.25]),
                        1 + torch.rand(27)])
    for x_scale, d_scale in ((1.0, 1.0), (2.0 ** -80, 2.0 ** 19), (2.0 ** 99, 2.0 ** -20), (-(2.0 ** 60), 3.0)):
        d = (d_mant * d_scale).cuda()
        x = (mant * x_scale).expand(len(d), -1).contiguous()
        x[1::2] = -x[1::2]
        _check_divide_rows(x, d)
    # 2. Special divisors, each over a row of in-domain dividends (with signed zeros)
    # and a row of special ones.
    specials = [0.0, -0.0, float("inf"), -float("inf"), float("nan"), 2.0 ** -80, _f32(0x177FFFFF), 2.0 ** 100,
                _f32(0x71800001), 1e-40, -1e-40, 3.4e38, 1.17e-38, 1e-45, 7.0, -1.0]
    cols = 4096
    in_domain = torch.randn(cols) * torch.exp2(torch.randint(-70, 90, (cols,)).float())
    in_domain[::7], in_domain[3::7] = 0.0, -0.0
    special = torch.tensor(specials * (cols // len(specials))) * torch.where(torch.rand(cols) < 0.5, 1.0, -1.0)
    divisors = [1.0, 3.0, -3.0, 2.0 ** -20, 2.0 ** 20, _f32(0x357FFFFF), _f32(0x49800001), 0.0, -0.0,
                float("inf"), float("nan"), 1e-40, 1e30, 1e-30, 0.1, 1024.0]
    x = torch.stack([in_domain, special] * len(divisors)).cuda()
    d = torch.tensor([v for v in divisors for _ in (0, 1)]).cuda()
    _check_divide_rows(x, d)


def _row_var(x_ptr, var_ptr, RBLOCK: dl.constexpr, WEIGHT: dl.constexpr):
    col = dl.arange(0, RBLOCK)
    x = dl.load(x_ptr + col)
    weight = 1.0 if WEIGHT == "one" else (x == x).to(dl.float32)
    _, m2, n = dl.welford(x, 0.0, weight, 0)
    dl.store(var_ptr, m2 / n)


def test_welford_of_raw_values_divides_once_per_thread():
    """dl.welford(x, 0.0, w): each thread's 16 values make one state in two passes (one
    division for the mean), not 15 states combined one division at a time; with the
    constant weight 1 the states combine without division or lane-order selects."""
    sig = {"x_ptr": "*fp32", "var_ptr": "*fp32"}
    counts = {}
    for weight in ("one", "mask"):
        spec = dl.kernel(_row_var).specialize_signature(sig, {"RBLOCK": 2048, "WEIGHT": weight})
        ptx = compiler.compile_ptx(dl.kernel(_row_var).build_ir(spec), cc=(9, 0), num_warps=4).ptx
        counts[weight] = (len(re.findall(r"\bdiv\.rn\.f32", ptx)), len(re.findall(r"\bselp\.", ptx)))
    # Mask weights: the thread's mean, then 5 shuffle levels and a tree over 4 warps (3
    # combines), a division each, and m2 / n. Weight 1: none (n is the constant 2048).
    assert counts["one"] == (0, 0)
    assert counts["mask"][0] == 1 + 5 + 3 + 1 and counts["mask"][1] > 0


def test_welford_squares_accumulate_in_chains():
    """The 16 squared deviations of a thread (weight 1) are one multiply or fma each,
    added in `SUM_CHAINS` fma chains: the only plain adds are the mean's pairwise
    sum (15) and the joins of the chains, not a tree over the squares."""
    sig = {"x_ptr": "*fp32", "var_ptr": "*fp32"}
    spec = dl.kernel(_row_var).specialize_signature(sig, {"RBLOCK": 2048, "WEIGHT": "one"})
    ptx = compiler.compile_ptx(dl.kernel(_row_var).build_ir(spec), cc=(9, 0), num_warps=4).ptx
    count = lambda op: len(re.findall(rf"\b{re.escape(op)}\s", ptx))  # noqa: E731
    assert count("mul.f32") + count("fma.rn.f32") == 16
    assert count("add.f32") == 15 + nvptx_reduce.SUM_CHAINS - 1


_SCALE = 2.0


def _scaled(x_ptr, out_ptr, BLOCK: dl.constexpr):
    i = dl.arange(0, BLOCK)
    dl.store(out_ptr + i, dl.load(x_ptr + i) * _SCALE)


def test_cache_key_source_covers_the_constants_a_kernel_reads(monkeypatch):
    """The frontend bakes module constants into the code, so their values are part of
    the text the disk cache is keyed by."""
    k = dl.kernel(_scaled)
    before = k.key_source()
    assert before.startswith(k.source) and "_SCALE = 2.0" in before and "_exp2_fma" not in before
    monkeypatch.setattr(sys.modules[__name__], "_SCALE", 3.0)
    assert "_SCALE = 3.0" in k.key_source()


def test_multiply_add_contracts_to_fma():
    """Float a * b + c carries LLVM's contract flag and becomes one fma.rn."""
    ptx = _exp2_fma_ptx(dl.kernel(_exp2_fma))
    assert "fma.rn.f32" in ptx and "mul.rn.f32" not in ptx


def test_half_max_and_min_reduce_packed_pairs():
    """On sm_80+ a thread's fp16/bf16 values reduce two to a register (max.NaN.bf16x2 /
    f16x2) before going on in fp32; sm_75 widens each value first."""
    for dtype, packed in (("torch.bfloat16", "bf16x2"), ("torch.float16", "f16x2")):
        ptx = _compile_case(_CASES_BY_NAME[f"row_max_nan_{dtype}"], (9, 0)).ptx
        assert f"max.NaN.{packed}" in ptx and f"min.NaN.{packed}" in ptx, dtype
        old = _compile_case(_CASES_BY_NAME[f"row_max_nan_{dtype}"], (7, 5)).ptx
        assert packed not in old and "max.f32" in old, dtype
    assert "bf16x2" not in _compile_case(_CASES_BY_NAME["row_max_nan"], (9, 0)).ptx


def test_common_reductions_need_no_layout_conversion():
    # softmax/layernorm over [XBLOCK, RBLOCK]: in-warp shuffles only, no shared memory.
    for name in ("softmax_torch.float32_37x100", "layernorm_torch.float32_37x100", "row_sum_looped",
                 "row_sum_acc1d", "slice_store", "layernorm_welford_torch.float32_37x100",
                 "row_var_torch.float32_33x70"):
        out = _compile_case(_CASES_BY_NAME[name], (9, 0))
        assert out.shared_bytes == 0, name
        assert "shfl.sync.bfly" in out.ptx and "bar.sync" not in out.ptx, name
    # One row over 8 warps: the partials cross warps through shared memory.
    out = _compile_case(_CASES_BY_NAME["wide_row_3000_w8"], (9, 0))
    assert out.shared_bytes > 0 and "bar.sync" in out.ptx


@pytest.mark.parametrize("num_warps, warp_shuffles", [(4, 0), (8, 3), (16, 4), (32, 5)])
def test_warp_partials_combine_by_lane_shuffles_from_8_warps(num_warps, warp_shuffles):
    """One row's sum, max and argmax (4 state values) over ``num_warps`` warps: 5 lane
    shuffles each, then, from 8 warps on, lane i takes warp i's partial and log2(warps)
    more shuffles combine them (one shared load a value); below, each thread loads every
    partial and combines them itself."""
    case = dataclasses.replace(_CASES_BY_NAME["wide_row_1000_w4"], num_warps=num_warps)
    ptx = _compile_case(case, (9, 0)).ptx
    assert ptx.count("shfl.sync.bfly") == 4 * (5 + warp_shuffles)
    loads = re.findall(r"ld\.shared(\.v\d)?", ptx)
    if warp_shuffles:
        assert len(loads) == 4 and not any(loads)  # one scalar load a value
    else:
        assert sum(int(v[2:]) if v else 1 for v in loads) == 4 * 4  # every partial of every value


NUM_WARPS = [1, 2, 4, 8, 16, 32]
WARPS_CASES = ["add_torch.float32_1000", "copy_aligned_torch.float16", "softmax_torch.float16_5x17",
               "row_sum_looped", "wide_row_1000_w4", "row_argmin_float", "layernorm_welford_torch.float32_37x100",
               "layernorm_welford_looped_torch.float32_19x300", "row_var_torch.float64_5x200", "scalar_logic",
               "reshape_sum", "cube_sum_fp64"]
"""Cases that every ``num_warps`` must compile and run: 1-D and 2-D blocks smaller and
larger than a program's threads (replicated layouts), loops, reductions inside and
across warps (sum, max, argmin, Welford; fp32 and fp64), scalars, reshape, rank 3."""


@needs_assembler
@pytest.mark.parametrize("num_warps", NUM_WARPS)
def test_every_num_warps_compiles_and_assembles(num_warps):
    for name in WARPS_CASES:
        case = _CASES_BY_NAME[name]
        fn = case.kernel.build_ir(case.kernel.specialize(case.args, case.constexprs))
        out = compiler.compile_ptx(fn, cc=(9, 0), num_warps=num_warps)
        assert f".maxntid {32 * num_warps}" in out.ptx, name
        assembler.check_ptx_assembles(out.ptx, (9, 0))


def test_per_thread_element_limit_is_a_compilation_error():
    # 16384 fp32 elements over one warp: 512 per thread, past the limit (compiling it
    # would take LLVM tens of seconds); 4 warps bring it to 128.
    k = dsl_corpus.add_kernel
    spec = k.specialize_signature({"a_ptr": "*fp32", "b_ptr": "*fp32", "out_ptr": "*fp32", "n": "i32"},
                                  {"BLOCK": 1 << 14})
    with pytest.raises(dl.CompilationError, match=r"add_kernel, line \d+ .*512 elements in each of 32 threads "
                                                  r"\(at most 256\); use smaller blocks or more warps"):
        compiler.compile_ptx(k.build_ir(spec), cc=(9, 0), num_warps=1)
    assert nvptx.MAX_ELEMENTS_PER_THREAD == 256


def _first_use_of_program_id(ptx: str) -> str:
    """The opcode of the first instruction that reads ``%ctaid.x``'s register."""
    lines = ptx.splitlines()
    i = next(i for i, line in enumerate(lines) if "%ctaid.x" in line)
    reg = re.search(r"(%r\d+), %ctaid\.x", lines[i]).group(1)
    return next(line.split()[0] for line in lines[i + 1:] if re.search(rf",\s*{reg}\b", line))


def _add_one_ptx(kernel, dtype: str, aligned_n: bool) -> str:
    spec = kernel.specialize_signature({"x_ptr": "*" + dtype, "out_ptr": "*" + dtype, "n": "i64"}, {"BLOCK": 1024},
                                       divisible_by_16=("x_ptr", "out_ptr") + (("n",) if aligned_n else ()))
    return compiler.compile_ptx(kernel.build_ir(spec), cc=(9, 0), num_warps=4).ptx


@pytest.mark.parametrize("dtype", ["i8", "fp16"])
def test_int64_index_math_is_64_bit_in_ptx(dtype):
    # The kernel of the 2**31-element GPU test: offs = program_id(0).to(dl.int64) * BLOCK
    # + arange widens the program id before the multiply; the bound check and the
    # address math are 64-bit; with n divisible by 16 the accesses stay vectors (each
    # thread holds 8 elements: 16 bytes of fp16, 8 of int8).
    ptx = _add_one_ptx(add_one_kernel, dtype, aligned_n=False)
    first = _first_use_of_program_id(ptx)
    assert first.startswith(("mul.wide.", "cvt.u64.u32", "cvt.s64.s32")), first
    assert re.search(r"setp\.lt\.s64", ptx) and ".param .u64 add_one_kernel_param_2" in ptx
    ptx = _add_one_ptx(add_one_kernel, dtype, aligned_n=True)
    want = ".v4.b32" if dtype == "fp16" else ".v2.b32"
    assert sorted(set(re.findall(r"(?:ld|st)\.global\S*", ptx))) == ["ld.global" + want, "st.global" + want]


def test_int32_index_math_stays_32_bit_in_ptx():
    # Without .to(dl.int64) the index is int32 (and would wrap past 2**31), as in Triton.
    first = _first_use_of_program_id(_add_one_ptx(copy_kernel, "fp16", aligned_n=False))
    assert first.endswith((".s32", ".b32", ".u32")) and not first.startswith("mul.wide"), first


def test_param_types_and_llvm_ir():
    out = _compile_case(_CASES_BY_NAME["clamp_torch.float32"], (9, 0))
    assert out.param_types == ("ptr", "ptr", "i32", "f32", "f32")
    assert out.cc == (9, 0) and out.num_warps == 4
    assert "@clamp_kernel(" in out.llvm_ir
    assert ".maxntid 128" in out.ptx


# ----------------------------------------------------------------------------- CPU: layouts, axis info


def _owners(layout, shape, num_warps):
    """element -> list of (warp, lane, reg) holding it, from the distribution's bases."""
    dist = distribute(layout, shape)
    owners = {}
    for warp, lane, reg in itertools.product(range(num_warps), range(32), range(dist.num_regs)):
        coord = list(dist.reg_offsets[reg])
        for bits, bases in ((lane, dist.lane_bases), (warp, dist.warp_bases)):
            for i, base in enumerate(bases):
                if bits >> i & 1:
                    coord = [a ^ b for a, b in zip(coord, base)]
        owners.setdefault(tuple(coord), []).append((warp, lane, reg))
    return dist, owners


@pytest.mark.parametrize("shape,warps,vec", [((1024,), 4, 4), ((8, 128), 4, 4), ((64, 16), 8, 4), ((1, 2048), 8, 8),
                                             ((2, 2), 4, 1), ((4, 8, 16), 2, 2), ((1,), 1, 1), ((64,), 32, 1),
                                             ((4, 32), 16, 1), ((8, 1024), 32, 4), ((2, 64), 2, 2)])
def test_blocked_layout_places_every_element(shape, warps, vec):
    layout = default_blocked_layout(shape, warps, vec=vec)
    dist, owners = _owners(layout, shape, warps)
    assert sorted(owners) == sorted(itertools.product(*(range(s) for s in shape)))
    copies = {len(v) for v in owners.values()}
    assert len(copies) == 1  # every element has the same number of copies
    # Exactly one copy of each element lives in a thread the store mask keeps.
    for holders in owners.values():
        primary = [h for h in holders if not (h[1] & dist.replica_lane_mask or h[0] & dist.replica_warp_mask)]
        assert len(primary) == 1
    # Registers of one thread are distinct elements.
    assert len(set(dist.reg_offsets)) == dist.num_regs


def test_slice_layout_matches_parent_rows():
    parent = BlockedLayout((1, 4), (2, 16), (4, 1), (1, 0))
    sliced = distribute(SliceLayout(parent, 1), (8,))
    full = distribute(parent, (8, 64))
    # A thread's rows in the slice are the rows it holds in the parent.
    assert [b[0] for b in full.lane_bases] == [b[0] for b in sliced.lane_bases]
    assert [b[0] for b in full.warp_bases] == [b[0] for b in sliced.warp_bases]
    assert not any(b[0] for b in sliced.lane_bases[:4])  # column lanes hold copies of a row


def test_axis_info_proves_alignment():
    spec = dsl_corpus.add_kernel.specialize((torch.zeros(64), torch.zeros(64), torch.zeros(64), 4096),
                                            {"BLOCK": 1024})
    fn = dsl_corpus.add_kernel.build_ir(spec)
    info = axis_info.analyze(fn)
    loads = [op for op in fn.walk() if op.opcode == "load"]
    ptr, mask = info[loads[0].operands[0].id], info[loads[0].operands[1].id]
    assert ptr.contiguity == (1024,) and ptr.divisibility[0] >= 16
    assert mask.constancy[0] >= 16  # offs < n with n % 16 == 0: uniform over 16 elements
    assert axis_info.vector_width(ptr, 4, 0, mask) == 4
    assert axis_info.vector_width(ptr, 2, 0, mask) == 8
    assert spec.args[3].divisible_by_16


def test_axis_info_arithmetic():
    b = FnBuilder("k")
    n = b.arg("n", ir.int32, div16=True)
    idx = b.binary("add", b.splat(b.binary("mul", n, b.const(4, ir.int32)), (256,)), b.arange(256))
    mod = b.binary("mod", idx, b.const(96, ir.int32, (256,)))
    div = b.binary("floordiv", idx, b.const(64, ir.int32, (256,)))
    info = axis_info.analyze(b.function())
    assert info[idx.id].contiguity == (256,) and info[idx.id].divisibility == (64,)
    assert info[mod.id].contiguity == (32,)  # wraps every 96 = 3 * 32
    assert info[div.id].constancy == (64,) and info[div.id].contiguity == (1,)


# ----------------------------------------------------------------------------- CPU: toolchain, errors


def test_libdevice_found_without_cuda_home(monkeypatch):
    monkeypatch.delenv("CUDA_HOME", raising=False)
    monkeypatch.delenv("CUDA_PATH", raising=False)
    path = libdevice.find_libdevice()
    assert os.path.isfile(path) and path.endswith("libdevice.10.bc")


def test_libdevice_missing_says_what_to_install(monkeypatch):
    for finder in ("_from_env", "_from_pathfinder", "_from_ptxas"):
        monkeypatch.setattr(libdevice, finder, lambda: None)
    monkeypatch.setattr(libdevice, "_candidate_from_root", lambda root: "/nonexistent/libdevice.10.bc")
    with pytest.raises(FileNotFoundError, match="nvidia-nvvm"):
        libdevice.find_libdevice()


def test_toolchain_versions():
    v = compiler.toolchain_versions()
    assert set(v) == {"llvmlite", "llvm", "libdevice", "assembler", "dsl_source"}
    assert v["llvm"].startswith(tuple("0123456789")) and len(v["dsl_source"]) == 64


@needs_assembler
def test_bad_ptx_error_names_kernel():
    ptx = _ptx("add_torch.float32_1000").replace("ret;", "bogus.instruction;")
    with pytest.raises(RuntimeError, match="add_kernel"):
        assembler.check_ptx_assembles(ptx, (9, 0))


def test_unsupported_ir_raises_compilation_error():
    b = FnBuilder("odd_block")
    x_ptr = b.arg("x_ptr", ir.float32, ptr=True)
    b.store(b.binary("add", b.splat(x_ptr, (100,)), b.arange(100)), b.const(1.0, ir.float32, (100,)))
    with pytest.raises(dl.CompilationError, match="odd_block.*power of two"):
        compiler.compile_ptx(b.function(), cc=(9, 0), num_warps=4)
    with pytest.raises(dl.CompilationError, match="num_warps"):
        compiler.compile_ptx(scalar_sum_kernel(64), cc=(9, 0), num_warps=3)


def _case(name: str, **changes) -> dsl_corpus.Case:
    return dataclasses.replace(next(c for c in _all_cases("cpu") if c.name == name), **changes)


@needs_assembler
@pytest.mark.parametrize("num_stages", [2, 3])
def test_num_stages_streams_loop_loads_through_shared_memory(num_stages):
    """bf16 rows of 1024 over 4 warps: one 16-byte copy a thread an iteration, issued
    num_stages - 1 iterations ahead into num_stages - 1 buffers of 128 x 16 bytes; no
    global load is left; the loop waits for all but num_stages - 2 groups, then reads
    the buffer and only then refills it."""
    plain = _compile_case(_case("softmax_row_loop_torch.bfloat16_9x1008"), (9, 0))
    out = _compile_case(_case("softmax_row_loop_torch.bfloat16_9x1008", num_stages=num_stages), (9, 0))
    assembler.check_ptx_assembles(out.ptx, (9, 0))
    copies = re.findall(r"cp\.async\.cg\.shared\.global \[%rd\d+\], \[%rd\d+\], 16, %r\d+;", out.ptx)
    assert len(copies) == num_stages  # the prologue's num_stages - 1, the loop's one
    assert f"cp.async.wait_group {num_stages - 2};" in out.ptx and "cp.async.wait_group 0;" in out.ptx
    assert out.ptx.count("cp.async.commit_group;") == num_stages
    assert not re.search(r"ld\.global", out.ptx) and re.search(r"ld\.global", plain.ptx)
    assert "cp.async" not in plain.ptx
    assert out.shared_bytes == (num_stages - 1) * 128 * 16 + plain.shared_bytes
    loop = out.ptx[out.ptx.index(f"cp.async.wait_group {num_stages - 2};"):]
    assert loop.index("ld.shared") < loop.index("cp.async.cg.shared.global")


@needs_assembler
def test_repeated_loop_load_reads_the_first_ones_buffer():
    """The row loaded twice an iteration (fp32, 512 columns over 4 warps: one 16-byte
    copy a thread) is copied once and read twice from one buffer, and the refill
    follows the second read; w and b (loop-invariant addresses) stay global loads."""
    name = "layernorm_row_loop_torch.float32_11x304"
    out = _compile_case(_case(name, num_stages=2), (9, 0))
    assembler.check_ptx_assembles(out.ptx, (9, 0))
    assert len(re.findall(r"cp\.async\.cg\.shared\.global", out.ptx)) == 2  # the prologue's, the loop's
    assert len(re.findall(r"ld\.global", out.ptx)) == 2
    assert out.shared_bytes == 128 * 16 + _compile_case(_case(name), (9, 0)).shared_bytes
    slot = re.search(r"cp\.async\.cg\.shared\.global (\[%rd\d+\])", out.ptx).group(1)
    assert out.ptx.count(f"}}, {slot};") == 2  # two reads of this thread's slot
    refill = [m.start() for m in re.finditer(r"cp\.async\.cg\.shared\.global", out.ptx)][1]
    block = out.ptx[out.ptx.rindex("$L__BB", 0, refill):refill]  # the refill's basic block, up to it
    assert f"}}, {slot};" in block


@pytest.mark.parametrize("name, copy", [
    ("grid_stride_loop_torch.int8_256", r"cp\.async\.ca\.shared\.global \[%rd\d+\], \[%rd\d+\], 4, %r\d+;"),
    ("grid_stride_loop_torch.float64_128", r"cp\.async\.ca\.shared\.global \[%rd\d+\], \[%rd\d+\], 8, %r\d+;"),
    ("grid_stride_loop_torch.int8_64", None),  # 2 bytes a thread: narrower than any copy
    ("row_sum_pointer_loop", None),  # the pointer is loop-carried
])
def test_which_loads_are_pipelined(name, copy):
    ptx = _compile_case(_case(name, num_stages=2), (9, 0)).ptx
    if copy is None:
        assert "cp.async" not in ptx
    else:
        assert len(re.findall(copy, ptx)) == 2
    assert "cp.async" not in _compile_case(_case(name, num_stages=2), (7, 5)).ptx  # sm_80 and newer only


@dl.kernel
def ticket_kernel(count_ptr, out_ptr, value, GROUPS: dl.constexpr, MASKED: dl.constexpr, SEM: dl.constexpr,
                  SCOPE: dl.constexpr):
    pid = dl.program_id(0)
    mask = pid % 5 != 4 if MASKED else None
    dl.store(out_ptr + pid, dl.atomic_add(count_ptr + pid % GROUPS, value, mask=mask, sem=SEM, scope=SCOPE))


@dl.kernel
def atomic_in_loop_kernel(x_ptr, count_ptr, n, BLOCK: dl.constexpr):
    for start in range(dl.program_id(0) * BLOCK, n, dl.num_programs(0) * BLOCK):
        x = dl.load(x_ptr + start + dl.arange(0, BLOCK), mask=start + dl.arange(0, BLOCK) < n, other=0.0)
        dl.atomic_add(count_ptr, dl.sum(x, 0))


def _ticket_ptx(dtype, masked: bool, sem: str, scope: str, num_stages: int = 1):
    args = (torch.zeros(3, dtype=dtype), torch.zeros(8, dtype=dtype), 1)
    constexprs = {"GROUPS": 3, "MASKED": masked, "SEM": sem, "SCOPE": scope}
    fn = ticket_kernel.build_ir(ticket_kernel.specialize(args, constexprs))
    return compiler.compile_ptx(fn, cc=(9, 0), num_warps=4).ptx


@needs_assembler
@pytest.mark.parametrize("dtype, sem, scope, suffix", [
    (torch.int32, "acq_rel", "gpu", "u32"), (torch.int64, "relaxed", "cta", "u64"),
    (torch.float32, "release", "sys", "f32"), (torch.float64, "acquire", "gpu", "f64")])
@pytest.mark.parametrize("masked", [False, True])
def test_atomic_is_one_thread_between_barriers(dtype, sem, scope, suffix, masked):
    ptx = _ticket_ptx(dtype, masked, sem, scope)
    assembler.check_ptx_assembles(ptx, (9, 0))
    atom = f"atom.{sem}.{scope}.global.add.{suffix}"
    assert ptx.count(atom) == 1
    # barrier; thread 0 (the others branch past) does the atomic and parks the old value
    # in shared memory; barrier; every thread reads it back.
    marks = ["bar.sync", "bra", atom, "st.shared", "bar.sync", "ld.shared"]
    at = 0
    for mark in marks:
        at = ptx.index(mark, at) + len(mark)
    assert bool(re.search(r"@\$?%?\w+ " + re.escape(atom), ptx)) == masked


def test_loops_with_an_atomic_are_not_pipelined():
    args = (torch.zeros(100), torch.zeros(1), 100)
    fn = atomic_in_loop_kernel.build_ir(atomic_in_loop_kernel.specialize(args, {"BLOCK": 128}))
    assert "cp.async" not in compiler.compile_ptx(fn, cc=(9, 0), num_warps=4, num_stages=3).ptx
    assert "cp.async" in _compile_case(_case("grid_stride_loop", num_stages=3), (9, 0)).ptx


# ----------------------------------------------------------------------------- GPU


@functools.lru_cache(maxsize=None)
def _gpu_cases() -> dict[str, dsl_corpus.Case]:
    return {c.name: c for c in _all_cases("cuda")}


_ALL_NAMES = [c.name for c in _all_cases("cpu")]
assert len(set(_ALL_NAMES)) == len(_ALL_NAMES), "case names must be unique"


@pytest.mark.gpu
@pytest.mark.parametrize("name", _ALL_NAMES)
def test_case_on_gpu(name):
    dsl_corpus.check(_gpu_cases()[name])


def _launch_ir(fn: ir.Function, grid, args, num_warps: int) -> None:
    from inductor_lite.runtime import CompiledBinary, LoadedKernel, driver

    device = torch.cuda.current_device()
    cc = torch.cuda.get_device_capability(device)
    out = compiler.compile_ptx(fn, cc=cc, num_warps=num_warps)
    with driver.bound_context(device):
        cubin = assembler.ptx_to_cubin(out.ptx, cc)
    binary = CompiledBinary(name=out.name, cubin=cubin, shared_bytes=out.shared_bytes, num_warps=num_warps,
                            param_types=out.param_types, cc=cc, ptx=out.ptx, llvm_ir=out.llvm_ir)
    LoadedKernel(binary, device).launch(grid, args)
    torch.cuda.synchronize()


@functools.lru_cache(maxsize=None)
def _gpu_cases_with_warps(num_warps: int) -> dict[str, dsl_corpus.Case]:
    return {c.name: dataclasses.replace(c, num_warps=num_warps) for c in _all_cases("cuda")}


@pytest.mark.gpu
@pytest.mark.parametrize("num_warps", NUM_WARPS)
@pytest.mark.parametrize("name", WARPS_CASES)
def test_every_num_warps_on_gpu(name, num_warps):
    dsl_corpus.check(_gpu_cases_with_warps(num_warps)[name])


_LOOP_NAMES = [c.name for c in _all_cases("cpu") if re.search(r"\bfor .* in range\(", c.kernel.source)]


@functools.lru_cache(maxsize=None)
def _gpu_cases_with_stages(num_stages: int) -> dict[str, dsl_corpus.Case]:
    return {c.name: dataclasses.replace(c, num_stages=num_stages) for c in _all_cases("cuda")}


@pytest.mark.gpu
@pytest.mark.parametrize("num_stages", [2, 3])
@pytest.mark.parametrize("name", _LOOP_NAMES)
def test_loop_cases_pipelined_on_gpu(name, num_stages):
    dsl_corpus.check(_gpu_cases_with_stages(num_stages)[name])


@pytest.mark.gpu
@pytest.mark.parametrize("dtype", [torch.int32, torch.int64, torch.float32, torch.float64])
def test_atomic_add_hands_out_every_ticket_once_on_gpu(dtype):
    # 4099 programs add 3 to count[p % 3] unless p % 5 == 4; whatever the order, each
    # group's old values are its start plus 0, 3, 6, ... and masked programs get 0.
    n, start = 4099, [10, 20, 30]
    count = torch.tensor(start, dtype=dtype, device="cuda")
    out = torch.full((n,), -1, dtype=dtype, device="cuda")
    ticket_kernel[(n,)](count, out, 3, GROUPS=3, MASKED=True, SEM="acq_rel", SCOPE="gpu")
    pid, got = torch.arange(n), out.cpu().double()
    active = pid % 5 != 4
    assert (got[~active] == 0).all()
    for g in range(3):
        mine = active & (pid % 3 == g)
        k = int(mine.sum())
        assert torch.equal(got[mine].sort().values, start[g] + 3 * torch.arange(k, dtype=torch.float64))
        assert count[g].item() == start[g] + 3 * k


@pytest.mark.gpu
@pytest.mark.parametrize("dtype", [torch.int8, torch.float16])
def test_int64_indexing_past_2_to_the_31_elements_on_gpu(dtype):
    n = 2**31 + 17  # 2 GiB of int8 / 4 GiB of fp16 per tensor; byte offsets pass 2**31 (and 2**32)
    if torch.cuda.mem_get_info()[0] < 12 * 2**30:
        pytest.skip("needs 12 GB of free GPU memory")
    x = torch.randint(-100, 100, (n,), dtype=dtype, device="cuda")
    out = torch.full((n,), 127 if dtype == torch.int8 else float("nan"), dtype=dtype, device="cuda")
    try:
        add_one_kernel[(dl.cdiv(n, 1024),)](x, out, n, BLOCK=1024)
        chunk = 1 << 28
        for start in range(0, n, chunk):  # every element, the last 17 past 2**31 included
            assert torch.equal(out[start:start + chunk], x[start:start + chunk] + 1), start
    finally:
        del x, out
        torch.cuda.empty_cache()


@pytest.mark.gpu
def test_scalar_reduction_on_gpu():
    x = torch.randn(1024, device="cuda")
    out = torch.full((1,), float("nan"), device="cuda")
    _launch_ir(scalar_sum_kernel(1024), (1,), (x, out), num_warps=4)
    torch.testing.assert_close(out[0], x.sum(), rtol=1e-5, atol=1e-4)
