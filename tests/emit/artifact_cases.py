"""Helpers of the artifact tests: small models built on any device (the numpy device gives the independent
reference), compiling a traced model to a `CompiledModel` for any target, writing its bundle, copying and reading
bundles, running `make`, C programs and the `tgc` command line, checks every bundle writer must pass, and the cross
toolchain check."""
from __future__ import annotations
import hashlib
import json
import os
import re
import shutil
import subprocess
import dataclasses
from dataclasses import dataclass
from pathlib import Path
from typing import Callable

import numpy as np
import pytest

from tgc.codegen.compiled import CompiledModel, compile_schedule
from tgc.codegen.render import KernelParam
from tgc.codegen.target import Target
from tgc.emit import write_artifact
from tgc.emit.manifest import validate_manifest
from tgc.frontend import Tensor
from tgc.ir import dtypes
from tgc.frontend import nn
from tgc.frontend.jit import trace

ROOT = Path(__file__).resolve().parents[2]
C_WARNINGS = ("-std=c99", "-Wall", "-Wextra", "-pedantic", "-Werror")
HOSTILE_INPUTS = ('we"ird\\ */ name\n%s ü', "int")
HOSTILE_OUTPUTS = ["main", "main!"]
HOSTILE_WEIGHTS = ["a b", "a-b", "__pad_0"]


@dataclass
class ModelCase:
  """A model: `build(device)` returns the function to compile (weights created on that device); `inputs` are
  the example inputs by name; names of outputs and weights may be chosen (None: the defaults)."""
  name: str
  build: Callable[[str], Callable]
  inputs: dict[str, np.ndarray]
  output_names: list[str] | None = None
  weight_names: list[str] | None = None
  rtol: float = 1e-4
  atol: float = 1e-5

  def reference(self) -> dict[str, np.ndarray]:
    """Outputs of the numpy interpreter (never the compiled path), by output name."""
    fn = self.build("numpy")
    outs = fn(*[Tensor(v, device="numpy") for v in self.inputs.values()])
    outs = outs if isinstance(outs, (list, tuple)) else [outs]
    names = self.output_names or [f"output_{i}" for i in range(len(outs))]
    return {n: o.numpy() for n, o in zip(names, outs)}

  def compile(self, target: str = "c") -> CompiledModel:
    """The model traced (the capture is target-independent) and lowered for `target`."""
    fn = self.build("c")
    cap = trace(fn, *[Tensor(v, device="c") for v in self.inputs.values()], input_names=list(self.inputs),
                output_names=self.output_names)
    weights = list(cap.weights.items())
    names = self.weight_names or [f"w{i}" for i in range(len(weights))]
    assert len(names) == len(weights), f"{self.name}: {len(weights)} weights, {len(names)} names"
    return compile_schedule(self.name, target, cap.items, [(s.name, b) for s, b in cap.inputs],
                            [(s.name, b) for s, b in cap.outputs], [(n, b, v) for n, (b, v) in zip(names, weights)])


def build_mlp(device: str):
  Tensor.manual_seed(0)
  l1, l2 = nn.Linear(8, 16, device=device), nn.Linear(16, 4, device=device)
  return lambda x: l2(l1(x).relu()).softmax()


def build_cnn(device: str):
  Tensor.manual_seed(1)
  conv1, bn = nn.Conv2d(3, 4, 3, padding=1, device=device), nn.BatchNorm2d(4, device=device)
  conv2, fc = nn.Conv2d(4, 6, 3, device=device), nn.Linear(6 * 2 * 2, 5, device=device)
  rng = np.random.default_rng(5)
  bn.running_mean = Tensor(rng.standard_normal(4).astype(np.float32) * 0.1, device=device)
  bn.running_var = Tensor(rng.uniform(0.5, 1.5, 4).astype(np.float32), device=device)

  def forward(x):
    h = bn(conv1(x)).relu().max_pool2d(2)
    feat = conv2(h).relu()
    return fc(feat.flatten(1)).log_softmax(-1), feat
  return forward


def build_convnet(device: str):
  """3x3 and 1x1 convolutions big enough for register blocks (WebGPU artifacts get quick variants of them)."""
  Tensor.manual_seed(7)
  conv1, conv2 = nn.Conv2d(8, 16, 3, padding=1, device=device), nn.Conv2d(16, 16, 1, device=device)

  def forward(x):
    return conv2(conv1(x).clip(0, 6)).relu()
  return forward


def build_two_io(device: str):
  """Two inputs (float32, int32), two outputs (float32, int32), three weights of sizes not a multiple of 16."""
  Tensor.manual_seed(2)
  w = Tensor(np.linspace(-1, 1, 15, dtype=np.float32).reshape(3, 5), device=device)
  k = Tensor(np.arange(3, dtype=np.int32) - 1, device=device)
  b = Tensor(np.array([0.5, -0.25, 0.125], dtype=np.float32), device=device)

  def forward(x, n):
    y = (x * w).sum(1) + n.float() + b
    return y.sigmoid(), n * 2 + k
  return forward


def build_softmax(device: str):
  return lambda x: x.softmax(-1)


def build_half(device: str):
  """float16 input, weight and output (half storage; the kernels compute in float or half)."""
  w = Tensor(np.linspace(-1, 1, 8, dtype=np.float16), device=device)
  return lambda x: ((x.float() * w.float()).sum(-1) + x.float().max(-1)).half()


def build_odd(device: str):
  """Extents no work-group size divides (13 x 11 pixels, 10 channels): padded work-groups with guarded tails."""
  Tensor.manual_seed(3)
  conv = nn.Conv2d(5, 10, 3, padding=1, device=device)

  def forward(x):
    h = conv(x).relu()
    return h, (h.mean((2, 3)) + x.sum((1, 2, 3)).reshape(1, 1) * 0.01).softmax(-1)
  return forward


def mlp_case() -> ModelCase:
  x = np.random.default_rng(0).standard_normal((2, 8), dtype=np.float32)
  return ModelCase("mlp", build_mlp, {"x": x})


def cnn_case() -> ModelCase:
  x = np.random.default_rng(1).standard_normal((1, 3, 8, 8), dtype=np.float32)
  return ModelCase("cnn", build_cnn, {"image": x}, output_names=["logits", "features"])


def convnet_case() -> ModelCase:
  x = np.random.default_rng(7).standard_normal((1, 8, 32, 32), dtype=np.float32)
  return ModelCase("convnet", build_convnet, {"image": x})


def two_io_case(input_names=("x", "n"), output_names=None, weight_names=None, name="two_io") -> ModelCase:
  rng = np.random.default_rng(2)
  inputs = {input_names[0]: rng.standard_normal((3, 5), dtype=np.float32),
            input_names[1]: rng.integers(-9, 9, (3,)).astype(np.int32)}
  return ModelCase(name, build_two_io, inputs, output_names=output_names, weight_names=weight_names)


def softmax_case() -> ModelCase:
  return ModelCase("softmax", build_softmax, {"x": np.random.default_rng(3).standard_normal((2, 256), np.float32)})


def odd_case() -> ModelCase:
  x = np.random.default_rng(6).standard_normal((1, 5, 13, 11), dtype=np.float32)
  return ModelCase("odd", build_odd, {"x": x}, output_names=["features", "probs"])


def half_case() -> ModelCase:
  x = np.random.default_rng(4).standard_normal((4, 8)).astype(np.float16)
  return ModelCase("half", build_half, {"x": x}, rtol=1e-2, atol=1e-2)


def hostile_case(inputs=HOSTILE_INPUTS, name: str = 'hostile "model" */ ??/') -> ModelCase:
  """Names that would break generated source if they reached it unsanitized."""
  return two_io_case(inputs, HOSTILE_OUTPUTS, HOSTILE_WEIGHTS, name=name)


def emit_folder(root, case: ModelCase, embed: bool = False, sub: str | None = None, target: str = "c") -> str:
  folder = os.path.join(str(root), sub or re.sub(r"[^A-Za-z0-9_]", "_", case.name) + ("_embed" if embed else ""))
  os.makedirs(folder)
  write_artifact(case.compile(target), folder, embed_weights=embed)
  return folder


def emit_cases(root, cases: dict[str, Callable[[], ModelCase]], target: str) -> dict[str, tuple[ModelCase, str]]:
  """Each case's bundle for `target` in root/<name>: name -> (case, folder)."""
  out = {}
  for name, make_case in cases.items():
    case = make_case()
    out[name] = (case, emit_folder(root, case, sub=name, target=target))
  return out


def copy(folder: str, tmp_path, name: str = "bundle") -> str:
  dst = os.path.join(str(tmp_path), name)
  shutil.copytree(folder, dst)
  return dst


def manifest_of(folder: str) -> dict:
  with open(os.path.join(folder, "manifest.json")) as f: return json.load(f)


def checked_manifest(folder: str, files: set[str], target: str, case: ModelCase) -> dict:
  """The manifest of a bundle folder holding exactly `files`, checked: schema, per-file sha256, target, format
  version and the inputs' original names in order."""
  assert set(os.listdir(folder)) == files
  manifest = manifest_of(folder)
  validate_manifest(manifest)
  assert set(manifest["files"]) == files - {"manifest.json"}
  for fname, digest in manifest["files"].items():
    with open(os.path.join(folder, fname), "rb") as f: assert hashlib.sha256(f.read()).hexdigest() == digest, fname
  assert manifest["target"] == target and manifest["format_version"] == 3
  assert [t["name"] for t in manifest["inputs"]] == list(case.inputs)
  for t in manifest["inputs"] + manifest["outputs"]:
    assert t["npy_dtype"] == VALUE_DTYPES.get(t["tgc_dtype"], t["dtype"]), t
  return manifest


# what the .npy files of a storage-only input or output hold (manifest npy_dtype); other types hold their dtype
VALUE_DTYPES = {"bfloat16": "float32", "float8e4m3fn": "float32", "float8e4m3fnuz": "float32",
                "float8e5m2": "float32", "float8e5m2fnuz": "float32", "float4e2m1": "float32", "int4": "int8",
                "int2": "int8", "uint4": "uint8", "uint2": "uint8"}


def assert_same_files(a: str, b: str) -> None:
  """Two bundle folders hold the same files, byte for byte."""
  assert sorted(os.listdir(a)) == sorted(os.listdir(b))
  for fname in sorted(os.listdir(a)):
    with open(os.path.join(a, fname), "rb") as fa, open(os.path.join(b, fname), "rb") as fb:
      assert fa.read() == fb.read(), fname


def check_write_refusals(cm: CompiledModel, tmp_path, sources: Callable[[CompiledModel], tuple]) -> None:
  """What every bundle writer but c's refuses: embedded weights, a folder that is not empty, and (`sources`: the
  target's `<target>_sources`) a model compiled for another target."""
  with pytest.raises(ValueError, match="not supported for target"):
    write_artifact(cm, str(tmp_path), embed_weights=True)
  (tmp_path / "full").mkdir()
  (tmp_path / "full" / "x").write_text("x")
  with pytest.raises(ValueError, match="not empty"): write_artifact(cm, str(tmp_path / "full"))
  target, cm.target = cm.target, Target.make("c")
  with pytest.raises(ValueError, match=f"target '{target.name}'"): sources(cm)
  cm.target = target


def compare_f16(got: dict[str, np.ndarray], want: dict[str, np.ndarray]) -> None:
  """Outputs of a --precision f16 artifact: within the f16 tolerance of `tgc validate` (each element within
  F16_TOLERANCE of itself plus of the output's largest magnitude), and rounded as float16 arithmetic rounds (not
  float32-exact)."""
  from tgc.aot.validate import F16_TOLERANCE
  assert list(got) == list(want)
  for name in want:
    w = np.asarray(want[name], np.float64)
    diff, scale = np.abs(np.asarray(got[name], np.float64) - w), np.abs(w).max()
    assert (diff <= F16_TOLERANCE * (np.abs(w) + scale)).all(), (name, diff.max() / scale)
    assert diff.max() > 1e-6 * scale, f"{name}: no float16 rounding at all"


def check_params_are_read_as_data(cm: CompiledModel, sources: Callable[[CompiledModel], tuple]) -> None:
  """Writers take a kernel's parameters from what the renderer reported (`KernelProgram.params`), not from its
  source: a reported parameter whose argument the call does not have is refused, naming it."""
  name, k = next(iter(cm.kernels.items()))
  n = len(next(c for c in cm.calls if c.kernel == name).buffers)
  cm.kernels[name] = dataclasses.replace(k, params=k.params + (KernelParam(n, dtypes.float32, False, "const float"),))
  try:
    with pytest.raises(ValueError, match=f"kernel {name}: parameter data{n} has no buffer"): sources(cm)
  finally:
    cm.kernels[name] = k


def tgc(*args):
  """The `tgc` command line run in this process; returns click's result (exceptions other than exit re-raised)."""
  from click.testing import CliRunner
  from tgc.aot.cli import cli
  result = CliRunner().invoke(cli, [str(a) for a in args])
  if result.exception is not None and not isinstance(result.exception, SystemExit): raise result.exception
  return result


def check_cli_round_trip(target: str, tmp_path, files: list[str]) -> None:
  """`tgc compile` of examples/tiny_mlp.py for `target` (writing `files`), then validate, run, bench and inspect of
  the artifact through the command line; --embed-weights is refused for this target and leaves nothing behind."""
  model, out = str(ROOT / "examples" / "tiny_mlp.py") + ":build", tmp_path / "mlp"
  result = tgc("compile", model, "--target", target, "-o", out)
  assert result.exit_code == 0, result.output
  assert f"for {target}" in result.stdout and all((out / name).is_file() for name in files)
  assert manifest_of(str(out))["target"] == target
  result = tgc("validate", out, "--seed", "3")
  assert result.exit_code == 0 and "OK" in result.stdout, result.output
  np.save(tmp_path / "x.npy", np.ones((2, 16), np.float32))
  result = tgc("run", out, "--input", f"features={tmp_path / 'x.npy'}", "-o", tmp_path / "outs.npz")
  assert result.exit_code == 0, result.output
  with np.load(tmp_path / "outs.npz") as outs:
    assert outs.files == ["logits", "probs"] and np.allclose(outs["probs"].sum(-1), 1, atol=1e-5)
  result = tgc("bench", out, "--runs", "3", "--warmup", "1")
  assert result.exit_code == 0 and "median" in result.stdout, result.output
  result = tgc("inspect", out)
  assert result.exit_code == 0 and f"target {target}" in result.stdout, result.output
  result = tgc("compile", model, "--target", target, "--embed-weights", "-o", tmp_path / "embedded")
  assert result.exit_code == 2 and "--embed-weights is not supported for target" in result.stderr
  assert not (tmp_path / "embedded").exists()


def run(cmd: list[str], cwd=None, env=None, check: bool = True) -> subprocess.CompletedProcess:
  result = subprocess.run(cmd, cwd=cwd, env=env, capture_output=True, text=True, timeout=300)
  if check and result.returncode != 0:
    raise AssertionError(f"{' '.join(cmd)} failed ({result.returncode}):\n{result.stdout}\n{result.stderr}")
  return result


def make(folder: str, *args: str) -> None:
  run(["make", "-s", *args], cwd=folder)


def require_tool(tool: str, package: str) -> str:
  path = shutil.which(tool)
  if path is None: pytest.skip(f"{tool} not found: install the Debian package {package}")
  return path


def require_aarch64(tmp_path) -> None:
  """Skip unless the aarch64 cross compiler, its C library headers and qemu-user are present."""
  require_tool("aarch64-linux-gnu-gcc", "gcc-aarch64-linux-gnu")
  require_tool("qemu-aarch64", "qemu-user")
  probe = tmp_path / "probe.c"
  probe.write_text("#include <stdio.h>\nint main(void) { return puts(\"ok\") < 0; }\n")
  r = run(["aarch64-linux-gnu-gcc", str(probe), "-o", str(tmp_path / "probe")], check=False)
  if r.returncode != 0: pytest.skip("aarch64 C library headers missing: install the Debian package "
                                    "libc6-dev-arm64-cross")


def compare(got: dict[str, np.ndarray], want: dict[str, np.ndarray], rtol: float, atol: float) -> None:
  assert list(got) == list(want)
  for name in want:
    assert got[name].dtype == want[name].dtype, name
    assert got[name].shape == want[name].shape, name
    np.testing.assert_allclose(got[name], want[name], rtol=rtol, atol=atol, err_msg=name)


# a C program around a bundle's model.c that counts the calls of the wrapped allocation and file functions
NO_ALLOC = r"""
#include "model.h"
#include <stdio.h>
#include <stdlib.h>

static int in_run = 0, calls = 0;
void *__real_malloc(size_t n);
void *__real_calloc(size_t n, size_t m);
void *__real_realloc(void *p, size_t n);
void __real_free(void *p);
FILE *__real_fopen(const char *path, const char *mode);
static void guard(const char *what) {
  if (in_run) { fprintf(stderr, "%s called inside run\n", what); abort(); }
  calls++;
}
void *__wrap_malloc(size_t n) { guard("malloc"); return __real_malloc(n); }
void *__wrap_calloc(size_t n, size_t m) { guard("calloc"); return __real_calloc(n, m); }
void *__wrap_realloc(void *p, size_t n) { guard("realloc"); return __real_realloc(p, n); }
void __wrap_free(void *p) { guard("free"); __real_free(p); }
FILE *__wrap_fopen(const char *path, const char *mode) { guard("fopen"); return __real_fopen(path, mode); }

int main(void) {
  static double in0[4096], in1[4096], out0[4096], out1[4096];
  const void *ins[2];
  void *outs[2];
  static NAME_ctx ctx;
  int s, before;
  ins[0] = in0; ins[1] = in1; outs[0] = out0; outs[1] = out1;
  if ((s = NAME_init(&ctx, "weights.safetensors", INIT_ARGS)) != 0) { fprintf(stderr, "init: %d\n", s); return 1; }
  before = calls;
  in_run = 1;
  s = NAME_run(&ctx, ins, outs);
  s |= NAME_run(&ctx, ins, outs);
  in_run = 0;
  NAME_free(&ctx);
  printf("%d %d %d\n", s, before, calls);
  return s;
}
"""


def allocations_around_run(folder: str, sym: str, init_args: str, libs: list[str]) -> tuple[int, int, int]:
  """Build the folder's model.c into a program that wraps malloc/calloc/realloc/free/fopen, calls init (with
  `init_args` after the weights path), run twice and free; returns (run status, wrapped calls after init, after
  free). A wrapped call inside run aborts the program."""
  Path(folder, "noalloc.c").write_text(NO_ALLOC.replace("NAME", sym).replace("INIT_ARGS", init_args))
  wraps = ",".join(f"--wrap={fn}" for fn in ("malloc", "calloc", "realloc", "free", "fopen"))
  run(["cc", "-std=c99", "-O2", "noalloc.c", "model.c", f"-Wl,{wraps}", "-o", "noalloc", *libs], cwd=folder)
  status, before, after = map(int, run(["./noalloc"], cwd=folder).stdout.split())
  return status, before, after


def write_inputs(folder: str, inputs: dict[str, np.ndarray]) -> None:
  for spec in manifest_of(folder)["inputs"]:
    np.save(os.path.join(folder, f"{spec['symbol']}.npy"), inputs[spec["name"]])


def run_main(folder: str, inputs: dict[str, np.ndarray], runner: tuple[str, ...] = (), args: tuple[str, ...] = ()):
  write_inputs(folder, inputs)
  run([*runner, "./main", *args], cwd=folder)
  return {spec["name"]: np.load(os.path.join(folder, f"{spec['symbol']}.npy"))
          for spec in manifest_of(folder)["outputs"]}
