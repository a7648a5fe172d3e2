"""The lazy `Tensor`: user-facing API (signatures follow tinygrad). Every method builds UOps from a small set of
primitives (elementwise, REDUCE_AXIS, movement, CAST/BITCAST, CONST, BUFFER); nothing runs until `realize()`."""
from __future__ import annotations
import math
import numpy as np
from tgc.ir import DType, dtypes, promote, least_upper_float, Ops, UOp
from tgc.ir.config import config
from tgc.ir import lowp
from tgc.ir.sint import sint, is_static, provably_le, quotient, same, simplified
from tgc.codegen.knobs import MATMUL_PACK_MIN, MATMUL_PANEL
from tgc.codegen.registry import target_names
from tgc.frontend import buffers, functional, realize as _realize, shapes
from tgc.frontend.shapes import broadcast_shape



def canonical_device(device: str | None) -> str:
  d = (device or config.device).lower()
  known = ("numpy",) + target_names()
  if d not in known: raise ValueError(f"unknown device {device!r}; known: {', '.join(known)}")
  return d


class Tensor:
  """A lazily evaluated n-dimensional array on a device."""
  __slots__ = ("uop", "device", "__weakref__")
  training = False

  def __init__(self, data, device: str | None = None, dtype: DType | None = None):
    self.device = canonical_device(device)
    if isinstance(data, UOp):
      self.uop = data
      return
    if isinstance(data, Tensor):
      self.uop, self.device = data.uop, data.device
      return
    if isinstance(data, (bool, int, float)) and not isinstance(data, np.generic):
      dt = dtype or dtypes.from_py(data)
      arr = np.array(data, dtype=dt.numpy)
    else:
      arr = np.asarray(data)
      if dtype is not None and not dtype.storage_only: arr = arr.astype(dtype.numpy)
      elif not isinstance(data, np.ndarray) and not isinstance(data, np.generic):
        if arr.dtype == np.float64: arr = arr.astype(np.float32)
        elif arr.dtype == np.int64: arr = arr.astype(np.int32)
    dt = dtype or dtypes.from_numpy(arr.dtype)
    if dt.storage_only:
      self.uop = _realize.from_storage(lowp.pack(lowp.encode_array(arr, dt), dt), arr.shape, self.device, dt)
      return
    self.uop = _realize.from_numpy(buffers.host_array(arr), self.device, dt)

  # ---------------------------------------------------------------- basics
  @property
  def shape(self) -> tuple[int, ...]: return self.uop.shape
  @property
  def dtype(self) -> DType: return self.uop.dtype
  @property
  def ndim(self) -> int: return len(self.shape)
  def numel(self) -> int: return shapes.prod(self.shape)
  def __len__(self): return self.shape[0]
  def __repr__(self): return f"<Tensor {self.shape} {self.dtype.name} on {self.device}>"
  def _new(self, u: UOp) -> Tensor: return Tensor(u, self.device)

  def realize(self) -> Tensor:
    Tensor.realize_all(self)
    return self

  @staticmethod
  def realize_all(*ts: Tensor) -> None:
    todo = [t for t in ts if t.uop.op is not Ops.BUFFER]
    if not todo: return
    devices = {t.device for t in todo}
    for dev in sorted(devices):
      group = [t for t in todo if t.device == dev]
      outs = _realize.realize([t.uop for t in group], dev)
      for t, u in zip(group, outs): t.uop = u

  def numpy(self) -> np.ndarray:
    self.realize()
    return _realize.to_numpy(self.uop)

  def tolist(self): return self.numpy().tolist()
  def item(self):
    if self.numel() != 1: raise ValueError(f"item() needs a tensor of one element, got shape {self.shape}")
    return self.numpy().reshape(()).item()

  def to(self, device: str) -> Tensor:
    device = canonical_device(device)
    if device == self.device: return self
    return Tensor(self.numpy(), device=device)

  def clone(self) -> Tensor: return Tensor(self.numpy(), device=self.device)
  def contiguous(self) -> Tensor:
    """Lazily materialize this value in a buffer of its own (a kernel boundary)."""
    if self.uop.op in (Ops.BUFFER, Ops.CONTIGUOUS): return self
    return self._new(UOp(Ops.CONTIGUOUS, self.dtype, (self.uop,)))
  def assign(self, other: Tensor) -> Tensor:
    other = other if isinstance(other, Tensor) else Tensor(other, self.device, self.dtype)
    if other.shape != self.shape: raise ValueError(f"assign: shape {other.shape} != {self.shape}")
    self.uop = other.cast(self.dtype).uop
    return self

  # ---------------------------------------------------------------- creation
  @staticmethod
  def full(shape, fill_value, dtype: DType | None = None, device: str | None = None) -> Tensor:
    shape = _shape_arg(shape)
    dt = dtype or dtypes.from_py(fill_value)
    c = Tensor(UOp.const(dt, fill_value), device)
    return c.reshape((1,) * len(shape)).expand(shape) if shape else c

  @staticmethod
  def empty(*shape, dtype: DType | None = None, device: str | None = None) -> Tensor:
    """A tensor of this shape without data: an input to trace, whose dims may be `Variable`s (sizes known only at
    run time)."""
    dev = canonical_device(device)
    return Tensor(buffers.new_buffer(dev, _shape_arg(shape), dtype or dtypes.float32), dev)

  @staticmethod
  def size_value(n: sint, dtype: DType = dtypes.float32, device: str | None = None) -> Tensor:
    """A size as a scalar value (a size known at run time read by the kernels: the count of a mean)."""
    if is_static(n): return Tensor(UOp.const(dtype, n), device)
    return Tensor(UOp(Ops.CAST, dtype, (simplified(n),)), device)

  @staticmethod
  def zeros(*shape, dtype=None, device=None) -> Tensor: return Tensor.full(shape, 0.0, dtype or dtypes.float32, device)
  @staticmethod
  def ones(*shape, dtype=None, device=None) -> Tensor: return Tensor.full(shape, 1.0, dtype or dtypes.float32, device)
  def zeros_like(self, dtype=None) -> Tensor: return Tensor.full(self.shape, 0, dtype or self.dtype, self.device)
  def ones_like(self, dtype=None) -> Tensor: return Tensor.full(self.shape, 1, dtype or self.dtype, self.device)
  def full_like(self, v, dtype=None) -> Tensor: return Tensor.full(self.shape, v, dtype or self.dtype, self.device)

  @staticmethod
  def arange(start, stop=None, step=1, dtype: DType | None = None, device=None) -> Tensor:
    if stop is None: start, stop = 0, start
    dt = dtype or (dtypes.float32 if any(isinstance(v, float) for v in (start, stop, step)) else dtypes.int32)
    if not is_static(stop):     # a count known only at run time: the index itself
      if start != 0 or step != 1 or not dt.is_int or dt.storage_only:
        raise ValueError("arange: a size known only at run time as the end needs start 0, step 1 and an integer dtype")
      return Tensor(UOp(Ops.ARANGE, dt, (), simplified(stop)), device)
    n = max(0, math.ceil((stop - start) / step))
    if not n: return Tensor.zeros(0, dtype=dt, device=device)
    if dt.is_int and not dt.storage_only and all(isinstance(v, int) for v in (start, step)):
      # integers: the index itself (no data), so a kernel comparing against it knows what it compares
      out = Tensor(UOp(Ops.ARANGE, dt, (), n), device)
      if step != 1: out = out * step
      return out + start if start else out
    return Tensor(np.arange(n, dtype=np.float64) * step + start, device, dt)

  @staticmethod
  def eye(n: int, m: int | None = None, dtype=None, device=None) -> Tensor:
    m = n if m is None else m
    r = Tensor.arange(n, device=device).reshape(n, 1)
    c = Tensor.arange(m, device=device).reshape(1, m)
    return (r == c).cast(dtype or dtypes.float32)

  _seed = 0
  @staticmethod
  def manual_seed(seed: int = 0): Tensor._seed = seed
  @staticmethod
  def _rng() -> np.random.Generator:
    Tensor._seed += 1
    return np.random.default_rng(Tensor._seed)
  @staticmethod
  def rand(*shape, dtype=None, device=None) -> Tensor:
    return Tensor(Tensor._rng().random(_shape_arg(shape), dtype=np.float32), device, dtype or dtypes.float32)
  @staticmethod
  def randn(*shape, dtype=None, device=None) -> Tensor:
    return Tensor(Tensor._rng().standard_normal(_shape_arg(shape), dtype=np.float32), device, dtype or dtypes.float32)
  @staticmethod
  def uniform(*shape, low=0.0, high=1.0, dtype=None, device=None) -> Tensor:
    return Tensor.rand(*shape, dtype=dtype, device=device) * (high - low) + low
  @staticmethod
  def kaiming_uniform(*shape, a: float = 0.01, device=None) -> Tensor:
    shape = _shape_arg(shape)
    bound = math.sqrt(3.0) * math.sqrt(2.0 / (1 + a ** 2)) / math.sqrt(shapes.prod(shape[1:]) or 1)
    return Tensor.uniform(*shape, low=-bound, high=bound, device=device)

  # ---------------------------------------------------------------- elementwise primitives
  def _const(self, v, dtype: DType | None = None) -> Tensor:
    return Tensor.full(self.shape, v, dtype or self.dtype, self.device)

  def _alu(self, op: Ops, *others: Tensor) -> Tensor:
    if self.dtype.storage_only or any(o.dtype.storage_only for o in others):
      return self._compute()._alu(op, *(o._compute() for o in others))
    out_dtype = dtypes.bool if op in (Ops.CMPLT, Ops.CMPNE, Ops.CMPEQ) else self.dtype
    return self._new(UOp(op, out_dtype, (self.uop,) + tuple(o.uop for o in others)))

  def _broadcasted(self, y, reverse: bool = False, op_name: str = "op") -> tuple[Tensor, Tensor]:
    x = self
    if not isinstance(y, Tensor):
      if isinstance(y, (bool, int, float, np.generic)):
        ydt = x.dtype
        if isinstance(y, float) and not x.dtype.is_float: ydt = dtypes.float32
        if isinstance(y, int) and not isinstance(y, bool) and x.dtype.is_bool: ydt = dtypes.int32
        y = Tensor(UOp.const(ydt, y), x.device)
      else: y = Tensor(y, x.device)
    if x.device != y.device: raise ValueError(f"{op_name}: tensors on different devices {x.device} and {y.device}")
    if reverse: x, y = y, x
    out = promote(x.dtype, y.dtype)
    x, y = x.cast(out), y.cast(out)
    shape = broadcast_shape(x.shape, y.shape, op_name)
    return x._broadcast_to(shape), y._broadcast_to(shape)

  def _broadcast_to(self, shape) -> Tensor:
    if self.shape == tuple(shape): return self
    padded = (1,) * (len(shape) - self.ndim) + self.shape
    return self.reshape(padded).expand(shape)

  def add(self, y, reverse=False) -> Tensor: return Tensor._binop(self, y, Ops.ADD, reverse, "add")
  def sub(self, y, reverse=False) -> Tensor: return Tensor._binop(self, y, Ops.SUB, reverse, "sub")
  def mul(self, y, reverse=False) -> Tensor: return Tensor._binop(self, y, Ops.MUL, reverse, "mul")
  def maximum(self, y) -> Tensor: return Tensor._binop(self, y, Ops.MAX, False, "maximum")
  def minimum(self, y) -> Tensor:
    """Elementwise minimum; NaN wins, as in numpy (through MAX, which propagates NaN)."""
    x, y = self._broadcasted(y, op_name="minimum")
    if x.dtype.is_float: return -((-x).maximum(-y))
    return (x < y).where(x, y)
  def bitwise_and(self, y) -> Tensor: return Tensor._binop(self, y, Ops.AND, False, "bitwise_and")
  def bitwise_or(self, y) -> Tensor: return Tensor._binop(self, y, Ops.OR, False, "bitwise_or")
  def bitwise_xor(self, y) -> Tensor: return Tensor._binop(self, y, Ops.XOR, False, "bitwise_xor")
  def lshift(self, y) -> Tensor: return Tensor._binop(self, y, Ops.SHL, False, "lshift")
  def rshift(self, y) -> Tensor: return Tensor._binop(self, y, Ops.SHR, False, "rshift")

  def _binop(self, y, op: Ops, reverse: bool, name: str) -> Tensor:
    x, y = self._broadcasted(y, reverse, name)
    return x._alu(op, y)

  def div(self, y, reverse=False) -> Tensor:
    """True division; integers divide in float32."""
    x, y = self._broadcasted(y, reverse, "div")
    if not x.dtype.is_float: x, y = x.cast(dtypes.float32), y.cast(dtypes.float32)
    return x._alu(Ops.FDIV, y)

  def idiv(self, y, reverse=False) -> Tensor:
    """Integer division truncating toward zero (C semantics)."""
    x, y = self._broadcasted(y, reverse, "idiv")
    return x._alu(Ops.IDIV, y)

  def floordiv(self, y, reverse=False) -> Tensor:
    """Floor division as numpy's `//`."""
    x, y = self._broadcasted(y, reverse, "floordiv")
    if x.dtype.is_float: return (x / y).floor()
    q = x._alu(Ops.IDIV, y)
    fix = ((q * y).ne(x)).logical_and((x < 0).ne(y < 0))
    return fix.where(q - 1, q)

  def mod(self, y, reverse=False) -> Tensor:
    """Remainder with the sign of the divisor, as numpy's `%`."""
    x, y = self._broadcasted(y, reverse, "mod")
    if x.dtype.is_float: return x - (x / y).floor() * y
    r = x._alu(Ops.MOD, y)
    return ((r.ne(0)).logical_and((r < 0).ne(y < 0))).where(r + y, r)

  def fmod(self, y) -> Tensor:
    """C fmod/remainder: the sign of the dividend."""
    x, y = self._broadcasted(y, False, "fmod")
    if x.dtype.is_float: return x - (x / y).trunc() * y
    return x._alu(Ops.MOD, y)

  def pow(self, y, reverse=False) -> Tensor:
    x, y = self._broadcasted(y, reverse, "pow")
    if not x.dtype.is_float:
      return x.cast(dtypes.float32)._alu(Ops.POW, y.cast(dtypes.float32)).round().cast(x.dtype)
    return x._alu(Ops.POW, y)

  def where(self, x, y) -> Tensor:
    """self ? x : y (self is cast to bool)."""
    cond = self if self.dtype.is_bool else self._compute().ne(0)
    if not isinstance(x, Tensor) and not isinstance(y, Tensor):
      dt = dtypes.float32 if isinstance(x, float) or isinstance(y, float) else dtypes.from_py(x)
      x = Tensor(UOp.const(dt, x), self.device)
    if isinstance(x, Tensor): x, y = x._broadcasted(y, op_name="where")
    else: y, x = y._broadcasted(x, op_name="where")
    shape = broadcast_shape(broadcast_shape(cond.shape, x.shape, "where"), y.shape, "where")
    cond, x, y = cond._broadcast_to(shape), x._broadcast_to(shape), y._broadcast_to(shape)
    return cond._new(UOp(Ops.WHERE, x.dtype, (cond.uop, x.uop, y.uop)))

  def cast(self, dtype: DType, saturate: bool = True) -> Tensor:
    """Convert to `dtype`. Storage-only types (bfloat16, float8, int4, ...) round as ONNX's Cast does;
    `saturate` only matters for float8 targets."""
    if dtype == self.dtype: return self
    x = self
    if dtype.storage_only and not x.dtype.storage_only:
      x = x.cast(dtypes.float32 if (dtype.is_float or x.dtype.is_float) else dtypes.int32)
    return x._new(UOp(Ops.CAST, dtype, (x.uop,), None if saturate else False))

  def _compute(self) -> Tensor:
    """Storage-only tensors are computed on in float32/int32."""
    return self.cast(self.dtype.compute) if self.dtype.storage_only else self
  def float(self) -> Tensor: return self.cast(dtypes.float32)
  def half(self) -> Tensor: return self.cast(dtypes.float16)
  def int(self) -> Tensor: return self.cast(dtypes.int32)
  def bool(self) -> Tensor: return self.cast(dtypes.bool)

  def bitcast(self, dtype: DType) -> Tensor:
    if dtype.itemsize != self.dtype.itemsize:
      if self.ndim == 0 or (self.shape[-1] * self.dtype.itemsize) % dtype.itemsize:
        raise ValueError(f"bitcast {self.dtype.name}->{dtype.name}: last dim {self.shape} does not divide")
      raise NotImplementedError(f"bitcast between sizes ({self.dtype.name}->{dtype.name}) is not supported")
    return self._new(UOp(Ops.BITCAST, dtype, (self.uop,)))

  # comparisons and logic
  def __lt__(self, y) -> Tensor: return Tensor._binop(self, y, Ops.CMPLT, False, "lt")
  def __gt__(self, y) -> Tensor: return Tensor._binop(self, y, Ops.CMPLT, True, "gt")
  def __le__(self, y) -> Tensor: return (self < y).logical_or(self == y)   # false for NaN, as in numpy
  def __ge__(self, y) -> Tensor: return (self > y).logical_or(self == y)
  def __eq__(self, y) -> Tensor: return Tensor._binop(self, y, Ops.CMPEQ, False, "eq")  # type: ignore[override]
  def __ne__(self, y) -> Tensor: return Tensor._binop(self, y, Ops.CMPNE, False, "ne")  # type: ignore[override]
  def eq(self, y) -> Tensor: return self == y
  def ne(self, y) -> Tensor: return self != y
  __hash__ = object.__hash__
  def logical_not(self) -> Tensor: return self.cast(dtypes.bool).ne(True)
  def logical_and(self, y) -> Tensor: return self.cast(dtypes.bool).bitwise_and(_as_bool(y, self))
  def logical_or(self, y) -> Tensor: return self.cast(dtypes.bool).bitwise_or(_as_bool(y, self))
  def logical_xor(self, y) -> Tensor: return self.cast(dtypes.bool).bitwise_xor(_as_bool(y, self))
  def bitwise_not(self) -> Tensor:
    if self.dtype.is_bool: return self.logical_not()
    return self.bitwise_xor(-1 if not self.dtype.is_unsigned else (1 << (8 * self.dtype.itemsize)) - 1)

  # operators
  def __add__(self, y): return self.add(y)
  def __radd__(self, y): return self.add(y, True)
  def __sub__(self, y): return self.sub(y)
  def __rsub__(self, y): return self.sub(y, True)
  def __mul__(self, y): return self.mul(y)
  def __rmul__(self, y): return self.mul(y, True)
  def __truediv__(self, y): return self.div(y)
  def __rtruediv__(self, y): return self.div(y, True)
  def __floordiv__(self, y): return self.floordiv(y)
  def __rfloordiv__(self, y): return self.floordiv(y, True)
  def __mod__(self, y): return self.mod(y)
  def __rmod__(self, y): return self.mod(y, True)
  def __pow__(self, y): return self.pow(y)
  def __rpow__(self, y): return self.pow(y, True)
  def __matmul__(self, y): return self.matmul(y)
  def __rmatmul__(self, y): return Tensor(y, self.device).matmul(self) if not isinstance(y, Tensor) else y.matmul(self)
  def __neg__(self): return self.neg()
  def __and__(self, y): return self.bitwise_and(y)
  def __or__(self, y): return self.bitwise_or(y)
  def __xor__(self, y): return self.bitwise_xor(y)
  def __invert__(self): return self.bitwise_not()
  def __lshift__(self, y): return self.lshift(y)
  def __rshift__(self, y): return self.rshift(y)

  # ---------------------------------------------------------------- unary math
  def _float(self) -> Tensor: return self.cast(least_upper_float(self.dtype))
  def neg(self) -> Tensor:
    if self.dtype.is_bool: return self.logical_not()
    return self._alu(Ops.NEG)
  def exp2(self) -> Tensor: return self._float()._alu(Ops.EXP2)
  def log2(self) -> Tensor: return self._float()._alu(Ops.LOG2)
  def exp(self) -> Tensor: return (self._float() * (1 / math.log(2)))._alu(Ops.EXP2)
  def log(self) -> Tensor: return self._float()._alu(Ops.LOG2) * math.log(2)
  def sqrt(self) -> Tensor: return self._float()._alu(Ops.SQRT)
  def rsqrt(self) -> Tensor: return self.sqrt().reciprocal()
  def reciprocal(self) -> Tensor: return self._float()._alu(Ops.RECIP)
  def sin(self) -> Tensor: return self._float()._alu(Ops.SIN)
  def cos(self) -> Tensor:
    """1 - 2 sin(x/2)^2: x/2 is exact, so large arguments keep sin's accuracy (pi/2 - x would round first)."""
    s = (self._float() * 0.5).sin()
    return 1.0 - 2.0 * s * s
  def tan(self) -> Tensor: return self.sin() / self.cos()
  def trunc(self) -> Tensor: return self if not self.dtype.is_float else self._alu(Ops.TRUNC)
  def floor(self) -> Tensor:
    if not self.dtype.is_float: return self
    t = self.trunc()
    return (self < t).where(t - 1, t)
  def ceil(self) -> Tensor:
    if not self.dtype.is_float: return self
    t = self.trunc()
    return (self > t).where(t + 1, t)
  def round(self) -> Tensor:
    """Round half to even, as numpy."""
    return self._alu(Ops.RINT) if self.dtype.is_float else self
  def abs(self) -> Tensor:
    if self.dtype.is_unsigned or self.dtype.is_bool: return self
    return (self < 0).where(-self, self)
  def sign(self) -> Tensor:
    one, zero = self._const(1), self._const(0)
    s = (self < 0).where(-one if not self.dtype.is_unsigned else zero, (self > 0).where(one, zero))
    return self.isnan().where(self, s) if self.dtype.is_float else s
  def isnan(self) -> Tensor: return self.ne(self)
  def isinf(self) -> Tensor: return self.abs() == math.inf
  def relu(self) -> Tensor: return self.maximum(0)
  def sigmoid(self) -> Tensor: return (1 + (-self._float()).exp()).reciprocal()
  def tanh(self) -> Tensor: return 2.0 * (2.0 * self._float()).sigmoid() - 1.0
  def erf(self) -> Tensor:
    """Abramowitz-Stegun 7.1.26 (|error| < 1.5e-7)."""
    x = self._float()
    t = 1.0 / (1.0 + 0.3275911 * x.abs())
    poly = t * (0.254829592 + t * (-0.284496736 + t * (1.421413741 + t * (-1.453152027 + t * 1.061405429))))
    y = 1.0 - poly * (-(x * x)).exp()
    return (x < 0).where(-y, y)
  def gelu(self, approximate: str = "none") -> Tensor:
    x = self._float()
    if approximate == "tanh": return 0.5 * x * (1 + (math.sqrt(2 / math.pi) * (x + 0.044715 * x * x * x)).tanh())
    return 0.5 * x * (1.0 + (x * (1 / math.sqrt(2))).erf())
  def leaky_relu(self, neg_slope=0.01) -> Tensor: return (self < 0).where(self * neg_slope, self)
  def elu(self, alpha=1.0) -> Tensor: return (self < 0).where(alpha * (self.exp() - 1), self)
  def softplus(self) -> Tensor:
    """log(1 + e^x) without overflow: max(x, 0) + log(1 + e^-|x|)."""
    x = self._float()
    return x.relu() + (1 + (-x.abs()).exp()).log()
  def silu(self) -> Tensor: return self * self.sigmoid()
  def clip(self, min_=None, max_=None) -> Tensor:
    out = self
    if min_ is not None: out = out.maximum(min_)
    if max_ is not None: out = out.minimum(max_)
    return out
  clamp = clip
  def square(self) -> Tensor: return self * self

  # ---------------------------------------------------------------- reductions
  def _axes(self, axis) -> tuple[int, ...]:
    if axis is None: return tuple(range(self.ndim))
    axes = (axis,) if isinstance(axis, int) else tuple(axis)
    out = []
    for a in axes:
      if not -max(self.ndim, 1) <= a < max(self.ndim, 1): raise ValueError(f"axis {a} out of range for {self.shape}")
      out.append(a % self.ndim if self.ndim else 0)
    return tuple(sorted(set(out))) if self.ndim else ()

  def _reduce(self, op: Ops, axis=None, keepdim=False) -> Tensor:
    if self.dtype.storage_only: return self._compute()._reduce(op, axis, keepdim)
    axes = self._axes(axis)
    kept = tuple(1 if i in axes else s for i, s in enumerate(self.shape))
    if not axes: out = self
    elif any(self.shape[a] == 0 for a in axes):
      identity = {Ops.ADD: 0, Ops.MUL: 1, Ops.MAX: shapes.lowest(self.dtype)}[op]
      out = Tensor.full(kept, identity, self.dtype, self.device)
    else: out = self._new(UOp(Ops.REDUCE_AXIS, self.dtype, (self.uop,), (op, axes)))
    return out if keepdim else out.reshape(tuple(s for i, s in enumerate(self.shape) if i not in axes))

  def sum(self, axis=None, keepdim=False, dtype: DType | None = None) -> Tensor:
    acc = dtype or self.dtype
    if dtype is None and self.dtype.is_bool: acc = dtypes.int32
    elif dtype is None and self.dtype.is_int and self.dtype.itemsize < 4:
      acc = dtypes.uint32 if self.dtype.is_unsigned else dtypes.int32
    return self.cast(acc)._reduce(Ops.ADD, axis, keepdim)
  def prod(self, axis=None, keepdim=False) -> Tensor:
    x = self.cast(dtypes.int32) if self.dtype.is_bool else self
    return x._reduce(Ops.MUL, axis, keepdim)
  def max(self, axis=None, keepdim=False) -> Tensor:
    if self.dtype.is_bool: return self.cast(dtypes.uint8).max(axis, keepdim).cast(dtypes.bool)
    return self._reduce(Ops.MAX, axis, keepdim)
  def min(self, axis=None, keepdim=False) -> Tensor:
    if self.dtype.is_bool: return self.cast(dtypes.uint8).min(axis, keepdim).cast(dtypes.bool)
    if self.dtype.is_unsigned:
      top = (1 << (8 * self.dtype.itemsize)) - 1
      return top - (top - self).max(axis, keepdim)
    if self.dtype.is_int: return ~((~self).max(axis, keepdim))
    return -((-self).max(axis, keepdim))
  def mean(self, axis=None, keepdim=False) -> Tensor:
    x = self._float()
    n = shapes.prod(self.shape[a] for a in self._axes(axis))
    s = x.sum(axis, keepdim)
    if not is_static(n): return s / Tensor.size_value(n, s.dtype, self.device)
    return s * (1.0 / n) if n else s * math.nan
  def var(self, axis=None, keepdim=False, correction=1) -> Tensor:
    x = self._float()
    n = shapes.prod(self.shape[a] for a in self._axes(axis))
    d = x - x.mean(axis, keepdim=True)
    if not is_static(n): return (d * d).sum(axis, keepdim) / Tensor.size_value(n - correction, x.dtype, self.device)
    return (d * d).sum(axis, keepdim) / max(n - correction, 0)
  def std(self, axis=None, keepdim=False, correction=1) -> Tensor: return self.var(axis, keepdim, correction).sqrt()

  def argmax(self, axis=None, keepdim=False) -> Tensor:
    """Index of the first maximum (NaN counts as the maximum, as numpy)."""
    if axis is None: return self.flatten().argmax(0).reshape(()) if not keepdim else \
      self.flatten().argmax(0).reshape((1,) * self.ndim)
    ax = self._axes(axis)[0]
    n = self.shape[ax]
    x = self.cast(dtypes.float32) if self.dtype.is_bool else self
    if x.dtype.is_float: x = x.isnan().where(math.inf, x)
    is_max = x == x.max(ax, keepdim=True)
    idx = Tensor.arange(n, 0, -1, device=self.device).reshape((n,) + (1,) * (self.ndim - ax - 1))
    return (n - (is_max.cast(dtypes.int32) * idx).max(ax, keepdim)).cast(dtypes.int32)
  def argmin(self, axis=None, keepdim=False) -> Tensor:
    x = self.cast(dtypes.float32) if self.dtype.is_bool else self
    if x.dtype.is_float: return (-x).argmax(axis, keepdim)
    return (~x if not x.dtype.is_unsigned else -(x.cast(dtypes.int64))).argmax(axis, keepdim)

  def softmax(self, axis=-1) -> Tensor:
    x = self._float()
    e = (x - x.max(axis, keepdim=True)).exp()
    return e / e.sum(axis, keepdim=True)
  def log_softmax(self, axis=-1) -> Tensor:
    x = self._float()
    m = x - x.max(axis, keepdim=True)
    return m - m.exp().sum(axis, keepdim=True).log()
  def logsumexp(self, axis=None, keepdim=False) -> Tensor:
    m = self.max(axis, keepdim=True)
    m = m.isinf().where(0.0, m) if m.dtype.is_float else m   # an infinite max must not turn into inf - inf
    out = (self - m).exp().sum(axis, keepdim=True).log() + m
    return out if keepdim else out.reshape(tuple(s for i, s in enumerate(self.shape) if i not in self._axes(axis)))

  # ---------------------------------------------------------------- movement primitives
  def reshape(self, *shape) -> Tensor:
    shape = _shape_arg(shape)
    if shape.count(-1) > 1: raise ValueError(f"reshape: only one -1 allowed, got {shape}")
    if -1 in shape:
      known = shapes.prod(s for s in shape if s != -1)
      shape = tuple(_inferred_dim(self.shape, shape, known) if s == -1 else s for s in shape)
    if any(is_static(s) and s < 0 for s in shape) or not same(shapes.prod(shape), self.numel()):
      raise ValueError(f"reshape: cannot reshape {self.shape} to {shape}")
    if shape == self.shape: return self
    return self._new(UOp(Ops.RESHAPE, self.dtype, (self.uop,), shape))

  def permute(self, *order) -> Tensor:
    order = tuple(o % self.ndim for o in _shape_arg(order))
    if sorted(order) != list(range(self.ndim)): raise ValueError(f"permute: bad order {order} for {self.shape}")
    if order == tuple(range(self.ndim)): return self
    return self._new(UOp(Ops.PERMUTE, self.dtype, (self.uop,), order))

  def expand(self, *shape) -> Tensor:
    shape = tuple(s if s != -1 else o for s, o in zip(_shape_arg(shape), (None,) * (len(_shape_arg(shape)) -
                                                                                    self.ndim) + self.shape))
    x = self if len(shape) == self.ndim else self.reshape((1,) * (len(shape) - self.ndim) + self.shape)
    for a, b in zip(x.shape, shape):
      if a != b and a != 1: raise ValueError(f"expand: cannot expand {self.shape} to {shape}")
    if shape == x.shape: return x
    return x._new(UOp(Ops.EXPAND, x.dtype, (x.uop,), shape))

  def pad(self, padding, value: float = 0.0, mode: str = "constant") -> Tensor:
    """padding: ((before, after), ...) per axis, or a flat torch-style tuple for the last axes."""
    pads = _pad_arg(padding, self.ndim)
    if mode != "constant":
      return functional.pad_mode(self, pads, mode)
    if any(is_static(p) and p < 0 for pair in pads for p in pair):
      x = self.shrink(tuple((max(0, -b), s - max(0, -a)) for (b, a), s in zip(pads, self.shape)))
      return x.pad(tuple((max(0, b), max(0, a)) for b, a in pads), value)
    if all(b == 0 and a == 0 for b, a in pads): return self
    out = self._new(UOp(Ops.PAD, self.dtype, (self.uop,), pads))
    if value == 0: return out
    mask = self.ones_like(dtypes.bool)._new(UOp(Ops.PAD, dtypes.bool, (self.ones_like(dtypes.bool).uop,), pads))
    return mask.where(out, value)

  def shrink(self, arg) -> Tensor:
    arg = tuple((0, s) if a is None else (simplified(a[0]), simplified(a[1])) for a, s in zip(arg, self.shape))
    for (b, e), s in zip(arg, self.shape):
      if not (provably_le(0, b) and provably_le(b, e) and provably_le(e, s)):
        raise ValueError(f"shrink: {arg} out of bounds for {self.shape}")
    if all(b == 0 and same(e, s) for (b, e), s in zip(arg, self.shape)): return self
    return self._new(UOp(Ops.SHRINK, self.dtype, (self.uop,), arg))

  def flip(self, axis) -> Tensor:
    axes = self._axes(axis)
    axes = tuple(a for a in axes if self.shape[a] > 1)
    if not axes: return self
    return self._new(UOp(Ops.FLIP, self.dtype, (self.uop,), axes))

  # ---------------------------------------------------------------- movement compositions
  def transpose(self, dim0=1, dim1=0) -> Tensor:
    order = list(range(self.ndim))
    order[dim0], order[dim1] = order[dim1], order[dim0]
    return self.permute(order)
  @property
  def T(self) -> Tensor: return self.transpose(-1, -2) if self.ndim >= 2 else self
  def flatten(self, start_dim=0, end_dim=-1) -> Tensor:
    if self.ndim == 0: return self.reshape(1)
    s, e = start_dim % self.ndim, end_dim % self.ndim
    return self.reshape(self.shape[:s] + (shapes.prod(self.shape[s:e + 1]),) + self.shape[e + 1:])
  def squeeze(self, dim=None) -> Tensor:
    if dim is None: return self.reshape(tuple(s for s in self.shape if s != 1))
    dims = self._axes(dim)
    return self.reshape(tuple(s for i, s in enumerate(self.shape) if not (i in dims and s == 1)))
  def unsqueeze(self, dim) -> Tensor:
    dim = dim % (self.ndim + 1)
    return self.reshape(self.shape[:dim] + (1,) + self.shape[dim:])

  def __getitem__(self, idx) -> Tensor:
    return functional.getitem(self, idx)

  def cat(self, *others, dim=0) -> Tensor:
    return functional.cat([self, *others], dim)
  @staticmethod
  def stack(tensors, dim=0) -> Tensor:
    return functional.stack(list(tensors), dim)
  def split(self, sizes, dim=0) -> list[Tensor]:
    return functional.split(self, sizes, dim)
  def chunk(self, n, dim=0) -> list[Tensor]:
    size = math.ceil(self.shape[dim] / n) if self.shape[dim] else 1
    return self.split(size, dim)
  def repeat(self, *repeats) -> Tensor:
    repeats = _shape_arg(repeats)
    base = self.reshape((1,) * (len(repeats) - self.ndim) + self.shape)
    x = base.reshape(tuple(v for s in base.shape for v in (1, s)))
    x = x.expand(tuple(v for r, s in zip(repeats, base.shape) for v in (r, s)))
    return x.reshape(tuple(r * s for r, s in zip(repeats, base.shape)))

  # ---------------------------------------------------------------- linear algebra
  def dot(self, w: Tensor) -> Tensor: return self.matmul(w)
  def matmul(self, w: Tensor) -> Tensor:
    x = self
    if not isinstance(w, Tensor): w = Tensor(w, x.device)
    if x.ndim == 0 or w.ndim == 0: raise ValueError(f"matmul: 0-d operand ({x.shape} @ {w.shape})")
    if x.ndim == 1 and w.ndim == 1: return x.reshape(1, -1).matmul(w.reshape(-1, 1)).reshape(())
    if x.ndim == 1: return x.reshape(1, -1).matmul(w).reshape(w.shape[:-2] + w.shape[-1:])
    if w.ndim == 1: return x.matmul(w.reshape(-1, 1)).reshape(x.shape[:-1])
    if x.shape[-1] != w.shape[-2]:
      raise ValueError(f"matmul: shapes {x.shape} and {w.shape} do not match (inner dims {x.shape[-1]} "
                       f"and {w.shape[-2]})")
    out_dtype = promote(x.dtype, w.dtype)
    batch = broadcast_shape(x.shape[:-2], w.shape[:-2], "matmul")
    n, k, m = x.shape[-2], x.shape[-1], w.shape[-1]
    xb = x.cast(out_dtype)._broadcast_to(batch + (n, k)).reshape(batch + (n, 1, k))
    wbatch = w.shape[:-2]
    if out_dtype.is_float and is_static((k, m)) and k >= MATMUL_PACK_MIN and m >= MATMUL_PACK_MIN and \
        m % MATMUL_PANEL == 0:
      # repack w into panels of MATMUL_PANEL columns, contiguous along k: each step of the reduction then reads
      # one short contiguous row (vector loads; no cache-set conflicts from a stride of m). Packed over w's own
      # batch dims and broadcast after: a copy per broadcast batch entry would be a buffer bigger than w. Packed in
      # w's own type, converted after: 8-bit weights stay 8-bit (a relayout at compile time, not a float copy).
      panels = w.reshape(wbatch + (k, m // MATMUL_PANEL, MATMUL_PANEL)).permute(
        *range(len(wbatch)), len(wbatch) + 1, len(wbatch), len(wbatch) + 2).contiguous()
      wt = panels.permute(*range(len(wbatch)), len(wbatch), len(wbatch) + 2, len(wbatch) + 1).cast(out_dtype)
    else: wt = w.cast(out_dtype).transpose(-1, -2)
    wt = wt.reshape(wbatch + (m, k))._broadcast_to(batch + (m, k)).reshape(batch + (1, m, k))
    return (xb.expand(batch + (n, m, k)) * wt.expand(batch + (n, m, k))).sum(-1, dtype=out_dtype)

  def linear(self, weight: Tensor, bias: Tensor | None = None) -> Tensor:
    out = self.matmul(weight)
    return out + bias if bias is not None else out

  # ---------------------------------------------------------------- nn compositions (frontend/functional.py)
  def conv2d(self, weight, bias=None, stride=1, padding=0, dilation=1, groups=1) -> Tensor:
    return functional.conv2d(self, weight, bias, stride, padding, dilation, groups)
  def conv_transpose2d(self, weight, bias=None, stride=1, padding=0, output_padding=0, dilation=1, groups=1):
    return functional.conv_transpose2d(self, weight, bias, stride, padding, output_padding, dilation, groups)
  def max_pool2d(self, kernel_size=2, stride=None, padding=0, dilation=1, ceil_mode=False) -> Tensor:
    return functional.max_pool2d(self, kernel_size, stride, padding, dilation, ceil_mode)
  def avg_pool2d(self, kernel_size=2, stride=None, padding=0, ceil_mode=False, count_include_pad=True) -> Tensor:
    return functional.avg_pool2d(self, kernel_size, stride, padding, ceil_mode, count_include_pad)
  def gather(self, dim: int, index: Tensor) -> Tensor:
    return functional.gather(self, dim, index)
  def layernorm(self, axis=-1, eps=1e-5) -> Tensor:
    x = self._float()
    y = x - x.mean(axis, keepdim=True)
    return y * ((y * y).mean(axis, keepdim=True) + eps).rsqrt()
  def batchnorm(self, weight, bias, mean, invstd) -> Tensor:
    """(x - mean) * invstd * weight + bias per channel (dim 1), as x * k + (bias - mean * k): with running statistics
    k and the shift are constants, folded at trace time into one scale and one shift."""
    shape = (1, -1) + (1,) * (self.ndim - 2)
    k = invstd * weight if weight is not None else invstd
    shift = -(mean * k) if bias is None else bias - mean * k
    return self * k.reshape(shape) + shift.reshape(shape)
  def group_norm(self, num_groups: int, weight=None, bias=None, eps=1e-5) -> Tensor:
    n, c = self.shape[0], self.shape[1]
    x = self.reshape(n, num_groups, -1).layernorm(eps=eps).reshape(self.shape)
    shape = (1, c) + (1,) * (self.ndim - 2)
    if weight is not None: x = x * weight.reshape(shape)
    return x + bias.reshape(shape) if bias is not None else x


def _as_bool(y, like: Tensor) -> Tensor:
  if isinstance(y, Tensor): return y.cast(dtypes.bool)
  return Tensor(UOp.const(dtypes.bool, bool(y)), like.device)


def _shape_arg(shape) -> tuple[sint, ...]:
  if len(shape) == 1 and isinstance(shape[0], (tuple, list)): shape = shape[0]
  return tuple(simplified(s) for s in shape)


def _inferred_dim(have: tuple, shape: tuple, known: sint) -> sint:
  """The size of reshape's -1: the elements left over by the other dims."""
  numel = shapes.prod(have)
  if is_static((numel, known)):
    if known == 0 or numel % known: raise ValueError(f"reshape: cannot reshape {have} to {shape}")
    return numel // known
  left = quotient(numel, known)
  if left is None: raise ValueError(f"reshape: cannot infer -1 in {shape} from {have}")
  return left


def _pad_amount(p) -> sint:
  """A pad amount: an int, or a size expression that is never negative."""
  if not isinstance(p, UOp): return int(p)
  if not provably_le(0, p): raise ValueError(f"pad: amount {p} may be negative")
  return simplified(p)


def _pad_arg(padding, ndim: int) -> tuple[tuple[int, int], ...]:
  padding = tuple(padding)
  if padding and all(isinstance(p, (tuple, list)) or p is None for p in padding):
    if len(padding) != ndim: raise ValueError(f"pad: {len(padding)} pairs for {ndim} dims")
    return tuple((0, 0) if p is None else (_pad_amount(p[0]), _pad_amount(p[1])) for p in padding)
  if len(padding) % 2 or len(padding) // 2 > ndim: raise ValueError(f"pad: bad padding {padding} for {ndim} dims")
  pairs = [(0, 0)] * ndim
  for i in range(len(padding) // 2): pairs[ndim - 1 - i] = (int(padding[2 * i]), int(padding[2 * i + 1]))
  return tuple(pairs)

