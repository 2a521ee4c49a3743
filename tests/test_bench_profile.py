"""The benchmark's profile view, its wall-time method and the overhead benchmark.

On CPU: kernel-name classification, the per-call GPU time summary (synthetic
activities), the profiler trace reader (host windows), the CLI options, and smoke runs of
``--profile`` and ``inductor_lite.bench.overhead``. On a GPU: real profiles of eager and
compiled code.
"""

from __future__ import annotations

import gc
import io

import pytest
import torch

from inductor_lite.bench import MODELS, Settings
from inductor_lite.bench.__main__ import parse_args
from inductor_lite.bench.overhead import GRAPHS, UNCOMPILED
from inductor_lite.bench.overhead import main as overhead_main
from inductor_lite.bench.profile import (
    CATEGORIES,
    DeviceActivity,
    DeviceProfile,
    KernelStat,
    ProfileRow,
    assign_to_calls,
    classify_kernel,
    profile_device,
    profile_model,
    read_trace,
    summarize_calls,
    trace_calls,
    union_length,
)
from inductor_lite.bench.report import print_profiles
from inductor_lite.bench.walltime import CallTimes, time_contenders

# Names as CUPTI reports them (H100, torch 2.11: cuBLAS, cuBLASLt, cuDNN, flash, aten).
KERNEL_NAMES = {
    "generated": [
        "poi_fused_add_relu_0", "per_fused__softmax_1", "red_fused_var_mean_2",
        "triton_poi_fused_add_0", "triton_red_fused_sum_1", "triton_per_fused__safe_softmax_3",
    ],
    "gemm": [
        "sm90_xmma_gemm_bf16bf16_bf16f32_f32_tn_n_tilesize128x128x64_warpgroupsize1x1x1_execute_segment_k_off_"
        "kernel__5x_cublas",
        "nvjet_tst_128x256_64x4_2x1_v_bz_coopA_TNT",
        "void cutlass::Kernel2<cutlass_80_wmma_tensorop_bf16_s161616gemm_bf16_16x16_128x2_tn_align8>"
        "(cutlass_80_wmma_tensorop_bf16_s161616gemm_bf16_16x16_128x2_tn_align8::Params)",
        "void gemv2T_kernel_val<int, int, __nv_bfloat16, __nv_bfloat16, float, 128, 16, 4, 4, false, false>",
        "void splitKreduce_kernel<32, 16, int, float, __nv_bfloat16, float, __nv_bfloat16, true, false, false>",
        "ampere_bf16_s16816gemm_bf16_128x128_ldg8_f2f_stages_32x5_tn",
    ],
    "conv": [
        "sm90_xmma_fprop_implicit_gemm_bf16bf16_bf16f32_f32_nhwckrsc_nhwc_tilesize128x128x64_warpgroupsize1x1x1_"
        "g1_execute_segment_k_off_kernel__5x_cudnn",
        "void cudnn::engines_precompiled::nchwToNhwcKernel<__nv_bfloat16, __nv_bfloat16, float, false, true, "
        "(cudnnKernelDataType_t)0>(cudnn::engines_precompiled::nchw2nhwc_params_t<float>, __nv_bfloat16 const*, "
        "__nv_bfloat16*)",
        "sm80_xmma_dgrad_implicit_gemm_indexed_bf16bf16_bf16f32_f32_nhwckrsc_nhwc_tilesize64x64x64_stage4_"
        "warpsize2x2x1_g1_tensor16x8x16_kernel",
        "void implicit_convolve_sgemm<float, float, 128, 5, 5, 3, 3, 3, 1, false, false, true>(int, int, int)",
        "void at::native::(anonymous namespace)::conv_depthwise2d_forward_kernel<3, float, int>(float const*)",
    ],
    "attention": [
        "void pytorch_flash::flash_fwd_kernel<Flash_fwd_kernel_traits<64, 128, 128, 4, false, false, "
        "cutlass::bfloat16_t, Flash_kernel_traits<64, 128, 128, 4, cutlass::bfloat16_t> >, false, false>(Params)",
        "fmha_cutlassF_bf16_aligned_64x64_rf_sm80(PyTorchMemEffAttention::AttentionKernel<cutlass::bfloat16_t, "
        "cutlass::arch::Sm80, true, 64, 64, 64, true, true>::Params)",
        "cudnn_generated_fort_native_sdpa_sm90_flash_fprop_wgmma_f16_knob_3_64x64x128_4x1x1_kernel0_0",
    ],
    "other": [
        "void at::native::vectorized_elementwise_kernel<4, at::native::CUDAFunctor_add<c10::BFloat16>, "
        "std::array<char*, 3ul> >(int, at::native::CUDAFunctor_add<c10::BFloat16>, std::array<char*, 3ul>)",
        "void at::native::(anonymous namespace)::cunn_SoftMaxForward<8, c10::BFloat16, float, c10::BFloat16>",
        "void at::native::unrolled_elementwise_kernel<at::native::direct_copy_kernel_cuda(at::TensorIteratorBase&)"
        "::{lambda()#3}::operator()() const::{lambda(float)#1}, std::array<char*, 2ul>, 4, TrivialOffsetCalculator"
        "<1, unsigned int>, at::native::memory::LoadWithCast<1>, at::native::memory::StoreWithCast<1> >",
        "void cudnn::bn_fw_inf_1C11_kernel_NCHW<__nv_bfloat16, float, true, 1>(float, float, cudnnTensorStruct)",
        "void at::native::batch_norm_transform_input_kernel<c10::BFloat16, float, float, int, true>",
        "Memcpy DtoD (Device -> Device)",
        "Memset (Device)",
    ],
}


@pytest.mark.parametrize(
    "category, name", [(category, name) for category, names in KERNEL_NAMES.items() for name in names]
)
def test_classify_kernel(category, name):
    assert classify_kernel(name) == category


def test_union_length_counts_overlaps_once():
    assert union_length([]) == 0
    assert union_length([(0, 2), (5, 6)]) == 3
    assert union_length([(0, 4), (1, 2), (3, 6)]) == 6  # nested and overlapping
    assert union_length([(3, 6), (0, 4)]) == 6  # any order


def _calls():
    """Two calls' activities (µs): call 0 overlaps a GEMM with a generated kernel (two
    streams) and has a fill; call 1 runs the same kernels one after another."""
    call0 = [
        DeviceActivity("nvjet_tst_128x256_64x4_2x1_v_bz_coopA_TNT", 100, 160),
        DeviceActivity("poi_fused_add_0", 140, 180),
        DeviceActivity("Memset (Device)", 190, 192),
    ]
    call1 = [
        DeviceActivity("nvjet_tst_128x256_64x4_2x1_v_bz_coopA_TNT", 1100, 1160),
        DeviceActivity("poi_fused_add_0", 1160, 1200),
        DeviceActivity("poi_fused_add_0", 1210, 1230),
        DeviceActivity("Memset (Device)", 1290, 1292),
    ]
    return call0, call1


def test_assign_to_calls_by_window():
    call0, call1 = _calls()
    windows = [(90.0, 500.0), (1000.0, 1500.0)]
    # A kernel timestamped a little before the first window (clock skew) joins it.
    early = DeviceActivity("poi_fused_add_0", 80, 85)
    groups = assign_to_calls([early] + call1 + call0, windows)
    assert groups == [[early] + call0, call1]


def test_summarize_calls_per_call_means():
    profile = summarize_calls(_calls(), top=2)
    assert profile.calls == 2
    # Call 0: [100, 180] + [190, 192] = 82 µs; call 1: [1100, 1200] + [1210, 1230] + 2 = 122 µs.
    assert profile.busy_ms == pytest.approx((82 + 122) / 2 / 1e3)
    assert profile.category_ms["gemm"] == pytest.approx(60 / 1e3)
    assert profile.category_ms["generated"] == pytest.approx((40 + 60) / 2 / 1e3)
    assert profile.category_ms["other"] == pytest.approx(2 / 1e3)
    assert profile.category_ms["conv"] == profile.category_ms["attention"] == 0
    assert set(profile.category_ms) == set(CATEGORIES)
    assert profile.kernels_per_call == pytest.approx(2.5)  # fills are not kernel launches
    assert [k.name for k in profile.top] == ["nvjet_tst_128x256_64x4_2x1_v_bz_coopA_TNT", "poi_fused_add_0"]
    poi = profile.top[1]
    assert poi.category == "generated" and poi.launches_per_call == 1.5
    assert poi.ms_per_call == pytest.approx((40 + 40 + 20) / 2 / 1e3)
    with pytest.raises(ValueError, match="no profiled calls"):
        summarize_calls([])


def test_read_trace_finds_one_window_per_call_on_cpu():
    trace = trace_calls(lambda: torch.randn(64).sum(), torch.device("cpu"), 3)
    windows, activities = read_trace(trace, 3)
    assert len(windows) == 3 and activities == []
    assert all(start < end for start, end in windows)
    assert all(a[1] <= b[0] for a, b in zip(windows, windows[1:]))
    with pytest.raises(RuntimeError, match="3 call windows for 4 calls"):
        read_trace(trace, 4)
    assert profile_device(lambda: None, torch.device("cpu")) is None
    with pytest.raises(ValueError, match="calls must be >= 1"):
        profile_device(lambda: None, torch.device("cpu"), calls=0)


# ---------------------------------------------------------------- wall time


def test_time_contenders_interleaves_and_flips_the_order():
    order = []
    fns = [lambda: order.append(0), lambda: order.append(1)]
    times = time_contenders(fns, torch.device("cpu"), warmup=2, repeat=4, min_sample_s=0.0)
    assert [t.calls_per_sample for t in times] == [1, 1]
    assert all(len(t.wall_s) == len(t.host_s) == 4 for t in times)
    # Warm-up and sizing of each in turn, the untimed round, then rounds in flipping order.
    assert order == [0, 0, 0, 1, 1, 1] + [0, 1] + [0, 1, 1, 0, 0, 1, 1, 0]
    assert gc.isenabled()


def test_call_times_statistics_and_paired_ratios():
    base = CallTimes((1.0, 2.0, 3.0, 4.0, 5.0), (0.5,) * 5, 3)
    half = CallTimes((0.5, 1.0, 1.5, 2.0, 2.5), (0.1,) * 5, 3)
    assert base.median_s == 3.0 and base.quartiles_s == (2.0, 4.0) and base.iqr_s == 2.0
    assert base.host_median_s == 0.5
    assert base.ratio_to(half) == (2.0, 2.0, 2.0)  # a drift that hits both cancels
    with pytest.raises(ValueError, match="rounds differ"):
        base.ratio_to(CallTimes((1.0,), (1.0,), 1))
    with pytest.raises(ValueError, match="repeat >= 1"):
        time_contenders([lambda: None], torch.device("cpu"), warmup=0, repeat=0)


# ---------------------------------------------------------------- CLI and views


def test_cli_parses_profile_and_compile_mode():
    args, specs, backends, settings = parse_args(
        ["--device", "cpu", "--models", "mlp", "--backends", "eager", "--profile", "--profile-calls", "3",
         "--top", "2", "--compile-mode", "reduce-overhead"]
    )
    assert args.profile and args.profile_calls == 3 and args.top == 2
    assert [s.name for s in specs] == ["mlp"] and backends == ["eager"]
    assert settings.compile_mode == "reduce-overhead"
    args, *_ = parse_args(["--device", "cpu", "--backends", "eager"])
    assert not args.profile


@pytest.mark.parametrize(
    "argv, message",
    [
        (["--profile", "--output", "r.csv"], "--output and --plot write the speedup table"),
        (["--profile-calls", "0"], "--profile-calls >= 1"),
        (["--compile-mode", "fastest"], "invalid choice: 'fastest'"),
    ],
)
def test_cli_rejects_bad_profile_options(argv, message, capsys):
    with pytest.raises(SystemExit) as exit_info:
        parse_args(["--device", "cpu", "--backends", "eager"] + argv)
    assert exit_info.value.code == 2
    assert message in capsys.readouterr().err


def test_profile_model_on_cpu_times_every_backend():
    settings = Settings(device="cpu", tiny=True, repeat=2, warmup=1)
    rows = list(profile_model(MODELS["mlp"], ["eager", "bench_profile_test_missing"], settings, calls=2))
    eager, missing = rows
    assert (eager.model, eager.backend, eager.status) == ("mlp", "eager", "ok")
    assert eager.wall_ms > 0 and eager.host_ms > 0 and eager.wall_iqr_ms >= 0
    assert eager.device is None and eager.exposed_host_ms is None  # no GPU on CPU
    assert missing.status == "failed" and "bench_profile_test_missing" in missing.note


def test_print_profiles_shows_categories_and_top_kernels():
    device = DeviceProfile(
        calls=10, busy_ms=2.0, category_ms={"generated": 0.5, "gemm": 1.25, "conv": 0.0, "attention": 0.25,
                                            "other": 0.0},
        kernels_per_call=42.0,
        top=(KernelStat("void " + "x" * 200, "gemm", 1.25, 4.0),),
    )
    rows = [
        ProfileRow("gpt2", "inductor_lite", "default", "ok", wall_ms=3.0, wall_iqr_ms=0.1, host_ms=2.5,
                   device=device),
        ProfileRow("bert_base", "inductor", "default", "failed", note="RuntimeError: boom"),
    ]
    rich_console = pytest.importorskip("rich.console")
    out = io.StringIO()
    print_profiles(rows, rich_console.Console(file=out, width=250))
    text = out.getvalue()
    assert rows[0].exposed_host_ms == pytest.approx(1.0)
    for cell in ("3.000 (0.100)", "2.000", "1.250", "42", "1.000", "62.5", "RuntimeError: boom"):
        assert cell in text, cell
    assert "x" * 77 + "..." in text and "x" * 78 not in text


def test_overhead_benchmark_runs_on_cpu(capsys):
    assert overhead_main(["--device", "cpu", "--backends", "inductor_lite", "--repeat", "2", "--warmup", "1",
                          "--profile-calls", "1"]) == 0
    out = capsys.readouterr().out
    for graph in GRAPHS:
        assert graph.name in out
    assert out.count(UNCOMPILED) == len(GRAPHS) and out.count("inductor_lite") == len(GRAPHS)


# ---------------------------------------------------------------- GPU


@pytest.mark.gpu
def test_profile_device_counts_and_classifies_kernels_on_gpu():
    import inductor_lite  # noqa: F401 - registers the backend

    device = torch.device("cuda")
    x = torch.randn(4096, 1024, device=device)
    w = torch.randn(1024, 1024, device=device)

    def pointwise(t):
        return (t + 1).relu() * 2

    eager = profile_device(lambda: pointwise(x), device, calls=5)
    assert eager.kernels_per_call == 3 and eager.category_ms["other"] > 0
    assert eager.busy_ms == pytest.approx(sum(eager.category_ms.values()), rel=1e-6)
    for backend, prefix in (("inductor_lite", "poi_"), ("inductor", "triton_poi_")):
        # Inductor names a host annotation after each Triton kernel it launches: the
        # kernel counts once all the same.
        compiled = torch.compile(pointwise, backend=backend, dynamic=False)
        compiled(x)
        profile = profile_device(lambda: compiled(x), device, calls=5, top=1)
        assert profile.kernels_per_call == 1, backend
        assert profile.busy_ms > 0, backend
        assert profile.category_ms["generated"] == pytest.approx(profile.busy_ms), backend
        assert profile.top[0].name.startswith(prefix) and profile.top[0].launches_per_call == 1
    gemm = profile_device(lambda: x @ w, device, calls=5)
    assert gemm.category_ms["gemm"] > 0 and gemm.category_ms["generated"] == 0
