"""What a WGSL module declares, read from its text: for tests that check the renderer's reported facts
(`KernelProgram.params`, `local_size`) against the source it wrote. tgc itself never parses WGSL."""
from __future__ import annotations
import re

_BINDING_RE = re.compile(r"@group\(0\)\s*@binding\((\d+)\)\s*var<storage,\s*(read|read_write)>\s*(\w+)\s*:\s*"
                         r"array<(atomic<u32>|[\w<>]+)>;")
_WORKGROUP_RE = re.compile(r"@compute\s+@workgroup_size\((\d+),\s*(\d+),\s*(\d+)\)\s*fn\s+(\w+)")


def declared_bindings(src: str) -> list[list]:
  """[binding index, read-only, atomic, element type] of every storage binding, by index."""
  out = [[int(m[1]), m[2] == "read", m[4] == "atomic<u32>", m[4]] for m in _BINDING_RE.finditer(src)]
  return sorted(out)


def workgroup_sizes(src: str) -> dict[str, tuple[int, int, int]]:
  """Entry point name -> its @workgroup_size."""
  return {m[4]: (int(m[1]), int(m[2]), int(m[3])) for m in _WORKGROUP_RE.finditer(src)}


def reported_bindings(prg) -> list[list]:
  """The same list from what the renderer reports (`KernelProgram.params`)."""
  return [[p.index, not p.mutable, p.atomic, p.spelled] for p in prg.params]
