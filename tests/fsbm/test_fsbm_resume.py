"""Every FSBM task checkpoints, and a stopped run resumes to what an uninterrupted one ends
at (issue 34: the crowd tasks' empty mean-field table made the first checkpoint fail).

The S-tunnel is the fsbm launcher's default task, killed and resumed through the command
line by ``tests/test_launchers_resume.py``; here the other three: the V-neck (the other
crowd task), the opinion task (its state carries the mean-field table) and latents (data
from files)."""

import json

import jax
import numpy as np
import pytest

from jaxlib_papers.core import distributed
from jaxlib_papers.fsbm import train
from jaxlib_papers.fsbm.configs import default

# Tiny sizes: the point is the state's round trip, not the training.
_TINY = {"batch_size": 8, "csoc.S": 6, "csoc.N": 1, "csoc.num_iters": 2, "csoc.T_mean": 3,
         "csoc.T_gamma": 3, "match.steps": 2, "match.batch_size": 4, "num_sim_steps": 10,
         "model.hidden": 8, "num_keypoints": 6, "num_feedback": 4, "eval.num_samples": 8,
         "loop.num_steps": 3}
_TASKS = {"vneck": {},
          "opinion": {"dim": 4, "opinion.field_times": 4}, "latents": {"dim": 3}}


def _config(task, tmp_path, num_steps):
  overrides = {**_TINY, **_TASKS[task], "loop.num_steps": num_steps}
  if task == "latents":  # no generated data: tiny latents and keypoints on disk
    rng = np.random.default_rng(0)
    for name, shape in (("source", (20, 3)), ("target", (20, 3)), ("kp", (6, 6, 3))):
      np.save(tmp_path / f"{name}.npy", rng.standard_normal(shape).astype(np.float32))
    overrides.update({"latents.source_path": str(tmp_path / "source.npy"),
                      "latents.target_path": str(tmp_path / "target.npy"),
                      "keypoints_path": str(tmp_path / "kp.npy")})
  return default.task_config(task, "smoke", **overrides)


@pytest.mark.parametrize("task", sorted(_TASKS))
def test_stopped_run_resumes_to_the_uninterrupted_result(task, tmp_path):
  mesh = distributed.make_mesh(devices=jax.devices()[:1])
  run = lambda steps, folder: train.run(
      _config(task, tmp_path, steps), tmp_path / folder, evaluate_model=False,
      verbose=False, mesh=mesh).runs[0]
  whole = run(3, "whole")
  run(1, "stopped")           # stopped after its first alternation (and checkpoint)
  resumed = run(3, "stopped")
  label = f"tau_{whole.tau:g}"
  assert (tmp_path / "stopped" / label / "checkpoints").is_dir()
  assert [r["step"] for r in resumed.history] == [1, 2, 3]
  for a, b in zip(jax.tree.leaves(whole.state), jax.tree.leaves(resumed.state)):
    if jax.dtypes.issubdtype(a.dtype, jax.dtypes.prng_key):
      a, b = jax.random.key_data(a), jax.random.key_data(b)
    np.testing.assert_array_equal(np.asarray(a), np.asarray(b))
  assert resumed.history == whole.history
  written = json.loads((tmp_path / "stopped" / "results.json").read_text())
  assert written["runs"][0]["history"] == resumed.history
  assert (whole.state.field is None) == (task != "opinion")
