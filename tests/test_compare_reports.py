"""launch.compare_reports: claims matched by text with numbers masked, numbers compared."""

from launch import compare_reports


def row(check, claim, ours, holds):
  return {"check": check, "claim": claim, "paper": "-", "ours": ours, "holds": holds,
          "data": "generated", "seconds": None}


def test_identical_reports_have_no_difference_and_changes_are_named():
  before = [row("ocm", "gap <= 0.05 at K=5", "0.0571", False),
            row("ocm", "order at K=10", "0.020 < 0.031", True),
            row("ruot", "W1 <= 0.5", "0.31", True)]
  assert compare_reports.compare(before, before) == []
  after = [row("ocm", "gap <= 0.05 at K=5", "0.0498", True),   # moved and now holds
           row("ocm", "order at K=10", "0.020 < 0.031", True),
           row("ruot", "W1 <= 0.5", "0.31000001", True)]
  lines = compare_reports.compare(before, after)
  assert len(lines) == 3 and "holds False -> True" in lines[0]
  assert "0.0571" in lines[1] and "ruot" in lines[2]
  # A tolerance forgives rounding, not a change of verdict; --only restricts the checks.
  assert len(compare_reports.compare(before, after, rtol=1e-6)) == 2
  assert compare_reports.compare(before, after, only=["ruot"], rtol=1e-6) == []


def test_a_claim_only_one_report_has_is_named():
  before = [row("cca", "FID improves", "3.2 -> 1.1", True)]
  lines = compare_reports.compare(before, [])
  assert lines == ["cca: 'FID improves': 1 row(s) before, 0 after"]
