"""The DSL frontend: typing and promotion, the IR it emits, loops and constexpr control
flow, specialisation keys, and the CompilationErrors it raises."""

import linecache
import pickle

import pytest
import torch

import dsl_corpus
import inductor_lite.dsl as dl
from inductor_lite.dsl import ir
from inductor_lite.dsl.verifier import VerificationError, verify


def ops(fn: ir.Function, opcode: str) -> list[ir.Op]:
    return [op for op in fn.walk() if op.opcode == opcode]


def build(kernel, signature: dict, **constexprs) -> ir.Function:
    return kernel.build_ir(kernel.specialize_signature(signature, constexprs))


@dl.kernel
def binop_kernel(a_ptr, b_ptr, out_ptr, OP: dl.constexpr, LITERAL: dl.constexpr):
    a = dl.load(a_ptr)
    b = dl.load(b_ptr) if LITERAL is None else LITERAL
    if OP == "+":
        r = a + b
    elif OP == "/":
        r = a / b
    elif OP == "&":
        r = a & b
    else:
        r = a < b
    dl.store(out_ptr, r)


@pytest.mark.parametrize("a, b, op, literal, want", [
    ("fp16", "fp16", "+", None, dl.float32),     # half types compute in fp32
    ("fp16", "bf16", "+", None, dl.float32),
    ("bf16", "fp32", "+", None, dl.float32),
    ("fp32", "fp64", "+", None, dl.float64),
    ("i32", "fp16", "+", None, dl.float32),
    ("i32", "i64", "+", None, dl.int64),
    ("i8", "u8", "+", None, dl.uint8),           # unsigned wins at equal width (Triton)
    ("u8", "i16", "+", None, dl.int16),
    ("i1", "i1", "+", None, dl.int32),           # no arithmetic on int1
    ("i1", "i1", "&", None, dl.int1),
    ("i1", "i8", "&", None, dl.int8),
    ("i32", "i32", "/", None, dl.float32),
    ("i64", "i64", "/", None, dl.float32),
    ("fp64", "i32", "/", None, dl.float64),
    ("fp16", "fp16", "<", None, dl.int1),
    ("i8", "i8", "+", 1, dl.int8),               # int literals are weak ...
    ("i8", "i8", "+", 1000, dl.int32),           # ... unless they do not fit
    ("i32", "i32", "+", 2**40, dl.int64),
    ("u8", "u8", "+", -1, dl.int32),
    ("i32", "i32", "+", 1.5, dl.float32),
    ("fp16", "fp16", "+", 2.0, dl.float32),
    ("fp64", "fp64", "+", 2.0, dl.float64),
    ("fp64", "fp64", "+", True, dl.float64),
    ("i1", "i1", "&", True, dl.int1),
])
def test_promotion(a, b, op, literal, want):
    fn = build(binop_kernel, {"a_ptr": "*" + a, "b_ptr": "*" + b, "out_ptr": "*fp64"}, OP=op, LITERAL=literal)
    (result,) = ops(fn, "compare" if op == "<" else "binary")
    assert result.result.type.element == want
    assert result.operands[0].type == result.operands[1].type or op == "<"


def test_one_d_kernel_ir():
    fn = build(dsl_corpus.add_kernel, {"a_ptr": "*fp16", "b_ptr": "*fp16", "out_ptr": "*fp16", "n": "i32"},
               BLOCK=128)
    assert [a.name for a in fn.args] == ["a_ptr", "b_ptr", "out_ptr", "n"]
    assert fn.constexprs == {"BLOCK": 128}
    (arange,) = ops(fn, "arange")
    assert arange.attrs == {"start": 0, "end": 128} and arange.result.type == ir.BlockType(dl.int32, (128,))
    loads = ops(fn, "load")
    assert len(loads) == 2 and all(len(ld.operands) == 3 for ld in loads)  # mask without other -> other = 0
    assert all(ld.operands[2].type.element == dl.float16 for ld in loads)
    (add,) = [op for op in ops(fn, "binary") if op.result.type.element == dl.float32]
    (store,) = ops(fn, "store")
    assert store.operands[1].type == ir.BlockType(dl.float16, (128,))
    assert [op.opcode for op in fn.body.ops].count("cast") == 3  # two up, one down
    assert store.loc.line.strip().startswith("dl.store(out_ptr")
    assert ir.format_function(fn).startswith("func add_kernel(")


def test_every_corpus_kernel_passes_the_verifier():
    for case in dsl_corpus.cases():
        verify(case.kernel.build_ir(case.kernel.specialize(case.args, case.constexprs)))


def test_verifier_rejects_half_arithmetic():
    x = ir.Value(ir.BlockType(dl.float16))
    op = ir.Op("binary", [x, x], [ir.Value(ir.BlockType(dl.float16))], {"op": "add"})
    fn = ir.Function("bad", [ir.ArgSpec("x", x.type)], [x], ir.Block([op]))
    with pytest.raises(VerificationError, match="half"):
        verify(fn)
    undefined = ir.Value(ir.BlockType(dl.float32))
    op = ir.Op("math", [undefined], [ir.Value(undefined.type)], {"fn": "exp"})
    with pytest.raises(VerificationError, match="not defined"):
        verify(ir.Function("bad", [], [], ir.Block([op])))


@dl.kernel
def welford_ir_kernel(x_ptr, out_ptr, KEEP: dl.constexpr):
    x = dl.load(x_ptr + dl.arange(0, 4)[:, None] * 8 + dl.arange(0, 8)[None, :])
    mean, m2, w = dl.welford_combine(x, 0.0, 1, x, x, True)
    mean, m2, w = dl.welford(mean, m2, w, -1, keep_dims=KEEP)
    total = mean + m2 + w
    dl.store(out_ptr + dl.arange(0, 4)[:, None], total if KEEP else total[:, None])


@pytest.mark.parametrize("x, compute", [("fp16", dl.float32), ("bf16", dl.float32), ("i32", dl.float32),
                                        ("fp32", dl.float32), ("fp64", dl.float64)])
def test_welford_ir(x, compute):
    fn = build(welford_ir_kernel, {"x_ptr": "*" + x, "out_ptr": "*fp32"}, KEEP=True)
    combine, reduce = ops(fn, "welford_combine")
    # Elementwise form: 6 operands (numbers and int1 included) of one float type and shape, no axis.
    assert "axis" not in combine.attrs and len(combine.operands) == 6
    assert {v.type for v in combine.operands + combine.results} == {ir.BlockType(compute, (4, 8))}
    # Reduction form: the 3 states, a normalised axis, results without it.
    assert reduce.attrs == {"axis": 1} and reduce.operands == combine.results
    assert [r.type for r in reduce.results] == [ir.BlockType(compute, (4,))] * 3
    kept = [op for op in ops(fn, "expand_dims") if op.operands[0] in reduce.results]
    assert [op.attrs["axis"] for op in kept] == [1, 1, 1]  # keep_dims
    fn = build(welford_ir_kernel, {"x_ptr": "*" + x, "out_ptr": "*fp32"}, KEEP=False)
    (reduce,) = [op for op in ops(fn, "welford_combine") if "axis" in op.attrs]
    assert not [op for op in ops(fn, "expand_dims") if op.operands[0] in reduce.results]


def _welford_fn(operand_types, result_types, axis=None) -> ir.Function:
    args = [ir.Value(t) for t in operand_types]
    attrs = {} if axis is None else {"axis": axis}
    op = ir.Op("welford_combine", args, [ir.Value(t) for t in result_types], attrs)
    return ir.Function("w", [ir.ArgSpec(f"a{i}", t) for i, t in enumerate(operand_types)], args, ir.Block([op]))


def test_verifier_checks_both_welford_forms():
    f32, f16 = ir.BlockType(dl.float32), ir.BlockType(dl.float16)
    verify(_welford_fn([f32] * 6, [f32] * 3))
    for operands, results, axis, match in [
        ([f32] * 3, [f32] * 3, None, "6 operands"),
        ([f32] * 6, [f32] * 3, 0, "3 operands"),
        ([f32] * 3, [f32] * 3, 0, "axis 0 for float32"),  # scalars have no axis
        ([f16] * 6, [f16] * 3, None, "fp32 or fp64"),
        ([f32] * 5 + [ir.BlockType(dl.float64)], [f32] * 3, None, "one fp32 or fp64 type"),
        ([f32] * 6, [f32] * 2, None, "3 result"),
        ([f32] * 6, [f32, f32, ir.BlockType(dl.float64)], None, "results must be float32"),
    ]:
        with pytest.raises(VerificationError, match=match):
            verify(_welford_fn(operands, results, axis))


@dl.kernel
def loop_kernel(x_ptr, out_ptr, n, BLOCK: dl.constexpr):
    acc = 0.0
    count = 0
    for start in range(0, n, BLOCK):
        offs = start + dl.arange(0, BLOCK)
        acc = acc + dl.load(x_ptr + offs, mask=offs < n)
        count += 1
    dl.store(out_ptr + dl.arange(0, BLOCK), acc / count)


def test_range_loop_carries_names_defined_before_it():
    fn = build(loop_kernel, {"x_ptr": "*fp32", "out_ptr": "*fp32", "n": "i32"}, BLOCK=16)
    (loop,) = ops(fn, "for")
    # acc starts as a Python float and takes the block type the body gives it
    assert [r.type for r in loop.results] == [ir.BlockType(dl.float32, (16,)), ir.BlockType(dl.int32)]
    assert loop.attrs["iv"].type == ir.BlockType(dl.int32)
    assert loop.attrs["body"].ops[-1].opcode == "yield"
    x = torch.randn(40)
    out = torch.full((16,), float("nan"))
    loop_kernel[(1,)](x, out, 40, BLOCK=16)
    want = torch.nn.functional.pad(x, (0, 8)).reshape(3, 16).sum(0) / 3
    torch.testing.assert_close(out, want)


def test_int64_bounds_give_an_int64_induction_variable():
    fn = build(loop_kernel, {"x_ptr": "*fp32", "out_ptr": "*fp32", "n": "i64"}, BLOCK=16)
    assert ops(fn, "for")[0].attrs["iv"].type == ir.BlockType(dl.int64)


@dl.kernel
def static_kernel(out_ptr, N: dl.constexpr, FLAG: dl.constexpr):
    acc = dl.zeros([4], dl.int32)
    for i in dl.static_range(N):
        if i % 2 == 0 and FLAG:
            acc = acc + i
    dl.store(out_ptr + dl.arange(0, 4), acc)


def test_static_range_unrolls_and_constexpr_if_folds():
    fn = build(static_kernel, {"out_ptr": "*i32"}, N=5, FLAG=True)
    assert not ops(fn, "for")
    def int_adds(fn):
        return [op for op in ops(fn, "binary") if op.attrs["op"] == "add" and op.result.type.element == dl.int32]

    assert len(int_adds(fn)) == 3  # i = 0, 2, 4
    assert not int_adds(build(static_kernel, {"out_ptr": "*i32"}, N=5, FLAG=False))
    out = torch.zeros(4, dtype=torch.int32)
    static_kernel[(1,)](out, N=5, FLAG=True)
    assert out.tolist() == [6] * 4


@dl.kernel
def picked_loop_kernel(out_ptr, n, UNROLL: dl.constexpr):
    acc = dl.zeros([4], dl.int32)
    for i in (dl.static_range(3) if UNROLL else range(n)):
        acc = acc + i
    dl.store(out_ptr + dl.arange(0, 4), acc)


def test_a_constexpr_picks_the_loop_kind():
    """``range(...) if FLAG else dl.static_range(...)``: one body, unrolled or an IR loop."""
    assert not ops(build(picked_loop_kernel, {"out_ptr": "*i32", "n": "i32"}, UNROLL=True), "for")
    assert len(ops(build(picked_loop_kernel, {"out_ptr": "*i32", "n": "i32"}, UNROLL=False), "for")) == 1
    for unroll, want in ((True, 3), (False, 10)):
        out = torch.zeros(4, dtype=torch.int32)
        picked_loop_kernel[(1,)](out, 5, UNROLL=unroll)
        assert out.tolist() == [want] * 4


def test_specialization_rules_and_key():
    aligned = torch.randn(64)
    spec = dsl_corpus.copy_kernel.specialize((aligned, aligned[1:], 32), {"BLOCK": 16})
    assert [a.type for a in spec.args] == [ir.BlockType(ir.PointerType(dl.float32))] * 2 + [ir.BlockType(dl.int32)]
    assert [a.divisible_by_16 for a in spec.args] == [aligned.data_ptr() % 16 == 0, False, True]
    assert spec.key() == f"x_ptr:*fp32{':16' if aligned.data_ptr() % 16 == 0 else ''},out_ptr:*fp32,n:i32:16|BLOCK=16"
    assert spec == dsl_corpus.copy_kernel.specialize((aligned, aligned[1:], 32), {"BLOCK": 16})
    assert spec is dsl_corpus.copy_kernel.specialize((aligned, aligned[1:], 48), {"BLOCK": 16})  # interned
    copy = pickle.loads(pickle.dumps(spec))
    assert copy == spec and hash(copy) == hash(spec) and copy.key() == spec.key()
    kinds = dsl_corpus.copy_kernel.specialize((aligned, aligned, 2**31), {"BLOCK": 16}).args[2]
    assert kinds.type == ir.BlockType(dl.int64)
    assert dsl_corpus.copy_kernel.specialize((aligned, aligned, True), {"BLOCK": 16}).args[2].type.element == dl.int32
    assert dsl_corpus.clamp_kernel.specialize((aligned, aligned, 3, 0.5, 2), {"BLOCK": 16}).args[3].type.element \
        == dl.float32
    keys = {dsl_corpus.copy_kernel.specialize((aligned, aligned, 3), {"BLOCK": v}).key() for v in (1, 1.0, True)}
    assert len(keys) == 3


def test_specialize_signature_matches_specialize_and_builds_are_cached():
    k = dsl_corpus.copy_kernel
    by_sig = k.specialize_signature({"x_ptr": "*fp32", "out_ptr": "*fp32", "n": "i32"}, {"BLOCK": 16},
                                    divisible_by_16=("x_ptr", 1, "n"))
    x = torch.randn(64)
    by_args = k.specialize((x, x, 32), {"BLOCK": 16})
    if x.data_ptr() % 16 == 0:
        assert by_sig == by_args
    assert k.build_ir(by_sig) is k.build_ir(by_sig)
    with pytest.raises(ValueError, match="unknown argument type"):
        k.specialize_signature({"x_ptr": "*f32", "out_ptr": "*fp32", "n": "i32"}, {"BLOCK": 16})
    with pytest.raises(TypeError, match="exactly the runtime arguments"):
        k.specialize_signature({"x_ptr": "*fp32", "n": "i32"}, {"BLOCK": 16})


def test_equal_to_1_arguments_fold_to_a_constant():
    k = dsl_corpus.copy_kernel
    spec = k.specialize_signature({"x_ptr": "*fp32", "out_ptr": "*fp32", "n": "i32"}, {"BLOCK": 16})
    folded = type(spec)(spec.args[:2] + (ir.ArgSpec("n", spec.args[2].type, equal_to_1=True),), spec.constexprs)
    fn = k.build_ir(folded)
    n_value = fn.arg_values[2]
    assert not any(n_value in op.operands for op in fn.walk())
    assert any(op.attrs.get("value") == 1 and op.result.type == ir.BlockType(dl.int32) for op in ops(fn, "constant"))
    assert folded.key().endswith("n:i32:1|BLOCK=16")


def test_kernel_attributes():
    k = dsl_corpus.row_arg_kernel
    assert k.name == "row_arg_kernel" and k.fn.__name__ == "row_arg_kernel"
    assert k.arg_names == ["x_ptr", "out_ptr", "rows", "cols", "FILL", "ARGMAX", "XBLOCK", "RBLOCK"]
    assert k.constexpr_names == ["FILL", "ARGMAX", "XBLOCK", "RBLOCK"]
    assert k.runtime_arg_names == ["x_ptr", "out_ptr", "rows", "cols"]
    assert k.source.startswith("@dl.kernel\ndef row_arg_kernel(")


def _exec_kernel(source: str, filename: str, extra_globals=None):
    """How generated code defines kernels: register the text in linecache, then exec."""
    linecache.cache[filename] = (len(source), None, source.splitlines(True), filename)
    scope = {"dl": dl, **(extra_globals or {})}
    exec(compile(source, filename, "exec"), scope)
    return scope


GENERATED = '''from __future__ import annotations
import math
import inductor_lite.dsl as dl

@dl.kernel
def poi_generated_0(in_ptr0, out_ptr0, xnumel, XBLOCK: dl.constexpr):
    xindex = dl.program_id(0) * XBLOCK + dl.arange(0, XBLOCK)
    xmask = xindex < xnumel
    tmp0 = dl.load(in_ptr0 + xindex, mask=xmask, other=0.0)
    tmp1 = tmp0 * SCALE + math.log2(XBLOCK)
    dl.store(out_ptr0 + xindex, tmp1, mask=xmask)
'''


def test_generated_kernels_with_string_annotations_and_globals():
    scope = _exec_kernel(GENERATED, "<inductor_lite-generated-test-0>", {"SCALE": 3})
    k = scope["poi_generated_0"]
    assert k.constexpr_names == ["XBLOCK"]
    assert k.source.startswith("@dl.kernel\ndef poi_generated_0")
    x = torch.randn(100)
    out = torch.full((100,), float("nan"))
    k[(dl.cdiv(100, 64),)](x, out, 100, XBLOCK=64)
    torch.testing.assert_close(out, x * 3 + 6)


def test_closure_constants_resolve():
    def make(scale):
        @dl.kernel
        def scaled(x_ptr, out_ptr, BLOCK: dl.constexpr):
            offs = dl.arange(0, BLOCK)
            dl.store(out_ptr + offs, dl.load(x_ptr + offs) * scale)
        return scaled

    x, out = torch.randn(8), torch.zeros(8)
    make(2.5)[(1,)](x, out, BLOCK=8)
    torch.testing.assert_close(out, x * 2.5)


ERRORS = {
    "arange_not_pow2": ("x = dl.arange(0, 12)", "the length 12 must be a power of 2"),
    "arange_runtime_bound": ("x = dl.arange(0, n)", "arange bounds must be constexpr ints"),
    "while": ("while n > 0:\n        n = n - 1", "unsupported statement `while`"),
    "break": ("for i in range(n):\n        break", "unsupported statement `break`"),
    "runtime_if": ("if n > 0:\n        pass", "`if` on a runtime value is not supported"),
    "runtime_ifexp": ("y = 1 if n > 0 else 2", "needs a constexpr condition"),
    "python_max": ("y = max(n, 2)", r"cannot call the Python function max\(\) on block values"),
    "pow_operator": ("y = n ** 2", "use dl.pow"),
    "float_floordiv": ("y = dl.load(x_ptr) // 2.0", r"use dl.floor\(a / b\)"),
    "float_and": ("y = dl.load(x_ptr) & 1", "needs integer operands"),
    "pointer_plus_float": ("y = x_ptr + 1.5", "pointer offsets must be integers"),
    "pointer_times_int": ("y = x_ptr * 2", "unsupported pointer arithmetic"),
    "pointer_plus_pointer": ("y = x_ptr + x_ptr", "unsupported pointer arithmetic"),
    "load_non_pointer": ("y = dl.load(n)", "expected a pointer"),
    "mask_not_bool": ("y = dl.load(x_ptr, mask=n)", "mask must be an int1"),
    "other_without_mask": ("y = dl.load(x_ptr, other=0.0)", "`other` needs a `mask`"),
    "bad_eviction_policy": ("y = dl.load(x_ptr, eviction_policy='evict_all')",
                            "eviction_policy must be '', 'evict_first' or 'evict_last'; got 'evict_all'"),
    "reduce_without_axis": ("y = dl.sum(dl.arange(0, 4))", r"dl.sum\(\): missing a required argument: 'axis'"),
    "reduce_bad_axis": ("y = dl.sum(dl.arange(0, 4), 1)", "axis 1 is out of range"),
    "reduce_scalar": ("y = dl.sum(n, 0)", "needs a block"),
    "reshape_numel": ("y = dl.reshape(dl.arange(0, 4), [8])", "cannot reshape"),
    "broadcast_shapes": ("y = dl.arange(0, 4) + dl.arange(0, 8)", r"cannot broadcast shapes \[4\], \[8\]"),
    "undefined_name": ("y = nope + 1", "name 'nope' is not defined"),
    "loop_local": ("for i in range(n):\n        t = i\n    y = t", "local to the loop"),
    "carried_type_change": ("y = n\n    for i in range(n):\n        y = y + 0.5", "give it its final type"),
    "return_value": ("return n", "cannot return a value"),
    "early_return": ("for i in range(n):\n        return\n    pass", "`return` is only allowed"),
    "call_kernel": ("copy_kernel(x_ptr)", "calling another kernel"),
    "unpack_block": ("a, b = dl.arange(0, 2)", "cannot unpack"),
    "bad_index": ("y = dl.arange(0, 4)[0]", "supports only ':' and None"),
    "bad_bitcast": ("y = dl.load(x_ptr).to(dl.int64, bitcast=True)", "one bit width"),
    "full_bad_shape": ("y = dl.full([3], 0, dl.float32)", "powers of 2"),
    "too_big": ("y = dl.zeros([2048, 1024], dl.float32)", "the limit is 1048576"),
    "bad_program_id": ("y = dl.program_id(3)", "axis must be the constexpr 0, 1 or 2"),
    "bad_builtin_kwarg": ("y = dl.exp(z=1.0)", r"dl.exp\(\)"),
    "static_range_misuse": ("y = dl.static_range(3)", "only be the iterator"),
    "range_float_bound": ("for i in range(1.5):\n        pass", "range bounds must be integer scalars"),
    "runtime_loop_pick": ("for i in (range(3) if n > 1 else range(4)):\n        pass",
                          "the condition that picks a loop's iterator must be a constexpr"),
    "literal_out_of_range": ("y = n + 2**70", "does not fit in int64"),
    "cast_pointer": ("y = dl.load(x_ptr.to(dl.int32))", "not defined on pointers"),
    "assert_false": ("assert 1 == 2, 'nope'", "assertion failed: nope"),
    "store_grows_pointer": ("dl.store(x_ptr, dl.arange(0, 4))", "must broadcast to the pointer block's shape"),
    "block_and": ("y = (dl.arange(0, 4) > 1) and (n > 1)", "`and` needs scalars"),
    "welford_scalars": ("y = dl.welford(n, 0.0, 1.0, 0)", "dl.welford needs a block, got only scalars"),
    "welford_axis": ("y = dl.welford(dl.arange(0, 4), 0.0, 1.0, 1)", "axis 1 is out of range"),
    "welford_pointer": ("y = dl.welford_combine(x_ptr, 0.0, 1, n, 0.0, 1)", "dl.welford_combine is not defined on "
                                                                             "pointers"),
    "welford_shapes": ("y = dl.welford(dl.arange(0, 4), dl.arange(0, 8), 1, 0)", r"cannot broadcast shapes"),
    "welford_unpack": ("a, b = dl.welford(dl.arange(0, 4), 0.0, 1.0, 0)", "cannot unpack 3 values into 2 names"),
    "welford_arity": ("y = dl.welford_combine(n, 0.0, 1.0)", r"dl.welford_combine\(\): missing a required argument"),
    "atomic_block_value": ("y = dl.atomic_add(x_ptr, dl.arange(0, 4) * 1.0)", "must be scalars"),
    "atomic_sem": ("y = dl.atomic_add(x_ptr, 1.0, sem='seq_cst')", "sem must be one of"),
    "atomic_scope": ("y = dl.atomic_add(x_ptr, 1.0, scope='grid')", "scope must be one of"),
    "atomic_mask": ("y = dl.atomic_add(x_ptr, 1.0, mask=n)", "mask must be an int1"),
    "atomic_not_pointer": ("y = dl.atomic_add(n, 1)", "expected a pointer"),
    "cluster_size": ("y = dl.cluster_gather(n, 3)", r"size must be a constexpr int in \(2, 4, 8\)"),
    "cluster_runtime_size": ("y = dl.cluster_gather(n, n)", "size must be a constexpr int"),
    "cluster_two_sizes": ("y = dl.cluster_gather(n, 2) + dl.cluster_gather(n, 4)[0:2]", "differs from the kernel's "
                                                                                        "earlier cluster size 2"),
    "cluster_block": ("y = dl.cluster_gather(dl.arange(0, 4), 2)", "value must be a scalar"),
    "cluster_pointer": ("y = dl.cluster_gather(x_ptr, 2)", "not defined on pointers"),
}


@pytest.mark.parametrize("name", list(ERRORS))
def test_compilation_errors_name_kernel_line_and_source(name):
    body, match = ERRORS[name]
    filename = f"<dsl-error-test-{name}>"
    source = f"@dl.kernel\ndef bad_{name}(x_ptr, n):\n    {body}\n"
    k = _exec_kernel(source, filename, {"copy_kernel": dsl_corpus.copy_kernel})[f"bad_{name}"]
    with pytest.raises(dl.CompilationError, match=match) as info:
        k[(1,)](torch.zeros(4), 3)
    err = info.value
    assert err.kernel_name == f"bad_{name}" and err.loc.filename == filename
    assert str(err).startswith(f"kernel bad_{name}, line {err.loc.lineno} ({filename}): ")
    assert err.loc.line.strip() in str(err) and err.loc.line == source.splitlines()[err.loc.lineno - 1]
    assert err.loc.lineno >= 3


def test_atomic_add_of_a_half_pointee_is_a_compilation_error():
    k = _exec_kernel("@dl.kernel\ndef k(x_ptr):\n    y = dl.atomic_add(x_ptr, 1.0)\n", "<dsl-atomic-dtype>")["k"]
    with pytest.raises(dl.CompilationError, match="the pointee must be int32, int64, float32, float64; got float16"):
        k[(1,)](torch.zeros(4, dtype=torch.float16))


def test_error_line_numbers_are_file_line_numbers():
    source = "\n\n\n@dl.kernel\ndef k(x_ptr):\n    y = 1\n    z = dl.arange(0, 3)\n"
    k = _exec_kernel(source, "<dsl-lineno-test>")["k"]
    with pytest.raises(dl.CompilationError) as info:
        k[(1,)](torch.zeros(1))
    assert info.value.loc.lineno == 7 and "line 7" in str(info.value)


def test_bad_kernel_definitions():
    with pytest.raises(ValueError, match="not supported"):
        _exec_kernel("@dl.kernel\ndef k(*args):\n    pass\n", "<dsl-def-test-0>")
    with pytest.raises(ValueError, match="cannot read its source"):
        exec(compile("import inductor_lite.dsl as dl\n@dl.kernel\ndef k(x):\n    pass\n", "<no-linecache>", "exec"),
             {})
    with pytest.raises(TypeError, match="expects a function"):
        dl.kernel(42)
