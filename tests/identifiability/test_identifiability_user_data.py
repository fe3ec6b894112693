"""The trainer on a user's own data set: shapes inferred, it learns, bad data named."""

import jax
import numpy as np
import pytest

from jaxlib_papers.identifiability import data as data_lib
from jaxlib_papers.identifiability import train
from jaxlib_papers.identifiability.configs import default


def _config(steps: int, **overrides):
  config = default.get_config("smoke")
  with config.unlocked():
    config.loop.num_steps = steps
    config.loop.log_every = steps
    config.loop.checkpoint_every = steps
    config.loop.quiet = True
    for key, value in overrides.items():
      group, name = key.split(".")
      config[group][name] = value
  return config


def _mixture(seed: int, num: int = 4000, dim: int = 3, classes: int = 10):
  """Samples of the package's own vMF mixture, handed over as plain arrays."""
  problem = data_lib.make_problem(jax.random.key(seed), dim, classes, mixing_candidates=64)
  b = data_lib.sample_batch(jax.random.key(seed + 100), problem, 10.0, num, classes)
  return np.asarray(b.x), np.asarray(b.label), np.asarray(b.z)


def _arrays(seed: int):
  """p = 3 observed features padded with 2 noise columns: the input width is inferred."""
  x, y, z = _mixture(seed)
  x = np.concatenate([x, np.random.default_rng(seed).normal(size=(len(x), 2))], axis=1)
  return x, y, z


_RUNS = {}


def _run_on_arrays(seed: int):
  if seed not in _RUNS:
    _RUNS[seed] = train.run(_config(300), dataset=data_lib.as_dataset(*_arrays(seed)))
  return _RUNS[seed]


@pytest.mark.parametrize("seed", [0, 1])
def test_supervised_run_on_arrays_infers_shapes_and_learns(seed):
  result = _run_on_arrays(seed)
  assert result.shapes == {"num_train": 3200, "num_eval": 800, "input_dim": 5,
                           "feature_dim": 3, "num_labels": 10}
  (summary,) = result.summary
  assert summary["seeds"] == 2
  # Every seed's classifier beats its initialisation, and recovers z better than it.
  for row in result.rows:
    assert row["model_ce"] < row["model_ce_untrained"] - 0.2
    assert row["accuracy"] > row["accuracy_untrained"] + 0.1
    assert row["r2_z"] > row["r2_z_untrained"] + 0.02
  assert result.history[-1]["step"] == 300


def test_npz_file_trains_like_the_arrays_and_diet_labels_are_row_indices(tmp_path):
  x, y, z = _arrays(0)
  path = tmp_path / "mine.npz"
  np.savez(path, x=x, y=y, z=z)
  from_file = train.run(_config(300, **{"data.path": str(path)}), tmp_path / "run")
  assert from_file.rows == _run_on_arrays(0).rows
  assert (tmp_path / "run" / "results.json").exists()
  # DIET: one head row per training sample, labelled by its index (shapes only; the
  # objective's training is the vmf kernel's, tested in test_identifiability_kernel.py).
  config = _config(10, **{"objective.kind": "diet"})
  split = train.split_dataset(600, float(config.data.holdout_fraction), int(config.seed))
  settings = train.dataset_settings(config, data_lib.as_dataset(x[:600], y[:600], z[:600]),
                                    split.train.shape[0])
  assert settings.num_labels == split.train.shape[0] == 480
  assert sorted(np.concatenate([split.train, split.held_out])) == list(range(600))


@pytest.mark.parametrize("arrays, message", [
    (dict(x=np.array([[0.0, 1.0], [np.nan, 0.0], [1.0, 1.0]]), y=[0, 1, 0]),
     r"x\[1, 0\] is nan"),
    (dict(x=np.ones((3, 2)), y=[0.5, 1.0, 0.0]), "integer class labels"),
    (dict(x=np.ones((3, 2)), y=[0, 1]), "one label per row of x"),
    (dict(x=np.ones((3, 2)), y=[0, -1, 0]), r"y\[1\] = -1"),
    (dict(x=np.ones((3, 2)), y=[0, 1, 0], z=np.ones((2, 2))), "z must have one row"),
    (dict(x=np.ones(3), y=[0, 1, 0]), "2-D array"),
])
def test_bad_arrays_are_named(arrays, message):
  with pytest.raises(ValueError, match=message):
    data_lib.as_dataset(**arrays)


def test_bad_file_is_named(tmp_path):
  path = tmp_path / "no_labels.npz"
  np.savez(path, x=np.ones((4, 2)))
  with pytest.raises(ValueError, match=r"no_labels.npz: missing array\(s\) \['y'\]"):
    data_lib.load_dataset(path)
  config = _config(10, **{"data.path": str(tmp_path / "absent.npz")})
  with pytest.raises(ValueError, match="data.path"):
    train.run(config)
