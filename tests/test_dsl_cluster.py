"""`dl.cluster_gather`: thread-block clusters (sm_90+). In the interpreter everywhere,
as PTX on CPU (the cluster directive, one distributed shared-memory write a
program, one cluster barrier a gather, local reads; assembled for sm_90; sm_80
refused), and on a GPU (``gpu`` marker) against the same expected values."""

import re

import pytest
import torch

import inductor_lite.dsl as dl
from inductor_lite.dsl import assembler, compiler, interpreter
from inductor_lite.dsl.ir import CLUSTER_SIZES

DL_DTYPES = {torch.float32: dl.float32, torch.bfloat16: dl.bfloat16, torch.float16: dl.float16,
             torch.float64: dl.float64, torch.int8: dl.int8, torch.int32: dl.int32, torch.int64: dl.int64,
             torch.bool: dl.int1}
DTYPES = list(DL_DTYPES)


@dl.kernel
def gather_kernel(out_ptr, seed, CLUSTER: dl.constexpr, DTYPE: dl.constexpr):
    """out[p, r] = value of program (p // CLUSTER) * CLUSTER + r, value(q) = (q * 5 + seed)
    % 61 - 30 (distinct within any 8 consecutive programs), for bool (q + seed) % 3 == 0."""
    pid = dl.program_id(0)
    if DTYPE == dl.int1:
        value = (pid + seed) % 3 == 0
    else:
        value = ((pid * 5 + seed) % 61 - 30).to(DTYPE)
    dl.store(out_ptr + pid * CLUSTER + dl.arange(0, CLUSTER), dl.cluster_gather(value, CLUSTER))


@dl.kernel
def split_row_stats_kernel(x_ptr, sum_ptr, max_ptr, cols, CHUNK: dl.constexpr, CLUSTER: dl.constexpr):
    """Row p // CLUSTER's sum and max from CLUSTER programs of CHUNK columns; every
    program stores both (they must agree)."""
    pid = dl.program_id(0)
    col = (pid % CLUSTER) * CHUNK + dl.arange(0, CHUNK)
    mask = col < cols
    x = dl.load(x_ptr + (pid // CLUSTER) * cols + col, mask=mask, other=0.0)
    total = dl.sum(dl.cluster_gather(dl.sum(x, 0), CLUSTER), 0)
    top = dl.max(dl.cluster_gather(dl.max(dl.where(mask, x, float("-inf")), 0), CLUSTER), 0)
    dl.store(sum_ptr + pid, total)
    dl.store(max_ptr + pid, top)


def _expected_gather(programs: int, cluster: int, seed: int, dtype: torch.dtype) -> torch.Tensor:
    q = torch.arange(programs)
    value = (q + seed) % 3 == 0 if dtype == torch.bool else (q * 5 + seed) % 61 - 30
    first = torch.arange(programs) // cluster * cluster
    return value[first[:, None] + torch.arange(cluster)].to(dtype)


def _run_gather(programs, cluster, dtype, device, num_warps=4, seed=3):
    out = torch.full((programs, cluster), 99, dtype=dtype, device=device)  # poison: never a value
    if dtype == torch.bool:
        out = torch.rand(programs, cluster, device=device) < 0.5  # poison: random, half of it wrong
    gather_kernel[(programs,)](out, seed, CLUSTER=cluster, DTYPE=DL_DTYPES[dtype], num_warps=num_warps)
    assert torch.equal(out.cpu(), _expected_gather(programs, cluster, seed, dtype))


@pytest.mark.parametrize("cluster", CLUSTER_SIZES)
@pytest.mark.parametrize("dtype", DTYPES, ids=str)
def test_gather_is_every_program_value_in_rank_order(monkeypatch, cluster, dtype):
    monkeypatch.setattr(interpreter, "CHUNK_ELEMENTS", 24)  # several chunks, each of whole clusters
    _run_gather(8 * cluster, cluster, dtype, "cpu")


def test_split_row_reductions_match_torch():
    x = torch.randn(5, 1000)
    sums, tops = torch.empty(20), torch.empty(20)
    split_row_stats_kernel[(20,)](x, sums, tops, 1000, CHUNK=256, CLUSTER=4)
    torch.testing.assert_close(sums, x.sum(1).repeat_interleave(4), rtol=1e-5, atol=1e-5)
    assert torch.equal(tops, x.amax(1).repeat_interleave(4))


def test_grid_must_be_whole_clusters():
    with pytest.raises(ValueError, match="grid axis 0 has 6 programs, not a multiple of its cluster size 4"):
        gather_kernel[(6,)](torch.empty(6, 4), 0, CLUSTER=4, DTYPE=dl.float32)


def _ptx(cluster: int, dtype: torch.dtype, cc=(9, 0)) -> str:
    args = (torch.empty(4 * cluster, cluster, dtype=dtype), 0)
    fn = gather_kernel.build_ir(gather_kernel.specialize(args, {"CLUSTER": cluster, "DTYPE": DL_DTYPES[dtype]}))
    return compiler.compile_ptx(fn, cc=cc, num_warps=4).ptx


@pytest.mark.parametrize("cluster", CLUSTER_SIZES)
@pytest.mark.parametrize("dtype, bits", [(torch.float32, 32), (torch.bfloat16, 32), (torch.int64, 64),
                                         (torch.float64, 64), (torch.bool, 32)], ids=str)
def test_gather_ptx_pushes_then_one_cluster_barrier_then_local_reads(cluster, dtype, bits):
    ptx = _ptx(cluster, dtype)
    assert re.search(rf"\.reqnctapercluster {cluster}, 1, 1", ptx)
    # a relaxed arrive at entry, waited on before the first write (every peer has started)
    assert ptx.count("barrier.cluster.arrive.relaxed") == 1 == ptx.count("barrier.cluster.arrive.aligned")
    assert ptx.count("barrier.cluster.wait") == 2
    assert ptx.count(f"st.shared::cluster.b{bits}") == 1 == ptx.count("mapa.shared::cluster")
    assert "ld.shared::cluster" not in ptx
    # threads 0..cluster-1 each write one peer's slot; barrier; every thread reads its own slots
    at = 0
    for mark in ("barrier.cluster.arrive.relaxed", "barrier.cluster.wait", "%cluster_ctarank", "st.shared::cluster",
                 "barrier.cluster.arrive.aligned", "barrier.cluster.wait", "ld.shared"):
        at = ptx.index(mark, at) + len(mark)
    if assembler.can_assemble():
        assembler.check_ptx_assembles(ptx, (9, 0))


@dl.kernel
def gather_in_loop_kernel(out_ptr, n, CLUSTER: dl.constexpr):
    """out[p] = sum over i < n of the cluster's sum of (q + i), q its programs."""
    pid = dl.program_id(0)
    acc = 0
    for i in range(n):
        acc += dl.sum(dl.cluster_gather(pid + i, CLUSTER), 0)
    dl.store(out_ptr + pid, acc)


def test_gather_in_a_loop_waits_for_the_reads_before_the_next_writes():
    out = torch.empty(8, dtype=torch.int32)
    gather_in_loop_kernel[(8,)](out, 3, CLUSTER=4)
    first = torch.arange(8) // 4 * 4
    assert out.tolist() == (3 * (4 * first + 6) + 4 * 3).tolist()
    fn = gather_in_loop_kernel.build_ir(gather_in_loop_kernel.specialize((out, 3), {"CLUSTER": 4}))
    ptx = compiler.compile_ptx(fn, cc=(9, 0), num_warps=2).ptx
    gathers = ptx.count("st.shared::cluster")  # LLVM may unroll the loop
    assert gathers >= 1 and ptx.count("barrier.cluster.arrive.aligned") == 2 * gathers
    assert ptx.count("barrier.cluster.wait") == 2 * gathers + 1 and ptx.count("barrier.cluster.arrive.relaxed") == 1


def test_clusters_need_sm_90():
    with pytest.raises(compiler.NVPTXCompilationError, match="sm_90 or newer, not sm_80"):
        _ptx(2, torch.float32, cc=(8, 0))


@pytest.mark.gpu
@pytest.mark.parametrize("num_warps", [1, 4])
@pytest.mark.parametrize("cluster", CLUSTER_SIZES)
@pytest.mark.parametrize("dtype", DTYPES, ids=str)
def test_gather_on_gpu(dtype, cluster, num_warps):
    if torch.cuda.get_device_capability() < (9, 0):
        pytest.skip("thread-block clusters need sm_90")
    _run_gather(1000 * cluster, cluster, dtype, "cuda", num_warps)


@pytest.mark.gpu
def test_split_row_reductions_and_grid_check_on_gpu():
    """Many clusters of one row each (a gather in a loop too), and a grid of partial
    clusters refused before the launch."""
    if torch.cuda.get_device_capability() < (9, 0):
        pytest.skip("thread-block clusters need sm_90")
    x = torch.randn(4099, 3000, device="cuda")
    sums, tops = torch.empty(4099 * 4, device="cuda"), torch.empty(4099 * 4, device="cuda")
    split_row_stats_kernel[(4099 * 4,)](x, sums, tops, 3000, CHUNK=1024, CLUSTER=4, num_warps=8)
    torch.testing.assert_close(sums, x.sum(1).repeat_interleave(4), rtol=1e-5, atol=1e-4)
    assert torch.equal(tops, x.amax(1).repeat_interleave(4))
    with pytest.raises(ValueError, match="not a multiple of its cluster size 4"):
        split_row_stats_kernel[(6,)](x, sums, tops, 3000, CHUNK=1024, CLUSTER=4, num_warps=8)
    out = torch.empty(4000, dtype=torch.int32, device="cuda")
    gather_in_loop_kernel[(4000,)](out, 50, CLUSTER=8, num_warps=2)
    first = torch.arange(4000) // 8 * 8
    assert out.cpu().tolist() == (50 * (8 * first + 28) + 8 * 50 * 49 // 2).tolist()
