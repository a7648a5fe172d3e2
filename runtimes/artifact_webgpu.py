"""Running a `webgpu` artifact folder from Python: `WebGPUArtifact` reads its manifest.json and the plan block of
its own model.js (`// tgc:plan begin` ... `// tgc:plan end`: the kernels' WGSL, the buffers, each call's
work-groups and bindings, the expected weights header; see emit/webgpu.py), checks both files against the
manifest's sha256, picks the kernel variant model.js would pick on this device (or the one asked for: `variant`),
and runs that plan the way model.js does, through the `wgpu` package on the device of
`runtimes.webgpu` (lavapipe on a CPU-only machine): one buffer per plan buffer, the weights uploaded once, the
pipelines built once; per run the inputs are written, one command buffer clears the packed outputs each call
writes with atomics, dispatches the calls in order, and the outputs are read back. int64/uint64 tensors are
narrowed to 32-bit words on upload (values must fit) and widened on download, as model.js does; float64 tensors
likewise go through float32. States (the plan's `states`: a KV cache in buffers of their own) are held as model.js
holds them: their length is 0 after load, each run sizes itself from it, a run that would pass a state's capacity is
refused before anything is written, and `held_sizes`, `reset_state` and `state` are the C runner's.

Validation and benchmarks use this, so they exercise the WGSL and buffer plan the browser runs (the JS itself is
exercised by the headless-browser tests). The interface is `runtimes.artifact.Artifact`'s (run, time, close,
context manager). Problems with the artifact or the caller's data raise `ArtifactError` naming the culprit; a machine
without wgpu or an adapter, or a device lacking a feature or limit the model needs, raises `RuntimeUnavailable`."""
from __future__ import annotations
import hashlib
import json
import os
import re

import numpy as np

from tgc.codegen.compiled import Variant
from tgc.runtimes.artifact import Artifact, ArtifactError, held_entries, read_weights
from tgc.codegen.render.wgsl import SIZE_STRIDE, Binding
from tgc.runtimes.dims import DimsError, evaluate_size, grown_lengths
from tgc.runtimes.base import CompileError, RuntimeUnavailable

PLAN_BEGIN, PLAN_END = "// tgc:plan begin", "// tgc:plan end"
PLAN_FORMAT = 2
NARROWED = {"int64": np.int32, "uint64": np.uint32, "float64": np.float32}


def read_plan(model_js: str, where: str = "model.js") -> dict:
  """The plan block of a generated model.js (the same format emit/webgpu.py writes)."""
  begin, end = model_js.find(PLAN_BEGIN + "\n"), model_js.find("\n" + PLAN_END)
  if begin < 0 or end < begin: raise ArtifactError(f"{where}: no tgc plan block ({PLAN_BEGIN} ... {PLAN_END})")
  text = model_js[begin + len(PLAN_BEGIN) + 1:end].strip()
  if not text.startswith("const PLAN = ") or not text.endswith(";"):
    raise ArtifactError(f"{where}: the plan block is not `const PLAN = {{...}};`")
  try:
    plan = json.loads(text[len("const PLAN = "):-1])
  except ValueError as error:
    raise ArtifactError(f"{where}: the plan is not valid JSON ({error})") from None
  if not isinstance(plan, dict) or plan.get("format") != PLAN_FORMAT:
    got = plan.get("format") if isinstance(plan, dict) else None
    raise ArtifactError(f"{where}: plan format {got!r} is not supported (expected {PLAN_FORMAT})")
  return plan


def _limit_key(js_name: str) -> str:
  """maxStorageBuffersPerShaderStage -> max-storage-buffers-per-shader-stage (wgpu's spelling)."""
  return re.sub(r"([A-Z])", lambda m: "-" + m.group(1).lower(), js_name)


def _round4(n: int) -> int: return max(4, (n + 3) // 4 * 4)


class WebGPUArtifact(Artifact):
  """A loaded `webgpu` artifact. `weights_path` overrides the folder's weights file; `runtime` a WebGPURuntime to
  use instead of the shared one. `close` releases the buffers."""
  TARGET = "webgpu"
  KIND = "a WebGPU artifact"

  def __init__(self, folder: str, weights_path: str | None = None, *, runtime=None,
               variant: Variant | str | None = None):
    self._buffers: list = []
    self._sizes_buffer, self._sizes_written = None, None
    self._open(folder)
    model_js = self._checked("model.js")
    self.plan = read_plan(model_js.decode("utf-8"), os.path.join(self.folder, "model.js"))
    weights = self._weights(weights_path)
    if runtime is None:
      from tgc.runtimes import get_runtime
      runtime = get_runtime("webgpu")
    self.runtime = runtime
    self._held = {st["length"]: 0 for st in self.plan.get("states", ())}    # each state's length: 0 after load
    self._check_device()
    self.variant = self._choose_variant(variant)
    # model.js runs the variant's quick kernels until its own have compiled
    self.stand_in = next((v.get("quick") for v in self.plan["variants"] if v["name"] == self.variant), None)
    self._setup(weights)

  # ---- loading ----
  def _weights(self, weights_path: str | None) -> bytes:
    """The weights file, checked as model.js checks it: size, header, sha256."""
    path = os.path.abspath(weights_path or os.path.join(self.folder, self.plan["weightsFile"]))
    data = read_weights(self.folder, self.manifest, weights_path)
    header = self.plan["header"].encode("latin-1")
    if len(data) < 8 + len(header) and data[8:] == header[:len(data) - 8]:
      raise ArtifactError(f"{path}: the weights file is truncated ({len(data)} bytes)")
    if data[:8] != len(header).to_bytes(8, "little") or data[8:8 + len(header)] != header:
      raise ArtifactError(f"{path}: the weights file does not belong to this model (safetensors header differs)")
    if len(data) != self.plan["weightsBytes"]:
      raise ArtifactError(f"{path}: the weights file has {len(data)} bytes, the model expects "
                          f"{self.plan['weightsBytes']}")
    if hashlib.sha256(data).hexdigest() != self.plan["weightsSha256"]:
      raise ArtifactError(f"{path}: the weights file does not belong to this model (sha256 differs)")
    return data

  def _check_device(self) -> None:
    rt = self.runtime
    limits = rt.device.limits
    for name, need in self.plan["limits"].items():
      have = limits.get(_limit_key(name))
      if isinstance(have, int) and have < need:
        raise RuntimeUnavailable(f"webgpu: {rt.device_name} allows {name} = {have}; the model {self.plan['name']!r} "
                                 f"needs {need}")

  def _choose_variant(self, wanted: Variant | str | None) -> Variant:
    """The kernel variant model.js would run on this device (the first whose features it has and whose adapters it
    is: "hardware" excludes software adapters), or `wanted` (a variant's quick companion too: its kernels alone,
    as model.js runs them before the variant's own have compiled)."""
    rt, variants = self.runtime, self.plan["variants"]
    names = [v["name"] for v in variants] + [v["quick"] for v in variants if "quick" in v]
    if wanted is not None and wanted not in names:
      raise ArtifactError(f"{self.folder}/model.js: no kernel variant {str(wanted)!r}; the model has "
                          f"{', '.join(names)}")
    for v in variants:
      if wanted is not None and wanted not in (v["name"], v.get("quick")): continue
      missing = [f for f in v["features"] if f not in rt.features]
      if missing and wanted is not None:
        raise RuntimeUnavailable(f"webgpu: {rt.device_name} lacks the feature {missing[0]!r} the kernel variant "
                                 f"{wanted} of the model {self.plan['name']!r} needs")
      if wanted is not None or (not missing and not (v["adapters"] == "hardware" and rt.software)):
        return Variant(wanted or v["name"])
    raise RuntimeUnavailable(f"webgpu: {rt.device_name} can run none of the kernel variants of the model "
                             f"{self.plan['name']!r} ({', '.join(v['name'] for v in variants)})")

  def _setup(self, weights: bytes) -> None:
    import wgpu
    rt, device = self.runtime, self.runtime.device
    usage = wgpu.BufferUsage.STORAGE | wgpu.BufferUsage.COPY_SRC | wgpu.BufferUsage.COPY_DST
    for b in self.plan["buffers"]:
      self._buffers.append(device.create_buffer(size=int(b["size"]), usage=usage, label=b["label"]))
    for w in self.plan["weights"]:
      raw = np.frombuffer(weights, dtype=np.dtype(w["dtype"]), count=int(np.prod(w["shape"], dtype=np.int64)),
                          offset=w["offset"])
      device.queue.write_buffer(self._buffers[w["buffer"]], 0, self._device_bytes(w, raw, f"weight {w['name']!r}"))
    self._programs = []
    for k in self.plan["kernels"]:
      bindings = [Binding(int(i), f"data{i}", bool(read_only), bool(atomic), "")
                  for i, read_only, atomic in k["bindings"]]
      named = k.get("variants", {})
      wgsl = named.get(self.variant) or named.get(self.variant.blocked) or k["wgsl"]
      try:
        self._programs.append(rt.compile("\n".join(wgsl), k["name"], bindings, tuple(k["workgroupSize"]),
                                         len(k.get("sizes", ()))))
      except CompileError as error:
        raise ArtifactError(f"{self.folder}/model.js: kernel {k['name']} does not compile with the plan's bindings "
                            f"{k['bindings']} and work-group size {k['workgroupSize']}: {error}") from None
    self._calls = []
    for c in self.plan["calls"]:
      prg = self._programs[c["kernel"]]
      entries = [{"binding": b.index, "resource": {"buffer": self._buffers[a], "offset": 0,
                                                   "size": self._buffers[a].size}}
                 for b, a in zip(prg.bindings, c["args"])]
      groups = [device.create_bind_group(layout=prg.layout, entries=entries)] + self._size_groups(prg, c)
      self._calls.append((prg.pipeline, groups, tuple(c["workgroups"]), [self._buffers[i] for i in c["clear"]]))

  def _size_groups(self, prg, call: dict) -> list:
    """Bind group 1 of a call whose kernel reads sizes known only at run time: binding j is the kernel's size j, 4
    bytes of the model's one buffer of sizes (size k at byte k * SIZE_STRIDE), written once per set of sizes."""
    sizes = self.plan["kernels"][call["kernel"]].get("sizes", [])
    if not sizes: return []
    import wgpu
    device = self.runtime.device
    if self._sizes_buffer is None:
      self._sizes_buffer = device.create_buffer(size=SIZE_STRIDE * len(self.plan["dims"]),
                                                usage=wgpu.BufferUsage.UNIFORM | wgpu.BufferUsage.COPY_DST)
    entries = [{"binding": j, "resource": {"buffer": self._sizes_buffer, "offset": SIZE_STRIDE * k, "size": 4}}
               for j, k in enumerate(sizes)]
    return [device.create_bind_group(layout=prg.sizes_layout, entries=entries)]

  # ---- running ----
  @staticmethod
  def _device_bytes(t: dict, arr: np.ndarray, what: str) -> np.ndarray:
    """The bytes of a tensor as the device holds it (64-bit types narrowed), padded to 4 bytes."""
    arr = np.ascontiguousarray(arr).reshape(-1)
    if t["dtype"] == "float64": arr = arr.astype(np.float32)
    elif t["dtype"] in NARROWED:
      words = NARROWED[t["dtype"]]
      info = np.iinfo(words)
      bad = np.flatnonzero((arr < info.min) | (arr > info.max))
      if bad.size:
        raise ArtifactError(f"{what}: value {arr[bad[0]]} at flat index {bad[0]} does not fit in 32 bits (WebGPU "
                            f"computes {t['dtype']} as 32-bit words)")
      arr = arr.astype(words)
    data = arr.view(np.uint8)
    if data.size % 4 or not data.size: data = np.concatenate([data, np.zeros(_round4(data.size) - data.size, np.uint8)])
    return data

  def _host_array(self, t: dict, raw: memoryview, shape: tuple[int, ...]) -> np.ndarray:
    n = int(np.prod(shape, dtype=np.int64))
    if t["dtype"] in NARROWED:
      return np.frombuffer(raw, dtype=NARROWED[t["dtype"]], count=n).astype(t["dtype"]).reshape(shape)
    return np.frombuffer(raw, dtype=np.dtype(t["dtype"]), count=n).reshape(shape).copy()

  @property
  def ready(self) -> bool: return bool(getattr(self, "_buffers", None))

  def _prepare(self, inputs: dict[str, np.ndarray]) -> tuple[dict[str, int], list[np.ndarray]]:
    """The sizes known only at run time that the inputs give (none for fixed shapes), and the inputs' device bytes."""
    arrays = super()._prepare(inputs)
    by_name = {t["name"]: t for t in self.plan["inputs"]}
    return self.input_dims(inputs), [self._device_bytes(by_name[spec["name"]], arr, f"input {spec['name']!r}")
                                     for spec, arr in zip(self.inputs, arrays)]

  def _workgroups_at(self, dims: dict[str, int]) -> list[tuple[int, ...]]:
    """Each call's work-groups for these sizes (the plan's size text evaluated), the sizes' buffer written when they
    changed since the last run."""
    if self._sizes_buffer is not None and self._sizes_written != dims:
      words = np.zeros(SIZE_STRIDE // 4 * len(dims), np.int32)
      words[::SIZE_STRIDE // 4] = [dims[d["name"]] for d in self.plan["dims"]]
      self.runtime.device.queue.write_buffer(self._sizes_buffer, 0, words)
      self._sizes_written = dict(dims)
    return [tuple(evaluate_size(n, dims) for n in workgroups) for _, _, workgroups, _ in self._calls]

  def _execute(self, prepared: tuple[dict[str, int], list[np.ndarray]]) -> dict[str, np.ndarray]:
    device, (dims, inputs) = self.runtime.device, prepared
    try: grown = grown_lengths(self.plan, dims)
    except DimsError as error: raise ArtifactError(f"{self.folder}: {error}") from None
    for t, data in zip(self.plan["inputs"], inputs):
      device.queue.write_buffer(self._buffers[t["buffer"]], 0, data)
    encoder = device.create_command_encoder()
    for (pipeline, groups, _, clear), workgroups in zip(self._calls, self._workgroups_at(dims)):
      for buf in clear: encoder.clear_buffer(buf)
      cpass = encoder.begin_compute_pass()
      cpass.set_pipeline(pipeline)
      for i, group in enumerate(groups): cpass.set_bind_group(i, group)
      cpass.dispatch_workgroups(*workgroups)
      cpass.end()
    device.queue.submit([encoder.finish()])
    self._held.update(grown)
    out = {}
    for t, spec in zip(self.plan["outputs"], self.specs_at(dims)[1]):
      raw = device.queue.read_buffer(self._buffers[t["buffer"]])
      out[t["name"]] = self._host_array(t, raw, tuple(spec["shape"]))
    return out

  # ---- states ----
  def held_sizes(self) -> dict[str, int]:
    """Each state's length now (0 after load, grown by each run), by the name of the size it is."""
    return dict(self._held)

  def reset_state(self, length: int = 0) -> None:
    """Set every state's length (0: start a new sequence; shorter forgets entries, longer takes what the buffer
    holds)."""
    capacity = min(st["capacity"] for st in self.plan["states"])
    if not 0 <= length <= capacity:
      raise ArtifactError(f"{self.folder}: reset_state({length}): a state's length is 0 to its capacity {capacity}")
    self._held = dict.fromkeys(self._held, length)

  def state(self, i: int) -> np.ndarray:
    """A copy of the entries state i holds now (its length along its growing dim)."""
    st = self.plan["states"][i]
    raw = self.runtime.device.queue.read_buffer(self._buffers[st["buffer"]])
    return held_entries(st, self._host_array(st, raw, tuple(st["shape"])), self._held[st["length"]])

  def close(self) -> None:
    for buf in getattr(self, "_buffers", []):
      try:
        buf.destroy()
      except Exception:
        pass
    if getattr(self, "_sizes_buffer", None) is not None: self._sizes_buffer.destroy()
    self._buffers, self._calls, self._sizes_buffer = [], [], None
