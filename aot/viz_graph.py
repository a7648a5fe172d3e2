"""The model graph of the `tgc viz` page, laid out: the model's nodes (and its inputs and outputs) top to bottom, each
coloured by the kernel that computes it, every kernel's nodes outlined as one group, edges labelled with the shape of
the tensor they carry.

The layout is layered (Sugiyama style, without dummy nodes): a node's layer is the longest path from the inputs
(nodes with no inputs sit just above their first user); within a layer, nodes are ordered by the barycentre of their
neighbours over a few sweeps, the nodes of one kernel kept side by side; x positions follow the neighbours' (the
closest positions to the wanted ones that keep the order and the spacing: pool-adjacent-violators on a line). Pure
Python, deterministic (ties break by model order), linear-ish in nodes and edges: a few thousand nodes take well under
a second. The page draws what this module places (`templates/viz/page.html.tmpl`)."""
from __future__ import annotations
from collections import deque
from dataclasses import dataclass

NODE_W, NODE_H = 150, 36       # a node's box
GAP_X = 24                     # between boxes of one kernel in a layer
GAP_GROUP = 48                 # between boxes of different kernels
GAP_Y = 60                     # between layers (edge labels sit there)
MARGIN = 30
SWEEPS = 4                     # barycentre sweeps (down and up) that order the layers
KIND_NODE, KIND_INPUT, KIND_OUTPUT = 0, 1, 2


@dataclass
class Layout:
  """Boxes' top-left corners, layers and the order within each layer."""
  x: list[float]
  y: list[float]
  layer: list[int]
  layers: list[list[int]]
  width: float
  height: float


# ---------------------------------------------------------------- the graph of a model
def model_graph(nodes: list[dict], inputs: list[dict], outputs: list[dict], kernel_index: dict[str, int],
                shapes: dict[str, str], node_edges: list[tuple[int, int, str]] | None = None) -> dict:
  """The page's graph: `nodes` (the page's model nodes, with ONNX "inputs"/"outputs" tensor names when known),
  the model's inputs and outputs as nodes of their own, edges from the tensor names (or `node_edges` between node
  indexes when there are no tensor names) labelled from `shapes` (tensor name -> text), laid out.

  {"box": [w, h], "width", "height", "nodes": [[x, y, kind, ref, kernel]] (kind: node, input or output; ref: index
  into the page's nodes, inputs or outputs; kernel: index of the kernel that computes it, -1 for none),
  "edges": [[from, to, label]], "groups": [[kernel, [[y, x0, x1], ...]]] (a kernel's extent in each layer it has
  nodes in, top to bottom)}."""
  entries = [(KIND_NODE, i, _primary_kernel(n, kernel_index)) for i, n in enumerate(nodes)]
  entries += [(KIND_INPUT, i, -1) for i in range(len(inputs))] + [(KIND_OUTPUT, i, -1) for i in range(len(outputs))]
  first_input, first_output = len(nodes), len(nodes) + len(inputs)
  producer = {t["name"]: first_input + i for i, t in enumerate(inputs)}
  for i, n in enumerate(nodes):
    for t in n.get("outputs", []): producer.setdefault(t, i)
  edges: list[tuple[int, int, str]] = []
  for i, n in enumerate(nodes):
    for t in dict.fromkeys(n.get("inputs", [])):
      if t in producer and producer[t] != i: edges.append((producer[t], i, shapes.get(t, "")))
  for i, t in enumerate(outputs):
    if t["name"] in producer: edges.append((producer[t["name"]], first_output + i, shapes.get(t["name"], "")))
  edges += node_edges or []
  groups = [e[2] for e in entries]
  lay = layered_layout(len(entries), [(a, b) for a, b, _ in edges], groups)
  return {"box": [NODE_W, NODE_H], "width": lay.width, "height": lay.height,
          "nodes": [[lay.x[v], lay.y[v], kind, ref, kernel] for v, (kind, ref, kernel) in enumerate(entries)],
          "edges": [[a, b, label] for a, b, label in edges], "groups": group_extents(lay, groups)}


def _primary_kernel(node: dict, kernel_index: dict[str, int]) -> int:
  """The first kernel that computes a node (its colour and its group), -1 for none."""
  found = [kernel_index[k] for k in node.get("kernels", []) if k in kernel_index]
  return found[0] if found else -1


def shape_text(shape, dtype: str = "") -> str:
  """A tensor's shape as an edge label: 1x3x224x224 (a symbolic dimension by its name), with a dtype other than
  float32 after it."""
  dims = "x".join(str(d) for d in shape) if len(shape) else "scalar"
  return dims + (f" {dtype}" if dtype and dtype != "float32" else "")


def group_extents(lay: Layout, groups: list[int]) -> list[list]:
  """Per kernel (in kernel order), its boxes' extent in each layer it has nodes in: [y, x0, x1] top to bottom."""
  extents: dict[int, dict[int, list[float]]] = {}
  for v, g in enumerate(groups):
    if g < 0: continue
    row = extents.setdefault(g, {}).setdefault(lay.layer[v], [lay.y[v], lay.x[v], lay.x[v] + NODE_W])
    row[1], row[2] = min(row[1], lay.x[v]), max(row[2], lay.x[v] + NODE_W)
  return [[g, [rows[layer] for layer in sorted(rows)]] for g, rows in sorted(extents.items())]


# ---------------------------------------------------------------- layered layout
def layered_layout(count: int, edges: list[tuple[int, int]], groups: list[int] | None = None) -> Layout:
  """Place `count` boxes with `edges` (from, to) top to bottom; boxes of one group (>= 0) kept side by side in a
  layer. A cycle (there should be none) is broken by model order."""
  groups = groups if groups is not None else [-1] * count
  preds: list[list[int]] = [[] for _ in range(count)]
  succs: list[list[int]] = [[] for _ in range(count)]
  for a, b in edges:
    if a != b:
      preds[b].append(a)
      succs[a].append(b)
  layer = assign_layers(count, preds, succs)
  layers: list[list[int]] = [[] for _ in range(max(layer, default=-1) + 1)]
  for v in range(count): layers[layer[v]].append(v)
  order_layers(layers, preds, succs, groups)
  x = place_x(layers, preds, succs, groups)
  y = [MARGIN + layer[v] * (NODE_H + GAP_Y) for v in range(count)]
  width = max((x[v] + NODE_W for v in range(count)), default=0) + MARGIN
  return Layout(x, y, layer, layers, width, MARGIN + len(layers) * (NODE_H + GAP_Y) - GAP_Y + MARGIN)


def assign_layers(count: int, preds: list[list[int]], succs: list[list[int]]) -> list[int]:
  """Longest path from the sources (Kahn's order, ties by index); a node with no inputs moves down to just above
  its first user."""
  indegree = [len(p) for p in preds]
  queue = deque(v for v in range(count) if indegree[v] == 0)
  order: list[int] = []
  placed = [False] * count
  while len(order) < count:
    if not queue:     # a cycle: take the first node not placed yet
      queue.append(next(v for v in range(count) if not placed[v]))
    v = queue.popleft()
    if placed[v]: continue
    placed[v] = True
    order.append(v)
    for s in succs[v]:
      indegree[s] -= 1
      if indegree[s] == 0: queue.append(s)
  layer = [0] * count
  for v in order: layer[v] = max((layer[p] + 1 for p in preds[v] if placed[p] and layer[p] >= 0), default=0)
  for v in order:
    if not preds[v] and succs[v]: layer[v] = max(0, min(layer[s] for s in succs[v]) - 1)
  return layer


def order_layers(layers: list[list[int]], preds: list[list[int]], succs: list[list[int]], groups: list[int]) -> None:
  """Reorder each layer in place by the barycentre of the neighbours' relative positions, sweeping down (towards
  the sources' order) and up, a group's boxes kept together at its members' mean."""
  where: dict[int, float] = {}

  def remember(layer: list[int]) -> None:
    for i, v in enumerate(layer): where[v] = (i + 0.5) / len(layer)
  for layer in layers: remember(layer)
  for sweep in range(SWEEPS):
    down = sweep % 2 == 0
    for layer in (layers if down else reversed(layers)):
      neighbours = preds if down else succs
      centre = {v: _mean([where[u] for u in neighbours[v]], where[v]) for v in layer}
      members: dict[int, list[float]] = {}
      for v in layer:
        if groups[v] >= 0: members.setdefault(groups[v], []).append(centre[v])
      group_centre = {g: sum(c) / len(c) for g, c in members.items()}
      index = {v: i for i, v in enumerate(layer)}
      layer.sort(key=lambda v: (group_centre.get(groups[v], centre[v]), groups[v], centre[v], index[v]))
      remember(layer)


def place_x(layers: list[list[int]], preds: list[list[int]], succs: list[list[int]], groups: list[int]) -> list[float]:
  """x of each box: first packed in order, then moved towards its neighbours' centres (down, up, down again)."""
  count = sum(len(layer) for layer in layers)
  x = [0.0] * count
  for layer in layers:
    steps = _spacing(layer, groups)
    for v, offset in zip(layer, steps): x[v] = offset
  for neighbours, order in ((preds, layers), (succs, layers[::-1]), (preds, layers)):
    for layer in order:
      wanted = [_mean([x[u] for u in neighbours[v]], x[v]) for v in layer]
      for v, value in zip(layer, closest_in_order(wanted, _spacing(layer, groups))): x[v] = value
  shift = MARGIN - min(x, default=MARGIN)
  return [round(value + shift, 1) for value in x]


def _spacing(layer: list[int], groups: list[int]) -> list[float]:
  """The offset of each box from the first one when packed tight (boxes of one group closer together)."""
  out, at = [], 0.0
  for i, v in enumerate(layer):
    if i: at += NODE_W + (GAP_X if groups[v] >= 0 and groups[v] == groups[layer[i - 1]] else GAP_GROUP)
    out.append(at)
  return out


def closest_in_order(wanted: list[float], offsets: list[float]) -> list[float]:
  """Positions p (p[i] - p[i-1] >= offsets[i] - offsets[i-1]) closest to `wanted` in squared distance: the isotonic
  regression of wanted - offsets (pool adjacent violators), offsets added back."""
  blocks: list[list[float]] = []     # [sum of (wanted - offset), count]
  for w, c in zip(wanted, offsets):
    blocks.append([w - c, 1])
    while len(blocks) > 1 and blocks[-2][0] / blocks[-2][1] > blocks[-1][0] / blocks[-1][1]:
      total, n = blocks.pop()
      blocks[-1][0] += total
      blocks[-1][1] += n
  out: list[float] = []
  for total, n in blocks: out.extend([total / n] * int(n))
  return [base + c for base, c in zip(out, offsets)]


def _mean(values: list[float], default: float) -> float:
  return sum(values) / len(values) if values else default
