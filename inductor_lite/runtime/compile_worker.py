"""A compile worker (`compile_pool`): reads jobs from stdin, writes binaries to an
answers file descriptor.

Each message is its byte length (8 bytes, little-endian) and a pickle. A job is
``(toolchain versions, arguments of build.build_binary)``; the answer is
``(True, CompiledBinary)`` or ``(False, "ErrorType: message")``, also when the
toolchain versions differ from this process's (the binary would not be what the
parent's cache key says). End of input ends the worker.
"""

from __future__ import annotations

import os
import pickle
import struct
import sys

_HEADER = struct.Struct("<Q")


def main(answers_fd: int) -> None:
    """Serve jobs until end of input; answers go to ``answers_fd`` (the original
    stdout, which `compile_pool`'s bootstrap saved before any import could print)."""
    from inductor_lite.dsl.compiler import toolchain_versions
    from inductor_lite.runtime.build import build_binary

    read, write = sys.stdin.buffer, os.fdopen(answers_fd, "wb")
    while True:
        header = read.read(_HEADER.size)
        if len(header) < _HEADER.size:
            return
        (size,) = _HEADER.unpack(header)
        toolchain, job = pickle.loads(read.read(size))
        try:
            if toolchain != toolchain_versions():
                raise RuntimeError(f"toolchain mismatch: worker {toolchain_versions()}, parent {toolchain}")
            answer = (True, build_binary(*job))
        except Exception as error:  # noqa: BLE001 - reported to the parent, which rebuilds and raises
            answer = (False, f"{type(error).__name__}: {error}")
        data = pickle.dumps(answer, protocol=pickle.HIGHEST_PROTOCOL)
        write.write(_HEADER.pack(len(data)) + data)
        write.flush()
