// bench_generate.js: the page side of bench/bench_generate_web.py. A decoder exported with its KV cache (inputs
// input_ids, attention_mask, position_ids, past_key_values.N.key/value; outputs logits, present.N.key/value) run
// by two engines in one page: a tgc WebGPU artifact that keeps the cache in its GPU buffers (model.js compiled with
// --max-context), and onnxruntime-web's WebGPU execution provider with the cache passed in and out as its API does
// (by default the present.* outputs stay in GPU buffers, preferredOutputLocation "gpu-buffer", and are fed back as
// the next call's past_key_values; with cacheOnGpu false they come back to the CPU and go up again). Each engine's
// run(tokens) appends `tokens` to its cache and resolves to the logits on the CPU (both read all of them back).
// No dependencies; the bench imports it with page.evaluate and calls setup(), then greedy(), trace(), measure().

const engines = {};

const ids = (tokens) => BigInt64Array.from(tokens, (t) => BigInt(t));
const ones = (n) => new BigInt64Array(n).fill(1n);
const positions = (held, n) => BigInt64Array.from({ length: n }, (_, i) => BigInt(held + i));

// the tgc artifact: its cache length is model.stateLength, rewound by resetState()
async function tgcEngine(moduleUrl, weightsUrl, variant) {
  const start = performance.now();
  const { load } = await import(moduleUrl);
  const model = await load(weightsUrl, variant ? { variant } : {});
  const loadMs = performance.now() - start;
  const run = async (tokens) => {
    const held = model.stateLength;
    const n = tokens.length;
    const out = await model.run({ input_ids: { data: ids(tokens), shape: [1, n] },
                                  attention_mask: { data: ones(held + n), shape: [1, held + n] },
                                  position_ids: { data: positions(held, n), shape: [1, n] } });
    return out.logits.data;
  };
  const a = model.device.adapterInfo || {};
  return { loadMs, run, reset: () => model.resetState(0), held: () => model.stateLength,
           dispose: () => model.dispose(), variant: model.variant,
           device: [a.vendor, a.architecture, a.description].filter(Boolean).join(" ") };
}

// onnxruntime-web's WebGPU EP: the cache is the tensors of the last call's present.* outputs
async function ortEngine(moduleUrl, wasmUrl, modelUrl, cacheOnGpu, [heads, headSize], present) {
  const start = performance.now();
  const ort = await import(moduleUrl);
  ort.env.wasm.wasmPaths = wasmUrl;
  ort.env.wasm.numThreads = 1;
  ort.env.logLevel = "error";
  const options = { executionProviders: ["webgpu"] };
  // read when the session is created: the present.* outputs on the GPU, the logits (not named) on the CPU
  if (cacheOnGpu) options.preferredOutputLocation = Object.fromEntries(present.map((n) => [n, "gpu-buffer"]));
  const session = await ort.InferenceSession.create(modelUrl, options);
  const loadMs = performance.now() - start;
  const past = session.inputNames.filter((n) => n.startsWith("past_key_values"));
  if (present.join() !== past.map((n) => n.replace("past_key_values", "present")).join()) {
    throw new Error(`the model's cache inputs ${past.join(", ")} do not match ${present.join(", ")}`);
  }
  let cache = null;
  let held = 0;
  const drop = () => {
    if (cache) for (const t of Object.values(cache)) if (t.location === "gpu-buffer") t.dispose();
  };
  const reset = () => {
    drop();
    cache = Object.fromEntries(past.map((n) => [n, new ort.Tensor("float32", new Float32Array(0),
                                                                   [1, heads, 0, headSize])]));
    held = 0;
  };
  const run = async (tokens) => {
    const n = tokens.length;
    const out = await session.run({ input_ids: new ort.Tensor("int64", ids(tokens), [1, n]),
                                    attention_mask: new ort.Tensor("int64", ones(held + n), [1, held + n]),
                                    position_ids: new ort.Tensor("int64", positions(held, n), [1, n]), ...cache });
    drop();
    cache = Object.fromEntries(past.map((n, i) => [n, out[present[i]]]));
    held += n;
    return out.logits.location === "cpu" ? out.logits.data : await out.logits.getData(true);
  };
  reset();
  const device = await ort.env.webgpu.device;
  const a = (device && device.adapterInfo) || {};
  const cacheWhere = cacheOnGpu ? "present.* kept in GPU buffers (preferredOutputLocation gpu-buffer)" :
    "present.* read back to the CPU and uploaded again";
  return { loadMs, run, reset, held: () => held, dispose: () => { drop(); return session.release(); },
           variant: cacheWhere, device: [a.vendor, a.architecture, a.description].filter(Boolean).join(" ") };
}

/** Load both engines; resolves to {name: {loadMs, variant, device}}. */
export async function setup({ tgcModule, tgcWeights, tgcVariant, ortModule, ortWasm, modelUrl, cacheOnGpu,
                              cacheShape, present, only }) {
  const info = {};
  if (only !== "ort") engines.tgc = await tgcEngine(tgcModule, tgcWeights, tgcVariant);
  if (only !== "tgc") engines.ort = await ortEngine(ortModule, ortWasm, modelUrl, cacheOnGpu, cacheShape, present);
  for (const [name, e] of Object.entries(engines)) info[name] = { loadMs: e.loadMs, variant: e.variant,
                                                                   device: e.device };
  return info;
}

/** One prefill of `prompt` from an empty cache, then one decode call per token of `next` (the cache growing from
 * prompt.length entries); resolves to {prefillMs, decodeMs: [ms per call], held}. */
export async function measure(name, prompt, next) {
  const e = engines[name];
  e.reset();
  let t = performance.now();
  await e.run(prompt);
  const prefillMs = performance.now() - t;
  const decodeMs = [];
  for (const token of next) {
    t = performance.now();
    await e.run([token]);
    decodeMs.push(performance.now() - t);
  }
  return { prefillMs, decodeMs, held: e.held() };
}

function argmaxLast(logits, vocab) {
  const row = logits.subarray(logits.length - vocab);
  let best = 0;
  for (let i = 1; i < row.length; i++) if (row[i] > row[best]) best = i;
  return best;
}

/** Greedy generation: `steps` token ids after `prompt` (the prompt in one call, then one call per token). */
export async function greedy(name, prompt, steps, vocab) {
  const e = engines[name];
  e.reset();
  const out = [];
  let next = argmaxLast(await e.run(prompt), vocab);
  while (true) {
    out.push(next);
    if (out.length === steps) return out;
    next = argmaxLast(await e.run([next]), vocab);
  }
}

/** The logits of the last token of each call: `prompt` in one call from an empty cache, then each of `next`. */
export async function trace(name, prompt, next, vocab) {
  const e = engines[name];
  e.reset();
  const rows = [];
  for (const tokens of [prompt, ...next.map((t) => [t])]) {
    const logits = await e.run(tokens);
    rows.push(Array.from(logits.subarray(logits.length - vocab)));
  }
  return rows;
}

export async function dispose() {
  for (const e of Object.values(engines)) await e.dispose();
}
