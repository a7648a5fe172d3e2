"""The drawn parts of the `tgc viz` page, as data: the layered layout of the model graph (every node placed, layers
in rows, no two boxes of a row overlapping, each edge pointing down, a kernel's boxes side by side in a row and inside
its outline, the same graph laid out the same way), edges labelled with tensor shapes for an ONNX model and read from
the scheduled graph for a Tensor-API model, a page written twice byte for byte the same, and the profile: the JSON of
`tgc bench --profile --json` (with the machine's roofline) drawn by `tgc viz --profile-json`, each kernel's point
under the roofline by exactly the fraction bench reports, slow kernels marked."""
from __future__ import annotations
import json
import os
import random
import subprocess
import sys
from pathlib import Path

import pytest

from aot_helpers import MNIST, ROOT, tgc
from test_viz import onnx_model, page_data
from tgc.aot import bench, viz as viz_page, viz_graph
from tgc.aot.compile import compile_model
from tgc.runtimes.roofline import Roofline

W, H = viz_graph.NODE_W, viz_graph.NODE_H


def random_dag(count: int, seed: int, group_size: int = 3) -> tuple[list[tuple[int, int]], list[int]]:
  """A chain of `count` nodes with random skip edges (model order is a topological order) and groups of
  `group_size` consecutive nodes (a few left in no group)."""
  rng = random.Random(seed)
  edges = [(i - 1, i) for i in range(1, count)]
  edges += [(rng.randrange(0, i), i) for i in range(2, count) if rng.random() < 0.3]
  groups = [-1 if rng.random() < 0.05 else i // group_size for i in range(count)]
  return edges, groups


def check_layout(lay: viz_graph.Layout, edges: list[tuple[int, int]], groups: list[int]) -> None:
  count = len(lay.x)
  assert sorted(v for layer in lay.layers for v in layer) == list(range(count))      # every node placed once
  for a, b in edges: assert lay.layer[a] < lay.layer[b], (a, b)                     # edges point down
  for row, layer in enumerate(lay.layers):
    assert {lay.y[v] for v in layer} <= {viz_graph.MARGIN + row * (H + viz_graph.GAP_Y)}
    xs = [lay.x[v] for v in layer]
    assert all(x >= 0 and x + W <= lay.width for x in xs) and all(0 <= lay.y[v] <= lay.height - H for v in layer)
    for left, right in zip(layer, layer[1:]):                                         # in order, no overlaps
      assert lay.x[right] - lay.x[left] >= W + viz_graph.GAP_X - 0.2, (row, left, right)
    for g in {groups[v] for v in layer if groups[v] >= 0}:                             # a group's boxes side by side
      at = [i for i, v in enumerate(layer) if groups[v] == g]
      assert at == list(range(at[0], at[-1] + 1)), (row, g)


@pytest.mark.parametrize("count, seed", [(40, 0), (600, 1), (3000, 2)])
def test_layered_layout_places_every_node_in_rows_without_overlaps(count, seed):
  edges, groups = random_dag(count, seed)
  lay = viz_graph.layered_layout(count, edges, groups)
  check_layout(lay, edges, groups)
  again = viz_graph.layered_layout(count, list(edges), list(groups))
  assert (again.x, again.y) == (lay.x, lay.y)


def test_layout_of_branches_cycles_and_lone_nodes():
  # a diamond, a node with no inputs feeding the bottom, a node with no edges at all, and a cycle 6 -> 7 -> 6
  edges = [(0, 1), (0, 2), (1, 3), (2, 3), (4, 3), (6, 7), (7, 6)]
  lay = viz_graph.layered_layout(8, edges)
  assert lay.layer[0] == 0 and lay.layer[1] == lay.layer[2] == 1 and lay.layer[3] == 2
  assert lay.layer[4] == 1                     # sits just above its only user, not at the top
  assert lay.layer[5] == 0 and sorted(v for layer in lay.layers for v in layer) == list(range(8))
  assert abs((lay.x[1] + lay.x[2]) / 2 - lay.x[0]) < W     # a parent centred over its children


def test_closest_in_order_keeps_spacing_and_stays_close():
  offsets = [0, 10, 20, 30]
  assert viz_graph.closest_in_order([0, 100, 200, 300], offsets) == [0, 100, 200, 300]   # room: stay put
  pooled = viz_graph.closest_in_order([50, 50, 50, 50], offsets)      # all want one spot: centred around it
  assert pooled == [35, 45, 55, 65]


def test_model_graph_of_an_onnx_model(tmp_path):
  """Inputs, nodes and outputs as boxes; edges from the tensors, labelled with their inferred shapes; every kernel's
  outline holds exactly its nodes' boxes."""
  data = viz_page.model_page_data(str(onnx_model(tmp_path / "m.onnx")))
  graph = data["graph"]
  kinds = [n[2] for n in graph["nodes"]]
  assert kinds == [viz_graph.KIND_NODE] * 4 + [viz_graph.KIND_INPUT, viz_graph.KIND_OUTPUT]
  names = [data["nodes"][n[3]]["name"] if n[2] == 0 else "io" for n in graph["nodes"]]
  edges = {(names[a] if a < 4 else "x", names[b] if b < 4 else "y", label) for a, b, label in graph["edges"]}
  assert edges == {("x", "mm", "2x8"), ("mm", "add", "2x4"), ("add", "relu", "2x4"), ("relu", "scale", "2x4"),
                   ("scale", "y", "2x4")}
  check_group_outlines(data)


def check_group_outlines(data: dict) -> None:
  graph, kernels = data["graph"], data["kernels"]
  assert [g[0] for g in graph["groups"]] == sorted({n[4] for n in graph["nodes"] if n[4] >= 0})
  for k, rows in graph["groups"]:
    members = [n for n in graph["nodes"] if n[4] == k]
    assert all(data["nodes"][n[3]]["kernels"][0] == kernels[k]["name"] for n in members)
    for x, y, *_ in members:     # each member inside its row of the outline
      assert any(row_y == y and x0 <= x and x + W <= x1 for row_y, x0, x1 in rows), (k, x, y)
    for row_y, x0, x1 in rows:   # and no other box inside a row of it
      others = [n for n in graph["nodes"] if n[4] != k and n[1] == row_y and n[0] + W > x0 and n[0] < x1]
      assert not others, (kernels[k]["name"], others)


def test_model_graph_of_a_tensor_api_model_and_determinism(tmp_path):
  """A Tensor-API model has no ONNX graph: its nodes' links come from the graph the scheduler split. The page of one
  model, written by two runs of the command, is the same bytes (in one process, buffer numbers go on counting)."""
  first, second = tmp_path / "a.html", tmp_path / "b.html"
  for path in (first, second):
    done = subprocess.run([sys.executable, "-m", "tgc.aot.cli", "viz", MNIST, "-o", str(path)], capture_output=True,
                          text=True, env={**os.environ, "PYTHONPATH": str(ROOT)}, timeout=600)
    assert done.returncode == 0, done.stderr
  assert first.read_bytes() == second.read_bytes()
  data = page_data(first)
  graph = data["graph"]
  node_edges = [(a, b) for a, b, _ in graph["edges"] if a < len(data["nodes"]) and b < len(data["nodes"])]
  assert len(node_edges) >= len(data["nodes"]) - 2, (len(node_edges), len(data["nodes"]))
  assert all(label for _, _, label in graph["edges"])
  check_group_outlines(data)


# ---------------------------------------------------------------- the profile
@pytest.fixture(scope="module")
def small_out(tmp_path_factory) -> Path:
  folder = tmp_path_factory.mktemp("viz_profile")
  compile_model(str(onnx_model(folder / "m.onnx")), "c", str(folder / "out"))
  return folder / "out"


def test_roofline_points_sit_under_the_roof_by_the_reported_fraction(small_out):
  """attach_profile's intensity puts each kernel's GFLOP/s under min(peak, bandwidth * intensity) by exactly the
  fraction `tgc bench --profile` computes, so the dashed 10% line separates exactly the kernels marked slow."""
  m = json.loads((small_out / "manifest.json").read_text())
  machine = Roofline(gflops=50.0, gbytes=5.0)
  per_call = [1e-6 * (i + 1) for i in range(len(m["calls"]))]
  profile = bench.kernel_profile(m, per_call, runs=1, machine=machine)
  data = viz_page.artifact_page_data(str(small_out), rebuild=False)
  viz_page.attach_profile(data, {"source": "test", "profile": [vars(k) for k in profile],
                                 "machine": {"gflops": machine.gflops, "gbytes": machine.gbytes}})
  drawn = data["profile"]["kernels"]
  assert [k["kernel"] for k in drawn] == [k.kernel for k in profile] and all(k["index"] >= 0 for k in drawn)
  for k in drawn:
    roof = min(machine.gflops, machine.gbytes * k["intensity"])
    assert k["gflops"] / roof == pytest.approx(k["roofline"], rel=1e-9) or k["roofline"] == 1.0
    assert k["slow"] == (k["roofline"] < bench.SLOW_FRACTION)


def test_cli_profile_json_from_bench(small_out, tmp_path):
  result = tgc("bench", small_out, "--profile", "--json", "--runs", "3", "--warmup", "1")
  assert result.exit_code == 0, result.output
  report = json.loads(result.stdout)
  assert set(report["machine"]) == {"gflops", "gbytes"} and report["machine"]["gflops"] > 0
  report["profile"][0]["roofline"] = 0.01        # one kernel far below its roofline
  profile_json = tmp_path / "profile.json"
  profile_json.write_text(json.dumps(report))
  page = tmp_path / "p.html"
  result = tgc("viz", small_out, "--profile-json", profile_json, "-o", page)
  assert result.exit_code == 0, result.output
  profile = page_data(page)["profile"]
  assert [k["kernel"] for k in profile["kernels"]] == [k["kernel"] for k in report["profile"]]
  assert profile["kernels"][0]["slow"] and profile["machine"] == report["machine"]
  assert profile["slow_fraction"] == bench.SLOW_FRACTION


def test_cli_profile_runs_the_artifact(small_out, tmp_path):
  page = tmp_path / "run.html"
  result = tgc("viz", small_out, "--profile", "-o", page)
  assert result.exit_code == 0, result.output
  profile = page_data(page)["profile"]
  assert profile["source"].startswith("tgc bench --profile") and profile["machine"]["gflops"] > 0
  assert {k["kernel"] for k in profile["kernels"]} == {k["name"] for k in page_data(page)["kernels"]}
  assert all(k["seconds"] > 0 and k["intensity"] > 0 for k in profile["kernels"])


def test_cli_profile_errors(small_out, tmp_path):
  model = onnx_model(tmp_path / "m.onnx")
  result = tgc("viz", model, "--profile", "-o", tmp_path / "x.html")
  assert result.exit_code == 2 and "--profile times an artifact folder" in result.stderr
  bad = tmp_path / "bad.json"
  bad.write_text('{"runs": 3}')
  result = tgc("viz", small_out, "--profile-json", bad, "-o", tmp_path / "x.html")
  assert result.exit_code == 2 and "no per-kernel profile" in result.stderr
  result = tgc("viz", small_out, "--profile-json", tmp_path / "missing.json", "-o", tmp_path / "x.html")
  assert result.exit_code == 2 and "missing.json" in result.stderr
