"""The reproduction's claim logic on hand-made results (no training)."""

from jaxlib_papers.ocm import reproduce


def _results(ocm_nelbo, ocm_err):
  nelbo = {"beta_tilde": 50.0, "beta": 0.8, "analytic": 0.63, "ocm": ocm_nelbo, "exact": 0.55}
  return {
      "methods": list(nelbo), "nelbo": {10: nelbo},
      "mmd": {10: {n: 0.01 for n in nelbo} | {"beta_tilde": 0.04}},
      "mmd_ddim": {10: {n: 0.01 for n in nelbo}},
      "head_error": {50: {"analytic": 0.2, "ocm": ocm_err}, 100: {"analytic": 0.1, "ocm": 0.01}},
      "samples": {},
  }


def test_claims_hold_and_miss():
  good = reproduce.claims_for(_results(0.56, 0.05), "toy")
  assert [c.holds for c in good] == [True, True, True, True]
  bad = reproduce.claims_for(_results(0.70, 0.15), "toy")
  assert [c.holds for c in bad] == [False, False, True, False]
  assert "gap +0.1500" in bad[1].ours
  assert "toy" in reproduce._table(_results(0.56, 0.05), "toy")
