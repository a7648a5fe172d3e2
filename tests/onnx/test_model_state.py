"""States kept by the artifact (`--max-context N`, `--state IN=OUT`): a decoder's KV cache (`past_key_values.0.key`
read, `present.0.key` returned with the new entries appended) lives in the C arena; each run reads the entries the
runs before it appended and writes only its own. Checked against onnxruntime running the same model with the cache
passed in and out, over calls of different lengths; a run that would overflow the cache is refused and changes
nothing; no kernel copies the cache and the run path allocates nothing (counted with the linker's --wrap); a state
that is not an append, and states on targets that do not keep them, are one-line errors."""
import json
import os
import subprocess
import numpy as np
import onnx
import pytest
from click.testing import CliRunner
from onnx import TensorProto, helper, numpy_helper
from tgc.aot import UserError, compile_model
from tgc.aot.cli import cli
from tgc.runtimes.artifact import ArtifactError
from tgc.runtimes.artifact_c import CArtifact
from tgc.runtimes.dims import evaluate_size

ort = pytest.importorskip("onnxruntime", reason="onnxruntime is the reference for the cache over several calls")

RNG = np.random.default_rng(5)
HEADS, HEAD_DIM, WIDTH = 2, 8, 16
PAST, SEQ, TOTAL = "past_sequence_length", "sequence_length", "past_sequence_length + sequence_length"
CACHE = ("past_key_values.0.key", "past_key_values.0.value")


def _floats(name: str, shape) -> onnx.TensorProto:
  return numpy_helper.from_array((RNG.standard_normal(shape) * 0.4).astype(np.float32), name)


def decoder_model(tmp_path, scaled_past: bool = False, names=("past_key_values.0", "present.0"),
                  vocab: int | None = None) -> str:
  """One attention layer with a KV cache in transformers' layout: x (1, seq, 16), attention_mask (1, past + seq),
  past keys/values (1, 2, past, 8) -> y and the cache with this call's keys and values appended (a Concat along
  the sequence). `scaled_past`: the returned cache holds the past keys doubled (no append: cannot stay in place).
  `vocab`: a language model around it: input_ids and position_ids (int64, (1, seq)) through embedding tables in,
  logits (1, seq, vocab) out."""
  past, present = names
  cache_in = [helper.make_tensor_value_info(f"{past}.{k}", TensorProto.FLOAT, [1, HEADS, PAST, HEAD_DIM])
              for k in ("key", "value")]
  cache_out = [helper.make_tensor_value_info(f"{present}.{k}", TensorProto.FLOAT, [1, HEADS, TOTAL, HEAD_DIM])
               for k in ("key", "value")]
  x = helper.make_tensor_value_info("x", TensorProto.FLOAT, [1, SEQ, WIDTH])
  mask = helper.make_tensor_value_info("attention_mask", TensorProto.INT64, [1, TOTAL])
  y = helper.make_tensor_value_info("y", TensorProto.FLOAT, [1, SEQ, WIDTH])
  nodes = []
  for p in ("q", "k", "v"):      # (1, seq, 16) -> (1, 2, seq, 8)
    nodes += [helper.make_node("MatMul", ["x", f"w{p}"], [f"{p}0"]),
              helper.make_node("Reshape", [f"{p}0", "heads_shape"], [f"{p}1"]),
              helper.make_node("Transpose", [f"{p}1"], [f"{p}_new"], perm=[0, 2, 1, 3])]
  old_key = f"{past}.key"
  if scaled_past:
    nodes.append(helper.make_node("Mul", [old_key, "two"], ["doubled"]))
    old_key = "doubled"
  nodes += [
    helper.make_node("Concat", [old_key, "k_new"], [f"{present}.key"], axis=2),
    helper.make_node("Concat", [f"{past}.value", "v_new"], [f"{present}.value"], axis=2),
    helper.make_node("Transpose", [f"{present}.key"], ["kt"], perm=[0, 1, 3, 2]),
    helper.make_node("MatMul", ["q_new", "kt"], ["scores0"]),
    helper.make_node("Mul", ["scores0", "scale"], ["scores1"]),
    helper.make_node("Cast", ["attention_mask"], ["maskf"], to=TensorProto.FLOAT),
    helper.make_node("Sub", ["one", "maskf"], ["masked"]),
    helper.make_node("Mul", ["masked", "big"], ["bias0"]),
    helper.make_node("Unsqueeze", ["bias0", "mask_axes"], ["bias"]),
    helper.make_node("Add", ["scores1", "bias"], ["scores"]),
    helper.make_node("Softmax", ["scores"], ["probs"], axis=-1),
    helper.make_node("MatMul", ["probs", f"{present}.value"], ["ctx0"]),
    helper.make_node("Transpose", ["ctx0"], ["ctx1"], perm=[0, 2, 1, 3]),
    helper.make_node("Reshape", ["ctx1", "merge_shape"], ["ctx"]),
    helper.make_node("MatMul", ["ctx", "wo"], ["y"]),
  ]
  inits = [_floats(f"w{p}", (WIDTH, WIDTH)) for p in ("q", "k", "v", "o")] + [
    numpy_helper.from_array(np.array([1, -1, HEADS, HEAD_DIM], np.int64), "heads_shape"),
    numpy_helper.from_array(np.array([1, -1, WIDTH], np.int64), "merge_shape"),
    numpy_helper.from_array(np.array([1, 2], np.int64), "mask_axes"),
    numpy_helper.from_array(np.array(HEAD_DIM ** -0.5, np.float32), "scale"),
    numpy_helper.from_array(np.array(1.0, np.float32), "one"),
    numpy_helper.from_array(np.array(-1e4, np.float32), "big")]
  if scaled_past: inits.append(numpy_helper.from_array(np.array(2.0, np.float32), "two"))
  inputs, outputs = [x, mask], [y]
  if vocab:
    inputs = [helper.make_tensor_value_info(n, TensorProto.INT64, [1, SEQ]) for n in ("input_ids", "position_ids")]
    inputs.insert(1, mask)
    outputs = [helper.make_tensor_value_info("logits", TensorProto.FLOAT, [1, SEQ, vocab])]
    nodes = [helper.make_node("Gather", ["embedding", "input_ids"], ["tokens"]),
             helper.make_node("Gather", ["position_table", "position_ids"], ["places"]),
             helper.make_node("Add", ["tokens", "places"], ["x"])] + nodes + [
             helper.make_node("Add", ["x", "y"], ["h"]),
             helper.make_node("MatMul", ["h", "lm_head"], ["logits"])]
    inits += [_floats("embedding", (vocab, WIDTH)), _floats("position_table", (64, WIDTH)),
              _floats("lm_head", (WIDTH, vocab))]
  model = helper.make_model(helper.make_graph(nodes, "decoder", inputs + cache_in, outputs + cache_out, inits),
                            opset_imports=[helper.make_opsetid("", 17)])
  onnx.checker.check_model(model)
  path = str(tmp_path / "decoder.onnx")
  onnx.save(model, path)
  return path


def _compile(tmp_path, path: str, max_context: int = 16, **kw) -> str:
  out = str(tmp_path / "out")
  compile_model(path, "c", out, dims={SEQ: (1, 8)}, max_context=max_context, **kw)
  return out


def feeds_at(past: int, seq: int) -> dict:
  """Random inputs of the decoder for a call of `seq` entries after `past`."""
  mask = np.ones((1, past + seq), np.int64)
  mask[0, RNG.integers(0, past + seq)] = 0        # one masked position: the mask's size is past + seq
  return {"x": RNG.standard_normal((1, seq, WIDTH)).astype(np.float32), "attention_mask": mask}


def empty_cache() -> dict:
  """The decoder's cache before its first call, as onnxruntime takes it."""
  return {c: np.zeros((1, HEADS, 0, HEAD_DIM), np.float32) for c in CACHE}


def run_calls(art, session, lengths=(3, 1, 1, 6, 1)) -> tuple[dict, int]:
  """Calls of `lengths` entries from empty states on the artifact runner `art`, each against onnxruntime's
  `session` fed the cache back: y and every state equal the reference's, the held length grows by each call.
  Returns the reference's cache after the last call and its length."""
  cache, past = empty_cache(), 0
  for seq in lengths:
    feeds = feeds_at(past, seq)
    ref = session.run(None, {**feeds, **cache})
    np.testing.assert_allclose(art.run(feeds)["y"], ref[0], rtol=1e-4, atol=1e-5)
    cache, past = dict(zip(CACHE, ref[1:])), past + seq
    for i, c in enumerate(CACHE): np.testing.assert_allclose(art.state(i), cache[c], rtol=1e-5, atol=1e-6)
    assert art.held_sizes() == {PAST: past}
  return cache, past


def check_rewind(art, session, capacity: int, refused: str) -> None:
  """After a call of 4 entries, keeping the first 2 (reset_state(2)) makes the next call continue from them; a
  length past the `capacity` is refused with an error matching `refused`."""
  art.run(feeds_at(0, 4))
  art.reset_state(2)
  kept = {c: art.state(i) for i, c in enumerate(CACHE)}
  assert kept[CACHE[0]].shape == (1, HEADS, 2, HEAD_DIM)
  feeds = feeds_at(2, 1)
  np.testing.assert_allclose(art.run(feeds)["y"], session.run(None, {**feeds, **kept})[0], rtol=1e-4, atol=1e-5)
  with pytest.raises(ArtifactError, match=refused): art.reset_state(capacity + 1)


def test_cache_matches_onnxruntime_over_calls_of_different_lengths(tmp_path):
  path = decoder_model(tmp_path)
  out = _compile(tmp_path, path)
  manifest = json.load(open(os.path.join(out, "manifest.json")))
  assert [i["name"] for i in manifest["inputs"]] == ["x", "attention_mask"]
  assert [o["name"] for o in manifest["outputs"]] == ["y"]
  assert [(s["name"], s["output"], s["shape"], s["axis"], s["length"]) for s in manifest["states"]] == \
    [(c, c.replace("past_key_values", "present"), [1, HEADS, 16, HEAD_DIM], 2, PAST) for c in CACHE]
  sess = ort.InferenceSession(path, providers=["CPUExecutionProvider"])
  with CArtifact(out) as art:
    for _ in range(2):                 # the second round after a reset starts a new sequence
      run_calls(art, sess)
      art.reset_state()
    check_rewind(art, sess, 16, "set_state_length")


def test_a_run_past_the_capacity_is_refused_and_changes_nothing(tmp_path):
  out = _compile(tmp_path, decoder_model(tmp_path), max_context=8)
  with CArtifact(out) as art:
    art.run(feeds_at(0, 6))
    before = [art.state(i) for i in range(2)]
    with pytest.raises(ArtifactError, match="no room"): art.run(feeds_at(6, 3))
    assert art.held_sizes() == {PAST: 6}
    for i in range(2): np.testing.assert_array_equal(art.state(i), before[i])
    art.run(feeds_at(6, 2))
    assert art.held_sizes() == {PAST: 8}


def test_no_kernel_copies_the_cache(tmp_path):
  """Only the kernels appending to a state write it, and their work does not grow with the state's length; no
  intermediate holds a copy of a grown state (attention reads the cache where it is)."""
  out = _compile(tmp_path, decoder_model(tmp_path), max_context=64)
  manifest = json.load(open(os.path.join(out, "manifest.json")))
  for st in manifest["states"]:
    grown = sorted(str(st["grown"] if k == st["axis"] else d) for k, d in enumerate(st["shape"]))
    assert all(sorted(map(str, b["shape"])) != grown for b in manifest["arena_buffers"]), manifest["arena_buffers"]
  kernels = {k["name"]: k for k in manifest["kernels"]}
  writers = [c for c in manifest["calls"] if c["args"][0]["kind"] == "state"]
  assert sorted(c["args"][0]["index"] for c in writers) == [0, 1]
  for c in manifest["calls"]:
    assert all(a["kind"] != "state" for a in c["args"][1:]) or c not in writers
  for c in writers:
    size = kernels[c["kernel"]]["global_size"]
    at = [[evaluate_size(s, {PAST: past, SEQ: 1}) for s in size] for past in (0, 63)]
    assert at[0] == at[1], size


DRIVER = r"""
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include "model.h"
static long allocations = 0;
void *__real_malloc(size_t n);
void *__real_calloc(size_t n, size_t k);
void *__real_realloc(void *p, size_t n);
void *__wrap_malloc(size_t n) { allocations++; return __real_malloc(n); }
void *__wrap_calloc(size_t n, size_t k) { allocations++; return __real_calloc(n, k); }
void *__wrap_realloc(void *p, size_t n) { allocations++; return __real_realloc(p, n); }
int main(int argc, char **argv) {
  decoder_ctx ctx;
  static float x[16], y[16];
  static long long mask[64];
  int32_t dims[DECODER_NUM_DIMS];
  long before;
  int step, i, k;
  if (decoder_init(&ctx, argv[1], NULL) != DECODER_OK) return 2;
  before = allocations;
  for (step = 0; step < 40; step++) {
    const void *in[2];
    void *out[1];
    for (i = 0; i < 16; i++) x[i] = (float)((step * 7 + i) % 5) * 0.1f;
    for (i = 0; i <= step; i++) mask[i] = 1;
    for (k = 0; k < (int)decoder_dim_count(); k++) dims[k] = 1;    /* sequence_length 1 (the length is held) */
    if (decoder_set_dims(&ctx, dims) != DECODER_OK) return 3;
    in[0] = x; in[1] = mask; out[0] = y;
    if (decoder_run(&ctx, in, out) != DECODER_OK) return 4;
  }
  printf("%ld %d\n", allocations - before, (int)decoder_state_length(&ctx, 0));
  decoder_free(&ctx);
  (void)argc;
  return 0;
}
"""


def test_decoding_allocates_nothing(tmp_path):
  """40 one-token runs of the C library after init: no malloc/calloc/realloc (wrapped by the linker), and the
  state holds 40 entries."""
  out = _compile(tmp_path, decoder_model(tmp_path), max_context=64)
  driver = os.path.join(out, "count.c")
  with open(driver, "w") as f: f.write(DRIVER)
  exe = os.path.join(out, "count")
  subprocess.run(["cc", "-std=c99", "-O1", "-I", out, os.path.join(out, "model.c"), driver, "-o", exe, "-lm",
                  "-Wl,--wrap=malloc,--wrap=calloc,--wrap=realloc"], check=True, capture_output=True)
  result = subprocess.run([exe, os.path.join(out, "weights.safetensors")], capture_output=True, text=True)
  assert result.returncode == 0, result
  assert result.stdout.split() == ["0", "40"]


def test_states_found_by_other_names_and_declared(tmp_path):
  path = decoder_model(tmp_path, names=("cache_in", "cache_out"))
  with pytest.raises(UserError, match="has no state.*--state"): _compile(tmp_path, path)
  out = _compile(tmp_path, path, states={"cache_in.key": "cache_out.key", "cache_in.value": "cache_out.value"})
  assert [s["output"] for s in json.load(open(os.path.join(out, "manifest.json")))["states"]] == \
    ["cache_out.key", "cache_out.value"]


@pytest.mark.parametrize("kwargs, message", [
  ({"states": {"nope": "present.0.key"}}, "--state nope=present.0.key: the model has no input 'nope'"),
  ({"states": {"past_key_values.0.key": "nope"}}, "the model has no output 'nope'"),
  ({"max_context": None, "states": {"past_key_values.0.key": "present.0.key"}}, "--state needs --max-context"),
  ({"max_context": 0}, "--max-context must be a positive"),
  ({"dims": {SEQ: (1, 8), PAST: (1, 8)}}, "is a state's length"),
])
def test_bad_state_options_are_one_line_errors(tmp_path, kwargs, message):
  path = decoder_model(tmp_path)
  options = {"dims": {SEQ: (1, 8)}, "max_context": 16, **kwargs}
  with pytest.raises(UserError, match=message) as error:
    compile_model(path, "c", str(tmp_path / "out"), **options)
  assert "\n" not in str(error.value)
  assert not os.path.exists(tmp_path / "out")


def test_a_state_that_is_not_appended_to_is_refused(tmp_path):
  with pytest.raises(UserError, match="'past_key_values.0.key' -> 'present.0.key': the output's first entries along "
                                      "dim 2 are not the input's"):
    _compile(tmp_path, decoder_model(tmp_path, scaled_past=True))


def test_targets_without_states_refuse_them(tmp_path):
  with pytest.raises(UserError, match=r"not supported for target cuda yet \(targets that keep them: c, opencl"):
    compile_model(decoder_model(tmp_path), "cuda", str(tmp_path / "out"), dims={SEQ: (1, 8)}, max_context=16)


def test_cli_compiles_and_lists_states(tmp_path):
  path = decoder_model(tmp_path)
  out = str(tmp_path / "cli_out")
  result = CliRunner().invoke(cli, ["compile", path, "--target", "c", "-o", out, "--dim", f"{SEQ}=1..8",
                                    "--max-context", "32"])
  assert result.exit_code == 0, result.output
  assert "state         past_key_values.0.key -> present.0.key (1, 2, 32, 8) float32" in result.output
  bad = CliRunner().invoke(cli, ["compile", path, "--target", "c", "-o", out, "--dim", f"{SEQ}=1..8",
                                 "--max-context", "32", "--state", "oops"])
  assert bad.exit_code != 0 and "--state 'oops': expected INPUT=OUTPUT" in bad.output


def test_validate_fills_the_cache_and_compares_with_the_reference(tmp_path):
  out = _compile(tmp_path, decoder_model(tmp_path))
  result = CliRunner().invoke(cli, ["validate", out])
  assert result.exit_code == 0, result.output
  assert "state past_key_values.0.key after 3 runs at sequence_length=4, past_sequence_length=8" in result.output
  assert result.output.rstrip().endswith("OK")
