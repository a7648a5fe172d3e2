"""Hand-coded opt choices (the default when BEAM is off). The goal on CPUs is register reuse: upcast the output
axes that some input is broadcast along (matmul's M and N), so loaded values are shared across accumulators.
On GPU-like targets a LOCAL split also sizes the work-group."""
from __future__ import annotations
from tgc.ir import Ops, UOp, AxisType
from tgc.codegen.opts import Kernel, Opt, OptError
from tgc.codegen.target import Target

G, R = (AxisType.GLOBAL,), (AxisType.REDUCE,)


def _loads(k: Kernel) -> list[UOp]: return [n for n in k.ast.toposort() if n.op is Ops.LOAD]


def _depends(u: UOp, r: UOp) -> bool: return any(n is r for n in u.toposort())


def _broadcast_axes(k: Kernel) -> list[int]:
  """Global axes along which at least one load does not move (its value can be reused across the axis)."""
  loads = _loads(k)
  out = []
  for i, r in enumerate(k.axes(G)):
    if any(not _depends(ld.src[1], r) for ld in loads): out.append(i)
  return out


def _try(k: Kernel, opt: Opt) -> Kernel:
  try: return k.apply(opt)
  except OptError: return k


def hand_coded_opts(k: Kernel, target: Target) -> list[Opt]:
  has_reduce = any(n.op is Ops.REDUCE for n in k.ast.toposort())
  if has_reduce:
    cand = _broadcast_axes(k)
    globals_ = k.axes(G)
    # upcast the last broadcast axis widest (it is the contiguous one for stores), then one more axis by 4
    for amount_first in ((16, 8, 4, 2) if not target.has_workgroups else (4, 2)):
      if cand and Kernel.size(globals_[cand[-1]]) % amount_first == 0:
        k = _try(k, Opt("UPCAST", cand[-1], amount_first))
        break
    cand = _broadcast_axes(k)
    globals_ = k.axes(G)
    if len(cand) >= 2 or (cand and k.opts == []):
      ax = cand[0]   # the outermost broadcast axis: matmul's M, a convolution's output channels
      for amt in (4, 2):
        if Kernel.size(globals_[ax]) % amt == 0:
          k = _try(k, Opt("UPCAST", ax, amt))
          break
  if target.has_workgroups and has_reduce:
    # few outputs and a long reduction: split the reduction across a work-group
    out_items = 1
    for r in k.axes(G): out_items *= Kernel.size(r)
    reduces = k.axes(R)
    if out_items < 64 and reduces and Kernel.size(reduces[-1]) >= 256:
      for amt in (64, 32, 16):
        if Kernel.size(reduces[-1]) % amt == 0:
          k = _try(k, Opt("GROUP", len(reduces) - 1, amt))
          break
  if target.has_workgroups and not any(o.op == "GROUP" for o in k.opts):
    globals_ = k.axes(G)
    if globals_:
      last = len(globals_) - 1
      for amt in (32, 16, 8, 4, 2):
        if Kernel.size(globals_[last]) % amt == 0:
          k = _try(k, Opt("LOCAL", last, amt))
          break
  return k.opts
