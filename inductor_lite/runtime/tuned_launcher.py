"""Launchers of generated kernels: pick the launch config by timing, then launch in one call.

A generated kernel comes with candidate `Config`s (`codegen.heuristics`, the default
first). `bind_tuned_launcher` binds one `launcher.bind_launcher` per candidate (its
block sizes, ``num_warps``, ``num_stages`` and ``maxnreg``). The first launch for a new
set of integer arguments (the sizes) asks the runtime's autotuner (`autotune.autotune`)
for the fastest candidate on the real arguments and launches it through that fully
checked bound launcher. Without tuning (``INDUCTOR_LITE_AUTOTUNE=0``, the interpreter)
the default config launches.

That first launch also records everything that stays fixed for the same sizes and the
same pointer alignments: the loaded ``CUfunction``, the grid, threads and shared memory,
the kernel's parameter buffer (`launcher.ParamBuffer`), its context. Later launches with
that key are one generated function (the idea of Triton's generated launcher, and of
TorchInductor's ``CachingAutotuner.run`` binding the chosen launcher once)::

    def launch(a0, a1, a2):
        if config.interpret:
            return first_launch(a0, a1, a2)
        p0 = a0.data_ptr()
        p1 = a1.data_ptr()
        entry = entries.get((p0 & 15 == 0, p1 & 15 == 0, a2))
        if entry is None:
            return first_launch(a0, a1, a2)
        function, grid_x, threads, shared_bytes, params, pack, lock, context, launch_in_context = entry
        lock.acquire()
        try:
            pack(p0, p1, a2)
            if get_current()[1] != context:
                return launch_in_context(grid_x, 1, 1, params)
            result = launch_kernel(function, grid_x, 1, 1, threads, 1, 1, shared_bytes, stream_of(device),
                                   params, 0)
        finally:
            lock.release()
        if result[0] != SUCCESS:
            raise launch_error(result[0], entry)

so a launch costs the pointer reads, a dict lookup, one ``struct.pack_into`` into the
pre-built ``void*[]`` and one ``cuLaunchKernel`` (cuda-python takes the buffer's address
as an int: its cheapest form, 0.5 us against 1.6 us for a ``(values, types)`` tuple it
packs itself, measured on CPU over a stub driver), plus the stream and context queries
that keep torch's stream semantics and CUDA-graph capture. The key holds every int
argument's value, so an int that packs once packs again; the binary's other assumptions
(dtypes, device) are fixed by the wrapper's code and checked on the first launch.

The grid is 1-D: ``prod(cdiv(numel, BLOCK))`` over the kernel's tiled axes, each a
size argument and the block size of its axis (``xnumel`` and ``XBLOCK``, and for a 2-D
tiled pointwise kernel ``ynumel`` and ``YBLOCK`` too). A config with a
``PROGRAMS_PER_SM`` entry is a *streamed* launch of a grid-stride kernel: the grid is
capped at that many programs an SM, and each program loops over several blocks.
"""

from __future__ import annotations

import hashlib
import itertools
import linecache
from typing import Any, Callable, Optional, Sequence

import torch

from . import compile_pool, driver
from .autotune import autotune, known_decision
from .launcher import _device_index, _tuple_source, bind_launcher, register_memory_cache
from ..config import config


def bind_tuned_launcher(kernel: Any, device: int | str | torch.device, arg_kinds: Sequence[str],
                        configs: Sequence[Any], grid: Sequence[tuple[int, str]],
                        mutated: Sequence[int] = ()) -> Callable[..., None]:
    """``launch(*args)`` for a generated ``kernel`` on ``device``.

    Args:
        kernel: a DSL kernel whose constexprs are the configs' block sizes.
        arg_kinds: ``"tensor"`` or ``"int"`` per runtime argument (what generated code passes).
        configs: `heuristics.Config` candidates, the default first.
        grid: ``(argument position, block name)`` per tiled axis, e.g.
            ``((3, "XBLOCK"),)``: the launch runs ``prod(cdiv(args[i], block))`` programs.
        mutated: positions of tensor arguments the kernel writes over memory it also
            reads (an output in place over a dead input, a scatter's target). Tuning
            launches each candidate many times, so it writes these into scratch buffers
            (TorchInductor's autotuner clones its ``mutated_arg_names`` likewise); the
            chosen config then launches once on the real arguments.

    Raises:
        ValueError: an argument kind other than ``tensor``/``int``, no configs, no grid
            axes, or a config without one of the grid's block sizes; what
            `launcher.bind_launcher` raises. At a launch: what the bound launcher raises
            for bad arguments (on a key's first launch), and `driver.CudaDriverError`
            for a failed launch.
    """
    unknown = [k for k in arg_kinds if k not in ("tensor", "int")]
    if unknown:
        raise ValueError(f"kernel {kernel.name!r}: unknown argument kinds {unknown}; expected 'tensor' or 'int'")
    if not configs or not grid or any(block not in c.kwargs for c in configs for _, block in grid):
        raise ValueError(f"kernel {kernel.name!r}: needs configs that set every grid block size {list(grid)}")
    if any(not 0 <= i < len(arg_kinds) or arg_kinds[i] != "tensor" for i in mutated):
        raise ValueError(f"kernel {kernel.name!r}: mutated positions {list(mutated)} must name tensor arguments")
    return _TunedLauncher(kernel, _device_index(device), tuple(arg_kinds), list(configs), tuple(grid),
                          tuple(mutated)).launch


def _constexprs(config) -> dict:
    """The kernel's constexprs among a config's entries (``PROGRAMS_PER_SM`` only sizes the grid)."""
    return {k: v for k, v in config.kwargs.items() if k != "PROGRAMS_PER_SM"}


_launcher_ids = itertools.count()


class _TunedLauncher:
    def __init__(self, kernel, device: int, arg_kinds: tuple, configs: list, grid: tuple, mutated: tuple):
        self.kernel = kernel
        self.mutated = mutated
        self.device = torch.device("cuda", device)
        self.configs = configs
        self.launchers: list[Optional[Callable]] = [None] * len(configs)  # bound on first use: `_launcher`
        self.grid_axes = [tuple((i, c.kwargs[block]) for i, block in grid) for c in configs]
        per_sm = [c.kwargs.get("PROGRAMS_PER_SM", 0) for c in configs]
        sm_count = torch.cuda.get_device_properties(self.device).multi_processor_count if any(per_sm) else 0
        self.max_programs = [k * sm_count for k in per_sm]
        self.arg_kinds = arg_kinds
        self.int_args = tuple(i for i, kind in enumerate(arg_kinds) if kind == "int")
        # the kernel's name is not unique across graphs: decisions are keyed by its source
        self.tune_name = f"{kernel.name}-{hashlib.sha256(kernel.source.encode()).hexdigest()[:16]}"
        self.chosen: dict[tuple, int] = {}
        self.entries: dict[tuple, tuple] = {}  # fast-path key -> `LoadedKernel.launch_entry`
        self.launch = self._generate()
        self.launch.planned_builds = self.planned_builds
        self.launch.kernel = kernel
        self.launch.device_index = device
        register_memory_cache(self)

    def clear_memory_cache(self) -> None:
        """Forget the launch entries (their kernels are reloaded on the next first launch)."""
        self.entries.clear()

    def _generate(self) -> Callable[..., None]:
        """The launch function of the module docstring, for this kernel's argument kinds."""
        args = [f"a{i}" for i in range(len(self.arg_kinds))]
        arg_tuple = ", ".join(args)
        key = [f"p{i} & 15 == 0" if kind == "tensor" else a for i, (a, kind) in enumerate(zip(args, self.arg_kinds))]
        values = [f"p{i}" if kind == "tensor" else a for i, (a, kind) in enumerate(zip(args, self.arg_kinds))]
        lines = [
            f"def launch({arg_tuple}):",
            "    if config.interpret:",
            f"        return first_launch({arg_tuple})",
            *(f"    p{i} = {a}.data_ptr()" for i, (a, kind) in enumerate(zip(args, self.arg_kinds))
              if kind == "tensor"),
            f"    entry = entries.get({_tuple_source(key)})",
            "    if entry is None:",
            f"        return first_launch({arg_tuple})",
            "    function, grid_x, threads, shared_bytes, params, pack, lock, context, launch_in_context = entry",
            "    lock.acquire()  # the parameter buffer is shared: not refilled by another thread mid-launch",
            "    try:",
            f"        pack({', '.join(values)})",
            "        if get_current()[1] != context:",
            "            return launch_in_context(grid_x, 1, 1, params)",
            "        result = launch_kernel(function, grid_x, 1, 1, threads, 1, 1, shared_bytes, stream_of(device),",
            "                               params, 0)",
            "    finally:",
            "        lock.release()",
            "    if result[0] != SUCCESS:",
            "        raise launch_error(result[0], entry)",
        ]
        source = "\n".join(lines) + "\n"
        filename = f"<inductor_lite tuned launcher {next(_launcher_ids)} of {self.kernel.name}>"
        linecache.cache[filename] = (len(source), None, source.splitlines(True), filename)  # readable tracebacks
        namespace = {
            "config": config, "entries": self.entries, "first_launch": self._first_launch,
            "get_current": driver.cu.cuCtxGetCurrent, "launch_kernel": driver.cu.cuLaunchKernel,
            "stream_of": driver.current_stream, "device": self.device.index, "SUCCESS": driver.cu.CUresult.CUDA_SUCCESS,
            "launch_error": self._launch_error,
        }
        exec(compile(source, filename, "exec"), namespace)
        return namespace["launch"]

    def _first_launch(self, *args) -> None:
        """Choose the config for the sizes, launch through its checked bound launcher, and
        record the launch entry for the arguments' key (not under the interpreter)."""
        sizes = tuple(args[i] for i in self.int_args)
        index = self.chosen.get(sizes)
        if index is None:
            index = self.chosen[sizes] = self._choose(sizes, args)
        programs = self._programs(index, args)
        if not programs:
            return
        bound = self._launcher(index)
        bound((programs, 1, 1), *args)
        if not config.interpret:
            key = tuple(a.data_ptr() & 15 == 0 if kind == "tensor" else a for kind, a in zip(self.arg_kinds, args))
            self.entries[key] = bound.loaded_kernel(args).launch_entry(programs)

    def _launcher(self, index: int) -> Callable:
        """The checked launcher of config ``index``, bound on first use: a warm start
        launches only the decided config, and binding one generates and compiles its
        Python launch code."""
        if self.launchers[index] is None:
            c = self.configs[index]
            self.launchers[index] = bind_launcher(self.kernel, self.device.index, self.arg_kinds, c.num_warps,
                                                  num_stages=c.num_stages, maxnreg=c.maxnreg, **_constexprs(c))
        return self.launchers[index]

    def _launch_error(self, result, entry: tuple) -> driver.CudaDriverError:
        return driver.CudaDriverError(result, f"launching kernel {self.kernel.name!r} with grid ({entry[1]}, 1, 1) "
                                              f"and {entry[2]} threads per block")

    def _programs(self, index: int, args: tuple) -> int:
        programs = 1
        for i, block in self.grid_axes[index]:
            programs *= -(-args[i] // block)
        return min(programs, self.max_programs[index]) if self.max_programs[index] else programs

    def planned_builds(self, args: tuple) -> list[tuple[Any, int, int, Any]]:
        """The binaries a first launch with ``args`` will ask for, as
        ``(specialisation, num_warps, num_stages, maxnreg)``: every candidate's if it
        will tune, else the chosen or default config's (`compile_pool.prebuild`)."""
        sizes = tuple(args[i] for i in self.int_args)
        chosen = self.chosen.get(sizes)
        if chosen is not None or not self._programs(0, args):
            configs = [self.configs[chosen or 0]]
        else:
            known = known_decision(self.tune_name, sizes, self.configs, self.device)
            configs = self.configs if known is None else [known]
        return [(self.kernel.specialize(args, _constexprs(c)), c.num_warps, c.num_stages, c.maxnreg) for c in configs]

    def _choose(self, key: tuple, args: tuple) -> int:
        if len(self.configs) == 1 or not self._programs(0, args):
            return 0

        position = {c: i for i, c in enumerate(self.configs)}
        scratch = list(args)
        for i in self.mutated:
            scratch[i] = torch.empty_strided(args[i].size(), args[i].stride(), dtype=args[i].dtype,
                                             device=args[i].device)

        def run(config) -> None:
            i = position[config]
            self._launcher(i)((self._programs(i, args), 1, 1), *scratch)

        def prebuild() -> None:  # every candidate's binary, in parallel, before the timing builds them one by one
            builds = [(self.kernel.specialize(scratch, _constexprs(c)), c.num_warps, c.num_stages, c.maxnreg)
                      for c in self.configs]
            compile_pool.prebuild([(self.kernel, b) for b in builds], driver.compute_capability(self.device.index))

        return position[autotune(self.tune_name, key, self.configs, run, self.device, prepare=prebuild)]
