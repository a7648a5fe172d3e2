/* generate.c: greedy text generation with a tgc C artifact of a decoder whose KV cache the artifact keeps
   (compiled with --max-context, e.g. a transformers GPT-2 exported with its cache:
     tgc compile gpt2_kv.onnx --target c --dim sequence_length=1..128 --max-context 512 -o gpt2_c).
   The prompt runs in one call (in chunks of at most the largest sequence length), then one call per new token:
   each call appends to the cache in place, so a token costs one run over the cache, never a copy of it.
   The model's inputs are found by name: input_ids (int64), attention_mask (int64, optional) and position_ids
   (int64, optional); its first output holds the logits, (1, sequence, vocabulary).

   Build:  make -C examples/generate ART=path/to/artifact MODEL=<the artifact's api_prefix, e.g. gpt2_kv>
   Run:    examples/generate/generate path/to/artifact/weights.safetensors COUNT TOKEN [TOKEN ...]
   Prints the COUNT generated token ids on stdout as they come, one per line, and the prefill and decode speeds
   (tokens per second) on stderr. Exit status 1 with a one-line message on any error. */
#define _POSIX_C_SOURCE 199309L
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include "model.h"

#define JOIN2(a, b) a##_##b
#define JOIN(a, b) JOIN2(a, b)
#define API(f) JOIN(MODEL, f)
#define MAX_TENSORS 16        /* inputs, outputs and sizes known at run time this program handles */

static double now(void) {
  struct timespec t;
  clock_gettime(CLOCK_MONOTONIC, &t);
  return (double)t.tv_sec + 1e-9 * (double)t.tv_nsec;
}

/* The position of the input named `name`, or -1. */
static int input_named(const char *name) {
  size_t i;
  for (i = 0; i < API(input_count)(); i++)
    if (strcmp(API(input_name)(i), name) == 0) return (int)i;
  return -1;
}

typedef struct {
  API(ctx) ctx;
  int ids, mask, positions;           /* input positions (-1: the model has no such input) */
  int seq;                            /* the size that is input_ids' length */
  int32_t dims[MAX_TENSORS];
  int64_t *ids_buf, *mask_buf, *pos_buf;
  float *logits;
  size_t vocab, max_seq;
  int32_t capacity;
} model;

/* Run `n` tokens after the ones the cache holds; the id of the most likely token after the last one. */
static int step(model *m, const int64_t *tokens, size_t n, int64_t *next) {
  const void *in[MAX_TENSORS];
  void *out[MAX_TENSORS];
  int32_t held = API(state_length)(&m->ctx, 0);
  size_t i, best = 0;
  int status;
  const float *row;
  if ((int32_t)n > m->capacity - held) { fprintf(stderr, "error: the context is full (%d tokens)\n", held); return 0; }
  memcpy(m->ids_buf, tokens, n * sizeof(int64_t));
  for (i = 0; i < (size_t)held + n; i++) m->mask_buf[i] = 1;
  for (i = 0; i < n; i++) m->pos_buf[i] = (int64_t)(held + i);
  m->dims[m->seq] = (int32_t)n;
  status = API(set_dims)(&m->ctx, m->dims);
  if (status != 0) { fprintf(stderr, "error: set_dims: %s\n", API(strerror)(status)); return 0; }
  memset((void *)in, 0, sizeof(in));
  in[m->ids] = m->ids_buf;
  if (m->mask >= 0) in[m->mask] = m->mask_buf;
  if (m->positions >= 0) in[m->positions] = m->pos_buf;
  out[0] = m->logits;
  status = API(run)(&m->ctx, in, out);
  if (status != 0) { fprintf(stderr, "error: run: %s\n", API(strerror)(status)); return 0; }
  row = m->logits + (n - 1) * m->vocab;
  for (i = 1; i < m->vocab; i++) if (row[i] > row[best]) best = i;
  *next = (int64_t)best;
  return 1;
}

static int setup(model *m, const char *weights) {
  size_t shape[8], k;
  int status;
  memset(m, 0, sizeof(*m));
  if (API(output_count)() != 1 || API(state_count)() == 0 || API(dim_count)() > MAX_TENSORS) {
    fprintf(stderr, "error: the artifact needs one output (the logits) and a cache (compile with --max-context)\n");
    return 0;
  }
  m->ids = input_named("input_ids");
  m->mask = input_named("attention_mask");
  m->positions = input_named("position_ids");
  if (m->ids < 0 || API(input_count)() != (size_t)(1 + (m->mask >= 0) + (m->positions >= 0))) {
    fprintf(stderr, "error: the model's inputs must be input_ids and optionally attention_mask, position_ids\n");
    return 0;
  }
  for (k = 0; k < API(input_count)(); k++)
    if (strcmp(API(input_dtype)(k), "int64") != 0) {
      fprintf(stderr, "error: input %s is %s, not int64\n", API(input_name)(k), API(input_dtype)(k));
      return 0;
    }
  m->seq = API(input_dim_size)((size_t)m->ids, API(input_ndim)((size_t)m->ids) - 1);
  if (m->seq < 0) { fprintf(stderr, "error: input_ids has no length known at run time\n"); return 0; }
  status = API(init)(&m->ctx, weights, NULL);
  if (status != 0) { fprintf(stderr, "error: %s: %s\n", weights, API(strerror)(status)); return 0; }
  for (k = 0; k < API(dim_count)(); k++) m->dims[k] = API(dim_highest)(k);
  m->max_seq = (size_t)API(dim_highest)((size_t)m->seq);
  m->capacity = API(state_capacity)(0);
  API(output_shape_at)(&m->ctx, 0, shape);
  m->vocab = shape[API(output_ndim)(0) - 1];
  m->ids_buf = (int64_t *)malloc(m->max_seq * sizeof(int64_t));
  m->pos_buf = (int64_t *)malloc(m->max_seq * sizeof(int64_t));
  m->mask_buf = (int64_t *)malloc((size_t)m->capacity * sizeof(int64_t));
  m->logits = (float *)malloc(m->max_seq * m->vocab * sizeof(float));
  if (!m->ids_buf || !m->pos_buf || !m->mask_buf || !m->logits) { fprintf(stderr, "error: out of memory\n"); return 0; }
  return 1;
}

static void teardown(model *m) {
  free(m->ids_buf); free(m->pos_buf); free(m->mask_buf); free(m->logits);
  API(free)(&m->ctx);
}

int main(int argc, char **argv) {
  static model m;
  int64_t *prompt, next = 0;
  long count, i;
  size_t n, done;
  double start, prefill_s, decode_s;
  int ok = 0;
  if (argc < 4) {
    fprintf(stderr, "usage: %s WEIGHTS COUNT TOKEN [TOKEN ...]\n", argv[0]);
    return 1;
  }
  count = strtol(argv[2], NULL, 10);
  n = (size_t)(argc - 3);
  if (count < 1) { fprintf(stderr, "error: COUNT must be a positive number, not %s\n", argv[2]); return 1; }
  if (!setup(&m, argv[1])) { teardown(&m); return 1; }
  prompt = (int64_t *)malloc(n * sizeof(int64_t));
  if (prompt == NULL) { teardown(&m); return 1; }
  for (i = 0; i < (long)n; i++) {
    char *end;
    long long t = strtoll(argv[3 + i], &end, 10);
    if (*end != '\0' || t < 0 || (size_t)t >= m.vocab) {
      fprintf(stderr, "error: token %s is not an id below the vocabulary size %zu\n", argv[3 + i], m.vocab);
      goto end;
    }
    prompt[i] = (int64_t)t;
  }
  start = now();
  for (done = 0; done < n; done += m.max_seq)     /* the prompt in chunks of at most max_seq tokens */
    if (!step(&m, prompt + done, n - done < m.max_seq ? n - done : m.max_seq, &next)) goto end;
  prefill_s = now() - start;
  start = now();
  for (i = 0; i < count; i++) {
    printf("%lld\n", (long long)next);
    fflush(stdout);
    if (i + 1 < count && !step(&m, &next, 1, &next)) goto end;
  }
  decode_s = now() - start;
  fprintf(stderr, "prefill %zu tokens: %.1f tokens/s; decode %ld tokens: %.1f tokens/s\n", n, (double)n / prefill_s,
          count - 1, count > 1 ? (double)(count - 1) / decode_s : 0.0);
  ok = 1;
end:
  free(prompt);
  teardown(&m);
  return ok ? 0 : 1;
}
