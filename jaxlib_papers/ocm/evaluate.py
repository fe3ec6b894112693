"""Evaluation of every covariance method: K-step NELBO, samples (MMD or a pluggable FID),
and the head error in h-space against the closed-form oracle.

One compiled program per (K, quantity) serves every method: the method is a traced index
into ``lax.switch``, so adding methods costs no compilation.

``"jacobian"`` (vector data only) is a report-only diagnostic beyond the paper: the eps
network's own Jacobian diagonal as h (``covariance.jacobian_diagonal``), evaluated through the
same predictor, clip and bound as every other method, beside OCM and exact on the first
``eval.jacobian_points`` held-out points with the same draws (:func:`_jacobian_nelbo`).
"""

from __future__ import annotations

import math
from collections.abc import Callable, Sequence
from typing import Any, NamedTuple

import jax
import jax.numpy as jnp
import numpy as np

from jaxlib_papers.core import distributed, prng
from jaxlib_papers.ocm import covariance, diffusion, kernel

Array = jax.Array


def multi_predictor(methods: kernel.Methods, names: Sequence[str],
                    schedule: diffusion.Schedule) -> Callable[[Array, Array, Array], Any]:
  """predict(x_t, t, method_index) dispatching to the methods ``names`` (lax.switch)."""
  preds = [kernel.make_predictor(methods, name, schedule) for name in names]

  def branch(pred):
    def fn(x_t, t):
      eps, c = pred(x_t, t)
      return eps, jnp.broadcast_to(jnp.asarray(c, x_t.dtype), x_t.shape)
    return fn

  branches = [branch(p) for p in preds]
  return lambda x_t, t, idx: jax.lax.switch(idx, branches, x_t, t)


def mmd_bandwidths(reference: np.ndarray) -> np.ndarray:
  """Fixed RBF bandwidths (median pairwise distance of the reference x (0.5, 1, 2)).

  Shared by every method so their MMDs are comparable.
  """
  ref = np.asarray(reference[:1000], np.float64)
  d2 = np.sum((ref[:, None] - ref[None]) ** 2, axis=-1)
  return np.sqrt(np.median(d2[np.triu_indices(len(ref), 1)])) * np.array([0.5, 1.0, 2.0])


class _Setup(NamedTuple):
  """What every part of one evaluation shares."""
  names: tuple[str, ...]                                # the evaluated methods
  predict: Callable[[Array, Array, Array], Any]         # (x_t, t, method index) -> ...
  schedule: diffusion.Schedule
  bound: diffusion.BoundSettings
  dim: int                                              # data dimension (per-dim nats)


class _Quality(NamedTuple):
  """The sample-quality settings: samplers' eta, the MMD reference, the FID hook."""
  eta: float
  ddim_eta: float
  reference: np.ndarray | None
  bandwidths: Array | None
  fid_fn: Callable[[np.ndarray], float] | None


def check_methods(methods: Sequence[str], shape: Sequence[int]) -> None:
  """Raises a ValueError for an unknown method, or a diagnostic the data cannot afford.

  Args:
    methods: ``config.eval.methods``.
    shape: one data item's shape ([D] vectors, [H, W, C] images).
  """
  unknown = [n for n in methods if n not in covariance.METHODS]
  if unknown:
    raise ValueError(f"config.eval.methods: unknown {unknown}; expected {covariance.METHODS}")
  if "jacobian" in methods and len(shape) != 1:
    raise ValueError(
        f"config.eval.methods: 'jacobian' (the eps network's exact Jacobian diagonal, a "
        f"report-only diagnostic) needs d = {math.prod(shape)} jvps per x_t on data of shape "
        f"{tuple(shape)}; it is for vector data only. Remove it from eval.methods.")


def _method_names(methods: kernel.Methods, ev, shape: Sequence[int]) -> tuple[str, ...]:
  names = tuple(ev.methods)
  if "exact" in names and methods.oracle is None:
    names = tuple(n for n in names if n != "exact")
  check_methods(names, shape)
  return names


def _bounds(setup: _Setup, all_ts: list[np.ndarray], eval_data: Array, key: Array,
            decoder: str) -> dict[str, list[tuple[Array, Array]]]:
  """{method: [(summed bound [], mean terms [K + 1]) per K]} (host arrays, nats)."""
  if decoder not in ("official", "method"):
    raise ValueError(f"config.eval.decoder must be 'official' or 'method', got {decoder!r}")
  schedule, predict = setup.schedule, setup.predict
  official_var = diffusion.official_decoder_var(schedule)

  # One NELBO program for every K (diffusion.nelbo_many: each K gets the draws nelbo gives
  # it alone) and every method (idx switches the predictor), so the evaluation compiles one
  # bound per data set instead of one per K.
  @jax.jit
  def nelbo_fn(idx, x0, k, decoder_vars):
    bounds = diffusion.nelbo_many(lambda x, t: predict(x, t, idx), schedule, all_ts, x0, k,
                                  decoder_vars=list(decoder_vars), settings=setup.bound)
    return [(jnp.mean(bound), jnp.mean(terms, axis=1)) for bound, terms in bounds]

  bounds = {}
  for idx, name in enumerate(setup.names):
    if decoder == "official":  # tilde_beta(1, 2) for every method (official likelihood.py)
      dvs = [official_var] * len(all_ts)
    elif name == "beta_tilde":
      dvs = [diffusion.beta_tilde_decoder_var(schedule, ts) for ts in all_ts]
    else:
      dvs = [math.nan] * len(all_ts)
    bounds[name] = jax.device_get(nelbo_fn(idx, eval_data, key, jnp.asarray(dvs)))
  return bounds


def _jacobian_nelbo(methods: kernel.Methods, setup: _Setup, all_ts: list[np.ndarray],
                    eval_data: Array, key: Array, ev) -> dict[str, Any]:
  """{"jacobian_nelbo": {K: {method: NELBO nats/dim}} of "jacobian", OCM and exact,
  "jacobian_points": how many held-out points} (empty / 0 unless "jacobian" is evaluated).

  The first ``ev.jacobian_points`` held-out points with the same bound, predictor, clip, key
  and decoder as the main evaluation, in a program of its own: d jvps per x_t (16 on gmm16)
  for every term of every K on all held-out points would cost more than the rest of the
  evaluation.
  """
  if "jacobian" not in ev.methods:
    return {"jacobian_nelbo": {}, "jacobian_points": 0}
  names = tuple(n for n in ("ocm", "jacobian", "exact") if n == "jacobian" or n in setup.names)
  sub = setup._replace(names=names, predict=multi_predictor(methods, names, setup.schedule))
  subset = eval_data[:ev.get("jacobian_points", 1000)]
  bounds = _bounds(sub, all_ts, subset, key, ev.get("decoder", "official"))
  return {"jacobian_points": int(subset.shape[0]), "jacobian_nelbo": {
      int(len(ts)): _nelbo_rows(sub, bounds, i, False)[0] for i, ts in enumerate(all_ts)}}


def _nelbo_rows(setup: _Setup, bounds: dict, i: int, is_image: bool
                ) -> tuple[dict[str, float], dict[str, list[float]], dict[str, float]]:
  """The ``i``-th K's NELBO, per-term NELBO (nats/dim) and bits/dim (images) per method."""
  nel, terms, bpd = {}, {}, {}
  for name in setup.names:
    total, per_term = bounds[name][i]
    total = float(total)
    nel[name] = total / setup.dim
    terms[name] = [float(v) / setup.dim for v in np.asarray(per_term)]
    if is_image:  # the discretised decoder makes the bound a bound on -log P(8-bit image)
      bpd[name] = total / setup.dim / math.log(2.0)
  return nel, terms, bpd


def _sample_rows(setup: _Setup, quality: _Quality, ts: np.ndarray, x_T: Array, key: Array,
                 first: bool) -> tuple[dict[str, float], ...]:
  """MMD (DDPM), MMD (DDIM, at the first quality K only), FID and samples per method.

  The samples are split over every device (``diffusion.sample`` traced under the mesh of
  all devices) and come back whole (replicated).
  """
  predict = setup.predict
  mesh = distributed.make_mesh()

  def sample_fn(idx, x_T, k, eta):
    return diffusion.sample(lambda x, t: predict(x, t, idx), setup.schedule, ts, x_T, k,
                            eta=eta, clip_x0=setup.bound.clip_x0)
  sample_fn = jax.jit(distributed.traced_on(mesh, sample_fn),
                      out_shardings=distributed.replicated(mesh))

  mmd, mmd_ddim, fid, kept = {}, {}, {}, {}
  for idx, name in enumerate(setup.names):
    samples = sample_fn(idx, x_T, key, quality.eta)
    if quality.reference is not None:
      mmd[name] = float(sample_mmd(samples, quality.reference, quality.bandwidths))
      if first:  # DDIM row and plots at the first K only
        samples_ddim = sample_fn(idx, x_T, key, quality.ddim_eta)
        mmd_ddim[name] = float(sample_mmd(samples_ddim, quality.reference,
                                          quality.bandwidths))
        kept[name] = np.asarray(samples)
    if quality.fid_fn is not None:
      fid[name] = float(quality.fid_fn(np.asarray(samples)))
  return mmd, mmd_ddim, fid, kept


def evaluate(methods: kernel.Methods, schedule: diffusion.Schedule, config, *,
             eval_data: np.ndarray, reference: np.ndarray | None, key: Array,
             fid_fn: Callable[[np.ndarray], float] | None = None,
             verbose: bool = False) -> dict[str, Any]:
  """NELBO, sample quality and head error of each method of ``config.eval.methods``.

  Args:
    methods: the trained pieces (backbone, heads, Analytic table, oracle or None).
    eval_data: [M, ...] held-out data for the NELBO.
    reference: [M', D] fresh data for the MMD (vectors), or None (images: use fid_fn).
    key: PRNG key for the Monte Carlo.
    fid_fn: images -> FID (pluggable; no weights are downloaded here).

  Returns:
    {"methods": [names], "nelbo": {K: {method: nats/dim}}, "terms": {K: {method: [K + 1]}},
     "bpd": ... (images), "mmd" / "fid": {K: {method}}, "mmd_ddim": {K: {method}},
     "head_error": {t: {method: mean sq. error in h-space}}, "samples": {K: {method:
     np.ndarray}} (vectors, first quality K only), "jacobian_*" (:func:`_jacobian_nelbo`)}.
  """
  ev = config.eval
  names = tuple(n for n in _method_names(methods, ev, eval_data.shape[1:])
                if n not in covariance.DIAGNOSTICS)  # evaluated apart (_jacobian_nelbo)
  clip_x0 = float(ev.clip_x0) if ev.clip_x0 > 0 else None
  dim = int(np.prod(eval_data.shape[1:]))
  eval_data = jnp.asarray(eval_data[:ev.num_nelbo])
  out: dict[str, Any] = {"methods": list(names), "nelbo": {}, "mmd": {}, "mmd_ddim": {},
                         "fid": {}, "bpd": {}, "head_error": {}, "samples": {}, "terms": {}}
  is_image = eval_data.ndim == 4
  bandwidths = None if reference is None else jnp.asarray(mmd_bandwidths(reference))
  k_nelbo, k_sample, k_noise, k_err = jax.random.split(key, 4)
  quality_steps = tuple(ev.get("quality_steps", ev.sample_steps))
  steps = [int(k) for k in ev.sample_steps]
  all_ts = [diffusion.skip_timesteps(k, schedule.num_steps) for k in steps]
  setup = _Setup(names, multi_predictor(methods, names, schedule), schedule,
                 diffusion.BoundSettings(ev.eta, clip_x0, is_image), dim)
  quality = _Quality(ev.eta, ev.ddim_eta, reference, bandwidths, fid_fn)
  bounds = _bounds(setup, all_ts, eval_data, k_nelbo, ev.get("decoder", "official"))
  out.update(_jacobian_nelbo(methods, setup, all_ts, eval_data, k_nelbo, ev))

  x_T = prng.normal(k_noise, (ev.num_samples, *eval_data.shape[1:]), eval_data.dtype)
  for i, (num_k, ts) in enumerate(zip(steps, all_ts)):
    nel, out["terms"][num_k], bpd = _nelbo_rows(setup, bounds, i, is_image)
    mmd, mmd_ddim, fid = {}, {}, {}
    if num_k in quality_steps:
      mmd, mmd_ddim, fid, kept = _sample_rows(setup, quality, ts, x_T, k_sample,
                                              num_k == quality_steps[0])
      if kept:
        out["samples"][num_k] = kept
    if verbose:
      for name in names:
        print(f"[ocm eval] K={num_k} {name:>10s}: NELBO {nel[name]:.4f} nats/dim"
              + (f", MMD {mmd[name]:.2e}" if name in mmd else ""), flush=True)
    out["nelbo"][num_k] = nel
    for field, value in (("mmd", mmd), ("mmd_ddim", mmd_ddim), ("fid", fid), ("bpd", bpd)):
      if value:
        out[field][num_k] = value

  if methods.oracle is not None and len(ev.error_timesteps):
    out["head_error"] = head_errors(methods, schedule, config, eval_data, k_err)
  return out


def sample_mmd(samples: Array, reference: np.ndarray, bandwidths: Array) -> Array:
  """Squared MMD of samples against the reference with fixed bandwidths (at most 2000 each)."""
  from jaxlib_papers.core import metrics  # pylint: disable=g-import-not-at-top
  n = min(2000, samples.shape[0], reference.shape[0])
  return metrics.mmd_rbf(samples[:n], jnp.asarray(reference[:n]), bandwidths)


def head_errors(methods: kernel.Methods, schedule: diffusion.Schedule, config,
                eval_data: Array, key: Array) -> dict[int, dict[str, float]]:
  """E ||h_method(x_t) - sigma_t^2 diag H(x_t)||^2 / d at each of ``eval.error_timesteps``.

  Measured in h-space (as the brief asks): the (sigma^2 / abar) factor would blow the error
  up at large t and hide the comparison.
  """
  ev = config.eval
  learned = [n for n in ev.methods if n in ("analytic", "sn", "npr", "ocm")]
  x0 = eval_data[:ev.error_samples]
  result: dict[int, dict[str, float]] = {}
  fns = {name: kernel.eps_variance_fn(methods, name, schedule) for name in learned}

  @jax.jit
  def errors(t, k):
    noise = prng.normal(k, x0.shape, x0.dtype)
    x_t = diffusion.q_sample(schedule, x0, jnp.full((x0.shape[0],), t), noise)
    _, h_star = methods.oracle.eps_and_h(x_t, t)
    return {name: jnp.mean(jnp.square(fn(x_t, t)[1] - 1.0 - h_star))
            for name, fn in fns.items()}

  for t in ev.error_timesteps:
    result[int(t)] = {k: float(v) for k, v in errors(jnp.asarray(int(t)), key).items()}
  return result


def gamma_timesteps(config, num_steps: int) -> np.ndarray:
  """Every timestep the Analytic-DPM table is needed at (all K's plus the error t's)."""
  ts = [diffusion.skip_timesteps(int(k), num_steps) for k in config.eval.sample_steps]
  ts.append(np.asarray(config.eval.error_timesteps, np.int32).reshape(-1))
  return np.unique(np.concatenate(ts)).astype(np.int32)
