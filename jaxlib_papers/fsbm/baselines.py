"""SB-CFM baseline: bridge matching on minibatch entropic-OT couplings.

Each step draws M source and M target samples, couples them with the entropic
OT plan of ott-jax (Sinkhorn, epsilon = 2 sigma^2, the static Schrodinger-bridge
regularisation for reference Brownian motion sigma W), samples one partner per
source point from its plan row, and regresses v_theta on the Brownian-bridge
drift (x1 - x_t) / (1 - t): the same M-step as FSBM with G = 0 paths.
"""

from __future__ import annotations

from typing import Any, Callable, NamedTuple

import jax
import jax.numpy as jnp
import numpy as np
import optax

from jaxlib_papers.core import ot as core_ot
from jaxlib_papers.fsbm import kernel as kernel_lib
from jaxlib_papers.fsbm import models


class SBCFMState(NamedTuple):
  step: jax.Array         # [] int32 chunks done
  params: Any             # forward network params
  opt_state: Any
  ema_params: Any
  key: jax.Array


class SBCFMKernel(NamedTuple):
  init: Callable
  train_step: Callable    # (state, {"x0": [B, D], "x1": [B, D]}) -> (state, metrics)
  simulate: Callable      # (state, x_start, key, sign=1.0) -> [nfe + 1, n, D]


def make_sbcfm_kernel(settings: kernel_lib.FSBMSettings, *, chunk_steps: int) -> SBCFMKernel:
  """SB-CFM with ``chunk_steps`` M-steps per train_step (one scanned chunk)."""
  sigma = settings.csoc.sigma
  net = models.VectorField(dim=settings.dim, hidden=settings.hidden)
  tx = optax.adamw(settings.lr, weight_decay=settings.weight_decay, eps=1e-8)
  m = settings.match_batch

  def init(key):
    k_net, key = jax.random.split(key)
    params = net.init(k_net, jnp.zeros((1, settings.dim)), jnp.zeros((1,)))
    return SBCFMState(jnp.zeros((), jnp.int32), params, tx.init(params), params, key)

  def train_step(state, batch):
    x0_pool, x1_pool = batch["x0"], batch["x1"]
    key, k_chunk = jax.random.split(state.key)

    def step(carry, inputs):
      p, s, e = carry
      k, i = inputs
      k0, k1, kc, kt, kn = jax.random.split(k, 5)
      x0 = x0_pool[jax.random.randint(k0, (m,), 0, x0_pool.shape[0])]
      x1 = x1_pool[jax.random.randint(k1, (m,), 0, x1_pool.shape[0])]
      plan = core_ot.sinkhorn_coupling(x0, x1, epsilon=2.0 * sigma**2)
      partner = jax.random.categorical(kc, jnp.log(jnp.maximum(plan, 1e-30)), axis=1)
      x1 = x1[partner]
      t = jax.random.uniform(kt, (m,), minval=settings.t_eps, maxval=1 - settings.t_eps)
      tt = t[:, None]
      xt = (1 - tt) * x0 + tt * x1 + sigma * jnp.sqrt(tt * (1 - tt)) * jax.random.normal(
          kn, x0.shape)
      target = (x1 - xt) / (1 - tt)
      loss, g = jax.value_and_grad(kernel_lib.bridge_matching_loss)(p, net.apply, xt, t,
                                                                    target)
      upd, s = tx.update(g, s, p)
      p = optax.apply_updates(p, upd)
      n = (state.step * chunk_steps + i).astype(jnp.float32)
      decay = jnp.minimum(settings.ema_decay, (1.0 + n) / (10.0 + n))
      return (p, s, optax.incremental_update(p, e, 1.0 - decay)), loss

    (p, s, e), losses = jax.lax.scan(
        step, (state.params, state.opt_state, state.ema_params),
        (jax.random.split(k_chunk, chunk_steps), jnp.arange(chunk_steps)))
    return SBCFMState(state.step + 1, p, s, e, key), {"loss": jnp.mean(losses)}

  def simulate(state, x_start, key, sign=1.0):
    del sign  # forward model only
    return kernel_lib.simulate(net.apply, state.ema_params, x_start, key, sigma=sigma,
                               num_steps=settings.num_sim_steps, sign=1.0)

  return SBCFMKernel(init, train_step, simulate)


def run_sbcfm(config, *, verbose: bool = False) -> dict[str, Any]:
  """Trains SB-CFM for loop.num_steps * match.steps M-steps and evaluates it."""
  from jaxlib_papers.fsbm import train  # pylint: disable=g-import-not-at-top
  settings = train.settings_from_config(config)
  kern = make_sbcfm_kernel(settings, chunk_steps=settings.match_steps)
  data = train.make_data(config)
  state = jax.jit(kern.init)(jax.random.key(int(config.seed)))
  step = jax.jit(kern.train_step)
  history = []
  for i in range(int(config.loop.num_steps)):
    state, metrics = step(state, data(i))
    history.append({"step": i + 1, "loss": float(metrics["loss"])})
    if verbose:
      print(f"[sbcfm] chunk {i + 1}: loss {history[-1]['loss']:.4g}", flush=True)
  if not np.isfinite(history[-1]["loss"]):
    raise FloatingPointError(f"[sbcfm] loss became {history[-1]['loss']}")
  out = {"history": history, "state": state}
  out.update(train.evaluate(kern, state, config))
  return out
