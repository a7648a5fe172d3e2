"""ONNX classical machine-learning operators: TfIdfVectorizer and the ai.onnx.ml domain (Binarizer,
ArrayFeatureExtractor, TreeEnsemble). Their constant structures (n-gram pools, trees) unroll at import into
comparisons of the input."""
from __future__ import annotations
import math
import numpy as np
from tgc.ir import dtypes
from tgc.frontend.tensor import Tensor
from tgc.frontend.onnx.registry import NodeContext, onnx_op
from tgc.frontend.onnx import compose as C
from tgc.frontend.onnx.node_helpers import first_input


# ---------------------------------------------------------------- text features
@onnx_op("TfIdfVectorizer")
def _tfidf_vectorizer(ctx):
  """N-gram counts over the last axis against the constant pool, as the reference: for every skip distance
  d = 1..max_skip_count+1 and start i, the gram X[i], X[i+d], ... counts when it is in the pool (a unigram
  counts once). Unrolled into comparisons of shifted slices."""
  x = first_input(ctx)
  if ctx.attr("pool_strings", None): raise ctx.fail("string pools are not supported")
  pool = [int(v) for v in ctx.attr("pool_int64s", [])]
  counts_at = [int(v) for v in ctx.attr("ngram_counts", [])]
  indexes = [int(v) for v in ctx.attr("ngram_indexes", [])]
  lo, hi, skips = ctx.attr("min_gram_length"), ctx.attr("max_gram_length"), ctx.attr("max_skip_count")
  mode, weights = ctx.attr("mode"), ctx.attr("weights", None)
  grams = []                     # (values, output index)
  gid = 0
  for size, start in enumerate(counts_at, 1):
    end = counts_at[size] if size < len(counts_at) else len(pool)
    for k in range(start, end, size):
      if lo <= size <= hi: grams.append((pool[k:k + size], indexes[gid]))
      gid += 1
  out_size = max(indexes) + 1
  c = x.shape[-1]
  xi = x.cast(dtypes.int64)
  per_index: dict[int, Tensor] = {}
  for values, idx in grams:
    n = len(values)
    for d in range(1, (skips if n > 1 else 0) + 2):
      length = c - (n - 1) * d
      if length <= 0: continue
      hit = None
      for k, v in enumerate(values):
        part = xi.shrink(tuple((k * d, k * d + length) if a == x.ndim - 1 else None for a in range(x.ndim))) == v
        hit = part if hit is None else hit.logical_and(part)
      cnt = hit.cast(dtypes.float32).sum(-1)
      per_index[idx] = cnt if idx not in per_index else per_index[idx] + cnt
  lead = x.shape[:-1]
  zero = Tensor.zeros(*lead, dtype=dtypes.float32, device=x.device)
  cols = [per_index.get(i, zero) for i in range(out_size)]
  tf = Tensor.stack(cols, -1) if cols else Tensor.zeros(*lead, 0, device=x.device)
  w = Tensor(np.asarray(weights, np.float32), device=x.device) if weights else None
  if mode == "TF": return tf
  if mode == "IDF": return (tf > 0).where(w if w is not None else tf.ones_like(), tf.zeros_like())
  if mode == "TFIDF": return tf * w if w is not None else tf
  raise ctx.fail(f"unknown mode {mode!r}")


# ---------------------------------------------------------------- ai.onnx.ml
@onnx_op("ai.onnx.ml:Binarizer")
def _binarizer(ctx):
  x = first_input(ctx)
  return (x > ctx.attr("threshold", 0.0)).cast(x.dtype)


@onnx_op("ai.onnx.ml:ArrayFeatureExtractor")
def _array_feature_extractor(ctx):
  x, idx = ctx.inputs[0], ctx.inputs[1]
  if ctx.is_const(1): return C.take_const(x, -1, np.asarray(ctx.const_value(1)).reshape(-1))
  return C.take(x, -1, idx.reshape(-1))


def _member_sets(modes: list[int], members: list) -> dict[int, list[float]]:
  """The values each BRANCH_MEMBER node (mode 6) tests: membership_values holds one run per such node, in node
  order, each run ended by a NaN."""
  member_sets: dict[int, list[float]] = {}
  it = iter(members)
  for i, m in enumerate(modes):
    if m == 6:
      vals = []
      for v in it:
        if np.isnan(v): break
        vals.append(float(v))
      member_sets[i] = vals
  return member_sets


def _split_condition(ctx: NodeContext, x: Tensor):
  """condition(i): the (N,) boolean tensor of the rows of `x` that take node i's true branch."""
  a = ctx.attr
  splits = np.asarray(a("nodes_splits")).reshape(-1).astype(np.float64)
  features = a("nodes_featureids")
  modes = [int(m) for m in np.asarray(a("nodes_modes")).reshape(-1)]
  missing = a("nodes_missing_value_tracks_true", None) or [0] * len(modes)
  members = list(np.asarray(a("membership_values")).reshape(-1)) if a("membership_values", None) is not None else []
  member_sets = _member_sets(modes, members)
  n = x.shape[0]

  def condition(i: int) -> Tensor:
    f = x.shrink((None, (features[i], features[i] + 1))).reshape(n)
    v, m = splits[i], modes[i]
    if m == 0: c = C.less_equal(f, float(v))
    elif m == 1: c = f < v
    elif m == 2: c = C.greater_equal(f, float(v))
    elif m == 3: c = f > v
    elif m == 4: c = f == v
    elif m == 5: c = f != v
    elif m == 6:
      c = Tensor.full((n,), False, dtypes.bool, x.device)
      for mv in member_sets[i]: c = c.logical_or(f == mv)
    else: raise ctx.fail(f"unknown node mode {m}")
    return c.logical_or(f.isnan()) if missing[i] else c
  return condition


def _tree_leaves(ctx: NodeContext, x: Tensor, condition) -> list[tuple[Tensor, int]]:
  """Every leaf of every tree with its reach mask (the conjunction of the splits on its path), tree by tree."""
  a = ctx.attr
  true_ids, false_ids = a("nodes_truenodeids"), a("nodes_falsenodeids")
  true_leaf, false_leaf = a("nodes_trueleafs"), a("nodes_falseleafs")
  leaves: list[tuple[Tensor, int]] = []      # (reach mask, leaf index)

  def walk(i: int, is_leaf: bool, mask: Tensor, depth: int):
    if depth > 10000: raise ctx.fail("tree too deep")
    if is_leaf:
      leaves.append((mask, i))
      return
    c = condition(i)
    walk(true_ids[i], bool(true_leaf[i]), mask.logical_and(c), depth + 1)
    walk(false_ids[i], bool(false_leaf[i]), mask.logical_and(c.logical_not()), depth + 1)

  everyone = Tensor.full((x.shape[0],), True, dtypes.bool, x.device)
  for r in a("tree_roots"):
    if true_leaf[r] and false_leaf[r] and true_ids[r] == false_ids[r]: leaves.append((everyone, true_ids[r]))
    else: walk(r, False, everyone, 0)
  return leaves


def _aggregate_leaves(x: Tensor, leaves: list[tuple[Tensor, int]], targets, weights: np.ndarray, agg: int,
                      n_trees: int, n_targets: int) -> Tensor:
  """(N, n_targets): the weights of the leaves each row reaches, per target column, by aggregate_function
  (0 average over the trees, 1 sum, 2 min, 3 max); a column no leaf targets is 0 (sum, average) or the identity."""
  n, dt = x.shape[0], x.dtype
  cols: dict[int, Tensor] = {}
  ident = {0: 0.0, 1: 0.0, 2: math.inf, 3: -math.inf}[agg]
  for mask, leaf in leaves:
    t, w = targets[leaf], float(weights[leaf]) / (n_trees if agg == 0 else 1)
    contrib = mask.where(C.scalar(w, dt, x.device), C.scalar(ident, dt, x.device))
    if t not in cols: cols[t] = contrib
    elif agg in (0, 1): cols[t] = cols[t] + contrib
    elif agg == 2: cols[t] = cols[t].minimum(contrib)
    else: cols[t] = cols[t].maximum(contrib)
  empty = Tensor.full((n,), 0.0 if agg in (0, 1) else ident, dt, x.device)
  return Tensor.stack([cols.get(t, empty) for t in range(n_targets)], 1)


@onnx_op("ai.onnx.ml:TreeEnsemble")
def _tree_ensemble(ctx):
  """Each tree is a constant structure: every leaf's reach condition (the conjunction of the splits on its path)
  becomes a boolean tensor, and leaves add (or min/max) their weight into their target column."""
  x = first_input(ctx)
  if x.ndim != 2: raise ctx.fail(f"expects a 2-D input, got {x.shape}")
  a = ctx.attr
  targets, weights = a("leaf_targetids"), np.asarray(a("leaf_weights")).reshape(-1).astype(np.float64)
  agg, post, n_targets = a("aggregate_function", 1), a("post_transform", 0), a("n_targets")
  if post not in (0, 1, 2): raise ctx.fail(f"post_transform {post} is not supported")
  leaves = _tree_leaves(ctx, x, _split_condition(ctx, x))
  out = _aggregate_leaves(x, leaves, targets, weights, agg, len(a("tree_roots")), n_targets)
  if post == 1: out = out.softmax(1).cast(x.dtype)
  elif post == 2: out = out.sigmoid().cast(x.dtype)
  return out
