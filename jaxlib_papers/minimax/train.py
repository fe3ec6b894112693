"""Runs the solvers of a config on its problem: ``run(config, workdir) -> RunResult``.

LEN has no training loop: each solver is one compiled ``lax.while_loop`` (a
``core.contract.Solver`` run by ``contract.iterate``). The config becomes
:class:`SolveSettings` once (:func:`settings_from_config`, which rejects bad values before
anything is solved). For every method the typed result records iterations, oracle calls
(#F, #J, cost = #F + d #J), the final ||F||, compile and run seconds, and the ||F||
history (:class:`MethodResult`); ``<workdir>/results.json`` gets them all
(``core.results.write``).
"""

from __future__ import annotations

import dataclasses
import pathlib
from typing import Any, NamedTuple

import jax
import jax.numpy as jnp
import numpy as np

from jaxlib_papers.core import config as config_lib
from jaxlib_papers.core import results, timing
from jaxlib_papers.core.precision import enable_x64
from jaxlib_papers.minimax import data as data_lib
from jaxlib_papers.minimax import kernel, problems
from jaxlib_papers.minimax.configs import default as default_config


def build_problem(config) -> tuple[problems.MinimaxProblem, str]:
  """The problem of ``config.problem`` and where its data came from ("generated"/"shared...")."""
  spec = config.problem
  if spec.kind == "cubic_bilinear":
    return problems.cubic_bilinear(int(spec.n), seed=int(config.seed)), "generated"
  if spec.kind == "fairness":
    if spec.data_file:
      fair = data_lib.load_heart(spec.data_file)
    else:
      fair = data_lib.generated_fairness_data(seed=int(config.seed))
    problem = problems.fairness_logistic(
        fair.features, fair.labels, fair.sensitive, lam=spec.lam, gamma=spec.gamma,
        beta=spec.beta, rho=spec.rho, name=f"fairness({fair.source})")
    return problem, fair.source
  raise ValueError(
      f"config.problem.kind must be 'cubic_bilinear' or 'fairness', got {spec.kind!r}")


def solve(problem: problems.MinimaxProblem, method: str, z0: Any = None, **kwargs
          ) -> kernel.SolveResult | kernel.RestartResult:
  """Validates z0, then jits and runs one solver in float64.

  Args:
    problem: the oracles.
    method: "len" | "eg2" | "eg" | "len_restart".
    z0: [d] start (default zeros), finite.
    **kwargs: the solver's arguments (see the ``kernel.make_*`` functions).

  Returns:
    The solver's result (float64 arrays).

  Raises:
    ValueError: z0 of the wrong shape or not finite, or bad solver arguments.
  """
  with enable_x64():
    z0 = np.zeros(problem.dim) if z0 is None else z0
    z0 = np.asarray(z0, dtype=np.float64)
    if z0.shape != (problem.dim,):
      raise ValueError(f"z0 must have shape ({problem.dim},), got {z0.shape}")
    if not np.all(np.isfinite(z0)):
      raise ValueError("z0 contains NaN or Inf")
    program = kernel.make_solver(problem, method, **kwargs)
    return jax.block_until_ready(jax.jit(program)(jnp.asarray(z0)))


class SolveSettings(NamedTuple):
  """The solver settings of a config (``config.solve`` with the factorization resolved).

  Attributes:
    tol: stop at ||F(z_{t+1/2})|| <= tol.
    max_iters: LEN / EG-2 budget.
    eg_max_iters: EG budget.
    reg_factor: M = reg_factor * rho * m (> 0).
    factorization: the resolved factorization ("schur", "hessenberg", "eig", "dense").
    root_rtol: relative tolerance of the lam search.
  """
  tol: float
  max_iters: int
  eg_max_iters: int
  reg_factor: float
  factorization: str
  root_rtol: float


def settings_from_config(config) -> SolveSettings:
  """``config.solve`` as :class:`SolveSettings`, checked before anything is solved.

  Raises:
    ValueError: a bad value, naming its config key (a negative ``reg_factor`` would make M
      negative and the lam search NaN).
  """
  spec = config.solve
  if not spec.reg_factor > 0:
    raise ValueError(f"config.solve.reg_factor must be > 0 (M = reg_factor * rho * m); "
                     f"got {spec.reg_factor}")
  if not spec.tol >= 0:
    raise ValueError(f"config.solve.tol must be >= 0; got {spec.tol}")
  for key in ("max_iters", "eg_max_iters"):
    if int(spec[key]) < 1:
      raise ValueError(f"config.solve.{key} must be >= 1; got {spec[key]}")
  return SolveSettings(tol=spec.tol, max_iters=int(spec.max_iters),
                       eg_max_iters=int(spec.eg_max_iters), reg_factor=spec.reg_factor,
                       factorization=resolve_factorization(config),
                       root_rtol=spec.root_rtol)


@dataclasses.dataclass(frozen=True)
class MethodResult:
  """One method's run (a row of :class:`RunResult`)."""
  status: str                     # "converged", "iteration budget exhausted", ...
  iterations: int
  num_field_calls: int            # #F
  num_jacobian_calls: int         # #J
  oracle_cost: float              # #F + d #J
  converged: bool
  final_grad_norm: float          # ||F(z_{T-1/2})||
  compile_seconds: float
  run_seconds: float              # median of the timed runs
  run_seconds_min: float
  grad_norm_history: list[float]  # [iterations] ||F(z_{t+1/2})||
  dist_history: list[float]       # [iterations] ||z_{t+1/2} - z*|| (NaN: z* unknown)


@dataclasses.dataclass(frozen=True)
class RunResult:
  """What :func:`run` returns (and writes as ``results.json``)."""
  problem: str                    # the problem's name
  dim: int                        # d
  data: str                       # "generated" or the data file's source
  reg_rule: str                   # how M was set
  factorization: str
  methods: dict[str, MethodResult]  # {label: result}, EG first, then LEN by m


def method_label(kind: str, value: float) -> str:
  if kind == "eg":
    return f"EG(eta={value:g})"
  return "EG-2" if int(value) == 1 else f"LEN(m={int(value)})"


def _summarise(result: kernel.SolveResult, compile_s: float, times: list[float]
               ) -> MethodResult:
  iters = int(result.num_iters)
  final = float(result.grad_norm)
  if bool(result.converged):
    status = "converged"
  elif not np.isfinite(final):
    # The while loop stops on a NaN ||F|| (NaN > tol is False): say where it happened.
    status = f"non-finite ||F|| at iteration {iters}"
  else:
    status = "iteration budget exhausted"
  return MethodResult(
      status=status,
      iterations=iters,
      num_field_calls=int(result.num_field_calls),
      num_jacobian_calls=int(result.num_jacobian_calls),
      oracle_cost=float(result.oracle_cost),
      converged=bool(result.converged),
      final_grad_norm=float(result.grad_norm),
      compile_seconds=compile_s,
      run_seconds=float(np.median(times)),
      run_seconds_min=float(np.min(times)),
      grad_norm_history=np.asarray(result.grad_norm_history[:iters]).tolist(),
      dist_history=np.asarray(result.dist_history[:iters]).tolist(),
  )


def resolve_factorization(config) -> str:
  """config.solve.factorization, with "auto" = Hessenberg for the (monotone) cubic saddle
  and Schur (pivoting-free LU not guaranteed safe) for the fairness problem."""
  name = config.solve.factorization
  if name == "auto":
    return "hessenberg" if config.problem.kind == "cubic_bilinear" else "schur"
  return name


def _as_settings(config_or_settings) -> SolveSettings:
  if isinstance(config_or_settings, SolveSettings):
    return config_or_settings
  return settings_from_config(config_or_settings)


def compile_len_program(problem, config):
  """(jitted solve(z0, m, M), compile seconds): one program for every m of a config.

  ``config``: the config, or its :class:`SolveSettings`.
  """
  settings = _as_settings(config)
  program = kernel.make_len_sweep(
      problem, tol=settings.tol, max_iters=settings.max_iters,
      factorization=settings.factorization, root_rtol=settings.root_rtol)
  with enable_x64():
    z0 = jnp.zeros(problem.dim, jnp.float64)
    timed = timing.compile_and_time(program, z0, jnp.int32(1), jnp.float64(1.0), repeats=0)
    return timed.compiled, timed.compile_seconds


def _method_program(problem: problems.MinimaxProblem, kind: str, value: float,
                    settings: SolveSettings, compiled_len, z0: jax.Array):
  """(program, its arguments, whether it still needs compiling) of one method."""
  if kind == "eg":
    solve = kernel.make_eg(problem, eta=float(value), tol=settings.tol,
                           max_iters=settings.eg_max_iters)
    return solve, (z0,), True
  if kind != "len":
    raise ValueError(f"kind must be 'eg' or 'len', got {kind!r}")
  rho = problem.lipschitz_jacobian
  if rho is None:
    raise ValueError("LEN needs problem.lipschitz_jacobian (rho) to set M")
  reg_weight = settings.reg_factor * rho * int(value)
  if compiled_len is not None:
    return compiled_len, (z0, jnp.int32(value), jnp.float64(reg_weight)), False
  solve = kernel.make_len(
      problem, m=int(value), reg_weight=reg_weight, tol=settings.tol,
      max_iters=settings.max_iters, factorization=settings.factorization,
      root_rtol=settings.root_rtol)
  return solve, (z0,), True


def solve_one(problem: problems.MinimaxProblem, kind: str, value: float, config,
              repeats: int = 1, compiled_len=None
              ) -> tuple[kernel.SolveResult, MethodResult]:
  """Compiles and runs one method (``kind`` "eg" with eta=value, or "len" with m=value).

  Args:
    problem, kind, value: what to run.
    config: the config, or its :class:`SolveSettings`.
    repeats: timed runs after compilation (run_seconds is their median).
    compiled_len: optional (compiled solve(z0, m, M), compile seconds) from one LEN program
      shared by every m (then compile_seconds is that program's, paid once).

  Returns:
    (the raw SolveResult, its :class:`MethodResult`).
  """
  settings = _as_settings(config)
  with enable_x64():
    z0 = jnp.zeros(problem.dim, jnp.float64)
    shared = None if kind == "eg" else compiled_len
    solve, args, needs_compile = _method_program(
        problem, kind, value, settings, None if shared is None else shared[0], z0)
    if needs_compile:
      timed = timing.compile_and_time(solve, *args, repeats=0)
      solve, compile_s = timed.compiled, timed.compile_seconds
    else:
      compile_s = shared[1]
    times, result = timing.time_calls(solve, *args, repeats=max(1, repeats))
    return result, _summarise(result, compile_s, times)


def _print_method(problem_name: str, label: str, s: MethodResult) -> None:
  if s.status != "converged":
    print(f"WARNING {problem_name} {label}: {s.status}", flush=True)
  print(f"{problem_name} {label:>14}: {s.iterations:7d} it, "
        f"#J {s.num_jacobian_calls:4d}, cost {s.oracle_cost:10.0f}, "
        f"||F|| {s.final_grad_norm:.2e}, run {s.run_seconds:.3f} s "
        f"(compile {s.compile_seconds:.1f} s)", flush=True)


def run(config, workdir: str | pathlib.Path | None = None, *, verbose: bool = True,
        compiled_len=None) -> RunResult:
  """Runs EG (each eta) and LEN (each m; m = 1 is EG-2) on the config's problem.

  Args:
    config: a ``configs/default.py`` config.
    workdir: folder for ``results.json`` (None: nothing written).
    verbose: print one line per method.
    compiled_len: optional :func:`compile_len_program` output to reuse (saves a compile).

  Returns:
    A :class:`RunResult`.

  Raises:
    ValueError: a bad config value (before anything is solved).
  """
  config_lib.validate(config, default_config.CONSTRAINTS)
  settings = settings_from_config(config)
  with enable_x64():
    problem, source = build_problem(config)
    jobs = [("eg", eta) for eta in config.methods.eg_etas]
    jobs += [("len", m) for m in config.methods.len_ms]
    if compiled_len is None and len(config.methods.len_ms) > 1:
      compiled_len = compile_len_program(problem, settings)  # compile once for every m
    methods: dict[str, MethodResult] = {}
    for kind, value in jobs:
      label = method_label(kind, value)
      _, methods[label] = solve_one(problem, kind, value, settings,
                                    compiled_len=compiled_len)
      if verbose:
        _print_method(problem.name, label, methods[label])
  result = RunResult(
      problem=problem.name, dim=problem.dim, data=source,
      reg_rule=f"M = {settings.reg_factor:.4g} * rho * m, rho = "
               f"{problem.lipschitz_jacobian:.4g}",
      factorization=settings.factorization, methods=methods)
  results.write(result, workdir, indent=1)
  return result
