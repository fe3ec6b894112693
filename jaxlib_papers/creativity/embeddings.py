"""A generated word-embedding table for the near-verbatim rule on CPU.

The official code uses Llama-3-8B-Instruct's input embeddings (a [128k, 4096] table). Any
``[V, d]`` array of unit rows can be passed to ``kernel.soft_match``; this one needs no
download: a word's vector is the sum of N(0, 1) vectors seeded by the hashes of its
character trigrams (of ``#word#``), L2-normalised, so spelling variants are close
(cos(dream, dreame) ~ .7) and unrelated words near orthogonal (cos(king, queen) ~ 0).
"""

from __future__ import annotations

import zlib
from collections.abc import Sequence

import numpy as np


def trigram_vector(word: str, dim: int = 256, seed: int = 0) -> np.ndarray:
  """[dim] float32 unit vector of ``word``."""
  padded = f"#{word}#"
  total = np.zeros(dim, np.float64)
  for i in range(max(len(padded) - 2, 1)):
    key = zlib.crc32(padded[i:i + 3].encode()) ^ (seed * 0x9E3779B1 & 0xFFFFFFFF)
    total += np.random.default_rng(key).standard_normal(dim)
  return (total / np.linalg.norm(total)).astype(np.float32)


def table(words: Sequence[str], dim: int = 256, seed: int = 0) -> np.ndarray:
  """[V, dim] unit rows for a vocabulary listed by id."""
  if not len(words):
    raise ValueError("words: expected a non-empty vocabulary")
  return np.stack([trigram_vector(w, dim, seed) for w in words])
