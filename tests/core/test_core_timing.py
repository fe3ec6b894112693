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
