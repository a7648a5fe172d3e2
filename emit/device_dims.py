"""Sizes known only at run time in a device bundle's C host library (OpenCL): the placeholders of its templates that
add `<name>_set_dims`, `_dim_count/_dim_name/_dim_lowest/_dim_highest`, `_input_shape_at/_output_shape_at`,
`_input_dim_size` and `ERR_DIMS` (the C bundle's API), and the function that applies a set of sizes to the context:
each launch's global size (its `ir.sint` size text computed in C and already a multiple of the work-group size),
the kernels' `dim_<name>` arguments after their buffers, and the bytes each input and output has for them. A state's
length (emit.device_states) is a size the context holds itself: 0 after init, and set_dims leaves it.

A model of fixed shapes gets an empty text for every placeholder (its files stay as they were) and the tables' own
values where the run reads sizes."""
from __future__ import annotations
from tgc.ir.sint import render
from tgc.codegen.compiled import CompiledModel
from tgc.emit.bundle import Param, dim_table
from tgc.emit.c_io import shape_functions
from tgc.emit.common import fill, read_template
from tgc.emit.states import held_table

STATIC = {"dims_macros": "", "dims_status": "", "dims_fields": "", "dims_api": "", "dims_strerror": "",
          "dims_tables": "", "dims_init": "", "dims_functions": "", "input_bytes": "tg_inputs[i].nbytes",
          "output_bytes": "tg_outputs[i].nbytes", "call_global": "tg_calls[i].global"}
ERR_DIMS = 16


def _api(sym: str) -> str:
  S = sym.upper()
  return f"""
/* The sizes known only at run time for the following runs, `dims[i]` for size i of the list above (init sets each
   to its largest value): each must lie in its range, else {S}_ERR_DIMS and nothing changes. The inputs' and
   outputs' shapes follow from them (see the list above); host buffers of the largest shapes (_BYTES) fit any size,
   and a run copies only the bytes the shapes of these sizes have. */
{sym}_status {sym}_set_dims({sym}_ctx *ctx, const int32_t *dims);
/* The sizes known only at run time: count, name, lowest and highest value (i < count, else NULL / 0). */
size_t {sym}_dim_count(void);
const char *{sym}_dim_name(size_t i);
int32_t {sym}_dim_lowest(size_t i);
int32_t {sym}_dim_highest(size_t i);
/* The shape of input (output) i for the context's sizes (set_dims), written to `shape` ({sym}_input_ndim(i) dims),
   and its size in bytes; 0 for an i out of range. */
size_t {sym}_input_shape_at(const {sym}_ctx *ctx, size_t i, size_t *shape);
size_t {sym}_output_shape_at(const {sym}_ctx *ctx, size_t i, size_t *shape);
/* Which size known at run time dim k of input i is (its index in set_dims' array), or -1 (a fixed dim); the dim is
   that size times {sym}_input_dim_factor(i, k) (1, or the multiple of an input shape such as 1,3,32*h,32*w). */
int {sym}_input_dim_size(size_t i, size_t k);
int {sym}_input_dim_factor(size_t i, size_t k);"""


def _apply(cm: CompiledModel, sym: str, params: dict[str, list[Param]]) -> str:
  """`tg_apply_dims(ctx)`: what a set of sizes changes in the context (launch sizes, kernel arguments, I/O bytes)."""
  names = list(cm.dims)
  spell = lambda n: f"ctx->dims[{names.index(n)}]"     # noqa: E731
  ndim = max([len(b.shape) for b in cm.inputs + cm.outputs] + [1])
  lines = [f"static {sym}_status tg_apply_dims({sym}_ctx *ctx) {{", f"  size_t i, shape[{ndim}];",
           "  cl_int error = CL_SUCCESS;",
           "  for (i = 0; i < tg_num_inputs; i++) ctx->io_bytes[i] = " + f"{sym}_input_shape_at(ctx, i, shape);",
           "  for (i = 0; i < tg_num_outputs; i++) ctx->io_bytes[tg_num_inputs + i] = "
           f"{sym}_output_shape_at(ctx, i, shape);"]
  for n, c in enumerate(cm.calls):
    k = cm.kernels[c.kernel]
    lines += [f"  ctx->global[{n}][{d}] = (size_t)({render(g, spell)});" for d, g in enumerate(k.global_size)]
    lines += [f"  if (error == CL_SUCCESS) error = clSetKernelArg(ctx->calls[{n}], {len(params[c.kernel]) + j}, "
              f"sizeof(cl_int), &ctx->dims[{names.index(v)}]);" for j, v in enumerate(k.variables)]
  lines += [f"  if (error != CL_SUCCESS) return tg_fail(ctx, {sym.upper()}_ERR_OPENCL, \"clSetKernelArg\", error);",
            f"  return {sym.upper()}_OK;", "}"]
  return "\n".join(lines)


def _functions(cm: CompiledModel, sym: str, params: dict[str, list[Param]]) -> str:
  S = sym.upper()
  if cm.states:     # a state's length is the context's own (tg_dim_held): 0 after init, set_dims leaves it
    first = "tg_dim_held[i] ? 0 : tg_dim_table[i].highest"
    check = ("    if (!tg_dim_held[i] && (dims[i] < tg_dim_table[i].lowest || dims[i] > tg_dim_table[i].highest))\n"
             f"      return {S}_ERR_DIMS;")
    keep = "\n    if (!tg_dim_held[i]) ctx->dims[i] = dims[i];"
  else:
    first = "tg_dim_table[i].highest"
    check = f"    if (dims[i] < tg_dim_table[i].lowest || dims[i] > tg_dim_table[i].highest) return {S}_ERR_DIMS;"
    keep = " ctx->dims[i] = dims[i];"
  return f"""
/* ---------------------------------------------------------------- sizes known only at run time */

{_apply(cm, sym, params)}

static {sym}_status tg_default_dims({sym}_ctx *ctx) {{
  size_t i;
  for (i = 0; i < tg_num_dims; i++) ctx->dims[i] = {first};
  return tg_apply_dims(ctx);
}}

{sym}_status {sym}_set_dims({sym}_ctx *ctx, const int32_t *dims) {{
  size_t i;
  if (ctx == NULL || dims == NULL) return {S}_ERR_NULL;
  if (ctx->ready != TG_READY) return {S}_ERR_NOT_READY;
  for (i = 0; i < tg_num_dims; i++)
{check}
  for (i = 0; i < tg_num_dims; i++){keep}
  return tg_apply_dims(ctx);
}}

size_t {sym}_dim_count(void) {{ return tg_num_dims; }}
const char *{sym}_dim_name(size_t i) {{ return i < tg_num_dims ? tg_dim_table[i].name : NULL; }}
int32_t {sym}_dim_lowest(size_t i) {{ return i < tg_num_dims ? tg_dim_table[i].lowest : 0; }}
int32_t {sym}_dim_highest(size_t i) {{ return i < tg_num_dims ? tg_dim_table[i].highest : 0; }}

{shape_functions(cm, sym)}"""


def dims_values(cm: CompiledModel, sym: str, params: dict[str, list[Param]]) -> dict[str, str]:
  """The values of the run-time size placeholders of templates/opencl/model.h.tmpl and model.c.tmpl."""
  if not cm.dims: return dict(STATIC)
  S, n = sym.upper(), len(cm.dims)
  return {
    "dims_macros": f"\n/* Sizes known only at run time (see {sym}_set_dims). */\n#define {S}_NUM_DIMS {n}",
    "dims_status": f"\n  {S}_ERR_DIMS = {ERR_DIMS},         /* a size given to set_dims is outside its range */",
    "dims_fields": "\n  /* The sizes known at run time of the next runs (set_dims), each launch's work-items and the "
                   f"bytes of each input,\n     then each output, for them. */\n  int32_t dims[{n}];\n"
                   f"  size_t global[{max(len(cm.calls), 1)}][3];\n"
                   f"  size_t io_bytes[{len(cm.inputs) + len(cm.outputs)}];",
    "dims_api": _api(sym),
    "dims_strerror": f"\n    case {S}_ERR_DIMS: return \"a size known at run time is outside the range the model was "
                     "compiled for\";",
    "dims_tables": f"\n\ntypedef struct {{ const char *name; int32_t lowest, highest; }} tg_dim;\n"
                   f"static const size_t tg_num_dims = {S}_NUM_DIMS;\n"
                   f"static const tg_dim tg_dim_table[{n}] = {{\n{dim_table(cm)}\n}};\n"
                   f"static {sym}_status tg_default_dims({sym}_ctx *ctx);" +
                   (f"\n{held_table(cm)}" if cm.states else ""),
    "dims_init": f"\n  if (status == {S}_OK) status = tg_default_dims(ctx);",
    "dims_functions": _functions(cm, sym, params),
    "input_bytes": "ctx->io_bytes[i]", "output_bytes": "ctx->io_bytes[tg_num_inputs + i]",
    "call_global": "ctx->global[i]"}


def device_main_values(cm: CompiledModel, sym: str) -> dict[str, str]:
  """The placeholders of the device bundles' example program (templates/common/device_main.c.tmpl, and `dims_main`
  of templates/opencl/main.c.tmpl): a model with sizes known only at run time reads them off its .npy inputs' shapes
  (common/bind_dims.c.tmpl) once the context is up, then the inputs at those shapes, and writes outputs at theirs."""
  if not cm.dims:
    return {"read_input": f"    if (!npy_read(paths[i], labels[i], {sym}_input_dtype(i), npy_input_types[i], "
                          f"{sym}_input_ndim(i),\n                  {sym}_input_shape(i), {sym}_input_nbytes(i), "
                          "ins[i])) goto end;\n",
            "read_sized_inputs": "", "main_output_shape": f"{sym}_output_shape(i)",
            "main_output_bytes": f"{sym}_output_nbytes(i)", "dims_main": ""}
  names = {"sym": sym, "SYM": sym.upper()}
  return {"read_input": "", "main_output_shape": "output_shape(ctx, i)", "main_output_bytes": "output_bytes(ctx, i)",
          "read_sized_inputs": f"""
  rc = 2;
  if (!bind_dims(ctx, n_in, paths, labels)) goto end;
  for (i = 0; i < n_in; i++) {{
    size_t shape[NPY_MAX_DIMS], nbytes = {sym}_input_shape_at(ctx, i, shape);
    if (!npy_read(paths[i], labels[i], {sym}_input_dtype(i), npy_input_types[i], {sym}_input_ndim(i), shape, nbytes,
                  ins[i])) goto end;
  }}
  rc = 1;""",
          "dims_main": "\n\n" + fill(read_template("common", "bind_dims.c.tmpl"), names, "bind_dims.c.tmpl") + f"""
/* Output i's shape and bytes for the sizes set on ctx (the shape in one buffer, valid until the next call). */
static size_t output_dims[NPY_MAX_DIMS];
static const size_t *output_shape(const {sym}_ctx *ctx, size_t i) {{
  {sym}_output_shape_at(ctx, i, output_dims);
  return output_dims;
}}
static size_t output_bytes(const {sym}_ctx *ctx, size_t i) {{ return {sym}_output_shape_at(ctx, i, output_dims); }}"""}
