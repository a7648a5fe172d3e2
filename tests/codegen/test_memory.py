"""Memory plans: offsets in one arena, or whole-buffer slots; both checked by an independent overlap verifier."""
import random
from tgc.codegen.memory import plan_memory, plan_slots


def lifetimes(calls):
  first, last = {}, {}
  for i, bufs in enumerate(calls):
    for b in bufs:
      first.setdefault(b, i); last[b] = i
  return first, last


def random_program(seed):
  rng = random.Random(seed)
  n = rng.randint(1, 30)
  calls, live = [], []
  for i in range(n):
    reads = rng.sample(live, min(len(live), rng.randint(0, 3)))
    calls.append([f"b{i}"] + reads)
    live.append(f"b{i}")
  return calls, {f"b{i}": rng.choice([4, 64, 100, 4096]) for i in range(n)}


def test_slots_never_share_between_live_buffers():
  for seed in range(200):
    calls, sizes = random_program(seed)
    slot_of, slot_size = plan_slots(calls, sizes)
    first, last = lifetimes(calls)
    for a in sizes:
      assert slot_size[slot_of[a]] >= sizes[a]
      for b in sizes:
        if a < b and slot_of[a] == slot_of[b]:
          assert last[a] < first[b] or last[b] < first[a], (seed, a, b)


def test_offsets_never_overlap_between_live_buffers():
  for seed in range(200):
    calls, sizes = random_program(seed)
    slots, arena = plan_memory(calls, sizes)
    for x in slots:
      assert x.offset + x.nbytes <= arena
      for y in slots:
        if x.key < y.key and not (x.last < y.first or y.last < x.first):
          assert x.offset + x.nbytes <= y.offset or y.offset + y.nbytes <= x.offset, (seed, x, y)


def test_chain_reuses_memory():
  calls = [["b0"]] + [[f"b{i}", f"b{i - 1}"] for i in range(1, 20)]
  sizes = {f"b{i}": 1024 for i in range(20)}
  _, slot_size = plan_slots(calls, sizes)
  assert len(slot_size) == 2
  assert plan_memory(calls, sizes)[1] <= 3 * 1024
