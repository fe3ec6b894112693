"""The pipeline's settings, split and seed statistics (no training: settings fail first)."""

import numpy as np
import pytest

from jaxlib_papers.aerca import data, train
from jaxlib_papers.aerca.configs.default import dataset_config
from jaxlib_papers.core import compiler


def _dataset(num_series, length=12, p=4):
  x = np.zeros((num_series, length, p), np.float32)
  return data.Dataset(x, x, np.zeros(x.shape, bool), np.zeros((p, p)), np.zeros((0,)),
                      "linear")


def test_settings_are_read_once_per_variant():
  config = dataset_config("nonlinear", "smoke")
  s = train.settings_from_config(config, "paper_kl")
  assert s.loss.kl_form == "paper" and s.max_epochs == 6
  assert s.train.epochs_per_step == 3 and s.train.num_seeds == 2
  only = train.settings_from_config(config, "encoder_only")
  assert not only.loss.decoder and only.loss.beta == 0.0


def test_the_train_steps_xla_options_come_from_the_config(monkeypatch):
  """The nonlinear data set's GVARs train with XLA's Eigen dots (its config), the others
  with the backend's defaults; the variant's stage carries the options; a bad name fails."""
  monkeypatch.delenv("XLA_FLAGS", raising=False)
  nonlinear = train.settings_from_config(dataset_config("nonlinear", "smoke"))
  assert nonlinear.compiler_options == compiler.cpu_threaded_dots()
  assert nonlinear.compiler_options is not None   # a CPU backend here
  linear = train.settings_from_config(dataset_config("linear", "smoke"))
  assert linear.compiler_options is None
  stage = train.variant_stage(None, [], "aerca", nonlinear)
  assert stage.compiler_options == nonlinear.compiler_options
  with pytest.raises(ValueError, match="compiler_options"):
    dataset_config("linear", "smoke", compiler_options="fast")


@pytest.mark.parametrize("max_epochs", [0, 5])
def test_max_epochs_must_be_a_positive_multiple_before_training(max_epochs):
  config = dataset_config("linear", "smoke")
  config.optim.max_epochs = max_epochs
  # 0: the config's constraint (an integer >= 1); 5: not a multiple of epochs_per_step = 3.
  with pytest.raises(ValueError, match=r"optim.max_epochs (must be a positive multiple|"
                                       r"= 0: expected an integer >= 1)"):
    train.run(config, dataset=_dataset(1))   # fails before the (unusable) data is split


def test_split_errors_name_the_right_key():
  config = dataset_config("linear", "smoke")
  config.data.num_train, config.data.num_val = 1, 1
  with pytest.raises(ValueError, match="data.num_train must be >= 2"):
    train.split(_dataset(4), config)
  config.data.num_train, config.data.num_val = 3, 3
  with pytest.raises(ValueError, match=r"data.num_val must be in \[1, data.num_train - 1 = 2\]"):
    train.split(_dataset(4), config)
  config.data.num_val = 1
  with pytest.raises(ValueError, match="leaves none to test"):
    train.split(_dataset(3), config)
  parts = train.split(_dataset(5), config)
  assert [len(parts[k]) for k in ("fit", "val", "test_normal")] == [2, 1, 2]


def test_summarize_seeds_is_the_mean_and_std_over_seeds():
  rows = [{"ac": [1.0, 0.5], "avg": [1.0, 0.75], "auroc": 0.9, "ac_star": {1: 0.5}},
          {"ac": [0.0, 0.5], "avg": [0.0, 0.25], "auroc": 0.7, "ac_star": {1: 1.0}}]
  out = train.summarize_seeds(rows)
  assert out["ac"] == [0.5, 0.5] and out["ac_std"] == [0.5, 0.0]
  assert out["avg"] == [0.5, 0.5] and out["avg_std"] == [0.5, 0.25]
  np.testing.assert_allclose([out["auroc"], out["auroc_std"]], [0.8, 0.1])
  assert out["ac_star"] == {1: 0.75} and "auprc" not in out and out["per_seed"] is rows


def test_a_users_data_set_sets_num_vars_from_its_shape():
  config = dataset_config("linear", "smoke")
  mine = train.with_data_shape(config, _dataset(6, p=7))
  assert mine.data.num_vars == 7 and config.data.num_vars == 4   # the input is not changed
  with pytest.raises(ValueError, match=r"dataset.normal must be \[n, T, p\]"):
    train.with_data_shape(config, _dataset(6)._replace(normal=np.zeros((6, 12))))


def test_draws_are_independent_data_sets_and_the_first_is_the_single_draw():
  config = dataset_config("nonlinear", "smoke")
  one, three = train.make_dataset(config), train.make_dataset(config, draws=3)
  assert three.normal.shape == (3, *one.normal.shape) and three.graph.shape == (3, 6, 6)
  np.testing.assert_array_equal(three.graph[0], one.graph)
  np.testing.assert_array_equal(three.labels[0], one.labels)
  np.testing.assert_allclose(three.normal[0], one.normal, rtol=1e-4, atol=1e-4)
  assert not np.array_equal(three.graph[1], three.graph[0])   # each draw has its own graph
  assert not np.array_equal(three.graph[2], three.graph[1])
  with pytest.raises(ValueError, match="draws must be None or >= 1"):
    train.make_dataset(config, draws=0)
