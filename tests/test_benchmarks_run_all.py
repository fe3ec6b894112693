"""benchmarks/run_all.py: the table's fields, the flop count, skipping an absent package."""

import importlib.util
import pathlib

import jax
import jax.numpy as jnp
import pytest

_PATH = pathlib.Path(__file__).resolve().parents[1] / "benchmarks" / "run_all.py"
_SPEC = importlib.util.spec_from_file_location("benchmarks_run_all", _PATH)
run_all = importlib.util.module_from_spec(_SPEC)
_SPEC.loader.exec_module(run_all)

N = 64


def _matmul_paths(preset):
  del preset
  x = jnp.ones((N, N), jnp.float32)

  def once():
    return run_all.HotPath(lambda a: a @ a, (x,), 3, "step", f"{N}x{N} matmul")

  def looped():
    fn = lambda a: jax.lax.scan(lambda c, _: (c @ c / N, None), a, None, length=4)[0]
    return run_all.HotPath(fn, (x,), 4, "step", "4 matmuls in a scan")

  return {"once": once, "looped": looped}


def test_measure_fields_flops_and_loop_bound(monkeypatch):
  monkeypatch.setitem(run_all.HOT_PATHS, "toy", _matmul_paths)
  row = run_all.measure("toy", "once", "smoke", seconds=0.2)
  assert row["flops_per_call"] == pytest.approx(2 * N**3, rel=0.01)   # XLA's exact count
  assert not row["flops_lower_bound"]
  assert row["steps_per_s"] == pytest.approx(3 * row["calls_per_s"])
  assert row["flops_per_s"] == pytest.approx(row["flops_per_call"] * row["calls_per_s"])
  assert row["chunks"] >= 1 and row["compile_s"] > 0 and row["timed_s"] > 0
  assert row["peak_bytes"] is None or row["peak_bytes"] > 0
  looped = run_all.measure("toy", "looped", "smoke", seconds=0.1)
  # A scan of 4: XLA counts its body once; the row counts it 4 times (exact, no ">=").
  assert not looped["flops_lower_bound"]
  assert looped["flops_per_call"] == pytest.approx(4 * 2 * N**3, rel=0.02)
  assert looped["bytes_per_s"] == pytest.approx(
      looped["bytes_per_call"] * looped["calls_per_s"])
  peaks = run_all.timing.Peaks(1e9, 1e9, "toy")
  table = run_all.format_table([row, looped, {"method": "gone", "error": "skipped: x"}],
                               peaks)
  lines = table.splitlines()
  assert len(lines) == 5 and lines[0].count("|") == lines[2].count("|") == 12
  assert "step/s" in lines[2] and ">= " not in lines[2] + lines[3]
  assert "% compute" in lines[2] or "% memory" in lines[2]   # the row's share of the peak
  assert "skipped: x" in lines[4]
  with pytest.raises(ValueError, match="no hot path"):
    run_all.measure("toy", "nope", "smoke", seconds=1)
  with pytest.raises(ValueError, match="unknown method"):
    run_all.measure("nope", "once", "smoke", seconds=1)


def test_absent_package_is_skipped(monkeypatch):
  monkeypatch.setitem(run_all.HOT_PATHS, "not_a_paper", _matmul_paths)
  rows = run_all.run_all(["not_a_paper"], "smoke", 1.0, 10.0, log=lambda *a, **k: None)
  assert rows == [{"method": "not_a_paper", "error": "skipped: package absent"}]


def test_real_method_smoke():
  """One registered method end to end at smoke size (minimax: one small compile)."""
  row = run_all.measure("minimax", "len_solve", "smoke", seconds=1.0)
  assert row["unit"] == "solve" and row["steps_per_s"] > 0
  assert row["notes"].startswith("converged")
  assert row["flops_lower_bound"] and row["flops_per_call"] > 0


def test_json_is_rewritten_after_every_row_so_a_cut_run_keeps_its_rows(monkeypatch, tmp_path):
  monkeypatch.setitem(run_all.HOT_PATHS, "toy", _matmul_paths)
  monkeypatch.setattr(run_all, "package_present", lambda method: True)
  calls = []

  def fake_child(method, name, preset, seconds, timeout):
    calls.append(name)
    if len(calls) == 2:   # the run is killed while the second hot path runs
      raise KeyboardInterrupt
    return {"method": method, "hot_path": name, "error": "fake row"}

  monkeypatch.setattr(run_all, "_run_child", fake_child)
  out = tmp_path / "rows.json"
  with pytest.raises(KeyboardInterrupt):
    run_all.main(["--only=toy", "--preset=smoke", "--seconds=1", f"--json={out}"])
  rows = run_all.json.loads(out.read_text())["rows"]
  assert [r["hot_path"] for r in rows] == ["once"] and calls == ["once", "looped"]
