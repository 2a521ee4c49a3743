"""Content-addressed on-disk cache of compiled kernel binaries.

An entry is named by `cache_key`: a sha256 over everything that decides the binary
(DSL source and the module constants it reads, specialisation, num_warps,
flush-to-zero, target compute capability, every toolchain version). Since the name
says what the content must be, entries are never updated, only written once;
concurrent writers of one key write the same bytes, so no lock is needed.

File format (``<directory>/<key>.ilbin``)::

    MAGIC | u64 little-endian header length | JSON header | cubin | PTX | LLVM IR | sha256 of all before

The header holds the key, the metadata of `CompiledBinary` and the byte length of each
section. A file that fails any check (checksum, magic, header, lengths, key) is deleted
and reported as a miss, never trusted. Writes go to a temp file in the same directory,
are fsynced, then ``os.replace``d over the final name, so a reader sees a whole entry or
none. A directory that cannot be created, read or written turns the cache off with one
warning; compilation goes on without it.
"""

from __future__ import annotations

import dataclasses
import hashlib
import json
import os
import re
import struct
import tempfile
import warnings
from typing import Mapping, Optional

from ..config import config
from ..dsl.ir import CLUSTER_SIZES
from ..logs import log_artifact

FORMAT_VERSION = 2
MAGIC = b"inductor_lite-cubin\x00"
_LENGTH = struct.Struct("<Q")
_DIGEST_BYTES = hashlib.sha256().digest_size
_KEY_RE = re.compile(r"[0-9a-f]{64}")
PARAM_TYPES = ("ptr", "i32", "i64", "f32", "f64")


@dataclasses.dataclass(frozen=True)
class CompiledBinary:
    """A kernel binary plus what is needed to launch and debug it.

    Attributes:
        name: the kernel's entry-point symbol in ``cubin``.
        cubin: the machine code (ELF bytes).
        shared_bytes: dynamic shared memory per block, in bytes.
        num_warps: warps per block it was compiled for (32 threads each).
        param_types: one of `PARAM_TYPES` per runtime argument, in order.
        cc: target compute capability, e.g. ``(9, 0)``.
        ptx: the PTX it was assembled from.
        llvm_ir: the optimised LLVM IR the PTX was emitted from.
        cluster_size: programs per thread-block cluster (1: none; see
            ``inductor_lite.dsl.language.cluster_gather``); the launch grid's x must be
            a multiple of it.

    Raises:
        ValueError: an unknown param type, or a cluster size other than 1, 2, 4 or 8.
    """

    name: str
    cubin: bytes
    shared_bytes: int
    num_warps: int
    param_types: tuple[str, ...]
    cc: tuple[int, int]
    ptx: str
    llvm_ir: str
    cluster_size: int = 1

    def __post_init__(self):
        bad = [t for t in self.param_types if t not in PARAM_TYPES]
        if bad:
            raise ValueError(f"kernel {self.name!r}: unknown param types {bad}; expected each of {PARAM_TYPES}")
        if self.cluster_size not in (1,) + CLUSTER_SIZES:
            raise ValueError(f"kernel {self.name!r}: cluster size {self.cluster_size!r}; expected one of "
                             f"{(1,) + CLUSTER_SIZES}")


def cache_key(source: str, spec_key: str, num_warps: int, cc: tuple[int, int], toolchain: Mapping[str, str],
              ftz: bool = False, num_stages: int = 1, maxnreg: Optional[int] = None) -> str:
    """The cache key (64 hex digits) of one compilation.

    Args:
        source: the kernel's DSL source and the constants it reads (``Kernel.key_source``).
        spec_key: ``Specialization.key()``, stable across processes.
        num_warps: warps per block.
        cc: target compute capability (major, minor).
        toolchain: every tool's version (LLVM, llvmlite, libdevice, ptxas/nvJitLink, ...).
        ftz: the kernel's flush-to-zero option (``Kernel.ftz``).
        num_stages: the launch's software pipelining depth.
        maxnreg: the launch's cap on registers per thread (None: none).

    The parts are JSON-encoded as one list before hashing, so no two different inputs
    concatenate to the same bytes.
    """
    parts = [FORMAT_VERSION, source, spec_key, int(num_warps), [int(c) for c in cc], sorted(toolchain.items()),
             bool(ftz), int(num_stages), maxnreg]
    return hashlib.sha256(json.dumps(parts).encode()).hexdigest()


class CorruptEntryError(Exception):
    """A cache file that is not a whole, self-consistent entry."""


def encode_entry(key: str, binary: CompiledBinary) -> bytes:
    """The file contents of ``binary`` stored under ``key`` (see the module docstring)."""
    sections = (binary.cubin, binary.ptx.encode(), binary.llvm_ir.encode())
    header = json.dumps(
        {
            "key": key,
            "name": binary.name,
            "shared_bytes": binary.shared_bytes,
            "num_warps": binary.num_warps,
            "param_types": list(binary.param_types),
            "cc": list(binary.cc),
            "cluster_size": binary.cluster_size,
            "sizes": [len(s) for s in sections],
        }
    ).encode()
    body = b"".join((MAGIC, _LENGTH.pack(len(header)), header, *sections))
    return body + hashlib.sha256(body).digest()


def decode_entry(data: bytes, key: str) -> CompiledBinary:
    """Parse and verify a file written by `encode_entry`.

    Raises:
        CorruptEntryError: wrong checksum, magic, header, section lengths or key.
    """
    body, digest = data[:-_DIGEST_BYTES], data[-_DIGEST_BYTES:]
    if len(data) < len(MAGIC) + _LENGTH.size + _DIGEST_BYTES or hashlib.sha256(body).digest() != digest:
        raise CorruptEntryError("checksum mismatch (truncated or modified)")
    if not body.startswith(MAGIC):
        raise CorruptEntryError("not an inductor_lite cache entry (bad magic)")
    start = len(MAGIC) + _LENGTH.size
    (header_len,) = _LENGTH.unpack_from(body, len(MAGIC))
    try:
        header = json.loads(body[start : start + header_len])
        sizes = [int(s) for s in header["sizes"]]
        if header["key"] != key:
            raise CorruptEntryError(f"entry holds key {header['key']!r}, not {key!r}")
        if len(sizes) != 3 or min(sizes) < 0 or start + header_len + sum(sizes) != len(body):
            raise CorruptEntryError(f"section lengths {sizes} do not add up to the file size")
        cubin_at = start + header_len
        ptx_at = cubin_at + sizes[0]
        llvm_at = ptx_at + sizes[1]
        return CompiledBinary(
            name=str(header["name"]),
            cubin=body[cubin_at:ptx_at],
            shared_bytes=int(header["shared_bytes"]),
            num_warps=int(header["num_warps"]),
            param_types=tuple(header["param_types"]),
            cc=tuple(int(c) for c in header["cc"]),
            ptx=body[ptx_at:llvm_at].decode(),
            llvm_ir=body[llvm_at:].decode(),
            cluster_size=int(header["cluster_size"]),
        )
    except (ValueError, KeyError, TypeError) as e:  # json and unicode errors are ValueErrors
        raise CorruptEntryError(f"unparsable entry: {e}") from e



def write_atomically(path: str, data: bytes) -> None:
    """Write ``data`` to ``path`` through a temp file in the same folder (created if
    missing), fsynced, then ``os.replace``d over ``path``: a reader sees the whole file
    or none, and concurrent writers of one path leave one whole file.

    Raises:
        OSError: the folder or the file cannot be written (no temp file is left).
    """
    directory = os.path.dirname(path)
    os.makedirs(directory, exist_ok=True)
    fd, tmp = tempfile.mkstemp(dir=directory, prefix=f".{os.path.basename(path)[:16]}.", suffix=".tmp")
    try:
        with os.fdopen(fd, "wb") as f:
            f.write(data)
            f.flush()
            os.fsync(f.fileno())
        os.replace(tmp, path)
    except BaseException:
        try:
            os.remove(tmp)
        except OSError:
            pass
        raise

class DiskStore:
    """Entries of one kind in one directory, each a file named by its sha256 key: the
    part `BinaryCache` and `graph_cache.GraphCache` share.

    Honours ``config.disable_cache`` on every call (`enabled`). Writes are atomic
    (`write_atomically`). After the first OS error on the directory (cannot create,
    read, write or delete) it warns once (``what`` is off, so ``consequence``) and stops.

    Args:
        directory: where entries live; created on the first write.
    """

    suffix = ""
    """File name extension of an entry."""
    what = "cache"
    consequence = ""

    def __init__(self, directory: str | os.PathLike):
        self.directory = os.fspath(directory)
        self.disabled_reason: Optional[str] = None

    @classmethod
    def for_directory(cls, directory: str):
        """The process-wide store of this kind for ``directory`` (one instance, so a
        broken directory warns once)."""
        store = _stores.get((cls, directory))
        if store is None:
            store = _stores[(cls, directory)] = cls(directory)
        return store

    @property
    def enabled(self) -> bool:
        return not config.disable_cache and self.disabled_reason is None

    def path(self, key: str) -> str:
        """The file of entry ``key``.

        Raises:
            ValueError: ``key`` is not 64 lowercase hex digits.
        """
        if not isinstance(key, str) or not _KEY_RE.fullmatch(key):
            raise ValueError(f"{self.what} key must be 64 lowercase hex digits (a sha256), got {key!r}")
        return os.path.join(self.directory, f"{key}{self.suffix}")

    def _read(self, path: str) -> Optional[bytes]:
        """The bytes of ``path``; None when the store is off or after an OS error (which
        turns it off).

        Raises:
            FileNotFoundError: no entry there (a miss).
        """
        if not self.enabled:
            return None
        try:
            with open(path, "rb") as f:
                return f.read()
        except FileNotFoundError:
            raise
        except OSError as e:
            self._disable(f"cannot read {path}: {e}")
            return None

    def _write(self, key: str, data: bytes) -> None:
        """Store ``data`` as entry ``key`` atomically (no-op when the store is off)."""
        path = self.path(key)
        if not self.enabled:
            return
        try:
            write_atomically(path, data)
        except OSError as e:
            self._disable(f"cannot write {path}: {e}")

    def _remove(self, path: str) -> None:
        try:
            os.remove(path)
        except FileNotFoundError:
            pass
        except OSError as e:
            self._disable(f"cannot delete {path}: {e}")

    def _disable(self, reason: str) -> None:
        if self.disabled_reason is None:
            warnings.warn(
                f"inductor_lite: {self.what} turned off ({reason}); {self.consequence}. "
                f"Set INDUCTOR_LITE_CACHE_DIR to a writable directory to fix this.",
                RuntimeWarning,
                stacklevel=4,
            )
            self.disabled_reason = reason


class BinaryCache(DiskStore):
    """On-disk cache of `CompiledBinary` keyed by `cache_key` (a `DiskStore` of
    ``<key>.ilbin`` files).

    Args:
        directory: where entries live; created on the first write.
    """

    suffix = ".ilbin"
    what = "kernel binary cache"
    consequence = "kernels will be recompiled in every process"

    def get(self, key: str) -> Optional[CompiledBinary]:
        """The entry under ``key``, or None on a miss (absent, corrupt, or cache off).
        A corrupt entry is deleted."""
        path = self.path(key)
        try:
            data = self._read(path)
        except FileNotFoundError:
            return None
        if data is None:
            return None
        try:
            return decode_entry(data, key)
        except CorruptEntryError as e:
            log_artifact("cache", f"corrupt entry {path}: {e}; deleting it")
            self._remove(path)
            return None

    def put(self, key: str, binary: CompiledBinary) -> None:
        """Store ``binary`` under ``key`` atomically (no-op when the cache is off)."""
        self._write(key, encode_entry(key, binary))


_stores: dict[tuple[type, str], DiskStore] = {}


def default_cache() -> BinaryCache:
    """The process-wide cache at ``config.cache_dir``."""
    return BinaryCache.for_directory(config.cache_dir)
