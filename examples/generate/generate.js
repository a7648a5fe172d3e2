// generate.js: greedy text generation in the browser with a tgc WebGPU artifact of a decoder whose KV cache the
// artifact keeps in GPU buffers (compiled with --max-context, e.g. a transformers GPT-2 exported with its cache:
//   tgc compile gpt2_kv.onnx --target webgpu --dim sequence_length=1..8 --max-context 512 -o gpt2_web).
// An ES module without dependencies or a build step; the browser version of generate.c. generate() starts a new
// sequence, runs the prompt in chunks of at most the model's largest sequence length, then one run per new token:
// each run appends to the cache in place, so a token costs one run over the cache, never a copy of it (nor a new
// GPU buffer). The model's inputs are found by name: input_ids (int64 or int32), attention_mask and position_ids
// (optional, the same types); its first output holds the logits, (1, sequence, vocabulary). Token ids in and out:
// there is no tokenizer here.
//
// generate.html is a page around it: generate.html?model=./gpt2_web/model.js&tokens=5,17,2&count=32 loads the
// artifact (model: the URL of its model.js, default ./model.js; its weights are read from next to it), appends each
// token id to the page as it comes and shows the prefill and decode speeds (tokens per second), or a message when
// the context is full. When done it sets window.generated ({tokens, prefillTokensPerSecond,
// decodeTokensPerSecond, full}), or window.generateError on an error.

const ID_ARRAYS = { int64: BigInt64Array, int32: Int32Array };

/** The index of the largest value, the first one on ties (a NaN counts as the largest), like numpy's argmax. */
export function argmax(row) {
  let best = 0;
  for (let i = 0; i < row.length && !Number.isNaN(row[best]); i++) {
    if (row[i] > row[best] || Number.isNaN(row[i])) best = i;
  }
  return best;
}

// What generate() needs to know of a model: its inputs by role, the largest chunk, the cache's capacity, the
// vocabulary size, and arrays for the inputs (allocated once, viewed per run).
function describeModel(model) {
  const fail = (message) => { throw new Error(`generate: ${message}`); };
  if (!model.states || !model.states.length || !model.dims) {
    fail("the model keeps no cache (compile it for webgpu with --max-context and a --dim for sequence_length)");
  }
  const role = (name) => model.inputs.find((t) => t.name === name);
  const [ids, mask, positions] = ["input_ids", "attention_mask", "position_ids"].map(role);
  if (!ids || model.inputs.length !== 1 + !!mask + !!positions) {
    fail("the model's inputs must be input_ids and optionally attention_mask, position_ids");
  }
  for (const t of model.inputs) {
    if (!ID_ARRAYS[t.dtype]) fail(`input ${t.name} is ${t.dtype}, not int64 or int32`);
  }
  const logits = model.outputs[0];
  if (model.outputs.length !== 1 || !["float32", "float64"].includes(logits.dtype)) {
    fail("the model needs one output, the logits (float32)");
  }
  const seq = model.dims.find((d) => d.name === ids.shape[ids.shape.length - 1]);
  if (!seq) fail("input_ids has no length known at run time (compile with --dim sequence_length=1..N)");
  const capacity = Math.min(...model.states.map((st) => st.capacity));
  const array = (t, n) => t && new ID_ARRAYS[t.dtype](n);
  return { ids, mask, positions, capacity, chunk: seq.max, vocab: logits.shape[logits.shape.length - 1],
           buffers: { ids: array(ids, seq.max), mask: array(mask, capacity), positions: array(positions, seq.max) } };
}

// One run of `tokens` after the `held` entries of the cache; the id of the most likely token after the last one.
async function step(model, m, tokens, held) {
  const n = tokens.length;
  const value = (b, v) => (b instanceof BigInt64Array ? BigInt(v) : v);
  const { ids, mask, positions } = m.buffers;
  tokens.forEach((t, i) => { ids[i] = value(ids, t); });
  const feeds = { [m.ids.name]: { data: ids.subarray(0, n), shape: [1, n] } };
  if (mask) {
    mask.fill(value(mask, 1), 0, held + n);
    feeds[m.mask.name] = { data: mask.subarray(0, held + n), shape: [1, held + n] };
  }
  if (positions) {
    for (let i = 0; i < n; i++) positions[i] = value(positions, held + i);
    feeds[m.positions.name] = { data: positions.subarray(0, n), shape: [1, n] };
  }
  const out = (await model.run(feeds))[model.outputs[0].name];
  return argmax(out.data.subarray((n - 1) * m.vocab, n * m.vocab));
}

/**
 * Greedy generation from the start of a new sequence (the model's states are reset): up to `count` token ids after
 * `prompt` (token ids), each passed to onToken(id, index) as it comes. Stops early when the cache is full.
 * Resolves to {tokens, prefillSeconds, decodeSeconds, full}: prefillSeconds the prompt's runs (up to the first
 * token), decodeSeconds the runs after it (tokens.length - 1 of them), full whether the context ran out.
 */
export async function generate(model, prompt, count, onToken = () => {}) {
  const m = describeModel(model);
  if (!Number.isInteger(count) || count < 1) throw new Error(`generate: count must be a positive number, not ${count}`);
  if (!prompt.length) throw new Error("generate: the prompt needs at least one token");
  for (const t of prompt) {
    if (!Number.isInteger(t) || t < 0 || t >= m.vocab) {
      throw new Error(`generate: token ${t} is not an id below the vocabulary size ${m.vocab}`);
    }
  }
  model.resetState();
  const tokens = [];
  const fits = (n) => model.stateLength + n <= m.capacity;
  let start = performance.now();
  let next = null;
  let full = false;
  for (let done = 0; done < prompt.length && !full; done += m.chunk) {
    const chunk = prompt.slice(done, done + m.chunk);
    full = !fits(chunk.length);
    if (!full) next = await step(model, m, chunk, model.stateLength);
  }
  const prefillSeconds = (performance.now() - start) / 1e3;
  start = performance.now();
  while (!full) {
    tokens.push(next);
    onToken(next, tokens.length - 1);
    if (tokens.length === count) break;
    full = !fits(1);
    if (!full) next = await step(model, m, [next], model.stateLength);
  }
  return { tokens, prefillSeconds, decodeSeconds: (performance.now() - start) / 1e3, full };
}
