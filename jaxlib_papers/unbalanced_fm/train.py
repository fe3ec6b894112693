"""The experiment: ``run(config, workdir) -> RunResult``.

1. Problem A: the cutoff coupling of reweighted modes against its closed form (acceptance,
   TV of q0 and q1), every seed and cutoff in one vmapped program.
2. Problem B's coupling: per seed a pool of apo and holo conformers and their Kabsch RMSD
   costs (computed once, shared by every cutoff); acceptance, D2, TVs, E_q[c^2] per
   cutoff; partial OT at the same mass beside it.
3. The docking flow (stage ``dock``): one member per (cutoff, energy weight, seed), all in
   one compiled program through ``core.stages`` / ``core.train_loop`` (checkpoints, resume),
   evaluated from p0: success (RMSD to the nearest holo mode < .5 A), class TV against p1,
   validity, straightness (Euler K against 64 steps).
4. The relaxation flow (stage ``relax``): docked candidates to holo with the candidate rule
   and the energy term; 2 Euler steps, then the filter and the least-moved pick.

The user's own problem: ``run(..., ligand=problems.make_ligand(LigandSettings(...)))``.
"""

from __future__ import annotations

import dataclasses
import pathlib
import time
from typing import Any, NamedTuple

import jax
import jax.numpy as jnp
import numpy as np

from jaxlib_papers.core import config as config_lib
from jaxlib_papers.core import results, stages
from jaxlib_papers.unbalanced_fm import couplings, geometry, kernel, problems
from jaxlib_papers.unbalanced_fm.configs import default as default_config

STRAIGHT_STEPS = (1, 2, 4, 8, 16, 32)   # Euler K compared with 64 steps
STRAIGHT_REFERENCE, STRAIGHT_TOLERANCE = 64, 0.05
SUCCESS_RMSD = 0.5


class Settings(NamedTuple):
  """What a config asks :func:`run` for, checked once."""
  seed: int
  num_seeds: int
  net: kernel.NetSettings
  config: Any            # the validated ConfigDict (its groups read by the stages)


def settings_from_config(config, dim: int) -> Settings:
  """Validates ``config`` (every key against ``CONSTRAINTS``) before anything compiles."""
  config_lib.validate(config, default_config.CONSTRAINTS)
  net = kernel.NetSettings(dim, int(config.net.hidden), int(config.net.depth),
                           int(config.net.time_embed), float(config.net.lr))
  return Settings(int(config.seed), int(config.num_seeds), net, config)


@dataclasses.dataclass(frozen=True)
class RunResult:
  modes: dict[str, Any]       # problem A: deltas, acceptance/tv0/tv1 [S, n_delta], closed
  coupling: dict[str, Any]    # problem B: deltas (last inf), stats [S, n_delta], partial
  dock: dict[str, Any]        # per member [R]: delta, energy_weight, seed, metrics
  relax: dict[str, Any]       # per seed [S]: input/relaxed/filtered validity
  seconds: dict[str, float]
  histories: dict[str, Any] = results.in_memory()
  samples: dict[str, Any] = results.in_memory()   # conformers for the figures
  states: dict[str, Any] = results.in_memory()


def _rngs(seed: int, label: int, num: int) -> list[np.random.Generator]:
  """One host generator per seed for the data set ``label`` of the run."""
  return [np.random.default_rng([seed, label, s]) for s in range(num)]


# ------------------------------------------------------------------------- problem A


def modes_coupling(x0: jax.Array, x1: jax.Array, labels0: jax.Array, labels1: jax.Array,
                   deltas: jax.Array) -> dict[str, jax.Array]:
  """One seed of problem A (``x0, x1 [n, 2]``, their mode labels ``[n]``): ``{acceptance,
  tv0, tv1}`` each ``[n_delta]``, the cost |x0 - x1| computed once for every delta."""
  w0, w1 = problems.mode_weights()
  cost = geometry.safe_sqrt(((x0[:, None] - x1[None]) ** 2).sum(-1))

  def at(delta):
    mask = (cost < delta).astype(jnp.float32)
    return {"acceptance": mask.mean(),
            "tv0": couplings.class_tv(mask, labels0, w0, axis=1),
            "tv1": couplings.class_tv(mask, labels1, w1, axis=0)}

  return jax.lax.map(at, deltas)


def run_modes(settings: Settings) -> dict[str, Any]:
  cfg = settings.config.modes
  deltas = [float(d) for d in cfg.deltas]
  w0, w1 = problems.mode_weights()
  labels0 = problems.stratified_labels(int(cfg.num_points), w0)
  labels1 = problems.stratified_labels(int(cfg.num_points), w1)
  rngs = _rngs(settings.seed, 1, settings.num_seeds)
  x0 = np.stack([problems.sample_modes(r, labels0) for r in rngs])
  x1 = np.stack([problems.sample_modes(r, labels1) for r in rngs])
  fn = jax.jit(jax.vmap(modes_coupling, in_axes=(0, 0, None, None, None)))
  out = _tolist(fn(x0, x1, labels0, labels1, jnp.asarray(deltas)))
  closed = [problems.modes_closed_form(d) for d in deltas]
  return {"deltas": deltas, **out, "closed_acceptance": [c["acceptance"] for c in closed],
          "closed_tv0": [c["tv0"] for c in closed]}


# ------------------------------------------------------------------------- problem B pools


def coupling_table(cost: jax.Array, deltas: jax.Array, epsilon: float, iters: int
                   ) -> dict[str, jax.Array]:
  """Cutoff diagnostics per delta ``[n_delta]`` and partial OT's at the same mass."""
  def at(delta):
    cut = couplings.cutoff_stats(cost, delta)
    mass = jnp.clip(cut.acceptance, 1e-6, 1.0)
    plan = couplings.partial_plan(cost, mass, epsilon, iters)
    part = couplings.plan_stats(plan, cost)
    return {**cut._asdict(), "ess0": jnp.exp(-cut.d2_0),
            **{f"partial_{k}": v for k, v in part._asdict().items()}}

  return jax.lax.map(at, deltas)


def run_coupling(settings: Settings, costs: jax.Array) -> dict[str, Any]:
  cfg = settings.config.coupling
  deltas = [float(d) for d in cfg.deltas] + [float("inf")]
  fn = jax.jit(jax.vmap(lambda c: coupling_table(
      c, jnp.asarray(deltas), float(cfg.partial_epsilon), int(cfg.partial_iters))))
  out = {k: np.asarray(v).tolist() for k, v in fn(costs).items()}
  return {"deltas": deltas, **out}


# ------------------------------------------------------------------------- flows


def _flat(x):
  """``[..., A, 3] -> [..., A * 3]``."""
  return x.reshape(x.shape[:-2] + (-1,))


def energy_fn(ligand: problems.Ligand):
  """The flat-bottom energy of flattened conformers ``[B, D] -> [B]``."""
  pocket, geom = jnp.asarray(ligand.pocket), ligand.geometry
  return lambda x: geometry.flat_bottom_energy(x.reshape(x.shape[:-1] + (-1, 3)), pocket,
                                               geom)


def dock_members(settings: Settings) -> tuple[np.ndarray, ...]:
  """(delta, energy weight, seed) ``[R]`` each: every combination, seed slowest."""
  cfg = settings.config.dock
  grid = [(d, e, s) for s in range(settings.num_seeds) for d in cfg.deltas
          for e in cfg.energy_weights]
  delta, weight, seed = (np.asarray(v) for v in zip(*grid))
  return delta.astype(np.float32), weight.astype(np.float32), seed.astype(np.int32)


def dock_stage(settings: Settings, pools: kernel.DockPools, energy) -> stages.Stage:
  cfg = settings.config.dock
  delta, weight, seed = dock_members(settings)
  make = lambda _: kernel.make_kernel(
      settings.net, kernel.dock_draw(pools, int(cfg.batch)), energy, (delta, weight, seed),
      int(cfg.steps_per_call), seed)
  return stages.Stage("dock", make, int(cfg.steps), int(cfg.steps_per_call),
                      groups=("seed", "num_seeds", "coupling", "net", "dock"),
                      carry=lambda state: None)


def relax_stage(settings: Settings, pools: kernel.RelaxPools, energy) -> stages.Stage:
  cfg = settings.config.relax
  seeds = np.arange(settings.num_seeds, dtype=np.int32)
  members = (np.full(seeds.shape, cfg.delta, np.float32),
             np.full(seeds.shape, cfg.energy_weight, np.float32), seeds)
  per_call = int(np.gcd(int(cfg.steps), int(settings.config.dock.steps_per_call))) or 1
  decay = int(cfg.steps) if cfg.lr_schedule == "cosine" else 0
  net = settings.net._replace(hidden=int(cfg.hidden), decay_steps=decay)
  make = lambda _: kernel.make_kernel(
      net, kernel.relax_draw(pools, int(cfg.batch), float(cfg.epsilon)), energy,
      members, per_call, seeds)
  return stages.Stage("relax", make, int(cfg.steps), per_call,
                      groups=("seed", "num_seeds", "coupling", "net", "relax"))


def straightness(generate, test: jax.Array, num: int) -> jax.Array:
  """``[R, len(STRAIGHT_STEPS)]`` RMS per atom of x^K - x^64 from the first ``num`` test
  conformers of each member (``generate(x0 [S, n, D], K) -> [R, n, D]``)."""
  x0 = _flat(test[:, :num])
  ref = generate(x0, STRAIGHT_REFERENCE)
  errs = [((generate(x0, k) - ref) ** 2).reshape(ref.shape[:2] + (-1, 3)).sum(-1).mean((1, 2))
          for k in STRAIGHT_STEPS]
  return jnp.sqrt(jnp.stack(errs, -1))


def dock_metrics(generated: jax.Array, ligand: problems.Ligand) -> dict[str, jax.Array]:
  """Success, class TV against p1 and validity of ``generated [n, A, 3]``."""
  rmsd, mode = problems.nearest_mode(generated, ligand)
  hit = rmsd < SUCCESS_RMSD
  label = jnp.where(hit, mode, len(ligand.weights))
  reference = jnp.concatenate([jnp.asarray(ligand.weights), jnp.zeros(1)])
  hist = jax.ops.segment_sum(jnp.ones_like(rmsd), label, reference.shape[0]) / rmsd.shape[0]
  valid = geometry.violations(generated, ligand.pocket, ligand.geometry)["valid"]
  return {"success": hit.mean(), "tv": 0.5 * jnp.abs(hist - reference).sum(),
          "valid": valid.mean()}


def evaluate_dock(sample, state: kernel.FlowState, test: jax.Array, ligand: problems.Ligand,
                  euler_steps: int, straight_num: int = 128) -> dict[str, jax.Array]:
  """Every member from p0: ``test [S, n, A, 3]`` apo conformers (member r uses its seed's).

  One compiled sampler (the number of Euler steps traced) serves the evaluation and the
  straightness sweep. Returns ``{success, tv, valid}`` ([R] each), ``straight
  [R, len(STRAIGHT_STEPS)]`` and the generated conformers ``generated [R, n, A, 3]``."""
  members = jax.jit(jax.vmap(lambda p, x, k: sample(p, x, k), in_axes=(0, 0, None)))
  generate = lambda x0, k: members(state.params, x0[state.pool], k)
  gen = generate(_flat(test), euler_steps).reshape((-1,) + test.shape[1:])
  metrics = jax.jit(jax.vmap(lambda g: dock_metrics(g, ligand)))(gen)
  return {**metrics, "straight": straightness(generate, test, straight_num), "generated": gen}


def evaluate_relax(sample, state: kernel.FlowState, holo: jax.Array, docked: jax.Array,
                   ligand: problems.Ligand, euler_steps: int) -> dict[str, jax.Array]:
  """Relaxation of ``docked [S, T, K, A, 3]`` candidates of ``holo [S, T, A, 3]``.

  ``input_valid`` / ``relaxed_valid``: the fraction of valid poses before / after
  ``euler_steps`` Euler steps; ``filtered_valid``: per target, the least-moved relaxed pose
  that passes the validity filter, else the input, is valid; ``chosen_rmsd``: that pose's
  RMSD to its holo target (all ``[S]``)."""
  def member(params, h, d):
    relaxed = sample(params, _flat(d), euler_steps).reshape(d.shape)
    ok_in = geometry.violations(d, ligand.pocket, ligand.geometry)["valid"]
    ok = geometry.violations(relaxed, ligand.pocket, ligand.geometry)["valid"]
    moved = jnp.sqrt(((relaxed - d) ** 2).sum(-1).mean(-1))
    pick = jnp.argmin(jnp.where(ok, moved, jnp.inf), axis=-1)
    any_ok = ok.any(-1)
    chosen = jnp.where(any_ok[:, None, None],
                       jnp.take_along_axis(relaxed, pick[:, None, None, None], 1)[:, 0],
                       d[:, 0])
    chosen_ok = jnp.where(any_ok, True, ok_in[:, 0])
    return {"input_valid": ok_in.mean(), "relaxed_valid": ok.mean(),
            "filtered_valid": chosen_ok.mean(),
            "chosen_rmsd": geometry.kabsch_rmsd(chosen, h).mean()}

  return jax.jit(jax.vmap(member))(state.params, holo, docked)


def _print(message: str) -> None:
  print(f"[unbalanced_fm] {message}", flush=True)


def _tolist(tree: dict[str, jax.Array]) -> dict[str, Any]:
  return {k: np.asarray(v).tolist() for k, v in tree.items()}


def _pools(settings: Settings, ligand: problems.Ligand):
  """The per-seed training pools (host draws; costs by one jitted program each)."""
  cfg, num = settings.config, settings.num_seeds
  size, k = int(cfg.coupling.pool), int(cfg.relax.candidates)
  apo = np.stack([problems.sample_apo(r, ligand, size)
                  for r in _rngs(settings.seed, 2, num)])
  holo = np.stack([problems.sample_holo(r, ligand, size)[0]
                   for r in _rngs(settings.seed, 3, num)])
  rholo, docked = [], []
  for r in _rngs(settings.seed, 4, num):
    rholo.append(problems.sample_holo(r, ligand, size)[0])
    docked.append(problems.docked_candidates(r, rholo[-1], k))
  rholo, docked = np.stack(rholo), np.stack(docked)
  cost = jax.jit(jax.vmap(geometry.pairwise_rmsd))(apo, holo)
  rcost = jax.jit(geometry.kabsch_rmsd)(docked, rholo[:, :, None])
  return (kernel.DockPools(jnp.asarray(_flat(apo)), jnp.asarray(_flat(holo)), cost),
          kernel.RelaxPools(jnp.asarray(_flat(docked)), jnp.asarray(_flat(rholo)), rcost),
          (apo, holo))


def _test_sets(settings: Settings, ligand: problems.Ligand):
  cfg, num = settings.config, settings.num_seeds
  apo = np.stack([problems.sample_apo(r, ligand, int(cfg.dock.num_test))
                  for r in _rngs(settings.seed, 5, num)])
  holo, docked = [], []
  for r in _rngs(settings.seed, 6, num):
    holo.append(problems.sample_holo(r, ligand, int(cfg.relax.num_targets))[0])
    docked.append(problems.docked_candidates(r, holo[-1], int(cfg.relax.candidates)))
  return apo, np.stack(holo), np.stack(docked)


def run(config, workdir: str | pathlib.Path | None = None, *,
        ligand: problems.Ligand | None = None, log=_print,
        mesh: jax.sharding.Mesh | None = None) -> RunResult:
  """The whole experiment (see the module docstring); ``results.json`` in ``workdir``.

  ``mesh``: the training stages' mesh (default: every device; the members are sharded
  over it).

  Raises:
    ValueError: a config value that is not allowed (its key named), before any work.
  """
  ligand = problems.make_ligand() if ligand is None else ligand
  settings = settings_from_config(config, int(np.prod(ligand.references.shape[1:])))
  seconds, start = {}, time.perf_counter()
  modes = run_modes(settings)
  seconds["modes"] = time.perf_counter() - start
  dock_pools, relax_pools, (apo, holo) = _pools(settings, ligand)
  coupling = run_coupling(settings, dock_pools.cost)
  seconds["coupling"] = time.perf_counter() - start - seconds["modes"]
  log(f"couplings done ({sum(seconds.values()):.0f} s)")
  energy = energy_fn(ligand)
  declared = (dock_stage(settings, dock_pools, energy),
              relax_stage(settings, relax_pools, energy))
  out = stages.run_stages(declared, config, workdir, mesh=mesh, name="unbalanced_fm")
  seconds.update({f"train_{k}": v for k, v in out.seconds.items()})
  test_apo, test_holo, test_docked = _test_sets(settings, ligand)
  dock, relax, samples = {}, {}, {"apo": np.asarray(test_apo[0, :8]),
                                  "holo": np.asarray(holo[0, :8])}
  if "dock" in out.states:
    sample = declared[0].make_kernel(None).sample
    evaluated = evaluate_dock(sample, out.states["dock"], test_apo, ligand,
                              int(config.dock.euler_steps))
    delta, weight, seed = dock_members(settings)
    pick = (seed == 0) & (weight == weight[0])   # seed 0, the first energy weight
    samples["generated"] = np.asarray(evaluated.pop("generated"))[pick, :8]
    samples["generated_deltas"] = delta[pick].tolist()
    dock = {"delta": delta.tolist(), "energy_weight": weight.tolist(),
            "seed": seed.tolist(), "straight_steps": list(STRAIGHT_STEPS),
            **_tolist(evaluated)}
  if "relax" in out.states:
    sample = declared[1].make_kernel(None).sample
    relax = _tolist(evaluate_relax(sample, out.states["relax"], test_holo, test_docked,
                                   ligand, int(config.relax.euler_steps)))
  seconds["total"] = time.perf_counter() - start
  result = RunResult(modes, coupling, dock, relax, seconds, out.histories, samples,
                     out.states)
  results.write(result, workdir)
  return result
