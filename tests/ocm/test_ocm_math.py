"""Closed-form checks of the OCM math: Tweedie, probe estimator, samplers, NELBO (float64)."""

import math

import jax
import jax.numpy as jnp
import numpy as np
import optax
import pytest

from jaxlib_papers.core import distributed
from jaxlib_papers.core.precision import enable_x64
from jaxlib_papers.ocm import covariance, diffusion, gmm, kernel, models


@pytest.fixture(scope="module")
def schedule():
  return diffusion.make_schedule("linear", 1000)


@pytest.mark.parametrize("kind, shape", [("mlp", (16, 2)), ("unet", (3, 8, 8, 1))])
def test_backbones_embed_a_shared_timestep_once(kind, shape):
  # The predictors call the backbone with t [1] (one t per sampler step): the same eps and
  # features as t repeated per sample.
  kwargs = {"width": 32, "depth": 2} if kind == "mlp" else {
      "base_channels": 8, "channel_mults": (1, 2), "blocks_per_level": 1, "groups": 4}
  model = models.make_backbone(kind, **kwargs)
  x = jax.random.normal(jax.random.key(1), shape)
  params = model.init(jax.random.key(0), x, jnp.ones(shape[0], jnp.int32))
  per_sample = model.apply(params, x, jnp.full(shape[0], 417))
  shared = model.apply(params, x, jnp.full((1,), 417))
  for a, b in zip(shared, per_sample):
    assert a.shape == b.shape
    np.testing.assert_allclose(a, b, rtol=1e-5, atol=1e-6)


def test_mlp_time_features_replace_the_time_path():
  # The MLP backbone's time features (what it computes from t alone), tabulated over every
  # t and gathered, give the eps and features of t itself; the parameter tree is the same
  # one flax's automatic names give; a table of the wrong depth is refused.
  model = models.MLPBackbone(width=16, depth=2, time_embed_dim=8)
  x = jax.random.normal(jax.random.key(1), (6, 3))
  t = jnp.array([0, 1, 17, 500, 999, 1000])
  params = model.init(jax.random.key(0), x, t)
  assert sorted(params["params"]) == sorted(f"Dense_{i}" for i in range(10))
  assert params["params"]["Dense_4"]["kernel"].shape == (16, 16)  # block 0's time projection
  assert "bias" not in params["params"]["Dense_4"]
  table = models.time_feature_table(model, params, 1000)
  assert [a.shape for a in table] == [(1001, 16)] * 3
  got = model.apply(params, x, None, time_features=models.gather_time_features(table, t))
  for a, b in zip(got, model.apply(params, x, t)):
    np.testing.assert_allclose(a, b, rtol=1e-6, atol=1e-6)
  with pytest.raises(ValueError, match="time_features must hold 3"):
    model.apply(params, x, None, time_features=table[:2])
  with pytest.raises(ValueError, match="needs t unless time_features"):
    model.apply(params, x, None)


def test_schedules_and_timesteps():
  lin = diffusion.make_schedule("linear", 1000)
  assert lin.abar[0] == 1.0 and lin.betas[1] == pytest.approx(1e-4)
  assert lin.betas[-1] == pytest.approx(0.02)
  np.testing.assert_allclose(lin.abar[1:], np.cumprod(1 - np.linspace(1e-4, 0.02, 1000)))
  cos = diffusion.make_schedule("cosine", 1000)
  assert np.all(np.diff(cos.abar) < 0) and cos.abar[-1] < 1e-3
  f = lambda t: np.cos((t / 1000 + 0.008) / 1.008 * np.pi / 2) ** 2
  assert cos.abar[500] == pytest.approx(f(500) / f(0), rel=1e-9)
  ts = diffusion.skip_timesteps(10, 1000)
  assert ts[0] == 1 and ts[-1] == 1000 and len(ts) == 10 and ts[1] == 112
  with pytest.raises(ValueError, match="kind"):
    diffusion.make_schedule("quadratic")
  with pytest.raises(ValueError, match="num_sample_steps"):
    diffusion.skip_timesteps(1, 1000)


def test_second_order_tweedie_on_random_mixture():
  with enable_x64():
    mix = gmm.random_mixture(0, num_modes=4, dim=3)
    mix = gmm.GaussianMixture(*(jnp.asarray(a, jnp.float64) for a in mix))
    x_t = jnp.array([0.3, -0.2, 0.1], jnp.float64)

    @jax.jit
    def quantities(abar):
      hess = jax.hessian(lambda x: gmm.log_prob(mix, x, abar))(x_t)
      score_ad = jax.grad(lambda x: gmm.log_prob(mix, x, abar))(x_t)
      return (hess, score_ad, *gmm.score_and_hessian_diag(mix, x_t, abar),
              *gmm.posterior_moments(mix, x_t, abar))

    for abar in (0.9, 0.4, 0.05):
      sig2 = 1.0 - abar
      hess, score_ad, score, hess_diag, mean, cov = quantities(abar)
      np.testing.assert_allclose(score, score_ad, rtol=1e-10, atol=1e-12)
      np.testing.assert_allclose(hess_diag, jnp.diag(hess), rtol=1e-10, atol=1e-12)
      # First order: E[x0 | x_t] = (x_t + sigma^2 score) / alpha.
      np.testing.assert_allclose(mean, (x_t + sig2 * score) / np.sqrt(abar), rtol=1e-10)
      # Second order: Cov[x0 | x_t] = (sigma^4 H + sigma^2 I) / abar (the full matrix).
      np.testing.assert_allclose(cov, (sig2**2 * hess + sig2 * jnp.eye(3)) / abar,
                                 rtol=1e-9, atol=1e-12)


def test_probe_estimator_unbiased_with_predicted_variance():
  with enable_x64():
    mix = gmm.random_mixture(1, num_modes=3, dim=4)
    mix = gmm.GaussianMixture(*(jnp.asarray(a, jnp.float64) for a in mix))
    abar = 0.3
    sigma = np.sqrt(1 - abar)
    x_t = jnp.array([[0.2, -0.4, 0.1, 0.3]], jnp.float64)
    # The exact eps of the mixture, as the "network": eps = -sigma grad log q_t.
    eps_fn = lambda x: (-sigma * jax.vmap(jax.grad(lambda y: gmm.log_prob(mix, y, abar)))(x), x)
    num = 10000
    probes = covariance.rademacher_probes(jax.random.key(0), num, x_t.shape, jnp.float64)
    per_probe = jax.jit(jax.vmap(
        lambda v: covariance.ocm_target(eps_fn, x_t, sigma, v[None])[0][0]))(probes)
    hess = jax.jit(jax.hessian(lambda y: gmm.log_prob(mix, y, abar)))(x_t[0])
    h_true = (1 - abar) * jnp.diag(hess)
    # Var[v_i (Hv)_i] = sum_{j != i} H_ij^2 (times sigma^4 in h-space).
    off = hess - jnp.diag(jnp.diag(hess))
    var_pred = (1 - abar) ** 2 * jnp.sum(off**2, axis=1)
    mean, var = per_probe.mean(0), per_probe.var(0)
    np.testing.assert_array_less(jnp.abs(mean - h_true), 5 * jnp.sqrt(var_pred / num) + 1e-12)
    np.testing.assert_allclose(var, var_pred, rtol=0.07)
    # Averaging M probes divides the variance by M; the mean of all M is the same estimator.
    avg = jax.jit(lambda p: covariance.ocm_target(eps_fn, x_t, sigma, p)[0][0])(probes)
    np.testing.assert_allclose(avg, mean, rtol=1e-10)


def test_ddpm_step_matches_the_brief_form(schedule):
  t, s = 600, 300
  abar = schedule.abar
  x_t = jnp.array([[0.5, -1.0]])
  eps = jnp.array([[0.2, 0.1]])
  c = jnp.array([[0.1, 0.3]])
  mean, var = diffusion.reverse_moments(schedule, x_t, t, s, eps, c, eta=1.0)
  x0_hat = (x_t - np.sqrt(1 - abar[t]) * eps) / np.sqrt(abar[t])
  beta = 1 - abar[t] / abar[s]
  sig2_t, sig2_s = 1 - abar[t], 1 - abar[s]
  mean_ref = (np.sqrt(abar[s]) * beta / sig2_t) * x0_hat + (
      np.sqrt(abar[t] / abar[s]) * sig2_s / sig2_t) * x_t
  var_ref = beta * sig2_s / sig2_t + abar[s] * beta**2 / sig2_t**2 * c
  np.testing.assert_allclose(mean, mean_ref, rtol=1e-5)
  np.testing.assert_allclose(var, var_ref, rtol=1e-5)
  # DDIM eta = 0 with nonzero c is still stochastic, with the brief's variance.
  mean0, var0 = diffusion.reverse_moments(schedule, x_t, t, s, eps, c, eta=0.0)
  coef = np.sqrt(abar[s]) - np.sqrt(sig2_s * abar[t] / sig2_t)
  np.testing.assert_allclose(var0, coef**2 * c, rtol=1e-5)
  np.testing.assert_allclose(mean0, np.sqrt(abar[s]) * x0_hat + np.sqrt(sig2_s) * eps, rtol=1e-5)
  # DDPM's fixed beta equals x0-covariance sigma_t^2 for any skip.
  _, var_beta = diffusion.reverse_moments(schedule, x_t, t, s, eps,
                                          covariance.x0_covariance("beta", abar[t]))
  np.testing.assert_allclose(var_beta, beta, rtol=1e-5)


def _gaussian(dtype):
  # One diagonal Gaussian component: q(x_s | x_t) is then exactly Gaussian.
  return gmm.make_mixture(jnp.ones(1, dtype), jnp.array([[0.3, -0.2]], dtype),
                          jnp.array([[0.5, 0.2]], dtype))


def test_gaussian_data_exact_posterior_step(schedule):
  with enable_x64():
    data = _gaussian(jnp.float64)
    oracle = gmm.GMMOracle(data, schedule.abar)
    mu, s2 = data.means[0], data.stds[0] ** 2
    abar = schedule.abar
    x_t = jnp.array([[0.7, -1.3]], jnp.float64)

    @jax.jit
    def step(t, s):
      eps, h = oracle.eps_and_h(x_t, t)
      c = covariance.x0_covariance("exact", jnp.asarray(abar)[t], eps_var=1 + h, max_var=10.0)
      return diffusion.reverse_moments(schedule, x_t, t, s, eps, c, eta=1.0)

    for t, s in ((1000, 889), (500, 200), (112, 1)):
      mean, var = step(t, s)
      # Exact Gaussian conditioning of (x_s, x_t).
      var_s = abar[s] * s2 + 1 - abar[s]
      var_t = abar[t] * s2 + 1 - abar[t]
      cov_st = np.sqrt(abar[t] / abar[s]) * var_s
      mean_ref = np.sqrt(abar[s]) * mu + cov_st / var_t * (x_t - np.sqrt(abar[t]) * mu)
      var_ref = var_s - cov_st**2 / var_t
      np.testing.assert_allclose(mean, mean_ref, rtol=1e-9)
      np.testing.assert_allclose(var, jnp.broadcast_to(var_ref, var.shape), rtol=1e-9)


def test_gaussian_data_nelbo_equals_entropy(schedule):
  """Exact eps and covariance make every reverse step exact, so E[NELBO] = E[-log q(x0)]."""
  with enable_x64():
    data = _gaussian(jnp.float64)
    oracle = gmm.GMMOracle(data, schedule.abar)

    def predict(x_t, t):
      eps, h = oracle.eps_and_h(x_t, t)
      return eps, covariance.x0_covariance("exact", jnp.asarray(schedule.abar)[t],
                                           eps_var=1 + h, max_var=10.0)

    x0 = gmm.sample(data, jax.random.key(1), 4000)
    ts = diffusion.skip_timesteps(10, 1000)
    abar = jnp.asarray(schedule.abar)

    @jax.jit
    def bounds(x, k, use_beta):
      # use_beta: DDPM's fixed beta (c = sigma_t^2) instead of the exact covariance.
      def pred(x_t, t):
        eps, c = predict(x_t, t)
        return eps, jnp.where(use_beta, 1.0 - abar[t], c)
      return diffusion.nelbo(pred, schedule, ts, x, k)

    bound, terms = bounds(x0, jax.random.key(2), False)
    assert terms.shape == (11, 4000)
    nll = -gmm.log_prob(data, x0)
    gap = bound - nll
    # Not exactly zero per sample (a bound); zero in expectation up to the prior mismatch.
    assert abs(float(gap.mean())) < 4 * float(gap.std()) / np.sqrt(4000) + 1e-3
    # A worse covariance (DDPM's beta) gives a strictly larger bound.
    bound_beta, _ = bounds(x0, jax.random.key(2), True)
    assert float(bound_beta.mean()) > float(bound.mean()) + 0.05


def test_gaussian_data_ocm_head_then_sampler(schedule):
  """OCM loss on Gaussian data learns h exactly; the K = 10 sampler then matches the data."""
  with enable_x64():
    data = _gaussian(jnp.float64)
    oracle = gmm.GMMOracle(data, schedule.abar)
    ts = diffusion.skip_timesteps(10, 1000)
    sigmas = np.sqrt(1 - schedule.abar[ts])
    # A head with one free value per (sampling timestep, dim): H is constant in x here.
    opt = optax.adam(0.05)

    def loss(table, key):
      k1, k2, k3, k4 = jax.random.split(key, 4)
      idx = jax.random.randint(k1, (256,), 0, len(ts))
      t = jnp.asarray(ts)[idx]
      x0 = gmm.sample(data, k2, 256)
      x_t = diffusion.q_sample(schedule, x0, t, jax.random.normal(k3, x0.shape, x0.dtype))
      fn = lambda x: (jax.vmap(lambda xi, ti: oracle.eps_and_h(xi[None], ti)[0][0])(x, t), x)
      probes = covariance.rademacher_probes(k4, 1, x0.shape, x0.dtype)
      target, _, _ = covariance.ocm_target(fn, x_t, jnp.asarray(sigmas)[idx][:, None], probes)
      return covariance.head_losses({"ocm": table[idx]}, eps=x0, eps_hat=x0,
                                    ocm_target_value=target)["ocm"]

    def step(carry, key):
      table, opt_state = carry
      g = jax.grad(loss)(table, key)
      updates, opt_state = opt.update(g, opt_state)
      return (optax.apply_updates(table, updates), opt_state), None

    table = jnp.zeros((len(ts), 2), jnp.float64)
    (table, _), _ = jax.lax.scan(step, (table, opt.init(table)),
                                 jax.random.split(jax.random.key(0), 200))
    h_true = jnp.stack([oracle.eps_and_h(jnp.zeros((1, 2)), t)[1][0] for t in ts])
    np.testing.assert_allclose(table, h_true, atol=1e-3)

    def predict(x_t, t):
      eps, _ = oracle.eps_and_h(x_t, t)
      i = jnp.searchsorted(jnp.asarray(ts), t)
      c = covariance.x0_covariance("ocm", jnp.asarray(schedule.abar)[t], eps_var=1 + table[i],
                                   max_var=10.0)
      return eps, c
    n = 6000
    x_T = jax.random.normal(jax.random.key(3), (n, 2), jnp.float64)
    samples = jax.jit(lambda x, k: diffusion.sample(predict, schedule, ts, x, k))(
        x_T, jax.random.key(4))
    std = data.stds[0]
    np.testing.assert_allclose(samples.mean(0), data.means[0],
                               atol=4 * float(std.max()) / np.sqrt(n))
    # Var of a sample variance ~ 2 s^4 / n; the last (mean) step removes Var[x0|x_1] ~ 1e-4.
    np.testing.assert_allclose(samples.var(0), std**2, rtol=4 * np.sqrt(2 / n) + 2e-3)


def test_sampler_splits_the_samples_over_the_mesh_and_returns_the_same(schedule):
  """Traced under the 8-device mesh (as ``ocm.evaluate`` compiles it) the sampler runs
  8 of the 64 chains on each device ([8, 2] parts in XLA's program) and returns the
  samples of the one-device program."""
  data = _gaussian(jnp.float32)
  oracle = gmm.GMMOracle(data, schedule.abar)
  ts = diffusion.skip_timesteps(10, 1000)

  def predict(x_t, t):
    eps, _ = oracle.eps_and_h(x_t, t)
    return eps, covariance.x0_covariance("ocm", jnp.asarray(schedule.abar)[t],
                                         eps_var=jnp.ones((2,), jnp.float32), max_var=10.0)

  sample = lambda x, k: diffusion.sample(predict, schedule, ts, x, k)
  x_T, key = jax.random.normal(jax.random.key(5), (64, 2)), jax.random.key(6)
  mesh = distributed.make_mesh()
  split = jax.jit(distributed.traced_on(mesh, sample), out_shardings=distributed.replicated(mesh))
  assert "f32[8,2]" in split.lower(x_T, key).compile().as_text()
  assert "f32[8,2]" not in jax.jit(sample).lower(x_T, key).compile().as_text()
  np.testing.assert_allclose(np.asarray(split(x_T, key)), np.asarray(jax.jit(sample)(x_T, key)),
                             rtol=1e-6, atol=1e-6)


def _exact_predictor(data, schedule):
  """The oracle's exact eps and x0-covariance as a NELBO predictor (call inside x64)."""
  oracle = gmm.GMMOracle(data, schedule.abar)
  abar = jnp.asarray(schedule.abar)

  def predict(x_t, t):
    eps, h = oracle.eps_and_h(x_t, t)
    return eps, covariance.x0_covariance("exact", abar[t], eps_var=1 + h, max_var=10.0)
  return predict


def test_gaussian_data_nelbo_with_official_decoder(schedule):
  """The official protocol fixes the decoder variance to tilde_beta(1, 2) for every method.

  With exact eps and covariance the bound then exceeds E[-log q(x0)] by exactly the decoder's
  KL(q(x0 | x_1) || N(E[x0 | x_1], tilde_beta(1, 2))), known in closed form for Gaussian data.
  """
  with enable_x64():
    data = _gaussian(jnp.float64)
    predict = _exact_predictor(data, schedule)

    v = diffusion.official_decoder_var(schedule)
    b = schedule.abar
    assert v == pytest.approx(
        schedule.betas[2] * (1 - b[1]) / (1 - b[2]), rel=1e-12)
    x0 = gmm.sample(data, jax.random.key(1), 4000)
    ts = diffusion.skip_timesteps(10, 1000)
    bound, terms = jax.jit(lambda x, k: diffusion.nelbo(predict, schedule, ts, x, k,
                                                        decoder_var=v))(x0, jax.random.key(2))
    gap = bound + gmm.log_prob(data, x0)
    s2 = data.stds[0] ** 2
    post_var = 1.0 / (1.0 / s2 + b[1] / (1 - b[1]))          # Var[x0 | x_1] per dim
    r = post_var / v
    expected = float(jnp.sum(0.5 * (r - 1.0 - jnp.log(r))))
    assert expected > 0.1  # the fixed decoder is a real (measurable) handicap here
    assert abs(float(gap.mean()) - expected) < 4 * float(gap.std()) / np.sqrt(4000) + 1e-3
    # The decoder term alone: E[-log N(x0; x0_hat, v)] = 0.5 sum(log(2 pi v) + post_var / v).
    dec = float(terms[-1].mean())
    assert dec == pytest.approx(float(jnp.sum(0.5 * (jnp.log(2 * jnp.pi * v) + r))), abs=0.05)


def test_nelbo_many_equals_one_nelbo_per_k(schedule):
  """The evaluation's one program for every K gives each K the bound nelbo gives it alone
  (same draws), with a per-K decoder variance (NaN: the method's own) and skip sequences
  of different first steps."""
  with enable_x64():
    data = _gaussian(jnp.float64)
    predict = _exact_predictor(data, schedule)

    x0 = gmm.sample(data, jax.random.key(1), 64)
    seqs = [diffusion.skip_timesteps(k, 1000) for k in (5, 10, 20)] + [np.array([3, 500, 1000])]
    dvs = [0.01, float("nan"), diffusion.official_decoder_var(schedule), 0.02]
    key = jax.random.key(7)
    many = jax.jit(lambda x, k, v: diffusion.nelbo_many(
        predict, schedule, seqs, x, k, decoder_vars=list(v)))(x0, key, jnp.asarray(dvs))
    for ts, dv, (bound, terms) in zip(seqs, dvs, many):
      one_bound, one_terms = jax.jit(lambda x, k, v, ts=ts: diffusion.nelbo(
          predict, schedule, ts, x, k, decoder_var=v))(x0, key, dv)
      assert terms.shape == (len(ts) + 1, 64)
      np.testing.assert_allclose(terms, one_terms, rtol=1e-12, atol=1e-12)
      np.testing.assert_allclose(bound, one_bound, rtol=1e-12)
    assert not np.allclose(many[0][0], many[2][0])  # K changes the bound
    with pytest.raises(ValueError, match="decoder_vars"):
      diffusion.nelbo_many(predict, schedule, seqs, x0, key, decoder_vars=[0.1])


def test_discretized_gaussian_decoder_is_a_distribution():
  with enable_x64():
    levels = jnp.linspace(-1.0, 1.0, 256)
    means = jnp.array([0.3, -0.99, 1.2, 0.0])[:, None]
    variances = jnp.array([1e-3, 0.05, 0.5, 1e-7])[:, None]
    logp = jax.jit(diffusion.discretized_gaussian_log_prob)(levels, means, variances)
    np.testing.assert_allclose(jnp.sum(jnp.exp(logp), axis=1), 1.0, rtol=1e-9)
    # An inner bin is Phi(upper) - Phi(lower).
    x, mean, std = levels[100], 0.1, 0.2
    ref = (jax.scipy.stats.norm.cdf((x - mean + 1 / 255) / std)
           - jax.scipy.stats.norm.cdf((x - mean - 1 / 255) / std))
    got = diffusion.discretized_gaussian_log_prob(x, jnp.asarray(mean), jnp.asarray(std**2))
    np.testing.assert_allclose(jnp.exp(got), ref, rtol=1e-9)


@pytest.mark.parametrize("param", ["exp", "softplus"])
def test_positive_head_parameterisation(param):
  with enable_x64():
    raw = jnp.array([[-40.0, -3.0, 0.0, 2.0, 30.0]], jnp.float64)
    eps_hat = jnp.full_like(raw, 0.7)
    for name in covariance.HEADS:
      m = covariance.head_variance(name, raw, eps_hat=eps_hat, param=param)
      assert bool(jnp.all(m > 0)), (name, m)
      assert float(m[0, 2]) == pytest.approx(1.0)   # zero-init head: Var = 1
      # Relative precision near 0: a raw error du is a relative error ~ du in m.
      dm = covariance.head_variance(name, raw + 1e-6, eps_hat=eps_hat, param=param) / m - 1
      assert float(dm[0, 1]) == pytest.approx(1e-6, rel=0.1)
    with pytest.raises(ValueError, match="param must be one of"):
      covariance.head_variance("ocm", raw, param="square")
    with pytest.raises(ValueError, match="positive parameterisation"):
      covariance.head_losses({"ocm": raw}, eps=raw, eps_hat=raw, ocm_target_value=raw,
                             param="linear", loss="nll")


def test_head_losses_linear_mse_is_the_papers_loss():
  k1, k2, k3, k4 = jax.random.split(jax.random.key(0), 4)
  shape = (8, 3)
  raw = {n: jax.random.normal(k, shape) for n, k in zip(covariance.HEADS, (k1, k2, k3))}
  eps, eps_hat, target = jax.random.normal(k4, (3, *shape))
  got = covariance.head_losses(raw, eps=eps, eps_hat=eps_hat, ocm_target_value=target)
  np.testing.assert_allclose(got["ocm"], jnp.mean((raw["ocm"] - target) ** 2), rtol=1e-5)
  np.testing.assert_allclose(got["sn"], jnp.mean((raw["sn"] - eps**2) ** 2), rtol=1e-5)
  np.testing.assert_allclose(got["npr"], jnp.mean((raw["npr"] - (eps - eps_hat) ** 2) ** 2),
                             rtol=1e-5)


@pytest.mark.parametrize("param,loss", [("exp", "nll"), ("softplus", "nll"), ("exp", "rmse"),
                                        ("softplus", "mse")])
def test_positive_head_losses_unbiased_gradient_and_jit(param, loss):
  with enable_x64():
    key = jax.random.key(1)
    # Noisy targets with a small mean (some negative, like the probe target): the loss's
    # minimiser (fixed point for rmse) over a constant head is still the mean.
    y = 0.02 + 0.05 * jax.random.normal(key, (20000, 1), jnp.float64)
    assert float(jnp.mean(y < 0)) > 0.2

    def loss_fn(u):
      raw = jnp.broadcast_to(u, y.shape)
      return covariance.head_losses({"ocm": raw}, eps=y, eps_hat=y,
                                    ocm_target_value=y - 1.0, param=param, loss=loss)["ocm"]

    # A short-memory Adam: rmse's gradient shrinks with the absolute error.
    opt = optax.adam(optax.cosine_decay_schedule(0.05, 1000), b2=0.9)
    grad = jax.grad(loss_fn)

    def step(carry, _):
      u, state = carry
      updates, state = opt.update(grad(u), state)
      return (optax.apply_updates(u, updates), state), None

    u = jnp.zeros((1, 1), jnp.float64)
    (u, _), _ = jax.jit(lambda u: jax.lax.scan(step, (u, opt.init(u)), length=1000))(u)
    grad = jax.jit(grad)
    m = covariance.head_variance("ocm", u, param=param)
    np.testing.assert_allclose(m, jnp.mean(y), rtol=1e-3)
    # Finite-difference gradient (float64) at a generic point, and jit == eager. rmse's
    # weight 1 / sg(m) is held at its value at u0.
    u0 = jnp.array([[-1.3]], jnp.float64)
    m0 = covariance.head_variance("ocm", u0, param=param)
    ref = {"nll": lambda v: jnp.mean(jnp.log(v) + y / v),
           "mse": lambda v: jnp.mean((v - y) ** 2),
           "rmse": lambda v: jnp.mean((v - y) ** 2) / m0[0, 0]}[loss]
    f = lambda u: ref(covariance.head_variance("ocm", u, param=param))
    fd = (f(u0 + 1e-6) - f(u0 - 1e-6)) / 2e-6
    np.testing.assert_allclose(grad(u0)[0, 0], fd, rtol=1e-6)
    np.testing.assert_allclose(loss_fn(u0), f(u0), rtol=1e-12)
    np.testing.assert_allclose(jax.jit(loss_fn)(u0), loss_fn(u0), rtol=1e-12)


def test_rmse_gradient_stays_finite_where_the_head_variance_underflows():
  # A head driven to m = exp(raw) ~ 0 (its targets' mean <= 0 there): without the weight
  # floor, 1 / sg(m) * dm/draw is inf * 0 = NaN once exp underflows.
  raw = jnp.array([[-200.0, -50.0, 0.0]], jnp.float32)
  y = jnp.array([[-0.3, 0.2, 0.5]], jnp.float32)

  def loss_fn(r):
    return covariance.head_losses({"npr": r}, eps=y, eps_hat=jnp.zeros_like(y),
                                  ocm_target_value=None, param="exp", loss="rmse")["npr"]

  value, grad = jax.jit(jax.value_and_grad(loss_fn))(raw)
  assert np.isfinite(float(value)) and np.all(np.isfinite(np.asarray(grad)))
  # Above the floor the gradient in raw is 2 (m - y) / 3 (mean over 3 entries); below it
  # (m = exp(-50) < 1e-6) it is 2 (m - y) m / floor, and 0 where m underflowed.
  m = np.exp(np.asarray(raw, np.float64))
  yy = np.square(np.asarray(y, np.float64))  # npr target (eps - 0)^2
  want = 2 * (m - yy) * m / np.maximum(m, covariance.RMSE_WEIGHT_FLOOR) / 3
  np.testing.assert_allclose(np.asarray(grad), want, rtol=1e-5, atol=1e-30)


class _OracleNet:
  """A "network" whose eps is a mixture's exact eps*(x_t) (``apply(params, x, t)``)."""

  def __init__(self, oracle):
    self.oracle = oracle

  def apply(self, params, x, t):
    del params
    return self.oracle.eps_and_h(x, t[0])[0], x


def _jacobian_and_exact(mixes, schedule, x_t, ts):
  """((eps, Var[eps | x_t]) of "jacobian", the same of "exact", c of "jacobian") for each
  mixture of the stacked ``mixes`` at each t of ``ts``, the mixture's eps* as the network."""

  def one(mix, t):
    oracle = gmm.GMMOracle(mix, schedule.abar)
    methods = kernel.Methods(model=_OracleNet(oracle), backbone=None, oracle=oracle)
    # The same predictor and clip as every method: c = clip((sigma^2 / abar) m, 0, 1).
    pred = kernel.make_predictor(methods, "jacobian", schedule)
    return (kernel.eps_variance_fn(methods, "jacobian", schedule)(x_t, t),
            kernel.eps_variance_fn(methods, "exact", schedule)(x_t, t), pred(x_t, t)[1])

  return jax.vmap(lambda mix: jax.vmap(lambda t: one(mix, t))(ts))(mixes)


def test_jacobian_diagonal_method_equals_the_closed_form(schedule):
  """The "jacobian" diagnostic (-sigma diag d eps / d x_t) is exact: on the optimal eps of a
  Gaussian it is the analytic -sigma^2 / v; on a mixture's it is the exact row's h*; on a
  linear network eps = x A^T it is diag A, off-diagonal A ignored."""
  with enable_x64():
    x_t = jax.random.normal(jax.random.key(3), (64, 3), jnp.float64)
    ts = jnp.asarray([1, 54, 251, 900])
    # A Gaussian (as 5 equal components, to stack with the 5-mode mixture) and a mixture.
    mixes = [gmm.make_mixture(np.ones(5), np.tile([[0.2, -0.1, 0.4]], (5, 1)),
                              np.tile([[0.05, 0.3, 0.8]], (5, 1))),
             gmm.random_mixture(2, num_modes=5, dim=3)]
    mixes = jax.tree.map(lambda *a: jnp.stack(a).astype(jnp.float64), *mixes)
    a = jax.random.normal(jax.random.key(4), (3, 3), jnp.float64)

    @jax.jit
    def everything(mixes, a):
      linear = covariance.jacobian_diagonal(lambda x: (x @ a.T, x), x_t)[:2]
      return _jacobian_and_exact(mixes, schedule, x_t, ts), linear

    ((eps_j, var_j), (eps_e, var_e), c_j), (diag, eps) = everything(mixes, a)
    np.testing.assert_allclose(eps_j, eps_e, rtol=1e-12)
    np.testing.assert_allclose(var_j, var_e, rtol=1e-9, atol=1e-10)
    abar = jnp.asarray(schedule.abar)[ts][None, :, None, None]
    c_e = jnp.clip((1 - abar) / abar * var_e, 0.0, 1.0)
    np.testing.assert_allclose(c_j, c_e, rtol=1e-9, atol=1e-10)
    # The Gaussian: Var[eps | x_t] = 1 - sigma^2 / v, v = alpha^2 s^2 + sigma^2.
    v = abar[0] * mixes.stds[0, 0] ** 2 + 1 - abar[0]
    np.testing.assert_allclose(var_j[0], jnp.broadcast_to(1 - (1 - abar[0]) / v,
                                                          var_j[0].shape), rtol=1e-9, atol=1e-10)
    assert np.ptp(np.asarray(var_j[1, 1]), axis=0).min() > 1e-2  # t = 54: h* varies with x_t
    np.testing.assert_allclose(diag, jnp.broadcast_to(jnp.diag(a), x_t.shape), rtol=1e-12)
    np.testing.assert_allclose(eps, x_t @ a.T, rtol=1e-12)


def test_softplus_offset_is_xlas_float32_log_expm1_one():
  """The written-out constant is the value the formula gives in float32 (so the heads'
  output at raw = 0 is exactly softplus of it, as before it was written out)."""
  assert covariance._SOFTPLUS_ONE == float(jnp.log(jnp.expm1(jnp.float32(1.0))))  # noqa: SLF001
  assert abs(covariance._SOFTPLUS_ONE - math.log(math.expm1(1.0))) < 1.2e-7  # noqa: SLF001
