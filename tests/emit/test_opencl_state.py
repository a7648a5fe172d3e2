"""States on the OpenCL target (`--max-context N`): the decoder of tests/onnx/test_model_state.py keeps its KV cache in
device buffers of their capacity, outside the arena of intermediates; each run appends in place. Checked against
onnxruntime over calls of different lengths (both kernel variants), again after a reset; the states read back
(`state_read`) equal onnxruntime's present outputs; a run past the capacity is refused and changes nothing;
`tgc validate` passes; and a C program that decodes token by token shows that the host library's run path allocates
no host memory and creates no OpenCL buffer (malloc/calloc/realloc and clCreateBuffer/clCreateSubBuffer wrapped by the
linker), and on Oclgrind that no kernel reads or writes outside a buffer at any length."""
import ctypes
import json
import subprocess
import numpy as np
import pytest
from click.testing import CliRunner
from tgc.aot import compile_model
from tgc.aot.cli import cli
from tgc.runtimes.artifact import ArtifactError
from tgc.runtimes.artifact_opencl import OpenCLArtifact
from tests.emit.test_opencl_artifact import cl_device, oclgrind_env  # noqa: F401 (fixtures)
from tests.onnx.test_model_state import (CACHE, HEADS, HEAD_DIM, PAST, SEQ, check_rewind, decoder_model, feeds_at,
                                        run_calls)

ort = pytest.importorskip("onnxruntime", reason="onnxruntime is the reference for the cache over several calls")

CAPACITY = 16
ERR_STATE_FULL = 17


@pytest.fixture(scope="module")
def decoder(tmp_path_factory) -> tuple[str, str]:
  """The decoder's ONNX file and its opencl artifact keeping CAPACITY entries of cache."""
  root = tmp_path_factory.mktemp("clstate")
  path = decoder_model(root)
  out = str(root / "out")
  compile_model(path, "opencl", out, dims={SEQ: (1, 8)}, max_context=CAPACITY)
  return path, out


def test_states_are_device_buffers_outside_the_arena(decoder):
  _, out = decoder
  manifest = json.loads(open(f"{out}/manifest.json").read())
  assert [(s["name"], s["shape"], s["axis"], s["length"]) for s in manifest["states"]] == \
    [(c, [1, HEADS, CAPACITY, HEAD_DIM], 2, PAST) for c in CACHE]
  assert "state_placement" in manifest["target_info"]
  header = open(f"{out}/model.h").read()
  state_bytes = sum(s["nbytes"] for s in manifest["states"])
  assert f"#define DECODER_ARENA_BYTES {manifest['arena_bytes'] - state_bytes}\n" in header
  assert f"DECODER_ERR_STATE_FULL = {ERR_STATE_FULL}," in header and "cl_mem states[2];" in header
  assert "decoder_status decoder_state_read(decoder_ctx *ctx, size_t i, void *dst);" in header
  assert "state_data" not in header


@pytest.mark.parametrize("variant", ["cpu", "gpu"])
def test_cache_matches_onnxruntime_over_calls_of_different_lengths(decoder, cl_device, variant):
  path, out = decoder
  sess = ort.InferenceSession(path, providers=["CPUExecutionProvider"])
  with OpenCLArtifact(out, cflags=("-O2", f'-DDECODER_KERNEL_VARIANT="{variant}"')) as art:
    assert art.variant == variant and art.held_sizes() == {PAST: 0}
    for _ in range(2):             # the second round after a reset starts a new sequence
      run_calls(art, sess)
      art.reset_state()
      assert art.held_sizes() == {PAST: 0} and art.state(0).shape == (1, HEADS, 0, HEAD_DIM)
    check_rewind(art, sess, CAPACITY, "set_state_length")


def test_a_run_past_the_capacity_is_refused_and_changes_nothing(decoder, cl_device):
  _, out = decoder
  with OpenCLArtifact(out) as art:
    art.run(feeds_at(0, 8))
    art.run(feeds_at(8, 6))
    before = [art.state(i) for i in range(len(CACHE))]
    with pytest.raises(ArtifactError, match=f"no room.*status {ERR_STATE_FULL}"): art.run(feeds_at(14, 3))
    assert art.held_sizes() == {PAST: 14}
    for i in range(len(CACHE)): np.testing.assert_array_equal(art.state(i), before[i])
    held_first = (ctypes.c_int32 * 2)(99, 1)       # set_dims leaves a state's length alone, whatever it is given
    assert art._fn("set_dims")(art._ctx, held_first) == 0 and art.held_sizes() == {PAST: 14}
    art.run(feeds_at(14, 2))
    assert art.held_sizes() == {PAST: CAPACITY}


def test_validate_fills_the_cache_and_compares_with_the_reference(decoder, cl_device):
  result = CliRunner().invoke(cli, ["validate", decoder[1]])
  assert result.exit_code == 0, result.output
  assert "state past_key_values.0.key after 3 runs at sequence_length=4, past_sequence_length=8" in result.output
  assert result.output.rstrip().endswith("OK")


DRIVER = r"""
#include <stdio.h>
#include <stdlib.h>
#include "model.h"
static long allocations = 0, buffers = 0;
void *__real_malloc(size_t n);
void *__real_calloc(size_t n, size_t k);
void *__real_realloc(void *p, size_t n);
cl_mem __real_clCreateBuffer(cl_context c, cl_mem_flags f, size_t n, void *h, cl_int *e);
cl_mem __real_clCreateSubBuffer(cl_mem m, cl_mem_flags f, cl_buffer_create_type t, const void *r, cl_int *e);
void *__wrap_malloc(size_t n) { allocations++; return __real_malloc(n); }
void *__wrap_calloc(size_t n, size_t k) { allocations++; return __real_calloc(n, k); }
void *__wrap_realloc(void *p, size_t n) { allocations++; return __real_realloc(p, n); }
cl_mem __wrap_clCreateBuffer(cl_context c, cl_mem_flags f, size_t n, void *h, cl_int *e) {
  buffers++;
  return __real_clCreateBuffer(c, f, n, h, e);
}
cl_mem __wrap_clCreateSubBuffer(cl_mem m, cl_mem_flags f, cl_buffer_create_type t, const void *r, cl_int *e) {
  buffers++;
  return __real_clCreateSubBuffer(m, f, t, r, e);
}
int main(int argc, char **argv) {
  decoder_ctx ctx;
  static float x[16], y[16];
  static long long mask[64];
  int32_t dims[DECODER_NUM_DIMS];
  long allocated, created;
  int step, i, k, status = DECODER_OK, refused, read;
  static float held[1 * 2 * 16 * 8];
  const void *in[2];
  void *out[1];
  cl_device_id device;
  char name[256] = {0};
  if (argc < 2 || decoder_init(&ctx, argv[1], DECODER_DEFAULT_DEVICE, NULL) != DECODER_OK) return 2;
  allocated = allocations;
  created = buffers;
  in[0] = x; in[1] = mask; out[0] = y;
  for (step = 0; step < 3 * decoder_state_capacity(0) && status == DECODER_OK; step++) {   /* three sequences */
    if (step > 0 && step % decoder_state_capacity(0) == 0) status = decoder_set_state_length(&ctx, 0);
    for (i = 0; i < 16; i++) x[i] = (float)((step * 7 + i) % 5) * 0.1f;
    for (i = 0; i < 64; i++) mask[i] = 1;
    for (k = 0; k < (int)decoder_dim_count(); k++) dims[k] = 1;    /* sequence_length 1 (the length is held) */
    if (status == DECODER_OK) status = decoder_set_dims(&ctx, dims);
    if (status == DECODER_OK) status = decoder_run(&ctx, in, out);
  }
  refused = decoder_run(&ctx, in, out);     /* the cache is full */
  read = decoder_state_read(&ctx, 1, held);
  if (clGetCommandQueueInfo(decoder_command_queue(&ctx), CL_QUEUE_DEVICE, sizeof(device), &device, NULL) ||
      clGetDeviceInfo(device, CL_DEVICE_NAME, sizeof(name) - 1, name, NULL)) return 3;
  printf("%s (kernel variant %s)\n", name, decoder_kernel_variant(&ctx));
  printf("%d %ld %ld %d %d %d\n", status, allocations - allocated, buffers - created,
         (int)decoder_state_length(&ctx, 0), refused, read);
  decoder_free(&ctx);
  return 0;
}
"""


def _decode(out: str, variant: str, env: dict | None = None) -> tuple[list[str], str]:
  """Build DRIVER against the folder's host library (kernel `variant`) and run it: the device line and the counts
  line it prints, and its stderr."""
  exe = f"{out}/count_{variant}"
  with open(f"{exe}.c", "w") as f: f.write(DRIVER)
  subprocess.run(["cc", "-std=c99", "-O1", f'-DDECODER_KERNEL_VARIANT="{variant}"', "-I", out, f"{out}/model.c",
                  f"{exe}.c", "-o", exe, "-lOpenCL", "-Wl,--wrap=malloc,--wrap=calloc,--wrap=realloc,"
                  "--wrap=clCreateBuffer,--wrap=clCreateSubBuffer"], check=True, capture_output=True)
  result = subprocess.run([exe, f"{out}/weights.safetensors"], capture_output=True, text=True, env=env)
  assert result.returncode == 0, result
  return result.stdout.splitlines(), result.stderr


# status, allocations, buffers created, length, the run refused, reading a state
DECODED = ["0", "0", "0", str(CAPACITY), str(ERR_STATE_FULL), "0"]


def test_decoding_allocates_nothing_and_creates_no_buffer(decoder, cl_device):
  """One-token runs of the host library after init, filling the cache three times (reset in between), then a run
  the full cache refuses: no malloc/calloc/realloc, no clCreateBuffer or clCreateSubBuffer."""
  lines, _ = _decode(decoder[1], "cpu")
  assert lines[-1].split() == DECODED, lines


@pytest.mark.parametrize("variant", ["cpu", "gpu"])
def test_appends_stay_in_bounds_under_oclgrind(decoder, cl_device, oclgrind_env, variant):
  """The same decoding on Oclgrind: the kernels that read and append to the states at every length from 0 to the
  capacity neither load nor store outside a buffer, and race on nothing."""
  lines, stderr = _decode(decoder[1], variant, oclgrind_env)
  assert lines[0] == f"Oclgrind Simulator (kernel variant {variant})" and lines[-1].split() == DECODED, lines
  assert "Invalid" not in stderr and "race" not in stderr.lower(), stderr
