"""`tgc compile --beam`: the searched opts end up in the artifact and the artifact still validates."""
import json
import os
from click.testing import CliRunner
from tgc.aot.cli import cli
from tgc.ir.config import config
from tgc.runtimes import get_runtime

HERE = os.path.dirname(os.path.abspath(__file__))
MODEL = os.path.join(HERE, "..", "..", "examples", "tiny_mlp.py") + ":build"


def test_compile_with_beam_validates(tmp_path, monkeypatch):
  get_runtime("c")   # the runtime singleton keeps the session's cache folder; only the BEAM cache moves
  monkeypatch.setattr(config, "cache_dir", str(tmp_path / "cache"))
  out = tmp_path / "art"
  runner = CliRunner()
  r = runner.invoke(cli, ["compile", MODEL, "--target", "c", "-o", str(out), "--beam", "1"])
  assert r.exit_code == 0, r.output
  assert os.listdir(tmp_path / "cache" / "beam"), "no beam results cached"
  kernels = json.loads((out / "manifest.json").read_text())["kernels"]
  assert kernels
  r = runner.invoke(cli, ["validate", str(out)])
  assert r.exit_code == 0, r.output
