"""Helpers of the artifact tests: small models built on any device (the numpy device gives the independent
reference), compiling a traced model to a `CompiledModel` for target c, writing its bundle, running `make` and
C programs, and the cross toolchain check."""
from __future__ import annotations
import os
import re
import shutil
import subprocess
from dataclasses import dataclass
from typing import Callable

import numpy as np
import pytest

from codegen.compiled import CompiledModel, compile_schedule
from emit import write_artifact
from frontend import Tensor
from frontend import nn
from frontend.jit import trace

C_WARNINGS = ("-std=c99", "-Wall", "-Wextra", "-pedantic", "-Werror")


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

  def compile(self) -> CompiledModel:
    fn = self.build("c")
    cap = trace(fn, *[Tensor(v, device="c") for v in self.inputs.values()], input_names=list(self.inputs),
                output_names=self.output_names)
    weights = list(cap.weights.items())
    names = self.weight_names or [f"w{i}" for i in range(len(weights))]
    assert len(names) == len(weights), f"{self.name}: {len(weights)} weights, {len(names)} names"
    return compile_schedule(self.name, "c", cap.items, [(s.name, b) for s, b in cap.inputs],
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


def mlp_case() -> ModelCase:
  x = np.random.default_rng(0).standard_normal((2, 8), dtype=np.float32)
  return ModelCase("mlp", build_mlp, {"x": x})


def cnn_case() -> ModelCase:
  x = np.random.default_rng(1).standard_normal((1, 3, 8, 8), dtype=np.float32)
  return ModelCase("cnn", build_cnn, {"image": x}, output_names=["logits", "features"])


def two_io_case(input_names=("x", "n"), output_names=None, weight_names=None, name="two_io") -> ModelCase:
  rng = np.random.default_rng(2)
  inputs = {input_names[0]: rng.standard_normal((3, 5), dtype=np.float32),
            input_names[1]: rng.integers(-9, 9, (3,)).astype(np.int32)}
  return ModelCase(name, build_two_io, inputs, output_names=output_names, weight_names=weight_names)


def emit_folder(root, case: ModelCase, embed: bool = False, sub: str | None = None) -> str:
  folder = os.path.join(str(root), sub or re.sub(r"[^A-Za-z0-9_]", "_", case.name) + ("_embed" if embed else ""))
  os.makedirs(folder)
  write_artifact(case.compile(), folder, embed_weights=embed)
  return folder


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
