"""What code generation may assume about the machine a kernel is generated for: a typed `Target`.

A target is a kernel language (one of codegen.registry's: c, opencl, cuda, metal, webgpu) plus the facts
heuristics, search and renderers ask about: for C the CPU (`CPU`: ISA level and compiler flags, SIMD width, vector
registers, FMA, half arithmetic, cache sizes), for GPU languages the launch limits (work-group size, work-groups per
dimension, workgroup memory, storage buffers per kernel) and storage options (WebGPU artifacts hold 64-bit tensors
as 32-bit words); `workgroup_tiles` off means kernels for a GPU language that will run on a CPU (PoCL, SwiftShader,
lavapipe: caches already share what work-items read, and barriers are costly there); `precision` "f16" computes
float32 arithmetic in float16 with float32 accumulations (codegen/precision.py; `f16` then says the device has half
arithmetic). Nothing below asks for a target by its name to decide how to generate code; it asks the target.

`--cpu` levels: `portable` (the default of artifacts: the baseline of the compiling machine's architecture, `BASELINE`:
x86-64-v3, AVX2 + FMA, which every x86-64 desktop, laptop and server CPU since 2013-2015 (Haswell, Zen) has, or
armv8-a; x86-64-v2 for older or low-power x86 CPUs is 2-4x slower on them), `native` (the machine that
compiles; the default of the eager runtime, which runs where it compiles), `x86-64-v2` (SSE4.2), `x86-64-v3` (AVX2 +
FMA), `x86-64-v4` (AVX-512), `x86-64-v4+vnni` (AVX-512 VNNI: Ice Lake, Zen 4 and newer), `armv8-a` (NEON), `armv8.2-a`
(NEON + half-precision arithmetic, e.g. Snapdragon 845 and newer), `armv8.2-a+dotprod` (and the 8-bit dot product,
e.g. Snapdragon 855 and newer), `generic` (plain C99 without vector types, for compilers without GCC/Clang vector
extensions).

`CPU.dot` names the integer dot-product instructions a level has (codegen/dot.py): `vnni` (AVX-512 VNNI vpdpbusd:
groups of four uint8 x int8 added into the int32 lanes), `madd4` (the same four products in two pmaddwd, x86 levels
without VNNI), `sdot` (Arm: groups of four int8); "" for none. Every x86 level also takes pmaddwd's pairs of int16 for
integers wider than 8 bits (`dot.tried`)."""
from __future__ import annotations
import os
import platform
from dataclasses import dataclass, replace
from tgc.ir.words import WordEnum
from tgc.codegen.registry import target_names, target_spec


class Precision(WordEnum):
  """How float32 arithmetic is computed: in float32, or in float16 with float32 sums (GPU targets). The value is
  the --precision word and what manifests record."""
  F32 = "f32"
  F16 = "f16"


@dataclass(frozen=True)
class CPU:
  """A CPU level: what the generated C may use and the compiler flags that allow it."""
  level: str                     # x86-64-v2 | x86-64-v3 | x86-64-v4 | armv8-a | armv8.2-a | generic
  arch: str                      # x86_64 | aarch64 | any
  vector_bytes: int              # SIMD register width
  vector_registers: int
  fma: bool
  fp16: bool                     # native half-precision arithmetic
  march: str                     # the -march value gcc and clang take for this level ("": none)
  tune: tuple[str, ...] = ()     # more flags the kernels need to run at full speed
  l1d_bytes: int = 32 * 1024
  l2_bytes: int = 512 * 1024
  requested: str = ""            # what --cpu asked for ("portable", "native" or the level itself)
  dot: str = ""                  # integer dot-product instructions: madd4 | vnni | sdot | "" (module docstring)

  @property
  def cc_flags(self) -> tuple[str, ...]: return ((f"-march={self.march}",) if self.march else ()) + self.tune

  def describe(self) -> dict:
    """The manifest's record of the CPU the kernels were generated for."""
    return {"requested": self.requested or self.level, "level": self.level, "arch": self.arch,
            "vector_bytes": self.vector_bytes, "fma": self.fma, "fp16": self.fp16, "dot": self.dot,
            "cflags": list(self.cc_flags)}


_WIDE = ("-mprefer-vector-width=512",)
CPU_LEVELS: dict[str, CPU] = {
  "x86-64-v2": CPU("x86-64-v2", "x86_64", 16, 16, False, False, "x86-64-v2", dot="madd4"),
  "x86-64-v3": CPU("x86-64-v3", "x86_64", 32, 16, True, False, "x86-64-v3", dot="madd4"),
  # the generic tuning of x86-64-v4 splits 512-bit vectors in two (half speed): the kernels' vectors are 512 bits
  "x86-64-v4": CPU("x86-64-v4", "x86_64", 64, 32, True, False, "x86-64-v4", _WIDE, dot="madd4"),
  "x86-64-v4+vnni": CPU("x86-64-v4+vnni", "x86_64", 64, 32, True, False, "x86-64-v4", _WIDE + ("-mavx512vnni",),
                        dot="vnni"),
  "armv8-a": CPU("armv8-a", "aarch64", 16, 32, True, False, "armv8-a"),
  "armv8.2-a": CPU("armv8.2-a", "aarch64", 16, 32, True, True, "armv8.2-a+fp16"),
  "armv8.2-a+dotprod": CPU("armv8.2-a+dotprod", "aarch64", 16, 32, True, True, "armv8.2-a+fp16+dotprod", dot="sdot"),
  # plain C99 for any compiler and CPU (MSVC, IAR, a microcontroller without SIMD): one lane, no -march
  "generic": CPU("generic", "any", 4, 16, False, False, ""),
}
CPU_CHOICES = ("portable", "native") + tuple(CPU_LEVELS)
# the level `portable` gives, by the compiling machine's architecture (platform.machine())
BASELINE = {"x86_64": "x86-64-v3", "amd64": "x86-64-v3", "aarch64": "armv8-a", "arm64": "armv8-a"}
_X86_V4 = {"avx512f", "avx512bw", "avx512cd", "avx512dq", "avx512vl"}
_X86_V3 = {"avx", "avx2", "bmi1", "bmi2", "f16c", "fma", "movbe"}
_X86_V2 = {"sse4_1", "sse4_2", "ssse3", "popcnt"}


def _cpuinfo_flags() -> set[str]:
  try:
    with open("/proc/cpuinfo") as f:
      for line in f:
        if line.split(":")[0].strip() in ("flags", "Features"): return set(line.split(":", 1)[1].split())
  except OSError: pass
  return set()


def _cache_bytes(level: int, kind: str) -> int | None:
  """The size of cpu0's cache of `level` and type (Data or Unified) from sysfs, if the kernel says."""
  base = "/sys/devices/system/cpu/cpu0/cache"
  try: entries = sorted(os.listdir(base))
  except OSError: return None
  for entry in entries:
    try:
      with open(os.path.join(base, entry, "level")) as f: lv = int(f.read())
      with open(os.path.join(base, entry, "type")) as f: tp = f.read().strip()
      with open(os.path.join(base, entry, "size")) as f: size = f.read().strip()
    except (OSError, ValueError): continue
    if lv == level and tp in (kind, "Unified") and size.endswith("K"): return int(size[:-1]) * 1024
  return None


def host_cpu() -> CPU:
  """The level of the machine this runs on (x86-64 levels by their feature sets, with VNNI where it has it; aarch64
  with half arithmetic is armv8.2-a, with the dot product too armv8.2-a+dotprod) with its own cache sizes."""
  flags = _cpuinfo_flags()
  if platform.machine() in ("aarch64", "arm64"):
    base = CPU_LEVELS["armv8.2-a+dotprod" if {"asimdhp", "asimddp"} <= flags else
                      "armv8.2-a" if "asimdhp" in flags else "armv8-a"]
  elif _X86_V4 <= flags and _X86_V3 <= flags: base = CPU_LEVELS["x86-64-v4+vnni" if "avx512_vnni" in flags else
                                                                 "x86-64-v4"]
  elif _X86_V3 <= flags: base = CPU_LEVELS["x86-64-v3"]
  else: base = CPU_LEVELS["x86-64-v2"]
  return replace(base, l1d_bytes=_cache_bytes(1, "Data") or base.l1d_bytes, l2_bytes=_cache_bytes(2, "Unified") or
                 base.l2_bytes, requested="native")


def baseline_level() -> str:
  """The portable level of the compiling machine's architecture (x86-64-v3 where it is none of BASELINE's)."""
  return BASELINE.get(platform.machine().lower(), "x86-64-v3")


def cpu_level(name: str) -> CPU:
  """The CPU for a --cpu value; ValueError naming the choices for an unknown one."""
  if name == "native": return host_cpu()
  if name == "portable": return replace(CPU_LEVELS[baseline_level()], requested="portable")
  if name not in CPU_LEVELS: raise ValueError(f"unknown --cpu {name!r}; choose one of {', '.join(CPU_CHOICES)}")
  return replace(CPU_LEVELS[name], requested=name)


@dataclass(frozen=True)
class Target:
  """A kernel language and what its kernels may assume. Build with `Target.make`."""
  name: str                                          # a registered target (codegen.registry)
  cpu: CPU | None = None                             # c only
  max_local_size: tuple[int, int, int] = (1, 1, 1)   # work-items per work-group, per dimension
  max_local_items: int = 1                           # work-items per work-group
  max_groups_per_dim: tuple[int, int, int] | None = None   # work-groups per launch dimension x, y, z
  shared_bytes: int = 0                              # workgroup memory per work-group
  max_buffers: int | None = None                     # storage buffers one kernel may bind
  grid_dims: int = 3
  f16: bool = False                                  # compute float16 in half precision (the device has it)
  narrow_int64: bool = False                         # webgpu: 64-bit integers held and computed as 32-bit words
  narrow_f64: bool = False                           # webgpu: float64 held and computed as float32
  workgroup_tiles: bool = True                       # GPUs: stage operands work-items share in workgroup memory
  register_blocks: bool = True                       # GPUs: a register block's copies as straight-line code, or loops
  kept_block_axis: int | None = None                 # ... loops but for this one of its axes (0: the longest) as copies
  precision: Precision = Precision.F32               # F16: float32 arithmetic in float16, sums in float32 (GPUs)
  fallbacks: bool = False                            # artifacts carry variants for CPU-backed, f16-less devices
  quick_fallbacks: bool = False                      # ... and CPU-backed ones quick to compile (register blocks looped)

  @staticmethod
  def make(name: str, cpu: str | CPU = "native", artifact: bool = True, **kw) -> Target:
    """The target for a registered language (codegen.registry). `cpu` (CPU targets only): a --cpu value or a CPU.
    `artifact`: for an artifact (the spec's `artifact_limits` apply: WebGPU artifacts narrow 64-bit types to 32-bit
    words at the boundary; the eager runtime refuses them instead)."""
    spec = target_spec(name)
    choices = [p.value for p in Precision]
    if kw.get("precision", "f32") not in choices:
      raise ValueError(f"unknown --precision {kw['precision']!r}; choose one of {', '.join(choices)}")
    kw["precision"] = Precision(kw.get("precision", "f32"))
    if kw["precision"] is not Precision.F32:
      if spec.cpu:
        gpus = ", ".join(n for n in target_names() if not target_spec(n).cpu)
        raise ValueError(f"--precision f16 applies to GPU targets ({gpus}), not {name}")
      kw.setdefault("f16", True)               # half arithmetic: the device must have it
    if spec.cpu:
      return Target(name, cpu=cpu if isinstance(cpu, CPU) else cpu_level(cpu), **kw)
    defaults: dict = dict(spec.limits)
    if artifact: defaults.update(spec.artifact_limits)
    defaults.update(kw)
    return Target(name, **defaults)

  # ---- questions codegen asks ----
  @property
  def has_workgroups(self) -> bool:
    """Grid axes are work-item indices (GPU languages); otherwise they are loops (C)."""
    return self.cpu is None

  @property
  def has_threads(self) -> bool:
    """Kernels can run on several CPU threads through the artifact's parallel-for."""
    return self.cpu is not None

  @property
  def integer_winograd(self) -> bool:
    """8-bit 3x3 convolutions in Winograd's form on int16 tiles (frontend/winograd.py `conv2d_integers`): CPUs whose
    8-bit dot products are madd4 (x86 without VNNI), where pmaddwd multiplies int16 pairs at the rate it multiplies
    unpacked bytes, so 2.25x fewer products pay for the transforms."""
    return self.cpu is not None and self.cpu.dot == "madd4"

  @property
  def winograd(self) -> bool:
    """3x3 convolutions in Winograd's form (frontend/winograd.py): measured to pay on CPUs; GPU kernels keep the
    direct sum (their register blocks and work-groups were not measured with it)."""
    return self.cpu is not None

  def vector_lanes(self, itemsize: int) -> int:
    """Lanes of one SIMD register for elements of `itemsize` bytes (GPU languages: 4-wide vector types)."""
    return self.cpu.vector_bytes // itemsize if self.cpu is not None else 4

  @property
  def dot(self) -> str:
    """The CPU's integer dot-product instructions (`CPU.dot`; "" for none and for GPU languages)."""
    return self.cpu.dot if self.cpu is not None else ""

  @property
  def registers(self) -> int:
    """Vector registers a register-blocked kernel may fill."""
    return self.cpu.vector_registers if self.cpu is not None else 32

  def __str__(self) -> str:
    """Stable across processes (cache keys, reports): the language and what changes generated code."""
    parts = [self.name]
    if self.cpu is not None: parts.append(self.cpu.level)
    parts += [o for o, on in (("narrow_int64", self.narrow_int64), ("narrow_f64", self.narrow_f64), ("f16", self.f16),
                              ("no_tiles", self.has_workgroups and not self.workgroup_tiles),
                              ("looped_blocks", self.has_workgroups and not self.register_blocks),
                              (f"kept_axis{self.kept_block_axis}", self.has_workgroups and not self.register_blocks
                               and self.kept_block_axis is not None),
                              ("precision_f16", self.precision is Precision.F16)) if on]
    if self.max_buffers is not None and self.max_buffers != target_spec(self.name).limits.get("max_buffers"):
      parts.append(f"bufs{self.max_buffers}")
    return "+".join(parts)


def as_target(t) -> Target:
  """A Target from a Target or a device's language name (C: the host CPU; the eager runtimes' storage, so WebGPU
  keeps 64-bit types unnarrowed)."""
  if isinstance(t, Target): return t
  return Target.make(str(t), artifact=False)


class TargetLimitError(ValueError):
  """A model needs what the target does not offer (WGSL: no float64, 64-bit integers only as 32-bit words, buffer
  and work-group limits; Metal: no float64): the user's to know, not a bug. `target` names the target; the message
  starts with it ("webgpu: ...") and `detail` is the rest."""

  def __init__(self, target: str, detail: str):
    self.target, self.detail = target, detail
    super().__init__(f"{target}: {detail}")
