r"""Every method's hot path for a fixed short time: steps/s, achieved FLOP/s, peak memory.

  PYTHONPATH=. python benchmarks/run_all.py --preset=full             # on a GPU (< 10 min)
  OPENBLAS_NUM_THREADS=1 PYTHONPATH=. python benchmarks/run_all.py    # on CPU: --preset=cpu
  PYTHONPATH=. python benchmarks/run_all.py --preset=smoke --seconds=2 --only=ocm,minimax

For each registered hot path (one training step, one solve, one sampling pass, ...) built
from the package's own functions at the preset's config, in a fresh process (so its peak
memory is its own):

* compile: lower + compile of the program (``core.timing.compile_and_time``), reported apart;
* steps/s: one warm-up call, then timed chunks of calls (``core.timing.time_calls``) until
  ``--seconds`` are spent; the median over chunks of steps / chunk seconds. A *step* is the
  unit of the row (a training step, a pass, a solve, an episode);
* FLOP/s and bytes/s: flops and bytes accessed per call (XLA's ``cost_analysis()``, with
  every ``lax.scan`` counted by its trip count: ``core.timing.program_cost``) times calls
  per second (median chunk). A ``while_loop`` has no trip count before it runs: its body is
  counted once and the figure is a lower bound, printed ">="; work done on the host (the
  exact OT of ruot, a ``pure_callback``) is not counted;
* of peak: the machine's own limits measured in the same process just after the hot path
  (``core.timing.machine_peaks``: a 2048^2 float32 matmul's FLOP/s (8192^2 on an
  accelerator), in-place elementwise passes' bytes/s), and the row's place against them by
  the roofline (``core.timing.roofline``): "12% memory" = memory-bound (fewer flops per
  byte than the machine's balance), at 12% of the measured bytes/s;
* peak memory: ``memory_stats()["peak_bytes_in_use"]`` of the first device after the run,
  "n/a" where the backend keeps no statistics (CPU).

A method whose package is not installed (or not yet written) is skipped. Adding a method is
one line in :data:`HOT_PATHS`: ``"name": builder`` where ``builder(preset)`` returns
``{hot path name: thunk}`` and each thunk builds a :class:`HotPath` (see the builders below).
Numbers are this machine's, now: nothing is compared with a stored figure.
"""

from __future__ import annotations

import argparse
import contextlib
import datetime
import importlib.util
import json
import math
import os
import pathlib
import platform
import statistics
import subprocess
import sys
import time
from collections.abc import Callable
from typing import Any, NamedTuple

os.environ.setdefault("OPENBLAS_NUM_THREADS", "1")

import jax  # noqa: E402
import jax.numpy as jnp  # noqa: E402

from jaxlib_papers.core import blocks, compiler, timing  # noqa: E402
from jaxlib_papers.core.precision import enable_x64  # noqa: E402

REPO = pathlib.Path(__file__).resolve().parents[1]
DEFAULT_SECONDS = {"smoke": 2.0, "cpu": 10.0, "full": 10.0}
# Whole-run wall budget of the parent (``--total_seconds`` default): the full preset must
# finish within 10 minutes on one GPU; later hot paths are not started once it is spent.
DEFAULT_TOTAL = {"smoke": math.inf, "cpu": math.inf, "full": 570.0}
CHUNKS = 5  # target number of timed chunks within the budget


class HotPath(NamedTuple):
  """One program to time.

  Attributes:
    fn: the function (or jit object) to compile, called as ``fn(*args)``.
    args: its arguments.
    steps_per_call: how many ``unit``s one call performs.
    unit: what a step is ("step", "pass", "solve", "episode", ...).
    what: a short description (sizes) for the table.
    x64: compile and run with ``jax_enable_x64``.
    compiled: an already compiled program (then ``compile_seconds`` is its compile time).
    compile_seconds: see ``compiled``.
    describe: optional ``output -> str`` appended to the notes (e.g. convergence).
    compiler_options: the XLA options the package compiles this program with (its
      config's ``compiler_options``, ``core.compiler``); None: the backend's defaults.
  """
  fn: Callable[..., Any] | None
  args: tuple
  steps_per_call: float
  unit: str
  what: str
  x64: bool = False
  compiled: Any = None
  compile_seconds: float | None = None
  describe: Callable[[Any], str] | None = None
  compiler_options: dict[str, Any] | None = None


# --------------------------------------------------------------------------------- fsbm


def fsbm_hot_paths(preset: str) -> dict[str, Callable[[], HotPath]]:
  """One CondSOC iteration over the config's B pairs; one bridge-matching (M-) step."""
  import optax  # pylint: disable=g-import-not-at-top

  from jaxlib_papers.fsbm import feedback, gpath, kernel, models, tasks, train
  from jaxlib_papers.fsbm.configs import default

  config = default.get_config(preset)
  settings = train.settings_from_config(config)

  def pairs():
    batch = train.make_data(config)(0)
    x0, x1 = jnp.asarray(batch["x0"]), jnp.asarray(batch["x1"])
    mean_path = jax.vmap(lambda a, b: gpath.linear_mean_path(
        a, b, settings.csoc.num_mean_knots))(x0, x1)
    return x0, x1, mean_path

  def condsoc() -> HotPath:
    fb, _, _ = train.load_task_keypoints(config)
    kp = jnp.asarray(fb)
    csoc = settings.csoc._replace(num_iters=1)
    _, _, mean_path = pairs()

    def solve(mp, key):
      guide = kernel.Guidance(kp, feedback.keypoint_inv_std(kp),
                              base_drift=train.reference_drift(config),
                              state_cost=tasks.state_cost(config))
      return kernel.condsoc_solve(mp[:, 0], mp[:, -1], mp, key, settings=csoc, guide=guide,
                                  weights=kernel.PairWeights(sign=1.0, tau=float(config.tau)))

    c = settings.csoc
    return HotPath(solve, (mean_path, jax.random.key(0)), 1, "iteration",
                   f"{config.task}: B={config.batch_size} pairs, S={c.num_steps}, "
                   f"N={c.num_noise}, T_mean={c.num_mean_knots}, T_gamma={c.num_gamma_knots}")

  def mstep() -> HotPath:
    kern = train.build(config).kernel
    apply_fn = models.VectorField(dim=settings.dim, hidden=settings.hidden).apply
    state = kern.init(jax.random.key(0))
    x0, x1, mean_path = pairs()
    # Stand-ins for the fitted paths: straight lines (the step's cost does not depend on
    # the knots' values).
    path_params = jax.vmap(lambda p: gpath.init_params(p, settings.csoc.num_gamma_knots))(
        mean_path)
    tx = optax.adamw(settings.lr, weight_decay=settings.weight_decay, eps=1e-8)
    batch, dim = settings.match_batch, settings.dim

    def step(net, opt_state, ema, key):
      k_idx, k_t, k_n = jax.random.split(key, 3)
      idx = jax.random.randint(k_idx, (batch,), 0, x0.shape[0])
      t = jax.random.uniform(k_t, (batch,), x0.dtype, settings.t_eps, 1.0 - settings.t_eps)
      noise = jax.random.normal(k_n, (batch, dim), x0.dtype)
      pp = jax.tree.map(lambda a: a[idx], path_params)
      xt, target = jax.vmap(lambda q, a, b, tt, n: kernel.path_drift_at(
          q, a, b, tt, n, sigma=settings.csoc.sigma, sign=1.0))(pp, x0[idx], x1[idx], t,
                                                                  noise)
      loss, grads = jax.value_and_grad(kernel.bridge_matching_loss)(
          net, apply_fn, xt, t, target)
      updates, opt_state = tx.update(grads, opt_state, net)
      net = optax.apply_updates(net, updates)
      ema = optax.incremental_update(net, ema, 1.0 - settings.ema_decay)
      return net, opt_state, ema, loss

    first = lambda tree: jax.tree.map(lambda a: a[0], tree)
    args = (first(state.params), first(state.opt_state), first(state.ema_params),
            jax.random.key(1))
    return HotPath(step, args, 1, "step",
                   f"batch {batch}, hidden {settings.hidden}, AdamW + EMA")

  return {"condsoc_iteration": condsoc, "bridge_matching_step": mstep}


# --------------------------------------------------------------------------------- ruot


def ruot_hot_paths(preset: str) -> dict[str, Callable[[], HotPath]]:
  """One stage-1 and one stage-2 pass (all intervals) over the config's seeds."""
  from jaxlib_papers.core import datasets
  from jaxlib_papers.ruot import data as data_lib
  from jaxlib_papers.ruot import kernel, train
  from jaxlib_papers.ruot.configs import default
  from jaxlib_papers.ruot.models import make_networks

  config = default.get_config(preset)

  def snapshots():
    source = "simulator"
    if config.data.source == "csv" and not config.data.path:
      try:  # the official gene CSV, as benchmarks/ruot.py
        snaps = data_lib.load_csv(datasets.fetch("ruot/simulation_gene_data.csv",
                                                 timeout=10.0))
        source = "gene csv"
      except datasets.DataUnavailable:
        snaps = data_lib.simulate_gene_network()
        source = "simulator (gene csv unavailable)"
    else:
      snaps, source = train.load_snapshots(config)
    snaps = data_lib.validate(snaps)
    return data_lib.hold_out(snaps, int(config.data.hold_out)), source

  def stage(name: str) -> Callable[[], HotPath]:
    def build() -> HotPath:
      snaps, source = snapshots()
      nets = make_networks(snaps.dim, int(config.model.width), int(config.model.depth))
      num_seeds = int(config.num_seeds)
      params = jax.vmap(nets.init)(jax.random.split(jax.random.key(0), num_seeds))
      settings = train.flow_stage_settings(config, name)._replace(
          total_passes=10**6, passes_per_step=1)
      kern = kernel.make_flow_stage(
          nets, [float(t) for t in snaps.times], [jnp.asarray(x) for x in snaps.xs], params,
          settings)
      state = jax.jit(kern.init)(jax.random.key(0))
      return HotPath(kern.train_step, (state, None), 1, "pass",
                     f"{source}: {len(snaps.xs) - 1} intervals, counts "
                     f"{[len(x) for x in snaps.xs]}, {num_seeds} seed(s), dt {config.ode.dt}, "
                     f"OT {config.ot.method}")
    return build

  return {"stage1_pass": stage("stage1"), "stage2_pass": stage("stage2")}


# ---------------------------------------------------------------------------------- ocm


def ocm_hot_paths(preset: str) -> dict[str, Callable[[], HotPath]]:
  """One DSM step, one head step (OCM, SN, NPR heads), one K = 10 sampling pass (OCM)."""
  from jaxlib_papers.ocm import data as data_lib
  from jaxlib_papers.ocm import diffusion, kernel, models, train
  from jaxlib_papers.ocm.configs import default

  config = default.get_config(preset)
  options = compiler.named(config.compiler_options)   # the train steps' (ocm.train)
  m = config.model
  schedule = diffusion.make_schedule(config.schedule.kind, config.schedule.num_steps)

  def networks():
    """(model, head model, batch(size) -> x0) at the config; images are random pixels
    (the step's cost does not depend on them; CIFAR-10 need not be on the machine)."""
    if config.data.name in data_lib.IMAGE_DATASETS:
      model = models.UNet(base_channels=m.base_channels, channel_mults=tuple(m.channel_mults),
                          blocks_per_level=m.blocks_per_level)
      head = models.ImageHead(out_channels=3, hidden=m.head_hidden)
      batch = lambda n: jax.random.uniform(jax.random.key(0), (n, 32, 32, 3), jnp.float32,
                                           -1.0, 1.0)
      return model, head, batch
    parts = train.build(config)
    batch = lambda n: jnp.asarray(parts["make_source"](n, 0)(0))
    return parts["model"], parts["head_model"], batch

  def optimizer(group):
    return train._optimizer(train.Optim(group.lr, group.warmup_steps, 10**6,  # noqa: SLF001
                                        group.get("grad_clip", 1.0)))

  def dsm_state(model, example):
    d = config.dsm
    kern = kernel.make_dsm_kernel(model, schedule, optimizer(d), example,
                                  ema_decay=d.ema_decay)
    return kern, jax.jit(kern.init)(jax.random.key(0))

  def describe_model():
    if m.kind == "unet":
      return f"UNet {m.base_channels} ch x {tuple(m.channel_mults)}"
    return f"MLP {m.width} x {m.depth}"

  def dsm() -> HotPath:
    model, _, batch = networks()
    x0 = batch(int(config.dsm.batch_size))
    kern, state = dsm_state(model, x0[:2])
    return HotPath(kern.train_step, (state, x0), 1, "step",
                   f"{config.data.name}, {describe_model()}, batch {x0.shape[0]}",
                   compiler_options=options)

  def heads_state(model, head, x0):
    _, backbone = dsm_state(model, x0[:2])
    h = config.heads
    settings = kernel.HeadSettings(model, head, schedule, heads=tuple(h.names),
                                   num_probes=int(h.num_probes), ema_decay=h.ema_decay,
                                   param=h.param, loss=h.loss)
    kern = kernel.make_head_kernel(settings, optimizer(h), x0[:2], backbone.params)
    return kern, jax.jit(kern.init)(jax.random.key(1))

  def head_step() -> HotPath:
    model, head, batch = networks()
    x0 = batch(int(config.heads.batch_size))
    kern, state = heads_state(model, head, x0)
    return HotPath(kern.train_step, (state, x0), 1, "step",
                   f"heads {tuple(config.heads.names)}, {config.heads.num_probes} probe(s), "
                   f"{describe_model()}, batch {x0.shape[0]}", compiler_options=options)

  def sampling() -> HotPath:
    model, head, batch = networks()
    x0 = batch(2)
    _, state = heads_state(model, head, x0)
    methods = kernel.Methods(model, state.backbone, head, state.params,
                             max_var=float(config.eval.max_var))
    predict = kernel.make_predictor(methods, "ocm", schedule)
    steps = 10
    timesteps = diffusion.skip_timesteps(steps, schedule.num_steps)
    clip = float(config.eval.clip_x0)
    n = int(config.eval.num_samples)
    x_T = jax.random.normal(jax.random.key(2), (n, *x0.shape[1:]))
    fn = lambda x, k: diffusion.sample(predict, schedule, timesteps, x, k,
                                       eta=float(config.eval.eta),
                                       clip_x0=clip if clip > 0 else None)
    return HotPath(fn, (x_T, jax.random.key(3)), 1, "pass",
                   f"K={steps} steps, {n} samples, OCM covariance, {describe_model()}")

  return {"dsm_step": dsm, "head_step": head_step, "sample_k10": sampling}


# ------------------------------------------------------------------------------ minimax


def minimax_hot_paths(preset: str) -> dict[str, Callable[[], HotPath]]:
  """One LEN solve (m = 10) of the cubic bilinear saddle to ||F|| <= 1e-8."""
  from jaxlib_papers.minimax import train
  from jaxlib_papers.minimax.configs import default

  def solve() -> HotPath:
    config = default.get_config(preset)
    config.problem.n = {"smoke": 10, "cpu": 100, "full": 500}[preset]
    note = ""
    with enable_x64():
      problem, _ = train.build_problem(config)
      try:
        compiled, compile_s = train.compile_len_program(problem, config)
      except Exception as e:  # noqa: BLE001  (a backend without the factorization)
        if jax.default_backend() == "cpu":
          raise
        factorization = train.resolve_factorization(config)
        config.solve.factorization = "dense"
        note = f"{factorization} unavailable on {jax.default_backend()} " \
               f"({type(e).__name__}): dense LU; "
        compiled, compile_s = train.compile_len_program(problem, config)
      m = 10
      reg_weight = config.solve.reg_factor * problem.lipschitz_jacobian * m
      args = (jnp.zeros(problem.dim, jnp.float64), jnp.int32(m), jnp.float64(reg_weight))

    def describe(result) -> str:
      return (f"{note}{'converged' if bool(result.converged) else 'NOT converged'} in "
              f"{int(result.num_iters)} iterations, norm(F) {float(result.grad_norm):.1e}")

    return HotPath(None, args, 1, "solve",
                   f"n={config.problem.n} (d={problem.dim}), LEN m={m}, tol "
                   f"{config.solve.tol:g}, {train.resolve_factorization(config)}",
                   x64=True, compiled=compiled, compile_seconds=compile_s, describe=describe)

  return {"len_solve": solve}


# ---------------------------------------------------------------------------- linear_rl


def linear_rl_hot_paths(preset: str) -> dict[str, Callable[[], HotPath]]:
  """T episodes of null-space randomized LSVI on DeepSea, the config's seeds vmapped."""
  from jaxlib_papers.linear_rl import envs, kernel, train
  from jaxlib_papers.linear_rl.configs import default

  def episodes() -> HotPath:
    config = default.get_config(preset)
    spec = config.deep_sea
    env = envs.deep_sea(**dict(spec.env))
    cfg = train.agent_config("nullspace", spec.agent)
    num_episodes, num_seeds = int(config.run.num_episodes), int(config.run.num_seeds)
    with enable_x64():
      keys = jax.vmap(jax.random.key)(jnp.arange(num_seeds) + int(config.seed))
    fn = jax.vmap(lambda k: kernel.run_episodes(env, cfg, num_episodes, k))
    return HotPath(fn, (keys,), num_episodes * num_seeds, "episode",
                   f"DeepSea N={spec.env.size}, T={num_episodes}, {num_seeds} seeds vmapped",
                   x64=True)

  return {"nullspace_lsvi": episodes}


# --------------------------------------------------------------------------- single_index


def single_index_hot_paths(preset: str) -> dict[str, Callable[[], HotPath]]:
  """Online SGD of the config's seeds, 10 chunks of fresh samples each (bin3, LT +
  smoothing, p = 3): the exact alignment chain (O(1) per sample) and the full step (O(d))."""
  from jaxlib_papers.single_index import kernel, links, losses
  from jaxlib_papers.single_index.configs import default

  def build(engine: str) -> HotPath:
    config = default.get_config(preset)
    dim = {"smoke": 32, "cpu": 256, "full": 1024}[preset]
    seeds, samples = int(config.run.num_seeds), 10 * int(config.run.chunk)
    link = links.LINKS["bin3"]
    step = kernel.StepSettings(link, link.transform, losses.Oracle(3, dim ** 0.25, dim),
                               0.1 * dim ** -0.25, noise_std=float(config.run.noise_std))
    spec = kernel.RunSpec(engine, int(config.run.chunk), samples, (1.5,))  # no early stop
    keys = jax.random.split(jax.random.key(0), seeds)
    return HotPath(lambda k: kernel.run_online(step, spec, k), (keys,), seeds * samples,
                   "sample", f"{engine}: bin3 LT+S p=3, d={dim}, {seeds} seeds x "
                             f"{samples} samples")

  return {"chain_samples": lambda: build("chain"), "full_samples": lambda: build("full")}


# --------------------------------------------------------------------------- creativity


def creativity_hot_paths(preset: str) -> dict[str, Callable[[], HotPath]]:
  """Matching statistics of a batch of texts against a corpus index (the generated
  stand-in corpus of the preset's size: no download), every position of every text."""
  import numpy as np

  from jaxlib_papers.creativity import corpus, data, kernel
  from jaxlib_papers.creativity.configs import default

  def queries() -> HotPath:
    config = default.get_config(preset)
    spec = config.data
    sources = data.generated(0, int(spec.generated_documents), int(spec.generated_length),
                             int(spec.generated_vocab))
    index = corpus.build(sources.corpus, int(config.index.width), sources.vocab_size)
    rng = np.random.default_rng(0)
    texts = data.chunks(sources.held_out, int(spec.num_texts), int(spec.text_length), rng)
    batch, _ = corpus.pad_texts(texts, index, 1)
    return HotPath(kernel.matching_statistics, (index.table, batch), batch.size, "position",
                   f"{index.table.size} corpus tokens, W={index.table.width}, "
                   f"{batch.shape[0]} texts x {batch.shape[1]} words")

  return {"matching_statistics": queries}


# ---------------------------------------------------------------------------- test_task


def test_task_hot_paths(preset: str) -> dict[str, Callable[[], HotPath]]:
  """The confound fit's bootstrap (B resamples, c_e refitted) on 53 generated models."""
  import numpy as np

  from jaxlib_papers.test_task import kernel
  from jaxlib_papers.test_task.configs import default

  def bootstrap() -> HotPath:
    samples = int(default.get_config(preset).analysis.bootstrap_samples)
    rng = np.random.default_rng(0)
    log_c = rng.uniform(20, 24, 53)
    new = (rng.uniform(size=53) < 0.36).astype(float)
    y = 0.24 * np.maximum(0, log_c - 22.1) + 0.07 * new + 0.04 * rng.normal(size=53)
    settings = kernel.BootstrapSettings(num_samples=samples)
    with enable_x64():
      grid = kernel.emergence_grid()
    fn = jax.jit(lambda k, a, b, c: kernel.bootstrap_hinge(k, a, b, c, grid, settings))
    return HotPath(fn, (jax.random.key(0), log_c, new, y), 1, "bootstrap",
                   f"53 models, B={samples}, 12k-point c_e grid", x64=True)

  return {"bootstrap": bootstrap}


# ---------------------------------------------------------------------------- sae_split


def sae_split_hot_paths(preset: str) -> dict[str, Callable[[], HotPath]]:
  """SAE's dense soft max over the training set (N x N logsumexp), forward and backward of
  the Lagrangian, at N = 400 / 2,000 / 4,361 (EGFR's size at ``full``), float32, on
  generated 2,048-bit fingerprints; and one extragradient iteration with the top-k table
  (k = 128, the ``cpu`` preset's readout)."""
  from jaxlib_papers.sae_split import data, kernel, splitter

  num = {"smoke": 400, "cpu": 2000, "full": 4361}[preset]

  def build(neighbours: int) -> HotPath:
    fps = data.generated(num, seed=0).fingerprints
    table = splitter._table_program(jnp.asarray(fps), neighbours or num, 512)  # pylint: disable=protected-access
    problem = splitter.make_problem(table, kernel.make_target((0, 1 / 3, 2 / 3, 1),
                                                              (1 / 3,) * 3), 0.2)
    settings = kernel.Settings(lam=2.03e-3)
    if neighbours == 0:
      fn = jax.jit(jax.grad(lambda t, m, p: kernel.lagrangian(t, m, p, settings)[0],
                            argnums=(0, 1)))
      logits = jax.random.normal(jax.random.key(0), (num,))
      return HotPath(fn, (logits, jnp.float32(0.1), problem), 1, "pass",
                     f"dense soft max, N={num}, forward + backward")
    state = kernel.init_state(jax.random.key(0), problem, settings)
    fn = jax.jit(lambda s, p: kernel.extragradient_step(s, p, settings))
    return HotPath(fn, (state, problem), 1, "iteration",
                   f"extragradient, top-k k={neighbours}, N={num}")

  return {"dense_softmax_grad": lambda: build(0), "topk_iteration": lambda: build(128)}


# ------------------------------------------------------------------------- unbalanced_fm


def unbalanced_fm_hot_paths(preset: str) -> dict[str, Callable[[], HotPath]]:
  """One training step of every docking member (cutoff x energy weight x seed, vmapped):
  a B x B candidate batch of the seed's pool, the cutoff coupling, weighted CFM + energy."""
  import numpy as np

  from jaxlib_papers.unbalanced_fm import geometry, kernel, problems, train
  from jaxlib_papers.unbalanced_fm.configs import default

  def dock_step() -> HotPath:
    config = default.get_config(preset)
    settings = train.settings_from_config(config, 24)
    ligand = problems.make_ligand()
    rng = np.random.default_rng(0)
    size, batch = int(config.coupling.pool), int(config.dock.batch)
    apo = problems.sample_apo(rng, ligand, size)[None]
    holo = problems.sample_holo(rng, ligand, size)[0][None]
    cost = jax.jit(jax.vmap(geometry.pairwise_rmsd))(apo, holo)
    pools = kernel.DockPools(jnp.asarray(apo.reshape(1, size, -1)),
                             jnp.asarray(holo.reshape(1, size, -1)), cost)
    delta, weight, seed = train.dock_members(settings)
    k = kernel.make_kernel(settings.net, kernel.dock_draw(pools, batch),
                           train.energy_fn(ligand), (delta, weight, np.zeros_like(seed)), 1,
                           seed)
    state = k.init(jax.random.key(0))
    return HotPath(lambda s: k.train_step(s, None)[1]["loss"], (state,), len(delta),
                   "member step", f"{len(delta)} members, B={batch}, pool {size}, "
                                  f"MLP {settings.net.hidden} x {settings.net.depth}")

  return {"dock_step": dock_step}


# ---------------------------------------------------------------------------------- aerca


def aerca_hot_paths(preset: str) -> dict[str, Callable[[], HotPath]]:
  """``epochs_per_step`` AERCA epochs of the nonlinear set (one optimiser step per training
  series, then the validation loss), one seed and 8 seeds in one program (one after
  another or vmapped, as the package chooses here: ``blocks.members_in_sequence_by_default``;
  ``kernel.make_train_kernel``'s ``train_step``; early stopping off, so every epoch runs)."""
  from jaxlib_papers.aerca import kernel, train
  from jaxlib_papers.aerca.configs.default import dataset_config
  from jaxlib_papers.aerca.models import Networks

  def epochs(num_seeds: int) -> Callable[[], HotPath]:
    def build() -> HotPath:
      config = dataset_config("nonlinear", preset)
      parts = train.split(train.make_dataset(config), config)
      nets = Networks(int(config.data.num_vars), int(config.model.lag),
                      int(config.model.hidden), int(config.model.layers))
      settings = train.settings_from_config(config)
      kern = kernel.make_train_kernel(
          nets, settings.loss, parts["fit"], parts["val"],
          settings.train._replace(num_seeds=num_seeds, patience=10 ** 6))
      state = jax.jit(kern.init)(jax.random.key(0))
      per_call = int(config.optim.epochs_per_step)
      form = ("one after another" if blocks.members_in_sequence_by_default()
              else "vmapped")
      return HotPath(lambda s: kern.train_step(s, None)[0], (state,), per_call * num_seeds,
                     "seed-epoch", f"nonlinear p={config.data.num_vars}, "
                     f"{len(parts['fit'])}+{len(parts['val'])} series, {num_seeds} seed(s)"
                     + (f" ({form})" if num_seeds > 1 else "") + f", L={config.model.layers}",
                     compiler_options=settings.compiler_options)
    return build

  return {"epoch_1_seed": epochs(1), "epoch_8_seeds": epochs(8)}


# ---------------------------------------------------------------------------------- cca


def cca_hot_paths(preset: str) -> dict[str, Callable[[], HotPath]]:
  """One pretraining step (the config's seeds vmapped, condition dropout:
  ``kernel.make_pretrain_kernel`` as ``train.train`` builds it), one CCA alignment step
  (seeds x lambdas vmapped, each against its frozen reference: ``train._align_kernel``) and
  one sampling pass (every seed, CFG, KV cache: ``train.make_batched_sampler``). The digits
  are replaced by random tokens of their shape (a step's cost does not depend on them)."""
  import numpy as np

  from jaxlib_papers.cca import data, kernel, train
  from jaxlib_papers.cca.configs import default

  config = default.get_config(preset)
  settings = train.settings_from_config(config)
  seeds, m = settings.num_seeds, config.model
  model = f"width {m.width} x depth {m.depth}, V={config.data.levels}, L={data.LENGTH}"

  def pretrained():
    kern = kernel.make_pretrain_kernel(
        train.make_model(config), train.pretrain_optimizer(config, int(config.loop.num_steps)),
        num_runs=seeds, label_dropout=settings.label_dropout)
    return kern, jax.jit(kern.init)(jax.random.key(0))

  def batch(size: int, runs: int) -> dict[str, jax.Array]:
    rng = np.random.default_rng(0)
    tokens = rng.integers(0, int(config.data.levels), (size, runs, data.LENGTH))
    return {"tokens": jnp.asarray(tokens, jnp.int32),
            "labels": jnp.asarray(rng.integers(0, data.NUM_CLASSES, (size, runs)), jnp.int32)}

  def pretrain_step() -> HotPath:
    kern, state = pretrained()
    size = int(config.pretrain.batch_size)
    return HotPath(kern.train_step, (state, batch(size, seeds)), seeds, "run-step",
                   f"{seeds} seeds vmapped, batch {size}, {model}, random tokens")

  def align_step() -> HotPath:
    _, base = pretrained()
    kern = train._align_kernel(config, settings, jax.device_get(base.params))  # noqa: SLF001
    state = jax.jit(kern.init)(jax.random.key(1))
    runs, size = seeds * len(settings.lambdas), int(config.align.batch_size)
    return HotPath(kern.train_step, (state, batch(size, runs)), runs, "run-step",
                   f"{settings.align.loss}: {seeds} seeds x {len(settings.lambdas)} lambdas "
                   f"vmapped, batch {size}, {model}, random tokens")

  def sampling() -> HotPath:
    _, base = pretrained()
    labels = jnp.asarray(train.sample_labels(settings))
    keys = jax.random.split(jax.random.key(2), seeds)
    scale = jnp.float32(settings.sample.cca_cfg_scale)
    cache = "KV cache" if settings.sample.use_cache else "full-prefix recompute"
    return HotPath(train.make_batched_sampler(config), (base.params, labels, keys, scale),
                   seeds * labels.shape[0], "sample",
                   f"{seeds} seeds x {labels.shape[0]} samples x {data.LENGTH} tokens, CFG, "
                   f"{cache}, {model}, untrained weights")

  return {"pretrain_step": pretrain_step, "align_step": align_step, "sample": sampling}


# ----------------------------------------------------------------------- identifiability


def identifiability_hot_paths(preset: str) -> dict[str, Callable[[], HotPath]]:
  """One train call of the vMF task (``optim.steps_per_call`` Adam steps as one
  ``lax.scan``) of every run (seeds x kappas x normalize_head vmapped, as ``train.run_vmf``
  trains them), each on fresh vMF batches it draws itself: DIET (labels the instance
  indices, an N-row head) and supervised (labels the clusters)."""
  from jaxlib_papers.identifiability import kernel, train
  from jaxlib_papers.identifiability.configs import default

  config = default.get_config(preset)

  def build(objective: str) -> Callable[[], HotPath]:
    def thunk() -> HotPath:
      settings = train.settings_from_config(config)._replace(objective=objective)
      variants = train.variants_from_config(config)
      kern = kernel.make_kernel(settings, variants)
      state = jax.jit(kern.init)(jax.random.key(0))
      runs, steps = int(variants.kappa.shape[0]), int(settings.steps_per_call)
      valid = kernel.validate_settings(settings)
      form = ("one after another" if valid.runs_in_sequence else
              "vmapped, head per run" if valid.head_per_member else "vmapped, head batched")
      return HotPath(lambda s: kern.train_step(s, None), (state,), runs * steps, "run-step",
                     f"{objective}: {runs} runs ({form}) x {steps} steps a call, batch "
                     f"{settings.batch_size}, d={settings.dim}, {settings.num_labels} labels, "
                     f"hidden {settings.hidden}")
    return thunk

  return {"diet_step": build("diet"), "supervised_step": build("supervised")}


# ------------------------------------------------------------------------------ cp_fuse


def cp_fuse_hot_paths(preset: str) -> dict[str, Callable[[], HotPath]]:
  """One training call of the ``2 num_pairs`` causal LMs (``train.steps_per_call`` AdamW
  steps, the models vmapped: ``train.lm_kernel``), and one ``kernel.decode_cached`` call of
  a pair over every protected prompt as the evaluator runs it (CP-Fuse's grid rule, greedy,
  the MemFree table compiled in). Random tokens of the benchmark's shapes stand in for the
  generated benchmark (~30 s to build at ``full``; the costs do not depend on the tokens)."""
  import numpy as np

  from jaxlib_papers.cp_fuse import data, fusion, kernel, train
  from jaxlib_papers.cp_fuse.configs import default

  settings = train.settings_from_config(default.get_config(preset))
  t, b, m = settings.train, settings.benchmark, settings.model
  lm = train.lm_kernel(settings)
  rng = np.random.default_rng(0)
  tokens = lambda *shape: rng.integers(data.PERIOD + 1, data.VOCAB_SIZE, shape, np.int32)
  model = f"d_model {m.d_model} x {m.num_layers} layers, V={data.VOCAB_SIZE}"

  def train_step() -> HotPath:
    num_models = 2 * t.num_pairs
    source = lambda step: tokens(t.batch_size, num_models, settings.seq_len + 1)
    scanned, batches = train.steps_per_call(lm, source, t.steps_per_call)
    state = jax.jit(scanned.init)(jax.random.key(0))
    return HotPath(scanned.train_step, (state, jnp.asarray(batches(0))),
                   num_models * t.steps_per_call, "model-step",
                   f"{num_models} models vmapped, batch {t.batch_size} x "
                   f"{settings.seq_len + 1} tokens, {t.steps_per_call} step(s) a call, "
                   f"{model}, random tokens")

  def decode() -> HotPath:
    num_prompts, n = 2 * b.num_protected + 1, settings.fusion.memfree_n
    prompts = tokens(num_prompts, 1 + b.prefix_len)
    prompts[:, 0] = data.BOS
    table = jnp.asarray(tokens(num_prompts * (settings.seq_len - n + 1), n))
    decode_settings = kernel.DecodeSettings(
        b.continuation_len, fusion.official_grid(settings.fusion.grid_size), table,
        settings.fusion.bisection_iterations)
    params = train.pair_params(jax.jit(lm.init)(jax.random.key(0)).params, 0)

    def fn(p, x, key, opts):   # train.Evaluator's decode
      cache = jax.tree.map(lambda c: c[:2], lm.init_cache(x.shape[0]))
      return kernel.decode_cached(lm.step_log_probs, cache, p, x, key, opts, decode_settings)

    return HotPath(fn, (params, jnp.asarray(prompts), jax.random.key(1),
                        kernel.options(kernel.RULE_GRID)),
                   num_prompts * b.continuation_len, "token",
                   f"{num_prompts} prompts x {b.continuation_len} new tokens (prompt "
                   f"{1 + b.prefix_len}), grid rule, {table.shape[0]} {n}-grams, {model}, "
                   "random tokens, untrained weights")

  return {"train_step": train_step, "decode_cached": decode}


# The registry: one line per method. A builder imports its package lazily; a method whose
# package is absent is skipped.
HOT_PATHS: dict[str, Callable[[str], dict[str, Callable[[], HotPath]]]] = {
    "fsbm": fsbm_hot_paths,
    "ruot": ruot_hot_paths,
    "ocm": ocm_hot_paths,
    "minimax": minimax_hot_paths,
    "linear_rl": linear_rl_hot_paths,
    "single_index": single_index_hot_paths,
    "creativity": creativity_hot_paths,
    "test_task": test_task_hot_paths,
    "sae_split": sae_split_hot_paths,
    "unbalanced_fm": unbalanced_fm_hot_paths,
    "aerca": aerca_hot_paths,
    "cca": cca_hot_paths,
    "identifiability": identifiability_hot_paths,
    "cp_fuse": cp_fuse_hot_paths,
}


# ------------------------------------------------------------------------------ measure


def package_present(method: str) -> bool:
  return importlib.util.find_spec(f"jaxlib_papers.{method}") is not None


def _peak_bytes() -> int | None:
  try:
    stats = jax.devices()[0].memory_stats()
  except Exception:  # noqa: BLE001
    return None
  if not stats:
    return None
  return stats.get("peak_bytes_in_use")


def measure(method: str, name: str, preset: str, seconds: float) -> dict[str, Any]:
  """Builds and times one hot path in this process; returns its table row as a dict."""
  if method not in HOT_PATHS:
    raise ValueError(f"--only: unknown method {method!r}; registered: {sorted(HOT_PATHS)}")
  paths = HOT_PATHS[method](preset)
  if name not in paths:
    raise ValueError(f"{method} has no hot path {name!r}; it has {sorted(paths)}")
  if seconds <= 0:
    raise ValueError(f"seconds must be > 0, got {seconds}")
  hot = paths[name]()
  context = enable_x64 if hot.x64 else contextlib.nullcontext
  with context():
    if hot.compiled is None:
      timed = timing.compile_and_time(hot.fn, *hot.args, repeats=0,
                                      compiler_options=hot.compiler_options)
      compiled, compile_s = timed.compiled, timed.compile_seconds
    else:
      compiled, compile_s = hot.compiled, float(hot.compile_seconds)
    warm, output = timing.time_calls(compiled, *hot.args)  # warm-up, not counted
    per_call = max(warm[0], 1e-6)
    calls = max(1, int(seconds / CHUNKS / per_call))
    rates, spent = [], 0.0
    while not rates or spent < seconds:
      run_s, output = timing.time_calls(compiled, *hot.args, repeats=calls)
      chunk = sum(run_s)
      spent += chunk
      rates.append(calls / chunk)
  calls_per_s = statistics.median(rates)
  if hot.fn is None:  # a precompiled program: XLA's count, loops (if any) counted once
    flops, nbytes = timing._xla_cost(compiled)  # pylint: disable=protected-access
    exact = False
  else:  # loops counted by their trip counts (core.timing.program_cost)
    with context():
      flops, nbytes, exact = timing.program_cost(hot.fn, *hot.args, compiled=compiled)
  notes = hot.describe(output) if hot.describe else ""
  return {
      "method": method, "hot_path": name, "what": hot.what, "unit": hot.unit,
      "steps_per_s": calls_per_s * hot.steps_per_call, "calls_per_s": calls_per_s,
      "compile_s": compile_s, "chunks": len(rates), "calls_per_chunk": calls,
      "timed_s": spent, "flops_per_call": flops, "flops_lower_bound": not exact,
      "bytes_per_call": nbytes,
      "flops_per_s": None if flops is None else flops * calls_per_s,
      "bytes_per_s": None if nbytes is None else nbytes * calls_per_s,
      "peak_bytes": _peak_bytes(), "notes": notes,
  }


def of_peak(row: dict[str, Any], peaks: timing.Peaks | None) -> str:
  """The row's place against the machine's peaks: "12% compute" (the roofline's bound and
  the fraction of its peak reached; ">=" when a loop's count is a lower bound)."""
  if "peaks" in row:  # measured beside the row, in its own process (run_all's children)
    peaks = timing.Peaks(**row["peaks"])
  if peaks is None or "error" in row or not row.get("calls_per_s"):
    return "-"
  cost = timing.Cost(row["flops_per_call"], row.get("bytes_per_call"),
                     not row["flops_lower_bound"])
  return timing.limit_text(cost, 1.0 / row["calls_per_s"], peaks)


# -------------------------------------------------------------------------------- table


def _si(value: float | None, unit: str = "") -> str:
  if value is None or not math.isfinite(value):
    return "n/a"
  for factor, prefix in ((1e15, "P"), (1e12, "T"), (1e9, "G"), (1e6, "M"), (1e3, "k")):
    if abs(value) >= factor:
      return f"{value / factor:.3g} {prefix}{unit}"
  return f"{value:.3g} {unit}".rstrip()


def _bytes(value: int | None) -> str:
  if value is None:
    return "n/a"
  for factor, name in ((2**30, "GiB"), (2**20, "MiB"), (2**10, "KiB")):
    if value >= factor:
      return f"{value / factor:.3g} {name}"
  return f"{value} B"


def format_table(rows: list[dict[str, Any]], peaks: timing.Peaks | None = None) -> str:
  """A markdown table of measured rows (and skipped / failed ones, with the reason); with
  ``peaks`` (``core.timing.machine_peaks`` of the same run) each row's fraction of them."""
  cell = lambda text: str(text).replace("|", "\\|")
  lines = ["| method | hot path | size | steps/s | compile s | FLOP/call | FLOP/s | bytes/s | "
           "of peak | peak memory | notes |", "|---|---|---|---|---|---|---|---|---|---|---|"]
  for row in rows:
    if "error" in row:
      lines.append(f"| {row['method']} | {row.get('hot_path', '-')} | - | - | - | - | - | - "
                   f"| - | - | {cell(row['error'])} |")
      continue
    bound = ">= " if row["flops_lower_bound"] and row["flops_per_call"] else ""
    lines.append(
        f"| {row['method']} | {row['hot_path']} | {cell(row['what'])} | "
        f"{row['steps_per_s']:.4g} {row['unit']}/s | {row['compile_s']:.1f} | "
        f"{bound}{_si(row['flops_per_call'])} | {bound}{_si(row['flops_per_s'], 'FLOP/s')} | "
        f"{bound}{_si(row.get('bytes_per_s'), 'B/s')} | {of_peak(row, peaks)} | "
        f"{_bytes(row['peak_bytes'])} | {cell(row['notes'] or '-')} |")
  return "\n".join(lines)


def machine_line(preset: str, seconds: float) -> str:
  device = jax.devices()[0]
  return (f"{datetime.datetime.now(datetime.timezone.utc):%Y-%m-%d %H:%M} UTC | preset "
          f"{preset}, {seconds:g} s per hot path | {jax.default_backend()}: "
          f"{device.device_kind} x{jax.device_count()} | host {platform.machine()}, "
          f"{os.cpu_count()} CPUs, load {os.getloadavg()[0]:.1f} | jax {jax.__version__}")


# --------------------------------------------------------------------------------- main


def _child(spec: str, preset: str, seconds: float) -> None:
  """One hot path in this fresh process, and the machine's peaks measured in it just after
  (so the row's fraction of peak compares two figures taken under the same load). After,
  not before: the peak measurement's own buffers (1 GiB and three 256 MiB matrices on an
  accelerator) would otherwise be the row's "peak memory"."""
  method, name = spec.split("/", 1)
  row = measure(method, name, preset, seconds)
  row["peaks"] = timing.machine_peaks()._asdict()
  print("RESULT " + json.dumps(row), flush=True)


def _run_child(method: str, name: str, preset: str, seconds: float,
               timeout: float | None) -> dict[str, Any]:
  env = dict(os.environ)
  env["PYTHONPATH"] = os.pathsep.join([str(REPO)] + [p for p in [env.get("PYTHONPATH")] if p])
  cmd = [sys.executable, str(pathlib.Path(__file__).resolve()), f"--child={method}/{name}",
         f"--preset={preset}", f"--seconds={seconds}"]
  try:
    proc = subprocess.run(cmd, env=env, capture_output=True, text=True, timeout=timeout)
  except subprocess.TimeoutExpired:
    return {"method": method, "hot_path": name, "error": f"timed out after {timeout:.0f} s"}
  for line in proc.stdout.splitlines():
    if line.startswith("RESULT "):
      return json.loads(line[len("RESULT "):])
  tail = [line for line in proc.stderr.strip().splitlines() if line.strip()][-1:]
  return {"method": method, "hot_path": name,
          "error": f"failed (exit {proc.returncode}): {' '.join(tail)[:300]}"}


def run_all(methods: list[str], preset: str, seconds: float, total_seconds: float,
            log=print, on_row: Callable[[list[dict[str, Any]]], None] | None = None
            ) -> list[dict[str, Any]]:
  """Every hot path of ``methods``, each in its own process, within ``total_seconds``;
  ``on_row(rows)`` after each hot path (``main`` rewrites ``--json`` there, so a run cut
  short keeps the rows it measured)."""
  start = time.perf_counter()
  rows = []
  for method in methods:
    if not package_present(method):
      rows.append({"method": method, "error": "skipped: package absent"})
      log(f"[run_all] {method}: package absent, skipped", flush=True)
      continue
    for name in HOT_PATHS[method](preset):
      left = total_seconds - (time.perf_counter() - start)
      if left < seconds + 5:
        rows.append({"method": method, "hot_path": name,
                     "error": f"not run: --total_seconds={total_seconds:g} spent"})
        continue
      log(f"[run_all] {method}/{name} ...", flush=True)
      row = _run_child(method, name, preset, seconds,
                       timeout=None if math.isinf(left) else left)
      rows.append(row)
      if on_row is not None:
        on_row(rows)
      if "error" in row:
        log(f"[run_all] {method}/{name}: {row['error']}", flush=True)
      else:
        log(f"[run_all] {method}/{name}: {row['steps_per_s']:.4g} {row['unit']}/s, "
            f"compile {row['compile_s']:.1f} s", flush=True)
  return rows


def main(argv: list[str] | None = None) -> None:
  parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
  parser.add_argument("--preset", choices=("smoke", "cpu", "full"), default=None,
                      help="default: cpu on a CPU backend, full otherwise")
  parser.add_argument("--only", default="",
                      help=f"comma-separated methods (default: all of {', '.join(HOT_PATHS)})")
  parser.add_argument("--seconds", type=float, default=None,
                      help="timed seconds per hot path (default: smoke 2, cpu 10, full 10)")
  parser.add_argument("--total_seconds", type=float, default=None,
                      help="wall budget of the whole run (default: full 570, else none); "
                           "hot paths that would start after it are not run")
  parser.add_argument("--json", default="", help="also write the rows to this JSON file")
  parser.add_argument("--child", default="", help=argparse.SUPPRESS)
  args = parser.parse_args(argv)
  preset = args.preset or ("cpu" if jax.default_backend() == "cpu" else "full")
  seconds = float(args.seconds if args.seconds is not None else DEFAULT_SECONDS[preset])
  if seconds <= 0:
    parser.error(f"--seconds must be > 0, got {seconds}")
  if args.child:
    _child(args.child, preset, seconds)
    return
  methods = [m.strip() for m in args.only.split(",") if m.strip()] or list(HOT_PATHS)
  unknown = [m for m in methods if m not in HOT_PATHS]
  if unknown:
    parser.error(f"--only: unknown method(s) {unknown}; registered: {', '.join(HOT_PATHS)}")
  total = float(args.total_seconds or DEFAULT_TOTAL[preset])
  if total <= 0:
    parser.error(f"--total_seconds must be > 0, got {total}")
  header = machine_line(preset, seconds)
  print(header, flush=True)
  def write_json(rows: list[dict[str, Any]]) -> None:
    if args.json:
      pathlib.Path(args.json).write_text(json.dumps({"machine": header, "rows": rows},
                                                    indent=1))

  rows = run_all(methods, preset, seconds, total, on_row=write_json)
  measured = [r["peaks"] for r in rows if "peaks" in r]
  print()
  print(header)
  if measured:  # each row's own peaks were measured in its process, just after it
    flops = sorted(p["flops_per_s"] for p in measured)
    stream = sorted(p["bytes_per_s"] for p in measured)
    print(f"peaks measured after each hot path (its row's 'of peak' uses its own): matmul "
          f"{flops[0] / 1e9:.1f}-{flops[-1] / 1e9:.1f} GFLOP/s, elementwise "
          f"{stream[0] / 1e9:.1f}-{stream[-1] / 1e9:.1f} GB/s ({measured[0]['what']})")
  print(format_table(rows))
  write_json(rows)


if __name__ == "__main__":
  main()
