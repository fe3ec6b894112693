"""GVAR block, loss terms (closed forms, finite differences), training kernel behaviour."""

import jax
import jax.numpy as jnp
import numpy as np
import pytest

from jaxlib_papers.aerca import kernel as K
from jaxlib_papers.aerca.models import GVAR, Networks
from jaxlib_papers.core import distributed, train_loop
from jaxlib_papers.core.config import make_config
from jaxlib_papers.core.precision import enable_x64

P, LAG, HIDDEN = 3, 2, 8
TRAIN = K.TrainSettings(lr=3e-3, num_seeds=2, patience=3, epochs_per_step=2)


def _series(n, length=24, seed=0):
  return np.random.default_rng(seed).normal(size=(n, length, P)).astype(np.float32)


def test_gvar_is_a_sum_of_coefficient_times_lagged_input():
  nets = Networks(P, LAG, HIDDEN, 2)
  params = jax.jit(nets.init)(jax.random.key(0))
  apply = jax.jit(nets.apply)
  windows = jnp.asarray(_series(1, 10)[0][:6].reshape(3, LAG, P))
  preds, coeffs = apply(params["encoder"], windows)
  assert coeffs.shape == (3, LAG, P, P)
  assert float(jnp.max(jnp.abs(coeffs))) < 1.0
  manual = sum(np.einsum("nij,nj->ni", coeffs[:, k], windows[:, k]) for k in range(LAG))
  np.testing.assert_allclose(preds, manual, rtol=1e-5, atol=1e-6)
  # PyTorch default init: |W| <= 1 / sqrt(fan_in); first layer fan_in = p.
  w0 = np.asarray(params["encoder"]["w0"])
  assert w0.shape == (LAG, P, HIDDEN) and np.abs(w0).max() <= 1 / np.sqrt(P)
  assert np.abs(w0).max() > 0.8 / np.sqrt(P)
  # Lag slots are separate MLPs: changing slot 0's input leaves slot 1's Psi unchanged.
  _, c2 = apply(params["encoder"], windows.at[:, 0].add(1.0))
  np.testing.assert_allclose(c2[:, 1], coeffs[:, 1])
  assert not np.allclose(c2[:, 0], coeffs[:, 0])
  # The flax module's own init has the same parameter tree.
  own = GVAR(P, LAG, HIDDEN, 2).init(jax.random.key(1), windows)["params"]
  assert jax.tree.map(jnp.shape, own) == jax.tree.map(jnp.shape, params["encoder"])


def test_lag_major_layout_is_the_same_function_and_gradient():
  nets = Networks(P, LAG, HIDDEN, 2)
  major = Networks(P, LAG, HIDDEN, 2, lag_major=True)
  assert nets.for_training().block.lag_major and not nets.block.lag_major
  params = jax.jit(nets.init)(jax.random.key(0))
  windows = jnp.asarray(_series(1, 12)[0][:10].reshape(5, LAG, P))

  @jax.jit
  def both(p, w):
    out = [n.apply(p["encoder"], w) for n in (nets, major)]
    grads = [jax.grad(lambda q, n=n: jnp.sum(jnp.sin(n.apply(q, w)[1])))(p["encoder"])
             for n in (nets, major)]
    return out, grads

  (a, b), (ga, gb) = both(params, windows)
  np.testing.assert_allclose(a[0], b[0], rtol=1e-5, atol=1e-6)
  np.testing.assert_allclose(a[1], b[1], rtol=1e-5, atol=1e-6)
  for x, y in zip(jax.tree.leaves(ga), jax.tree.leaves(gb)):
    np.testing.assert_allclose(x, y, rtol=1e-5, atol=1e-6)


def test_lag_windows_and_forward_alignment():
  x = np.arange(7 * P, dtype=np.float32).reshape(7, P)
  w = K.lag_windows(x, 2)     # numpy in, numpy indexing: no compilation
  assert w.shape == (5, 2, P)
  np.testing.assert_array_equal(w[3, 0], x[3])
  np.testing.assert_array_equal(w[3, 1], x[4])   # window 3 predicts x[5]
  nets = Networks(P, LAG, HIDDEN, 1)
  params = jax.jit(nets.init)(jax.random.key(0))
  xs = jnp.asarray(_series(1)[0])
  out = jax.jit(lambda p, x: K.forward(nets, p, x))(params, xs)
  assert out.residuals.shape == (24 - LAG, P) and out.recon.shape == (24 - 2 * LAG, P)
  apply = jax.jit(nets.apply)
  y, _ = apply(params["encoder"], K.lag_windows(np.asarray(xs), LAG))
  np.testing.assert_allclose(out.residuals, y - xs[LAG:], atol=1e-6)
  np.testing.assert_array_equal(out.target, xs[2 * LAG:])
  # recon_t = Phi(s_{t-K..t-1}) + s_t + Phi'(x_{t-2K..t-K-1}), t = 2K + j.
  j = 4
  s = out.residuals
  dec, _ = apply(params["decoder"], s[j:j + LAG][None])
  prev, _ = apply(params["decoder_prev"], xs[j:j + LAG][None])
  np.testing.assert_allclose(out.recon[j], dec[0] + s[j + LAG] + prev[0], atol=1e-5)


def test_kl_forms_against_closed_form():
  rng = np.random.default_rng(1)
  s = rng.normal(size=(400, P)) @ np.array([[1.0, 0.3, 0], [0, 0.8, 0.2], [0, 0, 1.5]]) + 0.5
  mu, cov = s.mean(0), np.cov(s.T)
  cov_j = cov + 1e-6 * np.linalg.cond(cov) * np.eye(P)
  logdet = np.linalg.slogdet(cov_j)[1]
  paper = 0.5 * (np.trace(cov_j) + mu @ mu - P - logdet)
  code = np.trace(cov_j) + mu @ mu - P + logdet
  with enable_x64():
    np.testing.assert_allclose(K.kl_paper(jnp.asarray(s)), paper, rtol=1e-9)
    np.testing.assert_allclose(K.kl_code(jnp.asarray(s)), code, rtol=1e-9)
    # The paper's KL is >= 0 and ~0 for standard normal samples; the coded one is not.
    z = jnp.asarray(rng.normal(size=(20000, P)))
    assert 0 <= float(K.kl_paper(z)) < 1e-3
    assert float(K.kl_code(0.01 * z)) < -20


def test_sparsity_and_smoothness_closed_forms():
  rng = np.random.default_rng(2)
  c = rng.normal(size=(5, 3, P, P))

  @jax.jit
  def terms(v):
    grad_at_zero = jax.grad(lambda w: K.sparsity(w, 0.5))(jnp.zeros_like(v))
    return (K.sparsity(v, 0.3), K.smoothness(v, "lag"), K.smoothness(v, "time"),
            K.smoothness(v[:, :1], "lag"), grad_at_zero)

  sp, lag_s, time_s, single, grad_at_zero = terms(jnp.asarray(c))
  l2 = np.sqrt((c ** 2).sum(1)).mean()
  l1 = np.abs(c).sum(1).mean()
  np.testing.assert_allclose(sp, 0.7 * l2 + 0.3 * l1, rtol=1e-5)
  np.testing.assert_allclose(lag_s, np.sqrt(((c[:, 1:] - c[:, :-1]) ** 2).sum(1)).mean(),
                             rtol=1e-5)
  np.testing.assert_allclose(
      time_s, np.sqrt(((c[1:] - c[:-1]) ** 2).reshape(4, -1).sum(1)).mean(), rtol=1e-5)
  assert float(single) == 0.0
  # safe norm: zero coefficients give a finite (zero) gradient.
  assert np.all(np.isfinite(grad_at_zero))


@pytest.mark.parametrize("settings", [
    K.LossSettings(),
    K.LossSettings(kl_form="paper", smooth_axis="time"),
    K.LossSettings(decoder=False, beta=0.0)], ids=["code", "paper_time", "encoder_only"])
def test_loss_gradient_matches_finite_differences_float64(settings):
  with enable_x64():
    nets = Networks(P, LAG, 4, 1)
    params = jax.tree.map(lambda a: a.astype(jnp.float64), nets.init(jax.random.key(0)))
    x = jnp.asarray(_series(1, 16)[0], jnp.float64)
    f = lambda p: K.loss_fn(nets, settings, p, x)[0]
    direction = jax.tree.map(lambda a: jnp.asarray(
        np.random.default_rng(a.size).normal(size=a.shape)), params)

    @jax.jit
    def check(p, d):
      grads = jax.grad(f)(p)
      eps = 1e-6
      plus = f(jax.tree.map(lambda a, b: a + eps * b, p, d))
      minus = f(jax.tree.map(lambda a, b: a - eps * b, p, d))
      analytic = sum(jnp.vdot(g, b) for g, b in zip(jax.tree.leaves(grads),
                                                    jax.tree.leaves(d)))
      return analytic, (plus - minus) / (2 * eps), f(p)

    analytic, fd, jitted = check(params, direction)
    np.testing.assert_allclose(analytic, fd, rtol=1e-5)
    if settings.decoder and settings.kl_form == "code":   # jit == eager (op by op)
      np.testing.assert_allclose(jitted, f(params), rtol=1e-12)


def _config(epochs):
  return make_config("smoke", {"seed": 0, "loop": {"num_steps": epochs, "log_every": 1,
                                                   "checkpoint_every": 100, "quiet": True}})



@pytest.fixture(scope="module")
def trained():
  """One kernel, two epochs per step, run jitted on one device and by train_loop on 8."""
  nets = Networks(P, LAG, HIDDEN, 1)
  val = _series(2, seed=2)
  kern = K.make_train_kernel(nets, K.LossSettings(), _series(4, seed=1), val, TRAIN)
  step = jax.jit(kern.train_step)
  state = jax.jit(kern.init)(jax.random.key(0))
  for _ in range(2):
    state, metrics = step(state, None)
  result = train_loop.run(kern, None, _config(4), None, mesh=distributed.make_mesh(),
                          steps_per_call=2)
  return kern, step, state, metrics, result, val


def test_train_kernel_single_device_equals_train_loop_on_8_devices(trained):
  _, _, state, metrics, result, _ = trained
  assert jax.device_count() == 8 and np.isfinite(float(metrics["loss"]))
  for a, b in zip(jax.tree.leaves(state), jax.tree.leaves(result.state)):
    np.testing.assert_allclose(np.asarray(a, np.float32), np.asarray(b, np.float32),
                               rtol=2e-5, atol=2e-6)
  assert int(result.state.epoch) == 4
  assert [row["step"] for row in result.history] == [2, 4]   # a step is one epoch
  assert result.history[-1]["loss"] < result.history[0]["loss"] * 1.5


@pytest.mark.parametrize("num_seeds", [1, 8])
def test_windows_or_seeds_split_over_8_devices_train_as_on_one(num_seeds):
  """train_loop on the 8-device mesh: one seed splits its lag windows over the devices,
  8 seeds run one per device (``vmap_members(split=True)``); both train as on one device
  up to float32 rounding (the fixture's 2 seeds: windows split inside the vmap)."""
  nets = Networks(P, LAG, HIDDEN, 1)
  kern = K.make_train_kernel(nets, K.LossSettings(), _series(4, seed=5), _series(2, seed=6),
                             TRAIN._replace(num_seeds=num_seeds))
  runs = [train_loop.run(kern, None, _config(4), None, mesh=mesh, steps_per_call=2)
          for mesh in (distributed.make_mesh(),
                       distributed.make_mesh(devices=jax.devices()[:1]))]
  assert runs[0].state.epoch.sharding.mesh.size == 8
  for a, b in zip(jax.tree.leaves(runs[0].state), jax.tree.leaves(runs[1].state)):
    np.testing.assert_allclose(np.asarray(a, np.float32), np.asarray(b, np.float32),
                               rtol=2e-5, atol=2e-6)
  np.testing.assert_allclose(runs[0].history[-1]["loss"], runs[1].history[-1]["loss"],
                             rtol=2e-5)


@pytest.mark.parametrize("devices,length,lag,decoder,kl_form", [
    (8, 40, 2, True, "code"),      # 36 targets: chunks of 5, the last device's padded
    (8, 13, 1, True, "paper"),     # 11 targets, chunks of 2: the last two devices hold none
    (2, 61, 3, False, "code"),     # encoder-only ablation: windows, not targets, counted
    (3, 30, 1, True, "code"),      # K = 1: no lag smoothness
])
def test_split_series_loss_equals_the_one_device_loss_and_gradient(devices, length, lag,
                                                                   decoder, kl_form):
  """Each device's share of a series (overlapping encoder windows computed twice, counted
  once; masked padding) sums to ``loss_fn``'s loss and gradient, jit over the mesh."""
  nets = Networks(P, lag, HIDDEN, 2).for_training()
  params = jax.jit(nets.init)(jax.random.key(3))
  x = jnp.asarray(_series(1, length, seed=devices)[0])
  settings = K.LossSettings(decoder=decoder, kl_form=kl_form)
  mesh = distributed.make_mesh(devices=jax.devices()[:devices])
  loss = lambda p, x: K.series_loss_value(nets, settings, p, x)
  split = jax.jit(distributed.traced_on(mesh, jax.value_and_grad(loss)),
                  in_shardings=distributed.replicated(mesh))
  (value, grad), (ref, ref_grad) = split(params, x), jax.jit(jax.value_and_grad(
      lambda p, x: K.loss_fn(nets, settings, p, x)[0]))(params, x)
  assert "all_reduce" in split.lower(params, x).as_text()   # it split (no second compile)
  no_mesh = [jax.jit(lambda p, x, f=f: f(nets, settings, p, x))(params, x)   # no mesh: loss_fn
             for f in (K.split_series_loss, lambda *a: K.loss_fn(*a)[0])]
  np.testing.assert_array_equal(*no_mesh)
  np.testing.assert_allclose(value, ref, rtol=2e-6)
  for a, b in zip(jax.tree.leaves(grad), jax.tree.leaves(ref_grad)):
    np.testing.assert_allclose(a, b, rtol=2e-5, atol=2e-6 * float(jnp.max(jnp.abs(b))))


def test_split_series_loss_names_the_unsupported_smoothness():
  nets = Networks(P, LAG, HIDDEN, 1).for_training()
  with pytest.raises(ValueError, match="smooth_axis='time'"):
    K.split_series_loss(nets, K.LossSettings(smooth_axis="time"), None,
                        jnp.zeros((20, P)))


def test_resume_equals_uninterrupted(trained, tmp_path):
  kern, _, _, _, result, _ = trained
  mesh = distributed.make_mesh()
  train_loop.run(kern, None, _config(2), tmp_path, mesh=mesh, steps_per_call=2)
  resumed = train_loop.run(kern, None, _config(4), tmp_path, mesh=mesh, steps_per_call=2)
  assert resumed.resumed_from == 2
  for a, b in zip(jax.tree.leaves(resumed.state), jax.tree.leaves(result.state)):
    np.testing.assert_array_equal(np.asarray(a), np.asarray(b))


def test_best_val_is_the_validation_loss_of_best_params(trained):
  kern, _, _, _, result, val = trained
  loss = jax.jit(lambda p, x: kern.series_loss(p, x)[0])
  for seed in range(2):
    best = jax.tree.map(lambda a, i=seed: a[i], result.state.seeds.best.params)
    total = sum(float(loss(best, jnp.asarray(v))) for v in val)
    np.testing.assert_allclose(total, float(result.state.seeds.best.value[seed]), rtol=1e-4)


def test_early_stopping_freezes_seeds_and_skips_when_all_stopped(trained):
  _, step, state, _, _, _ = trained
  # No epoch can beat a best of -inf: both seeds stop after patience (3) epochs.
  # (Derived from the state's own arrays so the compiled step is reused.)
  best = state.seeds.best
  best = best._replace(value=best.value - jnp.inf, bad_epochs=best.bad_epochs * 0)
  state = state._replace(seeds=state.seeds._replace(best=best))
  start_epoch, start_trained = int(state.epoch), np.asarray(state.seeds.epochs_trained)
  state, _ = step(state, None)
  assert np.all(np.asarray(state.seeds.best.active))
  state, metrics = step(state, None)                 # epoch 3 of patience 3
  assert not np.any(np.asarray(state.seeds.best.active))
  assert int(state.epoch) == start_epoch + 3 and float(metrics["active_seeds"]) == 0.0
  np.testing.assert_array_equal(state.seeds.epochs_trained, start_trained + 3)
  frozen = state
  state, _ = step(state, None)
  assert int(state.epoch) == int(frozen.epoch)        # skipped: no epoch counted
  for a, b in zip(jax.tree.leaves(frozen.seeds), jax.tree.leaves(state.seeds)):
    np.testing.assert_array_equal(a, b)


def test_a_seed_on_its_own_series_trains_as_on_a_shared_set_equal_to_them():
  """[S, n, T, p] series (one draw per seed): seed s follows the shared-data kernel run on
  seed s's series alone (same key, same init, same epochs)."""
  nets = Networks(P, LAG, HIDDEN, 1)
  draws = [(_series(3, seed=10 + s), _series(2, seed=20 + s)) for s in range(2)]
  fit, val = (np.stack([d[i] for d in draws]) for i in (0, 1))
  key = jax.random.key(3)

  def trained(train_series, val_series):
    kern = K.make_train_kernel(nets, K.LossSettings(), train_series, val_series, TRAIN)
    state, step = kern.init(key), jax.jit(kern.train_step)
    for _ in range(2):
      state, _ = step(state, None)
    return state.seeds

  own = trained(fit, val)
  for s, (fit_s, val_s) in enumerate(draws):
    shared = trained(fit_s, val_s)
    for a, b in zip(jax.tree.leaves(own), jax.tree.leaves(shared)):
      np.testing.assert_allclose(np.asarray(a[s], np.float32), np.asarray(b[s], np.float32),
                                 rtol=2e-5, atol=2e-6)
  assert not np.allclose(own.best.value[0], own.best.value[1])
  with pytest.raises(ValueError, match=r"train_series must be \[2, n >= 1"):
    K.make_train_kernel(nets, K.LossSettings(), fit[:1], val, TRAIN)
  with pytest.raises(ValueError, match=r"val_series must be \[2, n >= 1"):
    K.make_train_kernel(nets, K.LossSettings(), fit, val[0], TRAIN)


def test_bad_settings_are_named():
  with pytest.raises(ValueError, match="kl_form"):
    K.LossSettings(kl_form="nope").validate()
  with pytest.raises(ValueError, match="smooth_axis"):
    K.LossSettings(smooth_axis="nope").validate()
  with pytest.raises(ValueError, match="train_series"):
    K.make_train_kernel(Networks(P, LAG, 4, 1), K.LossSettings(), np.zeros((2, 3, P)),
                        np.zeros((1, 20, P)), K.TrainSettings(lr=1e-3, patience=2))
  with pytest.raises(ValueError, match="patience"):
    K.TrainSettings(patience=0).validate()
  with pytest.raises(ValueError, match="lr must be > 0"):
    K.TrainSettings(lr=0.0).validate()
  with pytest.raises(ValueError, match="lag"):
    Networks(P, 0, 4, 1)
