"""The rewrite recorder (`ir.viz`): nothing is recorded without `recording` or outside a section; inside one, each
graph_rewrite is one record (pass name, caller, rules fired with their file:line names, graph before and after),
rewrites nested in rules count towards the record around them, rewrites that change nothing are only counted, the
first and last rewrites are kept with a count of those left out, and `to_json` writes one shared node table with
graphs cut to their size limits."""
from tgc.ir import UOp, UPat, PatternMatcher, Ops, dtypes, graph_rewrite, viz
from tgc.ir.provenance import origin
from tgc.ir.symbolic import simplify

X = UOp(Ops.RANGE, dtypes.index, (UOp.const(dtypes.index, 16),), None)

double_to_shift = PatternMatcher([
  # x*2 -> x+x (a test rule)
  (UPat.var("x") * 2, lambda x: x + x),
], name="doubling")


def _sum(terms: int) -> UOp:
  out = X
  for i in range(1, terms): out = out + UOp.const(dtypes.index, i) * X
  return out


def test_nothing_recorded_when_off_or_outside_a_section():
  assert viz.active() is None
  assert graph_rewrite(X * 2, double_to_shift) is X + X
  with viz.recording() as recorder:
    assert viz.active() is recorder and not recorder.collecting
    graph_rewrite(X * 2, double_to_shift)
    viz.snapshot("ignored", X)
  assert recorder.sections == [] and viz.active() is None


def test_one_record_per_rewrite_with_rules_and_graphs():
  with viz.recording() as recorder:
    with viz.section("k0", "kernel") as section:
      viz.snapshot("ast", X * 2)
      out = graph_rewrite(X * 2, double_to_shift)
      graph_rewrite(X, double_to_shift)             # changes nothing: counted only
  assert out is X + X and recorder.sections == [section]
  assert section.title == "k0" and section.kind == "kernel" and section.snapshots[0].roots == (X * 2,)
  [record] = section.records
  assert record.pass_name == "doubling" and record.before is X * 2 and record.after is X + X
  [(rule, count)] = record.rules.items()
  assert rule.startswith("test_viz_recorder.py:") and "(x*2 -> x+x (a test rule))" in rule and count == 1
  assert record.caller.endswith("test_viz_recorder.py:test_one_record_per_rewrite_with_rules_and_graphs")
  assert section.unchanged == {"doubling": 1} and section.changed == 1 and section.left_out == 0


def test_default_table_name_is_its_file():
  assert PatternMatcher([(UPat(Ops.CONST, name="c"), lambda c: None)]).name == "test_viz_recorder"
  assert (double_to_shift + double_to_shift).name == "doubling+doubling"


def test_nested_rewrites_fold_into_the_outer_record():
  def simplify_inside(x: UOp):
    return simplify(x + 0) if x.op is Ops.MUL else None     # a rule that runs a rewrite of its own
  outer = PatternMatcher([(UPat(Ops.MUL, name="x"), simplify_inside)], name="outer")
  with viz.recording(), viz.section("s", "schedule") as section:
    graph_rewrite((X * 3) * 1, outer)
  assert [r.pass_name for r in section.records] == ["outer"]
  assert any("x+0 -> x" in name for name in section.records[0].nested)
  assert section.fired.keys() >= section.records[0].nested.keys()


def test_first_and_last_records_are_kept():
  with viz.recording(), viz.section("many", "kernel") as section:
    for i in range(viz.MAX_RECORDS + 10): graph_rewrite(X * 2 + UOp.const(dtypes.index, 100 + i), double_to_shift)
  kept = [r.index for r in section.records]
  half = viz.MAX_RECORDS // 2
  assert len(kept) == viz.MAX_RECORDS and section.changed == viz.MAX_RECORDS + 10 and section.left_out == 10
  assert kept[:half] == list(range(half)) and kept[-1] == viz.MAX_RECORDS + 9


def test_to_json_shares_nodes_and_cuts_big_graphs():
  with origin("model/add", "Add"): big = _sum(60)
  with viz.recording() as recorder, viz.section("s", "schedule"):
    viz.snapshot("whole", big)
    graph_rewrite(X * 2, double_to_shift)
    simplify(big)
  data = recorder.to_json(max_graph_nodes=20, max_snapshot_nodes=1000)
  uops, [section] = data["uops"], data["sections"]
  whole = section["snapshots"][0]["graph"]
  assert whole["nodes"] == whole["total"] == len(big.toposort())
  first = section["records"][0]
  before, after = first["before"], first["after"]
  assert uops[before["roots"][0]][0] == "MUL" and uops[after["roots"][0]][0] == "ADD"
  # X is one row shared by the snapshot and both graphs of the record
  assert sum(1 for row in uops if row[0] == "RANGE") == 1
  cut = section["records"][1]["before"]
  assert cut["nodes"] == 20 and cut["total"] > 20
  assert data["origins"] and any(row[4] >= 0 and data["origins"][row[4]] == ["model/add", "Add"] for row in uops)
  assert all(-1 <= s < len(uops) for row in uops for s in row[3])
  assert first["rules"] and first["rules"][0][1] == 1


def test_node_budget_leaves_graphs_out():
  with viz.recording() as recorder, viz.section("s", "schedule"):
    viz.snapshot("a", _sum(30))
    viz.snapshot("b", _sum(40) * 3)
  data = recorder.to_json(max_nodes=len(_sum(30).toposort()) + 2)
  graphs = [s["graph"] for s in data["sections"][0]["snapshots"]]
  assert graphs[0] is not None and graphs[1] is None and data["graphs_left_out"] == 1


def test_arg_text_is_short():
  assert viz.arg_text(UOp(Ops.REDUCE_AXIS, dtypes.float32, (), (Ops.ADD, (2,)))) == "(ADD, (2,))"
  r = UOp(Ops.CONST, dtypes.index, (), 7)
  assert viz.arg_text(r) == "7" and viz.arg_text(UOp(Ops.SINK, dtypes.bool, (r,))) == ""
  long = UOp(Ops.BUFFER, dtypes.float32, (), ("x" * 200, (4,)))
  assert len(viz.arg_text(long)) == viz.ARG_CHARS and viz.arg_text(long).endswith("...")
