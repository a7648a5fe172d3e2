"""Pieces every artifact writer shares: the tgc version, sha256 of bytes, dtype names, reading and filling the
target templates (`{{name}}` placeholders, one pass, every placeholder must be given) and writing the bundle's
files into an existing empty folder in a fixed order.

A template line that is exactly `{{> dir/file}}` is replaced by the text of templates/dir/file when the template
is read (before placeholders are filled), so that targets share fragments such as the .npy reader of the example
programs (templates/common/) instead of copies."""
from __future__ import annotations
import hashlib
import importlib.metadata
import importlib.resources
import os
import re

from tgc.ir import DType
from tgc.codegen.compiled import BufferInfo, BufferKind, CompiledModel
from tgc.codegen.names import comment_lines

PLACEHOLDER = re.compile(r"\{\{([A-Za-z_][A-Za-z0-9_]*)\}\}")
INCLUDE = re.compile(r"^\{\{> ([A-Za-z0-9_.-]+/[A-Za-z0-9_.-]+)\}\}\n", re.MULTILINE)
MAX_INCLUDE_DEPTH = 8


def tgc_version() -> str:
  """The installed distribution's version (part of the manifest, so no build metadata or dates)."""
  try:
    return importlib.metadata.version("tgc")
  except importlib.metadata.PackageNotFoundError:
    return "0+unknown"


def sha256(data: bytes) -> str: return hashlib.sha256(data).hexdigest()


def numpy_name(d: DType) -> str:
  """The numpy dtype name of the storage of `d` (storage-only types are held in unsigned integers)."""
  return d.np


def read_template(target: str, filename: str, depth: int = 0) -> str:
  """The text of templates/<target>/<filename> (package data of the `templates` package), with `{{> dir/file}}`
  lines replaced by the fragments they name."""
  text = (importlib.resources.files("tgc.templates") / target / filename).read_text(encoding="utf-8")
  if depth > MAX_INCLUDE_DEPTH: raise ValueError(f"templates/{target}/{filename}: includes nested too deeply")
  return INCLUDE.sub(lambda m: read_template(*m.group(1).split("/"), depth=depth + 1), text)


def fill(template: str, values: dict[str, str], where: str = "template") -> str:
  """Replace every `{{name}}` by values[name] in one pass (inserted text is never scanned again)."""
  missing = sorted({m.group(1) for m in PLACEHOLDER.finditer(template)} - set(values))
  if missing: raise KeyError(f"{where}: no value for placeholder(s) {', '.join(missing)}")
  return PLACEHOLDER.sub(lambda m: values[m.group(1)], template)


def check_empty_dir(out_dir: str) -> None:
  if not os.path.isdir(out_dir): raise ValueError(f"output folder {out_dir!r} does not exist")
  if os.listdir(out_dir): raise ValueError(f"output folder {out_dir!r} is not empty")


def write_files(out_dir: str, files: dict[str, bytes]) -> list[str]:
  """Write `files` (name -> content) in sorted name order; returns the paths written."""
  paths = []
  for name in sorted(files):
    path = os.path.join(out_dir, name)
    with open(path, "wb") as f: f.write(files[name])
    paths.append(path)
  return paths


def buffer_label(b: BufferInfo) -> str:
  """How generated source names a buffer in comments: inputs, outputs and weights by their model names."""
  return b.symbol if b.kind is BufferKind.ARENA else f"{b.kind} {b.name!r}"


def call_comment(cm: CompiledModel, n: int, indent: str = "  ") -> str:
  """`//` lines before call `n` in a host loader: the model nodes it computes and the buffer of each argument."""
  c = cm.calls[n]
  nodes = ", ".join(str(o) for o in c.nodes) or "no model node (a copy)"
  args = ", ".join(f"d{i} = {buffer_label(cm.buffers[b])}" for i, b in enumerate(c.buffers))
  return comment_lines(f"call {n}: {nodes}; {args}", indent)
