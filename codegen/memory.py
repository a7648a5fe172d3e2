"""The memory plan: every intermediate buffer gets an offset in one arena. Buffers whose lifetimes (first to last
kernel that touches them, inclusive) overlap never overlap in memory; others reuse it. Offsets are aligned."""
from __future__ import annotations
from dataclasses import dataclass

ALIGN = 64


@dataclass(frozen=True)
class Slot:
  key: object          # whatever identifies the buffer for the caller
  nbytes: int
  first: int           # index of the first call using it
  last: int            # index of the last call using it
  offset: int


def align(n: int, a: int = ALIGN) -> int: return (n + a - 1) // a * a


def lifetimes(calls: list[list], sizes: dict) -> tuple[dict, dict]:
  """The first and last call index touching each planned buffer."""
  first, last = {}, {}
  for i, bufs in enumerate(calls):
    for b in bufs:
      if b not in sizes: continue
      first.setdefault(b, i)
      last[b] = i
  return first, last


def plan_memory(calls: list[list], sizes: dict) -> tuple[list[Slot], int]:
  """`calls[i]` lists the buffers call i touches; `sizes[b]` their byte sizes (only these are planned).
  Returns the slots and the arena size. Greedy: in order of first use, place each buffer at the lowest offset
  that does not collide with a live buffer (best fit among gaps)."""
  first, last = lifetimes(calls, sizes)
  order = sorted(first, key=lambda b: (first[b], -sizes[b]))
  live: list[Slot] = []
  out: list[Slot] = []
  arena = 0
  for b in order:
    live = [s for s in live if s.last >= first[b]]
    need = align(max(sizes[b], 1))
    spans = sorted((s.offset, s.offset + align(max(s.nbytes, 1))) for s in live)
    best, best_gap, cursor = None, None, 0
    for start, end in spans:
      gap = start - cursor
      if gap >= need and (best_gap is None or gap < best_gap): best, best_gap = cursor, gap
      cursor = max(cursor, end)
    offset = best if best is not None else cursor
    slot = Slot(b, sizes[b], first[b], last[b], offset)
    live.append(slot)
    out.append(slot)
    arena = max(arena, offset + need)
  return out, arena


def plan_slots(calls: list[list], sizes: dict) -> tuple[dict, list[int]]:
  """A plan in whole buffers instead of offsets (for targets such as WebGPU that validate buffer usage per whole
  buffer): buffers whose lifetimes do not overlap share a slot; a slot is as big as its biggest buffer.
  Returns buffer -> slot number and the slot sizes."""
  first, last = lifetimes(calls, sizes)
  slot_of: dict = {}
  slot_size: list[int] = []
  slot_free_at: list[int] = []     # index of the last call using the slot's current buffer
  for b in sorted(first, key=lambda b: (first[b], -sizes[b])):
    free = [s for s in range(len(slot_size)) if slot_free_at[s] < first[b]]
    if free:   # the free slot closest in size (growing a slot costs memory)
      s = min(free, key=lambda s: (abs(slot_size[s] - sizes[b]), s))
      slot_size[s] = max(slot_size[s], sizes[b])
    else:
      s = len(slot_size)
      slot_size.append(sizes[b]); slot_free_at.append(-1)
    slot_of[b] = s
    slot_free_at[s] = last[b]
  return slot_of, slot_size
