"""`manifest.json`: the description of an artifact that tools read instead of the sources (format version, model,
inputs/outputs with original names and symbols, weights file and per-tensor layout, arena, kernels, call order
and the sha256 of every other file; `dims`: the sizes known only at run time, with their ranges, that shapes
name; `states`: what the artifact keeps from one run to the next). The JSON Schema it follows ships next to this module
(`emit/manifest.schema.json`); `validate_manifest` checks a manifest against it. Serialization is deterministic:
sorted keys, two-space indent, ASCII only, one trailing newline."""
from __future__ import annotations
import importlib.resources
import json

from tgc.ir import DType, lowp
from tgc.ir.sint import dims_text, render
from tgc.codegen.compiled import BufferInfo, BufferKind, CompiledModel
from tgc.emit.common import numpy_name, sha256, tgc_version
from tgc.emit.weights import ALIGN, WeightsFile

FORMAT_VERSION = 3
MANIFEST = "manifest.json"
SCHEMA = "manifest.schema.json"


def _tensor(b: BufferInfo) -> dict:
  return {"name": b.name, "symbol": b.symbol, "shape": dims_text(b.shape), "dtype": numpy_name(b.dtype),
          "tgc_dtype": b.dtype.name, "npy_dtype": npy_name(b.dtype), "nbytes": b.nbytes}


def rows_entry(cm: CompiledModel, b: BufferInfo) -> dict:
  """An output padded to its largest length whose leading rows are its value, their number decided by the run:
  the output holding that number (a Loop's scan output, the loop's condition computed on the device)."""
  rows = cm.meta.get("output_rows", {}).get(b.name)
  return {"rows": rows} if rows else {}


def _state(b: BufferInfo, st) -> dict:
  return {"name": st.input, "output": st.output, "symbol": b.symbol, "shape": list(b.shape),
          "dtype": numpy_name(b.dtype), "tgc_dtype": b.dtype.name, "axis": st.axis, "length": st.length.arg[0],
          "grown": render(st.grown), "offset": b.offset, "nbytes": b.nbytes}


def _small(cm: CompiledModel, name: str) -> dict:
  """A kernel's variant for small sizes (codegen/size_variants.py): when it runs, its launch size and opts."""
  if name not in cm.small_variants: return {}
  small, extent, block = cm.small_variants[name]
  return {"small_sizes": {"name": small.name, "when": f"2*{render(extent)}<={block}",
                          "global_size": dims_text(small.global_size), "opts": [o.to_json() for o in small.opts]}}


def npy_name(d: DType) -> str:
  """The numpy dtype name of the values users read and write for an input or output (`npy_dtype`)."""
  return lowp.value_numpy(d).name if d.storage_only else numpy_name(d)


def build_manifest(cm: CompiledModel, model_symbol: str, weights: WeightsFile, weights_file: str, embedded: bool,
                   kernel_args: dict[str, list[dict]], files: dict[str, bytes], target_info: dict) -> dict:
  """The manifest of a bundle whose other files are `files` (name -> content, the weights file included)."""
  kinds = {i: (b.kind, b.index) for i, b in enumerate(cm.buffers)}
  extra = {"source": cm.meta["source"]} if cm.meta.get("source") else {}
  return {**extra,
    "format_version": FORMAT_VERSION,
    "tgc_version": tgc_version(),
    "target": cm.target.name,
    "model": {"name": cm.name, "symbol": model_symbol},
    **({"dims": [{"name": n, "min": lo, "max": hi} for n, (lo, hi) in cm.dims.items()]} if cm.dims else {}),
    **({"states": [_state(b, st) for b, st in zip(cm.of_kind(BufferKind.STATE), cm.states)]} if cm.states else {}),
    "inputs": [_tensor(b) for b in cm.inputs],
    "outputs": [{**_tensor(b), **rows_entry(cm, b)} for b in cm.outputs],
    "weights": {
      "file": weights_file, "sha256": sha256(weights.data), "nbytes": len(weights.data), "alignment": ALIGN,
      "header_bytes": len(weights.header), "embedded": embedded,
      "tensors": [{"name": t.name, "symbol": t.symbol, "dtype": t.dtype, "tgc_dtype": t.tgc_dtype,
                   "shape": list(t.shape), "offset": t.offset, "nbytes": t.nbytes} for t in weights.tensors]},
    "arena_bytes": cm.arena_bytes,
    "arena_buffers": [{"index": b.index, "symbol": b.symbol, "offset": b.offset, "nbytes": b.nbytes,
                       "shape": dims_text(b.shape), "dtype": numpy_name(b.dtype), "tgc_dtype": b.dtype.name}
                      for b in cm.of_kind(BufferKind.ARENA)],
    "kernels": [{"name": name, "global_size": dims_text(k.global_size), "local_size": list(k.local_size),
                 "ops": k.ops, "bytes": k.bytes, "opts": [o.to_json() for o in k.opts],
                 "tuned": name in cm.meta.get("tuned", ()), "args": kernel_args[name],
                 "nodes": [{"name": o.name, "op": o.op} for o in cm.kernel_nodes(name)], **_small(cm, name)}
                for name, k in cm.kernels.items()],
    "calls": [{"kernel": c.kernel, "args": [{"kind": kinds[i][0], "index": kinds[i][1]} for i in c.buffers],
               "nodes": list(dict.fromkeys(o.name for o in c.nodes))} for c in cm.calls],
    "files": {name: sha256(data) for name, data in sorted(files.items())},
    "target_info": target_info,
  }


def manifest_bytes(manifest: dict) -> bytes:
  return (json.dumps(manifest, sort_keys=True, indent=2, ensure_ascii=True) + "\n").encode("ascii")


def load_schema() -> dict:
  return json.loads((importlib.resources.files("tgc.emit") / SCHEMA).read_text(encoding="utf-8"))


def validate_manifest(manifest: dict) -> None:
  """Raise ValueError naming the first place where `manifest` breaks the schema."""
  import jsonschema
  try:
    jsonschema.validate(manifest, load_schema())
  except jsonschema.ValidationError as error:
    where = "/".join(str(p) for p in error.absolute_path) or "(top level)"
    raise ValueError(f"manifest.json: {where}: {error.message}") from None
