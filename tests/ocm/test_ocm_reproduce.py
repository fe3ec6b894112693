"""The reproduction's claim logic on hand-made results (no training)."""

import dataclasses

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


def test_jacobian_row_is_reported_beside_ocm_and_exact():
  """Issue 33: the network's own Jacobian diagonal is a report-only row (no threshold), and
  the check evaluates it at every preset."""
  base = _results(0.56, 0.05)
  jac = {k: {"ocm": row["ocm"], "jacobian": row["exact"] + 0.03, "exact": row["exact"]}
         for k, row in base.nelbo.items()}
  result = dataclasses.replace(base, jacobian_nelbo=jac, jacobian_points=1000)
  claims = reproduce.claims_for(result, "toy")
  assert [c.holds for c in claims] == [True, True, True, True, True]
  assert claims[-1].claim.startswith("reported: toy: NELBO with the eps network's own Jacobian")
  assert claims[-1].ours.startswith("on the first 1000 held-out points, same draws: ")
  assert ("K=10: jacobian 0.5800, OCM 0.5600, exact 0.5500 (jacobian - exact +0.0300, "
          "OCM - exact +0.0100)") in claims[-1].ours
  table = reproduce._table(result, "toy")
  assert "first 1000 held-out points" in table and "| jacobian | 0.7800 | 0.5800 |" in table
  assert len(reproduce.claims_for(base, "toy")) == 4  # no row without the diagnostic
  for preset in ("smoke", "cpu"):
    methods = reproduce.mixture_config(preset, 0, dict(reproduce.MIXTURES)["gmm16"]
                                       ).eval.methods
    assert methods[-2:] == ("jacobian", "exact") and methods.count("jacobian") == 1


def test_a_missed_exact_gap_says_whose_it_is_from_the_jacobian_row():
  """The gap claim's report cell names the cause from the diagnostic: the network's Jacobian
  when what OCM converges to is further from exact than the head, else the head."""
  base = _results(0.70, 0.05)   # OCM 0.15 above exact at both K
  def with_limit(offset):
    jac = {k: {"ocm": row["ocm"], "jacobian": row["exact"] + offset, "exact": row["exact"]}
           for k, row in base.nelbo.items()}
    return dataclasses.replace(base, jacobian_nelbo=jac, jacobian_points=1000)
  network = reproduce.claims_for(with_limit(2.0), "toy")[1]
  assert not network.holds and network.why.startswith("the network's Jacobian")
  assert "+2.00 from exact at K=5" in network.why   # ties: the first K of the largest gap
  head = reproduce.claims_for(with_limit(0.01), "toy")[1]
  assert head.why.startswith("the head's") and "+0.010" in head.why
  assert reproduce.claims_for(base, "toy")[1].why == ""  # no diagnostic, no reason given
