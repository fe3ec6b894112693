"""Runs the solvers of a config on its problem: ``run(config, workdir) -> results``.

LEN has no training loop: each solver is one compiled ``lax.while_loop``. For every method
the result records iterations, oracle calls (#F, #J, cost = #F + d #J), the final ||F||,
compile and run seconds, and the ||F|| history; ``<workdir>/results.json`` gets them all.
"""

from __future__ import annotations

import pathlib
from typing import Any

import jax
import jax.numpy as jnp
import numpy as np

from jaxlib_papers.core import timing, writers
from jaxlib_papers.core.precision import enable_x64
from jaxlib_papers.minimax import data as data_lib
from jaxlib_papers.minimax import kernel, problems


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


def method_label(kind: str, value: float) -> str:
  if kind == "eg":
    return f"EG(eta={value:g})"
  return "EG-2" if int(value) == 1 else f"LEN(m={int(value)})"


def _summarise(result: kernel.SolveResult, compile_s: float, times: list[float]
               ) -> dict[str, Any]:
  iters = int(result.num_iters)
  final = float(result.grad_norm)
  if bool(result.converged):
    status = "converged"
  elif not np.isfinite(final):
    # The while loop stops on a NaN ||F|| (NaN > tol is False): say where it happened.
    status = f"non-finite ||F|| at iteration {iters}"
  else:
    status = "iteration budget exhausted"
  return dict(
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


def compile_len_program(problem, config):
  """(jitted solve(z0, m, M), compile seconds): one program for every m of a config."""
  solve_cfg = config.solve
  program = kernel.make_len_sweep(
      problem, tol=solve_cfg.tol, max_iters=int(solve_cfg.max_iters),
      factorization=resolve_factorization(config), root_rtol=solve_cfg.root_rtol)
  with enable_x64():
    z0 = jnp.zeros(problem.dim, jnp.float64)
    timed = timing.compile_and_time(program, z0, jnp.int32(1), jnp.float64(1.0), repeats=0)
    return timed.compiled, timed.compile_seconds


def solve_one(problem: problems.MinimaxProblem, kind: str, value: float, config,
              repeats: int = 1, compiled_len=None
              ) -> tuple[kernel.SolveResult, dict[str, Any]]:
  """Compiles and runs one method (``kind`` "eg" with eta=value, or "len" with m=value).

  Args:
    problem, kind, value, config: what to run.
    repeats: timed runs after compilation (run_seconds is their median).
    compiled_len: optional (compiled solve(z0, m, M), compile seconds) from one LEN program
      shared by every m (then compile_seconds is that program's, paid once).

  Returns:
    (the raw SolveResult, its summary).
  """
  solve_cfg = config.solve
  with enable_x64():
    z0 = jnp.zeros(problem.dim, jnp.float64)
    if kind == "eg":
      solve = kernel.make_eg(problem, eta=float(value), tol=solve_cfg.tol,
                             max_iters=int(solve_cfg.eg_max_iters))
      args = (z0,)
    elif kind == "len":
      rho = problem.lipschitz_jacobian
      if rho is None:
        raise ValueError("LEN needs problem.lipschitz_jacobian (rho) to set M")
      reg_weight = solve_cfg.reg_factor * rho * int(value)
      if compiled_len is not None:
        solve, compile_s = compiled_len
        args = (z0, jnp.int32(value), jnp.float64(reg_weight))
      else:
        solve = kernel.make_len(
            problem, m=int(value), reg_weight=reg_weight, tol=solve_cfg.tol,
            max_iters=int(solve_cfg.max_iters), factorization=resolve_factorization(config),
            root_rtol=solve_cfg.root_rtol)
        args = (z0,)
    else:
      raise ValueError(f"kind must be 'eg' or 'len', got {kind!r}")
    if kind == "eg" or compiled_len is None:
      timed = timing.compile_and_time(solve, *args, repeats=0)
      solve, compile_s = timed.compiled, timed.compile_seconds
    times, result = timing.time_calls(solve, *args, repeats=max(1, repeats))
    return result, _summarise(result, compile_s, times)


def run(config, workdir: str | pathlib.Path | None = None, *, verbose: bool = True,
        compiled_len=None) -> dict[str, Any]:
  """Runs EG (each eta) and LEN (each m; m = 1 is EG-2) on the config's problem.

  Args:
    config: a ``configs/default.py`` config.
    workdir: folder for ``results.json`` (None: nothing written).
    verbose: print one line per method.
    compiled_len: optional :func:`compile_len_program` output to reuse (saves a compile).

  Returns:
    {"problem", "dim", "data", "reg_rule", "methods": {label: summary}}.
  """
  with enable_x64():
    problem, source = build_problem(config)
    results: dict[str, Any] = dict(
        problem=problem.name, dim=problem.dim, data=source,
        reg_rule=f"M = {config.solve.reg_factor:.4g} * rho * m, rho = "
                 f"{problem.lipschitz_jacobian:.4g}",
        factorization=resolve_factorization(config), methods={})
    jobs = [("eg", eta) for eta in config.methods.eg_etas]
    jobs += [("len", m) for m in config.methods.len_ms]
    if compiled_len is None and len(config.methods.len_ms) > 1:
      compiled_len = compile_len_program(problem, config)  # compile once for every m
    for kind, value in jobs:
      label = method_label(kind, value)
      _, summary = solve_one(problem, kind, value, config, compiled_len=compiled_len)
      results["methods"][label] = summary
      if verbose:
        if summary["status"] != "converged":
          print(f"WARNING {problem.name} {label}: {summary['status']}", flush=True)
        print(f"{problem.name} {label:>14}: {summary['iterations']:7d} it, "
              f"#J {summary['num_jacobian_calls']:4d}, cost {summary['oracle_cost']:10.0f}, "
              f"||F|| {summary['final_grad_norm']:.2e}, run {summary['run_seconds']:.3f} s "
              f"(compile {summary['compile_seconds']:.1f} s)", flush=True)
  if workdir is not None:
    writers.write_json(pathlib.Path(workdir) / "results.json", results, indent=1)
  return results
