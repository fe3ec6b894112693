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
import jax.numpy as jnp


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


def compile_and_time(fn: Callable[..., Any], *args: Any, repeats: int = 1,
                     compiler_options: dict[str, Any] | None = None) -> Timing:
  """Compiles ``fn`` (jitted here unless it already is) for ``args``, then times it.

  Args:
    fn: a function or a ``jax.jit`` object.
    *args: the arguments (arrays, or pytrees of them).
    repeats: timed calls after compilation (>= 1; 0 only compiles).
    compiler_options: XLA options for this program (``core.compiler``), as the package
      compiles it; None: the backend's defaults.

  Returns:
    A :class:`Timing`.
  """
  jitted = fn if hasattr(fn, "lower") else jax.jit(fn)
  start = time.perf_counter()
  compiled = jitted.lower(*args).compile(compiler_options=compiler_options)
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


# ------------------------------------------------------------------- distance to the limit


class Cost(NamedTuple):
  """What one call of a program does, from XLA's cost analysis (``None``: not reported)."""
  flops: float | None
  bytes: float | None   # bytes accessed (reads + writes of every fused op's operands)
  exact: bool           # False when a loop's trip count is unknown (``while_loop``): its
  #                       body is counted once and the figures are lower bounds. A ``cond``
  #                       counts as its costliest branch (as XLA's own count does)

  def per(self, units: float) -> "Cost":
    """The cost of one of ``units`` equal parts of the call (a call that runs 10 epochs:
    ``cost.per(10)`` is one epoch's)."""
    if units <= 0:
      raise ValueError(f"units must be > 0; got {units}")
    div = lambda v: None if v is None else v / units
    return Cost(div(self.flops), div(self.bytes), self.exact)


def _xla_cost(compiled) -> tuple[float | None, float | None]:
  try:
    analysis = compiled.cost_analysis()
  except Exception:  # noqa: BLE001  (a backend without cost analysis)
    return None, None
  if isinstance(analysis, (list, tuple)):
    analysis = analysis[0] if analysis else None
  if not analysis:
    return None, None
  get = lambda key: (float(analysis[key]) if analysis.get(key) is not None
                     and analysis[key] >= 0 else None)
  return get("flops"), get("bytes accessed")


def _body_cost(closed) -> tuple[float, float]:
  """XLA's cost of a loop body compiled on its own (its nested loops counted once)."""
  from jax.extend import core as jex_core  # pylint: disable=g-import-not-at-top
  avals = [jax.ShapeDtypeStruct(a.shape, a.dtype) for a in closed.in_avals]
  flops, nbytes = _xla_cost(jax.jit(jex_core.jaxpr_as_fun(closed)).lower(*avals).compile())
  return flops or 0.0, nbytes or 0.0


def _sub_jaxprs(eqn):
  for value in eqn.params.values():
    for item in value if isinstance(value, (tuple, list)) else (value,):
      inner = getattr(item, "jaxpr", item)
      if hasattr(inner, "eqns"):
        yield inner


def _loop_correction(jaxpr) -> tuple[float, float, bool]:
  """What XLA's once-per-body count misses: for every ``scan`` of length L reached without
  passing through another loop, L x (its body's true cost) - its body's cost counted once,
  the body's true cost corrected the same way, recursively. Returns (flops, bytes, exact)."""
  flops = nbytes = 0.0
  exact = True
  for eqn in jaxpr.eqns:
    name = eqn.primitive.name
    if name == "scan":
      body = eqn.params["jaxpr"]
      once_f, once_b = _body_cost(body)
      more_f, more_b, body_exact = _loop_correction(body.jaxpr)
      length = int(eqn.params["length"])
      flops += length * (once_f + more_f) - once_f
      nbytes += length * (once_b + more_b) - once_b
      exact &= body_exact
    elif name == "while":
      exact = False
    elif name == "cond":  # XLA counts a conditional as its costliest branch: so do we
      branches = [_loop_correction(b.jaxpr) for b in eqn.params["branches"]]
      more_f, more_b, _ = max(branches, key=lambda c: c[0])
      flops, nbytes = flops + more_f, nbytes + more_b
      exact = exact and all(b[2] for b in branches)
    else:  # jit, custom_jvp / custom_vjp, remat, closed_call: inlined, counted once
      for inner in _sub_jaxprs(eqn):
        more_f, more_b, inner_exact = _loop_correction(inner)
        flops, nbytes, exact = flops + more_f, nbytes + more_b, exact and inner_exact
  return flops, nbytes, exact


def program_cost(fn: Callable[..., Any], *args: Any, compiled=None) -> Cost:
  """FLOPs and bytes accessed by one call ``fn(*args)``, loops counted by their trip counts.

  XLA's ``cost_analysis()`` counts a loop's body once whatever its trip count; here every
  ``lax.scan`` (and ``fori_loop`` with static bounds, which lowers to one) is counted
  ``length`` times by compiling its body on its own. A ``while_loop`` has no trip count
  before it runs, so its body stays counted once and ``exact`` is False (a lower bound).
  A ``cond`` counts as its costliest branch, as XLA's own count does.

  Args:
    fn: the function (jitted or not) whose program is measured.
    *args: its arguments (arrays or pytrees of them).
    compiled: ``jax.jit(fn).lower(*args).compile()`` if already made (saves a compile).
  """
  if compiled is None:
    jitted = fn if hasattr(fn, "lower") else jax.jit(fn)
    compiled = jitted.lower(*args).compile()
  flops, nbytes = _xla_cost(compiled)
  more_f, more_b, exact = _loop_correction(jax.make_jaxpr(fn)(*args).jaxpr)
  return Cost(None if flops is None else flops + more_f,
              None if nbytes is None else nbytes + more_b, exact)


class Peaks(NamedTuple):
  """This machine's own limits, measured now (see :func:`machine_peaks`)."""
  flops_per_s: float   # a large float32 matmul
  bytes_per_s: float   # large elementwise passes: each value read once, written once
  what: str


def machine_peaks(repeats: int = 5) -> Peaks:
  """The backend's achievable peaks, measured in this process: the median FLOP/s of an
  n x n float32 matmul (2 n^3 flops; n = 2048 on CPU, 8192 on an accelerator) and the
  median bytes/s of ten in-place passes ``x <- x / 2 + 1 / 4`` over m float32 values (8 m
  bytes moved per pass; m = 2^25 on CPU, 2^28 elsewhere). What a hot path achieves is then
  a fraction of these, on the same machine at the same time (:func:`roofline`)."""
  cpu = jax.default_backend() == "cpu"
  n, m = (2048, 2**25) if cpu else (8192, 2**28)
  a = jnp.full((n, n), 0.5, jnp.float32)  # the values do not change the speed
  x = jnp.ones((m,), jnp.float32)
  matmul = compile_and_time(lambda u: u @ u, a, repeats=repeats)
  # Ten passes in one loop: the buffer is updated in place, so no call pays for allocating
  # (and first touching) a fresh output.
  passes = 10
  stream = compile_and_time(
      lambda u: jax.lax.fori_loop(0, passes, lambda _, v: 0.5 * v + 0.25, u), x,
      repeats=repeats)
  flops_per_s = 2.0 * n**3 / matmul.median
  bytes_per_s = 8.0 * m * passes / stream.median
  return Peaks(flops_per_s, bytes_per_s,
               f"peak: {n}x{n} f32 matmul {flops_per_s / 1e9:.1f} GFLOP/s, {m * 4 >> 20} MiB "
               f"elementwise pass {bytes_per_s / 1e9:.1f} GB/s (medians of {repeats})")


def roofline(cost: Cost, seconds_per_call: float, peaks: Peaks) -> dict[str, Any]:
  """Where one call of a program sits against the machine's peaks: achieved FLOP/s and
  bytes/s, each as a fraction of its peak, and the bound by the roofline (compute when the
  program's flops per byte exceed the machine's peak FLOP/s per peak byte/s, else memory)
  with the fraction of that bound's peak reached. ``None`` fields where XLA gave no count."""
  if seconds_per_call <= 0:
    raise ValueError(f"seconds_per_call must be > 0; got {seconds_per_call}")
  flops_s = None if cost.flops is None else cost.flops / seconds_per_call
  bytes_s = None if cost.bytes is None else cost.bytes / seconds_per_call
  frac_f = None if flops_s is None else flops_s / peaks.flops_per_s
  frac_b = None if bytes_s is None else bytes_s / peaks.bytes_per_s
  bound = fraction = None
  if cost.flops and cost.bytes:
    compute = cost.flops / cost.bytes > peaks.flops_per_s / peaks.bytes_per_s
    bound, fraction = ("compute", frac_f) if compute else ("memory", frac_b)
  return {"flops_per_s": flops_s, "bytes_per_s": bytes_s, "flops_fraction": frac_f,
          "bytes_fraction": frac_b, "bound": bound, "bound_fraction": fraction,
          "exact": cost.exact}


def limit_text(cost: Cost, seconds_per_call: float, peaks: Peaks) -> str:
  """A program's place against the machine's peaks, as the benchmark tables print it:
  ``"44.7% memory"`` (the roofline's bound and the fraction of its peak reached), ``">= "``
  in front when a ``while_loop`` makes the count a lower bound, ``"n/a"`` without XLA's
  counts."""
  where = roofline(cost, seconds_per_call, peaks)
  if where["bound"] is None:
    return "n/a"
  return f"{'' if cost.exact else '>= '}{100 * where['bound_fraction']:.3g}% {where['bound']}"


def floor_multiples(cost: Cost, peaks: Peaks, reference_seconds: float
                    ) -> dict[str, float | None]:
  """The least time the machine's peaks allow one call of a program of ``cost``, as
  multiples of ``reference_seconds`` (e.g. one seed's measured time, for an S-seed program):
  ``{"compute": flops / peak FLOP/s / reference, "memory": bytes / peak bytes/s /
  reference}`` (``None`` where XLA gave no count).

  The compute floor is a hard one (every counted flop must run). The memory floor uses XLA's
  bytes accessed, which count every operand of every fused op, cache hits included, so it
  overstates the traffic a program must move: read it as an estimate, not a proof. When a
  ``while_loop`` makes ``cost`` a lower bound, both stay floors.
  """
  if reference_seconds <= 0:
    raise ValueError(f"reference_seconds must be > 0; got {reference_seconds}")
  compute = None if cost.flops is None else cost.flops / peaks.flops_per_s / reference_seconds
  memory = None if cost.bytes is None else cost.bytes / peaks.bytes_per_s / reference_seconds
  return {"compute": compute, "memory": memory}


def seeds_floor_text(cost: Cost, peaks: Peaks, one_seed_seconds: float, seeds: int,
                     goal: float | None = None) -> str:
  """One line on whether the machine can run ``seeds`` vmapped seeds (a program of
  ``cost``) in ``goal`` x one seed's measured time: the floors of :func:`floor_multiples`
  and, when the compute floor alone exceeds the goal, that no schedule can meet it here."""
  floors = floor_multiples(cost, peaks, one_seed_seconds)
  fmt = lambda v: "n/a" if v is None else f"{v:.2f}x"
  line = (f"{seeds} seeds at the machine's peaks need at least {fmt(floors['compute'])} one "
          f"seed's time by their flops, {fmt(floors['memory'])} by XLA's bytes accessed (an "
          "overestimate of the traffic)")
  if goal is not None and floors["compute"] is not None:
    if floors["compute"] > goal:
      line += f": the {goal:g}x goal is out of this machine's reach (compute-bound floor)"
    else:
      line += f": the {goal:g}x goal is within this machine's compute peak"
  return line


def goal_text(cost: Cost, official_seconds: float, goal: float, peaks: Peaks) -> str:
  """What a speed-up goal asks of ours: the fraction of its roofline bound's peak at which a
  program of ``cost`` would run in ``official_seconds / goal`` (``"10x needs 57.6%
  memory"``). Above 100% of the compute peak the goal is out of this machine's reach at
  these flops (every counted flop must run); above 100% of the memory peak it is said so,
  with XLA's bytes accessed an overestimate of the traffic (not a proof). ``">= "`` when a
  ``while_loop`` makes the count a lower bound; ``"n/a"`` without XLA's counts."""
  if official_seconds <= 0 or goal <= 0:
    raise ValueError(f"official_seconds and goal must be > 0; got {official_seconds}, {goal}")
  where = roofline(cost, official_seconds / goal, peaks)
  if where["bound"] is None:
    return "n/a"
  fraction, bound = where["bound_fraction"], where["bound"]
  text = f"{goal:g}x needs {'' if cost.exact else '>= '}{100 * fraction:.3g}% {bound}"
  if fraction > 1 and bound == "compute":
    text += ": out of this machine's reach (flops)"
  elif fraction > 1:
    text += ": above the stream peak by XLA's bytes (an overestimate)"
  return text


class LimitRow(NamedTuple):
  """One row of :func:`print_limit_table`: its printed ``cells``, XLA's ``cost`` of one unit
  of ours and ours' ``seconds`` per unit; with ``official_seconds`` per unit and a ``goal``
  (official / ours), the row also says what the goal needs (:func:`goal_text`)."""
  cells: tuple[str, ...]
  cost: Cost
  seconds: float
  official_seconds: float | None = None
  goal: float | None = None


def print_limit_table(columns: list[str], rows: list[tuple]) -> Peaks:
  """Measures the machine's peaks now (call it after the timed rows, so that the peak
  measurement's buffers do not share the caches with them) and prints a benchmark's
  markdown table: ``columns`` and an "ours of peak" column, one line per row
  (:class:`LimitRow` or a plain ``(cells, cost, seconds[, official_seconds, goal])``
  tuple) with ours' place against the peaks (:func:`limit_text` of one unit's ``cost`` at
  ``seconds`` per unit), and, when any row has a goal, a "goal needs" column
  (:func:`goal_text`). Returns the peaks."""
  rows = [LimitRow(*row) for row in rows]
  with_goals = any(r.goal is not None and r.official_seconds for r in rows)
  peaks = machine_peaks()
  print(peaks.what)
  heads = [*columns, "ours of peak"] + (["goal needs"] if with_goals else [])
  print("\n| " + " | ".join(heads) + " |")
  print("|" + "---|" * len(heads))
  for row in rows:
    cells = [*row.cells, limit_text(row.cost, row.seconds, peaks)]
    if with_goals:
      cells.append(goal_text(row.cost, row.official_seconds, row.goal, peaks)
                   if row.goal is not None and row.official_seconds else "-")
    print("| " + " | ".join(cells) + " |")
  return peaks

