"""Loop unswitching for gated loads (C targets). A padded convolution reads its input through gates that say whether
a tap falls inside the image; they depend on the output position and the tap, not on the channel loop that reads
with them. An innermost loop whose gated loads all have gates computed before it is emitted twice:

    if (all gates hold) { the loop with plain loads } else { the loop as it was }

The first copy is the interior of the image (almost every iteration): one basic block of loads and FMAs, nothing
for the compiler to keep apart. The second handles the borders as before. Works on linearized programs."""
from __future__ import annotations
from tgc.ir import Ops, UOp, dtypes


def unswitch_gated_loops(program: list[UOp]) -> list[UOp]:
  """`program` with each innermost loop that reads through loop-invariant gates versioned on them."""
  out: list[UOp] = []
  position = {u: i for i, u in enumerate(program)}
  i = 0
  while i < len(program):
    u = program[i]
    end = _innermost_end(program, i) if u.op is Ops.RANGE else None
    gates = _invariant_gates(program[i + 1:end], position, i) if end is not None else []
    if not gates:
      out.append(u)
      i += 1
      continue
    cond = gates[0]
    for g in gates[1:]:
      cond = UOp(Ops.AND, dtypes.bool, (cond, g))
      out.append(cond)
    out += [UOp(Ops.IF, dtypes.bool, (cond,)), *_ungated(program[i:end + 1], set(gates)),
            UOp(Ops.ELSE, dtypes.bool, ()), *program[i:end + 1], UOp(Ops.ENDIF, dtypes.bool, ())]
    i = end + 1
  return out


def _innermost_end(program: list[UOp], start: int) -> int | None:
  """The position of the ENDRANGE closing the loop opened at `start`, when no other loop opens inside it."""
  for j in range(start + 1, len(program)):
    if program[j].op in (Ops.RANGE, Ops.IF, Ops.DEFINE_LOCAL, Ops.BARRIER): return None
    if program[j].op is Ops.ENDRANGE: return j if program[j].src[0] is program[start] else None
  return None


def _invariant_gates(body: list[UOp], position: dict[UOp, int], start: int) -> list[UOp]:
  """The distinct gates of the body's loads, if every one of them is computed before the loop (else none)."""
  gates: list[UOp] = []
  for u in body:
    if u.op is Ops.LOAD and len(u.src) > 2:
      gate = u.src[2]
      # a mask per lane (a masked vector load) is no condition an if can test
      if gate.op is Ops.CONST or gate.dtype.count > 1 or position.get(gate, len(position)) > start: return []
      if gate not in gates: gates.append(gate)
  return gates


def _ungated(segment: list[UOp], gates: set[UOp]) -> list[UOp]:
  """The loop with the gates taken as true: gated loads become plain loads, their users are rebuilt."""
  new: dict[UOp, UOp] = {}
  out = []
  for u in segment:
    src = tuple(new.get(s, s) for s in u.src)
    if u.op is Ops.LOAD and len(src) > 2 and u.src[2] in gates: src = src[:2]
    nu = u if src == u.src else u.replace(src=src)
    new[u] = nu
    out.append(nu)
  return out
