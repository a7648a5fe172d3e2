"""The typed Target: languages, CPU levels and what they allow, the host's level, GPU limits and options, stable
names for caches; renderers are made for a Target."""
import pytest

from tgc.codegen.render import get_renderer, CRenderer, WGSLRenderer
from tgc.codegen.target import CPU_CHOICES, CPU_LEVELS, Target, as_target, cpu_level, host_cpu


@pytest.mark.parametrize("level, lanes, fma, fp16", [("x86-64-v2", 4, False, False), ("x86-64-v3", 8, True, False),
                                                     ("x86-64-v4", 16, True, False), ("armv8-a", 4, True, False),
                                                     ("armv8.2-a", 4, True, True)])
def test_cpu_levels(level, lanes, fma, fp16):
  t = Target.make("c", cpu=level)
  assert t.cpu.level == level and t.vector_lanes(4) == lanes and t.cpu.fma is fma and t.cpu.fp16 is fp16
  assert t.cpu.cc_flags[0].startswith("-march=") and t.cpu.describe()["requested"] == level
  assert str(t) == f"c+{level}" and not t.has_workgroups and t.has_threads


def test_host_cpu_is_a_known_level():
  cpu = host_cpu()
  assert cpu.level in CPU_LEVELS and cpu.requested == "native" and cpu.l1d_bytes > 0 and cpu.l2_bytes > 0
  assert cpu_level("native").level == cpu.level and "native" in CPU_CHOICES


def test_unknown_cpu_names_the_choices():
  with pytest.raises(ValueError, match="unknown --cpu 'pentium4'.*x86-64-v3"): cpu_level("pentium4")


def test_gpu_targets():
  web = Target.make("webgpu")
  assert web.has_workgroups and not web.has_threads and web.cpu is None and web.max_buffers == 8
  assert web.narrow_int64 and web.narrow_f64 and str(web) == "webgpu+narrow_int64+narrow_f64"
  eager = as_target("webgpu")
  assert not eager.narrow_int64 and str(eager) == "webgpu"
  cuda = Target.make("cuda")
  assert cuda.max_groups_per_dim == (2**31 - 1, 65535, 65535) and cuda.max_local_items == 1024
  assert str(Target.make("webgpu", artifact=False, max_buffers=10)) == "webgpu+bufs10"
  with pytest.raises(ValueError, match="no target 'vulkan'"): Target.make("vulkan")


def test_renderers_are_made_for_a_target():
  t = Target.make("c", cpu="armv8-a")
  r = get_renderer(t)
  assert isinstance(r, CRenderer) and r.target is t
  assert isinstance(get_renderer("webgpu"), WGSLRenderer) and get_renderer(r) is r
