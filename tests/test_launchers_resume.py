"""Every training launcher at ``smoke``: killed (SIGKILL) right after its first checkpoint,
rerun with the same workdir, it resumes and finishes with the results of an uninterrupted
run, and its metrics files hold exactly one row per logged step.

The kill comes from ``core.train_loop``'s fault hook (``JAXLIB_PAPERS_KILL_AFTER_CHECKPOINT``),
as a pre-empted job dies: after a checkpoint is committed, before the next step. The runs
share the test session's compilation cache, so the rerun and the uninterrupted run mostly
load what the first run compiled.
"""

import json
import os
import pathlib
import signal
import subprocess
import sys

import pytest

from jaxlib_papers.core import train_loop

REPO = pathlib.Path(__file__).resolve().parents[1]

# Launcher -> extra flags at smoke: a checkpoint before the end, so the kill loses work.
LAUNCHERS = {
    "aerca": ["--config=aerca:smoke", "--config.loop.checkpoint_every=3"],
    "cca": ["--config=cca:smoke"],
    "cp_fuse": ["--config=cp_fuse:smoke", "--config.loop.checkpoint_every=30"],
    "fsbm": ["--config=fsbm:smoke"],
    "identifiability": ["--config=identifiability:smoke",
                        "--config.loop.checkpoint_every=20"],
    # The resume is what is tested: two covariance methods and a small evaluation.
    "ocm": ["--config=ocm:smoke", "--config.eval.methods=('beta','ocm')",
            "--config.heads.names=('ocm',)", "--config.eval.num_nelbo=256",
            "--config.eval.num_samples=256", "--config.eval.error_timesteps=()",
            "--config.eval.sample_steps=(10,)"],
    "ruot": ["--config=ruot:smoke"],
    # The docking stage is killed and resumed; the relaxation stage (the same core.stages
    # runner, its own compile) is left out to halve the three runs' compile time.
    "unbalanced_fm": ["--config=unbalanced_fm:smoke", "--config.relax.steps=0"],
}

# Launchers whose smoke run is compile-bound run at LLVM -O0 (~20% less; the three runs of a
# package share one compilation cache, so -O0 is paid once); fsbm's and ruot's smoke steps
# run long enough that -O1 is faster (tests/test_launchers_and_demos.py keeps them there).
_AT_O1 = ("fsbm", "ruot")
_OPT_LEVEL = "--xla_backend_optimization_level="

# Wall-clock fields differ between any two runs.
TIMING_KEYS = ("timings", "timing")


def _launch(package, workdir, kill=False):
  env = dict(os.environ, PYTHONPATH=str(REPO), JAXLIB_PAPERS_CACHE="none")
  env.pop(train_loop.KILL_AFTER_CHECKPOINT_ENV, None)
  # One CPU device, as a user's machine (tests/test_launchers_and_demos.py: 8 fake devices
  # in concurrent subprocesses deadlocked XLA:CPU once).
  env["XLA_FLAGS"] = " ".join(
      f for f in env.get("XLA_FLAGS", "").split()
      if not f.startswith("--xla_force_host_platform_device_count"))
  if package not in _AT_O1:
    env["XLA_FLAGS"] = env["XLA_FLAGS"].replace(_OPT_LEVEL + "1", _OPT_LEVEL + "0")
  if kill:
    env[train_loop.KILL_AFTER_CHECKPOINT_ENV] = "1"
  args = [sys.executable, "-m", f"launch.{package}", f"--workdir={workdir}",
          *LAUNCHERS[package]]
  return subprocess.run(args, cwd=workdir.parent, env=env, capture_output=True, text=True,
                        timeout=300)


def _without_timings(tree):
  if isinstance(tree, dict):
    return {k: _without_timings(v) for k, v in tree.items()
            if k not in TIMING_KEYS and not k.endswith("seconds")}
  if isinstance(tree, list):
    return [_without_timings(v) for v in tree]
  return tree


@pytest.mark.parametrize("package", sorted(LAUNCHERS))
def test_launcher_killed_after_a_checkpoint_resumes_to_the_uninterrupted_result(
    package, tmp_path):
  killed = _launch(package, tmp_path / "run", kill=True)
  assert killed.returncode == -signal.SIGKILL, killed.stdout[-2000:] + killed.stderr[-2000:]
  checkpoints = list((tmp_path / "run").rglob("checkpoints/*/"))
  assert checkpoints, "killed after a checkpoint, yet none is on disk"
  assert not (tmp_path / "run" / "results.json").exists()

  resumed = _launch(package, tmp_path / "run")
  assert resumed.returncode == 0, resumed.stdout[-2000:] + resumed.stderr[-2000:]
  assert "resumed from" in resumed.stdout, resumed.stdout[-2000:]
  reference = _launch(package, tmp_path / "reference")
  assert reference.returncode == 0, reference.stderr[-2000:]

  got = json.loads((tmp_path / "run" / "results.json").read_text())
  want = json.loads((tmp_path / "reference" / "results.json").read_text())
  assert _without_timings(got) == _without_timings(want)
  for metrics in (tmp_path / "run").rglob("metrics.jsonl"):
    steps = [json.loads(line)["step"] for line in metrics.read_text().splitlines()]
    reference_file = tmp_path / "reference" / metrics.relative_to(tmp_path / "run")
    want_steps = [json.loads(line)["step"] for line in reference_file.read_text().splitlines()]
    assert steps == want_steps, metrics
