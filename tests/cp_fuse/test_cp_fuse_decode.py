"""The fused decoder on bigram "models" whose answer a numpy + scipy reference computes."""

import jax
import jax.numpy as jnp
import numpy as np
from scipy import optimize

from jaxlib_papers.cp_fuse import fusion, kernel

V = 7
NUM_NEW = 10
GRID = fusion.official_grid(10)


def _tables(seed=0):
  """[2, V, V] bigram log-probability tables: model 1 memorises a chain, model 2 is broad."""
  rng = np.random.default_rng(seed)
  chain = np.roll(np.arange(V), -1)                 # model 1: token v -> v + 1 (mod V)
  t1 = np.full((V, V), 0.01)
  t1[np.arange(V), chain] = 1.0
  t1 += rng.random((V, V)) * 0.05
  t2 = rng.random((V, V)) + 0.3
  t = np.stack([t1, t2])
  return np.log(t / t.sum(-1, keepdims=True)).astype(np.float32)


def _log_probs_fn(params, tokens):
  # params [2, V, V]; tokens [2, B, T] -> [2, B, T, V]
  return jax.vmap(lambda table, toks: table[toks])(params, tokens)


def _grid_j(ab, l1, l2, hist):
  z = ab[0] * l1 + ab[1] * l2
  lq = z - np.log(np.exp(z - z.max()).sum()) - z.max()
  q = np.exp(lq)
  return max(q @ (lq - l1) - hist[0], q @ (lq - l2) - hist[1])


def _balance(lam, l1, l2, hist):
  z = lam * l1 + (1 - lam) * l2
  q = np.exp(z - z.max())
  q /= q.sum()
  return q @ (l2 - l1) + hist[1] - hist[0]


def _reference(tables, prompts, rule, fixed=(0.5, 0.5), blocked=None):
  """Greedy decode in numpy: the grid by enumeration, the exact rule by scipy brentq."""
  pairs = np.asarray(fusion.grid_pairs(GRID), np.float64)
  out_tokens, out_alpha = [], []
  for prompt in prompts:
    seq, hist = list(prompt), np.zeros(2)
    toks, alphas = [], []
    for _ in range(NUM_NEW):
      l1, l2 = tables[0, seq[-1]].astype(np.float64), tables[1, seq[-1]].astype(np.float64)
      if rule == kernel.RULE_FIXED:
        a, b = fixed
      elif rule == kernel.RULE_GRID:
        a, b = pairs[int(np.argmin([_grid_j(p, l1, l2, hist) for p in pairs]))]
      else:
        args = (l1, l2, hist)
        if _balance(0.0, *args) <= 0:
          a = 0.0
        elif _balance(1.0, *args) >= 0:
          a = 1.0
        else:
          a = optimize.brentq(_balance, 0.0, 1.0, args=args, xtol=1e-12)
        b = 1.0 - a
      fused = a * l1 + b * l2
      if blocked is not None and (seq[-1], ) in blocked:
        fused[blocked[(seq[-1],)]] = -np.inf
      y = int(np.argmax(fused))
      toks.append(y)
      alphas.append(a)
      hist += [l1[y], l2[y]]
      seq.append(y)
    out_tokens.append(toks)
    out_alpha.append(alphas)
  return np.array(out_tokens), np.array(out_alpha)


# One compiled decoder for every test of this shape: forbid 0 -> 1 and 3 -> 4 when blocking.
NGRAMS = jnp.array([[0, 1], [3, 4]], jnp.int32)
_DECODE = jax.jit(lambda p, x, k, o, table: kernel.decode(
    _log_probs_fn, p, x, k, o, kernel.DecodeSettings(NUM_NEW, GRID, ngram_table=table)))


def _run(tables, prompts, opts, ngram_table=NGRAMS):
  return _DECODE(jnp.asarray(tables), jnp.asarray(prompts, jnp.int32), jax.random.key(0),
                 opts, ngram_table)


PROMPTS = np.array([[0, 3], [1, 5], [2, 2], [6, 4]], np.int32)


def test_decode_matches_reference_for_every_rule():
  tables = _tables()
  for rule, fixed in ((kernel.RULE_FIXED, (1.0, 0.0)), (kernel.RULE_FIXED, (0.0, 1.0)),
                      (kernel.RULE_FIXED, (0.5, 0.5)), (kernel.RULE_GRID, (0.0, 0.0)),
                      (kernel.RULE_EXACT, (0.0, 0.0))):
    out = _run(tables, PROMPTS, kernel.options(rule, fixed))    # blocker compiled in, off
    tokens, alpha = _reference(tables, PROMPTS, rule, fixed)
    np.testing.assert_array_equal(out.tokens, tokens, err_msg=f"rule {rule} {fixed}")
    np.testing.assert_allclose(out.alpha, alpha, atol=1e-5)
    # The history is the running sum of each model's log-probability of the chosen token.
    lp = np.stack([tables[m][np.concatenate([PROMPTS[:, -1:], tokens[:, :-1]], 1), tokens]
                   for m in range(2)], -1)
    np.testing.assert_allclose(out.history[:, -1], lp.sum(1), rtol=1e-5, atol=1e-5)
    # The official grid never beats the exact solver on the same state.
    assert np.all(np.asarray(out.grid_objective) >= np.asarray(out.exact_objective) - 1e-5)
  # Model 1 alone follows its memorised chain; CP-Fuse leaves it (the protection at work).
  single = _run(tables, PROMPTS, kernel.options(kernel.RULE_FIXED, (1.0, 0.0)))
  chain = (PROMPTS[:, -1:] + 1 + np.arange(NUM_NEW)) % V
  np.testing.assert_array_equal(single.tokens, chain)
  fused = _run(tables, PROMPTS, kernel.options(kernel.RULE_EXACT))
  assert np.mean(np.asarray(fused.tokens) == chain) < 0.8


def test_identical_models_make_every_rule_the_single_model():
  tables = _tables()
  same = np.stack([tables[0], tables[0]])
  base = _run(same, PROMPTS, kernel.options(kernel.RULE_FIXED, (1.0, 0.0)))
  for rule in (kernel.RULE_GRID, kernel.RULE_EXACT):
    out = _run(same, PROMPTS, kernel.options(rule))
    np.testing.assert_array_equal(out.tokens, base.tokens)


def test_memfree_blocks_the_ngram():
  tables = _tables()
  opts = kernel.options(kernel.RULE_FIXED, (1.0, 0.0), block=True)
  out = _run(tables, PROMPTS, opts)
  tokens, _ = _reference(tables, PROMPTS, kernel.RULE_FIXED, (1.0, 0.0),
                         blocked={(0,): [1], (3,): [4]})
  np.testing.assert_array_equal(out.tokens, tokens)
  seq = np.concatenate([PROMPTS, np.asarray(out.tokens)], 1)
  pairs = set(zip(seq[:, 1:-1].ravel().tolist(), seq[:, 2:].ravel().tolist()))
  assert (0, 1) not in pairs and (3, 4) not in pairs


def test_sampling_follows_the_fused_distribution():
  tables = _tables()
  prompts = np.zeros((4000, 1), np.int32)
  fn = jax.jit(lambda p, x, k, o: kernel.decode(_log_probs_fn, p, x, k, o,
                                                kernel.DecodeSettings(1, GRID)))
  out = fn(jnp.asarray(tables), jnp.asarray(prompts), jax.random.key(3),
           kernel.options(kernel.RULE_FIXED, (0.5, 0.5), temperature=2.0))
  z = (0.5 * tables[0, 0] + 0.5 * tables[1, 0]) / 2.0
  expected = np.exp(z - z.max())
  expected /= expected.sum()
  freq = np.bincount(np.asarray(out.tokens[:, 0]), minlength=V) / prompts.shape[0]
  np.testing.assert_allclose(freq, expected, atol=0.025)


def test_teacher_forcing_scores_the_decoded_tokens():
  tables = _tables()
  out = _run(tables, PROMPTS, kernel.options(kernel.RULE_GRID))
  seq = np.concatenate([PROMPTS[:, -1:], np.asarray(out.tokens)], 1)
  logp = _log_probs_fn(jnp.asarray(tables), jnp.broadcast_to(seq[None, :, :-1],
                                                             (2, *seq[:, :-1].shape)))
  lp = jax.jit(lambda lp, t, o: kernel.fused_token_log_probs(lp, t, o, grid=GRID))(
      logp, jnp.asarray(seq[:, 1:]), kernel.options(kernel.RULE_GRID))
  a, b = np.asarray(out.alpha)[..., None], np.asarray(out.beta)[..., None]
  fused = jax.nn.log_softmax(a * np.asarray(logp[0]) + b * np.asarray(logp[1]), -1)
  # Greedy: each decoded token is the mode of the fused distribution it was drawn from.
  np.testing.assert_allclose(lp, np.max(fused, -1), rtol=1e-5, atol=1e-5)


def test_bad_arguments_are_named():
  import pytest  # pylint: disable=g-import-not-at-top
  with pytest.raises(ValueError, match="rule"):
    kernel.options(7)
  with pytest.raises(ValueError, match="temperature"):
    kernel.options(kernel.RULE_GRID, temperature=-1.0)
  with pytest.raises(ValueError, match="n - 1"):
    kernel.decode(_log_probs_fn, jnp.asarray(_tables()), jnp.asarray(PROMPTS[:, :1]),
                  jax.random.key(0), kernel.options(),
                  kernel.DecodeSettings(2, GRID, ngram_table=jnp.zeros((1, 4), jnp.int32)))


def test_top_k_masked_models_decode_inside_their_common_support_without_nan():
  # Each bigram row keeps its top 5 of 7 tokens (the rest -inf, renormalised): every rule
  # must pick tokens both models allow and report finite weights, objectives, histories.
  tables = _tables(4)
  kth = np.sort(tables, axis=-1)[..., V - 5][..., None]
  tables = np.where(tables >= kth, tables, -np.inf)
  tables = (tables - np.log(np.exp(tables).sum(-1, keepdims=True))).astype(np.float32)
  allowed = np.isfinite(tables).all(axis=0)                    # [V, V] common support
  for rule, fixed in ((kernel.RULE_FIXED, (1.0, 0.0)), (kernel.RULE_FIXED, (0.0, 1.0)),
                      (kernel.RULE_GRID, (0.0, 0.0)), (kernel.RULE_EXACT, (0.0, 0.0))):
    out = _run(tables, PROMPTS, kernel.options(rule, fixed))
    for name, value in out._asdict().items():
      assert np.all(np.isfinite(np.asarray(value))), (rule, fixed, name)
    seq = np.concatenate([PROMPTS, np.asarray(out.tokens)], axis=1)
    assert allowed[seq[:, 1:-1], seq[:, 2:]].all(), (rule, fixed)
    logp = _log_probs_fn(jnp.asarray(tables), jnp.broadcast_to(jnp.asarray(seq[:, :-1]),
                                                               (2, *seq[:, :-1].shape)))
    lp = kernel.fused_token_log_probs(logp[:, :, 1:], jnp.asarray(seq[:, 2:]),
                                      kernel.options(rule, fixed), grid=GRID)
    assert np.all(np.isfinite(np.asarray(lp))), (rule, fixed)
