"""Layouts chosen at compile time: weights stored in the order their kernel reads them (codegen/relayout.py) and
convolution activations stored channels-last (codegen/layouts.py `channels_last`), checked on the kernels and on
the numbers they compute."""
from __future__ import annotations
import numpy as np

from tgc.frontend import Tensor, nn
from tgc.frontend.onnx import compose_nn
from tgc.frontend.jit import trace
from tgc.frontend.realize import _alloc
from tgc.codegen import schedule as scheduler
from tgc.codegen.schedule import schedule
from tgc.codegen.layouts import flat_index, open_index
from tgc.codegen.compiled import BufferKind, compile_schedule
from tgc.codegen.opts import Kernel, Opt
from tgc.codegen.relayout import evaluate, relayout
from tgc.codegen.kernel_access import stride
from tgc.ir import Ops, AxisType, RangeArg, UOp, dtypes

RNG = np.random.default_rng(1)


def _loads(ast, position):
  return [n for n in ast.toposort() if n.op is Ops.LOAD and n.src[0].arg[0] == position]


def test_a_relaid_weight_is_read_contiguously_and_holds_the_same_values():
  x, w = Tensor(RNG.standard_normal((8, 64)).astype(np.float32)), RNG.standard_normal((64, 32)).astype(np.float32)
  items, _ = schedule([(x @ Tensor(w)).uop], _alloc("c"))
  it = items[-1]
  k = Kernel(it.ast).apply_all([Opt("VECTOR", 1, 16), Opt("UPCAST", 1, 2)])
  pos = next(i for i, b in enumerate(it.bufs) if b.arg[1] == (64, 32) or np.prod(b.arg[1]) == 64 * 32)
  (old,) = _loads(k.ast, pos)
  new_ast, made = relayout(k.ast, {pos: 64 * 32})
  (new,) = _loads(new_ast, pos)
  vec = next(r for r in Kernel(new_ast).ranges() if r.arg.kind is AxisType.VECTOR)
  red = next(r for r in Kernel(new_ast).ranges() if r.arg.kind is AxisType.REDUCE)
  assert stride(new.src[1], vec) == 1 and stride(new.src[1], red) == 32      # 2 vectors of 16 per reduce step
  old_data = RNG.standard_normal(64 * 32).astype(np.float32)
  new_data = made[pos].apply({pos: old_data})
  assert new_data.size == 64 * 32
  ranges = sorted({n for n in old.src[1].toposort() if n.op is Ops.RANGE}, key=lambda r: r.arg.id)
  env = {r: np.arange(r.src[0].arg).reshape([-1 if j == i else 1 for j in range(len(ranges))])
         for i, r in enumerate(ranges)}
  np.testing.assert_array_equal(old_data[evaluate(old.src[1], env)], new_data[evaluate(new.src[1], env)])


def _mlp(device: str):
  Tensor.manual_seed(0)
  l1, l2 = nn.Linear(64, 128, device=device), nn.Linear(128, 32, device=device)
  return lambda x: l2(l1(x).relu())


def test_compiled_weights_are_relaid_without_growing():
  x = Tensor(RNG.standard_normal((4, 64)).astype(np.float32), device="c")
  cap = trace(_mlp("c"), x)
  weights = [(f"w{i}", b, v) for i, (b, v) in enumerate(cap.weights.items())]
  cm = compile_schedule("mlp", "c", cap.items, [(s.name, b) for s, b in cap.inputs],
                        [(s.name, b) for s, b in cap.outputs], weights)
  before = sum(v.nbytes for _, _, v in weights)
  after = sum(a.nbytes for a in cm.weights.values())
  assert after <= before * 1.05
  relaid = [b for b in cm.of_kind(BufferKind.WEIGHT) if len(b.shape) == 1 and b.shape[0] >= 64 * 32]
  assert relaid, [b.shape for b in cm.of_kind(BufferKind.WEIGHT)]


def test_a_weight_two_kernels_read_keeps_its_layout():
  w = RNG.standard_normal((64, 64)).astype(np.float32)
  x = Tensor(RNG.standard_normal((4, 64)).astype(np.float32), device="c")
  wt = Tensor(w, device="c")
  cap = trace(lambda x: ((x @ wt).relu() @ wt, (x @ wt) * 2.0), x)
  weights = [(f"w{i}", b, v) for i, (b, v) in enumerate(cap.weights.items())]
  cm = compile_schedule("shared", "c", cap.items, [(s.name, b) for s, b in cap.inputs],
                        [(s.name, b) for s, b in cap.outputs], weights)
  shared = [b for b in cm.of_kind(BufferKind.WEIGHT) if b.nbytes == w.nbytes]
  assert shared and all(b.shape == (64, 64) for b in shared)


def _conv_net(device: str):
  Tensor.manual_seed(2)
  c1, c2 = nn.Conv2d(3, 16, 3, padding=1, device=device), nn.Conv2d(16, 16, 3, padding=1, device=device)
  dw = nn.Conv2d(16, 16, 3, padding=1, groups=16, device=device)
  return lambda x: dw(c2(c1(x).relu()).relu()).relu()


def test_convolution_activations_are_channels_last():
  items, _ = schedule([_conv_net("c")(Tensor(RNG.standard_normal((1, 3, 8, 8)).astype(np.float32))).uop],
                      _alloc("c"))
  convs = [it for it in items if any(n.op is Ops.REDUCE for n in it.ast.toposort())]
  assert len(convs) == 3
  for it in convs[1:]:     # the second conv and the depthwise read the previous activation, 16 channels
    load = next(ld for ld in _loads(it.ast, 1))
    glob = [r for r in Kernel(it.ast).ranges() if r.arg.kind is AxisType.GLOBAL]
    red = [r for r in Kernel(it.ast).ranges() if r.arg.kind is AxisType.REDUCE]
    channel = red[0] if it is convs[1] else glob[0]       # conv: reduce over input channels; depthwise: the channel
    assert stride(load.src[1], channel) == 1


def test_a_grouped_convolution_over_odd_groups_keeps_its_input_as_it_is():
  """A grouped 1x1 conv over groups of 32 channels (a multiple of GROUP_LANES) reads its input channels last, as
  any conv; over groups of 34 channels (ShuffleNet's) it reads it as it is, NCHW: pixels contiguous."""
  for per_group, channels_last in ((32, True), (34, False)):
    x = Tensor(RNG.standard_normal((1, 4 * per_group, 7, 7)).astype(np.float32))
    w0 = Tensor(RNG.standard_normal((4 * per_group, 4 * per_group, 1, 1)).astype(np.float32))
    wg = Tensor(RNG.standard_normal((4 * per_group, per_group, 1, 1)).astype(np.float32))
    items, _ = schedule([x.conv2d(w0).relu().conv2d(wg, groups=4).uop], _alloc("c"))
    load = _loads(items[-1].ast, 1)[0]
    glob = [r for r in Kernel(items[-1].ast).ranges() if r.arg.kind is AxisType.GLOBAL]
    channel = next(r for r in Kernel(items[-1].ast).ranges() if r.arg.kind is AxisType.REDUCE)
    assert (stride(load.src[1], channel) == 1) == channels_last and (stride(load.src[1], glob[-1]) == 1) != \
      channels_last, per_group


def test_a_batch_of_matrix_products_keeps_its_operand_as_it_is():
  """(16, C, H, W) values reduced over C by weights that change with the first index (Winograd's 16 products) are a
  batch of products, no convolution: stored as they are, the products read their columns (pixels) contiguously.
  The same value reduced by one weight for every batch index (a convolution) is stored channels last."""
  for batched in (True, False):
    x = Tensor(RNG.standard_normal((16, 32, 8, 8)).astype(np.float32))
    w = Tensor(RNG.standard_normal((16 if batched else 1, 24, 32, 1, 1)).astype(np.float32))
    v = (x + 1.0).contiguous().reshape(16, 1, 32, 8, 8)      # an intermediate, image-like
    items, _ = schedule([(v * w).sum(2).uop], _alloc("c"))
    product = items[-1]
    pos = next(i for i, b in enumerate(product.bufs) if b is not product.bufs[0] and np.prod(b.arg[1]) == 16 * 32 * 64)
    load = _loads(product.ast, pos)[0]
    channel = next(r for r in Kernel(product.ast).ranges() if r.arg.kind is AxisType.REDUCE)
    assert (stride(load.src[1], channel) == 1) != batched, batched


def test_each_kernel_is_built_once_in_its_layout(monkeypatch):
  built, build = [], scheduler._build
  monkeypatch.setattr(scheduler, "_build", lambda n, *rest: built.append(n) or build(n, *rest))
  items, _ = schedule([_conv_net("c")(Tensor(RNG.standard_normal((1, 3, 8, 8)).astype(np.float32))).uop],
                      _alloc("c"))
  assert len(built) == len(set(built)) == len(items)
  assert not any(u.op is Ops.OPEN_INDEX for it in items for u in it.ast.toposort())


def test_an_open_index_orders_as_its_row_major_index():
  """Sums order their terms by key: a kernel simplified before its layouts are chosen orders them as it would with
  row-major loads."""
  r = [UOp(Ops.RANGE, dtypes.index, (UOp.const(dtypes.index, n),), RangeArg(i, AxisType.GLOBAL))
       for i, n in enumerate((4, 8))]
  index = open_index(tuple(r), (4, 8))
  assert index.key == flat_index(tuple(r), (4, 8)).key and index is not index.src[0]


def test_attention_scores_keep_their_layout():
  q = Tensor(RNG.standard_normal((1, 4, 16, 8)).astype(np.float32))
  k = Tensor(RNG.standard_normal((1, 4, 16, 8)).astype(np.float32))
  probs = (q @ k.transpose(2, 3)).softmax()
  items, _ = schedule([(probs @ k).uop], _alloc("c"))
  last = items[-1]
  load = _loads(last.ast, 1)[0]
  red = next(r for r in Kernel(last.ast).ranges() if r.arg.kind is AxisType.REDUCE)
  assert stride(load.src[1], red) == 1      # rows of the scores are still contiguous


def test_weights_behind_a_padded_vector_are_relaid():
  """An STFT as a strided Conv1d with 130 filters (a Fourier basis: n_fft/2+1 complex bins), vectorized along the
  filters with the last vector padded: the weights are still stored in read order (stride 1 along the lanes, no
  lane-by-lane gathers), although the padded lanes take 144/130 of the weights' bytes; every lane reads the value
  the original layout gave it."""
  x = Tensor(RNG.standard_normal((1, 1, 32 * 5)).astype(np.float32))
  w = Tensor(RNG.standard_normal((130, 1, 64)).astype(np.float32))
  items, _ = schedule([x.conv2d(w, stride=32).uop], _alloc("c"))
  it = items[-1]
  k = Kernel(it.ast).apply_all([Opt("VECTOR", 0, 16), Opt("UPCAST", 0, 9)])
  pos = next(i for i, b in enumerate(it.bufs) if b.arg[1] == (130, 1, 64))
  (old,) = _loads(k.ast, pos)
  new_ast, made = relayout(k.ast, {pos: 130 * 64})
  assert pos in made
  (new,) = _loads(new_ast, pos)
  vec = next(r for r in Kernel(new_ast).ranges() if r.arg.kind is AxisType.VECTOR)
  assert stride(new.src[1], vec) == 1
  old_data = RNG.standard_normal(130 * 64).astype(np.float32)
  new_data = made[pos].apply({pos: old_data})
  ranges = sorted({n for n in old.src[1].toposort() if n.op is Ops.RANGE}, key=lambda r: r.arg.id)
  env = {r: np.arange(r.src[0].arg).reshape([-1 if j == i else 1 for j in range(len(ranges))])
         for i, r in enumerate(ranges)}
  old_vals = evaluate(old, env, {pos: old_data})
  np.testing.assert_array_equal(old_vals, np.broadcast_to(evaluate(new, env, {pos: new_data}), old_vals.shape))


def test_a_value_mapped_into_a_channels_last_image_is_stored_channels_last():
  """An LRN's squares go channels last (its window sums run over channels); the conv whose activation is squared
  follows, so the squaring is a contiguous map, not a transposition, and the conv stores its channels side by side."""
  x = Tensor(RNG.standard_normal((1, 4, 6, 6)).astype(np.float32))
  w = Tensor(RNG.standard_normal((8, 4, 3, 3)).astype(np.float32))
  act = x.conv2d(w, padding=1).relu()
  window = compose_nn.move_axis(compose_nn.windows(compose_nn.move_axis(act * act, 1, -1), (5,), (1,), (1,),
                                                  [(2, 2)]).sum(-1), -1, 1)
  items, _ = schedule([(act / (1 + 1e-4 * window)).uop], _alloc("c"))
  conv = next(it for it in items if any(n.op is Ops.REDUCE and len(n.src) > 2 for n in it.ast.toposort()))
  store = conv.ast.src[0]
  channel = next(r for r in Kernel(conv.ast).ranges() if r.arg.kind is AxisType.GLOBAL and r.src[0].arg == 8)
  assert stride(store.src[1], channel) == 1


def test_a_convolution_output_only_maps_read_is_stored_channels_last():
  """A convolution over a channels-last activation vectorizes its output channels: when only a map reads its output
  (here a nearest-neighbour upsampling), that output is stored channels last too, each vector's lanes side by side
  instead of a channel plane apart."""
  x = Tensor(RNG.standard_normal((1, 4, 6, 6)).astype(np.float32))
  w1 = Tensor(RNG.standard_normal((8, 4, 3, 3)).astype(np.float32))
  w2 = Tensor(RNG.standard_normal((24, 8, 1, 1)).astype(np.float32))
  y = x.conv2d(w1, padding=1).relu().conv2d(w2)
  up = y.reshape(1, 24, 6, 1, 6, 1).expand(1, 24, 6, 2, 6, 2).reshape(1, 24, 12, 12) + 1.0
  items, _ = schedule([up.uop], _alloc("c"))
  convs = [it for it in items if any(n.op is Ops.REDUCE for n in it.ast.toposort())]
  assert len(convs) == 2
  store = convs[1].ast.src[0]
  channel = next(r for r in Kernel(convs[1].ast).ranges() if r.arg.kind is AxisType.GLOBAL and r.src[0].arg == 24)
  assert stride(store.src[1], channel) == 1
  np.testing.assert_allclose(up.numpy(), np.repeat(np.repeat(_np_conv(x, w1, w2), 2, 2), 2, 3) + 1.0, rtol=1e-4,
                             atol=1e-4)


def _np_conv(x, w1, w2):
  xp = np.pad(x.numpy(), ((0, 0), (0, 0), (1, 1), (1, 1)))
  a = np.zeros((1, 8, 6, 6), np.float64)
  for i in range(3):
    for j in range(3): a += np.einsum("nchw,oc->nohw", xp[:, :, i:i + 6, j:j + 6], w1.numpy()[:, :, i, j])
  return np.einsum("nchw,oc->nohw", np.maximum(a, 0), w2.numpy()[:, :, 0, 0])


def test_attention_scores_of_two_intermediates_stay_in_row_major_order():
  """Q·Kᵀ of two projections of the same tokens (MobileViT's attention): K is stored transposed for the product,
  an order that looks like an image's channels last, but the scores are no convolution's output (no weights in
  their reduction) and stay row-major, so the softmax reads each row of keys contiguously (stored heads innermost,
  its loads were 2 floats apart and it ran scalar)."""
  x = RNG.standard_normal((4, 64, 32)).astype(np.float32)
  wq, wk = (RNG.standard_normal((32, 32)).astype(np.float32) / 6 for _ in range(2))
  heads = lambda t: t.reshape(4, 64, 2, 16).permute(0, 2, 1, 3)
  xt = Tensor(x)
  scores = heads(xt @ Tensor(wq)) @ heads(xt @ Tensor(wk)).transpose(-1, -2)
  items, _ = schedule([scores.softmax(-1).uop], _alloc("c"))
  product = next(it for it in items if any(n.op is Ops.REDUCE and n.dtype == dtypes.float32 for n in it.ast.toposort())
                 and len(it.bufs) == 3 and all(b.arg[1] != (32, 32) for b in it.bufs[1:]))
  stored = product.bufs[0]
  readers = [it for it in items if stored in it.bufs[1:]]
  assert readers
  for it in readers:
    k = Kernel(it.ast)
    for ld in _loads(it.ast, it.bufs.index(stored)):
      assert any(stride(ld.src[1], r) == 1 and Kernel.size(r) == 64 for r in k.ranges()), ld.src[1]   # the keys
  q = (x @ wq).reshape(4, 64, 2, 16).transpose(0, 2, 1, 3)
  kk = (x @ wk).reshape(4, 64, 2, 16).transpose(0, 2, 1, 3)
  s = q @ kk.transpose(0, 1, 3, 2)
  want = np.exp(s - s.max(-1, keepdims=True))
  np.testing.assert_allclose(scores.softmax(-1).numpy(), want / want.sum(-1, keepdims=True), rtol=1e-4, atol=1e-6)
