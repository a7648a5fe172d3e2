"""Loop unswitching for gated loads (C targets). A padded convolution reads its input through gates that say whether
a tap falls inside the image; they depend on the output position and the tap, not on the channel loop that reads
with them. An innermost loop whose gated loads all have gates computed before it is emitted twice:

    if (all gates hold) { the loop with plain loads } else { the loop as it was }

The first copy is the interior of the image (almost every iteration): one basic block of loads and FMAs, nothing
for the compiler to keep apart. The second handles the borders as before.

Before that, a whole reduce loop nest whose scalar gates are comparisons of sums of its loops (the taps) and values
from before it (the output position) is versioned the same way on a test that they hold for every tap: the largest
and smallest values of each side, read off the sums, when its innermost loop is at most NEST_INNER_MAX long: an RGB
stem's channel loop (3 channels) is too short to carry a test per tap; over its whole 7x7 window the test is made
once per block of outputs. A longer innermost loop (64 channels) keeps its test per tap.

A gate may be a mask per lane (a vector access past the end of a size known at run time): the copy runs when every
lane holds, a condition read off the mask's form (`r*16 + lane < T` for all 16 lanes is `r*16 + 15 < T`). When such
a mask changes with the loop itself (the vector loop over a softmax row of run-time length), each iteration is
versioned instead: the mask's test is one scalar comparison, true in every iteration but the last. Works on
linearized programs."""
from __future__ import annotations
from tgc.ir import Ops, GroupOp, UOp, AxisType, dtypes
from tgc.ir.symbolic import build_sum, simplify, split_terms
from tgc.codegen.knobs import NEST_INNER_MAX


def unswitch_gated_loops(program: list[UOp]) -> list[UOp]:
  """`program` with each innermost loop that reads through gates versioned on them (see the module docstring)."""
  program = _versioned_nests(program)
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
  if all(position.get(g, start) < start for g in gates):      # all computed before it: version the loop
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


def _versioned_nests(program: list[UOp]) -> list[UOp]:
  """`program` with each outermost reduce loop nest whose scalar gates are affine tests of its loops versioned on
  a test that they hold for every value of those loops (see the module docstring)."""
  out: list[UOp] = []
  position = {u: i for i, u in enumerate(program)}
  i = 0
  while i < len(program):
    u = program[i]
    end = _nest_end(program, i) if u.op is Ops.RANGE and u.arg.kind is AxisType.REDUCE else None
    test = _nest_test(program, i, end, position) if end is not None else None
    if test is None:
      out.append(u)
      i += 1
      continue
    nest, gates = program[i:end + 1], set(_gates(program[i + 1:end]))
    out += [*_new_nodes(test, set(), position, i), UOp(Ops.IF, dtypes.bool, (test,)), *_used(_ungated(nest, gates)),
            UOp(Ops.ELSE, dtypes.bool, ()), *nest, UOp(Ops.ENDIF, dtypes.bool, ())]
    i = end + 1
  return out


def _used(segment: list[UOp]) -> list[UOp]:
  """The segment without the arithmetic nothing in it reads any more (the gates of a copy without gated loads)."""
  read = {s for u in segment for s in u.src}
  kept = [u for u in segment if u.op not in GroupOp.ALU or u in read]
  return kept if len(kept) == len(segment) else _used(kept)


def _nest_end(program: list[UOp], start: int) -> int | None:
  """The position of the ENDRANGE closing the loop opened at `start`, when only loops open inside it."""
  depth = 0
  for j in range(start + 1, len(program)):
    op = program[j].op
    if op in (Ops.IF, Ops.ELSE, Ops.ENDIF, Ops.DEFINE_LOCAL, Ops.BARRIER): return None
    if op is Ops.RANGE: depth += 1
    elif op is Ops.ENDRANGE:
      if depth == 0: return j if program[j].src[0] is program[start] else None
      depth -= 1
  return None


def _nest_test(program: list[UOp], start: int, end: int, position: dict[UOp, int]) -> UOp | None:
  """A scalar that holds only when every gate of the nest program[start..end] holds for all values of its loops
  (each gate an AND of comparisons of sums of the loops and values from before the nest), when some gate depends
  on them (else None: the innermost loops are versioned as before)."""
  body = program[start + 1:end]
  gates = _gates(body)
  loops = {u for u in program[start:end] if u.op is Ops.RANGE}
  inner = [u for u in program[start:end] if u.op is Ops.RANGE][-1]
  if inner.src[0].op is not Ops.CONST or inner.src[0].arg > NEST_INNER_MAX: return None    # it carries its own test
  if not gates or any(g.dtype.count != 1 for g in gates) or \
     not any(n in loops for g in gates for n in g.toposort()):
    return None
  parts = [_throughout(g, loops) for g in gates]
  if any(p is None for p in parts): return None
  test = simplify(_all(parts))
  if test.op is Ops.CONST: return None       # never (a gate of the nest's own loops: r < 2 for r up to 7) or always
  inside = set(program[start:end + 1])      # what the test reads from inside the nest is recomputed before it
  if any(n in inside and n.op in (Ops.RANGE, Ops.LOAD, Ops.DEFINE_ACC, Ops.ASSIGN) for n in test.toposort()):
    return None
  return test


def _throughout(gate: UOp, loops: set[UOp]) -> UOp | None:
  """A scalar that holds only when `gate` holds for every value of `loops` (ranges from 0): an AND of its parts,
  x < y as the largest x < the smallest y, not(x < y) as the largest y < the smallest x + 1; None for other forms."""
  if not any(n in loops for n in gate.toposort()): return gate
  # a & b throughout -> a throughout & b throughout
  if gate.op is Ops.AND:
    a, b = (_throughout(s, loops) for s in gate.src)
    return None if a is None or b is None else UOp(Ops.AND, dtypes.bool, (a, b))
  # not (x < y): y <= x
  if gate.op is Ops.CMPNE and gate.src[1].op is Ops.CONST and gate.src[1].arg is True and \
     gate.src[0].op is Ops.CMPLT and gate.src[0].src[0].dtype.is_int:
    x, y = gate.src[0].src
    hi, lo = _extreme(y, loops, largest=True), _extreme(x, loops, largest=False)
    return None if hi is None or lo is None else UOp(Ops.CMPLT, dtypes.bool, (hi, lo + UOp.const(lo.dtype, 1)))
  if gate.op is Ops.CMPLT and gate.src[0].dtype.is_int:
    hi, lo = _extreme(gate.src[0], loops, largest=True), _extreme(gate.src[1], loops, largest=False)
    return None if hi is None or lo is None else UOp(Ops.CMPLT, dtypes.bool, (hi, lo))
  return None


def _extreme(x: UOp, loops: set[UOp], largest: bool) -> UOp | None:
  """The largest (or smallest) value of integer sum `x` over its loops' values (each from 0 to its constant end
  - 1), as a sum of what it adds besides them; None when x depends on a loop otherwise than by a term of the sum."""
  terms, const = split_terms(x)
  rest: dict[UOp, int] = {}
  for t, c in terms.items():
    if t in loops:
      if t.src[0].op is not Ops.CONST: return None
      const += c * (t.src[0].arg - 1) if (c > 0) == largest else 0
    elif any(n in loops for n in t.toposort()): return None
    else: rest[t] = c
  return build_sum(x.dtype, rest, const)


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
          if u.op is not Ops.CONST and u not in ready and position.get(u, start) >= start]


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
