"""Readouts and metrics of AERCA and its baselines (host side, numpy / scipy / sklearn).

* Granger graph: A_ij = max_k median_t |Psi_{t,k,i,j}| per normal test series; AUROC and
  AUPRC on the off-diagonal entries against the true graph.
* Root causes: z_{t,j} = -(s_{t,j} - mu_j) / sigma_j (mu the median, sigma the std of s_j
  on the validation series); at each labelled anomalous step rank the variables by
  descending z. AC@k = |top_k cap R| / min(k, |R|), Avg@k = mean_{k' <= k} AC@k',
  averaged over anomalous steps, then series.
* AC*@k: per variable a POT threshold (peaks over the ``level`` quantile, generalised
  Pareto fit by maximum likelihood with scipy, risk q) on the z-scores of all test series;
  z below its threshold counts 0; all (t, j) of a series are ranked together.
* Baselines: a ridge VAR(K) fitted on the training series (its residuals as s, max_k |A_k|
  as its graph), raw-value z-scores (x - median) / std, and a random ranking.
"""

from __future__ import annotations

import math

import numpy as np
from scipy import stats
from sklearn import metrics as sk_metrics


def granger_graph(coeffs: np.ndarray) -> np.ndarray:
  """coeffs [..., N, K, p, p] -> [..., p, p] = max_k median_t |Psi|."""
  return np.max(np.median(np.abs(np.asarray(coeffs)), axis=-4), axis=-3)


def graph_scores(estimate: np.ndarray, truth: np.ndarray) -> tuple[float, float]:
  """(AUROC, AUPRC) of ``estimate`` [p, p] against the 0/1 ``truth`` off the diagonal."""
  truth = np.asarray(truth)
  off = ~np.eye(truth.shape[0], dtype=bool)
  y, score = truth[off].astype(int), np.asarray(estimate)[off]
  if y.min() == y.max():
    return float("nan"), float("nan")
  return (float(sk_metrics.roc_auc_score(y, score)),
          float(sk_metrics.average_precision_score(y, score)))


def zscores(residuals: np.ndarray, mu: np.ndarray, sigma: np.ndarray) -> np.ndarray:
  """Signed scores -(s - mu) / sigma (a positive shift of x makes s = y - x negative)."""
  return -(np.asarray(residuals) - mu) / np.maximum(sigma, 1e-12)


def residual_stats(residuals: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
  """(median [p], std [p]) over every row of residuals [..., p]."""
  flat = np.asarray(residuals).reshape(-1, np.shape(residuals)[-1])
  return np.median(flat, axis=0), np.std(flat, axis=0)


def topk_at_steps(scores: np.ndarray, labels: np.ndarray, max_k: int = 10) -> np.ndarray:
  """AC@k, k = 1..max_k, per labelled step of one series.

  Args:
    scores: [T', p] (higher = more likely a root cause).
    labels: [T', p] bool, aligned with ``scores``.

  Returns:
    [num_anomalous_steps, max_k].
  """
  scores, labels = np.asarray(scores), np.asarray(labels).astype(bool)
  rows = np.flatnonzero(labels.any(axis=1))
  out = np.zeros((len(rows), max_k))
  for r, t in enumerate(rows):
    order = np.argsort(-scores[t], kind="stable")
    hits = np.cumsum(labels[t][order])
    num_roots = hits[-1]
    for k in range(1, max_k + 1):
      out[r, k - 1] = hits[min(k, len(hits)) - 1] / min(k, num_roots)
  return out


def rca_metrics(scores: np.ndarray, labels: np.ndarray, max_k: int = 10) -> dict:
  """AC@k and Avg@k (k = 1..max_k) averaged over anomalous steps, then series.

  Args:
    scores: [n, T', p]; labels: [n, T', p] bool, aligned.
  """
  per_series = []
  for s, lab in zip(scores, labels):
    steps = topk_at_steps(s, lab, max_k)
    if len(steps):
      per_series.append(steps.mean(0))
  if not per_series:
    raise ValueError("labels contain no anomalous step")
  ac = np.mean(per_series, axis=0)
  avg = np.cumsum(ac) / np.arange(1, max_k + 1)
  return {"ac": ac.tolist(), "avg": avg.tolist()}


def epsilon_diagnosis_scores(series: np.ndarray, window: int = 10) -> np.ndarray:
  """epsilon-Diagnosis (Shan et al., WWW 2019), the paper's baseline, per step and variable.

  A variable that changed at step t has lost its similarity between the ``window`` samples
  before t and the ``window`` samples from t on: the score is 1 - rho^2, rho the Pearson
  correlation of the two windows paired sample by sample (the two-sample similarity the
  method thresholds). Windows are cut to m = min(window, t, T - t) samples; steps with
  m < 3, or a constant window, score 0.

  Args:
    series: [n, T, p] observed values.
    window: samples on each side.

  Returns:
    [n, T, p] scores (higher = more likely a root cause).
  """
  x = np.asarray(series, np.float64)
  n, length, p = x.shape
  out = np.zeros((n, length, p))
  for t in range(length):
    m = min(window, t, length - t)
    if m < 3:
      continue
    a = x[:, t - m:t] - x[:, t - m:t].mean(axis=1, keepdims=True)
    b = x[:, t:t + m] - x[:, t:t + m].mean(axis=1, keepdims=True)
    va, vb = (a * a).sum(axis=1), (b * b).sum(axis=1)
    ok = (va > 0) & (vb > 0)
    cov = (a * b).sum(axis=1)
    out[:, t] = np.where(ok, 1.0 - cov ** 2 / np.where(ok, va * vb, 1.0), 0.0)
  return out


def pot_threshold(values: np.ndarray, risk: float = 1e-2, level: float = 0.98) -> float:
  """Peaks-over-threshold (SPOT's initial batch): the 1 - risk quantile of ``values``.

  t = the ``level`` quantile; peaks y = v - t for v > t are fitted by a generalised
  Pareto (shape g, scale sigma; scipy maximum likelihood, location 0) and
  z = t + sigma / g ((q n / n_t)^(-g) - 1) (t - sigma log(q n / n_t) when g = 0).
  """
  values = np.sort(np.asarray(values, np.float64).ravel())
  if not 0 < risk < 1 or not 0 < level < 1:
    raise ValueError(f"risk and level must be in (0, 1); got {risk}, {level}")
  t = values[int(level * values.size)]
  peaks = values[values > t] - t
  if peaks.size < 3:
    return float(t)
  shape, _, scale = stats.genpareto.fit(peaks, floc=0.0)
  ratio = risk * values.size / peaks.size
  if abs(shape) < 1e-8:
    return float(t - scale * math.log(ratio))
  return float(t + scale / shape * (ratio ** (-shape) - 1.0))


def ac_star(scores: np.ndarray, labels: np.ndarray, thresholds: np.ndarray,
            ks=(1, 10, 100, 500)) -> dict:
  """AC*@k: all (t, j) of a series ranked together, z below its POT threshold set to 0.

  Args:
    scores: [n, T', p]; labels: [n, T', p]; thresholds: [p].
  """
  scores, labels = np.asarray(scores), np.asarray(labels).astype(bool)
  kept = np.where(scores > thresholds, scores, 0.0)
  out = {k: [] for k in ks}
  for s, lab in zip(kept, labels):
    order = np.argsort(-s.ravel(), kind="stable")
    hits = np.cumsum(lab.ravel()[order])
    total = hits[-1]
    if total == 0:
      continue
    for k in ks:
      out[k].append(hits[min(k, hits.size) - 1] / min(k, total))
  return {int(k): float(np.mean(v)) for k, v in out.items()}


def random_expected_ac(num_vars: int, num_roots: int, k: int) -> float:
  """E[AC@k] of a uniformly random ranking: k |R| / (p min(k, |R|)) for k <= p."""
  k = min(k, num_vars)
  return k * num_roots / (num_vars * min(k, num_roots))


# ------------------------------------------------------------------------- baselines

def _flat_windows(series: np.ndarray, lag: int) -> tuple[np.ndarray, np.ndarray]:
  """series [n, T, p] -> (inputs [n (T-K), K p + 1], targets [n (T-K), p])."""
  n, length, p = series.shape
  wins = np.stack([series[:, k:length - lag + k] for k in range(lag)], axis=2)
  inputs = wins.reshape(n * (length - lag), lag * p)
  inputs = np.concatenate([inputs, np.ones((inputs.shape[0], 1))], axis=1)
  return inputs, series[:, lag:].reshape(-1, p)


def fit_var(series: np.ndarray, lag: int, ridge: float = 1e-3
            ) -> tuple[np.ndarray, np.ndarray]:
  """Ridge VAR(K) with intercept on series [n, T, p].

  Returns:
    (coef [K, p, p] with coef[k, i, j] the weight of x_j at slot k (slot 0 the oldest lag)
    on target i, intercept [p]).
  """
  series = np.asarray(series, np.float64)
  p = series.shape[2]
  inputs, targets = _flat_windows(series, lag)
  gram = inputs.T @ inputs + ridge * inputs.shape[0] * np.eye(inputs.shape[1])
  weights = np.linalg.solve(gram, inputs.T @ targets)      # [K p + 1, p]
  coef = weights[:-1].reshape(lag, p, p).transpose(0, 2, 1)
  return coef, weights[-1]


def var_residuals(coef: np.ndarray, intercept: np.ndarray, series: np.ndarray) -> np.ndarray:
  """s = prediction - x for series [n, T, p] -> [n, T-K, p] (AERCA's sign)."""
  series = np.asarray(series, np.float64)
  lag, p = coef.shape[0], coef.shape[1]
  inputs, targets = _flat_windows(series, lag)
  weights = np.concatenate([coef.transpose(0, 2, 1).reshape(lag * p, p), intercept[None]])
  pred = inputs @ weights
  return (pred - targets).reshape(series.shape[0], -1, p)


def var_graph(coef: np.ndarray) -> np.ndarray:
  """[p, p] = max_k |A_k|."""
  return np.max(np.abs(coef), axis=0)
