"""GPU tests of the runtime: launches on real tensors, streams, CUDA graphs, threads, and
the on-disk cache across processes. The first tests use a hand-written PTX kernel, so
the driver layer is checked even when the DSL compiler is broken."""

import json
import os
import subprocess
import sys
import textwrap
import threading

import pytest
import torch

import inductor_lite
import inductor_lite.dsl as dl
from inductor_lite.config import config
from inductor_lite.counters import counters, reset as reset_counters
from inductor_lite.runtime import CompiledBinary, LoadedKernel, clear_memory_cache, launch

from dsl_corpus import axpy_kernel

pytestmark = pytest.mark.gpu

TESTS_DIR = os.path.dirname(os.path.abspath(__file__))
TOL = {torch.float32: dict(rtol=1e-5, atol=1e-5), torch.float16: dict(rtol=1e-2, atol=1e-2),
       torch.bfloat16: dict(rtol=1e-2, atol=1e-2)}

# out[i] = f(in[i ^ 1]) with f(v) = (v * a + float(hi(b) + lo(b))) + float(c), all in fp32
# (hi, lo: the i64 b's high word, signed, and low word, unsigned); the value
# crosses threads through the top of the dynamic shared memory, so a launch that did
# not get the shared memory it asked for fails or reads garbage.
SWAP_AFFINE_PTX = r"""
.version 8.0
.target sm_80
.address_size 64

.extern .shared .align 16 .b8 smem[];

.visible .entry swap_affine(
    .param .u64 out_ptr, .param .u64 in_ptr, .param .u32 n,
    .param .f32 a, .param .u64 b, .param .f64 c)
{
    .reg .pred %p<2>;
    .reg .b32 %r<16>;
    .reg .f32 %f<8>;
    .reg .b64 %rd<10>;
    .reg .f64 %fd<2>;

    ld.param.u64 %rd1, [out_ptr];
    ld.param.u64 %rd2, [in_ptr];
    ld.param.u32 %r1, [n];
    ld.param.f32 %f1, [a];
    ld.param.u64 %rd3, [b];
    ld.param.f64 %fd1, [c];
    mov.u32 %r2, %ctaid.x;
    mov.u32 %r3, %ntid.x;
    mov.u32 %r4, %tid.x;
    mad.lo.s32 %r5, %r2, %r3, %r4;
    mov.u32 %r6, %dynamic_smem_size;
    shl.b32 %r7, %r3, 2;
    sub.s32 %r8, %r6, %r7;
    mov.u32 %r9, smem;
    add.s32 %r8, %r8, %r9;
    shl.b32 %r10, %r4, 2;
    add.s32 %r11, %r8, %r10;
    xor.b32 %r12, %r4, 1;
    shl.b32 %r13, %r12, 2;
    add.s32 %r14, %r8, %r13;
    mul.wide.s32 %rd4, %r5, 4;
    setp.lt.s32 %p1, %r5, %r1;
    mov.f32 %f2, 0f00000000;
    @!%p1 bra LOADED;
    add.s64 %rd5, %rd2, %rd4;
    ld.global.f32 %f2, [%rd5];
LOADED:
    mul.rn.f32 %f3, %f2, %f1;
    shr.s64 %rd7, %rd3, 32;
    and.b64 %rd8, %rd3, 4294967295;
    add.s64 %rd7, %rd7, %rd8;
    cvt.rn.f32.s64 %f4, %rd7;
    add.rn.f32 %f3, %f3, %f4;
    cvt.rn.f32.f64 %f5, %fd1;
    add.rn.f32 %f3, %f3, %f5;
    st.shared.f32 [%r11], %f3;
    bar.sync 0;
    ld.shared.f32 %f6, [%r14];
    @!%p1 bra DONE;
    add.s64 %rd6, %rd1, %rd4;
    st.global.f32 [%rd6], %f6;
DONE:
    ret;
}
"""


def cdiv(a, b):
    return (a + b - 1) // b


def swap_affine(shared_bytes, num_warps=4):
    """The PTX kernel as a LoadedKernel (the driver JIT-compiles NUL-terminated PTX)."""
    binary = CompiledBinary(
        name="swap_affine", cubin=SWAP_AFFINE_PTX.encode() + b"\0", shared_bytes=shared_bytes,
        num_warps=num_warps, param_types=("ptr", "ptr", "i32", "f32", "i64", "f64"),
        cc=torch.cuda.get_device_capability(), ptx=SWAP_AFFINE_PTX, llvm_ir="",
    )
    return LoadedKernel(binary, torch.cuda.current_device())


def swap_affine_reference(x, a, b, c):
    padded = torch.cat([x, x.new_zeros(1)])  # a neighbour past the end loaded 0
    b_term = float((b >> 32) + (b & 0xFFFFFFFF))
    return ((padded * a + b_term) + c)[torch.arange(x.numel(), device=x.device) ^ 1]


@pytest.mark.parametrize("shared_bytes", [16 * 1024, 100 * 1024])  # below and above the 48 KiB opt-in
@pytest.mark.parametrize("num_warps", [1, 4, 8])
def test_ptx_kernel_every_param_type_and_dynamic_shared_memory(shared_bytes, num_warps):
    kernel = swap_affine(shared_bytes, num_warps)
    n = 3001  # odd, and not a multiple of any block size
    x = torch.randn(n, device="cuda")
    out = torch.full((n + 64,), float("nan"), device="cuda")
    a, b, c = 1.5, -(2**33) + 7, 0.25  # b needs 64 bits: hi(b) + lo(b) = -2 + 7
    kernel.launch((cdiv(n, 32 * num_warps),), [out, x, n, a, b, c])
    torch.cuda.synchronize()
    torch.testing.assert_close(out[:n], swap_affine_reference(x, a, b, c), rtol=1e-6, atol=0)
    assert out[n:].isnan().all(), "wrote past n"


def test_too_much_shared_memory_is_a_clear_error():
    with pytest.raises(ValueError, match="swap_affine.*bytes of shared memory"):
        swap_affine(1 << 20)


def test_launch_from_a_thread_without_a_current_context():
    kernel = swap_affine(8 * 1024)
    n = 1000
    x = torch.randn(n, device="cuda")
    out = torch.full((n,), float("nan"), device="cuda")
    torch.cuda.synchronize()
    errors = []

    def work():
        try:
            kernel.launch((cdiv(n, 128),), [out, x, n, 2.0, 1, 0.5])
        except BaseException as e:  # re-raised in the main thread
            errors.append(e)

    worker = threading.Thread(target=work)
    worker.start()
    worker.join()
    assert not errors, errors
    torch.cuda.synchronize()
    torch.testing.assert_close(out, swap_affine_reference(x, 2.0, 1, 0.5), rtol=1e-6, atol=0)


def test_bad_arguments_fail_before_reaching_the_gpu():
    kernel = swap_affine(8 * 1024)
    with pytest.raises(ValueError, match="swap_affine.*argument 1 is on cpu"):
        kernel.launch((1,), [torch.zeros(4, device="cuda"), torch.zeros(4), 4, 1.0, 1, 1.0])
    with pytest.raises(ValueError, match="swap_affine.*grid x"):
        kernel.launch((2**31,), [torch.zeros(4, device="cuda"), torch.zeros(4, device="cuda"), 4, 1.0, 1, 1.0])
    torch.cuda.synchronize()  # the context is still healthy


# --------------------------------------------------------------------------- DSL kernels


@dl.kernel
def row_sum_kernel(x_ptr, out_ptr, n_cols, RBLOCK: dl.constexpr):
    row = dl.program_id(0)
    cols = dl.arange(0, RBLOCK)
    x = dl.load(x_ptr + row * n_cols + cols, mask=cols < n_cols, other=0.0)
    dl.store(out_ptr + row, dl.sum(x, 0))


@dl.kernel
def scale_rows_kernel(x_ptr, out_ptr, n_cols, XBLOCK: dl.constexpr):
    cols = dl.program_id(0) * XBLOCK + dl.arange(0, XBLOCK)
    row = dl.program_id(1)
    mask = cols < n_cols
    x = dl.load(x_ptr + row * n_cols + cols, mask=mask, other=0.0)
    dl.store(out_ptr + row * n_cols + cols, x * (row + 1), mask=mask)


@pytest.fixture
def fresh_cache(tmp_path):
    """An empty disk cache and no loaded kernels, so every test compiles what it uses."""
    clear_memory_cache()
    reset_counters()
    with config.patch(cache_dir=str(tmp_path / "cache"), disable_cache=False):
        yield tmp_path / "cache"
    clear_memory_cache()


def run_axpy(n, dtype=torch.float32, alpha=0.75, xblock=256, num_warps=4):
    """Launch axpy_kernel on fresh random inputs and check it against torch."""
    x = torch.randn(n, device="cuda", dtype=dtype)
    y = torch.randn(n, device="cuda", dtype=dtype)
    out = torch.full((n,), float("nan"), device="cuda", dtype=dtype)
    launch(axpy_kernel, (cdiv(n, xblock),), [x, y, out, n, alpha], {"XBLOCK": xblock}, num_warps)
    torch.cuda.synchronize()
    torch.testing.assert_close(out, (x.float() * alpha + y.float()).to(dtype), **TOL[dtype])


@pytest.mark.parametrize("dtype", [torch.float32, torch.float16, torch.bfloat16])
def test_dsl_kernel_matches_torch(fresh_cache, dtype):
    run_axpy(10_007, dtype)
    assert counters["kernels_compiled"] == 1 and counters["cache_hits"] == 0
    run_axpy(10_007, dtype, alpha=-3.0)  # same specialisation: no compile, no disk read
    run_axpy(4096, dtype, xblock=1024, num_warps=8)
    assert counters["kernels_compiled"] == 2 and counters["cache_hits"] == 0


@pytest.mark.parametrize("n_cols, num_warps", [(100, 1), (1000, 4), (1000, 8)])
def test_dsl_reduction_matches_torch(fresh_cache, n_cols, num_warps):
    x = torch.randn(37, n_cols, device="cuda")
    out = torch.full((37,), float("nan"), device="cuda")
    launch(row_sum_kernel, (37,), [x, out, n_cols], {"RBLOCK": 1024}, num_warps)
    torch.cuda.synchronize()
    torch.testing.assert_close(out, x.sum(1), rtol=1e-5, atol=1e-4)


def test_dsl_kernel_on_a_2d_grid(fresh_cache):
    x = torch.randn(5, 1000, device="cuda")
    out = torch.full_like(x, float("nan"))
    launch(scale_rows_kernel, (cdiv(1000, 128), 5), [x, out, 1000], {"XBLOCK": 128}, 4)
    torch.cuda.synchronize()
    torch.testing.assert_close(out, x * torch.arange(1, 6, device="cuda")[:, None])


def test_launch_on_a_non_default_stream_is_ordered(fresh_cache):
    n = 1 << 20
    x = torch.randn(n, device="cuda")
    y = torch.randn(n, device="cuda")
    out = torch.full_like(x, float("nan"))
    args = [x, y, out, n, 0.5]
    launch(axpy_kernel, (n // 1024,), args, {"XBLOCK": 1024}, 4)  # compile now, not inside the timing window
    expected = 2 * x * 0.5 + y
    out.fill_(float("nan"))
    torch.cuda.synchronize()
    side = torch.cuda.Stream()
    with torch.cuda.stream(side):
        torch.cuda._sleep(100_000_000)  # tens of ms of GPU spin: a launch on any other stream would overtake
        x.mul_(2)
        launch(axpy_kernel, (n // 1024,), args, {"XBLOCK": 1024}, 4)
        snapshot = out.clone()  # stream-ordered after the kernel
    side.synchronize()
    torch.testing.assert_close(out, expected)
    torch.testing.assert_close(snapshot, expected)


def test_kernel_inside_cuda_graph_capture(fresh_cache):
    n = 50_000
    x = torch.randn(n, device="cuda")
    y = torch.randn(n, device="cuda")
    out = torch.full_like(x, float("nan"))
    args = [x, y, out, n, 1.25]
    launch(axpy_kernel, (cdiv(n, 512),), args, {"XBLOCK": 512}, 4)  # compile and load before capture
    out.fill_(float("nan"))
    torch.cuda.synchronize()
    graph = torch.cuda.CUDAGraph()
    with torch.cuda.graph(graph):
        launch(axpy_kernel, (cdiv(n, 512),), args, {"XBLOCK": 512}, 4)
    torch.cuda.synchronize()
    assert out.isnan().all(), "the launch ran during capture instead of being recorded"
    for _ in range(2):
        x.copy_(torch.randn(n, device="cuda"))
        y.copy_(torch.randn(n, device="cuda"))
        out.fill_(float("nan"))
        graph.replay()
        torch.cuda.synchronize()
        torch.testing.assert_close(out, x * 1.25 + y)


def test_tuned_launcher_fast_path_sizes_alignment_streams_threads_and_capture(fresh_cache):
    """A compiled graph's launches after each key's first: new sizes and misaligned views
    pick their own recorded launch, a side stream orders them, a fresh thread (no current
    context) pushes the kernel's, and a CUDA graph captures them."""
    fn = lambda x: torch.sin(x) * 2 + 1  # noqa: E731
    compiled = torch.compile(fn, backend="inductor_lite", dynamic=True)
    base = torch.randn(5000, device="cuda")
    for n, offset in ((1000, 0), (1000, 0), (1000, 1), (2048, 0), (1000, 1), (1000, 0), (4001, 3)):
        x = base[offset:offset + n]
        torch.testing.assert_close(compiled(x), fn(x))
    x = base[:1000]
    side = torch.cuda.Stream()
    with torch.cuda.stream(side):
        torch.cuda._sleep(50_000_000)
        x2 = x * 2
        out = compiled(x2)
    side.synchronize()
    torch.testing.assert_close(out, fn(x * 2))
    results = []
    thread = threading.Thread(target=lambda: results.append(compiled(x)))
    thread.start()
    thread.join()
    torch.testing.assert_close(results[0], fn(x))
    static_x = x.clone()
    graph = torch.cuda.CUDAGraph()
    with torch.cuda.graph(graph):
        static_out = compiled(static_x)
    static_x.copy_(base[1000:2000])
    graph.replay()
    torch.cuda.synchronize()
    torch.testing.assert_close(static_out, fn(base[1000:2000]))


def test_second_process_reads_the_disk_cache(fresh_cache):
    run_axpy(10_000)
    assert counters["kernels_compiled"] == 1
    script = textwrap.dedent(
        f"""
        import json, sys
        sys.path.insert(0, {TESTS_DIR!r})
        import test_runtime_gpu
        from inductor_lite.counters import counters, reset as reset_counters
        test_runtime_gpu.run_axpy(10_000)
        print("COUNTERS", json.dumps(dict(counters)))
        """
    )
    repo_root = os.path.dirname(os.path.dirname(os.path.abspath(inductor_lite.__file__)))
    env = {**os.environ, "INDUCTOR_LITE_CACHE_DIR": str(fresh_cache)}
    env["PYTHONPATH"] = os.pathsep.join(p for p in (repo_root, env.get("PYTHONPATH")) if p)
    env.pop("INDUCTOR_LITE_DISABLE_CACHE", None)
    proc = subprocess.run([sys.executable, "-c", script], env=env, capture_output=True, text=True, timeout=300)
    assert proc.returncode == 0, proc.stderr
    (line,) = [l for l in proc.stdout.splitlines() if l.startswith("COUNTERS ")]
    child = json.loads(line.split(" ", 1)[1])
    assert child.get("kernels_compiled", 0) == 0 and child.get("cache_hits", 0) >= 1, child
