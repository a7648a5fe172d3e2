"""ir.lowp against ONNX's reference: decode of every bit pattern, encode bit for bit (Cast with saturate on and
off, QuantizeLinear's clipping for the small integer types), round trips, and the shape of the built graphs."""
import numpy as np
import onnx
import pytest
from onnx import TensorProto, helper, numpy_helper
from onnx.reference import ReferenceEvaluator
from tgc.ir import GroupOp, Ops, UOp, dtypes
from tgc.ir.exec import exec_bitcast
from tgc.ir.lowp import FORMATS, INT_RANGES, clip_int, decode, encode, eval_elementwise

ONNX_TYPES = {
  dtypes.bfloat16: TensorProto.BFLOAT16, dtypes.float8e4m3fn: TensorProto.FLOAT8E4M3FN,
  dtypes.float8e4m3fnuz: TensorProto.FLOAT8E4M3FNUZ, dtypes.float8e5m2: TensorProto.FLOAT8E5M2,
  dtypes.float8e5m2fnuz: TensorProto.FLOAT8E5M2FNUZ, dtypes.float4e2m1: TensorProto.FLOAT4E2M1,
  dtypes.int4: TensorProto.INT4, dtypes.uint4: TensorProto.UINT4, dtypes.int2: TensorProto.INT2,
  dtypes.uint2: TensorProto.UINT2,
}
FLOATS = list(FORMATS)
SMALL_FLOATS = [d for d in FLOATS if d != dtypes.bfloat16]
FLOAT8 = [d for d in SMALL_FLOATS if d.elem_bits == 8]
INTS = list(INT_RANGES)
OPSET = onnx.defs.onnx_opset_version()

BITS_IN = UOp(Ops.DEFINE_GLOBAL, dtypes.uint32, (), (0, False))
F32_IN = UOp(Ops.DEFINE_GLOBAL, dtypes.float32, (), (1, False))
I32_IN = UOp(Ops.DEFINE_GLOBAL, dtypes.int32, (), (2, False))


# ---------------------------------------------------------------- ONNX references

def onnx_from_bits(bits: np.ndarray, dtype) -> np.ndarray:
  """The values ONNX reads from a tensor whose raw data holds these element bit patterns (packed as ONNX packs)."""
  bits = np.asarray(bits, np.uint32)
  if dtype.elem_bits == 16: raw = bits.astype("<u2").tobytes()
  elif dtype.elem_bits == 8: raw = bits.astype(np.uint8).tobytes()
  else:
    per_byte = 8 // dtype.elem_bits
    padded = np.concatenate([bits, np.zeros((-len(bits)) % per_byte, np.uint32)]).reshape(-1, per_byte)
    raw = np.bitwise_or.reduce(padded << (np.arange(per_byte, dtype=np.uint32) * dtype.elem_bits), axis=1)
    raw = raw.astype(np.uint8).tobytes()
  tensor = helper.make_tensor("t", ONNX_TYPES[dtype], [len(bits)], raw, raw=True)
  return numpy_helper.to_array(tensor)


def to_bits(arr: np.ndarray, dtype) -> np.ndarray:
  """Bit patterns (uint32) of an ml_dtypes array of `dtype`."""
  if dtype in INT_RANGES: return (arr.astype(np.int32) & ((1 << dtype.elem_bits) - 1)).astype(np.uint32)
  return arr.view(np.uint16 if dtype.elem_bits == 16 else np.uint8).astype(np.uint32)


def run_node(node: onnx.NodeProto, inputs: dict[str, np.ndarray], out_type: int) -> np.ndarray:
  ins = [helper.make_tensor_value_info(k, helper.np_dtype_to_tensor_dtype(v.dtype), v.shape) for k, v in inputs.items()]
  graph = helper.make_graph([node], "g", ins, [helper.make_tensor_value_info("y", out_type, None)])
  model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", OPSET)])
  return ReferenceEvaluator(model).run(None, inputs)[0]


def onnx_cast(x: np.ndarray, dtype, saturate: bool) -> np.ndarray:
  node = helper.make_node("Cast", ["x"], ["y"], to=ONNX_TYPES[dtype], saturate=int(saturate))
  with np.errstate(invalid="ignore"):  # NaN and inf to the types that have no such value
    return to_bits(run_node(node, {"x": x}, ONNX_TYPES[dtype]), dtype)


def onnx_quantize(x: np.ndarray, dtype) -> np.ndarray:
  zero = numpy_helper.from_array(np.zeros((), helper.tensor_dtype_to_np_dtype(ONNX_TYPES[dtype])), "zp")
  scale = numpy_helper.from_array(np.ones((), np.float32), "scale")
  nodes = [helper.make_node("Constant", [], ["s"], value=scale), helper.make_node("Constant", [], ["z"], value=zero),
           helper.make_node("QuantizeLinear", ["x", "s", "z"], ["y"])]
  ins = [helper.make_tensor_value_info("x", TensorProto.FLOAT, x.shape)]
  graph = helper.make_graph(nodes, "g", ins, [helper.make_tensor_value_info("y", ONNX_TYPES[dtype], None)])
  model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", OPSET)])
  return to_bits(ReferenceEvaluator(model).run(None, {"x": x})[0], dtype)


# ---------------------------------------------------------------- helpers

def run_decode(bits: np.ndarray, dtype) -> np.ndarray:
  return eval_elementwise(decode(BITS_IN, dtype), {BITS_IN: np.asarray(bits, np.uint32)})


def run_encode(x: np.ndarray, dtype, saturate: bool = True) -> np.ndarray:
  leaf = F32_IN if x.dtype == np.float32 else I32_IN
  return eval_elementwise(encode(leaf, dtype, saturate), {leaf: x})


def assert_same_floats(got: np.ndarray, want: np.ndarray):
  """Equal as float32 bit patterns, except that NaNs only need to be NaN at the same places."""
  want = np.asarray(want).astype(np.float32)
  assert got.dtype == np.float32 and got.shape == want.shape
  nan = np.isnan(want)
  np.testing.assert_array_equal(np.isnan(got), nan)
  bad = np.flatnonzero(got[~nan].view(np.uint32) != want[~nan].view(np.uint32))
  assert bad.size == 0, f"{bad.size} mismatches, e.g. got {got[~nan][bad[:5]]} want {want[~nan][bad[:5]]}"


def assert_same_bits(x: np.ndarray, got: np.ndarray, want: np.ndarray):
  assert got.dtype == np.uint32
  bad = np.flatnonzero(got != want)
  detail = [(hex(int(x.view(np.uint32)[i])) if x.dtype == np.float32 else int(x[i]), hex(int(got[i])),
             hex(int(want[i]))) for i in bad[:8]]
  assert bad.size == 0, f"{bad.size} of {len(x)} differ (input bits, got, want): {detail}"


def all_patterns(dtype) -> np.ndarray: return np.arange(1 << dtype.elem_bits, dtype=np.uint32)


def f32_bits(b) -> np.ndarray: return np.asarray(b, np.uint32).view(np.float32)


def neighbours(x: np.ndarray, ulps=(-2, -1, 0, 1, 2)) -> np.ndarray:
  """float32 values within a few ulps of each of x (stepping the magnitude's bit pattern)."""
  b = x.astype(np.float32).view(np.uint32).astype(np.int64)
  sign, mag = b & 0x80000000, b & 0x7fffffff
  out = [(sign | np.clip(mag + k, 0, 0x7f800000)) for k in ulps]
  return np.concatenate(out).astype(np.uint32).view(np.float32)


def special_values() -> np.ndarray:
  rng = np.random.default_rng(0)
  specials = [0.0, -0.0, np.inf, -np.inf, np.nan, -np.nan, 3.4e38, -3.4e38, 1e30, -1e30, 65536.0, 1e-45, -1e-45,
              1.1754942e-38, 1.1754944e-38, -1.1754944e-38]
  nans = f32_bits([0x7fc00000, 0xffc00000, 0x7f800001, 0xff800001, 0x7fffffff, 0xffffffff, 0x7fa00000, 0x7f812345])
  normals = np.concatenate([rng.standard_normal(4000) * np.float32(2.0) ** k for k in range(-40, 41, 2)])
  random_bits = f32_bits(rng.integers(0, 1 << 32, 300_000, dtype=np.uint64))
  return np.concatenate([np.array(specials, np.float32), nans, normals.astype(np.float32), random_bits])


def grid_values(dtype) -> np.ndarray:
  """Every representable value of a small float type, the midpoints between neighbours and the first values past
  the largest, each with its float32 neighbours within 2 ulps, both signs."""
  values = onnx_from_bits(all_patterns(dtype), dtype).astype(np.float32)
  pos = np.unique(np.abs(values[np.isfinite(values)])).astype(np.float64)
  step = pos[-1] - pos[-2]
  beyond = pos[-1] + step * np.array([0.5, 1.0, 1.5, 2.0, 4.0])
  points = np.concatenate([pos, (pos[1:] + pos[:-1]) / 2, beyond, pos[:8] / 2, pos[:8] / 4]).astype(np.float32)
  points = neighbours(points)
  return np.concatenate([points, -points])


# ---------------------------------------------------------------- the evaluator and bitcast

def test_exec_bitcast():
  x = np.array([1.0, -0.0, np.inf], np.float32)
  np.testing.assert_array_equal(exec_bitcast(x, dtypes.uint32), [0x3f800000, 0x80000000, 0x7f800000])
  assert exec_bitcast(np.float32(1.0), dtypes.int32) == 0x3f800000
  np.testing.assert_array_equal(exec_bitcast(x[::2], dtypes.uint32), [0x3f800000, 0x7f800000])
  with pytest.raises(ValueError): exec_bitcast(np.zeros(2, np.float64), dtypes.uint32)


def test_eval_elementwise_basic():
  y = (I32_IN * 3 + 1).lt(10).where(I32_IN, I32_IN.const_like(-1))
  np.testing.assert_array_equal(eval_elementwise(y, {I32_IN: np.arange(5, dtype=np.int32)}), [0, 1, 2, -1, -1])
  with pytest.raises(ValueError): eval_elementwise(I32_IN + 1, {})


@pytest.mark.parametrize("dtype", FLOATS + INTS, ids=str)
def test_graphs_are_elementwise(dtype):
  leaf = I32_IN if dtype in INTS else F32_IN
  for root in (decode(BITS_IN, dtype), encode(leaf, dtype, True), encode(leaf, dtype, False)):
    for u in root.toposort():
      assert u in (BITS_IN, leaf) or u.op is Ops.CONST or u.op in GroupOp.Elementwise, u.op
      assert u.dtype in (dtypes.bool, dtypes.uint32, dtypes.int32, dtypes.float32), u.dtype
      if u.op in (Ops.SHL, Ops.SHR): assert u.src[1].dtype == u.src[0].dtype
      if u.op is Ops.CONST and u.dtype.is_unsigned: assert 0 <= u.arg < 1 << 32
  assert decode(BITS_IN, dtype).dtype == (dtypes.float32 if dtype in FLOATS else dtypes.int32)
  assert encode(leaf, dtype).dtype == dtypes.uint32


def test_bad_arguments():
  with pytest.raises(ValueError): decode(BITS_IN, dtypes.float16)
  with pytest.raises(ValueError): encode(F32_IN, dtypes.int8)
  with pytest.raises(TypeError): decode(I32_IN, dtypes.bfloat16)
  with pytest.raises(TypeError): encode(I32_IN, dtypes.float8e4m3fn)
  with pytest.raises(TypeError): clip_int(F32_IN, dtypes.int4)


# ---------------------------------------------------------------- decode

@pytest.mark.parametrize("dtype", FLOATS + INTS, ids=str)
def test_decode_every_pattern(dtype):
  bits = all_patterns(dtype)
  want = onnx_from_bits(bits, dtype)
  got = run_decode(bits, dtype)
  if dtype in INTS: np.testing.assert_array_equal(got, want.astype(np.int32)); assert got.dtype == np.int32
  else: assert_same_floats(got, want)
  # bits above the element's own are ignored
  high = np.uint32(0xffffffff ^ ((1 << dtype.elem_bits) - 1))
  np.testing.assert_array_equal(run_decode(bits | high, dtype).view(np.uint32), got.view(np.uint32))

def test_decode_float8_specials():
  got = run_decode(np.array([0x7f, 0xff, 0x7e], np.uint32), dtypes.float8e4m3fn)
  assert np.isnan(got[0]) and np.isnan(got[1]) and got[2] == 448.0
  got = run_decode(np.array([0x7c, 0xfc, 0x7d, 0x01], np.uint32), dtypes.float8e5m2)
  assert got[0] == np.inf and got[1] == -np.inf and np.isnan(got[2]) and got[3] == np.float32(2.0 ** -16)
  got = run_decode(np.array([0x80, 0x00, 0x7f, 0xff], np.uint32), dtypes.float8e4m3fnuz)
  assert np.isnan(got[0]) and got[1] == 0 and not np.signbit(got[1]) and got[2] == 240.0 and got[3] == -240.0
  np.testing.assert_array_equal(run_decode(np.arange(16, dtype=np.uint32), dtypes.float4e2m1)[:8],
                                [0, 0.5, 1, 1.5, 2, 3, 4, 6])


# ---------------------------------------------------------------- encode

@pytest.mark.parametrize("saturate", [True, False])
@pytest.mark.parametrize("dtype", SMALL_FLOATS, ids=str)
def test_encode_small_float_matches_onnx(dtype, saturate):
  x = np.concatenate([grid_values(dtype), special_values()])
  assert_same_bits(x, run_encode(x, dtype, saturate), onnx_cast(x, dtype, saturate))


@pytest.mark.parametrize("saturate", [True, False])
def test_encode_bfloat16_matches_onnx(saturate):
  hi = np.arange(1 << 16, dtype=np.uint32) << 16
  x = np.concatenate([f32_bits(np.concatenate([hi | low for low in (0, 1, 0x7fff, 0x8000, 0x8001, 0xffff)])),
                      special_values()])
  assert_same_bits(x, run_encode(x, dtypes.bfloat16, saturate), onnx_cast(x, dtypes.bfloat16, saturate))


def test_encode_float8_saturation_rules():
  x = np.array([np.inf, -np.inf, 1e6, -1e6, np.nan, -0.0], np.float32)
  expect = {  # (saturate=True, saturate=False), as in the ONNX Cast tables
    dtypes.float8e4m3fn: ([0x7e, 0xfe, 0x7e, 0xfe, 0x7f, 0x80], [0x7f, 0xff, 0x7f, 0xff, 0x7f, 0x80]),
    dtypes.float8e4m3fnuz: ([0x7f, 0xff, 0x7f, 0xff, 0x80, 0x00], [0x80, 0x80, 0x80, 0x80, 0x80, 0x00]),
    dtypes.float8e5m2: ([0x7b, 0xfb, 0x7b, 0xfb, 0x7e, 0x80], [0x7c, 0xfc, 0x7c, 0xfc, 0x7e, 0x80]),
    dtypes.float8e5m2fnuz: ([0x7f, 0xff, 0x7f, 0xff, 0x80, 0x00], [0x80, 0x80, 0x80, 0x80, 0x80, 0x00]),
  }
  for dtype, (sat, nosat) in expect.items():
    np.testing.assert_array_equal(run_encode(x, dtype, True), sat, err_msg=str(dtype))
    np.testing.assert_array_equal(run_encode(x, dtype, False), nosat, err_msg=str(dtype))


@pytest.mark.parametrize("dtype", SMALL_FLOATS, ids=str)
def test_float_round_trip(dtype):
  bits = all_patterns(dtype)
  values = run_decode(bits, dtype)
  ok = ~np.isnan(values)
  if dtype.elem_bits == 8 and FORMATS[dtype].neg_zero is False: ok &= bits != 0x80
  np.testing.assert_array_equal(run_encode(values[ok], dtype, False), bits[ok])
  ok &= np.isfinite(values)   # saturate=True sends +-inf to +-max
  np.testing.assert_array_equal(run_encode(values[ok], dtype, True), bits[ok])


def test_bfloat16_round_trip():
  bits = np.arange(1 << 16, dtype=np.uint32)
  values = run_decode(bits, dtypes.bfloat16)
  ok = ~np.isnan(values)
  np.testing.assert_array_equal(run_encode(values[ok], dtypes.bfloat16), bits[ok])


# ---------------------------------------------------------------- small integers

@pytest.mark.parametrize("dtype", INTS, ids=str)
def test_encode_int_wraps_like_onnx_cast(dtype):
  x = np.concatenate([np.arange(-300, 301), [2**31 - 1, -2**31, 2**31 - 8, -2**31 + 3, 65535, -65536]]).astype(np.int32)
  want = onnx_cast(x, dtype, True)
  assert_same_bits(x, run_encode(x, dtype), want)
  assert_same_bits(x, run_encode(x, dtype, saturate=False), want)


# ONNX Cast: "Casting from floating point to: [...] fixed point: undefined if OOR (out of range)." Only values whose
# truncation fits the type are compared with the reference; for the others (out of range, +-inf, NaN) the result
# only has to be a bit pattern of the type (the reference's own answer changed between ml_dtypes releases).
@pytest.mark.parametrize("dtype", INTS, ids=str)
def test_encode_int_from_float_like_onnx_cast(dtype):
  x = np.concatenate([np.arange(-40, 40, 0.25), [-0.0, 0.49, -0.51, 7.99, -8.01, 1e6 + 0.5, -1e9, 2.1e9, -2.1e9,
                                                  np.inf, -np.inf, np.nan]]).astype(np.float32)
  lo, hi = INT_RANGES[dtype]
  with np.errstate(invalid="ignore"):
    defined = np.isfinite(x) & (np.trunc(x) >= lo) & (np.trunc(x) <= hi)
  assert defined.sum() > 20 and (~defined).sum() > 20
  got = run_encode(x, dtype)
  assert_same_bits(x[defined], got[defined], onnx_cast(x[defined], dtype, True))
  assert np.all(got < (1 << dtype.elem_bits))
  np.testing.assert_array_equal(run_decode(got[defined], dtype), np.trunc(x[defined]))


@pytest.mark.parametrize("dtype", INTS, ids=str)
def test_clip_matches_onnx_quantize_linear(dtype):
  x = np.concatenate([np.arange(-40, 41), [2**31 - 1, -2**31, 1000, -1000]]).astype(np.int32)
  lo, hi = INT_RANGES[dtype]
  np.testing.assert_array_equal(eval_elementwise(clip_int(I32_IN, dtype), {I32_IN: x}), np.clip(x, lo, hi))
  got = eval_elementwise(encode(clip_int(I32_IN, dtype), dtype), {I32_IN: x})
  small = np.abs(x) < 2**24  # QuantizeLinear takes float input; larger ints would not be exact
  assert_same_bits(x[small], got[small], onnx_quantize(x[small].astype(np.float32), dtype))
  assert np.all(run_decode(got, dtype) == np.clip(x, lo, hi))


@pytest.mark.parametrize("dtype", INTS, ids=str)
def test_int_round_trip(dtype):
  lo, hi = INT_RANGES[dtype]
  values = np.arange(lo, hi + 1, dtype=np.int32)
  bits = run_encode(values, dtype)
  np.testing.assert_array_equal(run_decode(bits, dtype), values)
  np.testing.assert_array_equal(np.sort(bits), all_patterns(dtype))
  np.testing.assert_array_equal(run_decode(all_patterns(dtype) + np.uint32(1 << dtype.elem_bits), dtype),
                                run_decode(all_patterns(dtype), dtype))
