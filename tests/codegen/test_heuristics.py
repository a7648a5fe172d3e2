"""The CPU heuristics' loop order (codegen/heuristics.py), judged on the opts they choose for scheduled kernels."""
from __future__ import annotations
import numpy as np
from tgc.frontend import Tensor
from tgc.frontend.realize import _alloc
from tgc.codegen.schedule import schedule
from tgc.codegen.heuristics import hand_coded_opts
from tgc.codegen.kernel_access import stride
from tgc.codegen.opts import Kernel
from tgc.codegen.target import as_target
from tgc.ir import Ops, AxisType

RNG = np.random.default_rng(0)


def test_a_copy_into_another_layout_stores_contiguously():
  """An input image (NCHW), its ReLU padded with -inf into the channels-last image a max pool reads. The copy has
  no vector or reduction; its innermost loop is the one it stores along contiguously (the channels), so it writes
  whole cache lines one after another, not one element per line per pass of an outer loop."""
  x = Tensor(RNG.standard_normal((1, 16, 32, 32)).astype(np.float32))
  items, _ = schedule([x.relu().max_pool2d(3, 2, padding=1).uop], _alloc("c"))
  copies = [it for it in items if not any(n.op is Ops.REDUCE for n in it.ast.toposort())]
  assert copies
  for it in copies:
    k = Kernel(it.ast).apply_all(hand_coded_opts(Kernel(it.ast), as_target("c")))
    store = next(n for n in k.ast.toposort() if n.op is Ops.STORE)
    loops = [r for r in k.ranges() if r.arg.kind is AxisType.GLOBAL]
    assert not any(r.arg.kind is AxisType.VECTOR for r in k.ranges())
    assert stride(store.src[1], loops[-1]) == 1
