"""CPU tests of the runtime: the on-disk binary cache, its key, parameter packing, grid
checks, and the launcher's whole flow against a fake CUDA driver and a fake compiler."""

import ctypes
import dataclasses
import logging
import os
import types
import warnings

import pytest
import torch
from cuda.bindings import driver as cu

from inductor_lite.config import config
from inductor_lite.dsl import assembler
from inductor_lite.counters import counters, reset as reset_counters
from inductor_lite.runtime import cache as cache_mod
from inductor_lite.runtime import build, driver, launcher
from inductor_lite.runtime.cache import BinaryCache, CompiledBinary, cache_key, decode_entry, encode_entry
from inductor_lite.runtime.launcher import ParamBuffer, normalize_grid

from dsl_corpus import axpy_kernel

TOOLCHAIN = {"llvm": "22.1.0", "llvmlite": "0.50.0", "ptxas": "13.0.88"}


def make_binary(name="poi_fused_add_0", seed=0, shared_bytes=0, num_warps=4, param_types=("ptr", "ptr", "i32"),
                cluster_size=1):
    gen = torch.Generator().manual_seed(seed)
    cubin = bytes(torch.randint(0, 256, (3000,), generator=gen, dtype=torch.uint8).tolist())
    return CompiledBinary(
        name=name,
        cubin=cubin,
        shared_bytes=shared_bytes,
        num_warps=num_warps,
        param_types=tuple(param_types),
        cc=(9, 0),
        ptx=f"// ptx of {name} {seed}\n.visible .entry {name}() {{ ret; }}\n",
        llvm_ir=f"; llvm of {name} {seed} \u00b5\ndefine void @{name}() {{ ret void }}\n",
        cluster_size=cluster_size,
    )


def key_of(**changes):
    parts = dict(source="def k(x): pass", spec_key="spec-a", num_warps=4, cc=(9, 0), toolchain=TOOLCHAIN)
    parts.update(changes)
    return cache_key(**parts)


def files_in(directory):
    return sorted(os.listdir(directory)) if os.path.isdir(directory) else []


# --------------------------------------------------------------------------- cache key


def test_key_is_deterministic_hex_and_ignores_toolchain_order():
    key = key_of()
    assert len(key) == 64 and int(key, 16) >= 0
    assert key == key_of(toolchain=dict(reversed(list(TOOLCHAIN.items()))))


@pytest.mark.parametrize(
    "change",
    [
        dict(source="def k(x): return"),
        dict(spec_key="spec-b"),
        dict(num_warps=8),
        dict(cc=(8, 0)),
        dict(cc=(9, 1)),
        dict(toolchain={**TOOLCHAIN, "llvm": "22.1.1"}),
        dict(toolchain={**TOOLCHAIN, "ptxas": "13.1.0"}),
        dict(toolchain={**TOOLCHAIN, "nvjitlink": "13.0"}),
        dict(ftz=True),
        dict(num_stages=2),
        dict(maxnreg=96),
    ],
)
def test_key_changes_with_every_input(change):
    assert key_of(**change) != key_of()


def test_key_parts_do_not_run_together():
    assert key_of(source="ab", spec_key="c") != key_of(source="a", spec_key="bc")


# --------------------------------------------------------------------------- cache entries


def test_round_trip_and_atomic_write_leaves_no_temp_files(tmp_path):
    cache = BinaryCache(tmp_path / "cache")
    binary = make_binary()
    key = key_of()
    assert cache.get(key) is None
    cache.put(key, binary)
    assert files_in(cache.directory) == [f"{key}.ilbin"]
    assert cache.get(key) == binary
    assert BinaryCache(cache.directory).get(key) == binary  # a fresh instance (another process) reads it too
    other = make_binary(name="red_fused_sum_1", seed=1, shared_bytes=4096, param_types=("ptr", "i64", "f32", "f64"),
                        cluster_size=4)
    cache.put(key_of(spec_key="b"), other)
    assert cache.get(key_of(spec_key="b")) == other and cache.get(key_of(spec_key="b")).cluster_size == 4
    with pytest.raises(ValueError, match="cluster size 3"):
        make_binary(cluster_size=3)
    assert cache.get(key) == binary
    assert not [f for f in files_in(cache.directory) if f.endswith(".tmp")]


def test_failed_write_removes_temp_file_and_turns_cache_off(tmp_path, monkeypatch):
    cache = BinaryCache(tmp_path)

    def failing_replace(src, dst):
        raise OSError(28, "No space left on device")

    monkeypatch.setattr(cache_mod.os, "replace", failing_replace)
    with pytest.warns(RuntimeWarning, match="No space left"):
        cache.put(key_of(), make_binary())
    assert files_in(tmp_path) == []
    assert not cache.enabled


def test_interrupted_write_removes_temp_file_and_reraises(tmp_path, monkeypatch):
    cache = BinaryCache(tmp_path)

    def interrupted_fsync(fd):
        raise KeyboardInterrupt

    monkeypatch.setattr(cache_mod.os, "fsync", interrupted_fsync)
    with pytest.raises(KeyboardInterrupt):
        cache.put(key_of(), make_binary())
    assert files_in(tmp_path) == []


def _truncate(data):
    return data[: len(data) // 2]


def _flip(offset):
    def corrupt(data):
        b = bytearray(data)
        b[offset] ^= 0x01
        return bytes(b)

    return corrupt


@pytest.mark.parametrize(
    "corrupt",
    [
        _truncate,
        lambda data: data[:-1],
        lambda data: b"",
        lambda data: b"\x00" * len(data),
        lambda data: os.urandom(len(data)),
        _flip(0),  # magic
        _flip(30),  # header length / header
        _flip(200),  # header JSON or cubin
        _flip(-1),  # checksum
        _flip(-40),  # LLVM IR
    ],
    ids=["truncated-half", "truncated-1", "empty", "zeros", "garbage", "magic", "header", "body", "digest", "tail"],
)
def test_corrupt_entry_is_a_miss_and_is_deleted_then_rebuilt(tmp_path, corrupt):
    cache = BinaryCache(tmp_path)
    key, binary = key_of(), make_binary()
    cache.put(key, binary)
    path = cache.path(key)
    with open(path, "rb") as f:
        data = f.read()
    with open(path, "wb") as f:
        f.write(corrupt(data))
    with warnings.catch_warnings():
        warnings.simplefilter("error")  # corruption is not a reason to turn the cache off
        assert cache.get(key) is None
    assert not os.path.exists(path)
    assert cache.enabled
    cache.put(key, binary)
    assert cache.get(key) == binary


def test_entry_under_another_key_is_rejected(tmp_path):
    cache = BinaryCache(tmp_path)
    cache.put(key_of(), make_binary())
    os.replace(cache.path(key_of()), cache.path(key_of(spec_key="x")))
    assert cache.get(key_of(spec_key="x")) is None
    assert files_in(tmp_path) == []


def test_decode_rejects_well_checksummed_but_inconsistent_entries():
    key = key_of()
    good = encode_entry(key, make_binary())
    assert decode_entry(good, key) == make_binary()
    with pytest.raises(cache_mod.CorruptEntryError, match="key"):
        decode_entry(good, key_of(spec_key="other"))


def test_disabled_cache_neither_reads_nor_writes(tmp_path):
    cache = BinaryCache(tmp_path)
    cache.put(key_of(), make_binary())
    with config.patch(disable_cache=True):
        assert not cache.enabled
        assert cache.get(key_of()) is None
        cache.put(key_of(spec_key="b"), make_binary())
    assert files_in(tmp_path) == [f"{key_of()}.ilbin"]
    assert cache.get(key_of()) == make_binary()


def test_uncreatable_directory_warns_once_and_degrades(tmp_path):
    blocker = tmp_path / "a_file"
    blocker.write_text("not a directory")
    cache = BinaryCache(blocker / "cache")
    with pytest.warns(RuntimeWarning, match="cache turned off"):
        cache.put(key_of(), make_binary())
    assert not cache.enabled and "cannot write" in cache.disabled_reason
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        cache.put(key_of(spec_key="b"), make_binary())
        assert cache.get(key_of()) is None


def test_unreadable_directory_warns_and_degrades(tmp_path):
    blocker = tmp_path / "a_file"
    blocker.write_text("not a directory")
    cache = BinaryCache(blocker)  # reading <file>/<key>.ilbin fails with NotADirectoryError
    with pytest.warns(RuntimeWarning, match="cannot read"):
        assert cache.get(key_of()) is None
    assert not cache.enabled


def test_bad_key_is_rejected(tmp_path):
    with pytest.raises(ValueError, match="64 lowercase hex"):
        BinaryCache(tmp_path).get("../../etc/passwd")


def test_default_cache_follows_config(tmp_path):
    with config.patch(cache_dir=str(tmp_path / "one")):
        one = cache_mod.default_cache()
        assert one.directory == str(tmp_path / "one") and cache_mod.default_cache() is one
    with config.patch(cache_dir=str(tmp_path / "two")):
        assert cache_mod.default_cache().directory == str(tmp_path / "two")


def test_unknown_param_type_is_rejected():
    with pytest.raises(ValueError, match="unknown param types"):
        make_binary(param_types=("ptr", "u8"))


# --------------------------------------------------------------------------- parameter packing

_READ = {
    "ptr": ctypes.c_uint64, "i32": ctypes.c_int32, "i64": ctypes.c_int64, "f32": ctypes.c_float, "f64": ctypes.c_double
}


def read_params(address, param_types):
    """Decode a kernelParams array as the driver would: pointer i -> a value of type i."""
    pointers = (ctypes.c_void_p * len(param_types)).from_address(address)
    return [_READ[t].from_address(p).value for t, p in zip(param_types, pointers)]


class FakeCudaTensor:
    """Stands in for a CUDA tensor on device 0: what the launcher reads of a tensor."""

    def __init__(self, address, device_index=0):
        self.address, self.index = address, device_index
        self.device = torch.device("cuda", device_index)

    def data_ptr(self):
        return self.address

    def get_device(self):
        return self.index


def test_param_buffer_packs_each_type():
    types_ = ("ptr", "i32", "i64", "f32", "f64", "ptr")
    buf = ParamBuffer(types_, "k", device=0)
    a, b = FakeCudaTensor(0x7F00_0000_1000), FakeCudaTensor(0x7F00_0000_2010)
    buf.fill([a, -7, 2**40 + 3, 1 / 3, 1 / 3, b])
    got = read_params(buf.address, types_)
    assert got[0] == a.address and got[5] == b.address
    assert got[1] == -7 and got[2] == 2**40 + 3
    assert got[3] == ctypes.c_float(1 / 3).value and got[3] != 1 / 3  # rounded to fp32
    assert got[4] == 1 / 3
    # refilling reuses the same buffer and address
    address = buf.address
    buf.fill([b, 2**31 - 1, -(2**63), -2.5, 1e300, a])
    assert buf.address == address
    assert read_params(address, types_) == [b.address, 2**31 - 1, -(2**63), -2.5, 1e300, a.address]


def test_param_buffer_accepts_real_tensors_and_bools():
    t = torch.randn(4)
    buf = ParamBuffer(("ptr", "i32"), "k", device=-1)  # -1 is what a CPU tensor reports
    buf.fill([t, True])
    assert read_params(buf.address, ("ptr", "i32")) == [t.data_ptr(), 1]


@pytest.mark.parametrize(
    "param_types, args, error, match",
    [
        (("i32",), [2**31], ValueError, "does not fit in i32"),
        (("i32",), [-(2**31) - 1], ValueError, "does not fit in i32"),
        (("i64",), [2**63], ValueError, "does not fit in i64"),
        (("i32",), [1.5], TypeError, r"argument 0 \(i32\) must be an int"),
        (("f32",), ["x"], TypeError, r"argument 0 \(f32\) must be a float"),
        (("ptr",), [3], TypeError, r"argument 0 \(ptr\) must be a CUDA tensor"),
        (("ptr",), [torch.zeros(2)], ValueError, "is on cpu, but the kernel runs on cuda:0"),
        (("ptr",), [FakeCudaTensor(16, device_index=1)], ValueError, "is on cuda:1"),
        (("ptr", "i32"), [FakeCudaTensor(16)], TypeError, "takes 2 runtime arguments, got 1"),
    ],
)
def test_param_buffer_rejects_bad_arguments(param_types, args, error, match):
    with pytest.raises(error, match=match) as info:
        ParamBuffer(param_types, "my_kernel", device=0).fill(args)
    assert "my_kernel" in str(info.value)


def test_param_buffer_without_params():
    buf = ParamBuffer((), "k", device=0)
    buf.fill([])
    assert buf.address


# --------------------------------------------------------------------------- grid


def test_normalize_grid():
    assert normalize_grid((5,), "k") == (5, 1, 1)
    assert normalize_grid([5, 6], "k") == (5, 6, 1)
    assert normalize_grid((2**31 - 1, 65535, 65535), "k") == (2**31 - 1, 65535, 65535)
    assert normalize_grid((0,), "k") == (0, 1, 1)
    assert normalize_grid((torch.tensor(3).item(),), "k") == (3, 1, 1)


@pytest.mark.parametrize(
    "grid, error, match",
    [
        ((2**31,), ValueError, "grid x = 2147483648"),
        ((1, 65536), ValueError, "grid y = 65536"),
        ((1, 1, 65536), ValueError, "grid z"),
        ((-1,), ValueError, "grid x = -1"),
        ((), TypeError, "1 to 3 ints"),
        ((1, 1, 1, 1), TypeError, "1 to 3 ints"),
        ((2.0,), TypeError, "1 to 3 ints"),
        (4, TypeError, "1 to 3 ints"),
    ],
)
def test_normalize_grid_rejects(grid, error, match):
    with pytest.raises(error, match=match) as info:
        normalize_grid(grid, "my_kernel")
    assert "my_kernel" in str(info.value)


# --------------------------------------------------------------------------- launcher, fake driver

SUCCESS = cu.CUresult.CUDA_SUCCESS
OPTIN = 227 * 1024  # H100's opt-in shared memory per block


class FakeDriver:
    """The subset of ``cuda.bindings.driver`` the runtime calls, recording what it is asked."""

    CUresult = cu.CUresult
    CUdevice_attribute = cu.CUdevice_attribute
    CUfunction_attribute = cu.CUfunction_attribute

    def __init__(self):
        self.primary = cu.CUcontext(0xC0)
        self.current = self.primary
        self.context_stack = []
        self.modules = []  # images loaded
        self.func_attrs = []  # (attribute, value) set
        self.launches = []
        self.param_types = ()
        self.launch_result = SUCCESS
        self.max_threads = 1024
        self.static_shared = 0

    def cuInit(self, flags):
        return (SUCCESS,)

    def cuDeviceGetCount(self):
        return SUCCESS, 1

    def cuDeviceGet(self, ordinal):
        return SUCCESS, cu.CUdevice(ordinal)

    def cuCtxGetCurrent(self):
        return SUCCESS, self.current

    def cuCtxGetDevice(self):
        return SUCCESS, cu.CUdevice(0)

    def cuDevicePrimaryCtxRetain(self, device):
        return SUCCESS, self.primary

    def cuCtxPushCurrent(self, ctx):
        self.context_stack.append(self.current)
        self.current = ctx
        return (SUCCESS,)

    def cuCtxPopCurrent(self):
        popped, self.current = self.current, self.context_stack.pop()
        return SUCCESS, popped

    def cuDeviceGetAttribute(self, attribute, device):
        a = cu.CUdevice_attribute
        values = {
            a.CU_DEVICE_ATTRIBUTE_COMPUTE_CAPABILITY_MAJOR: 9,
            a.CU_DEVICE_ATTRIBUTE_COMPUTE_CAPABILITY_MINOR: 0,
            a.CU_DEVICE_ATTRIBUTE_MAX_SHARED_MEMORY_PER_BLOCK_OPTIN: OPTIN,
        }
        return SUCCESS, values[attribute]

    def cuModuleLoadData(self, image):
        assert int(self.current) == int(self.primary), "module loaded outside the device's context"
        self.modules.append(bytes(image))
        return SUCCESS, cu.CUmodule(0x1000 + len(self.modules))

    def cuModuleGetFunction(self, module, name):
        return SUCCESS, cu.CUfunction(int(module) + 0x10000)

    def cuFuncGetAttribute(self, attribute, function):
        f = cu.CUfunction_attribute
        values = {
            f.CU_FUNC_ATTRIBUTE_MAX_THREADS_PER_BLOCK: self.max_threads,
            f.CU_FUNC_ATTRIBUTE_SHARED_SIZE_BYTES: self.static_shared,
        }
        return SUCCESS, values[attribute]

    def cuFuncSetAttribute(self, function, attribute, value):
        self.func_attrs.append((attribute, value))
        return (SUCCESS,)

    def cuLaunchKernel(self, f, gx, gy, gz, bx, by, bz, shared, stream, params, extra):
        self.launches.append(
            dict(
                function=int(f),
                grid=(gx, gy, gz),
                block=(bx, by, bz),
                shared=shared,
                stream=stream,
                params=read_params(params, self.param_types),
                context=int(self.current),
                extra=extra,
            )
        )
        return (self.launch_result,)

    def cuGetErrorName(self, result):
        return SUCCESS, result.name.encode()

    def cuGetErrorString(self, result):
        return SUCCESS, b"fake description"


@dataclasses.dataclass(frozen=True)
class FakeSpec:
    args: tuple
    constexprs: tuple

    def key(self):
        return repr((self.args, self.constexprs))


class FakeKernel:
    """What the launcher uses of a DSL kernel; specialises on the int arg's value % 16."""

    def __init__(self, name="poi_fused_mul_0", source="def poi_fused_mul_0(in_ptr0, out_ptr0, xnumel, scale): ...",
                 debug_dir=None):
        self.name, self.source, self.debug_dir = name, source, debug_dir
        self.ftz = False
        self.built = []

    def key_source(self):
        return self.source

    def specialize(self, args, constexprs):
        arg_specs = tuple(
            ("ptr", None) if hasattr(a, "data_ptr") else (type(a).__name__, a % 16 == 0 if type(a) is int else None)
            for a in args
        )
        return FakeSpec(arg_specs, tuple(sorted(constexprs.items())))

    def build_ir(self, spec):
        self.built.append(spec)
        return ("ir", self.name, spec)


@pytest.fixture
def fake_driver(monkeypatch, tmp_path):
    """The real launcher and cache over a fake driver on device 0, with a fresh cache dir."""
    fake = FakeDriver()
    monkeypatch.setattr(driver, "cu", fake)
    monkeypatch.setattr(driver, "current_stream", lambda index: 0x57)
    monkeypatch.setattr(torch.cuda, "init", lambda: None)
    monkeypatch.setattr(launcher, "_device_of", lambda args, name: 0)
    cached = (driver._device, driver._context, driver.compute_capability)
    for fn in cached:
        fn.cache_clear()
    launcher.clear_memory_cache()
    reset_counters()
    with config.patch(cache_dir=str(tmp_path / "cache"), disable_cache=False, logs=""):
        yield fake
    launcher.clear_memory_cache()
    for fn in cached:
        fn.cache_clear()


@pytest.fixture
def fake(fake_driver, monkeypatch, tmp_path):
    """`fake_driver` plus a fake compiler and assembler that record what they build."""
    fake_driver.param_types = ("ptr", "ptr", "i32", "f32")
    compiled = []

    def compile_ptx(fn, *, cc, num_warps, num_stages=1, maxnreg=None):
        tag, name, spec = fn
        assert tag == "ir"
        compiled.append((name, spec, cc, num_warps))
        return types.SimpleNamespace(
            name=name, llvm_ir=f"; {name} {spec.key()}", ptx=f"// {name} {spec.key()} nw={num_warps}", cc=cc,
            num_warps=num_warps, shared_bytes=state.shared_bytes, param_types=("ptr", "ptr", "i32", "f32"),
            cluster_size=1,
        )

    def ptx_to_cubin(ptx, cc):
        assert int(fake_driver.current) == int(fake_driver.primary), "assembled outside the device's context"
        return b"CUBIN:" + ptx.encode()

    monkeypatch.setattr(build, "compile_ptx", compile_ptx)
    monkeypatch.setattr(build, "ptx_to_cubin", ptx_to_cubin)
    monkeypatch.setattr(launcher, "toolchain_versions", lambda: dict(TOOLCHAIN))
    state = types.SimpleNamespace(driver=fake_driver, compiled=compiled, shared_bytes=0, cache_dir=tmp_path / "cache")
    return state


def run(kernel, x_addr=0x7000_0000, n=1000, scale=0.5, grid=(4,), num_warps=4, constexprs=None):
    x, out = FakeCudaTensor(x_addr), FakeCudaTensor(x_addr + 0x10000)
    launcher.launch(kernel, grid, [x, out, n, scale], constexprs or {"XBLOCK": 256}, num_warps)
    return x, out


def test_launch_compiles_once_then_hits_memory_then_disk(fake):
    kernel = FakeKernel()
    x, out = run(kernel)
    assert counters["kernels_compiled"] == 1 and counters["cache_hits"] == 0
    assert fake.compiled == [(kernel.name, kernel.built[0], (9, 0), 4)]
    assert len(fake.driver.modules) == 1 and fake.driver.modules[0].startswith(b"CUBIN:")
    (first,) = fake.driver.launches
    assert first["grid"] == (4, 1, 1) and first["block"] == (128, 1, 1) and first["shared"] == 0
    assert first["stream"] == 0x57 and first["extra"] == 0 and first["context"] == int(fake.driver.primary)
    assert first["params"] == [x.address, out.address, 1000, 0.5]

    run(kernel, x_addr=0x9000_0000, n=1001, scale=-2.0, grid=(5, 2))  # same specialisation: memory hit
    assert counters["kernels_compiled"] == 1 and counters["cache_hits"] == 0 and len(fake.driver.modules) == 1
    assert fake.driver.launches[1]["params"] == [0x9000_0000, 0x9001_0000, 1001, -2.0]
    assert fake.driver.launches[1]["grid"] == (5, 2, 1)

    launcher.clear_memory_cache()
    run(kernel, n=1002)
    assert counters["kernels_compiled"] == 1 and counters["cache_hits"] == 1
    assert len(fake.driver.modules) == 2 and fake.driver.modules[1] == fake.driver.modules[0]
    assert len(fake.compiled) == 1


def test_new_specialisation_or_num_warps_compiles_again(fake):
    kernel = FakeKernel()
    run(kernel, n=1000)
    run(kernel, n=1024)  # divisible by 16: another specialisation
    run(kernel, n=1000, num_warps=8)
    run(kernel, n=1000, constexprs={"XBLOCK": 512})
    assert counters["kernels_compiled"] == 4
    assert [c[3] for c in fake.compiled] == [4, 4, 8, 4]
    assert fake.driver.launches[2]["block"] == (256, 1, 1)
    assert len(files_in(fake.cache_dir)) == 4


def test_disabled_cache_compiles_in_every_process(fake):
    kernel = FakeKernel()
    with config.patch(disable_cache=True):
        run(kernel)
        launcher.clear_memory_cache()
        run(kernel)
    assert counters["kernels_compiled"] == 2 and counters["cache_hits"] == 0
    assert files_in(fake.cache_dir) == []


def test_debug_dumps_on_miss_and_on_disk_hit(fake, tmp_path):
    kernel = FakeKernel(debug_dir=str(tmp_path / "dbg1"))
    run(kernel)
    dumped = {f: (tmp_path / "dbg1" / f).read_text() for f in files_in(tmp_path / "dbg1")}
    assert sorted(dumped) == [f"{kernel.name}.ll", f"{kernel.name}.ptx"]
    assert dumped[f"{kernel.name}.ptx"].startswith(f"// {kernel.name}")
    launcher.clear_memory_cache()
    kernel.debug_dir = str(tmp_path / "dbg2")
    run(kernel)
    assert counters["cache_hits"] == 1
    assert {f: (tmp_path / "dbg2" / f).read_text() for f in files_in(tmp_path / "dbg2")} == dumped


def test_cache_and_ptx_logs(fake):
    records = []
    handler = logging.Handler()
    handler.emit = records.append
    loggers = [logging.getLogger(f"inductor_lite.{name}") for name in ("cache", "ptx")]
    for logger in loggers:
        logger.addHandler(handler)
    kernel = FakeKernel()
    try:
        with config.patch(logs="cache,ptx"):
            run(kernel)
            launcher.clear_memory_cache()
            run(kernel)
    finally:
        for logger in loggers:
            logger.removeHandler(handler)
    messages = [(r.name, r.getMessage()) for r in records]
    # the compiler logs the PTX it builds; the launcher logs the PTX of a cache hit
    assert [name for name, _ in messages] == ["inductor_lite.cache", "inductor_lite.cache", "inductor_lite.ptx"]
    assert messages[0][1].startswith(f"miss {kernel.name}") and messages[1][1].startswith(f"hit {kernel.name}")
    assert f"// {kernel.name}" in messages[2][1]


def test_context_is_pushed_when_another_is_current_and_restored(fake):
    other = cu.CUcontext(0xBEEF)
    kernel = FakeKernel()
    run(kernel)  # load in the primary context
    fake.driver.current = other
    run(kernel)
    assert fake.driver.launches[-1]["context"] == int(fake.driver.primary)
    assert int(fake.driver.current) == int(other) and fake.driver.context_stack == []


def test_large_shared_memory_opts_in_and_too_much_is_an_error(fake):
    fake.shared_bytes = 100 * 1024
    run(FakeKernel())
    raise_limit = cu.CUfunction_attribute.CU_FUNC_ATTRIBUTE_MAX_DYNAMIC_SHARED_SIZE_BYTES
    assert fake.driver.func_attrs == [(raise_limit, 100 * 1024)]
    assert fake.driver.launches[0]["shared"] == 100 * 1024
    fake.shared_bytes = OPTIN + 1
    with pytest.raises(ValueError, match=r"'big_0' needs 232449 bytes of shared memory"):
        run(FakeKernel(name="big_0", source="big"))


def test_small_shared_memory_needs_no_opt_in(fake):
    fake.shared_bytes = 48 * 1024
    run(FakeKernel())
    assert fake.driver.func_attrs == []


def test_too_many_threads_for_the_kernel_is_an_error(fake):
    fake.driver.max_threads = 128
    with pytest.raises(ValueError, match="256 threads per block .* at most 128"):
        run(FakeKernel(), num_warps=8)


def test_driver_failure_names_the_kernel(fake):
    fake.driver.launch_result = cu.CUresult.CUDA_ERROR_LAUNCH_FAILED
    expected = r"launching kernel 'poi_fused_mul_0'.*CUDA_ERROR_LAUNCH_FAILED \(fake description\)"
    with pytest.raises(driver.CudaDriverError, match=expected) as info:
        run(FakeKernel())
    assert info.value.result == cu.CUresult.CUDA_ERROR_LAUNCH_FAILED


def test_empty_grid_launches_nothing(fake):
    run(FakeKernel(), grid=(0,))
    assert fake.driver.launches == []


@pytest.mark.parametrize("num_warps", [0, 33, 2.0])
def test_bad_num_warps(fake, num_warps):
    with pytest.raises(ValueError, match="num_warps"):
        run(FakeKernel(), num_warps=num_warps)


def test_precompile_accepts_device_spellings_and_is_idempotent(fake):
    kernel = FakeKernel()
    spec = kernel.specialize([FakeCudaTensor(16), FakeCudaTensor(32), 7, 1.0], {"XBLOCK": 256})
    loaded = launcher.precompile(kernel, spec, 4, "cuda:0")
    assert launcher.precompile(kernel, spec, 4, torch.device("cuda", 0)) is loaded
    assert launcher.precompile(kernel, spec, 4, 0) is loaded
    assert counters["kernels_compiled"] == 1 and fake.driver.launches == []
    with pytest.raises(ValueError, match="CUDA devices"):
        launcher.precompile(kernel, spec, 4, "cpu")


def test_check_unwraps_payloads():
    assert driver.check((SUCCESS,), "x") is None
    assert driver.check((SUCCESS, 5), "x") == 5
    assert driver.check((SUCCESS, 5, 6), "x") == (5, 6)


# --------------------------------------------------------------------------- real compiler, fake driver


@pytest.mark.skipif(not assembler.can_assemble(), reason="needs nvJitLink or ptxas")
def test_real_kernel_through_the_real_compiler_and_cache(fake_driver, tmp_path):
    x, y, out = (torch.randn(1000) for _ in range(3))  # CPU tensors: only their types and alignment matter here
    spec = axpy_kernel.specialize([x, y, out, 1000, 0.5], {"XBLOCK": 256})
    axpy_kernel.debug_dir = str(tmp_path / "dbg")
    try:
        loaded = launcher.precompile(axpy_kernel, spec, 4, 0)
    finally:
        del axpy_kernel.debug_dir
    assert counters["kernels_compiled"] == 1
    binary = loaded.binary
    assert binary.name == "axpy_kernel" and binary.param_types == ("ptr", "ptr", "ptr", "i32", "f32")
    assert binary.cubin.startswith(b"\x7fELF") and fake_driver.modules == [binary.cubin]
    assert ".entry axpy_kernel" in binary.ptx and "define" in binary.llvm_ir
    assert (tmp_path / "dbg" / "axpy_kernel.ptx").read_text() == binary.ptx

    fake_driver.param_types = binary.param_types
    a, b, c = FakeCudaTensor(0x7000_0000), FakeCudaTensor(0x7100_0000), FakeCudaTensor(0x7200_0000)
    loaded.launch((4,), [a, b, c, 1000, 0.5])
    assert fake_driver.launches[0]["params"] == [a.address, b.address, c.address, 1000, 0.5]
    assert fake_driver.launches[0]["block"] == (128, 1, 1)
    assert fake_driver.launches[0]["shared"] == binary.shared_bytes

    launcher.clear_memory_cache()
    assert launcher.precompile(axpy_kernel, spec, 4, 0).binary == binary
    assert counters["kernels_compiled"] == 1 and counters["cache_hits"] == 1
