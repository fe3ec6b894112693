r"""OCM speed: one head training step and one K=10 sampling pass, ours and the official code.

  git clone https://github.com/J-zin/OCM_DPM /tmp/OCM_DPM     # the official code (PyTorch)
  pip install -e .[bench]                                     # a CPU torch (see the README)
  env -u OPENBLAS_CORETYPE -u OPENBLAS_L2_SIZE OPENBLAS_NUM_THREADS=1 PYTHONPATH=. \
      python benchmarks/ocm.py --official_dir=/tmp/OCM_DPM --torch_threads=2

Both sides run in this one process, alternating (ours, official, ours, official, ...) after
a warm-up (ours with the XLA flags ``launch.reproduce`` gives the ocm check;
``--xla_flags=default``: XLA's own), on the same network: the `cpu` preset's residual MLP
eps network (2-D ring, width 128, 3 blocks, time embedding 64) with its 2 x 128 covariance
head, batch 256 for the head step and 2000 samples for sampling. The official repository has
no vector network (its models are CIFAR/ImageNet UNets), so the official *functions* run on
a torch twin of our network, built here: the same layers and widths, our parameters copied
in (the outputs are checked to agree), arranged like the official pretrained-backbone class
(frozen eps network, head on its last features, both outputs concatenated on the channel
axis of an [B, 2 D, 1, 1] tensor, which is what the official wrapper splits).

* head step, official: one iteration of the official training loop's body, i.e. its
  ``DTDSDM.update`` on the ``eps_hes`` wrapper (the probe target grad_x (s . v) by autograd
  through the frozen network, the head's squared loss, Adam, a constant LR scheduler as
  its default without warm-up) followed by
  its parameter EMA of the whole model. Ours: one jitted ``train_step`` of
  ``kernel.make_head_kernel`` with the OCM head only, the paper's linear head and squared
  loss, Adam and the head EMA (the target from one ``jax.linearize``), compiled as the
  package's train loop compiles it: with the config's ``compiler_options``
  (``cpu_threaded_dots``: XLA:CPU's matmuls on its multi-threaded Eigen dot;
  ``--compiler_options=default`` for XLA's own).
* K=10 sampling, official: ``sample_dtdpm`` with its ``DDPM`` and ``rev_var_type="optimal"``
  (x0 and covariance clipping as ours: x0 unclipped, Cov[x0 | x_t] clamped to [0, 1]).
  Ours: the jitted ``diffusion.sample`` with the OCM predictor (one ``lax.scan``).

Each timed sample is ``--inner`` consecutive calls (per-call milliseconds reported); a row
gives both medians with min-max over ``--repeats`` and the median (min-max) of the per-pair
ratios official / ours; "ours of peak" places ours against this machine's own peaks,
measured in the same run after the timed rows (the roofline's bound and the fraction of its
peak reached, from XLA's counts per step or pass; ``core.timing``). ``--devices=N`` (N > 1,
CPU hosts) exposes N CPU devices, one per core, and adds a row of the 10-per-call head step
with the batch split over them, replicated parameters and an all-reduced gradient, as the
package's train loop runs on every device (``core.distributed``): on a CPU, devices are
how a program of small matmuls gets more than one core. It times the step on a batch placed
once; the launcher end to end is slower on two CPU devices than on one (``seeds/ocm.md``).
It also adds a row of the sampler with the samples split over the devices, compiled as
``ocm.evaluate`` compiles it (traced under the mesh: ``diffusion.sample`` splits them).
``--profile`` adds where the time goes on each side. Without ``--official_dir`` only ours
is timed, and the script says so.

OPENBLAS_CORETYPE and OPENBLAS_L2_SIZE (set on some machines for old OpenBLAS builds) slow
a current NumPy, which the official side uses for its schedule tables and timestep draws:
unset them for this command only, as above. One BLAS thread; torch threads as given
(``--torch_threads``, default: this process's cores, the ones XLA:CPU's own thread pool
uses).
"""

from __future__ import annotations

import argparse
import copy
import os
import pathlib
import statistics
import sys
import time

os.environ.setdefault("OPENBLAS_NUM_THREADS", "1")

import jax  # noqa: E402
import jax.numpy as jnp  # noqa: E402
import numpy as np  # noqa: E402
import optax  # noqa: E402

from jaxlib_papers.core import compiler, distributed, timing  # noqa: E402
from jaxlib_papers.ocm import covariance, data, diffusion, kernel, models  # noqa: E402
from jaxlib_papers.ocm.configs import default as default_config  # noqa: E402

GOAL = 3.0  # issue 40's official / ours goal for every row (the "goal needs" column)

# ---------------------------------------------------------------------------------- ours


class Ours:
  """Our head kernel, predictor and sampler at the benchmark's size."""

  def __init__(self, args):
    self.schedule = diffusion.make_schedule("linear", 1000)
    self.model = models.MLPBackbone(width=args.width, depth=args.depth,
                                    time_embed_dim=args.time_embed_dim)
    k_p, k_h, k_s = jax.random.split(jax.random.key(args.seed), 3)
    mix = data.make_mixture(default_config.get_config("cpu"))  # the 2-D ring
    args.dim = int(mix.dim)
    self.head = models.VectorHead(out_dim=args.dim, hidden=(args.head_hidden,) * 2)
    self.x0 = jnp.asarray(data.sample_mixture_numpy(
        mix, np.random.default_rng(args.seed), args.batch), jnp.float32)
    self.backbone = self.model.init(k_p, self.x0[:2], jnp.ones((2,), jnp.int32))
    settings = kernel.HeadSettings(self.model, self.head, self.schedule, heads=("ocm",),
                                   num_probes=1, ema_decay=args.ema_decay, param="linear",
                                   loss="mse")
    self.heads = kernel.make_head_kernel(settings, optax.adam(args.lr), self.x0,
                                         self.backbone)
    self.state = jax.jit(self.heads.init)(k_h)
    # The train steps compile as the package's train loop compiles them (the config's
    # compiler_options: XLA:CPU's threaded dots); the sampler with XLA's defaults, as
    # ocm.evaluate runs it.
    self.options = compiler.named(args.compiler_options)
    step_jit = lambda fn: jax.jit(fn, compiler_options=self.options)
    self.step, self.step_compile_s, *_ = timing.compile_and_time(
        step_jit(self.heads.train_step), self.state, self.x0, repeats=0)
    # The scan of 10 steps per call that core.train_loop runs (heads.steps_per_call).
    chunked = kernel.make_head_kernel(settings, optax.adam(args.lr), self.x0, self.backbone,
                                      steps_per_call=args.steps_per_call)
    chunk = jnp.repeat(self.x0[:, None], args.steps_per_call, axis=1)
    self.chunk = chunk
    self.chunk_step, self.chunk_compile_s, *_ = timing.compile_and_time(
        step_jit(chunked.train_step), self.state, chunk, repeats=0)

    methods = kernel.Methods(self.model, self.backbone, self.head, self.state.params,
                             max_var=1.0)
    self.predict = kernel.make_predictor(methods, "ocm", self.schedule)
    self.timesteps = diffusion.skip_timesteps(args.sample_steps, self.schedule.num_steps)
    sample = lambda x, k: diffusion.sample(self.predict, self.schedule, self.timesteps, x, k,
                                           eta=1.0)
    self.x_T = jax.random.normal(k_s, (args.sample_batch, args.dim))
    self.sample_key = jax.random.key(args.seed + 1)
    self.sample, self.sample_compile_s, *_ = timing.compile_and_time(
        sample, self.x_T, self.sample_key, repeats=0)
    self.sharded = None
    if args.devices > 1:  # the same chunked step, the batch split over the CPU devices
      mesh = distributed.make_mesh()
      state = distributed.replicate(self.state, mesh)
      batch = distributed.shard_batch(np.asarray(chunk), mesh)
      step = timing.compile_and_time(step_jit(chunked.train_step), state, batch, repeats=0)
      self.sharded = {"state": state, "batch": batch, "step": step.compiled,
                      "compile_s": step.compile_seconds,
                      "cost": timing.program_cost(chunked.train_step, state, batch,
                                                  compiled=step.compiled
                                                  ).per(args.steps_per_call)}
      # the sampler as ocm.evaluate compiles it: traced under the mesh, samples split
      over = timing.compile_and_time(
          jax.jit(distributed.traced_on(mesh, sample),
                  out_shardings=distributed.replicated(mesh)),
          self.x_T, self.sample_key, repeats=0)
      self.sharded |= {"sample": over.compiled, "sample_compile_s": over.compile_seconds}
    # XLA's counts of one unit of each row (a head step, a sampling pass)
    self.costs = {
        "step": timing.program_cost(self.heads.train_step, self.state, self.x0,
                                    compiled=self.step),
        "chunk": timing.program_cost(chunked.train_step, self.state, chunk,
                                     compiled=self.chunk_step).per(args.steps_per_call),
        "sample": timing.program_cost(sample, self.x_T, self.sample_key,
                                      compiled=self.sample)}

  def _train(self, step, batch, n: int) -> None:
    state = self.state
    for _ in range(n):
      state, metrics = step(state, batch)
    jax.block_until_ready(metrics["loss"])
    self.state = state

  def run_steps(self, n: int) -> None:
    self._train(self.step, self.x0, n)

  def run_chunks(self, n: int) -> None:
    self._train(self.chunk_step, self.chunk, n)

  def run_sharded_chunks(self, n: int) -> None:
    state, step, batch = self.sharded["state"], self.sharded["step"], self.sharded["batch"]
    for _ in range(n):
      state, metrics = step(state, batch)
    jax.block_until_ready(metrics["loss"])
    self.sharded["state"] = state

  def run_sample(self, n: int) -> None:
    for _ in range(n):
      out = self.sample(self.x_T, self.sample_key)
    jax.block_until_ready(out)

  def run_sharded_sample(self, n: int) -> None:
    for _ in range(n):
      out = self.sharded["sample"](self.x_T, self.sample_key)
    jax.block_until_ready(out)


# ------------------------------------------------------------------------------ official


def _import_official(official_dir: pathlib.Path):
  """The official modules, imported from the user's checkout at run time."""
  if not (official_dir / "core" / "criterions" / "ddpm.py").is_file():
    raise FileNotFoundError(f"--official_dir: {official_dir}/core/criterions/ddpm.py not "
                            "found (clone J-zin/OCM_DPM)")
  sys.path.insert(0, str(official_dir))
  import torch  # noqa: PLC0415
  from core import criterions  # noqa: PLC0415
  from core.diffusion import dtdpm, sample, schedule, wrapper  # noqa: PLC0415
  from core.utils import managers  # noqa: PLC0415
  return torch, criterions, dtdpm, sample, schedule, wrapper, managers


def _torch_twin(torch, ours: Ours, args):
  """Our eps network and head as torch modules (our parameters), in the layout of the
  official pretrained-backbone models: x [B, D, 1, 1], t [B] -> [B, 2 D, 1, 1]."""
  nn = torch.nn

  def linear(params, bias=True):
    kernel_ = np.asarray(params["kernel"])
    layer = nn.Linear(kernel_.shape[0], kernel_.shape[1], bias=bias)
    with torch.no_grad():
      layer.weight.copy_(torch.from_numpy(kernel_.T.copy()))
      if bias:
        layer.bias.copy_(torch.from_numpy(np.asarray(params["bias"]).copy()))
    return layer

  p = ours.backbone["params"]
  dense = [p[f"Dense_{i}"] for i in range(len(p))]  # flax numbers layers in call order
  silu = nn.functional.silu

  class Backbone(nn.Module):
    """models.MLPBackbone, layer for layer."""

    def __init__(self):
      super().__init__()
      # Dense(W)(silu(Dense(W)(temb))): flax numbers the outer layer first.
      self.temb = nn.ModuleList([linear(dense[1]), linear(dense[0])])
      self.x_in = linear(dense[2])
      self.blocks = nn.ModuleList()
      for b in range(args.depth):
        i = 3 + 3 * b
        self.blocks.append(nn.ModuleList([linear(dense[i]), linear(dense[i + 1], bias=False),
                                          linear(dense[i + 2])]))
      self.out = linear(dense[3 + 3 * args.depth])
      half = args.time_embed_dim // 2
      self.register_buffer("freqs", torch.exp(
          -np.log(10000.0) * torch.arange(half, dtype=torch.float32) / half))

    def forward(self, x, t):
      args_ = t.float()[:, None] * self.freqs
      temb = torch.cat([torch.sin(args_), torch.cos(args_)], dim=-1)
      temb = self.temb[1](silu(self.temb[0](temb)))
      h = self.x_in(x) + temb
      for first, time_in, second in self.blocks:
        y = first(silu(h)) + time_in(temb)
        h = h + second(silu(y))
      features = silu(h)
      return self.out(features), features

  hp = ours.state.params["ocm"]["params"]

  class Head(nn.Module):
    """models.VectorHead."""

    def __init__(self):
      super().__init__()
      self.layers = nn.ModuleList([linear(hp[f"Dense_{i}"]) for i in range(len(hp))])

    def forward(self, features):
      h = features
      for layer in self.layers[:-1]:
        h = silu(layer(h))
      return self.layers[-1](h)

  class Twin(nn.Module):

    def __init__(self):
      super().__init__()
      self.backbone = Backbone()
      self.backbone.requires_grad_(False)  # frozen, as in the official pretrained models
      self.head = Head()

    def forward(self, x, t):
      b, d = x.shape[:2]
      eps, features = self.backbone(x.reshape(b, d), t)
      return torch.cat([eps, self.head(features)], dim=1).reshape(b, 2 * d, 1, 1)

  return Twin()


class Official:
  """The official head-training iteration and sampler on the torch twin."""

  def __init__(self, official_dir: pathlib.Path, ours: Ours, args):
    (torch, criterions, dtdpm, sample, schedule, wrapper,
     managers) = _import_official(official_dir)
    self.torch = torch
    torch.set_num_threads(args.torch_threads)
    torch.manual_seed(args.seed)
    np.random.seed(args.seed)  # the official timestep draws use NumPy's global generator
    self.model = _torch_twin(torch, ours, args)
    with np.errstate(divide="ignore"):  # its SNR table divides by cum_betas[0] = 0
      self.schedule = schedule.NamedSchedule("linear", 1000)
    self.wrapper = wrapper.DTWrapper(self.model, typ="eps_hes", rescale_timesteps=True,
                                     shift1=False, N=1000)
    models_ = managers.ModelsManager(model=self.model)
    optimizer = torch.optim.Adam(models_.parameters(), lr=args.lr)
    lr_scheduler = torch.optim.lr_scheduler.LambdaLR(optimizer, lambda it: 1.0)
    self.criterion = criterions.DTDSDM(
        self.schedule, 1, self.wrapper, models=models_,
        optimizers=managers.OptimizersManager(all=optimizer),
        lr_schedulers=managers.LRSchedulersManager(all=lr_scheduler))
    self.ema_models = managers.ModelsManager(model=copy.deepcopy(self.model))
    self.ema_rate = args.ema_decay
    x0 = torch.from_numpy(np.asarray(ours.x0).copy()).reshape(args.batch, args.dim, 1, 1)
    self.batches = iter(lambda: x0, None)  # the official loop's infinite loader
    models_.train()
    self.models = models_

    self.dtdpm = dtdpm.DDPM(self.wrapper, self.schedule, clip_x0=False, clip_cov_x0=True)
    self.sample_dtdpm = sample.sample_dtdpm
    self.x_T = torch.from_numpy(np.asarray(ours.x_T).copy()).reshape(
        args.sample_batch, args.dim, 1, 1)
    self.sample_steps = args.sample_steps

  def step(self) -> None:
    """The body of the official ``naive_fit`` loop minus its logging and checkpoints."""
    self.criterion.update(self.batches)
    self.ema_models.ema(self.models, rate=self.ema_rate)

  def run_steps(self, n: int) -> None:
    for _ in range(n):
      self.step()

  def run_sample(self, n: int) -> None:
    for _ in range(n):
      self.sample_dtdpm(self.dtdpm, self.x_T, "optimal", trajectory="linear",
                        sample_steps=self.sample_steps, clip_sigma_idx=0)


def check_same(ours: Ours, official: Official) -> str:
  """Both sides compute the same functions: schedule, network outputs, one reverse step."""
  torch = official.torch
  np.testing.assert_allclose(ours.schedule.abar, official.schedule.cum_alphas, rtol=1e-12,
                             err_msg="schedules differ")
  x = ours.x_T[:512]
  t = 1000
  tb = jnp.full((x.shape[0],), t)
  eps, features = ours.model.apply(ours.backbone, x, tb)
  head = ours.head.apply(ours.state.params["ocm"], features)
  with torch.no_grad():
    x_torch = torch.from_numpy(np.asarray(x).copy()).reshape(x.shape[0], -1, 1, 1)
    eps_o, head_o = official.wrapper(x_torch, t)
  err_net = max(float(np.max(np.abs(np.asarray(eps) - eps_o.reshape(eps.shape).numpy()))),
                float(np.max(np.abs(np.asarray(head) - head_o.reshape(head.shape).numpy()))))
  s = int(ours.timesteps[-2])
  eps_hat, x0_cov = ours.predict(x, jnp.asarray(t))
  mean, var = diffusion.reverse_moments(ours.schedule, x, jnp.asarray(t), jnp.asarray(s),
                                        eps_hat, x0_cov, 1.0)
  with torch.no_grad():
    mean_o, var_o = official.dtdpm.predict_xprev_cov_xprev(x_torch, s, t, "optimal")
  err_step = max(
      float(np.max(np.abs(np.asarray(mean) - mean_o.reshape(mean.shape).numpy()))),
      float(np.max(np.abs(np.asarray(var) - np.broadcast_to(
          var_o.reshape(-1, var.shape[-1]).numpy(), var.shape)))))
  if err_net > 1e-3 or err_step > 1e-3:
    raise AssertionError(f"the torch twin differs from ours: network {err_net:.1e}, "
                         f"reverse step {err_step:.1e}")
  return (f"same functions: max |ours - official| network outputs {err_net:.1e}, "
          f"reverse step t={t}->{s} mean/variance {err_step:.1e}")


# --------------------------------------------------------------------------------- timing


def _seconds(run, inner: int) -> float:
  start = time.perf_counter()
  run(inner)
  return (time.perf_counter() - start) / inner



def bench(rows, name, what, compile_s, ours_run, official_run, inner, repeats, warmup,
          cost: timing.Cost, goal: float = GOAL):
  """Alternating timed samples, ms per unit; ``cost``: XLA's counts of one unit of ours,
  ``goal``: the official / ours ratio sought (the table's "goal needs" column)."""
  ours_run(warmup)
  if official_run is not None:
    official_run(warmup)
  ours_ms, official_ms = [], []
  for _ in range(repeats):
    ours_ms.append(1e3 * _seconds(ours_run, inner))
    if official_run is not None:
      official_ms.append(1e3 * _seconds(official_run, inner))
  row = timing.side_by_side_row(name, what, ours_ms, official_ms, compile_s, 3)
  official_s = 1e-3 * statistics.median(official_ms) if official_ms else None
  rows.append((row, cost, 1e-3 * statistics.median(ours_ms), official_s, goal))
  print(" | ".join(row), flush=True)


# -------------------------------------------------------------------------------- profile


def vjp_target(backbone_fn, x_t, sigma_t, probes):
  """The official formulation in JAX: grad_x (s . v) by reverse mode, per probe."""
  def one(v):
    def score_dot_v(x):
      eps, _ = backbone_fn(x)
      return jnp.sum(-eps / sigma_t * v)
    return v * jax.grad(score_dot_v)(x_t)
  return jnp.square(sigma_t) * jnp.mean(jax.vmap(one)(probes), axis=0)


def profile(ours: Ours, official: Official | None, args) -> None:
  """Where a head step's time goes on each side."""
  print("\nprofile of one head step (and the kernels of both hot paths)", flush=True)
  reps = 200

  def median_ms(fn, *a):
    jax.block_until_ready(fn(*a))  # warm-up
    return 1e3 * statistics.median(timing.time_calls(fn, *a, repeats=reps)[0])

  state = ours.state
  floor = jax.jit(lambda s: s.step + 1)
  t = jax.random.randint(jax.random.key(3), (args.batch,), 1, 1001)
  x_t = diffusion.q_sample(ours.schedule, ours.x0, t,
                           jax.random.normal(jax.random.key(4), ours.x0.shape))
  sigma = diffusion.marginal(ours.schedule, t)[1][:, None]
  probes = covariance.rademacher_probes(jax.random.key(5), 1, ours.x0.shape)
  fn = lambda x: ours.model.apply(ours.backbone, x, t)
  forward = jax.jit(lambda x: fn(x)[0])
  jvp = jax.jit(lambda x: covariance.ocm_target(fn, x, sigma, probes)[0])
  vjp = jax.jit(lambda x: vjp_target(fn, x, sigma, probes))
  flops = ours.step.cost_analysis()
  flops = flops[0] if isinstance(flops, (list, tuple)) else flops
  print(f"ours (median of {reps} single calls, ms): dispatch floor (jit of state.step + 1) "
        f"{median_ms(floor, state):.3f}; eps network forward {median_ms(forward, x_t):.3f}; "
        f"OCM target by jvp (ours) {median_ms(jvp, x_t):.3f}, by vjp (the official "
        f"formulation, in JAX) {median_ms(vjp, x_t):.3f}; whole head step "
        f"{median_ms(lambda s: ours.step(s, ours.x0)[1]['loss'], state):.3f} "
        f"({(flops or {}).get('flops', float('nan')) / 1e6:.1f} MFLOP by XLA's count)")
  # The network's two kinds of work, 10 in a row as in a forward pass (one dispatch in
  # XLA, 10 op calls in torch): the [rows, W] x [W, W] matmuls and the SiLUs.
  def chain_mm(a, w):
    for _ in range(10):
      a = a @ w
    return a

  def chain_silu(a):
    for _ in range(10):
      a = jax.nn.silu(a)
    return a

  def chain_silu_tanh(a):  # the same function through tanh (a diagnostic, not used above)
    for _ in range(10):
      a = a * (0.5 + 0.5 * jnp.tanh(0.5 * a))
    return a

  for rows in (args.batch, args.sample_batch):
    a = 0.1 * jax.random.normal(jax.random.key(6), (rows, args.width))
    w = jax.random.normal(jax.random.key(7), (args.width, args.width)) / np.sqrt(args.width)
    line = (f"10 chained [{rows}, {args.width}] x [{args.width}, {args.width}] matmuls / "
            f"SiLUs on [{rows}, {args.width}], ms: XLA {median_ms(jax.jit(chain_mm), a, w):.3f}"
            f" / {median_ms(jax.jit(chain_silu), a):.3f} (SiLU as x (1 + tanh(x / 2)) / 2: "
            f"{median_ms(jax.jit(chain_silu_tanh), a):.3f})")
    if official is not None:
      torch = official.torch
      a_t, w_t = (torch.from_numpy(np.array(v)) for v in (a, w))
      mm_t, silu_t = [], []
      with torch.no_grad():
        for _ in range(reps):
          start = time.perf_counter()
          b_t = a_t
          for _ in range(10):
            b_t = b_t @ w_t
          mm_t.append(time.perf_counter() - start)
          start = time.perf_counter()
          b_t = a_t
          for _ in range(10):
            b_t = torch.nn.functional.silu(b_t)
          silu_t.append(time.perf_counter() - start)
      line += (f"; torch {1e3 * statistics.median(mm_t):.3f} / "
               f"{1e3 * statistics.median(silu_t):.3f}")
    print(line, flush=True)
  if official is None:
    return
  torch = official.torch
  official.run_steps(5)
  with torch.profiler.profile(activities=[torch.profiler.ProfilerActivity.CPU]) as prof:
    official.run_steps(reps // 4)
  events = prof.key_averages()
  total_us = sum(e.self_cpu_time_total for e in events)
  start = time.perf_counter()
  official.run_steps(reps // 4)
  wall_us = 1e6 * (time.perf_counter() - start)
  calls = sum(e.count for e in events if e.key.startswith("aten::"))
  n = reps // 4
  print(f"official (torch profiler over {n} steps): {total_us / n / 1e3:.3f} ms/step of self "
        f"CPU time inside torch ops ({calls / n:.0f} aten op calls per step, nested ones "
        f"included); unprofiled wall {wall_us / n / 1e3:.3f} ms/step")
  print(events.table(sort_by="self_cpu_time_total", row_limit=12))

  passes = 4
  with torch.profiler.profile(activities=[torch.profiler.ProfilerActivity.CPU]) as prof:
    official.run_sample(passes)
  events = prof.key_averages()
  total_us = sum(e.self_cpu_time_total for e in events)
  start = time.perf_counter()
  official.run_sample(passes)
  wall_ms = 1e3 * (time.perf_counter() - start) / passes
  print(f"\nprofile of one K={args.sample_steps} sampling pass: official (torch profiler over "
        f"{passes} passes): {total_us / passes / 1e3:.1f} ms/pass of self CPU time inside "
        f"torch ops; unprofiled wall {wall_ms:.1f} ms/pass")
  print(events.table(sort_by="self_cpu_time_total", row_limit=8))


# ----------------------------------------------------------------------------------- main


def main():
  config = default_config.get_config("cpu")
  parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
  parser.add_argument("--official_dir", default=None,
                      help="a checkout of github.com/J-zin/OCM_DPM (optional; needs torch)")
  parser.add_argument("--torch_threads", type=int, default=len(os.sched_getaffinity(0)))
  parser.add_argument("--batch", type=int, default=int(config.heads.batch_size))
  parser.add_argument("--width", type=int, default=int(config.model.width))
  parser.add_argument("--depth", type=int, default=int(config.model.depth))
  parser.add_argument("--time_embed_dim", type=int, default=int(config.model.time_embed_dim))
  parser.add_argument("--head_hidden", type=int, default=int(config.model.head_hidden))
  parser.add_argument("--lr", type=float, default=float(config.heads.lr))
  parser.add_argument("--ema_decay", type=float, default=float(config.heads.ema_decay))
  parser.add_argument("--steps_per_call", type=int, default=int(config.heads.steps_per_call))
  parser.add_argument("--sample_batch", type=int, default=int(config.eval.num_samples))
  parser.add_argument("--sample_steps", type=int, default=10)
  parser.add_argument("--repeats", type=int, default=15, help="alternating pairs per row")
  parser.add_argument("--inner", type=int, default=20,
                      help="head steps per timed sample (sampling: a quarter of it)")
  parser.add_argument("--seed", type=int, default=0)
  parser.add_argument("--devices", type=int, default=1,
                      help="CPU devices to expose (one per core: 2 here); > 1 adds rows of "
                           "the 10-per-call head step with the batch split over them and of "
                           "sampling with the samples split over them")
  parser.add_argument("--compiler_options", choices=("cpu_threaded_dots", "default"),
                      default=str(config.compiler_options),
                      help="ours' train steps compiled with the config's compiler_options "
                           "(the package's default) or XLA's own")
  parser.add_argument("--profile", action="store_true")
  parser.add_argument("--xla_flags", choices=("reproduce", "default"), default="reproduce",
                      help="ours with the XLA flags the reproduction registers for the ocm "
                           "check, or XLA's defaults")
  args = parser.parse_args()
  from launch import reproduce as launcher  # pylint: disable=g-import-not-at-top
  launcher.benchmark_xla_flags("ocm", args.xla_flags)  # before jax starts its backend
  launcher.benchmark_cpu_devices(args.devices)
  if int(config.model.head_depth) != 2:
    raise ValueError("the benchmark builds a 2-layer head")
  if os.environ.get("OPENBLAS_CORETYPE") or os.environ.get("OPENBLAS_L2_SIZE"):
    print("note: OPENBLAS_CORETYPE / OPENBLAS_L2_SIZE are set; they slow the official "
          "side's NumPy (unset them for this command)", flush=True)

  ours = Ours(args)
  official = None
  if args.official_dir:
    official = Official(pathlib.Path(args.official_dir), ours, args)
    print(check_same(ours, official), flush=True)
  else:
    print("no --official_dir: timing ours only (no official column, no ratio); ", end="")
  print(timing.machine_line(official.torch if official else None)
        + f"; ours' train steps compiled with compiler_options={args.compiler_options!r} "
        f"({ours.options})", flush=True)

  size = (f"MLP {args.width} x {args.depth}, head 2 x {args.head_hidden}, "
          f"D={args.dim}")
  rows = []
  bench(rows, "head step", f"{size}, batch {args.batch}, 1 probe", ours.step_compile_s,
        ours.run_steps, official.run_steps if official else None, args.inner, args.repeats,
        warmup=args.inner, cost=ours.costs["step"])
  # Reported per optimizer step: one of our calls runs steps_per_call of them.
  inner_chunks = max(1, args.inner // args.steps_per_call)
  bench(rows, f"head step, {args.steps_per_call} per call (ours: train_loop's lax.scan)",
        f"{size}, batch {args.batch}, 1 probe", ours.chunk_compile_s,
        _per(ours.run_chunks, args.steps_per_call),
        official.run_steps if official else None, inner_chunks * args.steps_per_call,
        args.repeats, warmup=inner_chunks * args.steps_per_call, cost=ours.costs["chunk"])
  if ours.sharded is not None:
    bench(rows, f"head step, {args.steps_per_call} per call, batch over {args.devices} CPU "
          "devices (ours: train_loop's sharding)", f"{size}, batch {args.batch}, 1 probe",
          ours.sharded["compile_s"], _per(ours.run_sharded_chunks, args.steps_per_call),
          official.run_steps if official else None, inner_chunks * args.steps_per_call,
          args.repeats, warmup=inner_chunks * args.steps_per_call,
          cost=ours.sharded["cost"])
  inner_sample = max(1, args.inner // 4)
  bench(rows, f"sampling K={args.sample_steps}", f"{size}, {args.sample_batch} samples, "
        "OCM covariance, DDPM", ours.sample_compile_s, ours.run_sample,
        official.run_sample if official else None, inner_sample, args.repeats,
        warmup=inner_sample, cost=ours.costs["sample"])
  if ours.sharded is not None:
    bench(rows, f"sampling K={args.sample_steps}, samples over {args.devices} CPU devices "
          "(ours: as ocm.evaluate splits them)", f"{size}, {args.sample_batch} samples, "
          "OCM covariance, DDPM", ours.sharded["sample_compile_s"], ours.run_sharded_sample,
          official.run_sample if official else None, inner_sample, args.repeats,
          warmup=inner_sample, cost=ours.costs["sample"])
  timing.print_limit_table(
      ["hot path", "size", "ours ms, median (min-max)", "ours compile s",
       "official ms, median (min-max)", "official / ours, median (min-max)"], rows)
  if args.profile:
    profile(ours, official, args)


def _per(run_chunks, steps_per_call):
  """``run(n)`` for n optimizer steps from a runner of n / steps_per_call chunk calls."""
  return lambda n: run_chunks(max(1, n // steps_per_call))


if __name__ == "__main__":
  main()
