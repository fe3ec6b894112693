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
