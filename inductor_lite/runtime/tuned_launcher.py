"""Launchers of generated kernels that pick their launch config by timing.

A generated kernel comes with candidate `Config`s (`codegen.heuristics`, the default
first). `bind_tuned_launcher` binds one `launcher.bind_launcher` per candidate (its
block sizes, ``num_warps``, ``num_stages`` and ``maxnreg``); on the first call for a
new set of integer arguments (the sizes), it asks the runtime's autotuner
(`autotune.autotune`) for the fastest candidate on the real arguments and remembers it,
so later calls cost a tuple build and a dict lookup on top of the bound launcher.
Without tuning (``INDUCTOR_LITE_AUTOTUNE=0``, the interpreter) the default
config launches.

The grid is 1-D: ``prod(cdiv(numel, BLOCK))`` over the kernel's tiled axes, each a
size argument and the block size of its axis (``xnumel`` and ``XBLOCK``, and for a 2-D
tiled pointwise kernel ``ynumel`` and ``YBLOCK`` too). A config with a
``PROGRAMS_PER_SM`` entry is a *streamed* launch of a grid-stride kernel: the grid is
capped at that many programs an SM, and each program loops over several blocks.
"""

from __future__ import annotations

import hashlib
from typing import Any, Callable, Sequence

import torch

from .autotune import autotune
from .launcher import _device_index, bind_launcher


def bind_tuned_launcher(kernel: Any, device: int | str | torch.device, arg_kinds: Sequence[str],
                        configs: Sequence[Any], grid: Sequence[tuple[int, str]]) -> Callable[..., None]:
    """``launch(*args)`` for a generated ``kernel`` on ``device``.

    Args:
        kernel: a DSL kernel whose constexprs are the configs' block sizes.
        arg_kinds: as `launcher.bind_launcher`.
        configs: `heuristics.Config` candidates, the default first.
        grid: ``(argument position, block name)`` per tiled axis, e.g.
            ``((3, "XBLOCK"),)``: the launch runs ``prod(cdiv(args[i], block))`` programs.

    Raises:
        ValueError: no configs, no grid axes, or a config without one of the grid's
            block sizes; what `launcher.bind_launcher` raises.
    """
    if not configs or not grid or any(block not in c.kwargs for c in configs for _, block in grid):
        raise ValueError(f"kernel {kernel.name!r}: needs configs that set every grid block size {list(grid)}")
    return _TunedLauncher(kernel, _device_index(device), tuple(arg_kinds), list(configs), tuple(grid)).launch


def _constexprs(config) -> dict:
    """The kernel's constexprs among a config's entries (``PROGRAMS_PER_SM`` only sizes the grid)."""
    return {k: v for k, v in config.kwargs.items() if k != "PROGRAMS_PER_SM"}


class _TunedLauncher:
    def __init__(self, kernel, device: int, arg_kinds: tuple, configs: list, grid: tuple):
        self.kernel = kernel
        self.device = torch.device("cuda", device)
        self.configs = configs
        self.launchers = [bind_launcher(kernel, device, arg_kinds, c.num_warps, num_stages=c.num_stages,
                                        maxnreg=c.maxnreg, **_constexprs(c))
                          for c in configs]
        self.grid_axes = [tuple((i, c.kwargs[block]) for i, block in grid) for c in configs]
        per_sm = [c.kwargs.get("PROGRAMS_PER_SM", 0) for c in configs]
        sm_count = torch.cuda.get_device_properties(self.device).multi_processor_count if any(per_sm) else 0
        self.max_programs = [k * sm_count for k in per_sm]
        self.int_args = tuple(i for i, kind in enumerate(arg_kinds) if kind == "int")
        # the kernel's name is not unique across graphs: decisions are keyed by its source
        self.tune_name = f"{kernel.name}-{hashlib.sha256(kernel.source.encode()).hexdigest()[:16]}"
        self.chosen: dict[tuple, int] = {}

    def launch(self, *args) -> None:
        key = tuple(args[i] for i in self.int_args)
        index = self.chosen.get(key)
        if index is None:
            index = self.chosen[key] = self._choose(key, args)
        programs = self._programs(index, args)
        if programs:
            self.launchers[index]((programs, 1, 1), *args)

    def _programs(self, index: int, args: tuple) -> int:
        programs = 1
        for i, block in self.grid_axes[index]:
            programs *= -(-args[i] // block)
        return min(programs, self.max_programs[index]) if self.max_programs[index] else programs

    def _choose(self, key: tuple, args: tuple) -> int:
        if len(self.configs) == 1 or not self._programs(0, args):
            return 0

        position = {c: i for i, c in enumerate(self.configs)}

        def run(config) -> None:
            i = position[config]
            self.launchers[i]((self._programs(i, args), 1, 1), *args)

        return position[autotune(self.tune_name, key, self.configs, run, self.device)]
