"""What every artifact writer shares: the model checked and its weights file built (`bundle_start`), the kernels'
parameters (`Param`), the tensor tables and header documentation of the C-family host libraries (`host_values`),
the kernel file of a device bundle (`kernel_file`), launch sizes checked (`launch_sizes`), the weight table with
CRC-32s, the manifest's kernel arguments (`bundle_manifest`) and the folder written with manifest.json last
(`write_bundle`). Model names reach generated text only through `comment_safe` (comments) and `c_string` (string
literals)."""
from __future__ import annotations
import zlib
from dataclasses import dataclass
from typing import Callable

from tgc.ir import lowp
from tgc.ir.sint import dims_text, highest, is_static
from tgc.codegen.compiled import BufferInfo, BufferKind, CompiledModel
from tgc.codegen.lower import KernelProgram
from tgc.codegen.memory import ALIGN as ARENA_ALIGN
from tgc.codegen.names import comment_safe, symbol
from tgc.codegen.registry import target_spec
from tgc.emit.c_literals import c_bytes, c_string
from tgc.emit.common import check_empty_dir, fill, numpy_name, read_template, tgc_version, write_files
from tgc.emit.manifest import MANIFEST, build_manifest, manifest_bytes
from tgc.emit.weights import WeightSpec, WeightsFile, build_weights_file

WEIGHTS_FILE = "weights.safetensors"
NAN_KINDS = {"ieee": 0, "all_ones": 1, "neg_zero": 2, "none": 3}    # lowp_type.nan_kind in common/npy.c.tmpl


@dataclass(frozen=True)
class Param:
  index: int          # position in a call's buffer list
  ctype: str          # element type as spelled in the signature, "const float" for read-only
  @property
  def mutable(self) -> bool: return not self.ctype.startswith("const ")


def kernel_params(k: KernelProgram) -> list[Param]:
  """The buffer parameters of a rendered kernel, in signature order."""
  return [Param(p.index, p.spelled) for p in k.params]


def bundle_start(cm: CompiledModel, target: str,
                 check: Callable[[CompiledModel], None] | None = None) -> tuple[str, WeightsFile]:
  """What every bundle writer begins with: the model checked (compiled for `target`; names unique; then `check`),
  its API symbol and its weights file."""
  if cm.target.name != target:
    raise ValueError(f"the {target_spec(target).title} bundle needs a model compiled for target {target!r}, not "
                     f"{cm.target.name!r}")
  _check_names(cm)
  if check is not None: check(cm)
  specs = [WeightSpec(b.name, b.symbol, b.dtype, b.shape, cm.weights[b.name]) for b in cm.of_kind(BufferKind.WEIGHT)]
  return symbol(cm.name, None, "m"), build_weights_file(specs)


def _check_names(cm: CompiledModel) -> None:
  for kind in (BufferKind.INPUT, BufferKind.OUTPUT, BufferKind.WEIGHT):
    seen: set[str] = set()
    for b in cm.of_kind(kind):
      if b.name in seen: raise ValueError(f"model {cm.name!r}: duplicate {kind} name {b.name!r}")
      seen.add(b.name)


# ---- the host libraries' documentation and tensor tables ----
def _dims(b: BufferInfo) -> str: return "".join(f"[{s}]" for s in dims_text(b.shape)) or "(scalar)"


def io_doc(cm: CompiledModel) -> str:
  """model.h's list of the inputs and outputs: index, symbol, type, shape, bytes and original name."""
  lines, rows = [], cm.meta.get("output_rows", {})
  symbols = {b.name: b.symbol for b in cm.outputs}
  for title, bufs, outputs in (("Inputs (inputs[i])", cm.inputs, False), ("Outputs (outputs[i])", cm.outputs, True)):
    lines.append(f"   {title}:" if bufs else f"   {title}: none")
    for i, b in enumerate(bufs):
      lines.append(f"     {i}: {b.symbol}  {numpy_name(b.dtype)}{_dims(b)}  {b.nbytes} bytes{_at_most(b)}  "
                   f"original name \"{comment_safe(b.name)}\"")
      if outputs and b.name in rows:
        lines.append(f"        (a run fills its first {symbols[rows[b.name]]} rows; the rest are zeros)")
  return "\n".join(lines)


def _at_most(b: BufferInfo) -> str: return "" if is_static(b.shape) else " at most"


def dims_doc(cm: CompiledModel) -> str:
  """model.h's list of the sizes known only at run time, with their ranges."""
  if not cm.dims: return ""
  rows = [f"     {i}: {name}  {lo}..{hi}" for i, (name, (lo, hi)) in enumerate(cm.dims.items())]
  return "\n   Sizes known at run time (dims[i] of set_dims; shapes above name them):\n" + "\n".join(rows)


def dim_table(cm: CompiledModel) -> str:
  """The rows `{name, lowest, highest}` of the host library's table of sizes known only at run time."""
  rows = [f"  {{{c_string(name)}, {lo}, {hi}}}" for name, (lo, hi) in cm.dims.items()]
  return ",\n".join(rows) if rows else "  {NULL, 0, 0}"


def lowp_table() -> str:
  """The rows of the example programs' table of storage-only types (templates/common/npy.c.tmpl `lowp_type`), from
  ir.lowp's formats."""
  rows = []
  for dt, f in lowp.FORMATS.items():
    rows.append(f"  {{{c_string(dt.name)}, {f.bits}, {f.exp_bits}, {f.man_bits}, {f.bias}, 0x{f.max_mag:x}UL, "
                f"0x{f.nan[0]:x}UL, 0x{f.nan[1]:x}UL, {NAN_KINDS[f.nan_kind]}, {int(f.neg_zero)}, 0}}")
  for dt in lowp.INT_RANGES:
    rows.append(f"  {{{c_string(dt.name)}, {dt.elem_bits}, 0, 0, 0, 0UL, 0UL, 0UL, 3, 1, {int(not dt.is_unsigned)}}}")
  return ",\n".join(rows)


def tensor_tables(cm: CompiledModel) -> dict[str, str]:
  """The host library's tables of inputs and outputs (names, symbols, types, ranks, dims, sizes)."""
  dims: list[int] = []
  out = {"lowp_table": lowp_table()}
  for key, bufs in (("input_types", cm.inputs), ("output_types", cm.outputs)):
    out[key] = ", ".join(c_string(b.dtype.name) for b in bufs) or "NULL"
  # per output, the position of the output counting the rows a run fills of it (manifest.json's rows), or -1
  rows, names = cm.meta.get("output_rows", {}), [b.name for b in cm.outputs]
  out["output_rows"] = ", ".join(str(names.index(rows[b.name]) if b.name in rows else -1) for b in cm.outputs) or "-1"
  for key, bufs in (("input_table", cm.inputs), ("output_table", cm.outputs)):
    rows = []
    for b in bufs:
      rows.append(f"  {{{c_string(b.name)}, {c_string(b.symbol)}, {c_string(numpy_name(b.dtype))}, {len(b.shape)}, "
                  f"{len(dims)}, {b.nbytes}, {b.dtype.itemsize}}}")
      dims.extend(highest(s) for s in b.shape)     # a size known only at run time: its largest value
    out[key] = ",\n".join(rows) if rows else "  {NULL, NULL, NULL, 0, 0, 0, 1}"
  out["dims"] = ", ".join(str(d) for d in dims + [0])
  return out


def host_values(cm: CompiledModel, sym: str, weights: WeightsFile, counts: dict[str, int]) -> dict[str, str]:
  """The placeholder values every host library fills: names, documentation, sizes, the weights header, the tensor
  tables, and for each count `num_<key>` and `<key>_len` (at least 1: C arrays are never empty)."""
  values = {"sym": sym, "SYM": sym.upper(), "version": tgc_version(), "model_comment": f"\"{comment_safe(cm.name)}\"",
            "io_doc": io_doc(cm) + dims_doc(cm), "arena_bytes": str(cm.arena_bytes),
            "weights_bytes": str(len(weights.data)),
            "header_len": str(len(weights.header)), "header_bytes": c_bytes(weights.header)}
  values.update({f"num_{key}": str(n) for key, n in counts.items()})
  values.update({f"{key}_len": str(max(n, 1)) for key, n in counts.items()})
  values.update(tensor_tables(cm))
  return values


def weight_rows(cm: CompiledModel, weights: WeightsFile) -> list[str]:
  """The weight table rows of the device loaders: offset and size in weights.safetensors and the CRC-32 of the bytes
  (`{offset, nbytes, crc}`, one per weight tensor, in the plan's order)."""
  stored = {t.name: t for t in weights.tensors}
  rows = []
  for b in cm.of_kind(BufferKind.WEIGHT):
    t = stored[b.name]
    crc = zlib.crc32(weights.data[t.offset:t.offset + t.nbytes]) & 0xffffffff
    rows.append(f"  {{{t.offset}, {t.nbytes}, 0x{crc:08x}UL}},  /* {b.symbol} */")
  return rows


# ---- kernels and launches ----
def kernel_parts(cm: CompiledModel) -> tuple[str, str]:
  """Each prefix line of the kernels once (first use order), and the kernels, as the device kernel files hold them."""
  prefix: list[str] = []
  for k in cm.kernels.values():
    prefix.extend(line for line in k.prefix if line not in prefix)
  return "".join(line + "\n" for line in prefix), "\n".join(k.function.rstrip() + "\n" for k in cm.kernels.values())


def kernel_file(cm: CompiledModel, template: str) -> str:
  """The text of a device bundle's kernel file from `template` (templates/<target>/model.<ext>.tmpl): each prefix
  line of the kernels once (first use order), then the kernels."""
  kernel_prefix, kernels = kernel_parts(cm)
  values = {"model_comment": f"\"{comment_safe(cm.name)}\"", "version": tgc_version(), "kernel_prefix": kernel_prefix,
            "kernels": kernels}
  return fill(read_template(cm.target.name, template), values, f"templates/{cm.target.name}/{template}")


def launch_sizes(k: KernelProgram) -> tuple[list[int], list[int]]:
  """Global and local size of a kernel's launch, checked: three dimensions, global a multiple of local (a size known
  only at run time at its largest value)."""
  glob, loc = [highest(g) for g in k.global_size], [int(s) for s in k.local_size]
  if len(glob) != 3 or len(loc) != 3 or any(s < 1 or g % s for g, s in zip(glob, loc)):
    raise ValueError(f"kernel {k.name}: global size {glob} is not a multiple of local size {loc}")
  return glob, loc


def wrap_call(kernel: str, args: list[str], width: int = 118) -> str:
  """`  kernel(arg, arg, ...);` broken after commas so that lines stay within `width` characters."""
  lines, line = [], f"  {kernel}("
  indent = " " * len(line)
  for i, arg in enumerate(args):
    piece = arg + (");" if i == len(args) - 1 else ",")
    if len(line) + len(piece) + 1 > width and line.strip() and not line.endswith("("):
      lines.append(line.rstrip())
      line = indent
    line += piece + ("" if i == len(args) - 1 else " ")
  if not args: line += ");"
  return "\n".join(lines + [line])


# ---- the manifest and the folder ----
def _arg_dtype(cm: CompiledModel, kernel: str, index: int) -> str:
  call = next(c for c in cm.calls if c.kernel == kernel)
  return numpy_name(cm.buffers[call.buffers[index]].dtype)


def bundle_manifest(cm: CompiledModel, sym: str, weights: WeightsFile, params: dict[str, list[Param]],
                    files: dict[str, bytes], info: dict, embed_weights: bool = False) -> dict:
  """The manifest of a bundle with kernel arguments from the parsed signatures and `info` as its target_info."""
  kernel_args = {name: [{"index": p.index, "dtype": _arg_dtype(cm, name, p.index), "mutable": p.mutable}
                        for p in ps] for name, ps in params.items()}
  return build_manifest(cm, sym, weights, WEIGHTS_FILE, embed_weights, kernel_args, files, info)


def device_manifest(cm: CompiledModel, sym: str, weights: WeightsFile, params: dict[str, list[Param]],
                    files: dict[str, bytes], info: dict) -> dict:
  """The manifest of a device bundle (weights in WEIGHTS_FILE, never embedded): `info` over the target_info fields
  every device host library shares."""
  shared = {"api_prefix": sym, "header": "model.h", "embed_weights": False, "arena_alignment": ARENA_ALIGN}
  return bundle_manifest(cm, sym, weights, params, files, {**shared, **info})


def write_bundle(out_dir: str, sources: Callable[[], tuple[dict[str, bytes], dict]]) -> list[str]:
  """Write the files and manifest `sources()` gives into the existing empty folder `out_dir` (checked first);
  manifest.json last. Returns the paths written."""
  check_empty_dir(out_dir)
  files, manifest = sources()
  return write_files(out_dir, files) + write_files(out_dir, {MANIFEST: manifest_bytes(manifest)})
