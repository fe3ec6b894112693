r"""OCM speed: one head training step and one K-step sampling run, medians over repeats.

  OPENBLAS_NUM_THREADS=1 python benchmarks/ocm.py                  # MLP on the 2-D ring
  python benchmarks/ocm.py --model=unet --batch=128 --repeats=5     # CIFAR-size UNet (GPU)

The official code (J-zin/OCM_DPM, PyTorch) forms the probe target by double backward:
grad_x (s_theta(x) . v), a vjp through the network after the forward pass. No timing of it
is published (the brief has none), and PyTorch is not installed here, so the comparison
printed is against that *formulation* in JAX (vjp of the score, same network, same jit):
ours uses one forward-mode jvp (``jax.linearize``). Both are timed on this machine.
"""

from __future__ import annotations

import argparse
import statistics
import time

import jax
import jax.numpy as jnp
import optax

from jaxlib_papers.ocm import covariance, diffusion, kernel, models


def _time(fn, *args, repeats: int) -> float:
  out = fn(*args)
  jax.block_until_ready(out)              # compile + warm up
  times = []
  for _ in range(repeats):
    start = time.perf_counter()
    jax.block_until_ready(fn(*args))
    times.append(time.perf_counter() - start)
  return statistics.median(times)


def vjp_target(backbone_fn, x_t, sigma_t, probes):
  """The double-backward formulation: grad_x (s . v) = H v, per probe (for comparison)."""
  def one(v):
    def score_dot_v(x):
      eps, _ = backbone_fn(x)
      return jnp.sum(-eps / sigma_t * v)
    return v * jax.grad(score_dot_v)(x_t)
  return jnp.square(sigma_t) * jnp.mean(jax.vmap(one)(probes), axis=0)


def main():
  parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
  parser.add_argument("--model", choices=("mlp", "unet"), default="mlp")
  parser.add_argument("--batch", type=int, default=512)
  parser.add_argument("--width", type=int, default=256)
  parser.add_argument("--dim", type=int, default=2)
  parser.add_argument("--base_channels", type=int, default=64)
  parser.add_argument("--num_probes", type=int, default=1)
  parser.add_argument("--sample_batch", type=int, default=4096)
  parser.add_argument("--sample_steps", type=int, default=10)
  parser.add_argument("--repeats", type=int, default=20)
  args = parser.parse_args()

  schedule = diffusion.make_schedule("linear", 1000)
  if args.model == "mlp":
    model = models.MLPBackbone(width=args.width, depth=3)
    head = models.VectorHead(out_dim=args.dim, hidden=(128, 128))
    shape = (args.dim,)
  else:
    model = models.UNet(base_channels=args.base_channels, channel_mults=(1, 2, 2, 2))
    head = models.ImageHead(out_channels=3, hidden=args.base_channels)
    shape = (32, 32, 3)
  x0 = jax.random.uniform(jax.random.key(0), (args.batch, *shape), minval=-1, maxval=1)
  example = x0[:2]
  params = model.init(jax.random.key(1), example, jnp.ones((2,), jnp.int32))
  heads = kernel.make_head_kernel(model, head, schedule, optax.adam(1e-4), example, params,
                                  heads=("ocm",), num_probes=args.num_probes)
  state = jax.jit(heads.init)(jax.random.key(2))
  step = jax.jit(heads.train_step)
  t_step = _time(lambda s: step(s, x0)[1]["loss"], state, repeats=args.repeats)

  # The target alone, both formulations.
  t = jax.random.randint(jax.random.key(3), (args.batch,), 1, 1001)
  x_t = diffusion.q_sample(schedule, x0, t, jax.random.normal(jax.random.key(4), x0.shape))
  sigma = diffusion.marginal(schedule, t)[1].reshape((-1,) + (1,) * len(shape))
  probes = covariance.rademacher_probes(jax.random.key(5), args.num_probes, x0.shape)
  fn = lambda x: model.apply(params, x, t)
  jvp = jax.jit(lambda x: covariance.ocm_target(fn, x, sigma, probes)[0])
  vjp = jax.jit(lambda x: vjp_target(fn, x, sigma, probes))
  # Per probe the two differ (v * J v vs v * J^T v: a trained eps network's Jacobian is not
  # exactly symmetric); both are unbiased for the same diagonal.
  t_jvp = _time(jvp, x_t, repeats=args.repeats)
  t_vjp = _time(vjp, x_t, repeats=args.repeats)

  methods = kernel.Methods(model, params, head, state.params, max_var=1.0)
  predict = kernel.make_predictor(methods, "ocm", schedule)
  ts = diffusion.skip_timesteps(args.sample_steps, 1000)
  sample = jax.jit(lambda x, k: diffusion.sample(predict, schedule, ts, x, k))
  x_T = jax.random.normal(jax.random.key(6), (args.sample_batch, *shape))
  t_sample = _time(sample, x_T, jax.random.key(7), repeats=max(3, args.repeats // 4))

  print(f"device: {jax.devices()[0].device_kind} x{len(jax.devices())}; model {args.model}, "
        f"batch {args.batch}, probes {args.num_probes}")
  print(f"OCM head train step (jit):        {1e3 * t_step:9.2f} ms (median of {args.repeats})")
  print(f"OCM target, jvp (ours):           {1e3 * t_jvp:9.2f} ms")
  print(f"OCM target, vjp (official form):  {1e3 * t_vjp:9.2f} ms  -> ours {t_vjp / t_jvp:.2f}x")
  print(f"sampling K={args.sample_steps}, {args.sample_batch} samples: {1e3 * t_sample:9.2f} ms")
  print("official PyTorch figure: none published (brief lists none); see the module doc.")


if __name__ == "__main__":
  main()
