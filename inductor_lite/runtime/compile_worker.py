"""A compile worker (`compile_pool`): reads jobs from stdin, writes binaries to stdout.

Each message is its byte length (8 bytes, little-endian) and a pickle. A job is the
arguments of `launcher.build_binary`; the answer is ``(True, CompiledBinary)`` or
``(False, "ErrorType: message")``. End of input ends the worker.
"""

from __future__ import annotations

import os
import pickle
import struct
import sys

_HEADER = struct.Struct("<Q")


def main() -> None:
    # answers go to the original stdout; anything a library prints goes to stderr
    write = os.fdopen(os.dup(sys.stdout.fileno()), "wb")
    os.dup2(sys.stderr.fileno(), sys.stdout.fileno())
    read = sys.stdin.buffer

    from inductor_lite.runtime.launcher import build_binary

    while True:
        header = read.read(_HEADER.size)
        if len(header) < _HEADER.size:
            return
        (size,) = _HEADER.unpack(header)
        job = pickle.loads(read.read(size))
        try:
            answer = (True, build_binary(*job))
        except Exception as error:  # noqa: BLE001 - reported to the parent, which rebuilds and raises
            answer = (False, f"{type(error).__name__}: {error}")
        data = pickle.dumps(answer, protocol=pickle.HIGHEST_PROTOCOL)
        write.write(_HEADER.pack(len(data)) + data)
        write.flush()


if __name__ == "__main__":
    main()
