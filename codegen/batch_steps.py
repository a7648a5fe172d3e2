"""Reductions of an unrolled loop batched over its steps. When several reductions compute the same expression of one
slice each of the same tensor along one axis (x[t] @ W for each step t of a Loop or Scan body the ONNX importer
unrolled, a Keras LSTM's input projection), they become one reduction over all those slices: a matmul that reads W
once instead of once per step, and each step reads its row of the result. A recurrent state is no such slice (h[t] is
computed from h[t-1], not cut from one tensor), so what is batched is the work that does not depend on the
recurrence. The graph is rewritten before the scheduler splits it into kernels."""
from __future__ import annotations
from tgc.ir import Ops, GroupOp, UOp, provenance, substitute
from tgc.codegen.knobs import BATCH_MAX_SPAN

MAX_REGION = 64   # a reduction computing more nodes than this in its kernel is not looked at (compile time: the state
                  # of an LSTM is elementwise from one step to the next, so a step's region can reach back to step 0)
_BOUNDARY = (Ops.BUFFER, Ops.CONST, Ops.REDUCE_AXIS, Ops.CONTIGUOUS, Ops.ARANGE)


def batch_sliced_reductions(roots: list[UOp]) -> list[UOp]:
  """`roots` with every group of reductions that differ only in which slice they read (`_step_slices`) computed as
  one batched reduction, each member replaced by its slice of the result."""
  for _ in range(8):     # a batched group may read another group's members (stacked layers): replace until none is left
    mapping = _batch_groups(roots)
    if not mapping: return roots
    roots = [substitute(r, mapping) for r in roots]
  return roots


def _batch_groups(roots: list[UOp]) -> dict[UOp, UOp]:
  """Member reduction -> its slice of the batched reduction, for every group found in the graph of `roots`."""
  order = list({n: None for r in roots for n in r.toposort()})
  groups: dict[tuple, list[tuple[int, UOp]]] = {}
  for r in (n for n in order if n.op is Ops.REDUCE_AXIS):
    for s, axis in _step_slices(r):
      canon = _canonical(s, axis)
      groups.setdefault((_rebuild(r, s, canon), canon, axis), []).append((s.arg[axis][0], r))
  mapping: dict[UOp, UOp] = {}
  for (key, canon, axis), members in groups.items():
    steps = sorted(t for t, _ in members)
    lo, hi = steps[0], steps[-1] + 1
    # members share every operand but their slice (the key is the same node), so no member can be computed from
    # another: the batched reduction never reads its own results
    if len(steps) < 2 or hi - lo > BATCH_MAX_SPAN * len(steps) or any(r in mapping for _, r in members): continue
    batched = _batched(key, canon, axis, lo, hi)
    if batched is None: continue
    for t, r in members:
      view = UOp(Ops.SHRINK, r.dtype, (batched,), ((t - lo, t - lo + 1),) + tuple((0, d) for d in r.shape))
      mapping[r] = UOp(Ops.RESHAPE, r.dtype, (view,), r.shape)
      provenance.inherit(mapping[r], r)
  return mapping


def _is_cut(n: UOp) -> int | None:
  """The axis a SHRINK cuts a single index out of, keeping all of every other axis (x[t]); None for anything else."""
  if n.op is not Ops.SHRINK: return None
  cut = [i for i, ((b, e), d) in enumerate(zip(n.arg, n.src[0].shape)) if (b, e) != (0, d)]
  return cut[0] if len(cut) == 1 and n.arg[cut[0]][1] - n.arg[cut[0]][0] == 1 else None


def _region(r: UOp) -> list[UOp] | None:
  """The nodes a reduction computes in its own kernel, down to buffers, constants, other reductions and cut slices
  (what a slice is cut from is no business of the reduction); None when there are more than MAX_REGION."""
  out, seen, stack = [], set(), [r.src[0]]
  while stack:
    n = stack.pop()
    if n in seen: continue
    seen.add(n)
    out.append(n)
    if len(out) > MAX_REGION: return None
    if n.op not in _BOUNDARY and _is_cut(n) is None: stack.extend(n.src)
  return out


def _step_slices(r: UOp) -> list[tuple[UOp, int]]:
  """The cut slices (`_is_cut`) of `r`'s region with their axes: each may be the step a group of reductions varies."""
  return [(n, a) for n in _region(r) or () if (a := _is_cut(n)) is not None]


def _canonical(s: UOp, axis: int) -> UOp:
  """The slice `s` moved to index 0 of its axis: what every member of a group reads in the same place."""
  arg = tuple((0, 1) if i == axis else be for i, be in enumerate(s.arg))
  return UOp(Ops.SHRINK, s.dtype, s.src, arg)


def _depends(r: UOp, s: UOp) -> set[UOp]:
  """The nodes of `r`'s kernel (itself included) computed from `s`."""
  region = set(_region(r) or ())
  memo: dict[UOp, bool] = {s: True}
  stack = [(r, False)]
  while stack:     # post-order without recursion: a kernel's elementwise chain can be deep
    n, ready = stack.pop()
    if n in memo: continue
    inside = n is r or (n in region and n.op not in _BOUNDARY and _is_cut(n) is None)
    if inside and not ready:
      stack.append((n, True))
      stack.extend((x, False) for x in n.src if x not in memo)
      continue
    memo[n] = inside and any(memo.get(x, False) for x in n.src)
  return {n for n, d in memo.items() if d}


def _rebuild(r: UOp, s: UOp, leaf: UOp) -> UOp:
  """`r` with the nodes computed from `s` rebuilt, `leaf` in place of `s`."""
  deps = _depends(r, s)
  memo: dict[UOp, UOp] = {s: leaf}

  def build(n: UOp) -> UOp:
    if n not in memo:
      memo[n] = n if n not in deps else n.replace(src=tuple(build(x) for x in n.src))
      provenance.inherit(memo[n], n)
    return memo[n]
  return build(r)


def _batched(key: UOp, canon: UOp, axis: int, lo: int, hi: int) -> UOp | None:
  """The reduction `key` for steps lo..hi-1 at once, the step a new leading axis; None for an op it cannot carry."""
  x, steps = canon.src[0], hi - lo
  cut = tuple((lo, hi) if i == axis else (0, d) for i, d in enumerate(x.shape))
  moved = UOp(Ops.PERMUTE, x.dtype, (UOp(Ops.SHRINK, x.dtype, (x,), cut),),
              (axis,) + tuple(i for i in range(len(x.shape)) if i != axis))
  start = UOp(Ops.RESHAPE, x.dtype, (moved,), (steps,) + canon.shape)
  deps = _depends(key, canon)
  memo: dict[UOp, UOp | None] = {canon: start}

  def build(n: UOp) -> UOp | None:
    if n in memo: return memo[n]
    if n not in deps:      # the same for every step: broadcast along the new axis
      one = UOp(Ops.RESHAPE, n.dtype, (n,), (1,) + n.shape)
      return UOp(Ops.EXPAND, n.dtype, (one,), (steps,) + n.shape)
    src = [build(x) for x in n.src]
    memo[n] = None if any(x is None for x in src) else _with_step_axis(n, tuple(src), steps)
    if memo[n] is not None: provenance.inherit(memo[n], n)
    return memo[n]
  return build(key)


def _with_step_axis(n: UOp, src: tuple[UOp, ...], steps: int) -> UOp | None:
  """Node `n` over sources that carry a leading step axis of `steps`."""
  if n.op in GroupOp.Elementwise: return n.replace(src=src)
  arg = n.arg
  if n.op in (Ops.RESHAPE, Ops.EXPAND): arg = (steps,) + tuple(arg)
  elif n.op is Ops.PERMUTE: arg = (0,) + tuple(p + 1 for p in arg)
  elif n.op is Ops.PAD: arg = ((0, 0),) + tuple(arg)
  elif n.op is Ops.SHRINK: arg = ((0, steps),) + tuple(arg)
  elif n.op is Ops.FLIP: arg = tuple(a + 1 for a in arg)
  elif n.op is Ops.REDUCE_AXIS: arg = (arg[0], tuple(a + 1 for a in arg[1]))
  else: return None
  return n.replace(src=src, arg=arg)
