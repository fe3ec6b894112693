"""DeepRUOT data: CSV loader validation, hold-out, simulator."""

import numpy as np
import pytest

from jaxlib_papers.core import datasets
from jaxlib_papers.ruot import data


def _official(name: str):
  """The official file through the fetcher (CI: its local copy); skips when unavailable."""
  try:
    return datasets.fetch(name)
  except datasets.DataUnavailable as e:
    pytest.skip(str(e))


def _write(tmp_path, text, name="d.csv"):
  path = tmp_path / name
  path.write_text(text)
  return path


def test_load_csv_round_trip(tmp_path):
  path = _write(tmp_path, "samples,x1,x2\n1,0.5,1.5\n0,1,2\n0,3,4\n\n1,5,6\n")
  snaps = data.load_csv(path, expected_times=[0, 1])
  np.testing.assert_array_equal(snaps.times, [0.0, 1.0])
  np.testing.assert_array_equal(snaps.xs[0], [[1, 2], [3, 4]])
  np.testing.assert_array_equal(snaps.xs[1], [[0.5, 1.5], [5, 6]])
  assert snaps.xs[0].dtype == np.float32
  np.testing.assert_allclose(snaps.relative_mass, [1.0, 1.0])


@pytest.mark.parametrize("text, match", [
    ("time,x1\n0,1\n1,2\n", "header must start with 'samples'"),
    ("samples\n0\n1\n", "header must start with 'samples'"),
    ("samples,x1\n0,1\n1,abc\n", r"line 3, column 'x1': 'abc' is not a number"),
    ("samples,x1\n0,1\n1,\n", r"line 3, column 'x1': '' is not a number"),
    ("samples,x1\n0,1\n1,nan\n", "NaN/Inf rows are not allowed"),
    ("samples,x1\n0,1\n1,2,3\n", "line 3 has 3 cells, expected 2"),
    ("samples,x1\n0,1\n0,2\n", "at least 2 distinct times"),
    ("samples,x1\n", "no data rows"),
    ("", "empty file"),
])
def test_load_csv_errors(tmp_path, text, match):
  with pytest.raises(ValueError, match=match):
    data.load_csv(_write(tmp_path, text))


def test_load_csv_missing_expected_time_and_file(tmp_path):
  path = _write(tmp_path, "samples,x1\n0,1\n2,2\n")
  with pytest.raises(ValueError, match=r"missing \[1\]"):
    data.load_csv(path, expected_times=[0, 1, 2])
  with pytest.raises(FileNotFoundError):
    data.load_csv(tmp_path / "absent.csv")


def test_hold_out_and_validate():
  snaps = data.Snapshots(np.array([0.0, 1.0, 2.0]),
                         tuple(np.ones((n, 2), np.float32) * n for n in (3, 4, 5)))
  held = data.hold_out(snaps, 1)
  np.testing.assert_array_equal(held.times, [0.0, 2.0])
  assert [x.shape[0] for x in held.xs] == [3, 5]
  assert data.hold_out(snaps, -1) is snaps
  for bad in (0, 3):
    with pytest.raises(ValueError, match="hold_out must be in 1..2"):
      data.hold_out(snaps, bad)
  with pytest.raises(ValueError, match="strictly increasing"):
    data.validate(data.Snapshots(np.array([1.0, 0.0]), snaps.xs[:2]))
  with pytest.raises(ValueError, match="NaN or Inf"):
    data.validate(data.Snapshots(np.array([0.0, 1.0]),
                                 (np.ones((2, 2)), np.full((2, 2), np.nan))))


def test_simulator_is_deterministic_and_grows_with_x2():
  a = data.simulate_gene_network(num_cells=60, seed=3)
  b = data.simulate_gene_network(num_cells=60, seed=3)
  for xa, xb in zip(a.xs, b.xs):
    np.testing.assert_array_equal(xa, xb)
  counts = a.counts
  assert counts[0] == 60 and np.all(np.diff(counts) >= 0) and counts[-1] > counts[0]
  assert a.xs[-1][:, 1].mean() > a.xs[0][:, 1].mean() + 0.5   # the switch turns X2 on
  x = np.array([[0.5, 0.0], [0.5, 1.0], [0.5, 2.0]])
  assert np.all(np.diff(data.growth_rate_truth(x)) > 0)


def test_gene_csv_loads_with_paper_counts():
  snaps = data.load_csv(_official("ruot/simulation_gene_data.csv"),
                        expected_times=[0, 1, 2, 3, 4])
  assert snaps.counts.tolist() == [400, 442, 530, 690, 969]
  assert snaps.dim == 2


def test_emt_claim_offline_is_kept_as_not_run(tmp_path, monkeypatch, capsys):
  # Offline with no local copy the EMT claim (measured data, no generated stand-in) keeps
  # its row, marked not run with the reason, before any training starts.
  from jaxlib_papers.core.reproduce import Context  # pylint: disable=g-import-not-at-top
  from jaxlib_papers.ruot import reproduce  # pylint: disable=g-import-not-at-top
  monkeypatch.delenv(datasets.ENV_DATA_DIR, raising=False)
  monkeypatch.setenv(datasets.ENV_CACHE, str(tmp_path / "empty_cache"))
  monkeypatch.setenv(datasets.ENV_OFFLINE, "1")
  claims, table = reproduce._emt_claims(Context(preset="cpu", report_dir=tmp_path / "r"))  # pylint: disable=protected-access
  assert len(claims) == 1 and claims[0].holds is None, claims
  assert claims[0].claim.startswith("EMT (10-D)") and "20+10 passes" in claims[0].claim
  assert claims[0].ours.startswith("not run: ruot/emt.csv could not be fetched")
  assert claims[0].data == "none (offline: ruot/emt.csv)" and "not run" in table[0]
  assert "[data] not available, the EMT claim is not run: " in capsys.readouterr().out
