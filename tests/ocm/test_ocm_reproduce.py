"""The reproduction's claim logic on hand-made results (no training)."""

from jaxlib_papers.ocm import reproduce, train


def _results(ocm_nelbo, ocm_err):
  nelbo = {"beta_tilde": 50.0, "beta": 0.8, "analytic": 0.63, "ocm": ocm_nelbo, "exact": 0.55}
  return train.Result(
      dsm_history=[], head_history=[],
      methods=list(nelbo),
      nelbo={5: {n: v + 0.2 for n, v in nelbo.items()}, 10: nelbo},
      terms={5: {n: [0.0, 1.0, -3.0] for n in nelbo}, 10: {n: [0.0, 1.0, -3.0] for n in nelbo}},
      mmd={10: {n: 0.01 for n in nelbo} | {"beta_tilde": 0.04}},
      mmd_ddim={},
      head_error={54: {"analytic": 0.2, "ocm": ocm_err}, 112: {"analytic": 0.1, "ocm": 0.01}},
      samples={},
  )


def test_claims_hold_and_miss():
  good = reproduce.claims_for(_results(0.56, 0.05), "toy")
  assert [c.holds for c in good] == [True, True, True, True]
  bad = reproduce.claims_for(_results(0.70, 0.25), "toy")
  assert [c.holds for c in bad] == [False, False, True, False]
  assert "K=10: OCM 0.7000, exact 0.5500 (gap +0.1500)" in bad[1].ours
  # The gap claim's threshold is 0.05 nats/dim at every K.
  edge = reproduce.claims_for(_results(0.55 + 0.049, 0.05), "toy")
  assert edge[1].holds
  table = reproduce._table(_results(0.56, 0.05), "toy")
  assert "toy" in table and "Last transition" in table
