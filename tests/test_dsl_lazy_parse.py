"""`dsl.kernel` parses a kernel's source on first need, not at decoration: a graph loaded
from the graph cache defines every kernel, and a launch whose binary is in the disk
cache needs no parse at all."""

import linecache

import pytest
import torch

import inductor_lite.dsl as dl
from inductor_lite.counters import counters
from inductor_lite.runtime import launcher

MODULE = '''
import inductor_lite.dsl as dl

SCALE = {scale}

@dl.kernel
def scale_kernel(in_ptr0, out_ptr0, xnumel, XBLOCK: dl.constexpr):
    xindex = dl.program_id(0) * XBLOCK + dl.arange(0, XBLOCK)
    xmask = xindex < xnumel
    x = dl.load(in_ptr0 + xindex, mask=xmask)
    dl.store(out_ptr0 + xindex, x * SCALE, mask=xmask)

@dl.kernel
def broken_kernel(in_ptr0, XBLOCK: dl.constexpr):
    x = dl.load(in_ptr0 + dl.arange(0, XBLOCK)) + undefined_name
'''


def load(name: str, scale: float = 3.0) -> dict:
    """Define the kernels as a generated wrapper module does: text in linecache, then exec."""
    source = MODULE.format(scale=scale)
    linecache.cache[name] = (len(source), None, source.splitlines(True), name)
    namespace: dict = {}
    exec(compile(source, name, "exec"), namespace)
    return namespace


@pytest.fixture(autouse=True)
def fresh_counters():
    counters["dsl_kernels_parsed"] = 0
    yield


def test_kernels_are_parsed_on_first_launch_only():
    module = load("<lazy-parse-cpu>")
    assert counters["dsl_kernels_parsed"] == 0  # defining kernels parses nothing
    kernel = module["scale_kernel"]
    assert kernel.runtime_arg_names == ["in_ptr0", "out_ptr0", "xnumel"] and kernel.constexpr_names == ["XBLOCK"]
    x = torch.randn(100, dtype=torch.float64)
    for _ in range(2):
        out = torch.full_like(x, float("nan"))
        kernel[(4,)](x, out, 100, XBLOCK=32)
        torch.testing.assert_close(out, x * 3.0, rtol=0, atol=0)
    assert counters["dsl_kernels_parsed"] == 1  # once, and never broken_kernel, which was not launched


def test_an_error_in_a_kernel_still_surfaces_at_its_launch():
    module = load("<lazy-parse-error>")
    with pytest.raises(dl.CompilationError, match="undefined_name"):
        module["broken_kernel"][(1,)](torch.zeros(8), XBLOCK=8)


def test_the_cache_key_sees_the_constants_without_a_parse():
    a, b = load("<lazy-parse-key-a>")["scale_kernel"], load("<lazy-parse-key-b>", scale=2.0)["scale_kernel"]
    assert "SCALE = 3.0" in a.key_source() and "SCALE = 2.0" in b.key_source()
    assert a.source == b.source and a.source.startswith("@dl.kernel\ndef scale_kernel(")
    assert counters["dsl_kernels_parsed"] == 0


def test_definition_errors_still_come_at_decoration():
    with pytest.raises(ValueError, match="does not define a function"):
        dl.kernel(lambda x: x)
    with pytest.raises(ValueError, match="cannot read its source"):
        exec(compile("import inductor_lite.dsl as dl\n@dl.kernel\ndef k(x):\n    pass\n", "<lazy-no-text>", "exec"), {})


@pytest.mark.gpu
def test_a_disk_cache_hit_on_cuda_parses_nothing():
    x = torch.randn(1000, device="cuda")
    out = torch.empty_like(x)
    load("<lazy-parse-cuda-cold>")["scale_kernel"][(8,)](x, out, 1000, XBLOCK=128)
    launcher.clear_memory_cache()
    counters["dsl_kernels_parsed"] = 0
    hits = counters["cache_hits"]
    out.fill_(float("nan"))
    load("<lazy-parse-cuda-warm>")["scale_kernel"][(8,)](x, out, 1000, XBLOCK=128)  # a fresh kernel object
    torch.testing.assert_close(out, x * 3.0)
    assert counters["cache_hits"] == hits + 1 and counters["dsl_kernels_parsed"] == 0


def test_a_kernels_source_is_its_whole_block_and_nothing_after():
    """The source text ends with the kernel's block, whatever its last lines are (a
    statement over several lines, a trailing comment, a nested function, a kernel
    nested in a function), and never takes in the lines that follow it."""

    def outer():
        @dl.kernel
        def nested(in_ptr0, out_ptr0, XBLOCK: dl.constexpr):
            def twice(v):
                return v * 2

            x = dl.load(in_ptr0 + dl.arange(0, XBLOCK))
            dl.store(out_ptr0 + dl.arange(0, XBLOCK),
                     twice(x)
                     )
            # a trailing comment inside the block

        after = 1  # the enclosing function goes on
        return nested, after

    kernel, _ = outer()
    lines = kernel.source.splitlines()
    assert lines[0] == "@dl.kernel" and lines[1].startswith("def nested(")
    assert lines[-1].strip() == "# a trailing comment inside the block"
    assert not any("after = 1" in line for line in lines)
    namespace = load("<lazy_parse_block_test>")
    assert namespace["scale_kernel"].source.rstrip().endswith("dl.store(out_ptr0 + xindex, x * SCALE, mask=xmask)")
    assert kernel.fn_def.name == "nested"  # the text parses
