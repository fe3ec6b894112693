"""The splitter and the experiment's pieces: indices partition the data, a precomputed
similarity gives the fingerprints' split, baselines and models against brute force, and
bad input fails before any optimisation, naming the argument."""

import numpy as np
import pytest

from jaxlib_papers.sae_split import data, evaluate, kernel, splitter, train
from jaxlib_papers.sae_split.configs import default

FAST = kernel.Settings(lam=0.02, lr=0.1, dual_lr=0.1, iterations=100, log_every=50)


@pytest.fixture(scope="module")
def generated():
  return data.generated(60, seed=1, num_families=8, num_bits=256)


@pytest.fixture(scope="module")
def splits(generated):
  split = splitter.SimilarityHistogramSplit(bins=(0.0, 0.5, 1.0), test_size=0.25,
                                            n_splits=2, solver=FAST, neighbours=0)
  return split, list(split.split(generated.fingerprints))


def test_split_indices_partition_the_data(splits):
  split, pairs = splits
  assert split.get_n_splits() == 2 and len(pairs) == 2
  for (train_index, test_index), result in zip(pairs, split.results_):
    assert len(test_index) == 60 - int(0.75 * 60)
    np.testing.assert_array_equal(np.sort(np.r_[train_index, test_index]), np.arange(60))
    assert sum(result.counts) == len(test_index) and result.table_exact


def test_precomputed_similarity_gives_the_same_split(generated, splits):
  _, pairs = splits
  s = np.asarray(kernel.tanimoto(generated.fingerprints, generated.fingerprints))
  split = splitter.SimilarityHistogramSplit(bins=(0.0, 0.5, 1.0), test_size=0.25,
                                            solver=FAST, neighbours=0, metric="precomputed")
  (train_index, test_index), = list(split.split(s))
  np.testing.assert_array_equal(test_index, pairs[0][1])
  result = split.results_[0]
  brute = np.where(np.eye(60, dtype=bool), -1, s)[np.ix_(result.test, ~result.test)].max(1)
  np.testing.assert_allclose(result.readout, brute, atol=1e-7)


def test_exact_readout_baselines_and_models_against_brute_force(generated):
  x, y = generated.fingerprints, generated.labels
  test = evaluate.random_split(60, 0.2, 0)
  s = np.asarray(kernel.tanimoto(x, x), np.float64)
  np.testing.assert_allclose(evaluate.max_similarity_to_train(x, test, block=16),
                             s[np.ix_(test, ~test)].max(1), atol=1e-7)
  sim = s[np.ix_(test, ~test)]
  top = np.argsort(-sim, 1, kind="stable")[:, :3]
  w = np.take_along_axis(sim, top, 1) + 1e-8
  expected = (w * y[~test][top]).sum(1) / w.sum(1)
  np.testing.assert_allclose(evaluate.knn_predict(x, y, test, 3, block=16), expected,
                             rtol=1e-5)
  xc = x[~test] - x[~test].mean(0)
  coef = np.linalg.lstsq(np.r_[xc, np.eye(256)], np.r_[y[~test] - y[~test].mean(),
                                                       np.zeros(256)], rcond=None)[0]
  np.testing.assert_allclose(evaluate.ridge_predict(x[~test], y[~test], x[test], 1.0),
                             (x[test] - x[~test].mean(0)) @ coef + y[~test].mean(),
                             rtol=1e-6)
  groups = ["c"] * 6 + ["a"] * 38 + ["b"] * 10 + ["d"] * 6
  # largest first into train while it fits (48 of 60): a, then b; c and d (tied at 6,
  # c first seen) no longer fit
  assert evaluate.group_split(groups, 0.2).tolist() == [True] * 6 + [False] * 48 + [True] * 6


def test_butina_clusters_cover_every_molecule_within_the_cutoff(generated):
  clusters = evaluate.butina_clusters(generated.fingerprints, 0.6)
  s = np.asarray(kernel.tanimoto(generated.fingerprints, generated.fingerprints))
  assert clusters.shape == (60,) and clusters.min() == 0
  for c in np.unique(clusters):
    members = np.flatnonzero(clusters == c)
    # a Butina cluster is a centroid and members within the cutoff of it
    assert np.any(np.all(1 - s[np.ix_(members, members)] <= 0.6 + 1e-6, axis=1))


@pytest.mark.parametrize("kwargs, words", [
    (dict(weights=(0.5, 0.6, 0.1)), "weights: expected non-negative weights that sum to 1"),
    (dict(bins=(0.0, 0.5, 1.2), weights=(0.5, 0.5)), r"bins: every edge must lie in \[0, 1\]"),
    (dict(test_size=1.0), r"test_size: expected a fraction in \(0, 1\), got 1.0"),
    (dict(test_size=0.0), r"test_size: expected a fraction in \(0, 1\), got 0.0"),
    (dict(weights=(0.5, 0.5)), "weights: expected 3 weights"),
])
def test_bad_target_fails_at_construction(kwargs, words):
  with pytest.raises(ValueError, match=words):
    splitter.SimilarityHistogramSplit(**kwargs)


def test_bad_similarity_matrix_fails_before_optimising():
  split = splitter.SimilarityHistogramSplit(metric="precomputed", solver=FAST)
  with pytest.raises(ValueError, match=r"square \[N, N\] matrix .* got shape \(5, 4\)"):
    next(split.split(np.zeros((5, 4))))
  s = np.full((5, 5), 0.3)
  s[0, 1] = 0.9
  with pytest.raises(ValueError, match=r"must be symmetric \(max \|S - S\^T\| = 0.6\)"):
    next(split.split(s))
  with pytest.raises(ValueError, match=r"X: expected 0/1 fingerprint bits"):
    next(splitter.SimilarityHistogramSplit(solver=FAST).split(np.full((5, 8), 0.5)))


def test_unparsable_smiles_is_named_with_its_row(tmp_path):
  with pytest.raises(ValueError, match=r"smiles: row 2 \('C1CC\(' \) is not a parsable SMILES"
                     .replace(" \\)", "\\)")):
    data.fingerprints(["CCO", "c1ccccc1", "C1CC(", "CCN"])
  path = tmp_path / "set.csv"
  path.write_text("CCO,5.0\nCCN,abc\n")
  with pytest.raises(ValueError, match=r"set.csv: row 1: affinity 'abc' is not a finite"):
    data.read_csv(path)


def test_config_with_bad_target_fails_before_reading_data():
  config = default.get_config("smoke")
  config.target.edges = (0.0, 0.5, 1.5)
  with pytest.raises(ValueError, match=r"config.target.edges = \(0.0, 0.5, 1.5\): expected "
                                       r"increasing bin edges in \[0, 1\]"):
    train.run(config)
  config = default.get_config("smoke")
  config.target.weights = (0.2, 0.2, 0.2)
  with pytest.raises(ValueError, match="config.target.weights .* sum to 1"):
    train.run(config)


@pytest.mark.parametrize("seed", [0, 1])
def test_generated_stand_in_has_egfr_similarity_profile(seed):
  # EGFR (measured): 1.4% of molecules have no neighbour at Tanimoto >= 1/3 and 9.8% fewer
  # than 10 such neighbours; a random split's test set holds 1.9 / 11 / 87% in the bins
  # [0, 1/3), [1/3, 2/3), [2/3, 1]. The old stand-in (8% singletons) failed the first bound.
  d = data.generated(2000, seed=seed)
  s = np.asarray(kernel.tanimoto(d.fingerprints, d.fingerprints), np.float64)
  np.fill_diagonal(s, 0.0)
  kth = -np.sort(-s, axis=1)[:, :10]
  assert 0.005 <= np.mean(kth[:, 0] < 1 / 3) <= 0.03
  assert 0.06 <= np.mean(kth[:, 9] < 1 / 3) <= 0.16
  test = evaluate.random_split(2000, 0.2, seed)
  counts = evaluate.counts(evaluate.max_similarity_to_train(d.fingerprints, test),
                           np.array([0.0, 1 / 3, 2 / 3, 1.0]))
  low, _, top = counts / counts.sum()
  assert low <= 0.04 and 0.83 <= top <= 0.95


def test_generated_sets_get_their_own_solver_budget(monkeypatch):
  config = default.get_config("smoke")
  config.data.generated_iterations, config.data.generated_seeds = 300, 3
  settings = train.settings_from_config(config)
  seen = []

  def stop(fingerprints, *, settings, num_seeds, **_):
    seen.append((settings.iterations, num_seeds))
    raise RuntimeError("stop")

  monkeypatch.setattr(splitter, "optimise_split", stop)
  d = data.generated(60, seed=1, num_families=8, num_bits=256)
  for source in (d.source, "shared: sae_split/IC50_EGFR.csv"):
    with pytest.raises(RuntimeError, match="stop"):
      train.run_set(d._replace(source=source), settings, log=lambda _: None)
  assert seen == [(300, 3), (config.solver.iterations, config.solver.num_seeds)]
