"""Integer dot products (codegen/dot.py): a matrix product of 8-bit values (uint8 activations minus a zero point or
int8 ones, int8 weights, summed in float32 or int32) unrolls its reduction by the products one instruction sums, and
each CPU level spells its instruction (x86-64-v2/v3/v4: four uint8 x int8 in two pmaddwd, x86-64-v4+vnni:
vpdpbusd, armv8.2-a+dotprod: sdot; the 8-bit ones take uint8 minus a zero point shifted into their operand, plus a
sum of the weights); x86 levels take integers wider than 8 bits as pmaddwd's pairs of int16 (int16 weights too,
in int32 sums, modulo 2**32); levels without one (armv8-a, generic) and operands no instruction holds keep the
lane-by-lane sums; a reduction the group does not divide is padded. The kernels give numpy's integer results exactly
on random data of odd sizes, on this machine's x86 levels and on the dotprod level under qemu-aarch64."""
from __future__ import annotations
import math
import os
import platform
import re
import shutil
import subprocess

import numpy as np
import pytest

from tgc.frontend import Tensor
from tgc.frontend.realize import _alloc
from tgc.codegen.schedule import schedule
from tgc.codegen.lower import lower
from tgc.codegen.opts import OptOps
from tgc.codegen.dot import INSTRUCTIONS as GROUPS
from tgc.codegen.target import CPU_LEVELS, Target, host_cpu
from tgc.ir import dtypes
from tgc.runtimes import get_runtime

RNG = np.random.default_rng(20)
# the instruction of each level with a dot product, for vectors of the level's full width
SPELLING = {"x86-64-v2": "tg_dot4_mm(", "x86-64-v3": "tg_dot4_mm256(", "x86-64-v4": "tg_dot4_mm512(",
            "x86-64-v4+vnni": "_mm512_dpbusd_epi32", "armv8.2-a+dotprod": "vdotq_s32"}
# a call of each instruction in a kernel (pmaddwd's own, not those inside madd4's helper)
INSTRUCTIONS = {"madd": r"\)_mm\d*_madd_epi16\(", "madd4": r"tg_dot4_mm\d*\(", "vnni": r"_dpbusd_epi32\(",
                "sdot": r"vdotq_s32\("}
W_POS = 2       # the kernel's arguments: output, activations, weights


def called(src: str) -> list[str]:
  """The dot-product instructions the kernel source calls."""
  return [kind for kind, call in INSTRUCTIONS.items() if re.search(call, src)]


def case(m: int, k: int, n: int, signed: bool) -> tuple[np.ndarray, np.ndarray, int]:
  """Random activations (int8, or uint8 with a zero point), int8 weights, the zero point."""
  x = RNG.integers(-128, 128, (m, k)).astype(np.int8) if signed else RNG.integers(0, 256, (m, k)).astype(np.uint8)
  return x, RNG.integers(-128, 128, (k, n)).astype(np.int8), 0 if signed else 131


def reference(x: np.ndarray, w: np.ndarray, zero: int) -> np.ndarray:
  return (x.astype(np.int64) - zero) @ w.astype(np.int64)


def program(x: np.ndarray, w: np.ndarray, zero: int, level: str, float_sum: bool):
  """The matrix product's kernel lowered for `level`, the weights its own (relaid at compile time)."""
  acc = dtypes.float32 if float_sum else dtypes.int32
  a = Tensor(x, device="c").cast(acc)
  t = (a - zero if zero else a) @ Tensor(w, device="c").cast(acc)
  items, _ = schedule([t.uop], _alloc("c"))
  assert len(items) == 1
  return lower(items[0].ast, Target.make("c", cpu=level), weights={W_POS: w.size})


def arguments(prg, x: np.ndarray, w: np.ndarray, out: np.ndarray) -> list[np.ndarray]:
  """The kernel's buffers: the output `out`, the activations, the weights as the kernel reads them."""
  data = {0: out, 1: x, W_POS: w}
  for pos, how in prg.relayouts.items(): data[pos] = how.apply({p: data[p] for p in how.positions})
  return [np.ascontiguousarray(data[p]) for p in prg.args]


def matmul_arguments(prg, x: np.ndarray, w: np.ndarray, out_dtype) -> list[np.ndarray]:
  return arguments(prg, x, w, np.zeros((x.shape[0], w.shape[1]), out_dtype))


def run_here(prg, bufs: list[np.ndarray]) -> np.ndarray:
  rt = get_runtime("c")
  dev = [rt.alloc(b.nbytes) for b in bufs]
  for d, b in zip(dev, bufs): rt.copyin(d, b.reshape(-1).view(np.uint8))
  rt.compile(prg.src, prg.name)(*dev, global_size=prg.global_size)
  return rt.copyout(dev[0]).view(bufs[0].dtype).reshape(bufs[0].shape)


def runs_here(level: str) -> bool:
  cpu, host = CPU_LEVELS[level], host_cpu()
  return cpu.arch == "x86_64" and platform.machine().lower() in ("x86_64", "amd64") and \
    host.vector_bytes >= cpu.vector_bytes and (cpu.dot != "vnni" or host.dot == "vnni")


@pytest.mark.parametrize("level", sorted(SPELLING))
def test_each_level_spells_its_instruction(level):
  x, w, zero = case(5, 40, 48, signed=CPU_LEVELS[level].dot == "sdot")
  prg = program(x, w, zero, level, float_sum=True)
  assert SPELLING[level] in prg.src and "tg_i32x" in prg.src
  assert any(o.op is OptOps.UNROLL and o.amount == GROUPS[CPU_LEVELS[level].dot][0] for o in prg.opts)


@pytest.mark.parametrize("level", ["armv8-a", "armv8.2-a", "generic"])
def test_levels_without_one_sum_lane_by_lane(level):
  x, w, zero = case(5, 38, 48, signed=False)
  src = program(x, w, zero, level, float_sum=True).src
  assert called(src) == []


@pytest.mark.parametrize("level, fits", [("x86-64-v3", True), ("x86-64-v4+vnni", True), ("armv8.2-a+dotprod", False)])
def test_operands_too_wide_for_8_bits_are_pmaddwd_pairs(level, fits):
  """int16 activations fit pmaddwd's pairs of int16 (every x86 level), not the 8-bit operands of the groups of four
  (x86's first choice, Arm's sdot): on x86 a pair-unrolled pmaddwd sum, numpy's integers exactly; on Arm lane by
  lane."""
  x, w = RNG.integers(-30000, 30000, (5, 40)).astype(np.int16), RNG.integers(-128, 128, (40, 48)).astype(np.int8)
  prg = program(x, w, 0, level, float_sum=False)
  assert called(prg.src) == (["madd"] if fits else [])
  if fits: assert any(o.op is OptOps.UNROLL and o.amount == 2 for o in prg.opts)
  if not runs_here(level): return
  got = run_here(prg, matmul_arguments(prg, x, w, np.int32))
  np.testing.assert_array_equal(got, reference(x, w, 0))


@pytest.mark.parametrize("level", ["x86-64-v2", "x86-64-v3", "x86-64-v4+vnni"])
def test_int16_weights_summed_in_int32_are_pmaddwd_pairs_modulo_2_32(level):
  """int16 weights times int16 integers summed in int32 (the integer Winograd form's products: frontend/winograd.py)
  are pmaddwd's pairs of int16 whatever their range: int32 arithmetic wraps modulo 2**32 and so do pmaddwd's pair
  sums (only (-32768)**2 * 2 overflows them). Full-range operands with -32768 at both ends of a pair give numpy's
  sums modulo 2**32 exactly; summed in float32 the same products are not rewritten (a float sum is exact only
  while its integers stay below 2**24, which no bound shows here)."""
  x = RNG.integers(-32768, 32768, (6, 40)).astype(np.int16)
  w = RNG.integers(-32768, 32768, (40, 24)).astype(np.int16)
  x[:, :2], w[:2, :] = -32768, -32768                   # the one pair pmaddwd's int32 sum wraps
  int_prg, float_prg = (program(x, w, 0, level, float_sum=f) for f in (False, True))
  assert called(int_prg.src) == ["madd"] and called(float_prg.src) == []
  if not runs_here(level): pytest.skip(f"this machine does not run {level} code")
  got = run_here(int_prg, matmul_arguments(int_prg, x, w, np.int32))
  np.testing.assert_array_equal(got, reference(x, w, 0).astype(np.int32))    # numpy's int64 sums, wrapped


@pytest.mark.parametrize("float_sum", [True, False], ids=["float32-sum", "int32-sum"])
@pytest.mark.parametrize("shape", [(5, 38, 24), (7, 131, 40), (1, 12, 72)], ids=lambda s: "x".join(map(str, s)))
@pytest.mark.parametrize("level", ["x86-64-v2", "x86-64-v3", "x86-64-v4", "x86-64-v4+vnni"])
@pytest.mark.parametrize("signed", [False, True], ids=["uint8", "int8"])
def test_matches_numpy_integers(level, shape, float_sum, signed):
  if not runs_here(level): pytest.skip(f"this machine does not run {level} code")
  x, w, zero = case(*shape, signed=signed)
  prg = program(x, w, zero, level, float_sum)
  assert called(prg.src) == [CPU_LEVELS[level].dot]
  got = run_here(prg, matmul_arguments(prg, x, w, np.float32 if float_sum else np.int32))
  np.testing.assert_array_equal(got, reference(x, w, zero))


@pytest.mark.parametrize("level, k, instruction", [("x86-64-v3", 37, "madd4"), ("x86-64-v3", 3, "madd"),
                                                    ("x86-64-v4+vnni", 37, "vnni"), ("x86-64-v4+vnni", 7, "vnni"),
                                                    ("x86-64-v4+vnni", 5, "madd"), ("armv8.2-a+dotprod", 5, None)])
def test_odd_reductions_stay_exact(level, k, instruction):
  """A reduction the group does not divide is padded when that costs at most a third more products (37 -> 40, 7 -> 8:
  the last copies add zero); else the next instruction the level tries (x86: 5 in pmaddwd's 3 pairs; 3 in 2 pairs,
  where 3 -> 4 would be one group, the whole sum), else summed lane by lane (sdot: 5 -> 8 is too much); exact either
  way."""
  x, w, zero = case(3, k, 24, signed=False)
  prg = program(x, w, zero, level, float_sum=True)
  assert called(prg.src) == ([instruction] if instruction else [])
  if not runs_here(level): pytest.skip(f"this machine does not run {level} code")
  got = run_here(prg, matmul_arguments(prg, x, w, np.float32))
  np.testing.assert_array_equal(got, reference(x, w, zero))


def conv_case(level: str, zero: int, signed: bool, cin: int = 32, size: tuple[int, int] = (9, 11), cout: int = 24):
  """A padded 3x3 convolution of channels-last 8-bit activations (`cin` channels, `size` pixels) minus `zero` with
  int8 weights, summed in float32: (the kernel lowered for `level`, its buffers, numpy's result)."""
  h, wd = size
  x = RNG.integers(-128, 128, (1, h, wd, cin)).astype(np.int8) if signed else \
    RNG.integers(0, 256, (1, h, wd, cin)).astype(np.uint8)
  w = RNG.integers(-128, 128, (cout, cin, 3, 3)).astype(np.int8)
  a = Tensor(x, device="c").cast(dtypes.float32)
  t = (a - zero if zero else a).permute(0, 3, 1, 2).conv2d(Tensor(w, device="c").cast(dtypes.float32), padding=1)
  items, _ = schedule([t.uop], _alloc("c"))
  assert len(items) == 1
  prg = lower(items[0].ast, Target.make("c", cpu=level), weights={W_POS: w.size})
  padded = np.pad(x.astype(np.int64) - zero, ((0, 0), (1, 1), (1, 1), (0, 0)))
  want = sum(np.einsum("hwc,oc->ohw", padded[0, i:i + h, j:j + wd], w[:, :, i, j].astype(np.int64))
             for i in range(3) for j in range(3))[None]
  return prg, arguments(prg, x, w, np.zeros(want.shape, np.float32)), want


@pytest.mark.parametrize("zero, signed", [(0, False), (128, False), (3, True)], ids=["uint8", "uint8-128", "int8"])
def test_padded_conv_reads_each_group_of_channels_in_one_load(zero, signed):
  """A tap's four channels are side by side in a channels-last activation: the instruction's 32-bit operand is one
  load (its top bits flipped for int8 activations, the zero point's bytes where the tap is padding), not four byte
  loads shifted together; exact."""
  prg, bufs, want = conv_case("x86-64-v4+vnni", zero, signed)
  assert ("tg_i8x4" if signed else "tg_u8x4") in prg.src and "<<" not in prg.src
  if not runs_here("x86-64-v4+vnni"): pytest.skip("this machine does not run x86-64-v4+vnni code")
  np.testing.assert_array_equal(run_here(prg, bufs), want)


def test_an_rgb_convolution_pads_its_three_channels_to_four():
  """An image's 3 channels (a network's first convolution) are padded to 4 for the instruction: exact."""
  prg, bufs, want = conv_case("x86-64-v4+vnni", 128, False, cin=3)
  assert "_dpbusd_epi32" in prg.src
  if not runs_here("x86-64-v4+vnni"): pytest.skip("this machine does not run x86-64-v4+vnni code")
  np.testing.assert_array_equal(run_here(prg, bufs), want)


def test_madd4_convolutions_share_each_unpacking_across_fourteen_accumulators():
  """x86-64-v3 has no 8-bit dot product: madd4 splits the broadcast activations and the weight vectors into even and
  odd bytes at every use, which costs more than the loads. The register block that spends least on that per
  accumulation within the registers but two is 7 pixels x 2 weight vectors (14 accumulators; 4 x 2 before); exact."""
  prg, bufs, want = conv_case("x86-64-v3", 128, False, cin=64, size=(14, 14), cout=16)
  upcasts = sorted(o.amount for o in prg.opts if o.op is OptOps.UPCAST)
  assert "tg_dot4_mm256(" in prg.src and upcasts == [2, 7], prg.opts
  if not runs_here("x86-64-v3"): pytest.skip("this machine does not run x86-64-v3 code")
  np.testing.assert_array_equal(run_here(prg, bufs), want)


@pytest.mark.parametrize("level", ["x86-64-v2", "x86-64-v3", "x86-64-v4"])
@pytest.mark.parametrize("signed", [False, True], ids=["uint8", "int8"])
def test_madd4_matrix_vector_products_sum_pairs_of_groups_exactly(level, signed):
  """A matrix-vector product (one row of activations: no register block copies the integer its weights multiply)
  sums two groups of four products at a time in pmaddubsw (`tg_dot8`), its reduction unrolled by 4 and by 2, and its
  block of weight vectors leaves registers for the split activations; rows of the largest magnitudes (255 or 127
  against -128 and 127: where pmaddubsw saturates on unsplit bytes) and random ones equal numpy's integers. Several
  rows keep `tg_dot4`: their weight vectors' unpacking is shared by the rows."""
  x, w, zero = case(2, 128, 112, signed=signed)
  top = 127 if signed else 255
  x[0], w[:, :56] = top, np.where(np.arange(128)[:, None] % 3 == 0, 127, -128).astype(np.int8)
  for rows, pairs in ((x[:1], True), (x[1:], True), (x, False)):
    prg = program(rows, w, zero, level, float_sum=False)
    kernel = prg.src.split("TG_KERNEL")[-1]
    assert ("tg_dot8_mm" in kernel) == pairs and ("tg_dot4_mm" in kernel) != pairs, prg.opts
    if pairs:
      assert sorted(o.amount for o in prg.opts if o.op is OptOps.UNROLL) == [2, 4], prg.opts
      upcast = math.prod(o.amount for o in prg.opts if o.op is OptOps.UPCAST)
      assert CPU_LEVELS[level].vector_registers > 16 or upcast <= CPU_LEVELS[level].vector_registers - 6, prg.opts
    if runs_here(level):
      np.testing.assert_array_equal(run_here(prg, matmul_arguments(prg, rows, w, np.int32)),
                                    reference(rows, w, zero))


# ---------------------------------------------------------------- sdot under qemu-aarch64
MAIN = """#include <stdio.h>
#include <stdlib.h>
{kernel}
static void *load(const char *path, size_t n) {{
  void *p = calloc(1, n);
  FILE *f = fopen(path, "rb");
  if (!p || !f || fread(p, 1, n, f) != n) exit(1);
  fclose(f);
  return p;
}}
int main(void) {{
  FILE *f;
{loads}
  {name}({args}, 0, {tasks});
  f = fopen("out.bin", "wb");
  if (!f || fwrite(b0, 1, {out_bytes}, f) != {out_bytes}) return 1;
  fclose(f);
  return 0;
}}
"""


def require_aarch64_tools() -> None:
  for tool, package in (("aarch64-linux-gnu-gcc", "gcc-aarch64-linux-gnu"), ("qemu-aarch64", "qemu-user")):
    if shutil.which(tool) is None: pytest.skip(f"{tool} not found: install the Debian package {package}")


def run_under_qemu(prg, bufs: list[np.ndarray], folder) -> np.ndarray:
  """The kernel built with the aarch64 cross compiler for its level and run by qemu-aarch64 on `bufs`."""
  loads = [f"  void *b{i} = load(\"b{i}.bin\", {max(b.nbytes, 1)});" for i, b in enumerate(bufs)]
  for i, b in enumerate(bufs): b.tofile(os.path.join(folder, f"b{i}.bin"))
  args = ", ".join(f"({p.spelled} *)b{i}" for i, p in enumerate(prg.params))
  with open(os.path.join(folder, "main.c"), "w") as f:
    f.write(MAIN.format(kernel=prg.src, loads="\n".join(loads), name=prg.name, args=args, tasks=prg.global_size[0],
                        out_bytes=bufs[0].nbytes))
  cc = ["aarch64-linux-gnu-gcc", "-O2", "-std=c99", "-Wall", "-Werror", "-march=armv8.2-a+fp16+dotprod",
        "main.c", "-o", "main", "-lm"]
  build = subprocess.run(cc, cwd=folder, capture_output=True, text=True)
  if build.returncode and "stdio.h" in build.stderr:
    pytest.skip("aarch64 C library headers missing: install the Debian package libc6-dev-arm64-cross")
  assert build.returncode == 0, build.stderr
  r = subprocess.run(["qemu-aarch64", "-cpu", "max", "-L", "/usr/aarch64-linux-gnu", "./main"], cwd=folder,
                     capture_output=True, text=True, timeout=300)
  assert r.returncode == 0, r.stderr
  return np.fromfile(os.path.join(folder, "out.bin"), bufs[0].dtype).reshape(bufs[0].shape)


@pytest.mark.parametrize("float_sum", [True, False], ids=["float32-sum", "int32-sum"])
@pytest.mark.parametrize("signed", [False, True], ids=["uint8", "int8"])
def test_sdot_under_qemu_matches_numpy(tmp_path, float_sum, signed):
  require_aarch64_tools()
  x, w, zero = case(5, 43, 24, signed=signed)
  prg = program(x, w, zero, "armv8.2-a+dotprod", float_sum)
  assert "vdotq_s32" in prg.src
  got = run_under_qemu(prg, matmul_arguments(prg, x, w, np.float32 if float_sum else np.int32), str(tmp_path))
  np.testing.assert_array_equal(got, reference(x, w, zero))
