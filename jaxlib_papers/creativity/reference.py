"""Brute-force references in plain Python (sets of n-grams): what the kernel must equal.

Used by the reproduction check's exactness claim and by the tests; slow (O(N W) memory).
"""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np


def ngram_set(documents: Sequence[Sequence[int]], max_len: int) -> set[tuple[int, ...]]:
  """Every contiguous n-gram (1 <= n <= max_len) inside one document."""
  grams = set()
  for doc in documents:
    doc = list(map(int, doc))
    for i in range(len(doc)):
      for j in range(i + 1, min(len(doc), i + max_len) + 1):
        grams.add(tuple(doc[i:j]))
  return grams


def matches(grams: set, text: Sequence[int], width: int) -> np.ndarray:
  """[n] the longest prefix (<= width) of text[l:] that is in ``grams``."""
  text = list(map(int, text))
  out = np.zeros(len(text), np.int32)
  for l in range(len(text)):
    for k in range(1, min(width, len(text) - l) + 1):
      if tuple(text[l:l + k]) not in grams:
        break
      out[l] = k
  return out


def coverage(grams: set, text: Sequence[int], ngram: int) -> float:
  """Fraction of words inside some length-``ngram`` window that is in ``grams``."""
  text = list(map(int, text))
  covered = np.zeros(len(text), bool)
  for l in range(len(text) - ngram + 1):
    if tuple(text[l:l + ngram]) in grams:
      covered[l:l + ngram] = True
  return float(covered.mean()) if len(text) else 0.0


def dj_search(grams: set, text: Sequence[int], min_ngram: int) -> list[tuple[int, int]]:
  """DJ SEARCH's loop as the official code runs it, with the corpus query "w[f:s] occurs"
  answered by the n-gram set (which must hold n-grams up to len(text))."""
  text = list(map(int, text))
  first, second, spans = 0, min_ngram, []
  while second <= len(text):
    if tuple(text[first:second]) in grams:
      if spans and first <= spans[-1][0] and second >= spans[-1][1]:
        spans[-1] = (first, second)
      else:
        spans.append((first, second))
      second += 1
    elif second - first > min_ngram:
      first += 1
    else:
      first += 1
      second += 1
  return spans


def auroc(positive: Sequence[float], negative: Sequence[float]) -> float:
  """P(a positive scores above a negative) + P(tie) / 2 (the Mann-Whitney AUROC)."""
  pos, neg = np.asarray(positive, np.float64), np.asarray(negative, np.float64)
  greater = (pos[:, None] > neg[None, :]).mean()
  ties = (pos[:, None] == neg[None, :]).mean()
  return float(greater + 0.5 * ties)
