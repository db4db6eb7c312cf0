"""The dataset CLI: build from a config, show records; the real command line once (imported data)."""
import io
import json
import os
import subprocess
import sys

import data_fakes
from arenarl_jax import config_tree
from arenarl_jax.data import builder, cli
from arenarl_jax.data.settings import DataSettings

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(os.path.dirname(HERE))


def _source(c):
  return builder.make_source_config(DataSettings.from_config(c.data), c.env)


def test_build_then_show_from_a_config(tmp_path):
  c = config_tree.make_base_config()
  c.env.name, c.env.seed, c.data.dir = "fake", 2, str(tmp_path)
  out = io.StringIO()
  path = cli.build(_source(c), c.data.dir, out=out)
  assert path == cli.dataset_path(_source(c), c.data.dir) and path.endswith(
      f"fake-seed2-err0.3-{builder.env_code_version('fake')[:12]}/1.0.0")
  assert out.getvalue().splitlines()[1:] == ["  sft: 6 records", "  test_alpha: 3 records",
                                             "  test_beta-2: 3 records", "  train: 12 records"]
  out = io.StringIO()
  shown = cli.show(path, "sft", 2, out=out)
  expected = data_fakes.FakeEnvironment(2).tasks("sft")[:2]
  assert [s["task_id"] for s in shown] == [t.id for t in expected]
  assert shown[0]["messages"][0] == {"role": "user", "content": shown[0]["query"]}


def test_command_line_imports_and_shows(tmp_path):
  root = str(tmp_path / "in")
  data_fakes.write_reference_layout(root)
  env = dict(os.environ, PYTHONPATH=ROOT)
  common = ["--config=configs/quickstart.py", "--config.env.name=fake",
            "--config.data.source=import", f"--config.data.import_dir={root}",
            f"--config.data.dir={tmp_path / 'out'}"]
  proc = subprocess.run([sys.executable, "-m", "arenarl_jax.data.cli", "build", *common], env=env,
                        cwd=ROOT, capture_output=True, text=True, timeout=120)
  assert proc.returncode == 0, proc.stderr[-3000:]
  assert "  train: 12 records" in proc.stdout and "fake-import-" in proc.stdout
  # `show` of the same config in this process reads what the command line built.
  c = config_tree.make_base_config()
  c.env.name, c.data.source, c.data.import_dir = "fake", "import", root
  c.data.dir = str(tmp_path / "out")
  out = io.StringIO()
  shown = cli.show(cli.dataset_path(_source(c), c.data.dir), "test_alpha", 1, out=out)
  assert json.loads(out.getvalue()) == shown[0]
  assert shown[0]["task_id"] == "fake/alpha/test-000001"
  assert shown[0]["reference"][-1]["role"] == "assistant"
