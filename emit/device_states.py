"""States in a device bundle's C host library (OpenCL): the placeholders of templates/opencl/model.h.tmpl and
model.c.tmpl that keep each state (a KV cache, see emit.states) in a device buffer of its capacity, zeroed at init and
kept on the device between runs, apart from the arena of intermediates. A run first checks that every state's length
after it fits (else `ERR_STATE_FULL`, nothing changed), enqueues the kernels, which append in place, and once they
finished sets the lengths and applies the sizes to the launches (`tg_apply_dims`). The API is the C bundle's
(emit.states) with `<name>_state_read`, a copy of a state's entries to host memory, instead of `state_data`.

A model without states gets an empty text for every placeholder (its files stay as they were)."""
from __future__ import annotations
import math

from tgc.codegen.compiled import BufferInfo, CompiledModel
from tgc.emit.states import state_declarations, state_definitions, state_growth, state_table

STATELESS = ("state_status", "state_fields", "state_api", "state_kind", "state_tables", "state_strerror",
             "state_release", "state_buffers", "state_arg", "state_locals", "state_check", "state_grow",
             "state_functions")
ERR_STATE_FULL = 17


def _read_api(sym: str) -> str:
  """model.h's `state_read` declaration."""
  S = sym.upper()
  return (f"/* Copy the entries state i holds now from device memory to host memory at `dst` and wait for the copy:\n"
          "   C order of its shape with the capacity replaced by state_length (the shape listed above), that is\n"
          f"   state_length * (bytes / capacity) bytes; nothing for a length of 0. {S}_ERR_DIMS for an i out of\n"
          "   range. Runs need no copy: the states stay on the device. */\n"
          f"{sym}_status {sym}_state_read({sym}_ctx *ctx, size_t i, void *dst);\n")


def _read(sym: str) -> str:
  """model.c's `state_read`: the held rows of a state's buffer (one per index before its growing dim) copied
  packed."""
  S = sym.upper()
  return f"""{sym}_status {sym}_state_read({sym}_ctx *ctx, size_t i, void *dst) {{
  size_t origin[3] = {{0, 0, 0}}, region[3];
  cl_int error;
  if (ctx == NULL || dst == NULL) return {S}_ERR_NULL;
  if (ctx->ready != TG_READY) return {S}_ERR_NOT_READY;
  if (i >= tg_num_states) return {S}_ERR_DIMS;
  region[0] = (size_t)ctx->dims[tg_states[i].dim] * tg_states[i].entry;   /* bytes held of each row */
  region[1] = tg_states[i].rows;
  region[2] = 1;
  if (region[0] == 0 || region[1] == 0) return {S}_OK;
  error = clEnqueueReadBufferRect(ctx->queue, ctx->states[i], CL_TRUE, origin, origin, region,
                                  (size_t)tg_states[i].capacity * tg_states[i].entry, 0, region[0], 0, dst, 0, NULL,
                                  NULL);
  if (error != CL_SUCCESS) return tg_fail(ctx, {S}_ERR_OPENCL, "clEnqueueReadBufferRect", error);
  return {S}_OK;
}}
"""


def _layout(st, b: BufferInfo) -> tuple[int, ...]:
  """A state's fields of `tg_states` after the shared ones: its bytes, its rows (the elements before the growing dim)
  and the bytes of one entry of a row."""
  return b.nbytes, math.prod(b.shape[:st.axis]), math.prod(b.shape[st.axis + 1:]) * b.dtype.itemsize


def _buffers(S: str) -> str:
  """tg_create_buffers' part: a zeroed device buffer per state."""
  return f"""
  for (i = 0; i < tg_num_states; i++) {{   /* zeroed once: runs append to them in place */
    ctx->states[i] = tg_buffer(ctx, CL_MEM_READ_WRITE, tg_states[i].bytes, NULL, &error);
    if (error != CL_SUCCESS) return tg_fail(ctx, {S}_ERR_OPENCL, "clCreateBuffer", error);
    error = clEnqueueFillBuffer(ctx->queue, ctx->states[i], &tg_zero, 1, 0, tg_states[i].bytes, 0, NULL, NULL);
    if (error != CL_SUCCESS) return tg_fail(ctx, {S}_ERR_OPENCL, "clEnqueueFillBuffer", error);
  }}"""


def state_values(cm: CompiledModel, sym: str) -> dict[str, str]:
  """The values of the state placeholders of templates/opencl/model.h.tmpl and model.c.tmpl, and `run_result` (what
  a run returns once its kernels finished)."""
  S = sym.upper()
  if not cm.states: return {**{key: "" for key in STATELESS}, "run_result": f"{S}_OK"}
  names = list(cm.dims)
  growth = state_growth(cm, lambda name: f"ctx->dims[{names.index(name)}]")
  check = "".join(f"\n  grown[{j}] = (int32_t)({grown});\n  if (grown[{j}] > {capacity}) return {S}_ERR_STATE_FULL;"
                  for j, (grown, capacity) in enumerate(growth.values()))
  return {
    "state_status": f"\n  {S}_ERR_STATE_FULL = {ERR_STATE_FULL},   /* a run would grow a state past its capacity "
                    "(see the states below) */",
    "state_fields": "\n  /* Each state's device buffer, of its capacity (see the states below). */\n"
                    f"  cl_mem states[{len(cm.states)}];",
    "state_api": "\n" + state_declarations(cm, sym, "in device memory", _read_api(sym)).rstrip("\n"),
    "state_kind": ", TG_STATE = 4",
    "state_tables": "\n\n/* States: a device buffer each (`bytes`): `rows` rows of `capacity` entries of `entry` "
                    "bytes. */\n" + state_table(cm, ("bytes", "rows", "entry"), _layout) +
                    f"static const size_t tg_num_states = {S}_NUM_STATES;\n"
                    "static const unsigned char tg_zero = 0;   /* what init fills the states with */\n"
                    f"static {sym}_status tg_apply_dims({sym}_ctx *ctx);",
    "state_strerror": f"\n    case {S}_ERR_STATE_FULL: return \"a state has no room for this run's entries (reset or "
                      "shorten it)\";",
    "state_release": "\n  for (i = 0; i < tg_num_states; i++)\n"
                     "    if (ctx->states[i] != NULL) { clReleaseMemObject(ctx->states[i]); ctx->states[i] = NULL; }",
    "state_buffers": _buffers(S),
    "state_arg": "\n                   : arg->kind == TG_STATE ? ctx->states[arg->index]",
    "state_locals": f"\n  int32_t grown[{len(growth)}];   /* each state length after this run */",
    "state_check": check,
    "state_grow": "".join(f"\n  ctx->dims[{names.index(name)}] = grown[{j}];" for j, name in enumerate(growth)),
    "run_result": "tg_apply_dims(ctx)",
    "state_functions": "\n/* ---------------------------------------------------------------- states */\n\n" +
                       state_definitions(cm, sym, "tg_apply_dims(ctx)") + _read(sym)}
