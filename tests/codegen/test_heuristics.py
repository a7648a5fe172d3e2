"""The CPU heuristics' loop order (codegen/heuristics.py), judged on the opts they choose for scheduled kernels."""
from __future__ import annotations
import math
import re
import numpy as np
from tgc.frontend import Tensor
from tgc.frontend.realize import _alloc
from tgc.codegen.schedule import schedule
from tgc.codegen.heuristics import hand_coded_opts
from tgc.codegen.lower import lower
from tgc.codegen.kernel_access import stride
from tgc.codegen.vectorize import unclamped
from tgc.codegen.opts import Kernel, Opt, OptOps
from tgc.codegen.target import Target, as_target
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


def test_an_odd_axis_is_blocked_with_padding():
  """SqueezeNet's last 1x1 conv (512 -> 1000 channels over 13 x 13 pixels, channels last): no block of 2 to 8
  divides 13, so the register block pads it (7 + 7 pixels, the last copy storing nothing) and shares each weight
  vector across pixels, instead of a block of output channels alone that loads a weight vector per multiply."""
  x = Tensor(RNG.standard_normal((1, 64, 13, 13)).astype(np.float32))
  w0 = Tensor(RNG.standard_normal((512, 64, 3, 3)).astype(np.float32))
  w = Tensor(RNG.standard_normal((1000, 512, 1, 1)).astype(np.float32))
  items, _ = schedule([x.conv2d(w0, padding=1).relu().conv2d(w).uop], _alloc("c"))
  opts = hand_coded_opts(Kernel(items[-1].ast), as_target("c"), frozenset({2}))
  k = Kernel(items[-1].ast).apply_all(opts)
  pixels = [r for r in k.ranges() if r.arg.kind is AxisType.UPCAST and r.src[0].arg == 7]
  assert pixels, opts


def test_an_axis_no_vector_divides_is_vectorized_with_masked_accesses():
  """Softmax over rows of 750 keys (Whisper's attention): no width of 4 or more divides 750, so the max and the
  sum of exponentials take 16-lane vectors along the keys, padded: the last vector's loads masked, the reductions
  taking their identity past the end; the normalizing pass too (its clamped loads and gated stores one masked
  vector access each). The C artifact matches numpy."""
  x = RNG.standard_normal((6, 40, 750)).astype(np.float32) * 4
  items, _ = schedule([Tensor(x).softmax(-1).uop], _alloc("c"))
  assert sum(any(n.op is Ops.REDUCE for n in it.ast.toposort()) for it in items) == 2 and len(items) == 3
  for it in items:
    opts = hand_coded_opts(Kernel(it.ast), as_target("c"))
    k = Kernel(it.ast).apply_all(opts)
    vector = [r for r in k.ranges() if r.arg.kind is AxisType.VECTOR]
    assert vector and vector[0].src[0].arg == 16
    assert not any(r.arg.kind is AxisType.GLOBAL and r.src[0].op is Ops.CONST and r.src[0].arg == 750
                   for r in k.ranges())
    source = lower(it.ast, as_target("c"), opts).src
    assert "tg_mload_f32x16(" in source and ("tg_mstore_f32x16(" in source) == (it is items[-1])
  got = Tensor(x, device="c").softmax(-1).numpy()
  want = np.exp(x - x.max(-1, keepdims=True))
  np.testing.assert_allclose(got, want / want.sum(-1, keepdims=True), rtol=1e-5, atol=1e-7)


def _taps_case(groups: int, cin: int):
  """A padded 3x3 convolution of 32 output channels over 14 x 14 channels-last pixels, `groups` groups of `cin`
  input channels: its kernel's heuristic opts and lowered program."""
  x = Tensor(RNG.standard_normal((1, 14, 14, groups * cin)).astype(np.float32)).permute(0, 3, 1, 2)
  w = Tensor(RNG.standard_normal((32, cin, 3, 3)).astype(np.float32))
  items, _ = schedule([x.conv2d(w, padding=1, groups=groups).uop], _alloc("c"))
  opts = hand_coded_opts(Kernel(items[-1].ast), as_target("c"), frozenset({2}))
  return opts, lower(items[-1].ast, as_target("c"), opts, weights={2: w.numel()})


def test_a_depthwise_convolution_unrolls_its_taps():
  """A depthwise 3x3 convolution sums 9 taps and nothing else: both tap loops are unrolled, so the register block's
  neighbouring output pixels, whose windows overlap, share their input loads (fewer loads than copies times taps).
  A convolution that also sums 16 input channels keeps its loops."""
  opts, prg = _taps_case(32, 1)
  unrolled = [o.amount for o in opts if o.op is OptOps.UNROLL]
  assert unrolled == [3, 3], opts
  copies = np.prod([o.amount for o in opts if o.op is OptOps.UPCAST])
  loads = prg.src.count("*(const tg_f32x")
  assert 0 < loads < copies * 9, (loads, copies)
  opts, _ = _taps_case(2, 16)
  assert not any(o.op is OptOps.UNROLL for o in opts), opts
  x, w = RNG.standard_normal((1, 14, 14, 32)).astype(np.float32), RNG.standard_normal((32, 1, 3, 3)).astype(np.float32)
  got = Tensor(x, device="c").permute(0, 3, 1, 2).conv2d(Tensor(w, device="c"), padding=1, groups=32).numpy()
  padded = np.pad(x[0], ((1, 1), (1, 1), (0, 0)))
  want = sum(padded[i:i + 14, j:j + 14] * w[:, 0, i, j] for i in range(3) for j in range(3)).transpose(2, 0, 1)
  np.testing.assert_allclose(got[0], want, rtol=1e-5, atol=1e-5)


def test_a_depthwise_convolution_over_short_rows_is_vectorized_with_lane_masks():
  """A 3x3 depthwise convolution over NCHW planes of 14x14 pixels (ShuffleNet's): no width of 4 or more divides a
  row. Where masked loads are single instructions (x86-64-v3 and up) a row is one vector padded to 16 lanes, each
  tap's load one masked vector load whose mask is the padding's comparisons and the row's end, `and`ed; a level
  without them (x86-64-v2) keeps its rows scalar. The kernel on this machine matches numpy."""
  x = RNG.standard_normal((1, 32, 14, 14)).astype(np.float32)
  w = RNG.standard_normal((32, 1, 3, 3)).astype(np.float32)
  items, _ = schedule([Tensor(x).conv2d(Tensor(w), padding=1, groups=32).uop], _alloc("c"))
  conv = items[-1]
  for level, vector in (("x86-64-v4", True), ("x86-64-v3", True), ("x86-64-v2", False)):
    target = Target.make("c", cpu=level)
    opts = hand_coded_opts(Kernel(conv.ast), target, frozenset({2}))
    k = Kernel(conv.ast).apply_all(opts)
    lanes = [r.src[0].arg for r in k.ranges() if r.arg.kind is AxisType.VECTOR]
    assert lanes == ([target.vector_lanes(4)] if vector else []), (level, opts)
    if vector:
      source = lower(conv.ast, target, opts).src
      assert f"tg_mload_f32x{lanes[0]}(" in source and f"tg_mstore_f32x{lanes[0]}(" in source
  got = Tensor(x, device="c").conv2d(Tensor(w, device="c"), padding=1, groups=32).numpy()
  padded = np.pad(x, ((0, 0), (0, 0), (1, 1), (1, 1)))
  want = sum(padded[:, :, i:i + 14, j:j + 14] * w[None, :, 0, i, j, None, None] for i in range(3) for j in range(3))
  np.testing.assert_allclose(got, want, rtol=1e-5, atol=1e-5)


def _v4():
  return Target.make("c", cpu="x86-64-v4")


def test_attention_over_keys_no_vector_divides_is_vectorized_along_the_keys():
  """Whisper's encoder attention: 750 keys (no multiple of 16), K computed by a matmul. K is stored transposed (keys
  innermost), so Q·Kᵀ vectorizes along the keys: per step of the reduction one broadcast query value and a vector
  of 16 keys, the last vector's loads masked. Its 47 vectors of keys are not padded again by the register block
  (the block's last copies would clamp each lane on its own and read it alone): the block is over the queries.
  Before, K kept its layout and each score summed a vector of head dims horizontally. The result matches numpy."""
  x, wk = RNG.standard_normal((750, 32)).astype(np.float32), RNG.standard_normal((32, 64)).astype(np.float32)
  q = RNG.standard_normal((40, 64)).astype(np.float32)
  items, _ = schedule([(Tensor(q) @ (Tensor(x) @ Tensor(wk)).transpose(0, 1)).uop], _alloc("c"))
  scores = items[-1]
  opts = hand_coded_opts(Kernel(scores.ast), _v4())
  k = Kernel(scores.ast).apply_all(opts)
  vector = next(r for r in k.ranges() if r.arg.kind is AxisType.VECTOR)
  keys = next(r for r in k.ranges() if r.arg.id == vector.arg.parent)
  assert vector.src[0].arg == 16 and keys.arg.kind is AxisType.GLOBAL and keys.src[0].arg == 47, opts
  assert not any(r.arg.kind is AxisType.UPCAST and r.arg.parent == keys.arg.id for r in k.ranges()), opts
  assert any(r.arg.kind is AxisType.UPCAST for r in k.ranges()), opts
  assert "tg_mload_f32x16(" in lower(scores.ast, _v4(), opts).src
  got = (Tensor(q, device="c") @ (Tensor(x, device="c") @ Tensor(wk, device="c")).transpose(0, 1)).numpy()
  np.testing.assert_allclose(got, q @ (x @ wk).T, rtol=1e-4, atol=1e-3)


def test_a_pointwise_convolution_block_reads_few_weight_vectors_per_pixel():
  """A 1x1 conv of 512 to 512 channels over 14 x 14 channels-last pixels (MobileNet's middle layers): a block of 8
  weight vectors for 2 pixels reads its 256 KiB weight panel from L2 again for every pair of pixels; the register
  block counts those cache lines, so it takes at most 4 weight vectors, each shared by at least 4 pixels."""
  x = Tensor(RNG.standard_normal((1, 14, 14, 512)).astype(np.float32)).permute(0, 3, 1, 2)
  w = Tensor(RNG.standard_normal((512, 512, 1, 1)).astype(np.float32))
  items, _ = schedule([x.conv2d(w).uop], _alloc("c"))
  opts = hand_coded_opts(Kernel(items[-1].ast), _v4(), frozenset({2}))
  k = Kernel(items[-1].ast).apply_all(opts)
  vector = next(r for r in k.ranges() if r.arg.kind is AxisType.VECTOR)
  upcast = {r.arg.parent: r.src[0].arg for r in k.ranges() if r.arg.kind is AxisType.UPCAST}
  channels = upcast.get(vector.arg.parent, 1)
  pixels = math.prod(n for parent, n in upcast.items() if parent != vector.arg.parent)
  assert channels <= 4 and pixels >= 4, opts


def test_a_matmul_block_leaves_registers_for_the_operand_it_holds():
  """A language model's head (128 tokens x 288 -> 2048 logits here): a block of 3 weight vectors x 8 tokens has 24
  accumulators and holds 8 broadcast tokens across the weight vectors: 34 of AVX-512's 32 registers, and clang
  spilled and shuffled registers at every step (2x slower than 6 x 4). The block's accumulators, the copies of
  the operand it holds (here either one: the larger) and two streamed vectors fit in the registers."""
  x = Tensor(RNG.standard_normal((128, 288)).astype(np.float32))
  w = Tensor(RNG.standard_normal((288, 2048)).astype(np.float32))
  items, _ = schedule([(x @ w).uop], _alloc("c"))
  opts = hand_coded_opts(Kernel(items[-1].ast), _v4(), frozenset({2}))
  copies = [o.amount for o in opts if o.op is OptOps.UPCAST]
  assert len(copies) == 2 and math.prod(copies) + max(copies) + 2 <= 32, opts


def _grouped_case(per_group: int):
  """A 1x1 conv of 4 groups of `per_group` channels over 14 x 14 pixels, reading a conv's ReLU (an intermediate,
  its layout chosen by the scheduler): the schedule, the activation, the grouped weights and the numpy result."""
  x = RNG.standard_normal((1, 4 * per_group, 14, 14)).astype(np.float32)
  w0 = RNG.standard_normal((4 * per_group, 4 * per_group, 1, 1)).astype(np.float32) / 16
  wg = RNG.standard_normal((4 * per_group, per_group, 1, 1)).astype(np.float32)
  act = np.maximum(np.einsum("oc,chw->ohw", w0[:, :, 0, 0], x[0]), 0)
  want = np.concatenate([np.einsum("oc,chw->ohw", wg[g * per_group:(g + 1) * per_group, :, 0, 0],
                                   act[g * per_group:(g + 1) * per_group]) for g in range(4)])
  return (lambda dev: Tensor(x, device=dev).conv2d(Tensor(w0, device=dev)).relu()
          .conv2d(Tensor(wg, device=dev), groups=4)), want[None]


def test_a_grouped_convolution_over_odd_groups_vectorizes_its_pixels():
  """ShuffleNet's 1x1 convs: 4 groups of 68 channels. Channels last, a vector of output channels would straddle two
  groups and a vector of pixels would read one channel a row apart (6% of the roofline): the activation keeps its
  NCHW order, the kernel merges height and width (196 pixels: 13 vectors of 16, the last padded), and its register
  block spans output channels, which share each input vector (one group per block). Matches numpy."""
  model, want = _grouped_case(68)
  items, _ = schedule([model("c").uop], _alloc("c"))
  opts = hand_coded_opts(Kernel(items[-1].ast), _v4(), frozenset({2}))
  k = Kernel(items[-1].ast).apply_all(opts)
  assert opts[0].op is OptOps.MERGE, opts
  vector = next(r for r in k.ranges() if r.arg.kind is AxisType.VECTOR)
  pixels = next(r for r in k.ranges() if r.arg.id == vector.arg.parent)
  assert vector.src[0].arg == 16 and pixels.src[0].arg == 13, opts
  activation = next(n for n in k.ast.toposort() if n.op is Ops.LOAD and n.src[0].arg[0] == 1)
  assert stride(unclamped(activation.src[1], vector)[0], vector) == 1      # the last vector's loads masked
  channels = next(r for r in k.ranges() if r.arg.kind is AxisType.GLOBAL and r.arg.id != pixels.arg.id)
  assert any(r.arg.kind is AxisType.UPCAST and r.arg.parent == channels.arg.id for r in k.ranges()), opts
  np.testing.assert_allclose(model("c").numpy(), want, rtol=1e-4, atol=1e-3)


def test_a_grouped_convolution_at_avx2_shares_its_input_panel_across_output_channels():
  """The same convolution at x86-64-v3 (16 vector registers, 8 lanes): a block of 5 pixel vectors for one output
  channel costs fewer loads per multiply than 4 output channels for one pixel vector, but it reads the group's
  54 KB input panel (68 channels x 196 pixels) from L2 again for each of the 68 output channels of the group; the
  register block counts those cache lines, so it spans output channels (4 of them: 2.6 -> 1.3 ms for ShuffleNet's
  eight such launches)."""
  model, _ = _grouped_case(68)
  items, _ = schedule([model("c").uop], _alloc("c"))
  v3 = Target.make("c", cpu="x86-64-v3")
  opts = hand_coded_opts(Kernel(items[-1].ast), v3, frozenset({2}))
  k = Kernel(items[-1].ast).apply_all(opts)
  vector = next(r for r in k.ranges() if r.arg.kind is AxisType.VECTOR)
  upcast = {r.arg.parent: r.src[0].arg for r in k.ranges() if r.arg.kind is AxisType.UPCAST}
  assert vector.src[0].arg == 8 and upcast.get(vector.arg.parent, 1) == 1, opts
  assert math.prod(upcast.values()) >= 4, opts


def test_attention_scores_with_an_int64_mask_are_vectorized():
  """torch's exported encoders add `where(attention_mask == 0, -inf, 0)` to the scores, the mask an int64 input: the
  scores' kernel loads and compares the mask lane by lane and vectorizes along the keys (it ran scalar, at 7% of the
  roofline, a fifth of the run). Matches numpy."""
  x, wk = RNG.standard_normal((128, 32)).astype(np.float32), RNG.standard_normal((32, 64)).astype(np.float32)
  q = RNG.standard_normal((40, 64)).astype(np.float32)
  mask = (RNG.random(128) < 0.8).astype(np.int64)

  def scores(dev: str) -> Tensor:
    keys = (Tensor(x, device=dev) @ Tensor(wk, device=dev)).transpose(0, 1)
    return Tensor(q, device=dev) @ keys + (Tensor(mask, device=dev) == 0).where(-np.inf, 0.0)
  items, _ = schedule([scores("c").uop], _alloc("c"))
  opts = hand_coded_opts(Kernel(items[-1].ast), _v4())
  vector = next((o for o in opts if o.op is OptOps.VECTOR), None)
  assert vector is not None and vector.amount == 16, opts
  assert Kernel(items[-1].ast).axes((AxisType.GLOBAL,))[vector.axis].src[0].arg == 128, opts
  np.testing.assert_allclose(scores("c").numpy(), q @ (x @ wk).T + np.where(mask == 0, -np.inf, 0), rtol=1e-4,
                             atol=1e-3)


def test_keys_blocked_two_vectors_wide_read_the_second_vector_masked():
  """Q·Kᵀ over 750 keys with AVX2's 8 lanes, the keys blocked two vectors wide (16 per step, 47 steps): the second
  vector's index is clamped as `r*16 + v < 742 ? r*16 + 8 + v : 749` (the simplifier moves its constant 8 across
  the compare). It is one masked vector load like the first, not eight loads of single keys at every step of the
  reduction (Whisper's scores kernel ran at 44% of the roofline so). The result matches numpy."""
  k_t = RNG.standard_normal((64, 750)).astype(np.float32)
  q = RNG.standard_normal((40, 64)).astype(np.float32)
  items, _ = schedule([(Tensor(q) @ Tensor(k_t)).uop], _alloc("c"))
  v3 = Target.make("c", cpu="x86-64-v3")
  kernel = Kernel(items[-1].ast)
  keys = next(i for i, r in enumerate(kernel.axes((AxisType.GLOBAL,))) if r.src[0].arg == 750)
  opts = [Opt(OptOps.VECTOR, keys, 8), Opt(OptOps.UPCAST, keys, 2), Opt(OptOps.UPCAST, 1 - keys, 4)]
  source = lower(items[-1].ast, v3, opts).src
  assert source.count("tg_mload_f32x8(") >= 2, source
  assert not re.search(r"\{(val\d+), (?!\1\b)val\d+", source)        # no vector built from loads of single keys
  got = (Tensor(q, device="c") @ Tensor(k_t, device="c")).numpy()
  np.testing.assert_allclose(got, q @ k_t, rtol=1e-4, atol=1e-3)


def test_arithmetic_over_a_transpose_is_vectorized_through_gathers():
  """The GELU (erf) of a convolution's output read transposed (Whisper's frontend): along either axis one of its
  two accesses moves one lane at a time, but its ~30 float ops per value cost far more one lane at a time than a
  gather does, so it is vectorized (it ran scalar at 2-7% of the roofline). A transposed copy with one op stays
  scalar. Both match numpy."""
  x = RNG.standard_normal((96, 750)).astype(np.float32)
  gelu = lambda t: t.transpose(0, 1) * 0.5 * (1 + (t.transpose(0, 1) / math.sqrt(2)).erf())
  for fn, vector in ((gelu, True), (lambda t: t.transpose(0, 1) * 2.0, False)):
    items, _ = schedule([fn(Tensor(x)).uop], _alloc("c"))
    for level in ("x86-64-v3", "x86-64-v4"):
      opts = hand_coded_opts(Kernel(items[-1].ast), Target.make("c", cpu=level))
      assert any(o.op is OptOps.VECTOR for o in opts) == vector, (level, opts)
  from math import erf
  want = x.T * 0.5 * (1 + np.vectorize(erf)(x.T.astype(np.float64) / math.sqrt(2)))
  np.testing.assert_allclose(gelu(Tensor(x, device="c")).numpy(), want, rtol=1e-5, atol=1e-6)


def test_a_sum_of_exponentials_over_short_rows_is_vectorized():
  """Swin's window attention: softmax over 49 keys. No width of 4 or more divides 49 and a row is too short to pad,
  so the pass summing the exponentials ran one exp2f call at a time (5% of the run at 5% of the roofline). Its ops
  are counted as often as they run, an exp2 as TRANSCENDENTAL_OPS: about 13 float ops per value read, so it is
  vectorized across rows through gathers. The softmax matches numpy."""
  x = RNG.standard_normal((2, 6, 49, 49)).astype(np.float32) * 3
  items, _ = schedule([Tensor(x).softmax(-1).uop], _alloc("c"))
  sums = [it for it in items if any(n.op is Ops.EXP2 for n in it.ast.toposort()) and
          any(n.op is Ops.REDUCE for n in it.ast.toposort())]
  assert len(sums) == 1
  for level in ("x86-64-v3", "x86-64-v4"):
    opts = hand_coded_opts(Kernel(sums[0].ast), Target.make("c", cpu=level))
    assert any(o.op is OptOps.VECTOR for o in opts), (level, opts)
  want = np.exp(x - x.max(-1, keepdims=True))
  np.testing.assert_allclose(Tensor(x, device="c").softmax(-1).numpy(), want / want.sum(-1, keepdims=True),
                             rtol=1e-5, atol=1e-7)


def test_a_depthwise_convolution_after_a_channel_shuffle_reads_vectors():
  """ShuffleNet's 3x3 depthwise convolutions read their channels-last input through a channel shuffle: output channel
  c reads channel (c % 4) * 16 + c // 4, so a vector of output channels is a gather (it ran lane by lane, at 10% of
  the roofline). The channel loop is split by 4 into copies and its rest vectorized: along c // 4 the loads step
  through memory one by one (the stores, one per output against nine loads, go lane by lane). Matches numpy."""
  x = RNG.standard_normal((1, 64, 14, 14)).astype(np.float32)
  w3, w1, w2 = (RNG.standard_normal((64, 64, k, k)).astype(np.float32) / 8 for k in (3, 1, 1))
  wd = RNG.standard_normal((64, 1, 3, 3)).astype(np.float32)

  def model(dev: str) -> Tensor:
    act = Tensor(x, device=dev).conv2d(Tensor(w3, device=dev), padding=1).relu().conv2d(Tensor(w1, device=dev))
    shuffled = act.relu().reshape(1, 4, 16, 14, 14).transpose(1, 2).reshape(1, 64, 14, 14)
    return shuffled.conv2d(Tensor(wd, device=dev), groups=64, padding=1).conv2d(Tensor(w2, device=dev))

  def conv(a, w, groups=1):
    p = w.shape[-1] // 2
    a = np.pad(a, ((0, 0), (p, p), (p, p)))
    if groups > 1: return sum(w[:, 0, i, j, None, None] * a[:, i:i + 14, j:j + 14] for i in range(3) for j in range(3))
    return sum(np.einsum("oc,chw->ohw", w[:, :, i, j], a[:, i:i + 14, j:j + 14])
               for i in range(w.shape[2]) for j in range(w.shape[3]))
  act = np.maximum(conv(np.maximum(conv(x[0], w3), 0), w1), 0)
  shuffled = act.reshape(4, 16, 14, 14).transpose(1, 0, 2, 3).reshape(64, 14, 14)
  want = conv(conv(shuffled, wd, groups=64), w2)
  items, _ = schedule([model("c").uop], _alloc("c"))
  k = Kernel(items[-2].ast)
  opts = hand_coded_opts(k, _v4(), frozenset({2}))
  assert opts[:2] == [Opt(OptOps.UPCAST, 0, 4), Opt(OptOps.VECTOR, 0, 16)], opts
  k = k.apply_all(opts)
  vector = next(r for r in k.ranges() if r.arg.kind is AxisType.VECTOR)
  activation = next(n for n in k.ast.toposort() if n.op is Ops.LOAD and n.src[0].arg[0] == 1)
  assert stride(activation.src[1], vector) == 1
  np.testing.assert_allclose(model("c").numpy(), want[None], rtol=1e-4, atol=1e-3)
