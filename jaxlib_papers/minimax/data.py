"""Data of the fairness experiment: a validated libsvm reader and a generated stand-in.

The paper's small data set is ``heart_scale`` (270 patients, 13 features scaled to [-1, 1],
labels +-1). Feature 2 (sex, +-1) is the sensitive attribute c; the remaining 12 features
are the classifier's inputs, as in the official experiment.
"""

from __future__ import annotations

import os
from typing import NamedTuple

import numpy as np


class FairnessData(NamedTuple):
  """features: [n, p]; labels: [n] in {-1,+1}; sensitive: [n] in {-1,+1}; source: str."""
  features: np.ndarray
  labels: np.ndarray
  sensitive: np.ndarray
  source: str


def read_libsvm(path: str | os.PathLike, num_features: int | None = None
                ) -> tuple[np.ndarray, np.ndarray]:
  """Reads a libsvm/svmlight text file into dense arrays.

  Each line is ``label index:value index:value ...`` with 1-based, increasing indices;
  missing indices are 0.

  Args:
    path: the file.
    num_features: number of columns; default the largest index seen.

  Returns:
    (features [n, p] float64, labels [n] float64).

  Raises:
    ValueError: an empty file, a malformed line (named with its line number), a non-finite
      value, an index < 1 or above num_features.
  """
  labels, rows = [], []
  max_index = 0
  with open(path, encoding="utf-8") as handle:
    for line_number, line in enumerate(handle, start=1):
      line = line.split("#", 1)[0].strip()
      if not line:
        continue
      tokens = line.split()
      try:
        label = float(tokens[0])
        entries = {}
        for token in tokens[1:]:
          index_text, value_text = token.split(":")
          index, value = int(index_text), float(value_text)
          if index < 1:
            raise ValueError(f"feature index {index} < 1")
          if not np.isfinite(value):
            raise ValueError(f"non-finite value {value_text}")
          entries[index] = value
      except ValueError as error:
        raise ValueError(f"{path}:{line_number}: malformed libsvm line ({error})") from None
      if not np.isfinite(label):
        raise ValueError(f"{path}:{line_number}: non-finite label")
      labels.append(label)
      rows.append(entries)
      max_index = max([max_index, *entries])
  if not rows:
    raise ValueError(f"{path}: no data lines")
  p = max_index if num_features is None else int(num_features)
  if max_index > p:
    raise ValueError(f"{path}: feature index {max_index} exceeds num_features={p}")
  features = np.zeros((len(rows), p))
  for i, entries in enumerate(rows):
    for index, value in entries.items():
      features[i, index - 1] = value
  return features, np.asarray(labels)


def split_sensitive(features: np.ndarray, labels: np.ndarray, sensitive_column: int,
                    source: str) -> FairnessData:
  """Takes column ``sensitive_column`` (0-based) out as c (0 -> -1), the rest as a."""
  if not 0 <= sensitive_column < features.shape[1]:
    raise ValueError(
        f"sensitive_column must be in [0, {features.shape[1]}), got {sensitive_column}")
  sensitive = features[:, sensitive_column].copy()
  sensitive[sensitive == 0] = -1.0
  if not np.all(np.isin(sensitive, (-1.0, 1.0))):
    raise ValueError(f"column {sensitive_column} is not binary (+-1 or 0/1)")
  if not np.all(np.isin(labels, (-1.0, 1.0))):
    raise ValueError("labels must be +-1")
  rest = np.delete(features, sensitive_column, axis=1)
  return FairnessData(rest, labels.astype(np.float64), sensitive, source)


def load_heart(path: str | os.PathLike) -> FairnessData:
  """Loads ``heart_scale``: 270 x 13, c = feature 2 (sex), a = the other 12 features.

  Raises:
    ValueError: the file is not a 13-feature, +-1-labelled libsvm file.
  """
  features, labels = read_libsvm(path)
  if features.shape[1] != 13:
    raise ValueError(f"{path}: heart_scale has 13 features, found {features.shape[1]}")
  return split_sensitive(features, labels, 1, f"shared: {os.fspath(path)}")


def generated_fairness_data(num_samples: int = 270, num_features: int = 12,
                            seed: int = 0) -> FairnessData:
  """A generated data set of heart's shape (270 x 12 features + a +-1 sensitive column).

  Features are uniform in [-1, 1] (like heart's scaling); the label and the sensitive
  attribute both depend on a shared direction, so the adversary term is not trivial.

  Args:
    num_samples: n.
    num_features: p (classifier inputs, excluding the sensitive column).
    seed: NumPy seed.

  Returns:
    FairnessData with source "generated".
  """
  if num_samples < 2 or num_features < 1:
    raise ValueError(f"need num_samples >= 2 and num_features >= 1, got "
                     f"{num_samples}, {num_features}")
  rng = np.random.default_rng(seed)
  features = rng.uniform(-1.0, 1.0, size=(num_samples, num_features))
  direction = rng.normal(size=num_features)
  sensitive = np.where(rng.uniform(size=num_samples) < 0.5, -1.0, 1.0)
  logits = 2.0 * features @ direction / np.sqrt(num_features) + 0.8 * sensitive
  labels = np.where(rng.uniform(size=num_samples) < 1 / (1 + np.exp(-logits)), 1.0, -1.0)
  return FairnessData(features, labels, sensitive, "generated")
