"""A training process killed with SIGKILL (between steps and in the middle of a checkpoint
save), then resumed, ends bit-identical to an uninterrupted run."""

import os
import pathlib
import signal
import subprocess
import sys

import numpy as np

from jaxlib_papers.core import writers

WORKER = pathlib.Path(__file__).with_name("fault_worker.py")
REPO = pathlib.Path(__file__).resolve().parents[2]


def _run(workdir, out, kill=None):
  env = dict(os.environ, PYTHONPATH=str(REPO), JAXLIB_PAPERS_CACHE="none")
  # The suite's compile settings (tests/conftest.py) at the in-process tests' LLVM -O0 (a
  # tiny kernel: compile-bound); the worker sets its device count.
  env["XLA_FLAGS"] = " ".join(
      f.replace("--xla_backend_optimization_level=1", "--xla_backend_optimization_level=0")
      for f in env.get("XLA_FLAGS", "").split()
      if not f.startswith("--xla_force_host_platform_device_count"))
  args = [sys.executable, str(WORKER), str(workdir), str(out)] + ([kill] if kill else [])
  return subprocess.run(args, env=env, capture_output=True, text=True, timeout=300)


def test_sigkill_between_steps_and_during_a_save_then_resume_is_bit_identical(tmp_path):
  reference = _run(tmp_path / "reference", tmp_path / "reference.npz")
  assert reference.returncode == 0, reference.stderr[-3000:]

  workdir, out = tmp_path / "killed", tmp_path / "killed.npz"
  # Killed in step 3 (after the step-2 checkpoint), during the save of step 6 (state item
  # written, checkpoint not committed), and in step 9: three restarts, each resuming.
  for kill, last_good in (("step:3", 2), ("save:6", 4), ("step:9", 8)):
    run = _run(workdir, out, kill)
    assert run.returncode == -signal.SIGKILL, (kill, run.returncode, run.stderr[-3000:])
    assert not out.exists()
    committed = sorted(int(p.name) for p in (workdir / "checkpoints").iterdir()
                       if p.name.isdigit())
    assert committed[-1] == last_good, (kill, committed)
    if kill.startswith("save"):  # the kill really hit mid-save: an uncommitted step 6
      assert any(p.name.startswith("6.") for p in (workdir / "checkpoints").iterdir())
  final = _run(workdir, out)
  assert final.returncode == 0, final.stderr[-3000:]

  expected, got = np.load(tmp_path / "reference.npz"), np.load(out)
  assert set(expected) == set(got) == {"w1", "w2", "init_w1", "init_w2"}
  for name in expected:
    np.testing.assert_array_equal(got[name], expected[name])
  # The run really trained: the comparison is not between two untouched initialisations.
  assert np.abs(got["w1"] - got["init_w1"]).max() > 1e-2
  # Metrics survive the kills: one row per step, no gap and no duplicate, the same
  # numbers as the uninterrupted run's (rows are flushed before every checkpoint and the
  # file is cut back to the checkpoint a run resumes from).
  rows = writers.read_jsonl(workdir / "metrics.jsonl")
  reference_rows = writers.read_jsonl(tmp_path / "reference" / "metrics.jsonl")
  assert [r["step"] for r in rows] == list(range(1, 11))
  assert rows == reference_rows


def test_a_fresh_run_replaces_the_metrics_of_an_older_run(tmp_path):
  stale = tmp_path / "metrics.jsonl"
  stale.write_text('{"step": 1, "loss": 9.0}\n{"step": 2, "loss": 8.0}\n{"step": 3, "lo')
  writer = writers.MetricWriter(tmp_path, resume_step=None)
  writer.write(1, {"loss": 1.0})
  writer.close()
  assert writers.read_jsonl(stale) == [{"step": 1, "loss": 1.0}]
  writer = writers.MetricWriter(tmp_path, resume_step=1)  # a resume keeps rows <= 1
  writer.write(2, {"loss": 0.5})
  writer.close()
  assert [r["step"] for r in writers.read_jsonl(stale)] == [1, 2]
