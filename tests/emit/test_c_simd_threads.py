"""The fast paths of C artifacts on a model big enough to use them (convolutions with BatchNorm, a depthwise
convolution, pooling, a matmul with GELU, LayerNorm, softmax): the SIMD kernels and the plain C99 of the
`generic` CPU level (built with `-DTG_NO_SIMD`) both compile with the strict flags under gcc and clang and match the
numpy interpreter; the kernels really are vector code; threads give the same bytes as one thread, also through
main.c, and allocate nothing while running; a launch's work counts exponentials at their cost for the thread pool;
per-launch profiling; an armv8.2-a build under qemu runs NEON code and matches."""
from __future__ import annotations
import os
import subprocess

import numpy as np
import pytest

from artifact_cases import (C_WARNINGS, ModelCase, compare, copy, emit_folder, make, manifest_of, require_aarch64,
                            require_tool, run, run_main, write_inputs)
from tgc.frontend import Tensor, nn
from tgc.codegen.compiled import compile_schedule
from tgc.codegen.target import Target
from tgc.emit import write_artifact
from tgc.frontend.jit import trace
from tgc.runtimes.artifact_c import CArtifact, DEFAULT_CFLAGS

# every kernel with more than one task goes to the thread pool, however small (the test model is)
ALL_PARALLEL = ("-DTG_PARALLEL_MIN_OPS=0", "-DTG_PARALLEL_MIN_BYTES=0")


def build_net(device: str):
  Tensor.manual_seed(3)
  rng = np.random.default_rng(3)
  conv = nn.Conv2d(3, 16, 3, padding=1, device=device)
  bn = nn.BatchNorm2d(16, device=device)
  bn.running_mean = Tensor(rng.standard_normal(16).astype(np.float32) * 0.1, device=device)
  bn.running_var = Tensor(rng.uniform(0.5, 1.5, 16).astype(np.float32), device=device)
  depthwise = nn.Conv2d(16, 16, 3, padding=1, groups=16, device=device)
  pointwise = nn.Conv2d(16, 32, 1, device=device)
  fc1, fc2 = nn.Linear(32, 64, device=device), nn.Linear(64, 32, device=device)

  def fn(image, tokens):
    y = bn(conv(image)).relu()
    y = pointwise(depthwise(y).relu()).max_pool2d(2)           # (1, 32, 6, 6)
    pooled = y.mean((2, 3))                                    # (1, 32)
    h = fc2(fc1(tokens + pooled).gelu()).layernorm()           # (16, 32)
    scores = (h @ h.transpose(0, 1) * 0.125).softmax()         # (16, 16)
    return scores @ h, y
  return fn


def net_case() -> ModelCase:
  rng = np.random.default_rng(4)
  return ModelCase("net", build_net, {"image": rng.standard_normal((1, 3, 12, 12)).astype(np.float32),
                                      "tokens": rng.standard_normal((16, 32)).astype(np.float32)},
                   rtol=2e-4, atol=2e-5)


def compiled(case: ModelCase, cpu: str = "native"):
  fn = case.build("c")
  cap = trace(fn, *[Tensor(v, device="c") for v in case.inputs.values()], input_names=list(case.inputs))
  weights = [(f"w{i}", b, v) for i, (b, v) in enumerate(cap.weights.items())]
  return compile_schedule(case.name, Target.make("c", cpu=cpu), cap.items, [(s.name, b) for s, b in cap.inputs],
                          [(s.name, b) for s, b in cap.outputs], weights)


def test_exponentials_count_at_their_cost_for_the_thread_pool():
  """A sigmoid over 96K values has fewer ops (an exp counted once) and bytes than the pool's thresholds, but the work
  of its exponentials (each at TRANSCENDENTAL_OPS) passes them: it goes to the thread pool."""
  from tgc.codegen.knobs import PARALLEL_MIN_BYTES, PARALLEL_MIN_OPS, TRANSCENDENTAL_OPS
  from tgc.emit.c import _parallel
  x = np.random.default_rng(5).standard_normal((96, 1024)).astype(np.float32)
  cm = compiled(ModelCase("sig", lambda device: lambda x: x.sigmoid(), {"x": x}), cpu="x86-64-v3")
  (k,) = cm.kernels.values()
  assert k.ops < PARALLEL_MIN_OPS and k.bytes < PARALLEL_MIN_BYTES
  assert k.work == k.ops + x.size * (TRANSCENDENTAL_OPS - 1) >= PARALLEL_MIN_OPS
  assert _parallel(k) == f"TG_PARALLEL({k.work}.0, {k.bytes}.0)"


@pytest.fixture(scope="module")
def net(tmp_path_factory):
  case = net_case()
  return case, emit_folder(tmp_path_factory.mktemp("net"), case), case.reference()


def test_kernels_are_vector_code(net):
  _, folder, _ = net
  kernels = manifest_of(folder)["kernels"]
  vectorized = [k for k in kernels if any(o[0] == "VECTOR" for o in k["opts"])]
  assert len(vectorized) >= len(kernels) * 2 // 3, [k["opts"] for k in kernels]
  source = open(os.path.join(folder, "model.c")).read()
  assert "tg_f32x" in source and "#if !TG_SIMD\n#error" in source
  for k in kernels: assert source.count(f" void {k['name']}(") == 1, f"{k['name']} is defined more than once"


@pytest.fixture(scope="module")
def generic_net(tmp_path_factory):
  """The net compiled for the `generic` CPU level: plain C99 kernels, no vector types."""
  case = net_case()
  folder = str(tmp_path_factory.mktemp("generic") / "net")
  os.makedirs(folder)
  write_artifact(compiled(case, "generic"), folder)
  return folder


@pytest.mark.parametrize("compiler", ["gcc", "clang"])
@pytest.mark.parametrize("simd", [True, False])
def test_simd_and_plain_c_match_the_reference(net, generic_net, tmp_path, compiler, simd):
  """SIMD kernels (the native level), and the generic level's plain C99 built as for a compiler without vector
  extensions (`TG_NO_SIMD`), which the SIMD kernels refuse with an #error naming the generic level."""
  require_tool(compiler, compiler)
  case, folder, reference = net
  if not simd:
    assert "tg_f32x" not in open(os.path.join(generic_net, "model.c")).read()
    refused = copy(folder, tmp_path, "refused")
    r = run(["make", "-s", f"CC={compiler}", "CFLAGS=-O2 -DTG_NO_SIMD"], cwd=refused, check=False)
    assert r.returncode != 0 and "--cpu generic" in r.stderr, r.stderr
  folder = copy(folder if simd else generic_net, tmp_path)
  cpu = manifest_of(folder)["target_info"]["cpu"]["cflags"]
  assert bool(cpu) == simd
  flags = " ".join(("-O2", *cpu, *C_WARNINGS[1:]) + (() if simd else ("-DTG_NO_SIMD",)))
  make(folder, f"CC={compiler}", f"CFLAGS={flags}")
  compare(run_main(folder, case.inputs), reference, case.rtol, case.atol)


def test_threads_give_the_same_bytes(net, tmp_path):
  case, folder, reference = net
  outs = {}
  flags = DEFAULT_CFLAGS + tuple(manifest_of(folder)["target_info"]["cpu"]["cflags"]) + ALL_PARALLEL
  for threads in (1, 2, 3):
    with CArtifact(folder, threads=threads, cflags=flags, cache_dir=str(tmp_path / "libs")) as art:
      outs[threads] = art.run(case.inputs)
  compare(outs[1], reference, case.rtol, case.atol)
  for threads in (2, 3):
    for name in outs[1]: assert outs[threads][name].tobytes() == outs[1][name].tobytes(), (threads, name)
  work = copy(folder, tmp_path, "main_threads")
  make(work, f"CFLAGS=-O2 {' '.join(manifest_of(folder)['target_info']['cpu']['cflags'] + list(ALL_PARALLEL))}")
  one = run_main(work, case.inputs)
  compare(run_main(work, case.inputs, args=("--threads", "2")), one, 0, 0)
  bad = run(["./main", "--threads", "0"], cwd=work, check=False)
  assert bad.returncode == 2 and "--threads" in bad.stderr


POOL_STRESS = r"""
#include "tgc_threads.h"
#include <stdio.h>

typedef struct { int *hits; } job;
static void task(void *p, size_t i) { ((job *)p)->hits[i] += 1; }

int main(void) {
  static int hits[64];
  job j;
  size_t round, i, n;
  tgc_pool *pool = tgc_pool_create(3);
  j.hits = hits;
  if (pool == NULL) return 2;
  for (round = 0; round < 20000; round++) {          /* jobs of every size, back to back */
    n = 2 + round % 60;
    for (i = 0; i < n; i++) hits[i] = 0;
    tgc_pool_parallel_for(pool, task, &j, n);
    for (i = 0; i < n; i++) {
      if (hits[i] != 1) { printf("round %lu: task %lu ran %d times\n", (unsigned long)round, (unsigned long)i, hits[i]);
                          return 1; }
    }
  }
  tgc_pool_destroy(pool);
  puts("ok");
  return 0;
}
"""


def test_pool_runs_every_task_once_under_thread_sanitizer(net, tmp_path):
  """The pool's lock-free parts (spinning workers and caller, claimed indices, the count of threads in a job):
  20000 jobs of 2..61 tasks on 3 threads, each task run exactly once, and ThreadSanitizer finds no race."""
  _, folder, _ = net
  gcc = require_tool("gcc", "gcc")
  work = copy(folder, tmp_path, "pool")
  (tmp_path / "pool" / "stress.c").write_text(POOL_STRESS)
  build = run([gcc, "-std=c99", "-O1", "-g", "-fsanitize=thread", "-pthread", "stress.c", "tgc_threads.c", "-o",
               "stress"], cwd=work, check=False)
  if build.returncode != 0 and "tsan" in build.stderr:
    pytest.skip(f"ThreadSanitizer's runtime (libtsan) is not installed: {build.stderr.strip()[-200:]}")
  assert build.returncode == 0, build.stderr
  out = run(["./stress"], cwd=work, check=False)
  assert out.returncode == 0 and out.stdout.strip() == "ok" and "ThreadSanitizer" not in out.stderr, out.stderr


NO_ALLOC_THREADS = r"""
#include "model.h"
#include "tgc_threads.h"
#include <stdio.h>
#include <stdlib.h>

static int in_run = 0;
void *__real_malloc(size_t n);
void *__real_calloc(size_t n, size_t m);
void __real_free(void *p);
static void guard(const char *what) { if (in_run) { fprintf(stderr, "%s called inside run\n", what); abort(); } }
void *__wrap_malloc(size_t n) { guard("malloc"); return __real_malloc(n); }
void *__wrap_calloc(size_t n, size_t m) { guard("calloc"); return __real_calloc(n, m); }
void __wrap_free(void *p) { guard("free"); __real_free(p); }

static size_t jobs = 0;        /* launches handed to the pool */
static void counting(void *user, void (*task)(void *, size_t), void *arg, size_t n) {
  jobs++;
  tgc_pool_parallel_for(user, task, arg, n);
}

int main(void) {
  static float image[1 * 3 * 12 * 12], tokens[16 * 32], out0[16 * 32], out1[32 * 6 * 6];
  const void *ins[2];
  void *outs[2];
  static net_ctx ctx;
  tgc_pool *pool = tgc_pool_create(2);
  int s;
  ins[0] = image; ins[1] = tokens; outs[0] = out0; outs[1] = out1;
  if (pool == NULL || net_init(&ctx, "weights.safetensors", NULL) != 0) return 1;
  net_set_parallel(&ctx, counting, pool);
  in_run = 1;
  s = net_run(&ctx, ins, outs);
  s |= net_run(&ctx, ins, outs);
  in_run = 0;
  net_free(&ctx);
  tgc_pool_destroy(pool);
  printf("%d %lu\n", s, (unsigned long)jobs);
  return s;
}
"""


def test_threads_allocate_nothing_in_run(net, tmp_path):
  _, folder, _ = net
  folder = copy(folder, tmp_path)
  with open(os.path.join(folder, "noalloc.c"), "w") as f: f.write(NO_ALLOC_THREADS)
  wraps = ",".join(f"--wrap={fn}" for fn in ("malloc", "calloc", "free"))
  run(["cc", "-std=c99", "-O2", *ALL_PARALLEL, "-pthread", "noalloc.c", "model.c", "tgc_threads.c", f"-Wl,{wraps}",
       "-o", "noalloc", "-lm"], cwd=folder)
  status, jobs = run(["./noalloc"], cwd=folder).stdout.split()
  assert status == "0" and int(jobs) > 0            # the pool did run kernels


def test_profile_times_every_launch(net, tmp_path):
  case, folder, _ = net
  calls = manifest_of(folder)["calls"]
  with CArtifact(folder, profile=True, cache_dir=str(tmp_path / "libs")) as art:
    art.run(case.inputs)
    art.profile_reset()
    assert art.profile() == [0.0] * len(calls)
    for _ in range(3): art.run(case.inputs)
    seconds = art.profile()
  assert len(seconds) == len(calls) and all(s > 0 for s in seconds)
  with CArtifact(folder, cache_dir=str(tmp_path / "libs")) as art:
    with pytest.raises(ValueError, match="profil"): art.profile()


def test_strict_flags_with_profiling_and_threads(net, tmp_path):
  _, folder, _ = net
  folder = copy(folder, tmp_path)
  for compiler in ("gcc", "clang"):
    if require_tool(compiler, compiler):
      run([compiler, *C_WARNINGS, "-O2", "-DTG_PROFILE", "-pthread", "-c", "model.c", "tgc_threads.c", "main.c"],
          cwd=folder)


def test_armv8_2_build_runs_neon_code_under_qemu(tmp_path):
  require_aarch64(tmp_path)
  case = net_case()
  folder = str(tmp_path / "arm")
  os.makedirs(folder)
  write_artifact(compiled(case, cpu="armv8.2-a"), folder)
  info = manifest_of(folder)["target_info"]["cpu"]
  assert info["level"] == "armv8.2-a" and info["vector_bytes"] == 16
  assert "tg_f32x4" in open(os.path.join(folder, "model.c")).read()
  make(folder, "CC=aarch64-linux-gnu-gcc", "AR=aarch64-linux-gnu-ar")        # the Makefile's CPU_FLAGS
  disassembly = subprocess.run(["aarch64-linux-gnu-objdump", "-d", os.path.join(folder, "model.o")],
                               capture_output=True, text=True).stdout
  assert "fmla\tv" in disassembly and ".4s" in disassembly
  got = run_main(folder, case.inputs, runner=("qemu-aarch64", "-L", "/usr/aarch64-linux-gnu"))
  compare(got, case.reference(), case.rtol, case.atol)


@pytest.mark.parametrize("threads", ["1", "2"])
def test_sanitizers_report_nothing_on_vector_code_and_threads(net, tmp_path, threads):
  case, folder, reference = net
  folder = copy(folder, tmp_path)
  cpu = " ".join(manifest_of(folder)["target_info"]["cpu"]["cflags"])
  make(folder, f"CFLAGS=-O1 -g {cpu} {' '.join(ALL_PARALLEL)} -fno-omit-frame-pointer -fsanitize=address,undefined "
               "-fno-sanitize-recover=all")
  env = dict(os.environ, ASAN_OPTIONS="detect_leaks=1:abort_on_error=0", UBSAN_OPTIONS="print_stacktrace=1")
  write_inputs(folder, case.inputs)
  r = run(["./main", "--threads", threads], cwd=folder, env=env)
  assert "runtime error" not in r.stderr and "Sanitizer" not in r.stderr, r.stderr
  got = {s["name"]: np.load(os.path.join(folder, f"{s['symbol']}.npy")) for s in manifest_of(folder)["outputs"]}
  compare(got, reference, case.rtol, case.atol)


def test_compiling_twice_gives_the_same_bytes(tmp_path):
  first, second = str(tmp_path / "a"), str(tmp_path / "b")
  for folder in (first, second):
    os.makedirs(folder)
    write_artifact(compiled(net_case()), folder)
  for name in sorted(os.listdir(first)):
    assert open(os.path.join(first, name), "rb").read() == open(os.path.join(second, name), "rb").read(), name
