"""`CompiledModel`: everything an artifact needs, for one target. Kernels (source, launch sizes), the call order
with each call's buffers, the buffer plan (inputs, outputs, weights, arena slots), and the weights.

Variants: the kernels of a target whose artifacts may meet devices unlike a GPU with the features the target asks
(`Target.fallbacks`: WebGPU, OpenCL) are also rendered for other flavors of the target, which the artifact picks
from when it loads (`variant_targets`, in order of preference): the same opts, so the same launch sizes, parameters
and weight layouts, only the source differs. A `Variant`: "gpu" has workgroup-memory tiles, "cpu" not (for GPU
languages run by a CPU: PoCL, SwiftShader, lavapipe); "-f16" variants compute in half precision (`--precision
f16`), and an f16 target falls back to float32 variants on devices without half arithmetic. With
`Target.quick_fallbacks` (WebGPU: a page compiles its shaders as it loads) each CPU-backed variant has a "-quick"
companion whose register blocks are loops (`lower.rolled`): quick to compile, slower to run; the artifact runs it
first and swaps in the blocked kernels as they compile.
`CompiledModel.variants` holds, per variant other than the main one, the kernels whose source differs from the main
one's, and `variant_targets` the target of every variant, the main one first."""
from __future__ import annotations
import math
import re
from collections import Counter
from dataclasses import dataclass, field, replace
import numpy as np
from tgc.ir.words import WordEnum
from tgc.ir import UOp, DType, dtypes, viz
from tgc.ir.sint import highest_prod, variables
from tgc.ir.provenance import Origin
from tgc.codegen.lower import lower, KernelProgram
from tgc.codegen.opts import OptError, OptOps
from tgc.codegen.size_variants import small_size_opts
from tgc.codegen.memory import plan_memory, align
from tgc.codegen.knobs import QUICK_OPS_PER_BYTE
from tgc.codegen.names import symbol
from tgc.codegen.target import Precision, Target


class BufferKind(WordEnum):
  """Where a buffer of a compiled model lives: given by the caller (input, output), stored with the artifact (weight),
  kept by the artifact from one call to the next (state: at the start of the arena, never reused) or placed in the
  arena (an intermediate). Its value is the manifest's word for it."""
  INPUT = "input"
  OUTPUT = "output"
  WEIGHT = "weight"
  STATE = "state"
  ARENA = "arena"


class Variant(WordEnum):
  """A kernel variant of a target (module docstring): GPU with workgroup-memory tiles, CPU without; the F16 ones
  compute in half precision. The value is the name manifests and the generated host code store."""
  GPU = "gpu"
  CPU = "cpu"
  GPU_F16 = "gpu-f16"
  CPU_F16 = "cpu-f16"
  CPU_QUICK = "cpu-quick"
  CPU_F16_QUICK = "cpu-f16-quick"

  @classmethod
  def of(cls, target: Target) -> Variant:
    """The variant whose kernels `target` renders."""
    half = target.precision is Precision.F16
    if target.workgroup_tiles: return cls.GPU_F16 if half else cls.GPU
    if not target.register_blocks: return cls.CPU_F16_QUICK if half else cls.CPU_QUICK
    return cls.CPU_F16 if half else cls.CPU

  @property
  def quick(self) -> bool:
    """Register blocks as loops: run while the blocked kernels of the variant without "-quick" compile."""
    return self.value.endswith("-quick")

  @property
  def blocked(self) -> Variant:
    """The variant a quick one stands in for (itself when it is not quick)."""
    return Variant(self.value.removesuffix("-quick"))


@dataclass(frozen=True)
class BufferInfo:
  kind: BufferKind
  index: int                # position within its kind (arena: slot number)
  name: str                 # original name (inputs/outputs/weights) or "" for intermediates
  symbol: str               # sanitized identifier
  shape: tuple[int, ...]
  dtype: DType
  nbytes: int
  offset: int = 0           # arena offset for intermediates


@dataclass
class Call:
  kernel: str
  buffers: list[int]        # indices into CompiledModel.buffers, in kernel argument order
  nodes: tuple[Origin, ...] = ()   # the model nodes this call computes


@dataclass
class CompiledModel:
  name: str
  target: Target
  kernels: dict[str, KernelProgram]
  calls: list[Call]
  buffers: list[BufferInfo]
  weights: dict[str, np.ndarray]   # by original weight name, in buffer order
  arena_bytes: int
  meta: dict = field(default_factory=dict)
  variants: dict[Variant, dict[str, KernelProgram]] = field(default_factory=dict)   # variant -> kernels that differ
  variant_targets: dict[Variant, Target] = field(default_factory=dict)              # every variant's target, main first
  # kernel name -> (its AST, its own weights: argument position -> elements), for analyses of the lowered kernels
  asts: dict[str, tuple[UOp, dict[int, int]]] = field(default_factory=dict, repr=False)
  states: list = field(default_factory=list)     # frontend.jit.StateSpec of each STATE buffer, in order
  # kernel name -> (its variant for small sizes, the length it is for, the block: run when 2 * length <= block)
  small_variants: dict[str, tuple[KernelProgram, UOp, int]] = field(default_factory=dict)

  def of_kind(self, kind: BufferKind | str) -> list[BufferInfo]:
    """The buffers of one kind (a BufferKind or its manifest word), in plan order."""
    kind = BufferKind(kind)
    return [b for b in self.buffers if b.kind is kind]

  def kernel_nodes(self, kernel: str) -> tuple[Origin, ...]:
    """The model nodes a kernel computes, over all its calls (a kernel identical for two layers serves both)."""
    return tuple(dict.fromkeys(o for c in self.calls if c.kernel == kernel for o in c.nodes))
  @property
  def dims(self) -> dict[str, tuple[int, int]]:
    """The sizes known only at run time that the model's shapes use: name -> (lowest, highest), sorted by name."""
    found = variables(*(b.shape for b in self.buffers), *(ast for ast, _ in self.asts.values()))
    return {name: v.arg[1:] for name, v in found.items()}
  @property
  def inputs(self) -> list[BufferInfo]: return self.of_kind(BufferKind.INPUT)
  @property
  def outputs(self) -> list[BufferInfo]: return self.of_kind(BufferKind.OUTPUT)
  @property
  def state_bytes(self) -> int:
    """The bytes at the start of the arena that hold the states (the intermediates follow them)."""
    return sum(align(b.nbytes) for b in self.of_kind(BufferKind.STATE))
  @property
  def state_lengths(self) -> set[str]:
    """The sizes that are states' lengths: the artifact tracks them, the caller does not give them."""
    return {st.length.arg[0] for st in self.states}


def buffer_nbytes(b: UOp) -> int:
  """Bytes of a BUFFER's elements (shape times item size; at the largest sizes of dims known only at run time: the
  arena is planned for the largest shapes)."""
  return highest_prod(b.arg[1]) * b.dtype.itemsize


def variant_targets(target: Target) -> dict[Variant, Target]:
  """Every flavor of `target` an artifact carries, by name, in order of preference (the target itself first)."""
  flavors = [target]
  if target.has_workgroups and target.fallbacks:
    half = target.precision is Precision.F16
    precisions = [target] + ([replace(target, precision=Precision.F32, f16=False)] if half else [])
    flavors = [t for p in precisions for t in ([p, replace(p, workgroup_tiles=False)] if p.workgroup_tiles else [p])]
    if target.quick_fallbacks:
      flavors += [replace(t, register_blocks=False) for t in flavors if not t.workgroup_tiles]
  return {Variant.of(t): t for t in flavors}


def _variants(target: Target, kernels: dict[str, KernelProgram], asts: dict[str, UOp],
              weights: dict[str, dict[int, int]], notes: dict[str, str], calls: dict[str, int]
              ) -> tuple[dict[Variant, dict[str, KernelProgram]], dict[Variant, Target]]:
  """Every kernel lowered again for each other variant target with the opts it got: the kernels whose source differs,
  per variant (a variant that differs from the main kernels exactly as an earlier one does is left out); and the
  targets of the variants kept. A quick variant holds the kernels whose quick form pays (`_quickest`; `calls`:
  launches per kernel), and is kept only with its blocked variant."""
  out: dict[Variant, dict[str, KernelProgram]] = {}
  targets = variant_targets(target)
  kept = {Variant.of(target): target}
  for vname, vtarget in list(targets.items())[1:]:
    if vname.quick and vname.blocked not in kept: continue
    same = _same_kernel(target, vtarget)
    progs = {}
    for kname, k in kernels.items():
      if same(k): continue
      base = out.get(vname.blocked, {}).get(kname, k) if vname.quick else k      # what the kernel is without it
      forms, blocks = [vtarget], sum(o.op is OptOps.UPCAST for o in k.opts)
      if vname.quick and blocks > 1:     # the block looped whole, or all of it but one axis
        forms += [replace(vtarget, kept_block_axis=i) for i in range(blocks)]
      lowered = [lower(asts[kname], t, list(k.opts), name=kname, weights=weights.get(asts[kname].key),
                       note=notes[kname]) for t in forms]
      v = _quickest(base, lowered, calls.get(kname, 1)) if vname.quick else lowered[0]
      if v.src == base.src: continue
      if (v.global_size, v.local_size, _bound(v), sorted(v.relayouts)) != (k.global_size, k.local_size, _bound(k),
                                                                             sorted(k.relayouts)):
        raise AssertionError(f"kernel {kname}: variant {vname} launches or binds differently")
      progs[kname] = v
    if not progs or any({n: p.src for n, p in progs.items()} == {n: p.src for n, p in done.items()}
                        for done in out.values()): continue
    out[vname], kept[vname] = progs, vtarget
  return out, kept


def _quickest(blocked: KernelProgram, quick: list[KernelProgram], calls: int) -> KernelProgram:
  """Which form of a kernel to run while its blocked one compiles (the blocked one itself where no quick form pays):
  the one with the least shader code (a software adapter's compile time, QUICK_OPS_PER_BYTE ops of run time per byte)
  plus the work its launches do meanwhile, in proportion to the memory traffic its loops add (`bytes`: a 3x3
  convolution whose copies share one weight load gains, a matmul whose 4x4 block shares both operands' loads launched
  in every layer of a transformer loses; a form keeping one axis of the block as copies is between the two)."""
  def cost(k: KernelProgram) -> float:
    return len(k.src) * QUICK_OPS_PER_BYTE + blocked.ops * calls * max(k.bytes / max(blocked.bytes, 1), 1)
  return min([blocked] + quick, key=cost)


def _same_kernel(target: Target, vtarget: Target):
  """Whether a kernel of `target` is surely rendered the same for `vtarget` (no need to lower it again): no
  workgroup tiles, the same precision, and none of the copies the variant turns into loops."""
  looped = ({OptOps.UNROLL} if not vtarget.workgroup_tiles else set()) | \
      ({OptOps.UPCAST} if not vtarget.register_blocks else set())
  return lambda k: (k.shared_bytes == 0 and vtarget.precision == target.precision and
                    all(o.op not in looped for o in k.opts))


def _bound(k: KernelProgram) -> list[tuple]:
  """What binding a kernel's buffers depends on (not how the source spells their elements)."""
  return [(p.index, p.dtype, p.mutable, p.atomic) for p in k.params]


def compile_schedule(name: str, target: Target, items: list, inputs: list[tuple[str, UOp]],
                     outputs: list[tuple[str, UOp]], weights: list[tuple[str, UOp, np.ndarray]],
                     opts_for=None, progress=None, states: list | None = None) -> CompiledModel:
  """Lower every scheduled kernel for `target` and plan memory. `items` are ScheduleItems (ast + bufs);
  `states`: (StateSpec, BUFFER) of each state, placed at the start of the arena;
  `opts_for(item)` may return the opts to use (BEAM, a tuning file; None: the heuristics; `meta["tuned"]` lists
  the kernels it gave opts for); `progress(i, n)` is called per kernel.
  `meta["renderer"]` names the target with its options. A language name as `target` means its artifact target."""
  if not isinstance(target, Target): target = Target.make(target)
  own = own_weights(items, {b for _, b, _ in weights})
  kernels, asts, by_ast, tuned = _lower_kernels(name, target, items, own, opts_for, progress)
  data = _weights_as_read(items, [kernels[by_ast[it.ast.key]] for it in items], weights)
  small = _small_size_variants(target, kernels, asts, own, items, by_ast, weights, data)
  buffers, index, weight_data = _named_buffers(inputs, outputs, weights, data)
  held = 0      # the states' bytes, before the planned intermediates
  for i, (st, b) in enumerate(states or []):
    index[b] = len(buffers)
    used = {x.symbol for x in buffers}
    buffers.append(BufferInfo(BufferKind.STATE, i, st.input, symbol(st.input, used, "st"), tuple(b.arg[1]), b.dtype,
                              buffer_nbytes(b), held))
    held += align(buffer_nbytes(b))
  # each call binds the buffers of its kernel's parameters (a weight folded into another is no parameter any more)
  calls_bufs = [[it.bufs[p] for p in kernels[by_ast[it.ast.key]].args] for it in items]
  inter = {b: buffer_nbytes(b) for bufs in calls_bufs for b in bufs if b not in index}
  slots, arena = plan_memory(calls_bufs, inter)
  arena += held
  for j, s in enumerate(sorted(slots, key=lambda s: (s.first, s.offset))):
    index[s.key] = len(buffers)
    buffers.append(BufferInfo(BufferKind.ARENA, j, "", f"tmp{j}", tuple(s.key.arg[1]), s.key.dtype, s.nbytes,
                              held + s.offset))
  calls = [Call(by_ast[it.ast.key], [index[b] for b in bufs], tuple(it.meta.get("nodes", ())))
           for it, bufs in zip(items, calls_bufs)]
  nodes = _nodes_by_ast(items)
  notes = {kname: node_note(kname, nodes[ast.key]) for kname, ast in asts.items()}
  launches = Counter(by_ast[it.ast.key] for it in items)
  variants, vtargets = _variants(target, kernels, asts, own, notes, launches)
  return CompiledModel(name, target, kernels, calls, buffers, weight_data, arena,
                       {"renderer": str(target), "tuned": tuned}, variants, vtargets,
                       {kname: (ast, own.get(ast.key, {})) for kname, ast in asts.items()},
                       [st for st, _ in states or []], small)


def _small_size_variants(target: Target, kernels: dict[str, KernelProgram], asts: dict[str, UOp], own: dict,
                         items: list, by_ast: dict[str, str], weights: list, data: dict[UOp, np.ndarray]
                         ) -> dict[str, tuple[KernelProgram, UOp, int]]:
  """Per CPU kernel blocked over a size known at run time, its variant for small values of that size
  (`size_variants`), kept when it binds the same buffers and reads its weights in the same layout as the kernel."""
  if target.has_workgroups: return {}
  original = _original_weights(weights)
  item_of = {by_ast[it.ast.key]: it for it in items}
  out: dict[str, tuple[KernelProgram, UOp, int]] = {}
  for kname, prg in kernels.items():
    variant = small_size_opts(asts[kname], list(prg.opts)) if prg.variables else None
    if variant is None: continue
    try: small = lower(asts[kname], target, variant.opts, name=f"{kname}_small", weights=own.get(asts[kname].key))
    except OptError: continue
    it = item_of[kname]
    same = small.args == prg.args and small.params == prg.params and set(small.relayouts) == set(prg.relayouts) and \
      all(np.array_equal(how.apply({p: original[it.bufs[p]] for p in how.positions}), data[it.bufs[pos]])
          for pos, how in small.relayouts.items())
    if same: out[kname] = (small, variant.extent, variant.block)
  return out


def _nodes_by_ast(items: list) -> dict[str, tuple[Origin, ...]]:
  """Per AST key, the model nodes its kernel computes over all its calls, in call order (one pass over the calls)."""
  found: dict[str, dict[Origin, None]] = {}
  for it in items: found.setdefault(it.ast.key, {}).update(dict.fromkeys(it.meta.get("nodes", ())))
  return {key: tuple(origins) for key, origins in found.items()}


def _lower_kernels(name: str, target: Target, items: list, own: dict, opts_for, progress):
  """Each distinct kernel AST lowered once, headed by the comment naming the model nodes it computes: programs and
  ASTs by kernel name, the kernel name of each AST key, the kernels `opts_for` gave opts for."""
  kernels: dict[str, KernelProgram] = {}
  asts: dict[str, UOp] = {}
  by_ast: dict[str, str] = {}
  tuned: list[str] = []
  nodes = _nodes_by_ast(items)
  for i, it in enumerate(items):
    if progress: progress(i, len(items))
    if it.ast.key in by_ast: continue
    kname = kernel_name(name, len(kernels), it.meta.get("nodes", ()))
    opts = opts_for(it) if opts_for else None
    if opts is not None: tuned.append(kname)
    with viz.section(kname, "kernel"):
      viz.snapshot("scheduled AST", it.ast)
      kernels[kname] = lower(it.ast, target, opts, name=kname, weights=own.get(it.ast.key),
                             note=node_note(kname, nodes[it.ast.key]))
    asts[kname] = it.ast
    by_ast[it.ast.key] = kname
  return kernels, asts, by_ast, tuned


def _named_buffers(inputs: list, outputs: list, weights: list, data: dict[UOp, np.ndarray]):
  """The inputs', outputs' and weights' BufferInfos (weights as their kernels read them; one folded into another is
  left out), the position of each BUFFER among them, and the weights' data by name."""
  used: set[str] = set()
  buffers: list[BufferInfo] = []
  index: dict[UOp, int] = {}
  for kind, group in ((BufferKind.INPUT, inputs), (BufferKind.OUTPUT, outputs)):
    for i, (nm, b) in enumerate(group):
      if b in index: continue
      index[b] = len(buffers)
      buffers.append(BufferInfo(kind, i, nm, symbol(nm, used, kind[:2]), tuple(b.arg[1]), b.dtype, buffer_nbytes(b)))
  weight_data: dict[str, np.ndarray] = {}
  for nm, b, _ in weights:
    if b not in data: continue          # folded into another weight: no kernel reads it
    arr = data[b]
    index[b] = len(buffers)
    shape = tuple(arr.shape) if not b.dtype.storage_only else tuple(b.arg[1])
    dtype = b.dtype if b.dtype.storage_only or arr.dtype == b.dtype.numpy else dtypes.from_numpy(arr.dtype)
    buffers.append(BufferInfo(BufferKind.WEIGHT, len(weight_data), nm, symbol(nm, used, "w"), shape, dtype,
                              buffer_nbytes(b) if b.dtype.storage_only else arr.nbytes))
    weight_data[nm] = arr
  return buffers, index, weight_data


SHORT_OPS = {"BatchNormalization": "bn", "LayerNormalization": "layernorm", "InstanceNormalization": "instnorm",
             "GroupNormalization": "groupnorm", "GlobalAveragePool": "gap", "GlobalMaxPool": "gmp",
             "AveragePool": "avgpool", "ConvTranspose": "convt", "DequantizeLinear": "dequant",
             "QuantizeLinear": "quant", "DynamicQuantizeLinear": "dynquant", "ReduceMean": "mean", "ReduceSum": "sum",
             "ReduceMax": "max"}   # op type -> name part


def kernel_name(model: str, index: int, nodes: tuple[Origin, ...]) -> str:
  """`<model>_k<index>_<ops>`: the op types of the nodes the kernel computes, in order, as far as 24 characters go
  (stable across compiles: the same model gives the same names)."""
  ops: list[str] = []
  for o in nodes:
    op = SHORT_OPS.get(o.op, re.sub(r"[^a-z0-9]", "", o.op.lower()))
    if op and op not in ops and len("_".join(ops + [op])) <= 24: ops.append(op)
  return "_".join([symbol(model, None, "m"), f"k{index}"] + ops)


def node_note(kernel: str, nodes: tuple[Origin, ...]) -> str:
  """The text heading a kernel in every target's source, as the renderer's comment: the model nodes it computes."""
  if not nodes: return f"{kernel} computes no model node (a copy)"
  return f"{kernel} computes: " + ", ".join(str(o) for o in nodes)


def _original_weights(weights: list) -> dict[UOp, np.ndarray]:
  """Each weight's data as its BUFFER holds it: storage-only ones as flat packed words, the others in its shape."""
  return {b: np.ascontiguousarray(v).reshape(-1 if b.dtype.storage_only else b.arg[1]) for _, b, v in weights}


def _weights_as_read(items: list, programs: list[KernelProgram], weights: list) -> dict[UOp, np.ndarray]:
  """The data of every weight some kernel reads, stored as its kernel reads it (the kernels' relayouts applied to
  the original data); weights no kernel reads any more are left out. Storage-only weights are their packed storage
  words, flat; the others keep the tensor's shape unless relaid (then flat)."""
  original = _original_weights(weights)
  out: dict[UOp, np.ndarray] = {}
  for it, prg in zip(items, programs):
    for pos, how in prg.relayouts.items():
      if it.bufs[pos] not in out: out[it.bufs[pos]] = how.apply({p: original[it.bufs[p]] for p in how.positions})
  read = {it.bufs[p] for it, prg in zip(items, programs) for p in prg.args}
  return {b: out.get(b, original[b]) for b in original if b in read}


def own_weights(items: list, weights: set[UOp]) -> dict[str, dict[int, int]]:
  """Per kernel (AST key), the argument positions whose buffers are weights that nothing else reads (in every call
  of the kernel), with their element counts: lowering may store those in the order the kernel reads them."""
  uses: dict[UOp, set[tuple[str, int]]] = {}
  for it in items:
    for pos, b in enumerate(it.bufs): uses.setdefault(b, set()).add((it.ast.key, pos))
  own: dict[str, dict[int, int]] = {}
  refused: set[tuple[str, int]] = set()
  for it in items:
    for pos, b in enumerate(it.bufs):
      mine = b in weights and not b.dtype.storage_only and uses[b] == {(it.ast.key, pos)}
      if not mine: refused.add((it.ast.key, pos))
      else: own.setdefault(it.ast.key, {})[pos] = math.prod(b.arg[1])
  return {key: {p: n for p, n in ps.items() if (key, p) not in refused} for key, ps in own.items()}
