"""`UOp`: the one IR node. Immutable and hash-consed: building an identical node returns the same object."""
from __future__ import annotations
import hashlib
import math
import weakref
from typing import Any
from tgc.ir.dtype import DType, dtypes
from tgc.ir.ops import Ops, GroupOp
from tgc.ir import provenance

_cache: weakref.WeakValueDictionary = weakref.WeakValueDictionary()


class UOp:
  """One operation: `op` with result type `dtype`, inputs `src` and a static `arg`."""
  __slots__ = ("op", "dtype", "src", "arg", "__weakref__", "_key", "_shape", "_bounds")
  op: Ops
  dtype: DType
  src: tuple[UOp, ...]
  arg: Any
  created = 0      # nodes built so far (a counter for tests: "replay builds no graph")

  def __new__(cls, op: Ops, dtype: DType = dtypes.float32, src: tuple = (), arg: Any = None):
    src = tuple(src)   # a list of sources must find the same cached node as the tuple
    ck = (op, dtype, tuple(id(s) for s in src), _hashable(arg))
    if (hit := _cache.get(ck)) is not None and hit.src == src: return hit
    self = object.__new__(cls)
    UOp.created += 1
    object.__setattr__(self, "op", op)
    object.__setattr__(self, "dtype", dtype)
    object.__setattr__(self, "src", src)
    object.__setattr__(self, "arg", arg)
    for a in ("_key", "_shape", "_bounds"): object.__setattr__(self, a, None)
    _cache[ck] = self
    provenance.record(self)
    return self

  def __setattr__(self, *_): raise AttributeError("UOp is immutable")
  def __delattr__(self, *_): raise AttributeError("UOp is immutable")
  def __reduce__(self): return (UOp, (self.op, self.dtype, self.src, self.arg))
  def __repr__(self): return pretty(self)
  def __hash__(self): return id(self)
  def __eq__(self, other): return self is other
  def __bool__(self): raise TypeError("UOp has no truth value; compare with .eq()/.lt()")

  def replace(self, **kw) -> UOp:
    """This node with some fields changed; the result keeps this node's provenance."""
    out = UOp(kw.get("op", self.op), kw.get("dtype", self.dtype), kw.get("src", self.src), kw.get("arg", self.arg))
    provenance.inherit(out, self)
    return out

  @property
  def key(self) -> str:
    """A stable content hash (same graph -> same key across processes); usable for disk caches."""
    for n in _uncached(self, "_key"):   # iterative, sources first: deep graphs must not recurse
      # an OPEN_INDEX stands for its row-major index until the scheduler lays it out: orders by key treat it so
      if n.op is Ops.OPEN_INDEX: object.__setattr__(n, "_key", n.src[0]._key); continue
      h = hashlib.sha256(f"{n.op.name}|{n.dtype.name}|{_stable_repr(n.arg)}".encode())
      for s in n.src: h.update(s._key.encode())
      object.__setattr__(n, "_key", h.hexdigest())
    return self._key

  def toposort(self) -> list[UOp]:
    """All nodes reachable from self, sources before users."""
    seen: set[int] = set()
    out: list[UOp] = []
    stack: list[tuple[UOp, bool]] = [(self, False)]
    while stack:
      n, done = stack.pop()
      if done: out.append(n); continue
      if id(n) in seen: continue
      seen.add(id(n))
      stack.append((n, True))
      stack.extend((s, False) for s in reversed(n.src) if id(s) not in seen)
    return out

  # ---- constructors ----
  @staticmethod
  def const(dtype: DType, value) -> UOp: return UOp(Ops.CONST, dtype, (), _cast_value(value, dtype))
  def const_like(self, value) -> UOp: return UOp.const(self.dtype, value)
  def alu(self, op: Ops, *src: UOp) -> UOp:
    out_dtype = dtypes.bool if op in GroupOp.Comparison else self.dtype
    return UOp(op, out_dtype, (self,) + src)
  def cast(self, dtype: DType) -> UOp: return self if self.dtype == dtype else UOp(Ops.CAST, dtype, (self,))
  def where(self, a, b) -> UOp:
    a, b = _ufix(b if isinstance(a, (int, float)) else a, a), _ufix(a if isinstance(b, (int, float)) else b, b)
    return UOp(Ops.WHERE, a.dtype, (self, a, b))

  # ---- arithmetic sugar (kernel index math and rule tables) ----
  def _bin(self, op, other, rev=False):
    o = _ufix(self, other)
    return o.alu(op, self) if rev else self.alu(op, o)
  def __add__(self, o): return self._bin(Ops.ADD, o)
  def __radd__(self, o): return self._bin(Ops.ADD, o, True)
  def __sub__(self, o): return self._bin(Ops.ADD, -_ufix(self, o))
  def __rsub__(self, o): return _ufix(self, o) + (-self)
  def __mul__(self, o): return self._bin(Ops.MUL, o)
  def __rmul__(self, o): return self._bin(Ops.MUL, o, True)
  def __floordiv__(self, o): return self._bin(Ops.IDIV, o)
  def __mod__(self, o): return self._bin(Ops.MOD, o)
  def __neg__(self): return self * -1 if self.dtype.is_int else self.alu(Ops.NEG)
  def lt(self, o) -> UOp: return self._bin(Ops.CMPLT, o)
  def ne(self, o) -> UOp: return self._bin(Ops.CMPNE, o)
  def eq(self, o) -> UOp: return self._bin(Ops.CMPEQ, o)
  def maximum(self, o) -> UOp: return self._bin(Ops.MAX, o)
  def logical_and(self, o) -> UOp: return self._bin(Ops.AND, o)

  # ---- properties used by rule tables ----
  @property
  def is_const(self) -> bool: return self.op is Ops.CONST
  @property
  def vmin(self): return self.bounds[0]
  @property
  def vmax(self): return self.bounds[1]
  @property
  def bounds(self) -> tuple:
    for n in _uncached(self, "_bounds"): object.__setattr__(n, "_bounds", _bounds(n))
    return self._bounds
  @property
  def shape(self) -> tuple:
    """Shape of a lazy-graph node (the rule ir.shape registers: shapes need the symbolic rules, which need UOp)."""
    if self._shape is None: object.__setattr__(self, "_shape", _shape_rule[0](self))
    return self._shape


_shape_rule: list = [None]     # ir.shape.shape_of, set when tgc.ir loads


def set_shape_rule(rule) -> None:
  """Give UOp.shape its rule (called once by ir.shape)."""
  _shape_rule[0] = rule


def _uncached(root: UOp, slot: str) -> list[UOp]:
  """The nodes under `root` (itself included) whose cached `slot` is unset, sources before users."""
  out: list[UOp] = []
  seen: set[int] = set()
  stack: list[tuple[UOp, bool]] = [(root, False)]
  while stack:
    n, done = stack.pop()
    if done: out.append(n); continue
    if id(n) in seen or getattr(n, slot) is not None: continue
    seen.add(id(n))
    stack.append((n, True))
    stack.extend((s, False) for s in n.src)
  return out


def _ufix(like: UOp, x) -> UOp: return x if isinstance(x, UOp) else UOp.const(like.dtype, x)


def _cast_value(v, dtype: DType):
  if dtype.is_bool: return bool(v)
  if dtype.is_int: return int(v)
  return float(v)


def _hashable(arg):
  if isinstance(arg, float) and math.isnan(arg): return ("nan",)
  if isinstance(arg, float): return ("f", arg.hex())  # keeps 0.0 and -0.0 apart
  if isinstance(arg, (list, tuple)): return tuple(_hashable(a) for a in arg)
  if isinstance(arg, dict): return tuple(sorted((k, _hashable(v)) for k, v in arg.items()))
  try:
    hash(arg)
    return (type(arg).__name__, arg)
  except TypeError: return ("id", id(arg))


def _stable_repr(arg) -> str:
  if isinstance(arg, float): return arg.hex()
  if isinstance(arg, (set, frozenset)): return "{" + ",".join(sorted(_stable_repr(a) for a in arg)) + "}"
  if isinstance(arg, dict):
    return "{" + ",".join(sorted(f"{_stable_repr(k)}:{_stable_repr(v)}" for k, v in arg.items())) + "}"
  if isinstance(arg, Ops): return arg.name
  if isinstance(arg, DType): return arg.name
  if isinstance(arg, (list, tuple)): return "(" + ",".join(_stable_repr(a) for a in arg) + ")"
  return repr(arg)


def _dtype_bounds(d: DType):
  """The smallest and largest value of a dtype (floats: -inf and inf)."""
  if d.is_bool: return (False, True)
  if d.is_int and not d.storage_only:
    bits = d.itemsize * 8
    return (0, 2**bits - 1) if d.is_unsigned else (-2**(bits - 1), 2**(bits - 1) - 1)
  return (-math.inf, math.inf)


def _bounds(u: UOp) -> tuple:
  """Interval analysis: the smallest and largest value `u` can take."""
  if u.op is Ops.CONST: return (u.arg, u.arg)
  if u.op is Ops.DEFINE_VAR: return (u.arg[1], u.arg[2])
  if u.op is Ops.RANGE: return (0, u.src[0].vmax - 1)
  if not u.dtype.is_int and not u.dtype.is_bool: return _dtype_bounds(u.dtype)
  s = [x.bounds for x in u.src]
  if u.op is Ops.ADD: return (s[0][0] + s[1][0], s[0][1] + s[1][1])
  if u.op is Ops.MUL:
    p = [a * b for a in s[0] for b in s[1]]
    if any(math.isnan(x) for x in p if isinstance(x, float)): return _dtype_bounds(u.dtype)
    return (min(p), max(p))
  if u.op is Ops.MAX: return (max(s[0][0], s[1][0]), max(s[0][1], s[1][1]))
  if u.op is Ops.IDIV and u.src[1].op is Ops.CONST and u.src[1].arg > 0:
    c = u.src[1].arg
    return (_tdiv(s[0][0], c), _tdiv(s[0][1], c))
  if u.op is Ops.MOD and u.src[1].op is Ops.CONST and u.src[1].arg > 0:
    c = u.src[1].arg
    if s[0][0] >= 0: return (0, min(s[0][1], c - 1)) if s[0][1] < c or s[0][1] == math.inf else (0, c - 1)
    return (-(c - 1), c - 1)
  if u.op is Ops.WHERE: return (min(s[1][0], s[2][0]), max(s[1][1], s[2][1]))
  if u.op is Ops.CMPLT:
    if s[0][1] < s[1][0]: return (True, True)
    if s[0][0] >= s[1][1]: return (False, False)
    return (False, True)
  if u.op in (Ops.CMPNE, Ops.CMPEQ):
    disjoint = s[0][1] < s[1][0] or s[1][1] < s[0][0]
    if disjoint: return (u.op is Ops.CMPNE,) * 2
    if s[0][0] == s[0][1] == s[1][0] == s[1][1]: return (u.op is Ops.CMPEQ,) * 2
    return (False, True)
  if u.op is Ops.AND and u.dtype.is_bool: return (bool(s[0][0] and s[1][0]), bool(s[0][1] and s[1][1]))
  if u.op is Ops.OR and u.dtype.is_bool: return (bool(s[0][0] or s[1][0]), bool(s[0][1] or s[1][1]))
  if u.op is Ops.CAST and u.src[0].dtype.is_int:
    lo, hi = _dtype_bounds(u.dtype)
    if lo <= s[0][0] and s[0][1] <= hi: return s[0]
  return _dtype_bounds(u.dtype)


def _tdiv(a, c):
  if a in (math.inf, -math.inf): return a
  return int(a / c) if abs(a) < 2**52 else (abs(a) // c) * (1 if a >= 0 else -1)


def pretty(u: UOp, depth: int = 0, limit: int = 6) -> str:
  """A readable one-node-per-line dump (used by DEBUG=3)."""
  if u.op is Ops.CONST: return f"{u.arg!r}"
  if u.op is Ops.RANGE: return f"r{u.arg.id}"
  if u.op is Ops.DEFINE_VAR: return u.arg[0]
  if depth >= limit: return f"{u.op.name}(...)"
  args = [pretty(s, depth + 1, limit) for s in u.src]
  a = "" if u.arg is None or u.op is Ops.SINK else f", arg={u.arg!r}"
  return f"{u.op.name}({', '.join(args)}{a})"
