r"""FSBM speed: one CondSOC iteration and one M-step, ours and the official code side by side.

  git clone https://github.com/panostheo98/FSBM /tmp/FSBM     # the official code (PyTorch)
  pip install -e .[bench]         # a CPU torch (see benchmarks/README.md), omegaconf, easydict
  env -u OPENBLAS_CORETYPE -u OPENBLAS_L2_SIZE OPENBLAS_NUM_THREADS=1 PYTHONPATH=. \
      python benchmarks/fsbm.py --official_dir=/tmp/FSBM --torch_threads=2 [--profile]
  OPENBLAS_NUM_THREADS=1 PYTHONPATH=. python benchmarks/fsbm.py      # ours only

Sizes are the official S-tunnel ones, read from the checkout's ``configs/train.yaml`` and
``configs/experiment/stunnel.yaml`` when ``--official_dir`` is given (the same numbers are
built in for the ours-only run): CondSOC over mB = 1024 endpoint pairs (``csoc.mB``, the
pairs of one official ``fit`` call), S = 100 grid times (``csoc.S``: our ``num_steps``),
N = 4 noise paths per pair (``csoc.N``: ``num_noise``), T_mean = 15 and T_gamma = 30 spline
knots (``num_mean_knots``, ``num_gamma_knots``), SGD lr 0.2 / 0.1, sigma 1, tau 100, the
official 100 S-tunnel keypoint trajectories (``data/kp_traj_stunnel.pt``, loaded by our
``tasks.load_keypoints`` for both sides; ours only: our generated ones); the M-step batch 64
(``optim.batch_size``), AdamW lr 1e-3, wd 0, eps 1e-8, EMA 0.999 with its warm-up.

Both sides run in this one process, alternating (ours, official, ours, ...) after a
warm-up call of each; every row gives both medians with min-max over ``--repeats`` and the
median (min-max) of the per-pair ratios official / ours, and ours against this machine's
own peaks measured in the same run after the timed rows ("ours of peak": the roofline's
bound and the fraction of its peak reached, from XLA's counts per iteration or M-step;
``core.timing``). ``--devices=N`` (N > 1, CPU hosts) exposes N CPU devices, one per core,
and adds a row of the same CondSOC solve with the pairs split over them (each pair's
path is its own problem, so the split changes no fitted path; ``core.distributed``): on a CPU,
devices are how a program gets every core (the solve alone, its inputs placed once; the
launcher end to end was not measured this way). At start-up the script checks
that both sides compute the same things (CondSOC loss and gradient at the same noise; path
samples, drift targets, network outputs and bridge-matching loss at the same inputs).

* CondSOC iteration, official: ``fsbm.gaussian_path.fit`` itself (``csoc.nitr`` set to
  ``--iters``) on an ``EndPointGaussianPath`` of the mB pairs (straight-line mean knots,
  zero std knots, ``ZeroBaseDrift``: what the official first R-step builds) with the loss
  of ``build_loss_fn``; per iteration: path sample, drift by ``autograd.functional.jvp``,
  ``partial_g`` (nearest keypoint, grad G and its divergence by double autograd), backward,
  SGD step, ``loss.item()``. One timed sample is one ``fit`` call, divided by ``--iters``.
  Ours: one jitted ``kernel.condsoc_solve`` of ``--iters`` iterations (vmap over pairs,
  ``lax.scan`` over iterations), divided likewise.
* M-step, official: the body of one Lightning training step, driven here without the
  Trainer: ``optimizer.zero_grad()``, ``FSBMLitModule.sample_gpath`` on a batch of the
  official ``SplineDataset``, ``build_ut`` + ``bm_loss`` on the official network
  (``network.build_net``: ``EMA(Unbatch(ToyVectorField))``), ``backward``, the AdamW and
  cosine scheduler of ``configure_optimizers``, then ``net.update_ema()`` (what its
  ``optimizer_step`` adds). The batches are collated by a ``DataLoader`` before timing (the
  official loader runs in 32 worker processes, off the training thread); Lightning's own
  per-step bookkeeping (logging, hooks) is not timed: both omissions favour the official
  side. Ours: the M-step of ``kernel.make_kernel`` (pair indices, t and noise drawn in the
  program, ``path_drift_at``, ``bridge_matching_loss``, optax AdamW, EMA), once per jitted
  call, and ``--msteps`` per call in one ``lax.scan`` as the alternation runs it.

The official modules are imported from the checkout as they are. Three of their imports
are never used on the timed paths and are replaced by empty stand-ins *only when not
installed*: ``ipdb`` (imported for ``set_trace``; it pulls IPython), ``torchvision`` (image
transforms of the FFHQ data sets; a binary build tied to one torch version) and
``pytorch_lightning`` (only the ``LightningModule`` base class is needed, since the step is
driven here). ``build_loss_fn`` moves the keypoints to ``'cuda'`` unconditionally; on a CPU
the keypoints are handed to it as a tensor whose ``.to`` keeps them where they are.

OPENBLAS_CORETYPE and OPENBLAS_L2_SIZE (set on some machines for old OpenBLAS builds) slow a
current NumPy: unset them for this command only, as above. One BLAS thread; torch threads as
given (``--torch_threads``, default: this process's cores, which XLA:CPU's own thread pool
uses too). ``--profile`` adds where one CondSOC iteration's time goes on each side. Ours runs
with the XLA flags ``launch.reproduce`` gives the S-tunnel part (``--xla_flags=default``:
XLA's own defaults).
"""

from __future__ import annotations

import argparse
import contextlib
import importlib
import importlib.util
import os
import pathlib
import statistics
import sys
import tempfile
import time
import types

os.environ.setdefault("OPENBLAS_NUM_THREADS", "1")

import jax  # noqa: E402
import jax.numpy as jnp  # noqa: E402
import numpy as np  # noqa: E402
import optax  # noqa: E402
from official_stand_ins import stand_in  # noqa: E402  (this folder, first on sys.path)

from jaxlib_papers.core import distributed, prng, timing  # noqa: E402
from jaxlib_papers.fsbm import feedback, gpath, kernel, models, tasks  # noqa: E402

GOAL = 10.0  # issue 40's official / ours goal for both hot paths (the "goal needs" column)

# The official S-tunnel sizes (configs/train.yaml + configs/experiment/stunnel.yaml), used
# when no checkout is given; with --official_dir they are read from its files.
OFFICIAL_DEFAULTS = dict(
    sigma=1.0, tau=100.0, dim=2, pairs=1024, num_steps=100, num_noise=4, num_mean_knots=15,
    num_gamma_knots=30, lr_mean=0.2, lr_gamma=0.1, momentum=0.0, batch=64, lr=1e-3,
    weight_decay=0.0, adam_eps=1e-8, ema_decay=0.999)


# ------------------------------------------------------------------------------ official


def import_official(official_dir: pathlib.Path):
  """(torch, config, gaussian_path, sde, dataset, fsbm_model) from the user's checkout."""
  package_dir = official_dir / "fsbm"
  if not (package_dir / "gaussian_path.py").is_file():
    raise FileNotFoundError(f"--official_dir: {package_dir}/gaussian_path.py not found "
                            "(clone panostheo98/FSBM)")
  import torch  # noqa: PLC0415
  from omegaconf import OmegaConf  # noqa: PLC0415

  stand_in("ipdb", set_trace=lambda *a, **k: None)
  stand_in("torchvision.transforms")
  stand_in("torchvision.utils")
  stand_in("pytorch_lightning", LightningModule=torch.nn.Module)
  # The official ``fsbm`` folder has no __init__.py (a namespace package). This script is
  # itself named fsbm.py and its folder is first on sys.path, where a plain module wins over
  # a namespace folder: register the package by its path instead.
  package = types.ModuleType("fsbm")
  package.__path__ = [str(package_dir)]
  sys.modules["fsbm"] = package
  modules = [importlib.import_module(f"fsbm.{name}")
             for name in ("gaussian_path", "sde", "dataset", "fsbm_model")]
  config = OmegaConf.merge(OmegaConf.load(official_dir / "configs" / "train.yaml"),
                           OmegaConf.load(official_dir / "configs" / "experiment" /
                                          "stunnel.yaml"))
  return (torch, config, *modules)


def sizes_from_config(config) -> dict:
  """The official config's numbers under our names (see the module docstring)."""
  csoc, optim = config.csoc, config.optim
  if csoc.optim != "sgd" or not csoc.scale_by_sigma:
    raise ValueError("the benchmark expects the S-tunnel config: SGD, scale_by_sigma")
  return dict(
      sigma=float(config.prob.sigma), tau=float(config.tau), dim=int(config.dim),
      pairs=int(csoc.mB), num_steps=int(csoc.S), num_noise=int(csoc.N),
      num_mean_knots=int(csoc.T_mean), num_gamma_knots=int(csoc.T_gamma),
      lr_mean=float(csoc.lr_mean), lr_gamma=float(csoc.lr_gamma),
      momentum=float(csoc.momentum), batch=int(optim.batch_size), lr=float(optim.lr),
      weight_decay=float(optim.wd), adam_eps=float(optim.eps),
      ema_decay=float(optim.ema_decay))


@contextlib.contextmanager
def _in_temporary_directory():
  """FSBMLitModule's constructor makes a ``figs`` folder in the working directory."""
  cwd = os.getcwd()
  with tempfile.TemporaryDirectory() as folder:
    os.chdir(folder)
    try:
      yield
    finally:
      os.chdir(cwd)


class Official:
  """The official CondSOC ``fit`` and M-step on the benchmark's pairs and paths."""

  def __init__(self, modules, problem, args):
    torch, config, self.gpath_lib, sde, dataset, fsbm_model = modules
    self.torch = torch
    torch.set_num_threads(args.torch_threads)
    torch.manual_seed(args.seed)
    self.sizes = sizes_from_config(config)
    sizes = self.sizes
    self.ccfg = config.csoc.copy()
    self.ccfg.nitr = args.iters
    self.basedrift = sde.build_basedrift(config)
    from_np = lambda a: torch.from_numpy(np.array(a, np.float32))

    # The official loss moves the keypoints to 'cuda'; here they stay on the CPU.
    class StaysOnCpu(torch.Tensor):

      def to(self, *unused_args, **unused_kwargs):
        return self.as_subclass(torch.Tensor)

    self.keypoints = from_np(problem.keypoints).as_subclass(StaysOnCpu)
    self.loss_fn = self.gpath_lib.build_loss_fn(sizes["sigma"], self.ccfg, sizes["tau"],
                                                self.keypoints)
    # The first R-step's paths (validation_step, direction None): straight-line mean knots
    # on linspace(0, 1, T_mean), zero std knots on linspace(0, 1, T_gamma).
    self.mean_t = torch.linspace(0, 1, sizes["num_mean_knots"])
    self.gamma_s = torch.linspace(0, 1, sizes["num_gamma_knots"])
    self.mean_path = from_np(problem.mean_path)
    self.gpath = self.new_gpath(self.mean_path, torch.zeros(
        self.mean_path.shape[0], sizes["num_gamma_knots"], 1))

    with _in_temporary_directory():
      self.model = fsbm_model.FSBMLitModule(config, None, None, None, None,
                                            self.keypoints, tau=config.tau)
    self.model.direction = "fwd"
    optimizers = self.model.configure_optimizers()
    self.optimizer = optimizers["optimizer"]
    self.scheduler = optimizers["lr_scheduler"]["scheduler"]
    data = dataset.SplineDataset(self.mean_t, from_np(problem.fitted_mean_path),
                                 self.gamma_s, from_np(problem.fitted_gamma[..., None]))
    loader = torch.utils.data.DataLoader(data, batch_size=sizes["batch"], shuffle=True,
                                         drop_last=True, num_workers=0)
    self.batches = [batch for batch, _ in zip(loader, range(16))]
    self.batch_index = 0

  def new_gpath(self, mean_path, gamma_knots):
    return self.gpath_lib.EndPointGaussianPath(self.mean_t, mean_path, self.gamma_s,
                                               gamma_knots, self.sizes["sigma"],
                                               self.basedrift)

  def run_fit(self, n: int) -> None:
    """n calls of the official ``fit`` (``--iters`` CondSOC iterations each)."""
    for _ in range(n):
      self.gpath_lib.fit(self.ccfg, self.gpath, "fwd", self.loss_fn)

  def mstep(self) -> None:
    """One training step as Lightning runs it (see the module docstring)."""
    model = self.model
    batch = self.batches[self.batch_index % len(self.batches)]
    self.batch_index += 1
    self.optimizer.zero_grad()
    _, _, t, xt, vt = model.sample_gpath(batch)
    loss = model.bm_loss(model.build_ut(model.direction, backprop_snet=True), xt, t, vt)
    loss.backward()
    self.optimizer.step()
    self.scheduler.step()
    model.net.update_ema()

  def run_msteps(self, n: int) -> None:
    for _ in range(n):
      self.mstep()


# ---------------------------------------------------------------------------------- ours


class Problem:
  """Endpoint pairs, keypoints and stand-in fitted paths shared by both sides."""

  def __init__(self, sizes: dict, keypoints: np.ndarray, seed: int):
    rng = np.random.default_rng(seed)
    p0, p1 = tasks.marginals("stunnel")
    num_pairs = sizes["pairs"]
    self.keypoints = keypoints
    self.x0, self.x1 = p0.sample(rng, num_pairs), p1.sample(rng, num_pairs)
    s = np.linspace(0.0, 1.0, sizes["num_mean_knots"], dtype=np.float32)[None, :, None]
    self.mean_path = ((1 - s) * self.x0[:, None] + s * self.x1[:, None]).astype(np.float32)
    # Fitted-path stand-ins for the M-step (and the same-function checks): perturbed mean
    # knots, random std knots whose end knots stay 0 (the official StdSpline keeps them
    # fixed). The step's cost does not depend on these values.
    fitted = self.mean_path.copy()
    fitted[:, 1:-1] += rng.normal(0.0, 1.0, fitted[:, 1:-1].shape)
    self.fitted_mean_path = fitted.astype(np.float32)
    gamma = rng.normal(0.0, 0.5, (num_pairs, sizes["num_gamma_knots"]))
    gamma[:, [0, -1]] = 0.0
    self.fitted_gamma = gamma.astype(np.float32)


class Ours:
  """Our CondSOC solve and M-step at the benchmark's sizes, compiled."""

  def __init__(self, sizes: dict, problem: Problem, args):
    self.sizes = sizes
    self.settings = kernel.CondSOCSettings(
        sigma=sizes["sigma"], num_mean_knots=sizes["num_mean_knots"],
        num_gamma_knots=sizes["num_gamma_knots"], num_steps=sizes["num_steps"],
        num_noise=sizes["num_noise"], lr_mean=sizes["lr_mean"], lr_gamma=sizes["lr_gamma"],
        num_iters=args.iters, micro_batch=sizes["pairs"], momentum=sizes["momentum"])
    self.keypoints = jnp.asarray(problem.keypoints)
    self.inv_std = feedback.keypoint_inv_std(self.keypoints)
    self.mean_path = jnp.asarray(problem.mean_path)
    self.key = jax.random.key(args.seed)

    def solve_with(settings):
      return lambda mean_path, key: kernel.condsoc_solve(
          mean_path[:, 0], mean_path[:, -1], mean_path, key, settings=settings,
          guide=kernel.Guidance(self.keypoints, self.inv_std),
          weights=kernel.PairWeights(sign=1.0, tau=sizes["tau"]))

    solve = solve_with(self.settings)
    self.solve_fn = solve
    self.solve, self.solve_compile_s, *_ = timing.compile_and_time(
        solve, self.mean_path, self.key, repeats=0)
    self.chunked = None
    # the same solve, its gradient over chunks of pairs (csoc.pair_chunk; 0: as `solve`)
    chunked_solve = solve_with(self.settings._replace(pair_chunk=args.pair_chunk))
    if args.pair_chunk:
      compiled = timing.compile_and_time(chunked_solve, self.mean_path, self.key, repeats=0)
      self.chunked = {"solve": compiled.compiled, "compile_s": compiled.compile_seconds,
                      "cost": timing.program_cost(chunked_solve, self.mean_path, self.key,
                                                  compiled=compiled.compiled).per(args.iters)}
    self.sharded = None
    if args.devices > 1:  # the same solve (in chunks with --pair_chunk), pairs over devices
      mesh = distributed.make_mesh()
      mean_path = distributed.shard_batch(np.asarray(problem.mean_path), mesh)
      key = distributed.replicate(self.key, mesh)
      compiled = timing.compile_and_time(chunked_solve, mean_path, key, repeats=0)
      self.sharded = {"mean_path": mean_path, "key": key, "solve": compiled.compiled,
                      "compile_s": compiled.compile_seconds,
                      "cost": timing.program_cost(chunked_solve, mean_path, key,
                                                  compiled=compiled.compiled).per(args.iters)}

    # The M-step of kernel.make_kernel's alternation, on the fitted-path stand-ins.
    self.net = models.VectorField(dim=sizes["dim"])
    self.apply_fn = self.net.apply
    self.x0 = jnp.asarray(problem.fitted_mean_path[:, 0])
    self.x1 = jnp.asarray(problem.fitted_mean_path[:, -1])
    self.path_params = gpath.PathParams(
        mean_knots=jnp.asarray(problem.fitted_mean_path[:, 1:-1]),
        gamma_knots=jnp.asarray(problem.fitted_gamma))
    self.tx = optax.adamw(sizes["lr"], weight_decay=sizes["weight_decay"],
                          eps=sizes["adam_eps"])
    params = self.net.init(jax.random.key(args.seed + 1), jnp.zeros((1, sizes["dim"])),
                           jnp.zeros((1,)))
    self.mstate = (params, self.tx.init(params), params, jnp.zeros((), jnp.int32),
                   jax.random.key(args.seed + 2))
    self.one_step, self.one_step_compile_s, *_ = timing.compile_and_time(
        lambda state: self.match_steps(state, 1), self.mstate, repeats=0)
    self.scan_steps, self.scan_compile_s, *_ = timing.compile_and_time(
        lambda state: self.match_steps(state, args.msteps), self.mstate, repeats=0)
    self.msteps = args.msteps
    # XLA's counts of one unit of each row (an iteration, an M-step), scans by trip count
    self.costs = {
        "solve": timing.program_cost(solve, self.mean_path, self.key,
                                     compiled=self.solve).per(args.iters),
        "one": timing.program_cost(lambda state: self.match_steps(state, 1), self.mstate,
                                   compiled=self.one_step),
        "scan": timing.program_cost(lambda state: self.match_steps(state, args.msteps),
                                    self.mstate, compiled=self.scan_steps).per(args.msteps)}

  def match_step(self, carry, step_key):
    """One M-step, as in ``kernel.make_kernel`` (forward direction, no base drift)."""
    params, opt_state, ema, count = carry
    sizes, num_pairs = self.sizes, self.x0.shape[0]
    k_idx, k_t, k_n = jax.random.split(step_key, 3)
    idx = prng.randint(k_idx, (sizes["batch"],), 0, num_pairs)
    t = prng.uniform(k_t, (sizes["batch"],), jnp.float32, 1e-4, 1.0 - 1e-4)
    noise = prng.normal(k_n, (sizes["batch"], sizes["dim"]), jnp.float32)
    pp = jax.tree.map(lambda a: a[idx], self.path_params)
    xt, target = jax.vmap(lambda q, a, b, tt, n: kernel.path_drift_at(
        q, a, b, tt, n, sigma=sizes["sigma"], sign=1.0))(pp, self.x0[idx], self.x1[idx],
                                                          t, noise)
    loss, grads = jax.value_and_grad(kernel.bridge_matching_loss)(
        params, self.apply_fn, xt, t, target)
    updates, opt_state = self.tx.update(grads, opt_state, params)
    params = optax.apply_updates(params, updates)
    n = count.astype(jnp.float32)
    decay = jnp.minimum(sizes["ema_decay"], (1.0 + n) / (10.0 + n))
    ema = optax.incremental_update(params, ema, 1.0 - decay)
    return (params, opt_state, ema, count + 1), loss

  def match_steps(self, state, num_steps: int):
    *carry, key = state
    key, sub = jax.random.split(key)
    carry, losses = jax.lax.scan(self.match_step, tuple(carry),
                                 jax.random.split(sub, num_steps))
    return (*carry, key), losses

  def run_solve(self, n: int) -> None:
    for _ in range(n):
      out = self.solve(self.mean_path, self.key)
    jax.block_until_ready(out)

  def run_chunked_solve(self, n: int) -> None:
    for _ in range(n):
      out = self.chunked["solve"](self.mean_path, self.key)
    jax.block_until_ready(out)

  def run_sharded_solve(self, n: int) -> None:
    for _ in range(n):
      out = self.sharded["solve"](self.sharded["mean_path"], self.sharded["key"])
    jax.block_until_ready(out)

  def _run_m(self, step, n: int) -> None:
    state = self.mstate
    for _ in range(n):
      state, losses = step(state)
    jax.block_until_ready(losses)
    self.mstate = state

  def run_one_steps(self, n: int) -> None:
    self._run_m(self.one_step, n)

  def run_scan_steps(self, n: int) -> None:
    self._run_m(self.scan_steps, n)


# ------------------------------------------------------------------------------- checks


def check_same(ours: Ours, official: Official, problem: Problem) -> str:
  """Both sides compute the same CondSOC objective and M-step targets and loss."""
  torch, sizes = official.torch, ours.sizes
  num = 64  # pairs checked
  t_grid = kernel.time_grid(ours.settings)
  # CondSOC: the official path draws its noise inside sample_xt (one randn); draw the same
  # numbers from the same seed for ours.
  gp = official.new_gpath(torch.from_numpy(problem.fitted_mean_path[:num].copy()),
                          torch.from_numpy(problem.fitted_gamma[:num, :, None].copy()))
  gp.train()
  t = torch.linspace(1e-3, 1 - 1e-3, sizes["num_steps"])
  torch.manual_seed(123)
  noise = torch.randn(num, sizes["num_noise"], sizes["num_steps"], sizes["dim"])
  torch.manual_seed(123)
  xt, ut = gp(t, sizes["num_noise"], "fwd")
  loss_o = official.loss_fn(t, xt, ut, "fwd")
  loss_o.backward()
  grad_mean_o = gp.mean.knots.grad.permute(1, 0, 2).numpy()
  grad_gamma_o = gp.gamma.knots.grad[..., 0].T.numpy()
  params = gpath.PathParams(jnp.asarray(problem.fitted_mean_path[:num, 1:-1]),
                            jnp.asarray(problem.fitted_gamma[:num]))

  csoc_problem = kernel.CondSOCProblem(sizes["sigma"], t_grid,
                                       kernel.Guidance(ours.keypoints, ours.inv_std))

  def objective(p):
    losses, _ = jax.vmap(lambda pp, a, b, n: kernel.condsoc_pair_loss(
        pp, a, b, n, csoc_problem, kernel.PairWeights(sign=1.0, tau=sizes["tau"])))(
            p, jnp.asarray(problem.fitted_mean_path[:num, 0]),
            jnp.asarray(problem.fitted_mean_path[:num, -1]), jnp.asarray(noise.numpy()))
    return jnp.mean(losses)

  loss_u, grad_u = jax.value_and_grad(objective)(params)
  rel = lambda a, b: float(np.max(np.abs(np.asarray(a) - b)) / np.max(np.abs(b)))
  loss_o = float(loss_o.detach())
  err_loss = abs(float(loss_u) - loss_o) / abs(loss_o)
  err_mean = rel(grad_u.mean_knots, grad_mean_o)
  # The official StdSpline trains the interior std knots only (its end knots are fixed).
  err_gamma = rel(grad_u.gamma_knots[:, 1:-1], grad_gamma_o)
  end_gamma = float(np.max(np.abs(np.asarray(grad_u.gamma_knots[:, [0, -1]]))))

  # M-step: targets of sample_gpath (t and noise from the same seed), network and loss.
  batch = {key: value[:num] for key, value in official.batches[0].items()}
  official.model.direction = "fwd"
  torch.manual_seed(7)
  _, _, t_o, xt_o, vt_o = official.model.sample_gpath(batch)
  torch.manual_seed(7)
  t_same = torch.rand(num) * (1 - 2e-4) + 1e-4
  noise_m = torch.randn(num, 1, num, sizes["dim"])[torch.arange(num), 0, torch.arange(num)]
  mean_xt, gamma_xs = batch["mean_xt"].numpy(), batch["gamma_xs"][..., 0].numpy()
  pp = gpath.PathParams(jnp.asarray(mean_xt[:, 1:-1]), jnp.asarray(gamma_xs))
  xt_u, vt_u = jax.vmap(lambda q, a, b, tt, n: kernel.path_drift_at(
      q, a, b, tt, n, sigma=sizes["sigma"], sign=1.0))(
          pp, jnp.asarray(mean_xt[:, 0]), jnp.asarray(mean_xt[:, -1]),
          jnp.asarray(t_same.numpy()), jnp.asarray(noise_m.numpy()))
  err_t = float(np.max(np.abs(t_same.numpy() - t_o.numpy())))
  err_xt = rel(xt_u, xt_o.detach().numpy())
  err_vt = rel(vt_u, vt_o.detach().numpy())
  # Our network with the official network's weights (copied layer by layer).
  field = official.model.fwd_net.model.net
  layers = [field.t_module[0], field.t_module[2], field.x_module[0], field.x_module[2],
            field.x_module[4], field.out_module[0], field.out_module[2]]
  net_params = {"params": {f"Dense_{i}": {
      "kernel": jnp.asarray(layer.weight.detach().numpy().T),
      "bias": jnp.asarray(layer.bias.detach().numpy())} for i, layer in enumerate(layers)}}
  with torch.no_grad():
    pred_o = official.model.fwd_net(xt_o, t_o).numpy()
    loss_m_o = float(official.model.bm_loss(official.model.fwd_net, xt_o, t_o, vt_o))
  pred_u = ours.apply_fn(net_params, jnp.asarray(xt_o.detach().numpy()),
                         jnp.asarray(t_o.numpy()))
  err_net = rel(pred_u, pred_o)
  loss_m_u = float(kernel.bridge_matching_loss(net_params, ours.apply_fn,
                                               jnp.asarray(xt_o.detach().numpy()),
                                               jnp.asarray(t_o.numpy()),
                                               jnp.asarray(vt_o.detach().numpy())))
  err_loss_m = abs(loss_m_u - loss_m_o) / abs(loss_m_o)
  errors = dict(condsoc_loss=err_loss, grad_mean_knots=err_mean,
                grad_gamma_knots=err_gamma, mstep_t=err_t, mstep_xt=err_xt,
                mstep_target=err_vt, network=err_net, bm_loss=err_loss_m)
  bad = {k: v for k, v in errors.items() if not v < 1e-3}
  if bad:
    raise AssertionError(f"ours and the official code differ: {bad}")
  return ("same functions (relative max differences, 64 pairs): CondSOC loss "
          f"{err_loss:.1e}, its gradient: mean knots {err_mean:.1e}, interior std knots "
          f"{err_gamma:.1e}; M-step x_t {err_xt:.1e}, drift target {err_vt:.1e}, network "
          f"{err_net:.1e}, loss {err_loss_m:.1e}. (The loss's gradient for the two end std "
          f"knots, max {end_gamma:.1e} here, is zeroed in our solve by gpath.pin_std_ends: "
          f"the official spline keeps those knots fixed.)")


# --------------------------------------------------------------------------------- timing


def _seconds(run, inner: int) -> float:
  start = time.perf_counter()
  run(inner)
  return time.perf_counter() - start



def bench(rows, name, what, compile_s, ours_run, official_run, *, ours_units: int,
          official_units: int, per: int, repeats: int, cost: timing.Cost,
          goal: float = GOAL):
  """Alternating timed samples; ms per unit of work (``per`` units per call of a runner).

  ``ours_run(k)`` / ``official_run(k)`` run k calls; ``*_units`` calls make one sample.
  ``cost``: XLA's counts of one unit of ours (for the "of peak" column); ``goal``: the
  official / ours ratio sought (for the "goal needs" column).
  """
  ours_run(1)
  if official_run is not None:
    official_run(1)
  ours_ms, official_ms = [], []
  for _ in range(repeats):
    ours_ms.append(1e3 * _seconds(ours_run, ours_units) / (ours_units * per[0]))
    if official_run is not None:
      official_ms.append(1e3 * _seconds(official_run, official_units)
                         / (official_units * per[1]))
  row = timing.side_by_side_row(name, what, ours_ms, official_ms, compile_s, 2)
  official_s = 1e-3 * statistics.median(official_ms) if official_ms else None
  rows.append((row, cost, 1e-3 * statistics.median(ours_ms), official_s, goal))
  print(" | ".join(row), flush=True)


# -------------------------------------------------------------------------------- profile


def profile(ours: Ours, official: Official | None, args) -> None:
  """Where one CondSOC iteration's time goes (B pairs, all N x S samples).

  Ours: each piece is compiled on its own and the pieces are called round-robin
  (``--profile_repeats`` rounds), so every piece sees the same machine load.
  """
  sizes, settings = ours.sizes, ours.settings
  reps = args.profile_repeats
  print(f"\nprofile of one CondSOC iteration, {sizes['pairs']} pairs (ms, median (min) of "
        f"{reps} calls; ours: pieces called round-robin)", flush=True)
  num_pairs, dim = ours.mean_path.shape[0], ours.mean_path.shape[-1]
  shape = (num_pairs, settings.num_noise, settings.num_steps, dim)
  t = kernel.time_grid(settings)
  params = jax.vmap(lambda p: gpath.init_params(p, settings.num_gamma_knots))(
      ours.mean_path)
  x0, x1 = ours.mean_path[:, 0], ours.mean_path[:, -1]
  tau = jnp.full((num_pairs,), sizes["tau"])
  draw = lambda key: prng.normal(jax.random.fold_in(key, 0), shape)
  noise = draw(ours.key)

  def sample(p, n):
    return jax.vmap(lambda q, a, b, m: gpath.sample_and_drift(
        q, a, b, settings.sigma, t, m, 1.0))(p, x0, x1, n)

  def feedback_only(x):
    terms = jax.vmap(jax.vmap(lambda xn: feedback.feedback_terms(
        xn, ours.keypoints, ours.inv_std, 0)))(x)
    return jax.tree.map(jnp.sum, terms[1:])

  def objective(p, n):
    problem = kernel.CondSOCProblem(settings.sigma, t,
                                    kernel.Guidance(ours.keypoints, ours.inv_std))
    losses, _ = jax.vmap(lambda pp, a, b, m, w: kernel.condsoc_pair_loss(
        pp, a, b, m, problem, kernel.PairWeights(sign=1.0, tau=w)))(p, x0, x1, n, tau)
    return jnp.sum(losses) / settings.micro_batch

  tx = kernel.condsoc_optimizer(settings)
  opt_state = tx.init(params)
  grads = jax.grad(objective)(params, noise)

  def update(p, g, s):
    u, s = tx.update(g, s, p)
    return optax.apply_updates(p, u), s

  x, _ = jax.jit(sample)(params, noise)
  pieces = {
      "a. noise draw [B, N, S, D] (core.prng.normal), alone": (draw, ours.key),
      "b. path samples + drift": (lambda p, n: sample(p, n)[1], params, noise),
      "c. feedback terms alone: nearest keypoint, grad G, H 1": (feedback_only, x),
      "d. whole objective, forward (noise given)": (objective, params, noise),
      "e. objective + gradient (noise given)": (jax.grad(objective), params, noise),
      "f. objective + gradient, noise drawn in the program (as in the solve)": (
          jax.grad(lambda p, key: objective(p, draw(key))), params, ours.key),
      "g. SGD update": (update, params, grads, opt_state),
      f"h. one iteration of the solve ({args.iters} per call, divided)": (
          ours.solve_fn, ours.mean_path, ours.key),
  }
  compiled = {}
  for name, (fn, *a) in pieces.items():
    compiled[name] = (jax.jit(fn).lower(*a).compile(), a)
    jax.block_until_ready(compiled[name][0](*a))
  seconds = {name: [] for name in pieces}
  for _ in range(reps):
    for name, (fn, a) in compiled.items():
      start = time.perf_counter()
      jax.block_until_ready(fn(*a))
      seconds[name].append(time.perf_counter() - start)
  for name, values in seconds.items():
    scale = 1e3 / (args.iters if name.startswith("h.") else 1)
    print(f"  ours: {name}: {scale * statistics.median(values):.1f} "
          f"({scale * min(values):.1f})", flush=True)
  flops = ours.solve.cost_analysis()
  flops = flops[0] if isinstance(flops, (list, tuple)) else flops
  print(f"  ours: XLA's count for the {args.iters}-iteration solve: "
        f"{(flops or {}).get('flops', float('nan')) / 1e6:.0f} MFLOP (its scan body once)")
  if official is None:
    return
  torch, gpath_lib = official.torch, official.gpath_lib
  gp = official.gpath
  optim = gpath_lib.build_optim(gp, official.ccfg)
  t_o = torch.linspace(1e-3, 1 - 1e-3, sizes["num_steps"])
  stages = {"path sample + drift (gpath forward, jvp)": [], "loss_fn (partial_g)": [],
            "backward": [], "SGD step + loss.item()": []}
  gp.train()
  for _ in range(max(2, reps // 4)):  # the body of fit's loop, stage by stage
    optim.zero_grad()
    start = time.perf_counter()
    xt, ut = gp(t_o, sizes["num_noise"], "fwd")
    mid = time.perf_counter()
    loss = official.loss_fn(t_o, xt, ut, "fwd")
    back = time.perf_counter()
    loss.backward()
    step = time.perf_counter()
    optim.step()
    loss.item()
    end = time.perf_counter()
    for key, value in zip(stages, (mid - start, back - mid, step - back, end - step)):
      stages[key].append(value)
  for name, values in stages.items():
    print(f"  official: {name}: {1e3 * statistics.median(values):.1f} "
          f"({1e3 * min(values):.1f})", flush=True)
  ccfg = official.ccfg.copy()
  ccfg.nitr = 2
  with torch.profiler.profile(activities=[torch.profiler.ProfilerActivity.CPU]) as prof:
    gpath_lib.fit(ccfg, gp, "fwd", official.loss_fn)
  print("  official, torch profiler over one fit of 2 iterations:")
  print(prof.key_averages().table(sort_by="self_cpu_time_total", row_limit=12))


# ----------------------------------------------------------------------------------- main


def main():
  parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
  parser.add_argument("--official_dir", default=None,
                      help="a checkout of github.com/panostheo98/FSBM (optional; needs torch)")
  parser.add_argument("--torch_threads", type=int, default=len(os.sched_getaffinity(0)))
  parser.add_argument("--pairs", type=int, default=None,
                      help="endpoint pairs of the CondSOC solve (default: csoc.mB, 1024)")
  parser.add_argument("--iters", type=int, default=10,
                      help="CondSOC iterations per call (ours: one solve; official: fit)")
  parser.add_argument("--msteps", type=int, default=200,
                      help="M-steps per timed sample (ours: one lax.scan of them per call)")
  parser.add_argument("--repeats", type=int, default=5, help="alternating pairs per row")
  parser.add_argument("--seed", type=int, default=0)
  parser.add_argument("--profile", action="store_true")
  parser.add_argument("--profile_repeats", type=int, default=20)
  parser.add_argument("--devices", type=int, default=1,
                      help="CPU devices to expose (one per core: 2 here); > 1 adds a row of "
                           "the CondSOC solve with the pairs split over them (in chunks, "
                           "with --pair_chunk)")
  parser.add_argument("--pair_chunk", type=int, default=256,
                      help="> 0 adds a row of the CondSOC solve with its gradient over chunks "
                           "of this many pairs (csoc.pair_chunk; 0: no such row)")
  parser.add_argument("--xla_flags", choices=("reproduce", "default"), default="reproduce",
                      help="ours with the XLA flags the reproduction registers for the "
                           "S-tunnel part (today: no YNN reduction fusions), or XLA's defaults")
  args = parser.parse_args()
  from launch import reproduce as launcher  # pylint: disable=g-import-not-at-top
  launcher.benchmark_xla_flags("fsbm/stunnel", args.xla_flags)  # before jax starts its backend
  launcher.benchmark_cpu_devices(args.devices)
  if os.environ.get("OPENBLAS_CORETYPE") or os.environ.get("OPENBLAS_L2_SIZE"):
    print("note: OPENBLAS_CORETYPE / OPENBLAS_L2_SIZE are set; they slow the official "
          "side's NumPy (unset them for this command)", flush=True)

  modules = None
  sizes = dict(OFFICIAL_DEFAULTS)
  if args.official_dir:
    official_dir = pathlib.Path(args.official_dir)
    modules = import_official(official_dir)
    sizes = sizes_from_config(modules[1])
    keypoints = tasks.load_keypoints(official_dir / "data" / "kp_traj_stunnel.pt")
    source = "the official data/kp_traj_stunnel.pt"
  else:
    keypoints = tasks.generate_keypoints("stunnel", 100, sizes["num_steps"])
    source = "our generated S-tunnel keypoints"
  if args.pairs:
    sizes["pairs"] = args.pairs
  problem = Problem(sizes, keypoints, args.seed)
  ours = Ours(sizes, problem, args)
  official = None
  if modules is not None:
    official = Official(modules, problem, args)
    print(check_same(ours, official, problem), flush=True)
  else:
    print("no --official_dir: timing ours only (no official column, no ratio); ", end="")
  print(f"{timing.machine_line(official.torch if official else None)}; keypoints: {source} "
        f"({keypoints.shape[0]})", flush=True)

  rows = []
  s = sizes
  bench(rows, f"CondSOC iteration ({args.iters} per call)",
        f"mB={s['pairs']} pairs, S={s['num_steps']}, N={s['num_noise']}, "
        f"T_mean={s['num_mean_knots']}, T_gamma={s['num_gamma_knots']}, tau={s['tau']:g}",
        ours.solve_compile_s, ours.run_solve, official.run_fit if official else None,
        ours_units=1, official_units=1, per=(args.iters, args.iters), repeats=args.repeats,
        cost=ours.costs["solve"])
  if ours.chunked is not None:
    bench(rows, f"CondSOC iteration ({args.iters} per call), gradient over chunks of "
          f"{args.pair_chunk} pairs (csoc.pair_chunk)",
          f"mB={s['pairs']} pairs, S={s['num_steps']}, N={s['num_noise']}, "
          f"T_mean={s['num_mean_knots']}, T_gamma={s['num_gamma_knots']}, tau={s['tau']:g}",
          ours.chunked["compile_s"], ours.run_chunked_solve,
          official.run_fit if official else None, ours_units=1, official_units=1,
          per=(args.iters, args.iters), repeats=args.repeats, cost=ours.chunked["cost"])
  if ours.sharded is not None:
    chunks = f", in chunks of {args.pair_chunk}" if args.pair_chunk else ""
    bench(rows, f"CondSOC iteration ({args.iters} per call), pairs over {args.devices} CPU "
          f"devices{chunks}", f"mB={s['pairs']} pairs, S={s['num_steps']}, N={s['num_noise']}, "
          f"T_mean={s['num_mean_knots']}, T_gamma={s['num_gamma_knots']}, tau={s['tau']:g}",
          ours.sharded["compile_s"], ours.run_sharded_solve,
          official.run_fit if official else None, ours_units=1, official_units=1,
          per=(args.iters, args.iters), repeats=args.repeats, cost=ours.sharded["cost"])
  what = f"batch {s['batch']}, MLP 128, AdamW + EMA"
  bench(rows, "M-step (ours: 1 per call)", what, ours.one_step_compile_s,
        ours.run_one_steps, official.run_msteps if official else None,
        ours_units=args.msteps, official_units=args.msteps, per=(1, 1),
        repeats=args.repeats, cost=ours.costs["one"])
  bench(rows, f"M-step (ours: {args.msteps} per call, lax.scan)", what, ours.scan_compile_s,
        ours.run_scan_steps, official.run_msteps if official else None,
        ours_units=1, official_units=args.msteps, per=(args.msteps, 1),
        repeats=args.repeats, cost=ours.costs["scan"])

  timing.print_limit_table(
      ["hot path", "size", "ours ms, median (min-max)", "ours compile s",
       "official ms, median (min-max)", "official / ours, median (min-max)"], rows)
  if official is None:
    print("(ours only: pass --official_dir for the side-by-side run)")
  if args.profile:
    profile(ours, official, args)


if __name__ == "__main__":
  main()
