"""The WebGPU runtime (wgpu; lavapipe, Mesa's software Vulkan, on CPU-only machines) and the Tensor device "webgpu"
end to end against numpy: elementwise, reductions, matmul, softmax, convolution, 8/16-bit integer, float16 and bool
arithmetic on odd lengths (packed u32 storage), NaN/inf handling, the accurate sin on large arguments, grids wider
than 65535 work-groups. Every kernel compiled by a Tensor test is also checked by Tint (wgpudawn on Dawn's Null
backend); compiling it in the runtime is naga's check. Plus the runtime API: byte-exact copies of odd sizes, naga's
message in CompileError, launch errors, zeroing of packed outputs, timing, device limits.

Tolerances (float32): ELEMENTWISE rtol 1e-5 / atol 1e-6; TRANSCENDENTAL rtol 1e-5 / atol 1e-5 (exp2/log2 built-ins,
sin helper); REDUCE rtol 1e-4 / atol 1e-4 (order of accumulation). float16 results: rtol 2e-3 (computed in f32 and
rounded once, numpy rounds every op). Integers exact. sin: absolute error <= 1e-6 for |x| <= 1e5 (measured ~1.1e-7
on lavapipe: the reduction is exact there, the error is the polynomial's and the final rounding)."""
from __future__ import annotations
import math

import numpy as np
import pytest

from tgc.frontend import Tensor, dtypes
from tgc.frontend import functional as F
from tgc.frontend import realize
from tgc.codegen.render.wgsl import Binding
from tgc.runtimes import CompileError, LaunchError

ELEMENTWISE = dict(rtol=1e-5, atol=1e-6)
TRANSCENDENTAL = dict(rtol=1e-5, atol=1e-5)
REDUCE = dict(rtol=1e-4, atol=1e-4)
HALF = dict(rtol=2e-3, atol=1e-3)


@pytest.fixture
def dev(webgpu_runtime, tint):
  """The device name for Tensor tests; afterwards every kernel the test compiled must pass Tint too."""
  before = set(realize._kernel_cache)
  yield "webgpu"
  for key in set(realize._kernel_cache) - before:
    if key[1] != "webgpu": continue
    prg = realize._kernel_cache[key][0]
    try:
      module = tint.create_shader_module(code=prg.src)
      tint.create_compute_pipeline(layout="auto", compute={"module": module})
    except Exception as error:
      pytest.fail(f"Tint rejects kernel {prg.name}: {error}\n{prg.src}")


def rng(seed: int) -> np.random.Generator: return np.random.default_rng(seed)


def floats(*shape, seed=0, low=-3.0, high=3.0) -> np.ndarray:
  return rng(seed).uniform(low, high, shape).astype(np.float32)


def check(t: Tensor, expected, tol=None) -> None:
  out, expected = t.numpy(), np.asarray(expected)
  assert out.shape == expected.shape and out.dtype == expected.dtype, (out.shape, out.dtype, expected.shape,
                                                                        expected.dtype)
  if out.dtype.kind == "f": np.testing.assert_allclose(out, expected, **(tol or ELEMENTWISE))
  else: np.testing.assert_array_equal(out, expected)


# ---------------------------------------------------------------- the runtime API
VECTOR_ADD = """
@group(0) @binding(0) var<storage, read_write> data0: array<f32>;
@group(0) @binding(1) var<storage, read> data1: array<f32>;
@group(0) @binding(2) var<storage, read> data2: array<f32>;
@compute @workgroup_size(64, 1, 1)
fn vector_add(@builtin(global_invocation_id) g: vec3<u32>) {
  if (g.x < 1000u) { data0[g.x] = data1[g.x] + data2[g.x]; }
}
"""

PACK_BYTES = """
@group(0) @binding(0) var<storage, read_write> data0: array<atomic<u32>>;
@group(0) @binding(2) var<storage, read> data2: array<u32>;
@compute @workgroup_size(4, 1, 1)
fn pack_bytes(@builtin(local_invocation_id) lid: vec3<u32>) {
  atomicOr(&data0[0], ((lid.x + data2[0]) & 255u) << (lid.x * 8u));
}
"""


# what a renderer would report for the two hand-written modules (bindings and work-group size)
VECTOR_ADD_INFO = dict(bindings=[Binding(0, "data0", False, False, "f32"), Binding(1, "data1", True, False, "f32"),
                                 Binding(2, "data2", True, False, "f32")], workgroup_size=(64, 1, 1))
PACK_BYTES_INFO = dict(bindings=[Binding(0, "data0", False, True, "atomic<u32>"),
                                 Binding(2, "data2", True, False, "u32")], workgroup_size=(4, 1, 1))


def upload(rt, array: np.ndarray):
  buf = rt.alloc(array.nbytes)
  rt.copyin(buf, array)
  return buf


def test_vector_add_and_timing(webgpu_runtime):
  rt = webgpu_runtime
  a, b = floats(1000), floats(1000, seed=1)
  out = rt.alloc(4000)
  program = rt.compile(VECTOR_ADD, "vector_add", **VECTOR_ADD_INFO)
  assert program(out, upload(rt, a), upload(rt, b), global_size=(1024, 1, 1), local_size=(64, 1, 1)) is None
  seconds = program(out, upload(rt, a), upload(rt, b), global_size=(1024,), local_size=(64,), wait=True)
  assert isinstance(seconds, float) and 0 < seconds < 10
  np.testing.assert_array_equal(rt.copyout(out).view(np.float32), a + b)
  assert rt.compile(VECTOR_ADD, "vector_add", **VECTOR_ADD_INFO) is program          # cached


@pytest.mark.parametrize("nbytes", [0, 1, 3, 5, 4097])
def test_copies_are_byte_exact(webgpu_runtime, nbytes):
  data = rng(nbytes).integers(0, 256, nbytes, dtype=np.uint8)
  buf = upload(webgpu_runtime, data)
  assert buf.nbytes == nbytes
  back = webgpu_runtime.copyout(buf)
  assert back.dtype == np.uint8 and back.shape == (nbytes,)
  np.testing.assert_array_equal(back, data)


def test_copy_errors(webgpu_runtime):
  buf = webgpu_runtime.alloc(8)
  with pytest.raises(ValueError, match="copyin of 4 bytes into a buffer of 8 bytes"):
    webgpu_runtime.copyin(buf, np.zeros(1, np.float32))
  with pytest.raises(ValueError, match="not a buffer of this runtime"): webgpu_runtime.copyout(object())


def test_bad_wgsl_raises_compile_error_with_nagas_message(webgpu_runtime):
  with pytest.raises(CompileError) as info: webgpu_runtime.compile(VECTOR_ADD.replace("data1[g.x] +", "data1[g.x] +*"),
                                                                   "vector_add", **VECTOR_ADD_INFO)
  assert "kernel 'vector_add' failed to compile" in str(info.value) and "wgsl:7" in info.value.log
  with pytest.raises(CompileError, match="no_such_kernel"):
    webgpu_runtime.compile(VECTOR_ADD, "no_such_kernel", **VECTOR_ADD_INFO)
  with pytest.raises(CompileError, match="needs its bindings and work-group size as data"):
    webgpu_runtime.compile(VECTOR_ADD, "vector_add")
  wrong = dict(VECTOR_ADD_INFO, bindings=VECTOR_ADD_INFO["bindings"][:2])      # binding 2 is declared, not given
  with pytest.raises(CompileError, match="vector_add"): webgpu_runtime.compile(VECTOR_ADD, "vector_add", **wrong)


def test_launch_errors(webgpu_runtime):
  rt = webgpu_runtime
  program = rt.compile(VECTOR_ADD, "vector_add", **VECTOR_ADD_INFO)
  bufs = [rt.alloc(4000) for _ in range(3)]
  launch = dict(global_size=(64, 1, 1), local_size=(64, 1, 1))
  with pytest.raises(LaunchError, match=r"@workgroup_size\(64, 1, 1\), launched with local size \(32, 1, 1\)"):
    program(*bufs, global_size=(1024, 1, 1), local_size=(32, 1, 1))
  with pytest.raises(LaunchError, match="not a multiple"):
    program(*bufs, global_size=(1000, 1, 1), local_size=(64, 1, 1))
  with pytest.raises(LaunchError, match="binds argument 2, got 2 buffers"): program(*bufs[:2], **launch)
  with pytest.raises(LaunchError, match="both data0 and data1"): program(bufs[0], bufs[0], bufs[1], **launch)
  with pytest.raises(LaunchError, match="not a buffer of this runtime"): program(bufs[0], bufs[1], object(), **launch)
  with pytest.raises(LaunchError, match="work-groups; the limit is 65535"):
    program(*bufs, global_size=(64 * 65536, 1, 1), local_size=(64, 1, 1))


def test_packed_outputs_are_zeroed_before_every_launch(webgpu_runtime):
  """Only declared bindings are bound (argument 1 is unused); the atomic output is cleared before each launch,
  so stale bytes (0xff here) and earlier results never leak into the atomicOr."""
  rt = webgpu_runtime
  program = rt.compile(PACK_BYTES, "pack_bytes", **PACK_BYTES_INFO)
  assert program.zero_outputs == (0,) and [b.index for b in program.bindings] == [0, 2]
  out = upload(rt, np.full(6, 0xFF, np.uint8))
  for base in (1, 1, 7):
    program(out, rt.alloc(4), upload(rt, np.array([base], np.uint32)), global_size=(4, 1, 1), local_size=(4, 1, 1))
    np.testing.assert_array_equal(rt.copyout(out), [base, base + 1, base + 2, base + 3, 0, 0])


def test_device_info_has_browser_limits(webgpu_runtime):
  info = webgpu_runtime.device_info()
  assert info["name"] == webgpu_runtime.device_name and info["backend"] and not info["has_fp64"]
  limits = info["limits"]
  assert limits["max-storage-buffers-per-shader-stage"] == 8
  assert limits["max-compute-invocations-per-workgroup"] == 256
  assert limits["max-compute-workgroups-per-dimension"] == 65535
  assert limits["max-storage-buffer-binding-size"] >= 128 << 20


# ---------------------------------------------------------------- Tensor device "webgpu" against numpy
def test_elementwise(dev):
  a, b = floats(7, 33), floats(33, seed=1, low=0.5, high=2.0)
  ta, tb = Tensor(a, device=dev), Tensor(b, device=dev)
  check((ta * tb + 1.5).exp2() - ta.abs().sqrt() / tb, np.exp2(a * b + 1.5) - np.sqrt(np.abs(a)) / b, TRANSCENDENTAL)
  check(ta.maximum(tb) - ta.minimum(-tb) + (ta > tb).where(ta, 0.5), np.maximum(a, b) - np.minimum(a, -b) +
        np.where(a > b, a, np.float32(0.5)))
  check((ta.abs() + 0.1).log2() * ta.sigmoid(), np.log2(np.abs(a) + np.float32(0.1)) / (1 + np.exp(-a)),
        TRANSCENDENTAL)
  check(tb ** ta, np.power(b, a), TRANSCENDENTAL)
  check((ta // tb) + ta.trunc() + ta.round(), np.floor_divide(a, b) + np.trunc(a) + np.round(a))


def test_reductions(dev):
  a = floats(5, 7, 9)
  t = Tensor(a, device=dev)
  check(t.sum(), np.sum(a, dtype=np.float32), REDUCE)
  check(t.sum(axis=(0, 2)), a.sum(axis=(0, 2)), REDUCE)
  check(t.max(axis=1), a.max(axis=1))
  check(t.mean(axis=-1, keepdim=True), a.mean(axis=-1, keepdims=True), REDUCE)
  long = floats(4, 4096, seed=3)
  check(Tensor(long, device=dev).sum(axis=1), long.sum(axis=1), REDUCE)      # split across a work-group
  check(Tensor(long, device=dev).max(axis=1), long.max(axis=1))
  i = rng(4).integers(-1000, 1000, (7, 33)).astype(np.int32)
  check(Tensor(i, device=dev).sum(axis=1), i.sum(axis=1, dtype=np.int32))
  check(Tensor(i, device=dev).max(), np.array(i.max(), np.int32))


@pytest.mark.parametrize("m,k,n", [(33, 17, 29), (64, 160, 144)])
def test_matmul(dev, m, k, n):
  a, b = floats(m, k, seed=5), floats(k, n, seed=6)
  check(Tensor(a, device=dev) @ Tensor(b, device=dev), a @ b, REDUCE)


def test_softmax(dev):
  a = floats(6, 50, seed=7, low=-10, high=10)
  e = np.exp(a - a.max(axis=1, keepdims=True))
  check(Tensor(a, device=dev).softmax(-1), e / e.sum(axis=1, keepdims=True), dict(rtol=1e-5, atol=1e-6))
  e0 = np.exp(a - a.max(axis=0, keepdims=True))
  check(Tensor(a, device=dev).softmax(0), e0 / e0.sum(axis=0, keepdims=True), dict(rtol=1e-5, atol=1e-6))


def _conv2d_ref(x, w, b, stride, pad):
  x = np.pad(x.astype(np.float64), ((0, 0), (0, 0), (pad, pad), (pad, pad)))
  n, _, h, wd = x.shape
  co, _, kh, kw = w.shape
  oh, ow = (h - kh) // stride + 1, (wd - kw) // stride + 1
  out = np.zeros((n, co, oh, ow))
  for i in range(oh):
    for j in range(ow):
      patch = x[:, :, i * stride:i * stride + kh, j * stride:j * stride + kw]
      out[:, :, i, j] = np.einsum("nchw,ochw->no", patch, w)
  return (out + b[None, :, None, None]).astype(np.float32)


@pytest.mark.parametrize("stride,pad", [(1, 1), (2, 0)])
def test_conv2d(dev, stride, pad):
  x, w, b = floats(2, 3, 11, 9, seed=8), floats(4, 3, 3, 3, seed=9), floats(4, seed=10)
  got = F.conv2d(Tensor(x, device=dev), Tensor(w, device=dev), Tensor(b, device=dev), stride=stride, padding=pad)
  check(got, _conv2d_ref(x, w, b, stride, pad), REDUCE)


ODD = [1, 7, 33, 1001]


@pytest.mark.parametrize("n", ODD)
def test_int8_uint8_int16_wrap_like_numpy(dev, n):
  i8, j8 = (rng(n + s).integers(-128, 128, n).astype(np.int8) for s in (0, 1))
  u8, v8 = (rng(n + s).integers(0, 256, n).astype(np.uint8) for s in (2, 3))
  i16 = rng(n + 4).integers(-32768, 32768, n).astype(np.int16)
  ti, tj, tu, tv = (Tensor(x, device=dev) for x in (i8, j8, u8, v8))
  with np.errstate(over="ignore"):
    check(ti * tj + ti, i8 * j8 + i8)
    check(-ti - tj, -i8 - j8)
    check(tu - tv * tu, u8 - v8 * u8)
    check((tu >> 3) ^ tv, (u8 >> 3) ^ v8)
    check(Tensor(i16, device=dev) * 3 + 1000, i16 * np.int16(3) + np.int16(1000))
  nonzero = np.where(j8 == 0, 1, j8).astype(np.int8)
  a, b = i8.astype(np.int32), nonzero.astype(np.int32)
  check(ti.idiv(Tensor(nonzero, device=dev)), (np.abs(a) // np.abs(b) * np.sign(a) * np.sign(b)).astype(np.int8))


@pytest.mark.parametrize("n", ODD)
def test_float16_and_bool_arithmetic(dev, n):
  h, g = (rng(n + s).uniform(-4, 4, n).astype(np.float16) for s in (5, 6))
  th, tg = Tensor(h, device=dev), Tensor(g, device=dev)
  check(th * tg + th, h * g + h, HALF)
  check((th.float() * 2).half().maximum(tg), np.maximum((h.astype(np.float32) * 2).astype(np.float16), g), HALF)
  check(th.sum(), np.array(h.astype(np.float32).sum(), np.float16), dict(rtol=5e-3, atol=5e-3))
  p, q = h > 0, g > 1
  check(Tensor(p, device=dev).logical_xor(Tensor(q, device=dev)) | (th < tg), (p ^ q) | (h < g))
  check(Tensor(p, device=dev).where(th, tg), np.where(p, h, g))


def test_float16_conversion_is_exact(dev):
  """float32 -> float16 rounds to nearest even, with subnormals, overflow to inf and NaN, as numpy."""
  x = np.array([0.0, -0.0, 1.0, 65504, 65519.99, 65520, 70000, -1e9, 1e-7, 6e-8, 2.98e-8, 2.99e-8, -3e-5, 1 + 2 ** -11,
                1 + 3 * 2 ** -11, 1 + 2 ** -11 + 2 ** -20, np.nan, np.inf, -np.inf, 3.14159], np.float32)
  with np.errstate(over="ignore"):
    want = x.astype(np.float16)
  got = Tensor(x, device=dev).half().numpy()
  np.testing.assert_array_equal(got.view(np.uint16)[~np.isnan(want)], want.view(np.uint16)[~np.isnan(want)])
  assert np.isnan(got[np.isnan(want)]).all()
  back = Tensor(want, device=dev).float().numpy()
  np.testing.assert_array_equal(back, want.astype(np.float32))


def test_float_to_int_casts_match_numpy(dev):
  f = np.array([1.5, -1.5, 2.5, np.nan, np.inf, -np.inf, 3e9, -3e9, 300.7, -300.7, 1e20], np.float32)
  t = Tensor(f, device=dev)
  for d in (dtypes.int32, dtypes.uint32, dtypes.int8, dtypes.uint8, dtypes.int16, dtypes.bool):
    np.testing.assert_array_equal(t.cast(d).numpy(), Tensor(f, device="numpy").cast(d).numpy(), err_msg=d.name)


def test_nan_and_inf(dev):
  a = np.array([1, np.nan, -np.inf, 3, np.inf, 0, -0.0, 5, np.nan], np.float32)
  b = np.array([np.nan, 2, 1, -np.inf, np.nan, -0.0, 0, 4, np.nan], np.float32)
  ta, tb = Tensor(a, device=dev), Tensor(b, device=dev)
  check(ta.maximum(tb), np.maximum(a, b))           # NaN from either side
  check(ta.isnan(), np.isnan(a))
  check(ta.isinf(), np.isinf(a))
  check(ta.max(), np.array(np.nan, np.float32))
  check(Tensor(a[[0, 2, 3]], device=dev).max(), np.array(3, np.float32))
  check(Tensor(-np.full(5, np.inf, np.float32), device=dev).max(), np.array(-np.inf, np.float32))
  check(Tensor(a, device=dev).maximum(-math.inf), a)
  check(ta.relu(), np.maximum(a, 0))


@pytest.mark.parametrize("limit", [10.0, 1e4, 1e5])
def test_sin_is_accurate_on_large_arguments(dev, limit):
  x = rng(11).uniform(-limit, limit, 20001).astype(np.float32)
  x[:6] = [0, -0.0, math.pi, 1e-30, limit, -limit]
  got = Tensor(x, device=dev).sin().numpy()
  err = np.abs(got.astype(np.float64) - np.sin(x.astype(np.float64)))
  assert err.max() <= 1e-6, f"max abs error {err.max():.3g} at x={x[err.argmax()]}"
  special = Tensor(np.array([np.nan, np.inf, -np.inf], np.float32), device=dev).sin().numpy()
  assert np.isnan(special).all()


@pytest.mark.parametrize("n", [70001, 65536 * 3 + 2])
def test_grids_wider_than_65535_workgroups(dev, n):
  """70001 (prime) needs a rounded-up split with gated stores; 196610 splits exactly (LOCAL 2 x 98305)."""
  x = floats(n, seed=12)
  check(Tensor(x, device=dev) * 2 + 1, x * 2 + 1)
