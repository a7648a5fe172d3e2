"""BEAM search: picks opts by timing, its choice computes the right answer, and the result is cached on disk."""
import numpy as np
from tgc.frontend import Tensor, buffers
from tgc.frontend.realize import _alloc, to_numpy
from tgc.codegen.schedule import schedule
from tgc.codegen.lower import lower
from tgc.codegen.search import beam_search
from tgc.ir.config import config
from tgc.runtimes import get_runtime
from tgc.runtimes.timing import kernel_timer


def test_beam_finds_valid_opts_and_caches(tmp_path, monkeypatch):
  get_runtime("c")   # the runtime singleton keeps the session's cache folder; only the BEAM cache moves
  monkeypatch.setattr(config, "cache_dir", str(tmp_path))
  a = np.random.default_rng(0).standard_normal((64, 32), dtype=np.float32)
  b = np.random.default_rng(1).standard_normal((32, 48), dtype=np.float32)
  items, outs = schedule([(Tensor(a, device="c") @ Tensor(b, device="c")).uop], _alloc("c"))
  ast, bufs = items[0].ast, items[0].bufs
  rt = get_runtime("c")
  timer = kernel_timer(rt, [buffers.nbytes(x) for x in bufs], runs=1)
  calls = []
  counting = lambda prg: calls.append(prg.name) or timer(prg)   # noqa: E731
  opts = beam_search(ast, "c", counting, width=2, device="test", max_steps=2)
  assert calls, "the search timed nothing"
  prg = lower(ast, "c", opts)
  fn = rt.compile(prg.src, prg.name)
  fn(*[buffers.storage(x) for x in bufs], global_size=prg.global_size)
  np.testing.assert_allclose(to_numpy(outs[0]), a @ b, rtol=1e-4, atol=1e-4)
  n = len(calls)
  assert beam_search(ast, "c", counting, width=2, device="test") == opts and len(calls) == n   # from the cache
