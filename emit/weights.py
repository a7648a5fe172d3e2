"""The weights file: safetensors written by hand so that the layout is ours. Every tensor's data starts at a
multiple of 16 bytes from the start of the file, which lets a loader use the bytes in place (mmap, a copy from
`malloc`, or `.incbin` read-only data) with no repacking.

safetensors requires the tensors to cover the data section exactly (no gaps; checked by the reference library),
so alignment is reached in a format-legal way: the JSON header is padded with trailing spaces (as the reference
writer does) until the data section starts at a multiple of 16, and a tensor whose size is not a multiple of 16 is
followed by a filler tensor `__pad_<n>` (uint8, shape [k], zero bytes) that readers ignore. Tensors are stored
in plan order; header keys are sorted, ASCII-only (`\\u` escapes) and compact: the file is deterministic."""
from __future__ import annotations
import json
import struct
from dataclasses import dataclass

import numpy as np

from tgc.ir import DType

ALIGN = 16
PAD_PREFIX = "__pad_"
METADATA = {"format": "tgc", "alignment": str(ALIGN), "padding": f"{PAD_PREFIX}<n> tensors are alignment filler"}
SAFETENSORS_DTYPE = {"bool": "BOOL", "int8": "I8", "uint8": "U8", "int16": "I16", "uint16": "U16", "int32": "I32",
                     "uint32": "U32", "int64": "I64", "uint64": "U64", "float16": "F16", "float32": "F32",
                     "float64": "F64"}


@dataclass(frozen=True)
class WeightSpec:
  """One weight to store: original name, sanitized symbol, tgc dtype, shape and its data."""
  name: str
  symbol: str
  dtype: DType
  shape: tuple[int, ...]
  data: np.ndarray


@dataclass(frozen=True)
class StoredTensor:
  name: str
  symbol: str
  dtype: str             # numpy name of the stored elements
  tgc_dtype: str
  shape: tuple[int, ...]
  offset: int            # from the start of the file; a multiple of ALIGN
  nbytes: int


@dataclass(frozen=True)
class WeightsFile:
  data: bytes                     # the whole file
  header: bytes                   # the first `len(header)` bytes: 8-byte length + padded JSON
  tensors: tuple[StoredTensor, ...]


def _tensor_bytes(w: WeightSpec) -> tuple[bytes, str]:
  want = np.dtype(w.dtype.np)
  arr = np.asarray(w.data)
  if arr.dtype != want:
    if arr.dtype.itemsize == want.itemsize and arr.dtype.kind in "iu" and want.kind in "iu": arr = arr.view(want)
    else: arr = arr.astype(want)
  arr = np.ascontiguousarray(arr.reshape(w.shape)).astype(want.newbyteorder("<"), copy=False)
  return arr.tobytes(), want.name


def build_weights_file(weights: list[WeightSpec]) -> WeightsFile:
  """Lay out `weights` in order, 16-byte aligned, and serialize the file."""
  names = {w.name for w in weights}
  if len(names) != len(weights):
    dup = sorted({w.name for w in weights if sum(v.name == w.name for v in weights) > 1})
    raise ValueError(f"duplicate weight name(s): {', '.join(repr(d) for d in dup)}")
  if "__metadata__" in names: raise ValueError("weight name '__metadata__' is reserved by the safetensors format")
  header: dict[str, object] = {"__metadata__": METADATA}
  chunks: list[bytes] = []
  stored: list[tuple[WeightSpec, str, int, int]] = []   # spec, numpy name, data offset, nbytes
  cursor, pads = 0, 0
  for w in weights:
    data, npname = _tensor_bytes(w)
    if npname not in SAFETENSORS_DTYPE: raise ValueError(f"weight {w.name!r}: dtype {npname} has no safetensors type")
    header[w.name] = {"dtype": SAFETENSORS_DTYPE[npname], "shape": list(w.shape),
                      "data_offsets": [cursor, cursor + len(data)]}
    stored.append((w, npname, cursor, len(data)))
    chunks.append(data)
    cursor += len(data)
    gap = -cursor % ALIGN
    if gap and w is not weights[-1]:
      while f"{PAD_PREFIX}{pads}" in names: pads += 1
      header[f"{PAD_PREFIX}{pads}"] = {"dtype": "U8", "shape": [gap], "data_offsets": [cursor, cursor + gap]}
      pads += 1
      chunks.append(bytes(gap))
      cursor += gap
  text = json.dumps(header, sort_keys=True, separators=(",", ":"), ensure_ascii=True).encode("ascii")
  text += b" " * (-(8 + len(text)) % ALIGN)
  head = struct.pack("<Q", len(text)) + text
  tensors = tuple(StoredTensor(w.name, w.symbol, npname, w.dtype.name, tuple(w.shape), len(head) + off, n)
                  for w, npname, off, n in stored)
  return WeightsFile(head + b"".join(chunks), head, tensors)
