"""Exact n-gram coverage of texts against a corpus, as pure, batched functions.

The corpus is one int32 array of token ids with ``SEP`` between documents (and at both
ends), so no match crosses a document boundary. The index is a *truncated suffix table*:
every corpus position sorted by its next ``W`` ids (``W`` = the largest n-gram length asked
about). A query position ``l`` of a text asks for m(l), the longest prefix of
``text[l:l+W]`` that occurs in the corpus (the "matching statistic", capped at ``W``): one
lower-bound binary search with a fixed number of steps (``bit_length(N)``), then the common
prefix with the lower bound and with its predecessor (the longest common prefix of a query
with any sorted row is attained at one of those two).

From m, every L in one pass: the words inside an occurring span of >= L words are exactly
the words i with ``max_{l <= i, m(l) >= L} (l + m(l)) > i`` (occurrence is closed under
substrings, so the union of occurring L-grams is the union of the maximal matches that are
at least L long; capping m at W >= L changes no covered word, since a word beyond l + W in a
longer match is reached again from a later start). ``cov_L`` is their fraction and the
Creativity Index is ``reduce_L (1 - cov_L)``.

``dj_spans`` is DJ SEARCH's two-pointer loop (the official procedure) with the corpus
query "does ``w[f:s]`` occur" answered by ``m(f) >= s - f``: exact when ``W`` is at least
the text length.

Ids are >= 0; ``SEP`` = -1 marks document boundaries in the corpus, ``PAD`` = -2 pads
texts (never in the corpus, so a match stops at a text's end). No ``jax.jit`` here: callers
jit (``train.py``) so that tests compare eager and jitted runs.
"""

from __future__ import annotations

from typing import NamedTuple

import jax
import jax.numpy as jnp
from jax import lax

from jaxlib_papers.core import precision

SEP = -1   # between corpus documents (and at the corpus ends)
PAD = -2   # after a text's last token (never in the corpus)
REDUCTIONS = ("sum", "mean")


class SuffixIndex(NamedTuple):
  """The corpus index. ``W = tokens.shape[0] - order.shape[0]`` (static)."""
  tokens: jax.Array   # [N + W] int32: corpus ids with SEP separators, then W SEPs
  order: jax.Array    # [N] int32: corpus positions sorted by their next W ids

  @property
  def width(self) -> int:
    return self.tokens.shape[0] - self.order.shape[0]

  @property
  def size(self) -> int:
    return self.order.shape[0]


class IndexSpec(NamedTuple):
  """Which n-gram lengths the index sums over, and how.

  The paper's code: L = 5..12, summed (the default); the HF demo: 5..11, mean; membership
  inference forks: 2..12 or 3..12, sum; 5..5 gives 1 - cov_5."""
  min_ngram: int = 5    # Lmin
  max_ngram: int = 12   # Lmax (<= the index width W)
  reduce: str = "sum"   # "sum" | "mean" over L of (1 - cov_L)

  @property
  def lengths(self) -> tuple[int, ...]:
    return tuple(range(self.min_ngram, self.max_ngram + 1))


def suffix_rows(tokens: jax.Array, starts: jax.Array, width: int) -> jax.Array:
  """The next ``width`` ids after each start. tokens: [N + W]; starts: [Q] -> [Q, width]."""
  return tokens[starts[:, None] + jnp.arange(width, dtype=starts.dtype)[None, :]]


def sort_keys(rows: jax.Array, vocab_size: int | None) -> tuple[jax.Array, ...]:
  """The rows' sort keys, most significant first: with ``vocab_size`` known, as many ids
  (shifted by 2 so SEP sorts first) as fit in 31 bits per int32 key (63 bits per int64
  key under x64), so the sort compares fewer keys (2, or 4, ids per key for vocabularies
  up to 32k); else one key per column."""
  wide = precision.x64_enabled()   # int64 keys (63 bits) when the caller enabled x64
  bits = int(vocab_size + 1).bit_length() if vocab_size else 64
  per_key = (63 if wide else 31) // bits
  if per_key < 2:
    return tuple(rows[:, k] for k in range(rows.shape[1]))
  keys = []
  for first in range(0, rows.shape[1], per_key):
    columns = range(first, min(first + per_key, rows.shape[1]))
    key = jnp.zeros(rows.shape[:1], jnp.int64 if wide else jnp.int32)
    for k in columns:
      key = (key << bits) | (rows[:, k] + 2).astype(key.dtype)
    keys.append(key << (bits * (per_key - len(columns))))
  return tuple(keys)


def build_index(corpus: jax.Array, width: int, vocab_size: int | None = None
                ) -> SuffixIndex:
  """The truncated suffix table of ``corpus`` ([N] int32, SEP-separated) for n-grams up to
  ``width``: a lexicographic sort of the N rows of W ids (``jnp.lexsort``; ``vocab_size``,
  static, when given, packs several ids per sort key: the same order, a faster sort)."""
  corpus = jnp.asarray(corpus, jnp.int32)
  tokens = jnp.concatenate([corpus, jnp.full((width,), SEP, jnp.int32)])
  rows = suffix_rows(tokens, jnp.arange(corpus.shape[0], dtype=jnp.int32), width)
  order = jnp.lexsort(tuple(reversed(sort_keys(rows, vocab_size))))
  return SuffixIndex(tokens, order.astype(jnp.int32))


def _first_mismatch(a: jax.Array, b: jax.Array) -> tuple[jax.Array, jax.Array]:
  """(index of the first differing column or W, whether any differs). a, b: [Q, W]."""
  differ = a != b
  return jnp.where(differ.any(-1), jnp.argmax(differ, -1), a.shape[-1]), differ.any(-1)


def lower_bound(index: SuffixIndex, queries: jax.Array) -> jax.Array:
  """The first sorted row >= each query (lexicographic over W ids).

  queries: [Q, W] int32 -> [Q] int32 in [0, N], after ``bit_length(N)`` halvings."""
  size = index.size
  lo = jnp.zeros(queries.shape[:1], jnp.int32)
  hi = jnp.full(queries.shape[:1], size, jnp.int32)

  def halve(_, bounds):
    lo, hi = bounds
    mid = (lo + hi) // 2
    rows = suffix_rows(index.tokens, index.order[jnp.minimum(mid, size - 1)], index.width)
    first, differs = _first_mismatch(rows, queries)
    at = jnp.minimum(first, index.width - 1)[:, None]
    row_less = differs & (jnp.take_along_axis(rows, at, 1)[:, 0]
                          < jnp.take_along_axis(queries, at, 1)[:, 0])
    active = lo < hi
    return (jnp.where(active & row_less, mid + 1, lo),
            jnp.where(active & ~row_less, mid, hi))

  lo, _ = lax.fori_loop(0, max(int(size).bit_length(), 1), halve, (lo, hi))
  return lo


def longest_matches(index: SuffixIndex, queries: jax.Array) -> jax.Array:
  """m: the longest prefix of each query row that occurs in the corpus, capped at W.

  queries: [Q, W] int32 (ids >= 0, PAD after the text's end) -> [Q] int32 in [0, W]."""
  size = index.size
  lo = lower_bound(index, queries)
  best = jnp.zeros(queries.shape[:1], jnp.int32)
  for neighbour in (lo, lo - 1):   # the lower bound and its predecessor
    inside = (neighbour >= 0) & (neighbour < size)
    rows = suffix_rows(index.tokens, index.order[jnp.clip(neighbour, 0, size - 1)],
                       index.width)
    common, _ = _first_mismatch(rows, queries)
    best = jnp.maximum(best, jnp.where(inside, common, 0))
  return best


def query_windows(texts: jax.Array, width: int) -> jax.Array:
  """Every position's next ``width`` ids. texts: [B, n] (PAD after each text) -> [B, n, W]."""
  padded = jnp.pad(texts, ((0, 0), (0, width)), constant_values=PAD)
  return suffix_rows(padded.T, jnp.arange(texts.shape[1]), width).transpose(2, 0, 1)


def matching_statistics(index: SuffixIndex, texts: jax.Array) -> jax.Array:
  """m(l) for every position of every text. texts: [B, n] int32 -> [B, n] int32."""
  windows = query_windows(jnp.asarray(texts, jnp.int32), index.width)
  return longest_matches(index, windows.reshape(-1, index.width)).reshape(texts.shape)


def covered_words(matches: jax.Array, lengths: jax.Array, ngrams: jax.Array) -> jax.Array:
  """Whether each word lies inside an occurring span of >= L words, for every L.

  matches: [B, n] m(l); lengths: [B] text lengths; ngrams: [K] the L values
  -> [B, K, n] bool (False beyond a text's end)."""
  position = jnp.arange(matches.shape[-1])
  long_enough = matches[:, None, :] >= ngrams[None, :, None]
  reach = jnp.where(long_enough, position + matches[:, None, :], -1)
  covered = lax.cummax(reach, axis=2) > position
  return covered & (position < lengths[:, None, None])


def coverage(matches: jax.Array, lengths: jax.Array, ngrams: jax.Array) -> jax.Array:
  """cov_L: the covered fraction of each text's words. -> [B, K] float32."""
  covered = covered_words(matches, lengths, ngrams).sum(-1)
  return covered / jnp.maximum(lengths, 1)[:, None].astype(jnp.float32)


def creativity_index(cov: jax.Array, reduce: str = "sum") -> jax.Array:
  """sum (or mean) over L of 1 - cov_L. cov: [..., K] -> [...]."""
  gaps = 1.0 - cov
  return gaps.mean(-1) if reduce == "mean" else gaps.sum(-1)


class Scores(NamedTuple):
  """What :func:`score_texts` returns for a batch of B texts and K lengths."""
  matches: jax.Array    # [B, n] int32 m(l), capped at W
  coverage: jax.Array   # [B, K] float32 cov_L
  index: jax.Array      # [B] float32 the Creativity Index


def score_texts(index: SuffixIndex, texts: jax.Array, lengths: jax.Array,
                spec: IndexSpec) -> Scores:
  """Matching statistics, cov_L for L in the spec and the index, for a batch of texts.

  texts: [B, n] int32 (PAD after each text); lengths: [B] int32."""
  matches = matching_statistics(index, texts)
  cov = coverage(matches, lengths, jnp.asarray(spec.lengths, jnp.int32))
  return Scores(matches, cov, creativity_index(cov, spec.reduce))


class Spans(NamedTuple):
  """DJ SEARCH's span list of one text (``count`` valid rows, the rest -1)."""
  start: jax.Array   # [n] int32 f of each recorded span
  end: jax.Array     # [n] int32 s (exclusive)
  count: jax.Array   # [] int32


def dj_loop(oracle, n: int, length: jax.Array, min_ngram: int) -> Spans:
  """DJ SEARCH's two pointers f < s over a text of ``length`` words (buffers of n).

  ``oracle(f, s) -> (advance, record)``: ``advance`` answers "w[f:s] is found" for the
  pointers, ``record`` whether [f, s) is recorded (replacing the last span when it lies
  inside it). Found: s += 1. Not found: f += 1, and s += 1 too when s - f is already Lmin."""
  empty = jnp.full((n,), -1, jnp.int32)

  def body(state):
    f, s, spans = state
    found, record = oracle(f, s)
    last = jnp.maximum(spans.count - 1, 0)
    replace = (spans.count > 0) & (f <= spans.start[last]) & (s >= spans.end[last])
    slot = jnp.where(replace, last, spans.count)
    recorded = Spans(spans.start.at[slot].set(f), spans.end.at[slot].set(s),
                     jnp.where(replace, spans.count, spans.count + 1))
    spans = jax.tree.map(lambda a, b: jnp.where(record, a, b), recorded, spans)
    grow = found | (s - f <= min_ngram)
    return f + jnp.where(found, 0, 1), s + jnp.where(grow, 1, 0), spans

  start = (jnp.int32(0), jnp.int32(min_ngram), Spans(empty, empty, jnp.int32(0)))
  _, _, spans = lax.while_loop(lambda st: st[1] <= length, body, start)
  return spans


def dj_spans(matches: jax.Array, length: jax.Array, min_ngram: int) -> Spans:
  """DJ SEARCH (exact) on one text: two pointers f < s, the query "w[f:s] occurs" answered
  by m(f) >= s - f. Found: record [f, s) (replacing the last span when it lies inside it),
  s += 1. Not found: f += 1, and s += 1 too when s - f is already Lmin.

  matches: [n] m of the text (exact for spans up to W); length: [] int32."""
  n = matches.shape[0]

  def oracle(f, s):
    found = matches[jnp.minimum(f, n - 1)] >= s - f
    return found, found

  return dj_loop(oracle, n, length, min_ngram)


def spans_coverage(spans: Spans, n: int, length: jax.Array, ngrams: jax.Array) -> jax.Array:
  """cov_L from a DJ span list keeping spans of >= L words (the brief's identity).

  -> [K] float32."""
  position = jnp.arange(n)
  valid = jnp.arange(spans.start.shape[0]) < spans.count
  inside = ((spans.start[:, None] <= position) & (position < spans.end[:, None])
            & valid[:, None])                                            # [S, n]
  long_enough = (spans.end - spans.start)[None, :] >= ngrams[:, None]    # [K, S]
  covered = (long_enough[:, :, None] & inside[None]).any(1)              # [K, n]
  return covered.sum(-1) / jnp.maximum(length, 1).astype(jnp.float32)


# ------------------------------------------------------------------------------ near-verbatim


class SoftSettings(NamedTuple):
  """The near-verbatim window rule (official: tau = .95 with Llama-3 input embeddings)."""
  tau: float = 0.95      # cosine threshold for both directions
  max_window: int = 16   # Wmax: the longest reference window tried (static)


def soft_match(span: jax.Array, span_content: jax.Array, ref: jax.Array,
               ref_valid: jax.Array, settings: SoftSettings) -> jax.Array:
  """Whether a span matches some window of a reference near-verbatim.

  sim = cosine of the (unit) embeddings; over the span's content tokens i,
  r2t_j = max_i sim(ref_j, span_i). A window [a, a + k) of >= 2 reference tokens is a
  candidate when mean_j r2t_j >= tau, and it matches when also
  t2r = mean_i max_{j in window} sim(span_i, ref_j) >= tau. A span with < 2 content
  tokens never matches.

  span: [s, d] unit embeddings; span_content: [s] bool (content token, inside the span);
  ref: [r, d]; ref_valid: [r] bool (a prefix: the reference's length). -> [] bool.
  """
  sim = ref @ span.T                                                     # [r, s]
  neg = jnp.finfo(sim.dtype).min
  r2t = jnp.where(span_content[None], sim, neg).max(1)                   # [r]
  count = jnp.maximum(span_content.sum(), 1)
  width = settings.max_window
  sim_pad = jnp.concatenate([sim, jnp.full((width, sim.shape[1]), neg, sim.dtype)])
  r2t_pad = jnp.concatenate([r2t, jnp.zeros((width,), r2t.dtype)])
  valid_pad = jnp.concatenate([ref_valid, jnp.zeros((width,), bool)])
  rows = sim.shape[0]

  def grow(carry, k):
    best, total, inside, found = carry
    best = jnp.maximum(best, lax.dynamic_slice(sim_pad, (k - 1, 0), sim.shape))
    total = total + lax.dynamic_slice(r2t_pad, (k - 1,), (rows,))
    inside = inside & lax.dynamic_slice(valid_pad, (k - 1,), (rows,))
    t2r = jnp.where(span_content[None], best, 0.0).sum(1) / count
    hit = inside & (k >= 2) & (total / k >= settings.tau) & (t2r >= settings.tau)
    return (best, total, inside, found | hit.any()), None

  start = (jnp.full(sim.shape, neg, sim.dtype), jnp.zeros((rows,), sim.dtype),
           jnp.ones((rows,), bool), jnp.array(False))
  (_, _, _, found), _ = lax.scan(grow, start, jnp.arange(1, width + 1))
  return found & (span_content.sum() >= 2)


def soft_dj_spans(text: jax.Array, content: jax.Array, length: jax.Array, refs: jax.Array,
                  ref_lengths: jax.Array, min_ngram: int, settings: SoftSettings) -> Spans:
  """DJ SEARCH with the near-verbatim oracle (the official near-verbatim search).

  The query "w[f:s] matches" is ``soft_match`` of the span's content tokens against any
  of the K references (windows of 2..Wmax tokens inside a reference). A span with < 2
  content tokens is passed over as found but not recorded (the official code's rule), so
  the spans are not a superset of exact DJ SEARCH's: report the union.

  One pass precomputes, per window width w, reference, window start a and text word i,
  the running max over the window of sim(ref_j, text_i) and its prefix sums over i
  (content words only), so each oracle call is O(K r (n + Wmax)) instead of a scan.

  text: [n, d] unit embeddings; content: [n] bool; length: [] int32; refs: [K, r, d];
  ref_lengths: [K] int32. -> Spans."""
  n = text.shape[0]
  rows = refs.shape[1]
  width = settings.max_window
  sim = jnp.einsum("krd,nd->krn", refs, text)                             # [K, r, n]
  neg = jnp.asarray(-2.0, sim.dtype)             # below every cosine: finite sums, no nan
  sim_pad = jnp.concatenate([sim, jnp.full((sim.shape[0], width, n), neg, sim.dtype)], 1)
  weight = content.astype(sim.dtype)

  def grow(best, k):
    best = jnp.maximum(best, lax.dynamic_slice_in_dim(sim_pad, k - 1, rows, 1))
    prefix = jnp.concatenate([jnp.zeros(best.shape[:2] + (1,), sim.dtype),
                              jnp.cumsum(best * weight, -1)], -1)
    return best, prefix

  _, t2r_prefix = lax.scan(grow, jnp.full(sim.shape, neg, sim.dtype),
                           jnp.arange(1, width + 1))                      # [Wmax, K, r, n+1]
  count_prefix = jnp.concatenate([jnp.zeros((1,), jnp.int32),
                                  jnp.cumsum(content.astype(jnp.int32))])
  k = jnp.arange(1, width + 1)[:, None, None]                             # window widths
  a = jnp.arange(rows)[None, None, :]
  inside = (a + k <= ref_lengths[None, :, None]) & (k >= 2)               # [Wmax, K, r]
  position = jnp.arange(n)

  def oracle(f, s):
    in_span = content & (position >= f) & (position < s)
    count = count_prefix[s] - count_prefix[f]
    r2t = jnp.where(in_span[None, None], sim, neg).max(-1)                # [K, r]
    r2t_prefix = jnp.concatenate([jnp.zeros((r2t.shape[0], 1), sim.dtype),
                                  jnp.cumsum(r2t, -1)], -1)               # [K, r+1]
    end = jnp.minimum(a + k, rows)
    r2t_mean = (jnp.take_along_axis(jnp.broadcast_to(r2t_prefix, (width,) + r2t_prefix.shape),
                                    jnp.broadcast_to(end, inside.shape), -1)
                - r2t_prefix[None, :, :rows]) / k
    t2r = (t2r_prefix[..., s] - t2r_prefix[..., f]) / jnp.maximum(count, 1)
    hit = (inside & (r2t_mean >= settings.tau) & (t2r >= settings.tau)).any()
    enough = count >= 2
    return hit | ~enough, hit & enough

  return dj_loop(oracle, n, length, min_ngram)
