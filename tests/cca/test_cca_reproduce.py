"""The reproduction's claim logic on hand-made results, and the toy claims (float64)."""

import numpy as np

from jaxlib_papers.cca import reproduce, train


def _result(cca_acc, cca_div, zero_acc=40.0, both_acc=None, fd=(5.0, 4.0)):
  def row(acc, div, fd_value=5.0):
    return {"accuracy": np.array([acc - 1, acc + 1]), "diversity": np.array([div, div]),
            "fd": np.array([fd_value, fd_value])}
  metrics = {"base": row(40.0, 1.2, fd[0]), "cfg s=1": row(60.0, 1.0), "cfg s=2": row(70.0, 0.9),
             "cfg s=4": row(80.0, 0.8), "cca lambda=0": row(zero_acc, 1.2)}
  for lam, (a, d) in zip((3, 30, 300), zip(cca_acc, cca_div)):
    metrics[f"cca lambda={lam}"] = row(a, d, fd[1])
  metrics["cca+cfg s=1"] = row(both_acc if both_acc is not None else cca_acc[1] + 5, 0.9)
  return train.Result(metrics=metrics, summary=train.summarize(metrics), test_nll=np.zeros(2),
                      timing={}, lambdas=(0.0, 3.0, 30.0, 300.0), main_lambda=30.0,
                      classifier_accuracy=1.0, align_steps=44)


def test_digit_claims_hold_and_miss():
  good = reproduce.digit_claims(_result((55.0, 70.0, 78.0), (1.05, 0.9, 0.82)))
  assert [c.holds for c in good] == [True, True, True, True, True, True]
  # CCA barely moves, fd worse, not monotone, far below CFG, lambda=0 drifts, CFG hurts.
  bad = reproduce.digit_claims(_result((44.0, 43.0, 45.0), (1.0, 0.9, 0.95), zero_acc=45.0,
                                       both_acc=40.0, fd=(4.0, 5.0)))
  assert [c.holds for c in bad] == [False, False, False, False, False, False]
  assert "gap closed" in bad[0].ours
  # One adjacent swap among four lambdas is a Spearman of exactly 0.8 (scipy: 0.79999...).
  swap = reproduce.digit_claims(_result((55.0, 78.0, 70.0), (1.05, 0.82, 0.9)))
  assert swap[2].holds, swap[2].ours


def test_toy_claims_hold():
  claims, table = reproduce.toy_claims(sampled_tv=0.01)
  assert [c.holds for c in claims] == [True, True, True, True]
  assert "0.5333" in table or "0.8162" in table
