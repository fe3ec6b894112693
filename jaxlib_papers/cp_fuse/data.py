"""A synthetic two-corpus copyright benchmark, generated in code (nothing to download).

One shared word grammar (8 word classes of 8 words, a handful of sentence templates) makes
the ordinary text of both corpora. Each corpus also holds ``num_protected`` protected
passages (``prefix_len + continuation_len`` tokens of grammatical text drawn with a seed
private to that corpus), which training repeats often enough for the model to memorise
them, and one *shared* passage present in both corpora (the negative control: fusion must
not hide text both models saw). A held-out stream measures utility.

Separation is asserted, not assumed: no ``separation_n``-gram of one corpus's private
passages occurs in the other corpus (its text or its passages) or in the held-out text.

Token ids: 0 pad, 1 bos, 2 eos, 3 sep (unused by the grammar; kept for a paper-like
vocabulary), 4 ".", then the 64 words.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import NamedTuple

import numpy as np

PAD, BOS, EOS, SEP, PERIOD = 0, 1, 2, 3, 4
SPECIALS = ("<pad>", "<bos>", "<eos>", "<sep>", ".")

WORD_CLASSES: dict[str, tuple[str, ...]] = {
    "name": ("ada", "bo", "cyd", "dee", "eli", "fay", "gus", "hal"),
    "det": ("the", "a", "one", "each", "my", "our", "that", "some"),
    "adj": ("red", "old", "calm", "tiny", "bold", "wet", "odd", "grey"),
    "noun": ("cat", "ship", "tree", "lamp", "road", "coin", "bird", "door"),
    "verb_t": ("sees", "finds", "holds", "paints", "moves", "likes", "fixes", "hides"),
    "verb_i": ("sleeps", "runs", "sings", "waits", "falls", "grows", "hums", "rests"),
    "adv": ("now", "often", "slowly", "again", "here", "soon", "twice", "late"),
    "prep": ("near", "under", "past", "behind", "over", "by", "into", "with"),
}
CLASS_NAMES = tuple(WORD_CLASSES)

# Sentence templates: sequences of class names, each closed by "."
TEMPLATES: tuple[tuple[str, ...], ...] = (
    ("det", "adj", "noun", "verb_t", "det", "noun"),
    ("name", "verb_i", "adv"),
    ("det", "noun", "verb_i", "prep", "det", "adj", "noun"),
    ("name", "verb_t", "det", "adj", "noun", "adv"),
    ("det", "adj", "adj", "noun", "verb_i"),
    ("name", "prep", "det", "noun", "verb_t", "name"),
)

VOCAB: tuple[str, ...] = SPECIALS + tuple(w for c in CLASS_NAMES for w in WORD_CLASSES[c])
VOCAB_SIZE = len(VOCAB)
_CLASS_OF_TOKEN = np.full(VOCAB_SIZE, -1, np.int32)
for _c, _name in enumerate(CLASS_NAMES):
  for _w in WORD_CLASSES[_name]:
    _CLASS_OF_TOKEN[VOCAB.index(_w)] = _c
_CLASS_TOKENS = np.array([[VOCAB.index(w) for w in WORD_CLASSES[c]] for c in CLASS_NAMES],
                         np.int32)                                    # [8 classes, 8 words]
_TEMPLATE_CLASSES = tuple(tuple(CLASS_NAMES.index(c) for c in t) for t in TEMPLATES)


class Benchmark(NamedTuple):
  """The generated benchmark (host numpy arrays)."""
  corpus_text: tuple[np.ndarray, np.ndarray]  # per corpus: [N_i] int32 token stream
  sentence_starts: tuple[np.ndarray, np.ndarray]  # per corpus: [S_i] int64 sentence offsets
  private: np.ndarray      # [2, P, L] int32, each corpus's protected passages (L = prefix+cont)
  shared: np.ndarray       # [L] int32, the passage present in both corpora
  heldout_text: np.ndarray  # [N_h] int32 held-out token stream
  heldout_starts: np.ndarray  # [S_h] int64 sentence offsets of the held-out stream
  prefix_len: int          # tokens of a passage given as the prompt
  separation_n: int        # the n of the asserted n-gram separation

  @property
  def passage_len(self) -> int:
    return int(self.private.shape[-1])

  def protected(self, corpus: int) -> np.ndarray:
    """[P + 1, L] int32: corpus ``corpus``'s protected passages, the shared one last."""
    return np.concatenate([self.private[corpus], self.shared[None]], axis=0)


def _sample_sentence(rng: np.random.Generator, word_logits: np.ndarray) -> list[int]:
  template = _TEMPLATE_CLASSES[rng.integers(len(_TEMPLATE_CLASSES))]
  out = []
  for c in template:
    probs = np.exp(word_logits - word_logits.max())
    out.append(int(_CLASS_TOKENS[c, rng.choice(len(probs), p=probs / probs.sum())]))
  out.append(PERIOD)
  return out


def _word_logits(zipf: float) -> np.ndarray:
  """[8] log-weights of the words within a class: p_k ∝ (k + 1)^-zipf (0 = uniform)."""
  return -zipf * np.log(np.arange(1, 9, dtype=np.float64))


def sample_text(rng: np.random.Generator, num_sentences: int,
                zipf: float = 0.0) -> tuple[np.ndarray, np.ndarray]:
  """``num_sentences`` grammar sentences as one stream.

  Returns:
    (tokens [N] int32, sentence_starts [num_sentences] int64).
  """
  logits = _word_logits(zipf)
  sentences = [_sample_sentence(rng, logits) for _ in range(num_sentences)]
  lengths = np.array([len(s) for s in sentences], np.int64)
  starts = np.concatenate([[0], np.cumsum(lengths)[:-1]])
  return np.array([t for s in sentences for t in s], np.int32), starts


def sample_passage(rng: np.random.Generator, length: int, zipf: float = 0.0) -> np.ndarray:
  """[length] int32: grammar sentences from a sentence start, cut at ``length`` tokens."""
  logits = _word_logits(zipf)
  out: list[int] = []
  while len(out) < length:
    out += _sample_sentence(rng, logits)
  return np.array(out[:length], np.int32)


def ngrams(tokens: np.ndarray, n: int) -> set[bytes]:
  """The set of n-grams of a 1-D token array (or of each row of a 2-D one), as bytes."""
  tokens = np.atleast_2d(np.asarray(tokens, np.int32))
  out: set[bytes] = set()
  for row in tokens:
    if row.shape[0] < n:
      continue
    windows = np.lib.stride_tricks.sliding_window_view(row, n)
    out.update(w.tobytes() for w in windows)
  return out


def make_benchmark(*, num_corpus_sentences: int, num_heldout_sentences: int,
                   num_protected: int, prefix_len: int, continuation_len: int,
                   separation_n: int = 8, zipf: float = 0.0, seed: int = 0) -> Benchmark:
  """Generates the two corpora, their protected passages, the shared one and held-out text.

  Passages that would share a ``separation_n``-gram with the other corpus or the held-out
  text are redrawn (with the corpus's private seed), and the separation is then asserted
  by :func:`check_separation`.

  Raises:
    ValueError: a size is not positive.
  """
  for name, value in (("num_corpus_sentences", num_corpus_sentences),
                      ("num_heldout_sentences", num_heldout_sentences),
                      ("num_protected", num_protected), ("prefix_len", prefix_len),
                      ("continuation_len", continuation_len), ("separation_n", separation_n)):
    if int(value) <= 0:
      raise ValueError(f"{name} must be a positive integer; got {value}")
  length = prefix_len + continuation_len
  root = np.random.SeedSequence(seed)
  text_seeds, passage_seeds, heldout_seed, shared_seed = (
      root.spawn(2), root.spawn(2), root.spawn(1)[0], root.spawn(1)[0])
  texts = [sample_text(np.random.default_rng(s), num_corpus_sentences, zipf)
           for s in text_seeds]
  heldout, heldout_starts = sample_text(np.random.default_rng(heldout_seed),
                                        num_heldout_sentences, zipf)
  text_grams = [ngrams(t, separation_n) for t, _ in texts]
  heldout_grams = ngrams(heldout, separation_n)
  shared = sample_passage(np.random.default_rng(shared_seed), length, zipf)
  private = []
  taken = [set(), set()]
  for corpus in range(2):
    rng = np.random.default_rng(passage_seeds[corpus])
    rows = []
    while len(rows) < num_protected:
      passage = sample_passage(rng, length, zipf)
      grams = ngrams(passage, separation_n)
      forbidden = text_grams[1 - corpus] | heldout_grams | taken[1 - corpus]
      if grams & forbidden:
        continue
      rows.append(passage)
      taken[corpus] |= grams
    private.append(np.stack(rows))
  bench = Benchmark(
      corpus_text=(texts[0][0], texts[1][0]), sentence_starts=(texts[0][1], texts[1][1]),
      private=np.stack(private), shared=shared, heldout_text=heldout,
      heldout_starts=heldout_starts, prefix_len=int(prefix_len),
      separation_n=int(separation_n))
  check_separation(bench)
  return bench


def check_separation(bench: Benchmark) -> None:
  """Asserts the n-gram separation of the two corpora's private passages.

  Raises:
    AssertionError: corpus i's private passages share an n-gram with corpus j's text or
      passages (j != i), or with the held-out text.
  """
  n = bench.separation_n
  for corpus in range(2):
    mine = ngrams(bench.private[corpus], n)
    other = (ngrams(bench.corpus_text[1 - corpus], n) | ngrams(bench.private[1 - corpus], n))
    if mine & other:
      raise AssertionError(f"corpus {corpus}'s protected passages share a {n}-gram with "
                           "the other corpus")
    if mine & ngrams(bench.heldout_text, n):
      raise AssertionError(f"corpus {corpus}'s protected passages share a {n}-gram with "
                           "the held-out text")


def text_windows(text: np.ndarray, starts: np.ndarray, length: int,
                 offsets: np.ndarray) -> np.ndarray:
  """[len(offsets), length + 1] int32: bos + ``length`` tokens from the given sentence starts.

  Args:
    text: [N] token stream; starts: [S] sentence offsets; offsets: [k] indices into starts
      (must leave ``length`` tokens to the end of the stream).
  """
  begin = starts[offsets]
  idx = begin[:, None] + np.arange(length)[None]
  body = text[idx]
  return np.concatenate([np.full((len(offsets), 1), BOS, np.int32), body], axis=1)


def valid_starts(text: np.ndarray, starts: np.ndarray, length: int) -> np.ndarray:
  """Indices into ``starts`` whose window of ``length`` tokens fits in the stream."""
  return np.nonzero(starts + length <= text.shape[0])[0]


def training_source(bench: Benchmark, *, batch_size: int, num_pairs: int,
                    protect_prob: float, seed: int) -> Callable[[int], np.ndarray]:
  """``data(step) -> [batch_size, 2 * num_pairs, L + 1] int32``, deterministic in ``step``.

  Model ``2 k + i`` (pair k, corpus i) sees corpus i: each row is, with probability
  ``protect_prob``, bos + one of corpus i's protected passages (private or shared, chosen
  uniformly), else bos + a window of corpus i's ordinary text from a sentence start. The
  upsampling of the passages stands in for repeating them in the corpus.

  Raises:
    ValueError: bad sizes or a probability outside [0, 1].
  """
  if batch_size <= 0 or num_pairs <= 0:
    raise ValueError(f"batch_size and num_pairs must be positive; got {batch_size}, "
                     f"{num_pairs}")
  if not 0.0 <= protect_prob <= 1.0:
    raise ValueError(f"protect_prob must be in [0, 1]; got {protect_prob}")
  length = bench.passage_len
  protected = [np.concatenate([np.full((bench.private.shape[1] + 1, 1), BOS, np.int32),
                               bench.protected(i)], axis=1) for i in range(2)]
  ok = [valid_starts(bench.corpus_text[i], bench.sentence_starts[i], length) for i in range(2)]
  num_models = 2 * num_pairs

  def data(step: int) -> np.ndarray:
    rng = np.random.default_rng([seed, int(step)])
    out = np.empty((batch_size, num_models, length + 1), np.int32)
    for m in range(num_models):
      corpus = m % 2
      use_passage = rng.random(batch_size) < protect_prob
      which = rng.integers(protected[corpus].shape[0], size=batch_size)
      offsets = ok[corpus][rng.integers(ok[corpus].shape[0], size=batch_size)]
      windows = text_windows(bench.corpus_text[corpus], bench.sentence_starts[corpus],
                             length, offsets)
      out[:, m] = np.where(use_passage[:, None], protected[corpus][which], windows)
    return out

  return data


def heldout_windows(bench: Benchmark, count: int, seed: int = 0) -> np.ndarray:
  """[count, L + 1] int32: bos + held-out windows from distinct sentence starts."""
  ok = valid_starts(bench.heldout_text, bench.heldout_starts, bench.passage_len)
  if count > ok.shape[0]:
    raise ValueError(f"count={count} held-out windows requested; only {ok.shape[0]} fit")
  rng = np.random.default_rng(seed)
  offsets = np.sort(rng.choice(ok, size=count, replace=False))
  return text_windows(bench.heldout_text, bench.heldout_starts, bench.passage_len, offsets)


def prompts(bench: Benchmark) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
  """Every protected prompt: corpus 0's private, corpus 1's private, then the shared one.

  Returns:
    (prompts [2P + 1, 1 + prefix_len] int32 (bos first), continuations [2P + 1, cont] int32,
    owner [2P + 1] int32 in {0, 1, 2}: the corpus that holds the passage, 2 = both).
  """
  passages = np.concatenate([bench.private[0], bench.private[1], bench.shared[None]], 0)
  owner = np.array([0] * bench.private.shape[1] + [1] * bench.private.shape[1] + [2],
                   np.int32)
  bos = np.full((passages.shape[0], 1), BOS, np.int32)
  return (np.concatenate([bos, passages[:, :bench.prefix_len]], 1),
          passages[:, bench.prefix_len:], owner)


def is_grammatical(tokens: Sequence[int]) -> bool:
  """Whether a generated token sequence parses: complete sentences match a template and the
  unfinished tail is a prefix of one. Any special token (other than ".") fails."""
  tokens = np.asarray(tokens, np.int32)
  classes: list[int] = []
  for t in tokens:
    if t == PERIOD:
      if tuple(classes) not in _TEMPLATE_CLASSES:
        return False
      classes = []
      continue
    c = int(_CLASS_OF_TOKEN[t]) if 0 <= t < VOCAB_SIZE else -1
    if c < 0:
      return False
    classes.append(c)
  tail = tuple(classes)
  return any(t[:len(tail)] == tail for t in _TEMPLATE_CLASSES)


def sentence_parse_rate(tokens: Sequence[int]) -> tuple[int, int]:
  """(complete sentences that match a template, complete sentences) of a token sequence;
  the unfinished tail is not counted."""
  good = total = 0
  classes: list[int] = []
  for t in np.asarray(tokens, np.int32):
    if t == PERIOD:
      total += 1
      good += tuple(classes) in _TEMPLATE_CLASSES
      classes = []
    else:
      classes.append(int(_CLASS_OF_TOKEN[t]) if 0 <= t < VOCAB_SIZE else -1)
  return good, total


def detokenize(tokens: Sequence[int]) -> str:
  """Space-separated words ("." attached to the previous word); specials in angle brackets."""
  words: list[str] = []
  for t in np.asarray(tokens).tolist():
    w = VOCAB[t] if 0 <= t < VOCAB_SIZE else f"<{t}>"
    if w == "." and words:
      words[-1] += "."
    else:
      words.append(w)
  return " ".join(words)
