"""Loop unswitching for gated loads (C targets). A padded convolution reads its input through gates that say whether
a tap falls inside the image; they depend on the output position and the tap, not on the channel loop that reads
with them. An innermost loop whose gated loads all have gates computed before it is emitted twice:

    if (all gates hold) { the loop with plain loads } else { the loop as it was }

The first copy is the interior of the image (almost every iteration): one basic block of loads and FMAs, nothing
for the compiler to keep apart. The second handles the borders as before.

A gate may be a mask per lane (a vector access past the end of a size known at run time): the copy runs when every
lane holds, a condition read off the mask's form (`r*16 + lane < T` for all 16 lanes is `r*16 + 15 < T`). When such
a mask changes with the loop itself (the vector loop over a softmax row of run-time length), each iteration is
versioned instead: the mask's test is one scalar comparison, true in every iteration but the last. Works on
linearized programs."""
from __future__ import annotations
from tgc.ir import Ops, UOp, dtypes


def unswitch_gated_loops(program: list[UOp]) -> list[UOp]:
  """`program` with each innermost loop that reads through gates versioned on them (see the module docstring)."""
  out: list[UOp] = []
  position = {u: i for i, u in enumerate(program)}
  i = 0
  while i < len(program):
    end = _innermost_end(program, i) if program[i].op is Ops.RANGE else None
    if end is None:
      out.append(program[i])
      i += 1
      continue
    loop = program[i:end + 1]
    if loop[-1].op is not Ops.ENDRANGE:       # the last loop, closed where the program ends: close it here
      loop.append(UOp(Ops.ENDRANGE, dtypes.bool, (program[i],)))
    out += _versioned(loop, position, i)
    i = end + 1
  return out


def _versioned(loop: list[UOp], position: dict[UOp, int], start: int) -> list[UOp]:
  """The loop `RANGE ... ENDRANGE` (at `start` in the program) versioned on its gates, or as it was."""
  gates = _gates(loop[1:-1])
  if not gates: return loop
  if all(position.get(g, len(position)) < start for g in gates):      # all computed before it: version the loop
    test = _every_lane_of(gates, strict=False)
    return [*_new_nodes(test, set(), position, start), UOp(Ops.IF, dtypes.bool, (test,)),
            *_ungated(loop, set(gates)), UOp(Ops.ELSE, dtypes.bool, ()), *loop, UOp(Ops.ENDIF, dtypes.bool, ())]
  if all(g.dtype.count == 1 for g in gates): return loop   # a select per scalar gate costs no more than a branch
  hoisted = _ancestors_inside(gates, loop[1:-1])
  test = _every_lane_of(gates, strict=True)
  if hoisted is None or test is None: return loop
  rest = [u for u in loop[1:-1] if u not in hoisted]
  return [loop[0], *hoisted, *_new_nodes(test, {loop[0], *hoisted}, position, start),
          UOp(Ops.IF, dtypes.bool, (test,)), *_ungated(rest, set(gates)), UOp(Ops.ELSE, dtypes.bool, ()), *rest,
          UOp(Ops.ENDIF, dtypes.bool, ()), loop[-1]]


def _innermost_end(program: list[UOp], start: int) -> int | None:
  """The position of the ENDRANGE closing the loop opened at `start`, when no other loop opens inside it; the
  program's last position for the last loop opened (output loops close where the program ends)."""
  for j in range(start + 1, len(program)):
    if program[j].op in (Ops.RANGE, Ops.IF, Ops.DEFINE_LOCAL, Ops.BARRIER): return None
    if program[j].op is Ops.ENDRANGE: return j if program[j].src[0] is program[start] else None
  return len(program) - 1


def _gate(u: UOp) -> UOp | None:
  """The gate of a gated load or store."""
  if u.op is Ops.LOAD and len(u.src) > 2: return u.src[2]
  if u.op is Ops.STORE and len(u.src) > 3: return u.src[3]
  return None


def _gates(body: list[UOp]) -> list[UOp]:
  """The distinct gates of the body's loads and stores; none when one of them is a constant or a barrier."""
  gates: list[UOp] = []
  for u in body:
    gate = _gate(u)
    if gate is None: continue
    if gate.op in (Ops.CONST, Ops.BARRIER): return []
    if gate not in gates: gates.append(gate)
  return gates


def _ancestors_inside(gates: list[UOp], body: list[UOp]) -> list[UOp] | None:
  """The body's ops the gates are computed from, in program order; None when one is a load (it stays in place)."""
  inside = set(body)
  needed = {a for g in gates for a in g.toposort() if a in inside}
  if any(a.op is Ops.LOAD for a in needed): return None
  return [u for u in body if u in needed]


def _every_lane_of(gates: list[UOp], strict: bool) -> UOp | None:
  """A scalar that holds when every gate holds in every lane; `strict`: None unless it is read off the gates' form
  (no test lane by lane)."""
  parts = [_every_lane(g, strict) for g in gates]
  return None if any(p is None for p in parts) else _all(parts)


def _every_lane(gate: UOp, strict: bool) -> UOp | None:
  """A scalar that holds when every lane of the bool vector `gate` does."""
  if gate.dtype.count == 1: return gate
  # VECTORIZE(g) -> g: a broadcast scalar
  if gate.op is Ops.VECTORIZE and len(set(gate.src)) == 1: return gate.src[0]
  # a & b -> every(a) & every(b)
  if gate.op is Ops.AND:
    a, b = (_every_lane(s, strict) for s in gate.src)
    return None if a is None or b is None else UOp(Ops.AND, dtypes.bool, (a, b))
  # x < y in every lane -> the largest lane of x < the smallest lane of y
  if gate.op is Ops.CMPLT and gate.src[0].dtype.scalar.is_int:
    hi, lo = _lane_bound(gate.src[0], largest=True), _lane_bound(gate.src[1], largest=False)
    if hi is not None and lo is not None: return UOp(Ops.CMPLT, dtypes.bool, (hi, lo))
  if strict: return None
  return _all([UOp(Ops.GEP, dtypes.bool, (gate,), i) for i in range(gate.dtype.count)])


def _all(conditions: list[UOp]) -> UOp:
  """The AND of scalar conditions, in order."""
  test = conditions[0]
  for c in conditions[1:]: test = UOp(Ops.AND, dtypes.bool, (test, c))
  return test


def _lane_bound(x: UOp, largest: bool) -> UOp | None:
  """The largest (or smallest) lane of an integer vector, as a scalar, when its form tells (else None)."""
  if x.op is Ops.VECTORIZE:
    if len(set(x.src)) == 1: return x.src[0]                      # a broadcast
    if all(s.op is Ops.CONST for s in x.src):                      # lane offsets such as 0, 1, ..., 15
      return UOp.const(x.dtype.scalar, (max if largest else min)(s.arg for s in x.src))
  if x.op is Ops.ADD:
    a, b = (_lane_bound(s, largest) for s in x.src)
    if a is not None and b is not None: return UOp(Ops.ADD, x.dtype.scalar, (a, b))
  return None


def _new_nodes(test: UOp, ready: set[UOp], position: dict[UOp, int], start: int) -> list[UOp]:
  """The ops of `test` not computed where it goes (before `start`, or in `ready`), in order; constants are spelled
  where used. Ops are shared (the same op is the same node): one the program computes later is computed here too."""
  return [u for u in test.toposort()
          if u.op is not Ops.CONST and u not in ready and position.get(u, len(position)) >= start]


def _ungated(segment: list[UOp], gates: set[UOp]) -> list[UOp]:
  """The segment with the gates taken as true: gated loads and stores become plain ones, a select on a gate takes
  its first choice, their users are rebuilt."""
  new: dict[UOp, UOp] = {}
  out = []
  for u in segment:
    if u.op is Ops.WHERE and u.src[0] in gates:          # where(gate, a, b) -> a
      new[u] = new.get(u.src[1], u.src[1])
      continue
    src = tuple(new.get(s, s) for s in u.src)
    if _gate(u) in gates: src = src[:2] if u.op is Ops.LOAD else src[:3]
    nu = u if src == u.src else u.replace(src=src)
    new[u] = nu
    out.append(nu)
  return out
