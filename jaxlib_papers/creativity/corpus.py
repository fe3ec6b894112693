"""Corpus tooling: tokenize, build, save and load an index; score texts against it.

* :func:`tokenize` is the default word tokenizer (lowercased ``[a-z]+('[a-z]+)?`` words and
  single punctuation marks); any ``str -> list[str]`` callable can replace it, and an index
  over the user's own token ids (e.g. a sub-word tokenizer's) needs none.
* :class:`Vocabulary` maps words to ids; words a text has that the corpus lacks get fresh
  ids, which never match.
* :func:`build` makes a :class:`Index` (the kernel's suffix table plus its metadata) from
  token-id arrays; :func:`from_texts` from strings or text files; :func:`save` and
  :func:`load` write and read it as one ``.npz`` (checked on load).
* :func:`pad_texts` and :func:`score` run the kernel on a batch of texts, sharded over the
  devices' ``data`` axis when the batch divides evenly.

Every function checks what it is given (ids out of range, an empty corpus, a text shorter
than Lmin, a corrupt index file) and names the argument in its error.
"""

from __future__ import annotations

import os
import pathlib
import re
import zipfile
from collections.abc import Callable, Iterable, Sequence
from typing import NamedTuple

import jax
import jax.numpy as jnp
import numpy as np

from jaxlib_papers.core import distributed, precision
from jaxlib_papers.creativity import kernel

FORMAT = "jaxlib_papers.creativity.index/1"
_BUILD = jax.jit(kernel.build_index, static_argnums=(1, 2))
_WORD = re.compile(r"[a-z]+(?:'[a-z]+)?|[^\sa-z]")


def tokenize(text: str) -> list[str]:
  """Lowercased words (with inner apostrophes) and single non-space symbols."""
  return _WORD.findall(text.lower())


class Vocabulary:
  """Word <-> id. ``encode(words, grow=True)`` gives unseen words new ids."""

  def __init__(self, words: Iterable[str] = ()):
    self.ids: dict[str, int] = {}
    for w in words:
      self.ids.setdefault(w, len(self.ids))

  def __len__(self) -> int:
    return len(self.ids)

  def encode(self, words: Sequence[str], grow: bool = True) -> np.ndarray:
    """[len(words)] int32 ids; an unknown word gets a new id when ``grow`` (it then
    matches nothing in an index built before), else a ValueError names it."""
    out = np.empty(len(words), np.int32)
    for i, w in enumerate(words):
      if w not in self.ids:
        if not grow:
          raise ValueError(f"words: {w!r} is not in the vocabulary (pass grow=True)")
        self.ids[w] = len(self.ids)
      out[i] = self.ids[w]
    return out


class Index(NamedTuple):
  """A corpus index: the kernel's table and what it was built from."""
  table: kernel.SuffixIndex   # tokens [N + W], order [N]
  vocab_size: int             # ids in the corpus are in [0, vocab_size)
  num_documents: int


def _check_ids(name: str, ids: np.ndarray, vocab_size: int | None) -> None:
  if ids.ndim != 1 or not np.issubdtype(ids.dtype, np.integer):
    raise ValueError(f"{name}: expected a 1-D array of integer token ids, got "
                     f"{ids.dtype} of shape {ids.shape}")
  if ids.size and ids.min() < 0:
    raise ValueError(f"{name}: token ids must be >= 0 (got {int(ids.min())})")
  if vocab_size is not None and ids.size and ids.max() >= vocab_size:
    raise ValueError(f"{name}: token id {int(ids.max())} is out of range: expected ids in "
                     f"[0, vocab_size={vocab_size})")


def concatenate(documents: Sequence[np.ndarray], vocab_size: int | None = None
                ) -> np.ndarray:
  """[N] int32: SEP, doc 1, SEP, doc 2, ..., SEP (no match crosses a boundary)."""
  if not len(documents):
    raise ValueError("documents: the corpus is empty (expected at least one document)")
  parts = [np.array([kernel.SEP], np.int32)]
  for i, doc in enumerate(documents):
    doc = np.asarray(doc)
    _check_ids(f"documents[{i}]", doc, vocab_size)
    parts += [doc.astype(np.int32), np.array([kernel.SEP], np.int32)]
  corpus = np.concatenate(parts)
  if corpus.size == len(documents) + 1:
    raise ValueError("documents: every document is empty (expected some tokens)")
  return corpus


def build(documents: Sequence[np.ndarray], width: int, vocab_size: int | None = None
          ) -> Index:
  """The index of ``documents`` (token-id arrays) for n-grams up to ``width`` words.

  Raises:
    ValueError: no documents or no tokens, ids < 0 or >= ``vocab_size``, width < 1.
  """
  if int(width) < 1:
    raise ValueError(f"width: expected an integer >= 1 (the largest n-gram), got {width}")
  corpus = concatenate(documents, vocab_size)
  vocab_size = int(vocab_size) if vocab_size is not None else int(corpus.max()) + 1
  with precision.enable_x64():   # int64 sort keys: 4 ids per key, a faster sort
    table = _BUILD(corpus, int(width), vocab_size)
  return Index(table, vocab_size, len(documents))


def from_texts(texts: Sequence[str | os.PathLike], width: int,
               tokenizer: Callable[[str], list[str]] = tokenize,
               vocab: Vocabulary | None = None) -> tuple[Index, Vocabulary]:
  """An index over strings or text files (a ``pathlib.Path`` is read as UTF-8)."""
  vocab = vocab if vocab is not None else Vocabulary()
  docs = []
  for t in texts:
    text = pathlib.Path(t).read_text(encoding="utf-8") if isinstance(t, os.PathLike) else t
    docs.append(vocab.encode(tokenizer(text)))
  return build(docs, width, len(vocab)), vocab


def save(index: Index, path: str | os.PathLike) -> pathlib.Path:
  """Writes ``index`` as ``path`` (.npz, ~8 bytes per corpus token)."""
  path = pathlib.Path(path)
  np.savez(path, format=np.array(FORMAT), tokens=np.asarray(index.table.tokens),
           order=np.asarray(index.table.order), vocab_size=index.vocab_size,
           num_documents=index.num_documents)
  return path if path.suffix == ".npz" else path.with_name(path.name + ".npz")


def load(path: str | os.PathLike, verify: bool = True) -> Index:
  """Reads an index written by :func:`save`; ``verify`` also checks that ``order`` is a
  sorted permutation (O(N W)).

  Raises:
    ValueError: naming ``path`` when the file is not such an index or is corrupt.
  """
  try:
    with np.load(path, allow_pickle=False) as f:
      if str(f["format"]) != FORMAT:
        raise ValueError(f"format {str(f['format'])!r}")
      tokens, order = f["tokens"].astype(np.int32), f["order"].astype(np.int32)
      vocab_size, num_docs = int(f["vocab_size"]), int(f["num_documents"])
  except (OSError, KeyError, ValueError, zipfile.BadZipFile, EOFError) as e:
    raise ValueError(f"path {str(path)!r}: not a readable creativity index file ({FORMAT}): "
                     f"{e}") from e
  width = tokens.size - order.size
  problem = _table_problem(tokens, order, width, vocab_size) if verify else None
  if problem:
    raise ValueError(f"path {str(path)!r}: corrupt creativity index: {problem}")
  return Index(kernel.SuffixIndex(jnp.asarray(tokens), jnp.asarray(order)), vocab_size,
               num_docs)


def _table_problem(tokens, order, width, vocab_size) -> str | None:
  if width < 1 or order.size == 0:
    return f"expected N >= 1 positions and width >= 1, got N={order.size}, width={width}"
  if np.any(tokens[-width:] != kernel.SEP) or tokens.min() < kernel.SEP or (
      tokens.max() >= vocab_size):
    return "token ids out of range or the trailing separators missing"
  if not np.array_equal(np.sort(order), np.arange(order.size)):
    return "order is not a permutation of the corpus positions"
  rows = tokens[order[:, None] + np.arange(width)[None, :]]
  later = np.lexsort(rows.T[::-1])
  if not np.array_equal(rows[later], rows):
    return "order is not sorted by the next width ids"
  return None


def pad_texts(texts: Sequence[np.ndarray], index: Index, min_ngram: int,
              length: int | None = None) -> tuple[np.ndarray, np.ndarray]:
  """([B, n] int32 texts padded with PAD, [B] lengths), checked.

  Raises:
    ValueError: an empty batch, a text that is not 1-D integer ids >= 0, or shorter than
      ``min_ngram`` (the official code drops those; here the caller decides).
  """
  if not len(texts):
    raise ValueError("texts: expected at least one text")
  arrays = [np.asarray(t) for t in texts]
  for i, t in enumerate(arrays):
    _check_ids(f"texts[{i}]", t, None)
    if t.size < min_ngram:
      raise ValueError(f"texts[{i}]: {t.size} tokens, shorter than min_ngram={min_ngram} "
                       "(expected at least Lmin tokens)")
  lengths = np.array([t.size for t in arrays], np.int32)
  n = int(length or lengths.max())
  out = np.full((len(arrays), n), kernel.PAD, np.int32)
  for i, t in enumerate(arrays):
    out[i, :min(t.size, n)] = t[:n]
  return out, np.minimum(lengths, n)


def score_program(spec: kernel.IndexSpec):
  """``jit(score_texts)`` for ``spec``: ``program(table, texts [B, n], lengths [B])``."""
  return jax.jit(lambda table, texts, lengths: kernel.score_texts(table, texts, lengths,
                                                                  spec))


def check_spec(spec: kernel.IndexSpec, index: Index) -> None:
  if not 1 <= spec.min_ngram <= spec.max_ngram:
    raise ValueError(f"spec: expected 1 <= min_ngram <= max_ngram, got {spec}")
  if spec.max_ngram > index.table.width:
    raise ValueError(f"spec.max_ngram = {spec.max_ngram}: above the index width "
                     f"{index.table.width} (rebuild the index with width >= max_ngram)")
  if spec.reduce not in kernel.REDUCTIONS:
    raise ValueError(f"spec.reduce = {spec.reduce!r}: expected one of {kernel.REDUCTIONS}")


def score(index: Index, texts: Sequence[np.ndarray], spec: kernel.IndexSpec,
          program=None) -> kernel.Scores:
  """Scores a batch of token-id texts (sharded over the devices when B divides evenly)."""
  check_spec(spec, index)
  batch, lengths = pad_texts(texts, index, spec.min_ngram)
  mesh = distributed.make_mesh()
  if mesh.size > 1 and batch.shape[0] % mesh.size == 0:
    batch, lengths = distributed.shard_batch((batch, lengths), mesh)
  program = program or score_program(spec)
  return jax.tree.map(np.asarray, program(index.table, batch, lengths))


def spans(index: Index, text: np.ndarray, min_ngram: int) -> list[tuple[int, int]]:
  """DJ SEARCH's span list of one text (exact: the index width must cover the text)."""
  batch, lengths = pad_texts([text], index, min_ngram)
  if batch.shape[1] > index.table.width:
    raise ValueError(f"text: {batch.shape[1]} tokens, longer than the index width "
                     f"{index.table.width}: DJ spans need width >= the text length")
  m = kernel.matching_statistics(index.table, batch)[0]
  out = kernel.dj_spans(m, jnp.int32(lengths[0]), int(min_ngram))
  count = int(out.count)
  return list(zip(np.asarray(out.start)[:count].tolist(),
                  np.asarray(out.end)[:count].tolist()))
