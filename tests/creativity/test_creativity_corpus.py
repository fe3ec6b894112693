"""Corpus tooling: save / load, bad input named, text files and tokenizer hook, Markov."""

import collections

import numpy as np
import pytest

from jaxlib_papers.creativity import corpus, data, kernel


def test_save_load_roundtrip_and_corrupt_files(tmp_path):
  index = corpus.build([np.array([0, 1, 2, 1]), np.array([2, 0])], 4, vocab_size=3)
  path = corpus.save(index, tmp_path / "idx.npz")
  back = corpus.load(path)
  np.testing.assert_array_equal(back.table.order, index.table.order)
  assert (back.vocab_size, back.num_documents) == (3, 2)
  truncated = tmp_path / "cut.npz"
  truncated.write_bytes(path.read_bytes()[:200])
  with pytest.raises(ValueError, match=r"path '.*cut.npz': not a readable creativity index"):
    corpus.load(truncated)
  with np.load(path) as f:
    fields = dict(f)
  fields["order"] = fields["order"][::-1].copy()
  np.savez(tmp_path / "bad.npz", **fields)
  with pytest.raises(ValueError, match=r"bad.npz': corrupt creativity index: order is not "
                                       r"sorted"):
    corpus.load(tmp_path / "bad.npz")


def test_bad_input_names_the_argument():
  with pytest.raises(ValueError, match=r"documents\[1\]: token id 7 is out of range: "
                                       r"expected ids in \[0, vocab_size=5\)"):
    corpus.build([np.array([0, 1]), np.array([7])], 4, vocab_size=5)
  with pytest.raises(ValueError, match=r"documents: the corpus is empty"):
    corpus.build([], 4)
  with pytest.raises(ValueError, match=r"documents\[0\]: token ids must be >= 0"):
    corpus.build([np.array([0, -3])], 4)
  index = corpus.build([np.array([0, 1, 2])], 4)
  with pytest.raises(ValueError, match=r"texts\[1\]: 2 tokens, shorter than min_ngram=3"):
    corpus.score(index, [np.array([0, 1, 2]), np.array([0, 1])], kernel.IndexSpec(3, 4))
  with pytest.raises(ValueError, match=r"spec.max_ngram = 12: above the index width 4"):
    corpus.score(index, [np.array([0, 1, 2])], kernel.IndexSpec(3, 12))
  with pytest.raises(ValueError, match=r"spec.reduce = 'max'"):
    corpus.score(index, [np.array([0, 1, 2])], kernel.IndexSpec(3, 4, "max"))


def test_text_files_tokenizer_hook_and_spans(tmp_path):
  (tmp_path / "a.txt").write_text("To be, or not to be: that is the question.")
  index, vocab = corpus.from_texts([tmp_path / "a.txt", "the rest is silence"], 16)
  assert index.num_documents == 2
  text = vocab.encode(corpus.tokenize("Whether to be, or not to be is silence"))
  # "to be , or not to be" (7 words); "is silence" is 2 < Lmin words
  assert corpus.spans(index, text, 3) == [(1, 8)]
  upper, _ = corpus.from_texts(["AB ab"], 4, tokenizer=str.split)
  assert upper.vocab_size == 2                 # the hook keeps case: two words


def test_markov_counts_and_low_temperature():
  docs = [np.array([0, 1, 2, 0, 1, 3, 0, 1, 2]), np.array([1, 2, 0])]
  model = data.fit_markov(docs, 3)
  want = collections.Counter((tuple(d[i:i + 2]), int(d[i + 2])) for d in docs
                             for i in range(d.size - 2))
  got = {}
  for u, key in enumerate(model.keys):
    ctx = (int(key % model.base), int(key // model.base))
    for j in range(model.offsets[u], model.offsets[u + 1]):
      got[(ctx, int(model.nexts[j]))] = int(model.counts[j])
  assert got == dict(want)
  texts = data.sample_markov(model, 20, 12, 0.05, np.random.default_rng(0))
  pairs = [tuple(t[i:i + 3]) for t in texts for i in range(10)]
  assert sum(p[:2] == (0, 1) and p[2] == 3 for p in pairs) == 0   # 2 beats 3 (2:1) at T->0
