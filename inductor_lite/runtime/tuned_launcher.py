"""Launchers of generated kernels that pick their launch config by timing.

A generated kernel comes with candidate `Config`s (`codegen.heuristics`, the default
first). `bind_tuned_launcher` binds one `launcher.bind_launcher` per candidate; on the
first call for a new set of integer arguments (the sizes), it asks the runtime's
autotuner (`autotune.autotune`) for the fastest candidate on the real arguments and
remembers it, so later calls cost a tuple build and a dict lookup on top of the bound
launcher. Without tuning (``INDUCTOR_LITE_AUTOTUNE=0``, the interpreter) the default
config launches.

The grid is ``(cdiv(xnumel, XBLOCK), 1, 1)``: every generated kernel gives each program
``XBLOCK`` consecutive x positions (rows, for reductions).
"""

from __future__ import annotations

import hashlib
from typing import Any, Callable, Sequence

import torch

from .autotune import autotune
from .launcher import _device_index, bind_launcher


def bind_tuned_launcher(kernel: Any, device: int | str | torch.device, arg_kinds: Sequence[str],
                        configs: Sequence[Any], xnumel_arg: int) -> Callable[..., None]:
    """``launch(*args)`` for a generated ``kernel`` on ``device``.

    Args:
        kernel: a DSL kernel whose constexprs are the configs' block sizes.
        arg_kinds: as `launcher.bind_launcher`.
        configs: `heuristics.Config` candidates, the default first.
        xnumel_arg: the position of ``xnumel`` among the arguments.

    Raises:
        ValueError: no configs, or a config without ``XBLOCK``; what
            `launcher.bind_launcher` raises.
    """
    if not configs or any("XBLOCK" not in c.kwargs for c in configs):
        raise ValueError(f"kernel {kernel.name!r}: every launch config needs an XBLOCK")
    return _TunedLauncher(kernel, _device_index(device), tuple(arg_kinds), list(configs), xnumel_arg).launch


class _TunedLauncher:
    def __init__(self, kernel, device: int, arg_kinds: tuple, configs: list, xnumel_arg: int):
        self.kernel = kernel
        self.device = torch.device("cuda", device)
        self.configs = configs
        self.launchers = [bind_launcher(kernel, device, arg_kinds, c.num_warps, num_stages=c.num_stages, **c.kwargs)
                          for c in configs]
        self.xblocks = [c.kwargs["XBLOCK"] for c in configs]
        self.int_args = tuple(i for i, kind in enumerate(arg_kinds) if kind == "int")
        self.xnumel_arg = xnumel_arg
        # the kernel's name is not unique across graphs: decisions are keyed by its source
        self.tune_name = f"{kernel.name}-{hashlib.sha256(kernel.source.encode()).hexdigest()[:16]}"
        self.chosen: dict[tuple, int] = {}

    def launch(self, *args) -> None:
        key = tuple(args[i] for i in self.int_args)
        index = self.chosen.get(key)
        if index is None:
            index = self.chosen[key] = self._choose(key, args)
        xnumel = args[self.xnumel_arg]
        if xnumel:
            self.launchers[index]((-(-xnumel // self.xblocks[index]), 1, 1), *args)

    def _choose(self, key: tuple, args: tuple) -> int:
        if len(self.configs) == 1 or not args[self.xnumel_arg]:
            return 0

        position = {c: i for i, c in enumerate(self.configs)}

        def run(config) -> None:
            i = position[config]
            self.launchers[i]((-(-args[self.xnumel_arg] // self.xblocks[i]), 1, 1), *args)

        return position[autotune(self.tune_name, key, self.configs, run, self.device)]
