"""Bad input, as a user gives it: every row of the README's table fails before anything
trains, with the key (or file) named and what is allowed, and nothing on disk changes.

Each row builds the package's ``smoke`` config, sets one bad value (as
``--config.<key>=<value>`` would) and calls ``train.run`` with a workdir that already
holds a results file and a checkpoint folder of an earlier run: both must stay untouched.
"""

import importlib
import pathlib

import pytest

# (package, config spec, key, bad value, words the error must contain)
ROWS = [
    ("ruot", "smoke", "stage1.lr", -1e-3, "config.stage1.lr = -0.001: expected a number > 0"),
    ("ruot", "smoke", "stage3.steps", -5, "config.stage3.steps = -5: expected an integer >= 0"),
    ("ocm", "smoke", "dsm.lr", -1e-3, "config.dsm.lr = -0.001: expected a number > 0"),
    ("cca", "smoke", "pretrain.lr", -2e-3, "config.pretrain.lr = -0.002: expected a number > 0"),
    ("cp_fuse", "smoke", "train.lr", -3e-3, "config.train.lr = -0.003: expected a number > 0"),
    ("minimax", "smoke", "solve.reg_factor", -1.0,
     "config.solve.reg_factor = -1.0: expected a number > 0"),
    ("aerca", "smoke", "optim.max_epochs", 0,
     "config.optim.max_epochs = 0: expected an integer >= 1"),
    ("fsbm", "smoke", "batch_size", 0, "config.batch_size = 0: expected an integer >= 1"),
    ("fsbm", "smoke", "match.ema_decay", 1.5,
     "config.match.ema_decay = 1.5: expected a number in [0.0, 1.0)"),
    ("fsbm", "smoke", "csoc.pair_chunk", 24,
     "config.csoc.pair_chunk = 24: expected 0 or a divisor of config.batch_size (64)"),
    ("identifiability", "smoke", "optim.learning_rate", -1.0,
     "config.optim.learning_rate = -1.0: expected a number > 0"),
    ("identifiability", "smoke", "dgp.kappas", (10.0, -1.0),
     "config.dgp.kappas = (10.0, -1.0): expected a non-empty list of a number > 0"),
    ("linear_rl", "smoke", "run.num_seeds", 0,
     "config.run.num_seeds = 0: expected an integer >= 1"),
    ("ruot", "smoke", "data.path", "/no/such/cells.csv",
     "config.data.path = '/no/such/cells.csv': expected an existing file"),
    ("ocm", "smoke", "data.path", "/no/such/points.npy",
     "config.data.path = '/no/such/points.npy': expected an existing file (or empty)"),
    ("single_index", "smoke", "steps.eta_p1", -0.2,
     "config.steps.eta_p1 = -0.2: expected a number > 0"),
    ("sae_split", "smoke", "target.test_size", 1.5,
     "config.target.test_size = 1.5: expected a number in (0.0, 1.0)"),
    ("creativity", "smoke", "index.reduce", "max",
     "config.index.reduce = 'max': expected one of 'sum', 'mean'"),
    ("test_task", "smoke", "analysis.bootstrap_samples", -1,
     "config.analysis.bootstrap_samples = -1: expected an integer >= 0"),
    ("unbalanced_fm", "smoke", "dock.deltas", (0.6, -0.5),
     "config.dock.deltas = (0.6, -0.5): expected a non-empty list of a cutoff >= 0"),
    ("identifiability", "smoke", "data.path", "/no/such/mine.npz",
     "config.data.path = '/no/such/mine.npz': expected an existing file (or empty)"),
]


def _earlier_run(workdir: pathlib.Path) -> dict[pathlib.Path, bytes]:
  (workdir / "stage1" / "checkpoints" / "7").mkdir(parents=True)
  (workdir / "stage1" / "checkpoints" / "7" / "state").write_bytes(b"an earlier checkpoint")
  (workdir / "results.json").write_text('{"from": "an earlier run"}')
  return {p: p.read_bytes() for p in workdir.rglob("*") if p.is_file()}


@pytest.mark.parametrize("package,spec,key,value,message", ROWS,
                         ids=[f"{r[0]}-{r[2]}" for r in ROWS])
def test_bad_value_fails_before_training_naming_the_key(package, spec, key, value, message,
                                                        tmp_path):
  default = importlib.import_module(f"jaxlib_papers.{package}.configs.default")
  train = importlib.import_module(f"jaxlib_papers.{package}.train")
  config = default.get_config(spec)
  node = config
  *groups, leaf = key.split(".")
  for group in groups:
    node = node[group]
  node[leaf] = value
  before = _earlier_run(tmp_path)
  with pytest.raises(ValueError) as info:
    train.run(config, tmp_path)
  assert message in str(info.value), str(info.value)
  after = {p: p.read_bytes() for p in tmp_path.rglob("*") if p.is_file()}
  assert after == before


def test_a_binary_file_given_as_the_ruot_csv_names_the_file(tmp_path):
  from jaxlib_papers.ruot import data  # pylint: disable=g-import-not-at-top
  path = tmp_path / "cells.csv"
  path.write_bytes(b"samples,x1\n0,\xff\xfe\x00\x01\n")
  with pytest.raises(ValueError, match=r"cells.csv: not a UTF-8 text CSV"):
    data.load_csv(path)


def test_fsbm_keypoints_with_a_nan_name_the_file_and_the_position(tmp_path):
  import numpy as np  # pylint: disable=g-import-not-at-top

  from jaxlib_papers.fsbm import tasks  # pylint: disable=g-import-not-at-top
  keypoints = np.zeros((4, 5, 2), np.float32)
  keypoints[2, 3, 1] = np.nan
  path = tmp_path / "kp.npy"
  np.save(path, keypoints)
  with pytest.raises(ValueError, match=r"kp.npy': 1 NaN/Inf value\(s\), the first at "
                                       r"keypoint 2, time 3, dimension 1"):
    tasks.load_keypoints(path)


def test_ocm_user_samples_name_the_file_and_the_fault(tmp_path):
  import numpy as np  # pylint: disable=g-import-not-at-top

  from jaxlib_papers.ocm import data  # pylint: disable=g-import-not-at-top
  points = np.zeros((10, 3), np.float32)
  points[4, 2] = np.inf
  np.save(tmp_path / "points.npy", points)
  with pytest.raises(ValueError, match=r"points.npy: the sample at index \(4, 2\) is inf"):
    data.load_samples(tmp_path / "points.npy")
  np.save(tmp_path / "pixels.npy", np.full((8, 4, 4, 1), 255.0))
  with pytest.raises(ValueError, match=r"pixels.npy: images must be scaled to \[-1, 1\]"):
    data.load_samples(tmp_path / "pixels.npy")
  with pytest.raises(ValueError, match=r"expected \[N, D\] vectors or \[N, H, W, C\]"):
    data.check_samples(np.zeros((10, 2, 2)))
