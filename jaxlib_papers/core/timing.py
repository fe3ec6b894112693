"""Compile-vs-run timing, one way for every train module and benchmark.

Compilation dominates small CPU runs, so every reported time keeps the two apart:
:func:`compile_and_time` lowers and compiles once, then times ``repeats`` calls of the
compiled program (each waited for with ``block_until_ready``). The side-by-side benchmarks
report every figure as :func:`spread` and say where it ran with :func:`machine_line`.
"""

from __future__ import annotations

import os
import statistics
import time
from collections.abc import Callable
from typing import Any, NamedTuple

import jax


class Timing(NamedTuple):
  compiled: Callable[..., Any]   # the compiled program (call it with the same arguments)
  compile_seconds: float         # lower + compile
  run_seconds: list[float]       # one entry per timed call
  output: Any                    # the last call's output

  @property
  def median(self) -> float:
    return statistics.median(self.run_seconds)

  @property
  def min(self) -> float:
    return min(self.run_seconds)


def time_calls(compiled: Callable[..., Any], *args: Any, repeats: int = 1
               ) -> tuple[list[float], Any]:
  """Seconds of ``repeats`` calls ``compiled(*args)``, and the last output."""
  if int(repeats) < 1:
    raise ValueError(f"repeats must be >= 1; got {repeats}")
  seconds, output = [], None
  for _ in range(int(repeats)):
    start = time.perf_counter()
    output = jax.block_until_ready(compiled(*args))
    seconds.append(time.perf_counter() - start)
  return seconds, output


def compile_and_time(fn: Callable[..., Any], *args: Any, repeats: int = 1) -> Timing:
  """Compiles ``fn`` (jitted here unless it already is) for ``args``, then times it.

  Args:
    fn: a function or a ``jax.jit`` object.
    *args: the arguments (arrays, or pytrees of them).
    repeats: timed calls after compilation (>= 1; 0 only compiles).

  Returns:
    A :class:`Timing`.
  """
  jitted = fn if hasattr(fn, "lower") else jax.jit(fn)
  start = time.perf_counter()
  compiled = jitted.lower(*args).compile()
  compile_seconds = time.perf_counter() - start
  if int(repeats) == 0:
    return Timing(compiled, compile_seconds, [], None)
  seconds, output = time_calls(compiled, *args, repeats=repeats)
  return Timing(compiled, compile_seconds, seconds, output)


def spread(values: list[float], digits: int = 2, suffix: str = "") -> str:
  """``"median (min-max)"`` of ``values`` with ``digits`` decimals, ``suffix`` after the
  median (e.g. ``"x"`` for a ratio): how every side-by-side figure is printed."""
  if not values:
    raise ValueError("spread needs at least one value")
  f = f".{int(digits)}f"
  return (f"{statistics.median(values):{f}}{suffix} "
          f"({min(values):{f}}-{max(values):{f}})")


def side_by_side_row(name: str, what: str, ours: list[float], official: list[float],
                     compile_s: float, digits: int = 2) -> tuple[str, ...]:
  """One table row of a side-by-side benchmark: name, what is timed, ours, compile seconds,
  the official code's and the per-pair ratios official / ours (``"-"`` where the official
  side did not run); ``ours`` and ``official`` are paired samples taken alternately."""
  ratios = [o / u for o, u in zip(official, ours)]
  return (name, what, spread(ours, digits), f"{compile_s:.1f}",
          spread(official, digits) if official else "-",
          spread(ratios, 1, "x") if ratios else "-")


def machine_line(torch: Any = None) -> str:
  """Where a benchmark ran: jax version and backend, BLAS threads, CPUs, 1-minute load
  (and the torch version and its thread count when ``torch`` is the imported module)."""
  line = (f"jax {jax.__version__} {jax.default_backend()}, OPENBLAS_NUM_THREADS="
          f"{os.environ.get('OPENBLAS_NUM_THREADS')}, {os.cpu_count()} CPUs, load "
          f"{os.getloadavg()[0]:.1f}")
  if torch is not None:
    line = f"torch {torch.__version__}, {torch.get_num_threads()} torch threads; " + line
  return line
