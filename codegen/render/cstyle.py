"""The C-style renderer base: walks a linearized kernel and prints it. Subclasses only change data: type names,
how arguments and indices are spelled, and the few ops whose spelling differs. A renderer is made for a `Target`
(`target.renderer()`), which holds the limits and options it checks and spells. `render_kernel` returns the kernel
function and, as data, what callers need to know about it (`RenderedKernel`: the lines it needs before it, its
parameters, workgroup memory bytes, device features), so that artifact writers and runtimes never parse source."""
from __future__ import annotations
import functools
import math
from dataclasses import dataclass, field
from tgc.ir import Ops, GroupOp, UOp, DType, AxisType, dtypes
from tgc.ir.symbolic import split_terms
from tgc.codegen.names import comment_lines
from tgc.codegen.target import Target


@dataclass(frozen=True)
class KernelParam:
  """One buffer parameter of a rendered kernel: the position of its buffer in a call's buffer list, the element
  type, whether the kernel writes it, and the element type as the signature spells it (e.g. "const float")."""
  index: int
  dtype: DType
  mutable: bool
  spelled: str
  atomic: bool = False     # WGSL: bound as array<atomic<u32>> (packed output, zeroed before each launch)


@dataclass(frozen=True)
class RenderedKernel:
  """What rendering one kernel gives: the function, the lines it needs before it (includes, helpers, WGSL module
  declarations), its buffer parameters, workgroup memory per work-group and the device features it needs."""
  function: str
  prefix: tuple[str, ...]
  params: tuple[KernelParam, ...]
  shared_bytes: int = 0
  features: tuple[str, ...] = ()
  variables: tuple[str, ...] = ()    # the sizes known at run time it takes after its buffers, by name, in order

# op -> format over rendered sources; the same in every C-family language
BASE_OPS = {
  Ops.NEG: "(-{0})", Ops.ADD: "({0}+{1})", Ops.SUB: "({0}-{1})", Ops.MUL: "({0}*{1})", Ops.FDIV: "({0}/{1})",
  Ops.CMPLT: "({0}<{1})", Ops.CMPNE: "({0}!={1})", Ops.CMPEQ: "({0}=={1})", Ops.AND: "({0}&{1})",
  Ops.OR: "({0}|{1})", Ops.XOR: "({0}^{1})", Ops.WHERE: "({0}?{1}:{2})", Ops.MULACC: "(({0}*{1})+{2})",
}


class CStyleRenderer:
  language = "cstyle"
  kernel_prefix = ""
  global_qualifier = ""
  const_qualifier = "const "
  restrict = "restrict "
  local_qualifier = ""
  barrier = ""
  float_suffix = {dtypes.float32: "f", dtypes.float64: "", dtypes.float16: "f"}
  types: dict[DType, str] = {}
  storage_types: dict[DType, str] = {}
  math_fns: dict[tuple[Ops, DType], str] = {}
  has_half = False
  vector_ops: frozenset = frozenset()     # ops the language does on SIMD vectors (empty: vectors are expanded)
  vector_itemsizes: frozenset = frozenset({4})   # element sizes loaded and stored as vectors (others lane by lane)
  masked_vectors = False                  # vector loads and stores with a gate per lane (render_masked_load/store)
  lane_masks = False                      # ... as single instructions: any gate of lane comparisons is worth a mask
  zero_rows = False                       # loads gated outside their loop read a row of zeros instead (`zero_rows`)

  def __init__(self, target: Target | None = None):
    self.target = target if target is not None else Target.make(self.language, artifact=False)

  def __str__(self) -> str: return str(self.target)

  # ---- spelling hooks ----
  def type_name(self, d: DType) -> str: return self.types[d]
  def storage_type(self, d: DType) -> str:
    if d.storage_only: return self.type_name(dtypes.from_numpy(d.np))
    return self.storage_types.get(d, self.type_name(d))
  def grid_index(self, r: UOp) -> str: raise NotImplementedError   # r.arg: RangeArg with its launch dimension
  def prefix(self, program: list[UOp]) -> list[str]: return []
  def features(self, program: list[UOp]) -> tuple[str, ...]:
    """Device features the kernel needs (OpenCL extensions, WebGPU features, CUDA headers), sorted."""
    return ()
  def fn(self, op: Ops, d: DType) -> str: return self.math_fns[(op, d)]
  def prepare(self, ast: UOp) -> UOp:
    """Target-specific graph rewrites of a kernel after launch dimensions are assigned, before linearizing."""
    return ast

  # ---- statement spelling hooks (C syntax by default) ----
  def render_decl(self, name: str, d: DType, expr: str, mutable: bool = False) -> str:
    """A new variable; `mutable` for accumulators, which are assigned again later."""
    return f"{self.type_name(d)} {name} = {expr};"
  def render_for(self, name: str, end: str, task: bool = False) -> str:
    """A loop; `task`: the outermost output loop of a CPU kernel, which a thread runs part of."""
    return f"for (int {name} = 0; {name} < {end}; {name}++) {{"
  def render_grid_decl(self, name: str, r: UOp, size: str) -> str:
    return f"int {name} = {self.grid_index(r)}; /* {size} */"
  def render_local(self, name: str, d: DType, size: int) -> str | None:
    """A work-group buffer declared inside the kernel; None when the language declares it elsewhere (prefix)."""
    return f"{self.local_qualifier}{self.storage_type(d)} {name}[{size}];"
  def render_masked_load(self, buf: str, idx: str, mask: str, d: DType) -> str:
    raise NotImplementedError(f"{self.language}: no masked vector loads")
  def render_masked_store(self, buf: str, idx: str, val: str, mask: str, d: DType) -> str:
    raise NotImplementedError(f"{self.language}: no masked vector stores")
  def render_gated_load(self, gate: str, load: str, d: DType) -> str:
    return f"(({gate})?{load}:{self.render_const(0, d)})"
  def render_if(self, cond: str, stmt: str) -> str: return f"if ({cond}) {stmt}"

  def render_const(self, v, d: DType) -> str:
    if d.is_bool: return "1" if v else "0"
    if d.is_float:
      if math.isnan(v): return self.nan(d)
      if math.isinf(v): return ("(-" if v < 0 else "") + self.inf(d) + (")" if v < 0 else "")
      text = f"{float(v).hex()}{self.float_suffix.get(d, '')}" if v != int(v) or abs(v) >= 1e16 else \
        f"{float(v)!r}{self.float_suffix.get(d, '')}"
      return f"({text})" if text.startswith("-") else text   # a - (-1.5), never a--1.5
    if d in (dtypes.int64,): return f"{v}LL" if v != -(1 << 63) else "(-9223372036854775807LL-1)"
    if d in (dtypes.uint64,): return f"{v}ULL"
    if d in (dtypes.uint32,): return f"{v}u"
    if d == dtypes.int32 and v == -(1 << 31): return "(-2147483647-1)"
    return f"{v}" if v >= 0 else f"({v})"
  def nan(self, d: DType) -> str: return "NAN"
  def inf(self, d: DType) -> str: return "INFINITY"

  def render_cast(self, x: str, src: DType, dst: DType) -> str:
    if dst.is_bool: return f"({x}!=0)"
    return f"(({self.type_name(dst)})({x}))"

  def render_bitcast(self, x: str, src: DType, dst: DType) -> str: raise NotImplementedError

  # ---- vectors (languages with `vector_ops`) ----
  def render_vector(self, lanes: list[str], d: DType) -> str: raise NotImplementedError
  def render_vector_load(self, buf: str, idx: str, d: DType) -> str: raise NotImplementedError
  def render_vector_store(self, buf: str, idx: str, val: str, d: DType) -> str: raise NotImplementedError
  def render_vector_alu(self, u: UOp, s: list[str]) -> str: raise NotImplementedError
  def render_gep(self, x: str, i: int, d: DType) -> str: return f"{x}[{i}]"
  def vector_access(self, buf: UOp, base: UOp) -> bool:
    """Whether a vector load or store of `buf` may start at element `base` (vectorize asks; C: anywhere)."""
    return True

  def render_alu(self, u: UOp, s: list[str]) -> str:
    d = u.src[0].dtype
    if u.op is Ops.MAX:
      k = number_side(u)
      if d.is_float and k is not None: return f"((({s[k]})>({s[1 - k]}))?({s[k]}):({s[1 - k]}))"
      if d.is_float: return f"((({s[0]})>({s[1]})||({s[0]})!=({s[0]}))?({s[0]}):({s[1]}))"
      return f"(({s[0]})>({s[1]})?({s[0]}):({s[1]}))"
    if u.op in (Ops.IDIV, Ops.MOD):
      sym = "/" if u.op is Ops.IDIV else "%"
      b = u.src[1]
      if b.vmin <= 0 <= b.vmax: return f"(({s[1]})==0?0:({s[0]}){sym}({s[1]}))"
      return f"({s[0]}{sym}{s[1]})"
    if u.op in (Ops.SHL, Ops.SHR):
      bits = d.itemsize * 8
      return f"({s[0]}{'<<' if u.op is Ops.SHL else '>>'}(({s[1]})&{bits - 1}))"
    if u.op is Ops.RECIP: return f"({self.render_const(1.0, d)}/{s[0]})"
    if u.op in (Ops.EXP2, Ops.LOG2, Ops.SIN, Ops.SQRT, Ops.TRUNC, Ops.RINT, Ops.POW):
      return f"{self.fn(u.op, d)}({', '.join(s)})"
    if u.op is Ops.NEG and d.is_bool: return f"(!{s[0]})"
    if u.op in (Ops.AND, Ops.OR) and d.is_bool: return f"({s[0]}{'&&' if u.op is Ops.AND else '||'}{s[1]})"
    if u.op is Ops.XOR and d.is_bool: return f"({s[0]}!={s[1]})"
    return BASE_OPS[u.op].format(*s)

  def render_load(self, buf: str, idx: str, d: DType) -> str: return f"{buf}[{idx}]"
  def render_store(self, buf: str, idx: str, val: str, d: DType) -> str: return f"{buf}[{idx}] = {val};"
  def param_type(self, d: DType, mutable: bool) -> str:
    """The element type of a buffer parameter as the signature spells it."""
    return f"{'' if mutable else self.const_qualifier}{self.storage_type(d)}".strip()
  def arg_decl(self, i: int, d: DType, mutable: bool) -> str:
    return f"{self.global_qualifier}{self.param_type(d, mutable)}* {self.restrict}data{i}"
  def variable_decl(self, name: str) -> str:
    """The parameter of a size known at run time (`variable_name` spells its name)."""
    return f"const int {name}"

  def params(self, program: list[UOp]) -> list[KernelParam]:
    """The kernel's buffer parameters in signature order."""
    return [KernelParam(b.arg[0], b.dtype, b.arg[1], self.param_type(b.dtype, b.arg[1])) for b in _buffers(program)]
  def kernel_signature(self, name: str, args: list[str], local_size) -> str:
    return f"{self.kernel_prefix}void {name}({', '.join(args)})"

  # ---- the walk ----
  def render_kernel(self, name: str, program: list[UOp], local_size=(1, 1, 1), note: str = "") -> RenderedKernel:
    """The kernel and what callers need to know about it, as data; `note` heads the function as a comment."""
    function = self.comment(note) + self.render(name, program, local_size)
    return RenderedKernel(function, tuple(self.prefix(program)), tuple(self.params(program)), shared_bytes(program),
                          self.features(program), tuple(v.arg[0] for v in variables_of(program)))

  def comment(self, text: str) -> str:
    """`text` as comment lines (made safe: nothing in it ends the comment), each ending in a newline."""
    return comment_lines(text) if text else ""

  def render(self, name: str, program: list[UOp], local_size=(1, 1, 1)) -> str:
    """The kernel function alone; `prefix(program)` gives the lines (includes, helpers) it needs before it. Each op is
    a statement of STATEMENTS or a value (`render_value`), named or inlined."""
    bufs = _buffers(program)
    body = KernelBody(self, task_range(program), zero_rows(program) if self.zero_rows else {})
    for u in program:
      for s in u.src: body.uses[s] = body.uses.get(s, 0) + 1
    for b in bufs: body.names[b] = f"data{b.arg[0]}"
    for v in variables_of(program): body.names[v] = variable_name(v.arg[0])
    # workgroup memory is declared at the kernel's outermost scope (OpenCL and Metal require it), before anything else
    program = [u for u in program if u.op is Ops.DEFINE_LOCAL] + [u for u in program if u.op is not Ops.DEFINE_LOCAL]
    dead = _unread_indexes(program, body.zero_rows)
    for p, u in enumerate(program):
      if u.op in (Ops.DEFINE_GLOBAL, Ops.DEFINE_VAR) or p in dead: continue
      if u.op in STATEMENTS: STATEMENTS[u.op](body, u)
      else: body.value(u, self.render_value(body, u))
    while body.depth > 1: _close_block(body, None)
    args = [self.arg_decl(b.arg[0], b.dtype, b.arg[1]) for b in bufs] + \
      [self.variable_decl(variable_name(v.arg[0])) for v in variables_of(program)]
    sig = self.kernel_signature(name, args, local_size)
    return "\n".join([sig + " {"] + self.kernel_preamble(body.task) + body.lines + ["}", ""])

  def render_value(self, body: KernelBody, u: UOp) -> str:
    """The expression of a value op (a load, a vector, an element of one, arithmetic, a cast)."""
    r = body.r
    if u.op is Ops.CONST: return self.render_const(u.arg, u.dtype)
    if u.op is Ops.LOAD:
      buf, idx = u.src[:2]
      pointer, gate = r(buf), load_gate(u)
      if (row := body.zero_rows.get(u)) is not None:    # (gate ? buf + base : zeros)[step]: no branch in the loop
        pointer = f"(({r(gate)}) ? {pointer} + ({_sum(body, row.terms, row.const)}) : {row.name})"
        index, gate = _sum(body, ((row.loop, row.step),), 0), None
      else: index = r(idx)
      ld = self.render_load(pointer, index, buf.dtype) if u.dtype.count == 1 else \
        self.render_vector_load(pointer, index, u.dtype)
      if gate is not None and gate.dtype.count > 1: return self.render_masked_load(r(buf), r(idx), r(gate), u.dtype)
      return self.render_gated_load(r(gate), ld, u.dtype) if gate is not None else ld
    if u.op is Ops.VECTORIZE:
      return self.render_vector([r(s) for s in u.src] * (u.dtype.count if len(u.src) == 1 else 1), u.dtype)
    if u.op is Ops.GEP: return self.render_gep(r(u.src[0]), u.arg, u.src[0].dtype)
    if u.dtype.count > 1 or any(s.dtype.count > 1 for s in u.src):
      return self.render_vector_alu(u, [r(s) for s in u.src])
    if u.op is Ops.CAST: return self.render_cast(r(u.src[0]), u.src[0].dtype, u.dtype)
    if u.op is Ops.BITCAST: return self.render_bitcast(r(u.src[0]), u.src[0].dtype, u.dtype)
    return self.render_alu(u, [r(s) for s in u.src])

  def kernel_preamble(self, task: UOp | None) -> list[str]:
    """Statements before the body (C: marks the task bounds used when the kernel has no output loop)."""
    return []


_RANGE_NAMES = {AxisType.GLOBAL: "gidx", AxisType.LOCAL: "lidx", AxisType.GROUP: "lidx"}
_GRID = (AxisType.GLOBAL, AxisType.LOCAL, AxisType.GROUP)


@dataclass
class KernelBody:
  """One kernel function being written: the rendered name (or inlined text) of each value, how often each is used,
  the lines so far and their nesting depth."""
  renderer: CStyleRenderer
  task: UOp | None                      # the range a parallel-for splits (C), if any
  zero_rows: dict[UOp, ZeroRow] = field(default_factory=dict)    # loads that read a row of zeros when gated off
  names: dict[UOp, str] = field(default_factory=dict)
  uses: dict[UOp, int] = field(default_factory=dict)
  lines: list[str] = field(default_factory=list)
  depth: int = 1
  counter: int = 0

  def new_name(self, prefix: str) -> str:
    self.counter += 1
    return f"{prefix}{self.counter}"

  def r(self, u: UOp) -> str:
    """A value as the source spells it."""
    return self.names[u] if u.op is not Ops.CONST else self.renderer.render_const(u.arg, u.dtype)

  def line(self, text: str, depth: int | None = None) -> None:
    self.lines.append("  " * (self.depth if depth is None else depth) + text)

  def value(self, u: UOp, expr: str) -> None:
    """A value: single-use index math is inlined, anything else declared under a new name."""
    if u.op is Ops.CONST or (self.uses.get(u, 0) == 1 and u.op is not Ops.LOAD and u.dtype == dtypes.index):
      self.names[u] = expr
      return
    self.names[u] = self.new_name("alu" if u.op is not Ops.LOAD else "val")
    self.line(self.renderer.render_decl(self.names[u], u.dtype, expr))


def _define_local(body: KernelBody, u: UOp) -> None:
  body.names[u] = u.arg[0]
  if (decl := body.renderer.render_local(u.arg[0], u.dtype, u.arg[1])) is not None: body.line(decl)


def _range(body: KernelBody, u: UOp) -> None:
  kind, rd = u.arg.kind, body.renderer
  body.names[u] = nm = _RANGE_NAMES.get(kind, "ridx") + str(u.arg.id)
  if kind in _GRID and rd.target.has_workgroups: body.line(rd.render_grid_decl(nm, u, body.r(u.src[0])))
  else:
    body.line(rd.render_for(nm, body.r(u.src[0]), task=u is body.task))
    body.depth += 1


def _open_if(body: KernelBody, u: UOp) -> None:
  body.line(f"if ({body.r(u.src[0])}) {{")
  body.depth += 1


def _close_block(body: KernelBody, u: UOp | None) -> None:
  body.depth -= 1
  body.line("}")


def _define_acc(body: KernelBody, u: UOp) -> None:
  body.names[u] = body.new_name("acc")
  init = body.r(u.src[0])
  if u.dtype.count > 1: init = body.renderer.render_vector([init] * u.dtype.count, u.dtype)
  body.line(body.renderer.render_decl(body.names[u], u.dtype, init, mutable=True))


def _assign(body: KernelBody, u: UOp) -> None:
  acc, val, red = u.src[0], u.src[1], u.arg
  if val.op is Ops.DOT and len(val.src) % 2 and val.src[-1] is acc:   # a dot product added into the accumulator
    body.line(f"{body.r(acc)} = {body.r(val)};")
    body.names[red] = body.r(acc)
    return
  combine = {Ops.ADD: Ops.ADD, Ops.MUL: Ops.MUL, Ops.MAX: Ops.MAX}[red.arg]
  op = UOp(combine, acc.dtype, (acc, val))
  operands = [body.r(acc), body.r(val)]
  rd = body.renderer
  expr = rd.render_vector_alu(op, operands) if acc.dtype.count > 1 else rd.render_alu(op, operands)
  body.line(f"{body.r(acc)} = {expr};")
  body.names[red] = body.r(acc)


def _store(body: KernelBody, u: UOp) -> None:
  (buf, idx, val), r, rd = u.src[:3], body.r, body.renderer
  st = rd.render_store(r(buf), r(idx), r(val), buf.dtype) if val.dtype.count == 1 else \
    rd.render_vector_store(r(buf), r(idx), r(val), val.dtype)
  gate = store_gate(u)
  if gate is not None and gate.dtype.count > 1: st = rd.render_masked_store(r(buf), r(idx), r(val), r(gate), val.dtype)
  body.line(rd.render_if(r(gate), st) if gate is not None and gate.dtype.count == 1 else st)


# op -> the statement it writes (every other op is a value: CStyleRenderer.render_value)
STATEMENTS = {
  Ops.DEFINE_LOCAL: _define_local,                                   # workgroup memory, declared once
  Ops.BARRIER: lambda body, u: body.line(body.renderer.barrier),     # work-group barrier
  Ops.RANGE: _range,                                                 # a loop, or a grid index on GPUs
  Ops.ENDRANGE: _close_block,                                        # end of a loop
  Ops.IF: _open_if,                                                  # if (gate) {
  Ops.ELSE: lambda body, u: body.line("} else {", body.depth - 1),   # } else {
  Ops.ENDIF: _close_block,                                           # }
  Ops.DEFINE_ACC: _define_acc,                                       # an accumulator, initialized
  Ops.ASSIGN: _assign,                                               # acc = acc op value
  Ops.STORE: _store,                                                 # buf[idx] = value (gated)
}


@dataclass(frozen=True)
class ZeroRow:
  """A load gated by a condition computed outside its innermost loop, at `base + loop*step` with `base` (its `terms`
  and `const`) computed outside too: it reads `buf + base` or, gated off, the static zero array `name` of `size`
  elements, at `loop*step`."""
  terms: tuple[tuple[UOp, int], ...]
  const: int
  loop: UOp
  step: int
  name: str
  size: int
  dtype: DType                          # the buffer's element type (the array's, as the renderer spells it)


ZERO_ROW_LIMIT = 4096         # elements of the largest zero row (16 KiB of floats, shared by every kernel)


def zero_rows(program: list[UOp]) -> dict[UOp, ZeroRow]:
  """The loads of a linearized kernel that `ZeroRow` applies to. A convolution's zero padding gates its loads by the
  tap and the output position, both outside the loop over input channels: gated there, each load was a branch and a
  load into a register broadcast on the port the multiply-adds use (a 7x7 3x3 convolution at 0.75x the speed of its
  ungated loop); read from a zero row, it is the same broadcast from memory as an ungated one."""
  level: dict[UOp, int] = {}
  loops: list[UOp] = []
  rows: dict[UOp, ZeroRow] = {}
  for u in program:
    if u.op is Ops.ENDRANGE:
      loops.pop()
      continue
    level[u] = len(loops)
    if u.op is Ops.RANGE: loops.append(u)
    if u.op is not Ops.LOAD or not loops or (gate := load_gate(u)) is None or gate.dtype.count > 1: continue
    r, buf, depth = loops[-1], u.src[0], len(loops)
    # 8-bit operands (four to a load, for dot-product instructions) keep their gates: 10% slower through a zero row
    if level.get(gate, 0) >= depth or r.src[0].op is not Ops.CONST or buf.dtype.itemsize < 4: continue
    terms, const = split_terms(u.src[1])
    k = terms.pop(r, 0)
    if k <= 0 or any(level.get(x, 0) >= depth for t in terms for x in t.toposort()): continue
    size = (r.src[0].arg - 1) * k + u.dtype.count
    if size > ZERO_ROW_LIMIT: continue
    rows[u] = ZeroRow(tuple(sorted(terms.items(), key=lambda tc: tc[0].key)), const, r, k,
                      f"tg_zero_{buf.dtype.name}_{size}", size, buf.dtype)
  return rows


def _unread_indexes(program: list[UOp], rows: dict[UOp, ZeroRow]) -> set[int]:
  """Positions in `program` of the index arithmetic that only loads reading through a zero row used (they read their
  base's terms and loop instead): not written at all. Counted per occurrence, as an unswitched loop lists its body
  twice: an index its plain copy still reads is written there and left out of the gated copy."""
  last: dict[UOp, int] = {}
  sources: list[list[int]] = []
  readers = [0] * len(program)
  dropped = []
  for p, u in enumerate(program):
    sources.append([last[x] for x in u.src if x in last])
    for q in sources[-1]: readers[q] += 1
    if u in rows:
      for t in [rows[u].loop] + [t for t, _ in rows[u].terms]:
        if t in last: readers[last[t]] += 1
      dropped.append(last[u.src[1]])
    last[u] = p
  dead: set[int] = set()

  def drop(p: int) -> None:
    readers[p] -= 1
    u = program[p]
    if readers[p] == 0 and u.dtype.is_int and u.dtype.count == 1 and u.op in GroupOp.Elementwise:
      dead.add(p)
      for q in sources[p]: drop(q)
  for p in dropped: drop(p)
  return dead


def _sum(body: KernelBody, terms, const: int) -> str:
  """sum(term * coefficient) + const as C spells it."""
  parts = [body.r(t) if c == 1 else f"{body.r(t)}*{c}" for t, c in terms] + ([str(const)] if const else [])
  return " + ".join(parts) or "0"


@functools.lru_cache(maxsize=4096)
def never_nan(u: UOp) -> bool:
  """Whether `u` cannot be NaN: a constant other than NaN (a scalar, or one broadcast into every lane), an integer
  converted to float (an 8-bit value dequantized), or a max or select of such values (a max pooling of them)."""
  if u.op is Ops.CONST: return not (isinstance(u.arg, float) and math.isnan(u.arg))
  if u.op is Ops.CAST: return not u.src[0].dtype.is_float or never_nan(u.src[0])
  if u.op in (Ops.VECTORIZE, Ops.MAX): return all(never_nan(x) for x in u.src)
  if u.op is Ops.WHERE: return never_nan(u.src[1]) and never_nan(u.src[2])
  if u.op is Ops.GEP: return never_nan(u.src[0])
  return False


def number_side(u: UOp) -> int | None:
  """The source of MAX `u` that cannot be NaN (a ReLU's 0, a clip's bound, a dequantized integer), else None. With
  one such side k, max(x, k) is `k > x ? k : x`: a NaN x fails the comparison and is the result, as max's NaN x must
  be, so the test for NaN is not needed (x86: one maxps)."""
  return next((i for i, x in enumerate(u.src) if never_nan(x)), None)


def load_gate(u: UOp) -> UOp | None:
  """The validity gate of a LOAD (src[2]); a BARRIER there only orders a workgroup-memory read after it."""
  return u.src[2] if len(u.src) > 2 and u.src[2].op is not Ops.BARRIER else None


def store_gate(u: UOp) -> UOp | None:
  """The validity gate of a STORE (src[3]); a BARRIER there only orders a workgroup-memory write after it."""
  return u.src[3] if len(u.src) > 3 and u.src[3].op is not Ops.BARRIER else None


def shared_bytes(program: list[UOp]) -> int:
  """Workgroup memory the kernel declares, in bytes."""
  return sum(u.dtype.itemsize * u.arg[1] for u in program if u.op is Ops.DEFINE_LOCAL)


def task_range(program: list[UOp]) -> UOp | None:
  """The outermost output loop of a CPU kernel (the loop threads split), if it has one. The inner part of a split
  never is: the lanes loop of a plain-C fallback runs whole in every task."""
  return next((u for u in program if u.op is Ops.RANGE and u.arg.kind is AxisType.GLOBAL and u.arg.parent is None),
              None)


def _buffers(program: list[UOp]) -> list[UOp]:
  """The DEFINE_GLOBALs a program uses, by argument position."""
  return sorted({u for u in program if u.op is Ops.DEFINE_GLOBAL} |
                {s for u in program for s in u.src if s.op is Ops.DEFINE_GLOBAL}, key=lambda b: b.arg[0])


def variables_of(program: list[UOp]) -> list[UOp]:
  """The sizes known at run time (DEFINE_VAR) a program uses, sorted by name: the kernel's parameters after its
  buffers."""
  return sorted({s for u in program for s in (u, *u.src) if s.op is Ops.DEFINE_VAR}, key=lambda v: v.arg[0])


def variable_name(name: str) -> str:
  """How kernels name a size known at run time (a `Variable`'s name is an identifier; the prefix keeps it apart from
  the language's keywords and the kernel's own names)."""
  return f"dim_{name}"
