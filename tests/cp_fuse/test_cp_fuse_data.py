"""The synthetic benchmark (separation, grammar, sources) and the LCS metrics."""

import numpy as np
import pytest

from jaxlib_papers.cp_fuse import data, metrics

SIZES = dict(num_corpus_sentences=200, num_heldout_sentences=80, num_protected=4,
             prefix_len=8, continuation_len=16)


def test_benchmark_separation_grammar_and_sources():
  bench = data.make_benchmark(**SIZES, seed=3)
  assert bench.private.shape == (2, 4, 24) and bench.shared.shape == (24,)
  data.check_separation(bench)                      # no shared 8-gram across corpora
  grams = [data.ngrams(bench.private[i], 8) for i in range(2)]
  assert not grams[0] & grams[1]
  assert not grams[0] & data.ngrams(bench.corpus_text[1], 8)
  # Everything the grammar made parses; a swapped word class does not.
  for passage in np.concatenate([bench.private.reshape(-1, 24), bench.shared[None]]):
    assert data.is_grammatical(passage)
  assert data.is_grammatical(bench.corpus_text[0][:200])
  bad = bench.private[0, 0].copy()
  bad[0] = data.PERIOD
  assert not data.is_grammatical(bad)
  assert not data.is_grammatical([data.BOS])
  # A doctored benchmark (corpus 1 holds a passage of corpus 0) is refused.
  leaked = bench._replace(corpus_text=(bench.corpus_text[0], np.concatenate(
      [bench.corpus_text[1], bench.private[0, 1]])))
  with pytest.raises(AssertionError, match="share"):
    data.check_separation(leaked)
  # The training source: deterministic, [B, M, L + 1], bos first, model 2k + i on corpus i.
  source = data.training_source(bench, batch_size=64, num_pairs=2, protect_prob=1.0, seed=0)
  batch = source(5)
  np.testing.assert_array_equal(batch, source(5))
  assert batch.shape == (64, 4, 25) and np.all(batch[:, :, 0] == data.BOS)
  for m in range(4):
    allowed = {r.tobytes() for r in bench.protected(m % 2)}
    assert all(row[1:].tobytes() in allowed for row in batch[:, m])
  prompts, conts, owner = data.prompts(bench)
  assert prompts.shape == (9, 9) and conts.shape == (9, 16)
  np.testing.assert_array_equal(owner, [0] * 4 + [1] * 4 + [2])
  with pytest.raises(ValueError, match="protect_prob"):
    data.training_source(bench, batch_size=4, num_pairs=1, protect_prob=2.0, seed=0)
  with pytest.raises(ValueError, match="num_protected"):
    data.make_benchmark(**{**SIZES, "num_protected": 0})
  assert data.detokenize([5, 4, 1]) == f"{data.VOCAB[5]}. <bos>"


def _brute_lcs(a, b):
  best = 0
  for i in range(len(a)):
    for j in range(len(b)):
      k = 0
      while i + k < len(a) and j + k < len(b) and a[i + k] == b[j + k]:
        k += 1
      best = max(best, k)
  return best


def test_lcs_against_brute_force():
  rng = np.random.default_rng(0)
  for _ in range(20):
    a, b = rng.integers(0, 3, 12), rng.integers(0, 3, 9)
    assert metrics.lcs_length(a, b) == _brute_lcs(list(a), list(b))
    start, length = metrics.longest_match_span(a, b)
    assert length == _brute_lcs(list(a), list(b))
    assert _brute_lcs(list(a[start:start + length]), list(b)) == length
  chars = metrics.char_lcs_matrix(["the old cat", "zzz"], ["an old cat!", "cat"])
  np.testing.assert_array_equal(chars, [[8, 3], [0, 0]])
