"""End to end at smoke size: the reproduction check (data -> training -> readouts)."""

from jaxlib_papers.aerca import reproduce
from jaxlib_papers.core.reproduce import Context


def test_smoke_reproduction_check_runs_and_reports(tmp_path):
  claims = reproduce.check(Context("smoke", tmp_path))
  names = [c.claim for c in claims]
  assert any("AC@1 >= 0.85" in n for n in names)
  assert any("VAR" in n for n in names)
  assert all(c.ours and c.paper for c in claims)
  # A shift of 10 noise std at one step: the ranking is right even after 6 epochs.
  assert next(c for c in claims if "AC@1" in c.claim).holds
  assert (tmp_path / "aerca_nonlinear.png").stat().st_size > 1000
  assert (tmp_path / "aerca_summary.json").exists()


def test_claims_of_a_set_with_more_than_eleven_variables_quote_avg_at_10():
  """Avg@k stops at k = 10, so on p = 20 (Lorenz-96 at `full`) "Avg@(p-1)" is Avg@10: the
  claims are written without indexing past the metrics (this crashed on p = 20)."""
  ranks = {"ac": [0.5 + 0.05 * k for k in range(10)], "avg": [0.6 + 0.04 * k for k in range(10)],
           "auroc": 0.99, "auroc_std": 0.0, "auprc": 0.98, "ac_std": [0.0] * 10,
           "per_seed": [{"auroc": 0.99}]}
  methods = {m: dict(ranks) for m in ("aerca", "var", "raw", "eps_diagnosis")}
  assert reproduce.k_below(20, ranks) == 10 and reproduce.k_below(6, ranks) == 5
  run = reproduce._Run("lorenz96 p=20, 1 seeds, 5 test series", 20, methods,  # pylint: disable=protected-access
                       "-", methods["aerca"]["avg"][9], reproduce.PAPER["lorenz96"])
  claims = reproduce._other_claims(run)  # pylint: disable=protected-access
  assert any("Avg@10 0.960 vs eps-Diag 0.960" in c.ours for c in claims)
