"""Tensor size limits at compile time: a tensor beyond what kernels can index (2**31 - 1 elements) or beyond
`--max-bytes` is refused with one line naming it (exit 2) before anything of its size is allocated: ONNX inputs are
traced as placeholders without data, the importer checks every node's outputs, trace every buffer and reduction.
The CLI runs in a subprocess whose address space is capped far below the tensors involved, so any allocation of
their size would end it with a MemoryError (an internal error, exit 3) instead."""
from __future__ import annotations
import os
import subprocess
import sys
import textwrap
from pathlib import Path

import numpy as np
import onnx
import pytest
from onnx import TensorProto, helper, numpy_helper

from tgc.ir import dtypes
from tgc.frontend.limits import MAX_ELEMENTS, SizeLimits, TensorTooLarge
from tgc.aot import models
from tgc.aot.errors import UserError
from tgc.aot.compile import build_compiled

ROOT = Path(__file__).resolve().parents[2]
ADDRESS_SPACE = 3 << 30     # bytes of virtual memory the capped CLI may map (python, numpy, onnx, the C compiler)


def _save(tmp_path: Path, name: str, nodes, inputs, outputs, inits=(), opset=17) -> str:
  graph = helper.make_graph(nodes, name, inputs, outputs, list(inits))
  path = str(tmp_path / f"{name}.onnx")
  onnx.save(helper.make_model(graph, opset_imports=[helper.make_opsetid("", opset)]), path)
  return path


def capped_tgc(*args: str, cwd: Path) -> subprocess.CompletedProcess:
  """`tgc ARGS` in a subprocess limited to ADDRESS_SPACE bytes of memory."""
  code = textwrap.dedent(f"""
    import resource, sys
    resource.setrlimit(resource.RLIMIT_AS, ({ADDRESS_SPACE}, {ADDRESS_SPACE}))
    from tgc.aot.cli import main
    main(sys.argv[1:])
  """)
  env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(ROOT), os.environ.get("PYTHONPATH", "")])}
  return subprocess.run([sys.executable, "-c", code, *args], cwd=cwd, capture_output=True, text=True, env=env,
                        timeout=300)


def one_line_refusal(result: subprocess.CompletedProcess, *words: str) -> str:
  assert result.returncode == 2, (result.returncode, result.stderr[-2000:])
  lines = result.stderr.strip().splitlines()
  assert len(lines) == 1, result.stderr
  for w in words: assert w in lines[0], (w, lines[0])
  return lines[0]


def test_size_limits():
  limits = SizeLimits(max_bytes=1000)
  assert limits.problem((10, 25), dtypes.float32) is None                 # exactly 1000 bytes
  assert "over the limit of 1000 bytes" in limits.problem((10, 26), dtypes.float32)
  assert limits.problem((2000,), dtypes.int4) is None                     # packed: 1000 bytes
  assert limits.problem((2001,), dtypes.int4) is not None
  big = SizeLimits(max_bytes=1 << 50)
  assert big.problem((MAX_ELEMENTS,), dtypes.uint8) is None
  assert "32-bit" in big.problem((MAX_ELEMENTS + 1,), dtypes.uint8)
  with pytest.raises(TensorTooLarge, match=r"^input 'x': shape \[1, 2147483648\] has 2147483648 elements"):
    big.check("input 'x'", (1, 2**31), dtypes.int64)


def test_huge_input_refused_without_allocating(tmp_path):
  """The issue's mutated model: an int64 input declared [1, 2147483648] (16 GiB)."""
  path = _save(tmp_path, "huge_input", [helper.make_node("Add", ["x", "x"], ["y"])],
               [helper.make_tensor_value_info("x", TensorProto.INT64, [1, 2**31])],
               [helper.make_tensor_value_info("y", TensorProto.INT64, [1, 2**31])])
  one_line_refusal(capped_tgc("compile", path, "-o", "out", cwd=tmp_path), "input 'x'", "2147483648 elements")
  assert not (tmp_path / "out").exists()


def test_large_input_is_traced_without_its_data(tmp_path):
  """A 3.2 GB input and output compile in a process that cannot map 3 GiB: tracing allocates neither."""
  path = _save(tmp_path, "large", [helper.make_node("Relu", ["x"], ["y"])],
               [helper.make_tensor_value_info("x", TensorProto.FLOAT, [4, 200_000_000])],
               [helper.make_tensor_value_info("y", TensorProto.FLOAT, [4, 200_000_000])])
  result = capped_tgc("compile", path, "-o", "out", cwd=tmp_path)
  assert result.returncode == 0, result.stderr[-2000:]
  assert "input         x (4, 200000000) float32" in result.stdout


def test_huge_intermediates_name_the_node(tmp_path):
  shape = numpy_helper.from_array(np.array([70000, 70000], np.int64), "shape")
  expand = _save(tmp_path, "expand", [helper.make_node("Expand", ["x", "shape"], ["big"], name="grow"),
                                      helper.make_node("ReduceSum", ["big"], ["y"], keepdims=0)],
                 [helper.make_tensor_value_info("x", TensorProto.FLOAT, [1, 70000])],
                 [helper.make_tensor_value_info("y", TensorProto.FLOAT, [])], [shape])
  one_line_refusal(capped_tgc("compile", expand, "-o", "out", cwd=tmp_path), "node 'grow' (Expand) output 'big'",
                   "4900000000 elements")
  # a constant subgraph (computed at compile time): refused from its inferred shape before its handler runs
  scalars = [numpy_helper.from_array(np.array(v, np.int64), n) for n, v in (("s", 0), ("l", 1 << 40), ("d", 1))]
  ranged = _save(tmp_path, "range", [helper.make_node("Range", ["s", "l", "d"], ["r"], name="count"),
                                     helper.make_node("ReduceMax", ["r"], ["m"], keepdims=0),
                                     helper.make_node("Add", ["x", "m"], ["y"])],
                 [helper.make_tensor_value_info("x", TensorProto.INT64, [2])],
                 [helper.make_tensor_value_info("y", TensorProto.INT64, [2])], scalars)
  one_line_refusal(capped_tgc("compile", ranged, "-o", "out", cwd=tmp_path), "node 'count' (Range) output 'r'")


def test_max_bytes_option(tmp_path):
  path = _save(tmp_path, "relu", [helper.make_node("Relu", ["x"], ["y"])],
               [helper.make_tensor_value_info("x", TensorProto.FLOAT, ["n", 1000])],
               [helper.make_tensor_value_info("y", TensorProto.FLOAT, ["n", 1000])])
  line = one_line_refusal(capped_tgc("compile", path, "-o", "out", "--input-shape", "x=1000000,1000",
                                     "--max-bytes", "1GiB", cwd=tmp_path), "input 'x'", "--max-bytes")
  assert "4000000000 bytes" in line
  ok = capped_tgc("compile", path, "-o", "out", "--input-shape", "x=2,1000", "--max-bytes", "8000", cwd=tmp_path)
  assert ok.returncode == 0, ok.stderr
  one_line_refusal(capped_tgc("compile", path, "-o", "out2", "--input-shape", "x=3,1000", "--max-bytes", "8000",
                              cwd=tmp_path), "input 'x'", "12000 bytes")
  one_line_refusal(capped_tgc("compile", path, "-o", "out2", "--max-bytes", "lots", cwd=tmp_path), "--max-bytes")


TENSOR_MODELS = """
import numpy as np
from tgc import Tensor
N = 70000


def big_intermediate():
  def fn(x): return (x.reshape(1, N).expand(N, N) + 1).contiguous().sum()
  return fn, [Tensor(np.ones(N, np.float32))]


def big_reduction():
  def fn(x): return x.reshape(1, N).expand(N, N).sum()
  return fn, [Tensor(np.ones(N, np.float32))]


def big_matmul():   # its broadcast product has 1300**3 > 2**31 elements, but no tensor or reduction is that big
  w = Tensor(np.ones((1300, 1300), np.float32))
  def fn(x): return x @ w
  return fn, [Tensor(np.ones((1300, 1300), np.float32))]
"""


def test_tensor_api_limits(tmp_path):
  (tmp_path / "m.py").write_text(TENSOR_MODELS)
  one_line_refusal(capped_tgc("compile", "m.py:big_intermediate", "-o", "out", cwd=tmp_path),
                   "an intermediate tensor", "4900000000 elements")
  one_line_refusal(capped_tgc("compile", "m.py:big_reduction", "-o", "out", cwd=tmp_path),
                   "a reduction over 4900000000 elements")
  cm, _ = build_compiled(models.parse_model_spec(str(tmp_path / "m.py") + ":big_matmul"), "c")
  assert [b.shape for b in cm.outputs] == [(1300, 1300)]
  with pytest.raises(UserError, match="over the limit"):
    build_compiled(models.parse_model_spec(str(tmp_path / "m.py") + ":big_matmul"), "c", max_bytes=1 << 20)
