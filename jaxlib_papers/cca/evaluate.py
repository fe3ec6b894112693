"""Sample quality on digits: classifiers trained on the real training split.

* conditional accuracy: an RBF SVC's prediction equals the requested label;
* digit-IS: exp E_x KL(p(y|x) || p(y)) with an MLP classifier's probabilities (<= 10);
* Fréchet distance to held-out digits in the MLP's hidden-layer feature space;
* k-NN precision / recall (Kynkäänniemi et al.) in the same space;
* diversity: mean within-class pairwise distance of samples / that of held-out digits;
* copies: share of samples identical (token for token) to a training image.
"""

from __future__ import annotations

import numpy as np
import scipy.spatial

from jaxlib_papers.cca import data as data_lib


def frechet_distance(x: np.ndarray, y: np.ndarray) -> float:
  """||mu_x - mu_y||^2 + tr(C_x + C_y - 2 (C_x C_y)^{1/2}) for features [n, d], [m, d]."""
  mu_x, mu_y = x.mean(0), y.mean(0)
  cov_x, cov_y = np.cov(x, rowvar=False), np.cov(y, rowvar=False)
  # tr (C_x C_y)^{1/2} = sum sqrt(eig(C_x^{1/2} C_y C_x^{1/2})), symmetric and PSD, so eigh
  # stays real and stable when a covariance is singular (few samples, dead ReLU features).
  w, v = np.linalg.eigh(cov_x)
  half = (v * np.sqrt(np.clip(w, 0.0, None))) @ v.T
  middle = np.linalg.eigvalsh(half @ cov_y @ half)
  trace_root = np.sum(np.sqrt(np.clip(middle, 0.0, None)))
  return float(np.sum((mu_x - mu_y) ** 2) + np.trace(cov_x) + np.trace(cov_y) - 2 * trace_root)


def _knn_radii(features: np.ndarray, k: int) -> np.ndarray:
  d = scipy.spatial.distance.cdist(features, features)
  return np.sort(d, axis=1)[:, k]    # column 0 is the point itself


def precision_recall(real: np.ndarray, fake: np.ndarray, k: int = 3) -> tuple[float, float]:
  """Share of fake inside the real k-NN balls (precision) and of real inside fake's (recall)."""
  real_radii, fake_radii = _knn_radii(real, k), _knn_radii(fake, k)
  d = scipy.spatial.distance.cdist(fake, real)                  # [n_fake, n_real]
  precision = np.mean(np.any(d <= real_radii[None], axis=1))
  recall = np.mean(np.any(d.T <= fake_radii[None], axis=1))
  return float(precision), float(recall)


def mean_within_class_distance(images: np.ndarray, labels: np.ndarray) -> float:
  """Mean over classes of the mean pairwise L2 distance within the class."""
  out = []
  for c in np.unique(labels):
    x = images[labels == c]
    if len(x) < 2:
      continue
    d = scipy.spatial.distance.pdist(x)
    out.append(d.mean())
  return float(np.mean(out))


class Evaluator:
  """Classifiers and reference statistics fit once on the real digits.

  Args:
    digits: :class:`data.Digits`.
    seed: seed of the MLP classifier.
  """

  def __init__(self, digits: data_lib.Digits, seed: int = 0):
    from sklearn.neural_network import MLPClassifier  # pylint: disable=g-import-not-at-top
    from sklearn.svm import SVC  # pylint: disable=g-import-not-at-top
    self.digits = digits
    x_train = data_lib.images(digits, digits.train_tokens) / 16.0
    x_test = data_lib.images(digits, digits.test_tokens) / 16.0
    self.svc = SVC(C=10.0, gamma="scale").fit(x_train, digits.train_labels)
    self.mlp = MLPClassifier((64,), max_iter=400, random_state=seed, alpha=1e-3)
    self.mlp.fit(x_train, digits.train_labels)
    self.svc_test_accuracy = float(np.mean(self.svc.predict(x_test) == digits.test_labels))
    self.mlp_test_accuracy = float(np.mean(self.mlp.predict(x_test) == digits.test_labels))
    self.real_features = self.features(x_test)
    self.real_diversity = mean_within_class_distance(x_test, digits.test_labels)
    self.train_set = {row.tobytes() for row in np.asarray(digits.train_tokens, np.int32)}
    self.test_x, self.test_labels = x_test, digits.test_labels

  def features(self, x: np.ndarray) -> np.ndarray:
    """The MLP's hidden layer (ReLU) for images [n, 64] in [0, 1]."""
    return np.maximum(x @ self.mlp.coefs_[0] + self.mlp.intercepts_[0], 0.0)

  def __call__(self, tokens: np.ndarray, labels: np.ndarray) -> dict[str, float]:
    """Metrics of samples tokens [n, L] generated for labels [n]."""
    tokens = np.asarray(tokens, np.int32)
    labels = np.asarray(labels)
    x = data_lib.images(self.digits, tokens) / 16.0
    accuracy = float(np.mean(self.svc.predict(x) == labels))
    probs = np.clip(self.mlp.predict_proba(x), 1e-12, 1.0)
    marginal = probs.mean(0, keepdims=True)
    inception = float(np.exp(np.mean(np.sum(probs * (np.log(probs) - np.log(marginal)), 1))))
    feats = self.features(x)
    precision, recall = precision_recall(self.real_features, feats)
    copies = float(np.mean([row.tobytes() in self.train_set for row in tokens]))
    return {
        "accuracy": 100.0 * accuracy,
        "is": inception,
        "fd": frechet_distance(feats, self.real_features),
        "precision": precision,
        "recall": recall,
        "diversity": mean_within_class_distance(x, labels) / self.real_diversity,
        "copies": copies,
    }

  def real_reference(self) -> dict[str, float]:
    """The same metrics for the held-out real digits (the ceiling)."""
    x = self.test_x
    probs = np.clip(self.mlp.predict_proba(x), 1e-12, 1.0)
    marginal = probs.mean(0, keepdims=True)
    return {"accuracy": 100.0 * self.svc_test_accuracy,
            "is": float(np.exp(np.mean(np.sum(probs * (np.log(probs) - np.log(marginal)), 1)))),
            "diversity": 1.0}
