"""Wrapper codegen: a scheduled graph -> a Python module with ``call(args)``.

The module holds the graph's DSL kernels, the extern ops bound once at load time, and
one function::

    aten_mm_default = direct_op(aten.mm.default)

    def call(args):
        with torch.cuda.device(0):            # empty_strided_cuda allocates on the current device
            primals_1, primals_2 = args
            args.clear()                      # boxed convention: inputs can be freed early
            s0 = primals_1.size(0)            # size symbols from the inputs
            buf0 = empty_strided_cuda((s0, 16), (16, 1), torch.float32)
            launch_poi_fused_add_0(primals_1, primals_2, buf0, 16*s0)
            del primals_2
            buf1 = aten_mm_default(buf0, reinterpret_tensor(primals_1, (16, s0), (1, 16), 0))
            buf2 = aten_cumsum_default(buf1, 1)   # its layout follows buf1's: checked
            if buf2.stride() != (s0, 1) or buf2.size() != (s0, s0):
                buf2 = ensure_strides(buf2, (s0, s0), (s0, 1))
            del buf1
            buf3 = buf0; del buf0  # reuse
            launch_poi_fused_relu_1(buf2, buf3, 16*s0)
            ...
            return (buf3, s0)

The body is first built as a list of lines: code strings, and the allocation, free and
reuse lines of `memory_planning`, which plans buffer reuse (``# reuse``) and in-place
kernels (``# reuse buf3 in place``) before any text is written.

Every line is kept cheap, since ``call`` runs hundreds of them per training step:
allocations, views and extern calls go through the C++ entry points in
`runtime_helpers` (no Python argument parsing, no ``OpOverload.__call__`` frame). An
extern output's layout is compared inline with the one compile time assumed (a call
to ``ensure_strides`` only on a mismatch), except where the op fixes it (``mm`` and
the like: `fx_lowering.extern_layouts` decides at lowering, ``fixed_layout``). A CPU graph has no device guard and
allocates with ``empty_strided_cpu``; allocations on a CUDA device other than the
guarded one use ``empty_strided(..., device=...)``.

Kernels on CPU tensors run in the DSL interpreter and are launched as
``kernel[grid](*args, XBLOCK=..., num_warps=...)`` with the kernel's default config.
Kernels on a CUDA device are launched through a launcher bound once, when the module
loads, to the kernel's device, argument kinds and candidate configs
(``runtime.tuned_launcher.bind_tuned_launcher``)::

    launch_poi_fused_add_0 = bind_tuned_launcher(poi_fused_add_0, device_0, ("tensor", "tensor", "tensor", "int"),
                                                 [Config.of(4, XBLOCK=1024), ...], grid=((3, 'XBLOCK'),))

which picks a config per set of sizes (timing the candidates on the first call),
computes the grid and records the loaded kernel and its parameter buffer per sizes and
pointer alignments, so a later launch is a dict lookup, one argument pack and one
``cuLaunchKernel``.

`load_module` execs the source under a fake filename registered in `linecache`, so
``inspect.getsource`` (which the DSL uses to read kernels) and tracebacks work.
"""

from __future__ import annotations

import collections
import dataclasses
import itertools
import linecache
import math
from typing import Any, Callable, Optional

import sympy
import torch

from ..ir.indexing import shape_env_size_hint
from ..ir.nodes import (
    Buffer, ComputedBuffer, ExternKernel, Layout, MultiOutput, MutationBuffer, ReinterpretView, ScatterBuffer,
)
from ..scheduler.fusion import KernelGroup
from ..scheduler.scheduler import Scheduler
from .kernel import KernelSource, generate_kernel
from .memory_planning import (
    AllocateLine, BufferSpec, ExternAllocationLine, FreeIfNotReusedLine, FreeLine, Line, MemoryPlan, ReuseLine,
    inplace_donors, plan_memory, returns_new_tensor,
)
from .printer import fexpr, pexpr

_module_ids = itertools.count()


@dataclasses.dataclass
class WrapperCode:
    """Generated module source plus what `load_module` needs to run it."""

    source: str
    kernels: list[KernelSource]  # each defined once
    constants: dict[str, torch.Tensor]
    memory_plan: Optional[MemoryPlan] = None
    stride_checks: list[str] = dataclasses.field(default_factory=list)  # extern outputs checked after the call
    # (launcher name, each argument's dtype or int value) per CUDA kernel with static sizes
    prebuild: list[tuple[str, tuple]] = dataclasses.field(default_factory=list)
    kernel_calls: list[str] = dataclasses.field(default_factory=list)  # the kernel of each launch site


class _Writer:
    def __init__(self):
        self.lines: list[Line] = []  # code (indented) and memory lines, rendered after planning
        self.devices: dict[torch.device, str] = {}

    def line(self, text: str) -> None:
        self.lines.append("    " + text)

    def memory(self, line: Line) -> None:
        self.lines.append(line)

    def device(self, device: torch.device) -> str:
        name = self.devices.get(device)
        if name is None:
            name = self.devices[device] = f"device_{len(self.devices)}"
        return name


def _tuple(items: list[str]) -> str:
    return "(" + ", ".join(items) + ("," if len(items) == 1 else "") + ")"


class WrapperCodegen:
    """Writes the ``call`` function for one scheduled graph."""

    def __init__(self, graph, scheduler: Scheduler):
        self.graph = graph
        self.scheduler = scheduler
        self.out = _Writer()
        self._kernel_by_key: dict[str, KernelSource] = {}  # each distinct kernel, in definition order
        self.kernel_calls: list[str] = []  # the kernel name of each launch, in order
        self.bindings: list[str] = []  # module-level `launch_<kernel> = bind_tuned_launcher(...)` lines
        self._launcher_by_binding: dict[str, str] = {}  # `bind_tuned_launcher(...)` text -> its name
        self._launchers_of: collections.Counter = collections.Counter()  # launchers per kernel name
        self.extern_ops: dict[str, str] = {}  # module-level name -> the op's path (`aten.mm.default`)
        self.guard_device: Optional[torch.device] = None  # the CUDA device `call` runs under
        self.defined_symbols: set[sympy.Symbol] = set()
        self.used_symbols: set[sympy.Symbol] = set()
        # buffers whose storage planning may hand on; extern outputs a kernel may write over
        self.donors, self.extern_donors = self._reusable_buffers()
        self.memory_plan: Optional[MemoryPlan] = None
        self.stride_checks: list[str] = []  # extern outputs whose layout `call` checks
        self.prebuild: list[tuple[str, tuple]] = []  # `WrapperCode.prebuild`

    @property
    def kernels(self) -> list[KernelSource]:
        """The graph's kernels, each defined once (`KernelSource.key`)."""
        return list(self._kernel_by_key.values())

    def _expr(self, expr) -> str:
        """Python source of an integer expression; remembers its size symbols."""
        expr = sympy.sympify(expr)
        self.used_symbols |= expr.free_symbols
        return pexpr(expr)

    def _shape(self, exprs) -> str:
        return _tuple([self._expr(e) for e in exprs])

    def _value(self, v: Any) -> str:
        """Python source for an extern argument or an output."""
        if isinstance(v, ReinterpretView):
            lay = v.layout
            size, stride, offset = self._shape(lay.size), self._shape(lay.stride), self._expr(lay.offset)
            return f"reinterpret_tensor({v.data.name}, {size}, {stride}, {offset})"
        if isinstance(v, Buffer):
            return v.name
        if isinstance(v, sympy.logic.boolalg.BooleanAtom):
            return repr(bool(v))
        if isinstance(v, sympy.logic.boolalg.Boolean):
            return self._expr(v)
        if isinstance(v, sympy.Expr):
            if v.is_Float or (v.is_number and not v.is_integer):
                return _float(float(v))
            if v.is_integer is not True:  # a float computed from sizes (``1.5 * s0``, ``s0 / 2``)
                self.used_symbols |= v.free_symbols
                return fexpr(v)
            return self._expr(v)
        if v is None or isinstance(v, (bool, int, str)):
            return repr(v)
        if isinstance(v, float):
            return _float(v)
        if isinstance(v, complex):  # a scalar argument of an extern on complex tensors (polar's backward)
            return f"complex({_float(v.real)}, {_float(v.imag)})"
        if isinstance(v, torch.dtype):
            return str(v)
        if isinstance(v, torch.device):
            return self.out.device(v)
        if isinstance(v, (torch.layout, torch.memory_format)):
            return str(v)
        if isinstance(v, list):
            return "[" + ", ".join(self._value(x) for x in v) + "]"
        if isinstance(v, tuple):
            return _tuple([self._value(x) for x in v])
        raise NotImplementedError(f"cannot pass a {type(v).__name__} ({v!r}) in generated code")

    def _define_symbols(self, var: str, sources: dict) -> None:
        """Define the size symbols that ``var`` (an input or extern output) is the source of."""
        for symbol, (source_var, kind, dim) in sources.items():
            if source_var != var or symbol in self.defined_symbols:
                continue
            getter = {"size": f"{var}.size({dim})", "stride": f"{var}.stride({dim})",
                      "offset": f"{var}.storage_offset()", "value": var}[kind]
            self.out.line(f"{symbol.name} = {getter}")
            self.defined_symbols.add(symbol)

    def _reusable_buffers(self) -> tuple[set[str], set[str]]:
        """``(donors, extern_donors)``: buffers whose storage the wrapper may hand on once
        they are dead, and extern outputs a kernel may write over in place.

        Donors are the buffers it allocates and a backward's donated inputs
        (`GraphLowering.donated_inputs`, at offset 0 of their storage). Extern donors are
        the results of extern ops that always make a new tensor (`returns_new_tensor`;
        a single result at offset 0), as a convolution's output is for the
        normalisation that reads it: TorchInductor writes such kernels over the extern's
        output too. Neither set holds what a graph output holds, what an extern output
        may alias (a view made by an extern op goes on using its base's storage) or the
        two names of a scatter's storage."""
        aliased = set()
        for step in self.scheduler.steps:
            if not isinstance(step, KernelGroup) and not isinstance(step.node, MultiOutput) \
                    and step.node.may_alias_inputs:
                aliased |= step.read_names()
        for buf in self.scheduler.buffers.values():
            if isinstance(buf, (ScatterBuffer, MutationBuffer)):  # two names of one storage: never handed on
                aliased |= {buf.name, buf.target.name}
        owned = {name for name, buf in self.scheduler.buffers.items()
                 if isinstance(buf, ComputedBuffer) and name not in self.scheduler.removed_buffers}
        owned |= {name for name in self.graph.donated_inputs
                  if sympy.sympify(self.graph.graph_inputs[name].storage_offset) == 0}
        externs = {name for name, buf in self.scheduler.buffers.items()
                   if type(buf) is ExternKernel and buf.layout is not None and returns_new_tensor(buf.op)
                   and not buf.may_alias_inputs
                   and buf.storage_offset == 0 and name not in self.scheduler.removed_buffers}
        kept = set(self.scheduler.output_names) | aliased
        return owned - kept, externs - kept

    def _spec(self, name: str) -> BufferSpec:
        return BufferSpec.of(name, self._layout_of(name))

    def _allocation(self, buf: BufferSpec) -> str:
        size, stride = self._shape(buf.size), self._shape(buf.stride)
        if buf.device.type == "cpu":
            return f"{buf.name} = empty_strided_cpu({size}, {stride}, {buf.dtype})"
        if buf.device == self.guard_device:
            return f"{buf.name} = empty_strided_cuda({size}, {stride}, {buf.dtype})"
        return f"{buf.name} = empty_strided({size}, {stride}, device={self.out.device(buf.device)}, dtype={buf.dtype})"

    def _reuse(self, line: ReuseLine) -> str:
        old, new = line.old, line.new
        if old.size == new.size and old.stride == new.stride:
            view = old.name
        else:
            view = f"reinterpret_tensor({old.name}, {self._shape(new.size)}, {self._shape(new.stride)}, 0)"
        if line.inplace:  # the kernel still reads `old`: it is deleted after the kernel
            return f"{new.name} = {view}  # reuse {old.name} in place"
        return f"{new.name} = {view}; del {old.name}  # reuse"

    def _define_kernel(self, group: KernelGroup) -> KernelSource:
        """The kernel of ``group``; one of the same source defined earlier keeps its name
        (the new one's arguments are this group's buffers)."""
        kernel = generate_kernel(group, len(self._kernel_by_key), self.scheduler.removed_buffers, self._layout_of)
        defined = self._kernel_by_key.setdefault(kernel.key, kernel)
        if defined is not kernel:
            kernel = dataclasses.replace(kernel, name=defined.name, source=defined.source)
        self.kernel_calls.append(kernel.name)
        return kernel

    def _launcher(self, kernel: KernelSource, binding: str) -> str:
        """The launcher name for ``binding`` (a ``bind_tuned_launcher(...)`` call): launches
        of one kernel with the same device, argument kinds, configs and mutated arguments
        share a launcher, and so its tuning decisions and loaded binaries."""
        name = self._launcher_by_binding.get(binding)
        if name is None:
            taken = self._launchers_of[kernel.name]
            self._launchers_of[kernel.name] += 1
            name = self._launcher_by_binding[binding] = f"launch_{kernel.name}" + (f"_{taken}" if taken else "")
            self.bindings.append(f"{name} = {binding}")
        return name

    def _kernel_step(self, group: KernelGroup, step: int) -> None:
        kernel = self._define_kernel(group)
        outputs = []
        for n in group.nodes:
            if isinstance(n.node, ScatterBuffer):
                self.out.line(f"{n.name} = {n.node.target.name}  # scatter into {n.node.target.name} in place")
            elif isinstance(n.node, MutationBuffer):
                self.out.line(f"{n.name} = {n.node.target.name}  # update input {n.node.target.name} in place")
            elif n.name not in self.scheduler.removed_buffers:
                outputs.append(self._spec(n.name))
        dying = [self._spec(name) for name in sorted(group.reads() & set(self.scheduler.frees.get(step, ())))
                 if name in self.donors or name in self.extern_donors]
        inplace = inplace_donors(group, outputs, dying, kernel.passes)
        for buf in outputs:
            self.out.memory(AllocateLine(step, buf, buf.name in self.scheduler.output_names, inplace.get(buf.name)))
        numel = sympy.sympify(kernel.numel)
        if numel.is_number and int(numel) == 0:
            return
        device = self._kernel_device(kernel)
        args = [self._buffer_arg(value, device) if kind == "buffer" else self._expr(value)
                for kind, value in kernel.call_args]
        config = kernel.config
        if device is None or device.type != "cuda":
            blocks = config.kwargs
            grid = " * ".join(self._cdiv(kernel.call_args[i][1], blocks[block]) for i, block in kernel.grid)
            constexprs = "".join(f", {k}={v}" for k, v in config.blocks)
            self.out.line(f"{kernel.name}[({grid},)]({', '.join(args)}{constexprs}, "
                          f"num_warps={config.num_warps})")
            return
        kinds = _tuple([repr("tensor" if kind == "buffer" else "int") for kind, _ in kernel.call_args])
        configs = "[" + ", ".join(_config_source(c) for c in kernel.configs) + "]"
        # outputs written over storage the kernel also reads: tuning runs them on copies
        overwritten = set(inplace) | {n.name for n in group.nodes if isinstance(n.node, (ScatterBuffer, MutationBuffer))}
        mutated = tuple(i for i, (kind, value) in enumerate(kernel.call_args)
                        if kind == "buffer" and value in overwritten)
        launcher = self._launcher(kernel, (
            f"bind_tuned_launcher({kernel.name}, {self.out.device(device)}, {kinds}, {configs}, "
            f"grid={kernel.grid!r}" + (f", mutated={mutated!r})" if mutated else ")")))
        self.out.line(f"{launcher}({', '.join(args)})")
        values = [self._layout_of(value).dtype if kind == "buffer" else sympy.sympify(value)
                  for kind, value in kernel.call_args]
        if all(isinstance(v, torch.dtype) or v.is_number for v in values):
            build = (launcher, tuple(v if isinstance(v, torch.dtype) else int(v) for v in values))
            if build not in self.prebuild:
                self.prebuild.append(build)

    def _cdiv(self, numel, block: int) -> str:
        numel = sympy.sympify(numel)
        if numel.is_number:
            return str(-(-int(numel) // block))
        return f"dl.cdiv({self._expr(numel)}, {block})"

    def _kernel_device(self, kernel: KernelSource) -> Optional[torch.device]:
        """The device of a kernel's tensor arguments, not counting 0-d CPU tensors next
        to CUDA ones (eager reads those as scalars); None when it has none or they
        disagree."""
        names = [value for kind, value in kernel.call_args if kind == "buffer"]
        devices = {self._device_of(n) for n in names}
        if len(devices) > 1:
            devices = {self._device_of(n) for n in names if not self._is_cpu_scalar(n)}
        return devices.pop() if len(devices) == 1 else None

    def _is_cpu_scalar(self, name: str) -> bool:
        layout = (self.scheduler.buffers.get(name) or self.graph.graph_inputs[name]).layout
        return layout.device.type == "cpu" and len(layout.size) == 0

    def _buffer_arg(self, name: str, device: Optional[torch.device]) -> str:
        """How a kernel on ``device`` is passed buffer ``name``: by name, or, for a 0-d CPU
        tensor read by a CUDA kernel, as a copy on the device (a constant's copy is made
        once, when the module loads)."""
        if device is None or device.type != "cuda" or not self._is_cpu_scalar(name):
            return name
        constant = self.graph.graph_inputs.get(name)
        if constant is None or not constant.is_constant:
            return f"{name}.to({self.out.device(device)})"  # blocking: eager reads the value at launch
        copy = f"{name}_{self.out.device(device)}"
        line = f"{copy} = constant_on({name}, {self.out.device(device)})"
        if line not in self.bindings:
            self.bindings.append(line)
        return copy

    def _extern_step(self, node, step: int) -> None:
        buf = node.node
        if isinstance(buf, MultiOutput):
            self.out.line(f"{buf.name} = {buf.parent.name}[{buf.index}]")
        else:
            args = [self._value(a) for a in buf.args] + [f"{k}={self._value(v)}" for k, v in buf.kwargs.items()]
            self.out.line(f"{buf.name} = {self._extern_op(buf.op)}({', '.join(args)})")
        owner = buf.parent if isinstance(buf, MultiOutput) else buf
        if buf.layout is not None and not owner.may_alias_inputs:
            self.out.memory(ExternAllocationLine(step, BufferSpec.of(buf.name, buf.layout)))
        if buf.layout is not None:
            self._define_symbols(buf.name, self.graph.symbol_sources)
        if buf.layout is not None and not buf.fixed_layout:
            self.stride_checks.append(buf.name)
            size, stride = self._shape(buf.layout.size), self._shape(buf.layout.stride)
            # stride first: the likelier mismatch; ensure_strides re-checks both
            self.out.line(f"if {buf.name}.stride() != {stride} or {buf.name}.size() != {size}:")
            self.out.line(f"    {buf.name} = ensure_strides({buf.name}, {size}, {stride})")

    def _extern_op(self, op) -> str:
        """The module-level name ``op`` is bound to (``aten_mm_default`` for ``aten.mm.default``)."""
        path = _op_path(op)
        name = path.removeprefix("torch.ops.").replace(".", "_")
        self.extern_ops[name] = path
        return name

    def _layout_of(self, name: str) -> Layout:
        buf = self.scheduler.buffers.get(name) or self.graph.graph_inputs[name]
        return buf.layout

    def _device_of(self, name: str) -> torch.device:
        buf = self.scheduler.buffers.get(name) or self.graph.graph_inputs[name]
        return buf.layout.device

    def _single_cuda_device(self) -> Optional[torch.device]:
        """The CUDA device of the graph's tensors when there is exactly one, else None."""
        layouts = [b.layout for b in self.scheduler.buffers.values()]
        layouts += [b.layout for b in self.graph.graph_inputs.values()]
        devices = {lay.device for lay in layouts if lay is not None and lay.device.type == "cuda"}
        if len(devices) != 1:
            return None
        (device,) = devices
        return device if device.index is not None else None

    def generate(self) -> None:
        self.guard_device = self._single_cuda_device()
        names = [name for name, _ in self.graph.placeholders]
        self.out.line(f"{_tuple(names)} = args" if names else "assert not args")
        self.out.line("args.clear()")
        for name in names:
            self._define_symbols(name, self.graph.symbol_sources)
        self._free(-1)
        for i, step in enumerate(self.scheduler.steps):
            if isinstance(step, KernelGroup):
                self._kernel_step(step, i)
            else:
                self._extern_step(step, i)
            self._free(i)
        outputs = [self._value(v) for v in self.graph.graph_outputs]
        self.out.line(f"return {_tuple(outputs)}")
        self.memory_plan = plan_memory(self.out.lines, len(self.scheduler.steps), shape_env_size_hint())
        self.out.lines = self._render(self.memory_plan.lines)
        undefined = sorted(s.name for s in self.used_symbols - self.defined_symbols)
        if undefined:
            raise NotImplementedError(f"size symbol(s) {undefined} cannot be computed from the graph's inputs")

    def _free(self, step: int) -> None:
        for name in sorted(self.scheduler.frees.get(step, ())):
            if name in self.donors:
                self.out.memory(FreeIfNotReusedLine(step, self._spec(name)))
            else:
                self.out.memory(FreeLine(step, name))

    def _render(self, lines: list[Line]) -> list[str]:
        """The planned lines as indented code; adjacent frees share one ``del``."""
        out: list[str] = []
        dead: list[str] = []
        for line in lines:
            if isinstance(line, FreeLine) or isinstance(line, FreeIfNotReusedLine) and not line.is_reused:
                dead.append(line.name if isinstance(line, FreeLine) else line.buffer.name)
                continue
            if dead and not isinstance(line, (FreeIfNotReusedLine, ExternAllocationLine)):
                out.append(f"    del {', '.join(dead)}")
                dead = []
            if isinstance(line, str):
                out.append(line)
            elif isinstance(line, AllocateLine):
                out.append("    " + self._allocation(line.buffer))
            elif isinstance(line, ReuseLine):
                out.append("    " + self._reuse(line))
        if dead:
            out.append(f"    del {', '.join(dead)}")
        return out

    def source(self, title: str) -> str:
        header = [
            f"# {title}: generated by inductor_lite",
            "import math",
            "import torch",
            "import inductor_lite.dsl as dl",
            "from inductor_lite.codegen.runtime_helpers import (",
            "    constant_on, direct_op, empty_strided_cpu, empty_strided_cuda, ensure_strides, reinterpret_tensor,",
            ")",
        ]
        if self.bindings:
            header.append("from inductor_lite.codegen.heuristics import Config")
            header.append("from inductor_lite.runtime.tuned_launcher import bind_tuned_launcher")
        header += [
            "",
            "aten = torch.ops.aten",
            "prims = torch.ops.prims",
            "empty_strided = torch.empty_strided",
        ]
        header += [f"{name} = torch.device({str(dev)!r})" for dev, name in self.out.devices.items()]
        header += [f"{name} = direct_op({path})" for name, path in self.extern_ops.items()]
        kernels = [k.source for k in self.kernels]
        bindings = ["\n".join(self.bindings)] if self.bindings else []
        if self.guard_device is None:
            call = ["def call(args):", *self.out.lines]
        else:
            guard = f"    with torch.cuda.device({self.guard_device.index}):"
            call = ["def call(args):", guard, *("    " + line for line in self.out.lines)]
        return "\n".join(header) + "\n\n\n" + "\n\n".join(kernels + bindings + ["\n".join(call)]) + "\n"


def _config_source(config) -> str:
    """Python source that rebuilds a `heuristics.Config`."""
    blocks = ", ".join(f"{k}={v}" for k, v in config.blocks)
    extra = (f", num_stages={config.num_stages}" if config.num_stages != 1 else "") + \
        (f", maxnreg={config.maxnreg}" if config.maxnreg else "")
    return f"Config.of({config.num_warps}{extra}, {blocks})"


def _float(v: float) -> str:
    if math.isnan(v):
        return 'float("nan")'
    if math.isinf(v):
        return 'float("inf")' if v > 0 else 'float("-inf")'
    return repr(v)


def _op_path(op) -> str:
    """``aten.mm.default`` for ``torch.ops.aten.mm.default`` (namespaces other than aten/prims spelled out)."""
    namespace = op.namespace
    prefix = namespace if namespace in ("aten", "prims") else f"torch.ops.{namespace}"
    return f"{prefix}.{op._opname}.{op._overloadname}"


def generate_wrapper(graph, scheduler: Scheduler, title: str) -> WrapperCode:
    """The wrapper module source for a lowered, scheduled graph.

    Raises:
        NotImplementedError: something the generated code cannot express.
    """
    gen = WrapperCodegen(graph, scheduler)
    gen.generate()
    return WrapperCode(gen.source(title), gen.kernels, dict(graph.constants), gen.memory_plan, gen.stride_checks,
                       gen.prebuild, gen.kernel_calls)


def load_module(code: WrapperCode, kernel_debug_dir: Optional[str] = None) -> tuple[Callable, dict]:
    """Exec the generated source; returns ``(call, namespace)``.

    The source is registered in ``linecache`` under a unique fake filename first.
    With ``kernel_debug_dir`` every kernel gets ``debug_dir`` set (the runtime writes
    its LLVM IR and PTX there).
    """
    filename = f"<inductor_lite_module_{next(_module_ids)}>"
    linecache.cache[filename] = (len(code.source), None, code.source.splitlines(True), filename)
    namespace: dict[str, Any] = {"__name__": filename.strip("<>"), **code.constants}
    exec(compile(code.source, filename, "exec"), namespace)
    if kernel_debug_dir:
        for k in code.kernels:
            namespace[k.name].debug_dir = kernel_debug_dir
    return namespace["call"], namespace

