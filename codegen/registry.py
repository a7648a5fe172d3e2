"""The registry of targets: one `TargetSpec` per kernel language, found by its name.

A spec says everything the layers need to know about a target: its renderer class, the code that writes and runs its
artifacts, its launch limits and what it lacks. Every built-in target declares its spec as `TARGET` in its renderer
module (`codegen/render/<language>.py`); the registry finds them by reading those modules, so adding a target adds no
line here. Layers above codegen name their parts of a spec as "module:attribute" text (the emitter, the eager runtime,
the artifact runner), imported by the layer that uses them when first asked (`load`): codegen never imports upward,
and a runtime's optional dependencies (pyopencl, wgpu, cuda-python) matter only to its own target. A target defined
elsewhere (a plug-in, a test) calls `register` with objects or texts; nothing else in the tree branches on a
target's name."""
from __future__ import annotations
import importlib
import pkgutil
from dataclasses import dataclass, field
from typing import Any

RENDER_PACKAGE = "tgc.codegen.render"


@dataclass(frozen=True)
class TargetSpec:
  """A target: its name (`--target`, the manifest's `target`, a Tensor device), its title in messages ("OpenCL"), and
  its parts. `renderer`: the CStyleRenderer subclass of its kernel language; `emitter`: writes an artifact folder
  (`emitter(cm, out_dir, **options)` -> paths written); `runtime`: the eager Runtime class (Tensor devices, the ONNX
  backend); `artifact`: the runtimes.artifact.Artifact subclass that loads its artifacts. Each part is the object or
  "module:attribute" text."""
  name: str
  title: str
  renderer: Any
  emitter: Any
  artifact: Any = None
  runtime: Any = None
  cpu: bool = False                    # kernels for a CPU level (`--cpu`): grid axes are loops, threads, SIMD vectors
  limits: dict = field(default_factory=dict)            # codegen.target.Target fields of its devices (launch limits)
  artifact_limits: dict = field(default_factory=dict)   # more Target fields for artifacts (WebGPU: narrowed types)
  lacks_float64: bool = False          # no float64 arithmetic on any device of the target
  emit_options: tuple[str, ...] = ()   # keyword options its emitter takes (c: "embed_weights")
  run_options: tuple[str, ...] = ()    # keyword options its artifact runner takes (c: "threads", "profile")
  aliases: tuple[str, ...] = ()        # more device names for it (the ONNX backend's "CPU", "cl", ...)
  run_time_sizes: bool = False         # its artifacts take sizes known only at run time (ir.sint Variables)
  states: bool = False                 # its artifacts keep states between runs (a KV cache appended in place)


_specs: dict[str, TargetSpec] = {}
_found = False


def register(spec: TargetSpec) -> TargetSpec:
  """Add (or replace) a target; returns the spec."""
  _discover()
  _specs[spec.name] = spec
  return spec


def unregister(name: str) -> None:
  """Remove a target registered with `register` (tests)."""
  _specs.pop(name, None)


def target_spec(name: str) -> TargetSpec:
  """The spec of a target by name; ValueError naming the known ones otherwise."""
  _discover()
  if name not in _specs: raise ValueError(f"no target {name!r}; known: {', '.join(target_names())}")
  return _specs[name]


def target_names() -> tuple[str, ...]:
  """The registered targets' names: the built-in ones in the renderer modules' order, then others as registered."""
  _discover()
  return tuple(_specs)


def load(part: Any) -> Any:
  """A spec's part itself: a "module:attribute" text is imported (once, by Python's module cache)."""
  if not isinstance(part, str): return part
  module, _, attribute = part.partition(":")
  return getattr(importlib.import_module(module), attribute)


def _discover() -> None:
  """Read the `TARGET` spec of every renderer module, once."""
  global _found
  if _found: return
  _found = True
  package = importlib.import_module(RENDER_PACKAGE)
  for info in sorted(pkgutil.iter_modules(package.__path__), key=lambda m: m.name):
    spec = getattr(importlib.import_module(f"{RENDER_PACKAGE}.{info.name}"), "TARGET", None)
    if isinstance(spec, TargetSpec): _specs.setdefault(spec.name, spec)
