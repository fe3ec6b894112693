"""Host-side (numpy) copyright metrics: longest common substring in tokens and characters.

The paper's "EM" is the longest common substring (contiguous) between a generation and the
protected text, in characters; ours is reported in tokens (the natural unit of a word-level
vocabulary) and in characters of the detokenised text for comparison.
"""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np


def lcs_length(a: Sequence, b: Sequence) -> int:
  """Longest common (contiguous) substring of two sequences: O(len a * len b)."""
  return int(lcs_with_set(np.asarray(a), np.asarray(b)[None]).max(initial=0))


def lcs_with_set(query: np.ndarray, references: np.ndarray) -> np.ndarray:
  """Longest common substring of ``query`` with each reference.

  Args:
    query: [n] int (tokens or character codes).
    references: [R, m] int (rows of equal length).

  Returns:
    [R] int64.
  """
  query = np.asarray(query)
  references = np.atleast_2d(np.asarray(references))
  num_refs, m = references.shape
  prev = np.zeros((num_refs, m + 1), np.int64)
  best = np.zeros(num_refs, np.int64)
  for symbol in query:
    cur = np.zeros_like(prev)
    cur[:, 1:] = np.where(references == symbol, prev[:, :-1] + 1, 0)
    best = np.maximum(best, cur.max(axis=1))
    prev = cur
  return best


def lcs_matrix(generations: np.ndarray, references: np.ndarray) -> np.ndarray:
  """[G, R] token LCS of every generation [G, n] with every reference [R, m]."""
  return np.stack([lcs_with_set(g, references) for g in np.asarray(generations)])


def _codes(text: str, width: int) -> np.ndarray:
  codes = np.full(width, -1, np.int64)
  raw = np.frombuffer(text.encode("utf-32-le"), np.uint32).astype(np.int64)
  codes[:raw.shape[0]] = raw
  return codes


def char_lcs_matrix(generations: Sequence[str], references: Sequence[str]) -> np.ndarray:
  """[G, R] character LCS (references padded with -1, which matches nothing)."""
  width = max(len(r) for r in references)
  refs = np.stack([_codes(r, width) for r in references])
  return np.stack([lcs_with_set(_codes(g, len(g)), refs) for g in generations])


def longest_match_span(generation: np.ndarray, reference: np.ndarray) -> tuple[int, int]:
  """(start, length) in ``generation`` of its longest common substring with ``reference``."""
  generation, reference = np.asarray(generation), np.asarray(reference)
  best = (0, 0)
  prev = np.zeros(reference.shape[0] + 1, np.int64)
  for i, symbol in enumerate(generation):
    cur = np.zeros_like(prev)
    cur[1:] = np.where(reference == symbol, prev[:-1] + 1, 0)
    length = int(cur.max())
    if length > best[1]:
      best = (i - length + 1, length)
    prev = cur
  return best


def summary(values: np.ndarray) -> dict[str, float]:
  """Median, 95th percentile, mean and max of a set of LCS values."""
  values = np.asarray(values, np.float64)
  return {"median": float(np.median(values)), "p95": float(np.percentile(values, 95)),
          "mean": float(values.mean()), "max": float(values.max())}
