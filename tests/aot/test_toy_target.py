"""A target defined in this one file and registered at run time (codegen.registry): the whole pipeline — `tgc
compile`'s code, the artifact folder with its manifest, `validate` against the independent reference — goes
through its registry entry, with nothing in the tree naming it.

The toy target "toyc" renders kernels as C (a CRenderer subclass) and writes an artifact that is only the kernels'
sources and a launch plan as JSON beside the weights; its artifact runner compiles each kernel with the C runtime
and runs the plan from Python, each intermediate in a buffer of its own."""
from __future__ import annotations
import json
import os

import numpy as np
import pytest

from tgc.codegen.compiled import BufferKind, CompiledModel
from tgc.codegen.registry import TargetSpec, register, target_names, unregister
from tgc.codegen.render import get_renderer
from tgc.codegen.render.c import CRenderer
from tgc.codegen.target import Target
from tgc.emit.bundle import WEIGHTS_FILE, bundle_manifest, bundle_start, kernel_params, write_bundle
from tgc.runtimes import get_runtime
from tgc.runtimes.artifact import Artifact, ArtifactError
from tgc.aot.artifact import open_artifact, runner_class
from tgc.aot.compile import compile_model
from tgc.aot.errors import UserError
from tgc.aot.validate import validate_artifact

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
TINY_MLP = os.path.join(ROOT, "examples", "tiny_mlp.py") + ":build"
PLAN = "plan.json"


class ToyRenderer(CRenderer):
  """C kernels, for a host that runs a JSON launch plan."""
  language = "toyc"


def write_toy_bundle(cm: CompiledModel, out_dir: str) -> list[str]:
  """kernels' sources and the launch plan (each call: kernel, global size, arguments as [kind, index] in signature
  order) in plan.json, the weights, the manifest."""
  def sources():
    sym, weights = bundle_start(cm, "toyc")
    params = {name: kernel_params(k) for name, k in cm.kernels.items()}
    calls = [{"kernel": c.kernel, "global_size": list(cm.kernels[c.kernel].global_size),
              "args": [[cm.buffers[c.buffers[p.index]].kind, cm.buffers[c.buffers[p.index]].index]
                       for p in params[c.kernel]]} for c in cm.calls]
    plan = {"kernels": {name: k.src for name, k in cm.kernels.items()}, "calls": calls,
            "arena": {b.index: b.nbytes for b in cm.of_kind(BufferKind.ARENA)}}
    files = {PLAN: json.dumps(plan, sort_keys=True).encode(), WEIGHTS_FILE: weights.data}
    return files, bundle_manifest(cm, sym, weights, params, files, {"plan": PLAN})
  return write_bundle(out_dir, sources)


class ToyArtifact(Artifact):
  """Runs a toyc artifact: kernels compiled by the C runtime, launched in plan order from Python."""
  TARGET, KIND = "toyc", "a toyc artifact"

  def __init__(self, folder, weights_path: str | None = None):
    self._open(folder)
    self.rt = get_runtime("c")
    self.plan = json.loads(self._checked(PLAN))
    self.programs = {name: self.rt.compile(src, name) for name, src in self.plan["kernels"].items()}
    data = self.files.weights(weights_path)
    self.buffers = {}
    for i, t in enumerate(self.manifest["weights"]["tensors"]):
      self.buffers["weight", i] = self._upload(np.frombuffer(data, np.uint8, t["nbytes"], t["offset"]))
    for index, nbytes in self.plan["arena"].items():
      self.buffers["arena", int(index)] = self.rt.alloc(max(int(nbytes), 1))
    for i, spec in enumerate(self.outputs): self.buffers["output", i] = self.rt.alloc(max(spec["nbytes"], 1))
    self.open = True

  def _upload(self, data: np.ndarray):
    buf = self.rt.alloc(max(data.nbytes, 1))
    if data.nbytes: self.rt.copyin(buf, data)
    return buf

  @property
  def ready(self) -> bool: return self.open

  def _execute(self, prepared) -> dict[str, np.ndarray]:
    bufs = dict(self.buffers)
    for i, arr in enumerate(prepared): bufs["input", i] = self._upload(arr.reshape(-1).view(np.uint8))
    for call in self.plan["calls"]:
      self.programs[call["kernel"]](*(bufs[kind, index] for kind, index in call["args"]),
                                    global_size=tuple(call["global_size"]))
    return {spec["name"]: self.rt.copyout(bufs["output", i]).view(spec["dtype"]).reshape(spec["shape"])
            for i, spec in enumerate(self.outputs)}

  def close(self) -> None: self.open = False


TOY = TargetSpec("toyc", "Toy", ToyRenderer, write_toy_bundle, artifact=ToyArtifact, cpu=True)


@pytest.fixture
def toy_target():
  register(TOY)
  try: yield TOY
  finally: unregister(TOY.name)


def test_toy_target_compiles_runs_and_validates(toy_target, tmp_path):
  assert "toyc" in target_names()
  assert isinstance(get_renderer(Target.make("toyc")), ToyRenderer)
  out = str(tmp_path / "toy")
  report = compile_model(TINY_MLP, "toyc", out)
  assert report.target == "toyc" and sorted(os.listdir(out)) == ["manifest.json", PLAN, WEIGHTS_FILE]
  art = open_artifact(out)                       # the manifest passes the schema; every file its sha256
  assert art.target == "toyc" and runner_class("toyc") is ToyArtifact
  result = validate_artifact(out, seed=3)        # against the numpy interpreter of the un-scheduled graph
  assert result.ok and [c.name for c in result.checks] == ["logits", "probs"]


def test_toy_target_refuses_what_its_spec_lacks(toy_target, tmp_path):
  with pytest.raises(UserError, match="--embed-weights is not supported for target toyc"):
    compile_model(TINY_MLP, "toyc", str(tmp_path / "a"), embed_weights=True)
  out = str(tmp_path / "b")
  compile_model(TINY_MLP, "toyc", out)
  with open(os.path.join(out, "manifest.json")) as f: manifest = json.load(f)
  manifest["target"] = "c"
  with open(os.path.join(out, "manifest.json"), "w") as f: json.dump(manifest, f)
  with pytest.raises(ArtifactError, match="is not a toyc artifact"): ToyArtifact(out)


def test_unregistered_target_is_unknown(tmp_path):
  assert "toyc" not in target_names()
  with pytest.raises(UserError, match="target toyc is not supported"): compile_model(TINY_MLP, "toyc", str(tmp_path))
