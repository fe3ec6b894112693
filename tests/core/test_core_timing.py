"""core.timing: compile once, then time the compiled program; outputs are the program's."""

import types

import jax
import jax.numpy as jnp
import numpy as np
import pytest

from jaxlib_papers.core import timing


def test_compile_and_time_returns_the_programs_output_and_one_time_per_call():
  x = jnp.arange(6.0).reshape(2, 3)
  timed = timing.compile_and_time(lambda a, b: (a * b).sum(0), x, 2.0, repeats=3)
  np.testing.assert_array_equal(timed.output, [6.0, 10.0, 14.0])
  assert len(timed.run_seconds) == 3 and timed.min <= timed.median
  assert timed.compile_seconds > 0
  np.testing.assert_array_equal(timed.compiled(x, 2.0), timed.output)
  only_compiled = timing.compile_and_time(jax.jit(jnp.sin), x, repeats=0)
  assert only_compiled.run_seconds == [] and only_compiled.output is None
  with pytest.raises(ValueError, match="repeats"):
    timing.time_calls(only_compiled.compiled, x, repeats=0)


def test_compile_and_time_hands_the_programs_options_to_xla():
  """The options reach XLA (a bad value is XLA's error) and keep the function."""
  x = jnp.arange(6.0).reshape(2, 3)
  fn = lambda a: jnp.tanh(a @ a.T)
  plain = timing.compile_and_time(fn, x, repeats=1)
  options = {"xla_cpu_experimental_ynn_fusion_type": ""}   # compiler.cpu_threaded_dots
  threaded = timing.compile_and_time(fn, x, repeats=1, compiler_options=options)
  np.testing.assert_allclose(threaded.output, plain.output, rtol=1e-6)
  with pytest.raises(Exception, match="xla_cpu_experimental_ynn_fusion_type"):
    timing.compile_and_time(fn, x, repeats=0,
                            compiler_options={"xla_cpu_experimental_ynn_fusion_type": "x"})


def test_spread_and_machine_line():
  assert timing.spread([3.0, 1.0, 2.0]) == "2.00 (1.00-3.00)"
  assert timing.spread([4.0, 1.0], 1, "x") == "2.5x (1.0-4.0)"  # median of an even count
  assert timing.side_by_side_row("a", "b", [1.0, 2.0], [4.0, 4.0], 0.25) == (
      "a", "b", "1.50 (1.00-2.00)", "0.2", "4.00 (4.00-4.00)", "3.0x (2.0-4.0)")
  assert timing.side_by_side_row("a", "b", [1.0], [], 1.0, 3)[4:] == ("-", "-")
  with pytest.raises(ValueError, match="at least one"):
    timing.spread([])
  line = timing.machine_line()
  assert line.startswith(f"jax {jax.__version__} cpu,") and "load" in line
  fake_torch = types.SimpleNamespace(__version__="9.9", get_num_threads=lambda: 3)
  assert timing.machine_line(fake_torch).startswith("torch 9.9, 3 torch threads; jax ")


N = 32


def _matmul_flops(times: int) -> float:
  return times * 2.0 * N**3


def test_program_cost_counts_scans_by_their_trip_counts_and_flags_while_loops():
  """XLA counts a loop body once; program_cost counts a scan (nested, or a fori_loop with
  static bounds) as many times as it runs, and marks a while_loop's count a lower bound."""
  x = jnp.ones((N, N), jnp.float32)
  step = lambda c: c @ c / N
  once = timing.program_cost(step, x)
  assert once.exact and once.flops == pytest.approx(_matmul_flops(1), rel=0.02)
  scan = lambda a: jax.lax.scan(lambda c, _: (step(c), None), a, None, length=7)[0]
  assert timing.program_cost(scan, x).flops == pytest.approx(_matmul_flops(7), rel=0.02)
  nested = lambda a: jax.lax.scan(
      lambda c, _: (jax.lax.fori_loop(0, 3, lambda i, d: step(d), c), None), a, None,
      length=5)[0]
  cost = timing.program_cost(jax.jit(nested), x)
  assert cost.exact and cost.flops == pytest.approx(_matmul_flops(15), rel=0.02)
  assert cost.bytes > 5 * once.bytes  # the bytes are counted per trip too
  branchy = lambda flag, a: jax.lax.cond(flag, scan, step, a)  # as XLA: the costlier branch
  cost = timing.program_cost(branchy, True, x)
  assert cost.exact and cost.flops == pytest.approx(_matmul_flops(7), rel=0.02)
  loop = lambda a: jax.lax.while_loop(lambda c: c[0, 0] < 1e6, lambda c: step(c) + 1, a)
  bound = timing.program_cost(loop, x)
  assert not bound.exact and bound.flops == pytest.approx(_matmul_flops(1), rel=0.05)


def test_roofline_names_the_bound_and_its_fraction():
  peaks = timing.Peaks(flops_per_s=100.0, bytes_per_s=10.0, what="toy")  # balance 10 / B
  compute = timing.roofline(timing.Cost(400.0, 20.0, True), 8.0, peaks)   # 20 flop/B
  assert compute["bound"] == "compute"
  assert compute["bound_fraction"] == pytest.approx(0.5)        # 50 of 100 FLOP/s
  assert compute["bytes_fraction"] == pytest.approx(0.25)
  memory = timing.roofline(timing.Cost(40.0, 20.0, False), 4.0, peaks)    # 2 flop/B
  assert memory["bound"] == "memory" and memory["bound_fraction"] == pytest.approx(0.5)
  assert not memory["exact"]
  assert timing.roofline(timing.Cost(None, None, True), 1.0, peaks)["bound"] is None
  with pytest.raises(ValueError, match="seconds_per_call"):
    timing.roofline(timing.Cost(1.0, 1.0, True), 0.0, peaks)


def test_machine_peaks_are_positive_and_a_matmul_reaches_a_sane_fraction():
  peaks = timing.machine_peaks(repeats=1)
  assert peaks.flops_per_s > 1e8 and peaks.bytes_per_s > 1e7
  assert "GFLOP/s" in peaks.what and "GB/s" in peaks.what


def test_limit_text_prints_the_bound_and_marks_lower_bounds():
  peaks = timing.Peaks(flops_per_s=100.0, bytes_per_s=10.0, what="toy")
  assert timing.limit_text(timing.Cost(400.0, 20.0, True), 8.0, peaks) == "50% compute"
  assert timing.limit_text(timing.Cost(40.0, 20.0, False), 4.0, peaks) == ">= 50% memory"
  assert timing.limit_text(timing.Cost(None, None, True), 1.0, peaks) == "n/a"


def test_floor_multiples_and_the_seeds_verdict():
  peaks = timing.Peaks(flops_per_s=100.0, bytes_per_s=10.0, what="toy")
  # 8 seeds: 800 flops take >= 8 s at the peak, 40 bytes >= 4 s; one seed measured 2 s.
  floors = timing.floor_multiples(timing.Cost(800.0, 40.0, True), peaks, 2.0)
  assert floors == {"compute": pytest.approx(4.0), "memory": pytest.approx(2.0)}
  assert timing.floor_multiples(timing.Cost(None, 40.0, True), peaks, 2.0)["compute"] is None
  out = timing.seeds_floor_text(timing.Cost(800.0, 40.0, True), peaks, 2.0, 8, goal=3.0)
  assert "4.00x" in out and "2.00x" in out and "out of this machine's reach" in out
  within = timing.seeds_floor_text(timing.Cost(400.0, 40.0, True), peaks, 2.0, 8, goal=3.0)
  assert "2.00x" in within and "within this machine's compute peak" in within
  with pytest.raises(ValueError, match="reference_seconds"):
    timing.floor_multiples(timing.Cost(1.0, 1.0, True), peaks, 0.0)


def test_cost_per_unit_divides_the_counts():
  assert timing.Cost(10.0, None, False).per(4) == timing.Cost(2.5, None, False)
  with pytest.raises(ValueError, match="units"):
    timing.Cost(1.0, 1.0, True).per(0)


def test_print_limit_table_adds_the_peak_column(monkeypatch, capsys):
  peaks = timing.Peaks(flops_per_s=100.0, bytes_per_s=10.0, what="toy peaks")
  monkeypatch.setattr(timing, "machine_peaks", lambda: peaks)
  out = timing.print_limit_table(["a", "b"], [(("x", "1"), timing.Cost(400.0, 20.0, True), 8.0)])
  assert out is peaks
  lines = capsys.readouterr().out.splitlines()
  assert lines[0] == "toy peaks"
  assert "| a | b | ours of peak |" in lines and "|---|---|---|" in lines
  assert lines[-1] == "| x | 1 | 50% compute |"


def test_goal_text_is_the_fraction_of_peak_the_goal_asks_for():
  peaks = timing.Peaks(flops_per_s=100.0, bytes_per_s=10.0, what="toy")
  compute = timing.Cost(400.0, 20.0, True)  # 20 flops / byte > 10: compute-bound
  # official 40 s, goal 10x: ours in 4 s, 400 flops in 4 s = 100 flop/s, the peak itself
  assert timing.goal_text(compute, 40.0, 10.0, peaks) == "10x needs 100% compute"
  assert timing.goal_text(compute, 80.0, 10.0, peaks) == "10x needs 50% compute"
  over = timing.goal_text(compute, 20.0, 10.0, peaks)
  assert over.startswith("10x needs 200% compute") and "out of this machine's reach" in over
  memory = timing.Cost(40.0, 20.0, False)  # 2 flops / byte < 10: memory-bound, lower bound
  # official 20 s, goal 4x: 20 bytes in 5 s = 4 bytes/s, 40% of the stream peak
  assert timing.goal_text(memory, 20.0, 4.0, peaks) == "4x needs >= 40% memory"
  assert "overestimate" in timing.goal_text(memory, 2.0, 4.0, peaks)
  assert timing.goal_text(timing.Cost(None, None, True), 1.0, 2.0, peaks) == "n/a"
  with pytest.raises(ValueError, match="goal"):
    timing.goal_text(compute, 1.0, 0.0, peaks)


def test_print_limit_table_adds_a_goal_column_when_a_row_has_a_goal(monkeypatch, capsys):
  peaks = timing.Peaks(flops_per_s=100.0, bytes_per_s=10.0, what="toy peaks")
  monkeypatch.setattr(timing, "machine_peaks", lambda: peaks)
  cost = timing.Cost(400.0, 20.0, True)
  timing.print_limit_table(["a"], [(("x",), cost, 8.0, 80.0, 10.0),
                                   timing.LimitRow(("y",), cost, 8.0)])
  lines = capsys.readouterr().out.splitlines()
  assert "| a | ours of peak | goal needs |" in lines
  assert lines[-2] == "| x | 50% compute | 10x needs 50% compute |"
  assert lines[-1] == "| y | 50% compute | - |"
