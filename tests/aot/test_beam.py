"""`tgc compile --beam`, `tgc tune` and `tgc compile --tuning`: the searched opts end up in the artifact (marked in
the manifest), the artifact still validates, a second compile finds the results in the cache, a tuning file gives
the same kernels without searching; bad options and an unreachable or missing Ray cluster are one-line errors
(exit 2); with Ray installed, a local cluster the test starts does the timing."""
import importlib.util
import json
import os
import shutil
import subprocess
import sys

import pytest
from click.testing import CliRunner
from tgc.aot.cli import cli
from tgc.ir.config import config
from tgc.runtimes import get_runtime

HERE = os.path.dirname(os.path.abspath(__file__))
MODEL = os.path.join(HERE, "..", "..", "examples", "tiny_mlp.py") + ":build"


@pytest.fixture
def beam_cache(tmp_path, monkeypatch):
  get_runtime("c")   # the runtime singleton keeps the session's cache folder; only the BEAM cache moves
  monkeypatch.setattr(config, "cache_dir", str(tmp_path / "cache"))
  return tmp_path / "cache"


def kernels_of(folder) -> list[dict]:
  return json.loads((folder / "manifest.json").read_text())["kernels"]


def test_compile_with_beam_validates_and_caches(tmp_path, beam_cache):
  runner = CliRunner()
  out = tmp_path / "art"
  r = runner.invoke(cli, ["compile", MODEL, "-o", str(out), "--beam", "1", "--jobs", "2"])
  assert r.exit_code == 0, r.output
  assert os.listdir(beam_cache / "beam"), "no beam results cached"
  assert all(k["tuned"] for k in kernels_of(out))
  assert runner.invoke(cli, ["validate", str(out)]).exit_code == 0
  again = tmp_path / "again"
  r = runner.invoke(cli, ["compile", MODEL, "-o", str(again), "--beam", "1"])
  assert r.exit_code == 0 and "cached" in r.stderr
  assert (again / "model.c").read_bytes() == (out / "model.c").read_bytes()


def test_tune_then_compile_with_the_tuning_file(tmp_path, beam_cache):
  runner = CliRunner()
  tuning = tmp_path / "tuning.json"
  r = runner.invoke(cli, ["tune", MODEL, "-o", str(tuning), "--beam-budget", "60"])
  assert r.exit_code == 0, r.output
  assert f"wrote {tuning}" in r.stdout and json.loads(tuning.read_text())["entries"]
  shutil.rmtree(beam_cache)         # the file alone must be enough
  out, plain = tmp_path / "tuned", tmp_path / "plain"
  assert runner.invoke(cli, ["compile", MODEL, "-o", str(out), "--tuning", str(tuning)]).exit_code == 0
  assert runner.invoke(cli, ["compile", MODEL, "-o", str(plain)]).exit_code == 0
  assert all(k["tuned"] for k in kernels_of(out)) and not any(k["tuned"] for k in kernels_of(plain))
  assert not beam_cache.exists(), "applying a tuning file searched"
  assert runner.invoke(cli, ["validate", str(out)]).exit_code == 0


@pytest.mark.parametrize("args, message", [
  (["--beam", "1", "--tuning", "t.json"], "exclude each other"),
  (["--tuning", "missing.json"], "cannot read"),
  (["--beam", "1", "--beam-budget", "-3"], "--beam-budget must be positive"),
  (["--beam", "1", "--jobs", "0"], "must be at least 1"),
  (["--beam", "1", "--beam-cluster", "127.0.0.1:9"],
   "--beam-cluster 127.0.0.1:9: " if importlib.util.find_spec("ray") else "--beam-cluster needs Ray"),
])
def test_bad_search_options_are_one_line_errors(tmp_path, beam_cache, args, message):
  (tmp_path / "t.json").write_text('{"format": 1, "entries": []}')
  r = CliRunner().invoke(cli, ["compile", MODEL, "-o", str(tmp_path / "out")] +
                         [a if not a.endswith(".json") else str(tmp_path / a) for a in args])
  assert r.exit_code == 2, r.output
  assert message in r.stderr and len(r.stderr.strip().splitlines()) == 1


def test_without_ray_the_cluster_option_names_the_missing_package(tmp_path, beam_cache, monkeypatch):
  monkeypatch.setitem(sys.modules, "ray", None)       # import ray raises ImportError
  r = CliRunner().invoke(cli, ["compile", MODEL, "-o", str(tmp_path / "out"), "--beam", "1", "--beam-cluster", "auto"])
  assert r.exit_code == 2 and r.stderr.strip() == "tgc: error: --beam-cluster needs Ray: pip install 'tgc[ray]'"


def test_a_malformed_tuning_file_is_a_user_error(tmp_path, beam_cache):
  (tmp_path / "bad.json").write_text('{"format": 1, "entries": [{"kernel": 3}]}')
  r = CliRunner().invoke(cli, ["compile", MODEL, "-o", str(tmp_path / "out"), "--tuning", str(tmp_path / "bad.json")])
  assert r.exit_code == 2 and "entry 0 is malformed" in r.stderr


def test_local_ray_cluster_times_the_candidates(tmp_path, beam_cache):
  pytest.importorskip("ray", reason="Ray is not installed (pip install 'tgc[ray]')")
  ray_bin = shutil.which("ray") or os.path.join(os.path.dirname(sys.executable), "ray")
  env = dict(os.environ, RAY_USAGE_STATS_ENABLED="0")
  port = 6390 + os.getpid() % 1000
  start = subprocess.run([ray_bin, "start", "--head", f"--port={port}", "--num-cpus=2", "--include-dashboard=false",
                          "--disable-usage-stats"], capture_output=True, text=True, env=env, timeout=180)
  if start.returncode != 0: pytest.fail(f"ray start failed: {start.stderr[-500:]}")
  try:
    tuning = tmp_path / "tuning.json"
    r = subprocess.run([sys.executable, "-m", "tgc.aot.cli", "tune", MODEL, "-o", str(tuning), "--beam-cluster",
                        f"127.0.0.1:{port}"], capture_output=True, text=True, timeout=600,
                       env=dict(env, TGC_CACHE_DIR=str(beam_cache)))
    assert r.returncode == 0, r.stderr[-2000:]
    entries = json.loads(tuning.read_text())["entries"]
    assert entries and all(e["device"] == get_runtime("c").device_name for e in entries)
  finally:
    subprocess.run([ray_bin, "stop", "--force"], capture_output=True, env=env, timeout=120)
