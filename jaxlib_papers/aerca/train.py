"""AERCA pipeline: data -> training (one ``core.stages`` stage per variant) -> readouts.

``run(config, workdir)`` is what the launcher, the reproduction check and the Colab demo
call; it returns a :class:`Result`. Each trained variant (``aerca``, ``paper_kl``,
``encoder_only``) is a stage run in ``workdir/<variant>`` (checkpointed, resumable);
``workdir=None`` runs in memory. A stage's step is one epoch (one Adam step per training
series), ``optim.max_epochs`` of them, ``optim.epochs_per_step`` per compiled call.
"""

from __future__ import annotations

import dataclasses
import pathlib
import time
from typing import Any, NamedTuple

import jax
import jax.numpy as jnp
import ml_collections
import numpy as np

from jaxlib_papers.aerca import data as data_lib
from jaxlib_papers.aerca import evaluate as ev
from jaxlib_papers.aerca import kernel as K
from jaxlib_papers.aerca.configs import default as default_config
from jaxlib_papers.aerca.models import Networks
from jaxlib_papers.core import config as config_lib
from jaxlib_papers.core import results, stages

VARIANTS = ("aerca", "paper_kl", "encoder_only")
HISTORY_KEYS = ("step", "loss", "val_loss", "active_seeds")


class Settings(NamedTuple):
  """A variant's settings, read from the config once."""
  loss: K.LossSettings
  train: K.TrainSettings
  max_epochs: int          # epochs (the stage's steps), a multiple of epochs_per_step


@dataclasses.dataclass(frozen=True)
class Training:
  """How one variant trained."""
  epochs: list[int]        # [S] epochs each seed trained before it stopped
  best_val: list[float]    # [S] best summed validation loss
  seconds: float           # wall seconds of the stage (compilation included)
  eval_seconds: float      # wall seconds of the readouts
  history: list[dict[str, float]]  # per call: step (epochs run), loss, val_loss, active_seeds


@dataclasses.dataclass(frozen=True)
class Result:
  """What :func:`run` returns; ``results.json`` holds the fields not marked in-memory.

  ``methods`` maps a method (the trained variants, ``var``, ``raw``, ``eps_diagnosis``,
  ``random``) to its
  metrics: ``ac``/``avg`` (k = 1..max_k, mean over seeds) with ``_std``, ``auroc``/``auprc``
  with ``_std``, ``ac_star``, the ``per_seed`` rows; a trained variant also has
  ``graph_mean`` [p, p] and ``z_example`` (seed 0's z-scores of the first abnormal test
  series), ``var`` its ``graph_mean`` and ``graph_pooled``.
  """
  methods: dict[str, dict[str, Any]]
  train: dict[str, Training]
  data_seconds: float
  dataset: str
  params: dict[str, Any] = results.in_memory()    # {variant: [S]-stacked best params}
  parts: dict[str, np.ndarray] = results.in_memory()  # the data split (:func:`split`)
  nets: Networks | None = results.in_memory()
  config: dict[str, Any] = results.in_memory()


def make_dataset(config: ml_collections.ConfigDict) -> data_lib.Dataset:
  """num_train + num_test normal/abnormal pairs of ``config.dataset``."""
  d = config.data
  n = int(d.num_train) + int(d.num_test)
  key = jax.random.key(int(d.seed))
  kwargs: dict[str, Any] = {"length": int(d.length)}
  name = str(config.dataset)
  if name in ("nonlinear", "lorenz96"):
    kwargs["num_vars"] = int(d.num_vars)
  elif name == "lotka_volterra":
    kwargs["num_species"] = int(d.num_vars) // 2
  elif int(d.num_vars) != 4:
    raise ValueError(f"the linear set has 4 variables; got data.num_vars={d.num_vars}")
  generate = jax.jit(lambda k: tuple(data_lib.generate(name, k, n, **kwargs))[:5])
  return data_lib.Dataset(*jax.device_get(generate(key)), name=name)


def loss_settings(config: ml_collections.ConfigDict, variant: str = "aerca"
                  ) -> K.LossSettings:
  """The :class:`kernel.LossSettings` of ``config.loss`` for ``variant``."""
  fields = {k: config.loss[k] for k in K.LossSettings._fields}
  if variant == "paper_kl":
    fields["kl_form"] = "paper"
  elif variant == "encoder_only":
    fields["decoder"] = False
    fields["beta"] = 0.0
  elif variant != "aerca":
    raise ValueError(f"variant must be one of {VARIANTS}; got {variant!r}")
  return K.LossSettings(**fields).validate()


def settings_from_config(config: ml_collections.ConfigDict, variant: str = "aerca"
                         ) -> Settings:
  """``variant``'s :class:`Settings` from ``config`` (checked before any training).

  Raises:
    ValueError: a bad loss setting, ``optim`` value or ``num_seeds``, or
      ``optim.max_epochs`` not a positive multiple of ``optim.epochs_per_step``.
  """
  optim = config.optim
  train = K.TrainSettings(lr=float(optim.lr), num_seeds=int(config.num_seeds),
                          patience=int(optim.patience),
                          epochs_per_step=int(optim.epochs_per_step)).validate()
  max_epochs = int(optim.max_epochs)
  if max_epochs < 1 or max_epochs % train.epochs_per_step:
    raise ValueError("optim.max_epochs must be a positive multiple of "
                     f"optim.epochs_per_step ({train.epochs_per_step}); got {max_epochs}")
  return Settings(loss_settings(config, variant), train, max_epochs)


def split(dataset: data_lib.Dataset, config) -> dict[str, np.ndarray]:
  """Fit / validation (the first ``data.num_train`` series) and test series of ``dataset``.

  The last ``data.num_val`` of the training series validate.
  """
  n_train, n_val = int(config.data.num_train), int(config.data.num_val)
  if n_train < 2:
    raise ValueError("data.num_train must be >= 2 (one series to fit, one to validate); "
                     f"got {n_train}")
  if not 1 <= n_val < n_train:
    raise ValueError(f"data.num_val must be in [1, data.num_train - 1 = {n_train - 1}]; "
                     f"got {n_val}")
  if len(dataset.normal) <= n_train:
    raise ValueError(f"the data set has {len(dataset.normal)} series: data.num_train = "
                     f"{n_train} leaves none to test")
  normal = np.asarray(dataset.normal, np.float32)
  return {"fit": normal[:n_train - n_val], "val": normal[n_train - n_val:n_train],
          "test_normal": normal[n_train:],
          "test_abnormal": np.asarray(dataset.abnormal[n_train:], np.float32),
          "test_labels": np.asarray(dataset.labels[n_train:], bool),
          "graph": np.asarray(dataset.graph)}


def make_encoder(nets: Networks):
  """Jitted ``f(params [S], series [n, T, p]) -> (s [S, n, T-K, p], Psi [S, n, ...])``."""
  one = lambda params, x: K.encode(nets, params, x)
  return jax.jit(jax.vmap(jax.vmap(one, in_axes=(None, 0)), in_axes=(0, None)))


def score_method(residuals_val: np.ndarray, residuals_test: np.ndarray,
                 labels: np.ndarray, lag: int, eval_cfg) -> dict[str, Any]:
  """RCA metrics of one seed from residuals (validation [n_v, T', p], test [n, T', p])."""
  mu, sigma = ev.residual_stats(residuals_val)
  z = ev.zscores(residuals_test, mu, sigma)
  aligned = labels[:, lag:]
  out = ev.rca_metrics(z, aligned, int(eval_cfg.max_k))
  thresholds = np.array([ev.pot_threshold(z[..., j], float(eval_cfg.pot_risk),
                                          float(eval_cfg.pot_level))
                         for j in range(z.shape[-1])])
  out["ac_star"] = ev.ac_star(z, aligned, thresholds, tuple(eval_cfg.star_ks))
  return out


def _graph_rows(estimates: np.ndarray, truth: np.ndarray) -> dict[str, float]:
  """Mean +- std over test series of AUROC / AUPRC; estimates [n, p, p]."""
  scores = np.array([ev.graph_scores(e, truth) for e in estimates])
  return {"auroc": float(np.nanmean(scores[:, 0])), "auroc_std": float(np.nanstd(scores[:, 0])),
          "auprc": float(np.nanmean(scores[:, 1])), "auprc_std": float(np.nanstd(scores[:, 1]))}


def summarize_seeds(per_seed: list[dict[str, Any]]) -> dict[str, Any]:
  """Mean and std over seeds of every metric of ``per_seed`` rows.

  The scalars (``auroc``, ``auprc``, ``ac_star`` per k) go through ``results.summarize``;
  ``ac`` / ``avg`` are [max_k] vectors, averaged over the seed axis in one numpy reduction
  (a column at a time would sum in another order and move the last bit).
  """
  scalars = [{**{k: row[k] for k in ("auroc", "auprc") if k in row},
              **{f"ac_star/{k}": v for k, v in row.get("ac_star", {}).items()}}
             for row in per_seed]
  stats = results.summarize(scalars, scalars[0])[0]
  out: dict[str, Any] = {"per_seed": per_seed}
  for key in ("ac", "avg"):
    values = np.array([row[key] for row in per_seed])
    out[key], out[key + "_std"] = values.mean(0).tolist(), values.std(0).tolist()
  for key in ("auroc", "auprc"):
    if key in stats:
      out[key], out[key + "_std"] = stats[key], stats[key + "_std"]
  if "ac_star" in per_seed[0]:
    out["ac_star"] = {k: stats[f"ac_star/{k}"] for k in per_seed[0]["ac_star"]}
  return out


def variant_stage(nets: Networks, parts, variant: str, settings: Settings) -> stages.Stage:
  """The stage that trains ``variant``: ``max_epochs`` steps of one epoch each."""
  make = lambda _: K.make_train_kernel(nets, settings.loss, parts["fit"], parts["val"],
                                       settings.train)
  return stages.Stage(variant, make, num_steps=settings.max_epochs,
                      steps_per_call=settings.train.epochs_per_step)


def evaluate_params(nets: Networks, params, parts, lag: int, eval_cfg) -> dict[str, Any]:
  """Graph and RCA metrics per seed of [S]-stacked ``params``.

  Validation, normal and abnormal test series go through the encoder in one call (one
  compilation). ``z_example`` holds seed 0's z-scores of the first abnormal test series.
  """
  enc = make_encoder(nets)
  n_val, n_test = len(parts["val"]), len(parts["test_normal"])
  stacked = np.concatenate([parts["val"], parts["test_normal"], parts["test_abnormal"]])
  s_all, psi = enc(params, jnp.asarray(stacked))
  graphs = np.asarray(jax.device_get(
      jnp.max(jnp.median(jnp.abs(psi[:, n_val:n_val + n_test]), axis=2), axis=2)))
  s_all = np.asarray(jax.device_get(s_all))
  s_val, s_test = s_all[:, :n_val], s_all[:, n_val + n_test:]
  rows = []
  for seed in range(graphs.shape[0]):
    row = score_method(s_val[seed], s_test[seed], parts["test_labels"], lag, eval_cfg)
    row.update(_graph_rows(graphs[seed], parts["graph"]))
    rows.append(row)
  out = summarize_seeds(rows)
  out["graph_mean"] = graphs.mean(axis=(0, 1)).tolist()
  mu, sigma = ev.residual_stats(s_val[0])
  out["z_example"] = ev.zscores(s_test[0, 0], mu, sigma).tolist()
  return out


def baselines(parts, lag: int, eval_cfg, seed: int) -> dict[str, Any]:
  """VAR-residual z (with its |A| graph), raw-value z, epsilon-Diagnosis, random ranking."""
  labels = parts["test_labels"]
  coef, intercept = ev.fit_var(parts["fit"], lag)
  var = score_method(ev.var_residuals(coef, intercept, parts["val"]),
                     ev.var_residuals(coef, intercept, parts["test_abnormal"]),
                     labels, lag, eval_cfg)
  var_graphs = [ev.var_graph(ev.fit_var(x[None], lag)[0]) for x in parts["test_normal"]]
  var.update(_graph_rows(np.array(var_graphs), parts["graph"]))
  var["graph_pooled"] = ev.graph_scores(ev.var_graph(coef), parts["graph"])
  var["graph_mean"] = np.mean(var_graphs, axis=0).tolist()
  # Raw values: -(s - mu) / sigma with s = -x is (x - median) / std.
  raw = score_method(-parts["val"][:, lag:], -parts["test_abnormal"][:, lag:], labels, lag,
                     eval_cfg)
  # epsilon-Diagnosis, the paper's baseline: windows of the observed values around each step.
  eps = ev.rca_metrics(ev.epsilon_diagnosis_scores(parts["test_abnormal"])[:, lag:],
                       labels[:, lag:], int(eval_cfg.max_k))
  rng = np.random.default_rng(seed)
  rand_scores = rng.standard_normal(labels[:, lag:].shape)
  rand = ev.rca_metrics(rand_scores, labels[:, lag:], int(eval_cfg.max_k))
  return {"var": summarize_seeds([var]) | {k: var[k] for k in ("graph_pooled", "graph_mean")},
          "raw": summarize_seeds([raw]), "eps_diagnosis": summarize_seeds([eps]),
          "random": summarize_seeds([rand])}


def _check(config: ml_collections.ConfigDict) -> dict[str, Settings]:
  """Every trained variant's settings (``aerca`` first), checked before any work."""
  if int(config.num_seeds) < 1:
    raise ValueError(f"config.num_seeds must be >= 1; got {config.num_seeds}")
  for variant in config.variants:
    if variant not in VARIANTS:
      raise ValueError(f"config.variants entries must be in {VARIANTS}; got {variant!r}")
  variants = ["aerca"] + [v for v in config.variants if v != "aerca"]
  return {v: settings_from_config(config, v) for v in variants}


def _load(config: ml_collections.ConfigDict, dataset: data_lib.Dataset | None
          ) -> dict[str, np.ndarray]:
  if dataset is None:
    dataset = make_dataset(config)
  parts = split(dataset, config)
  for name in ("fit", "val", "test_normal", "test_abnormal"):
    data_lib.validate_series(name, parts[name], int(config.data.num_vars))
  return parts


def _training(state: K.TrainState, trained: stages.StagesResult, variant: str,
              eval_seconds: float) -> Training:
  history = [{k: row[k] for k in HISTORY_KEYS} for row in trained.histories[variant]]
  best = state.seeds.best
  return Training(np.asarray(state.seeds.epochs_trained).tolist(),
                  np.asarray(best.value).tolist(), trained.seconds[variant], eval_seconds,
                  history)


def with_data_shape(config: ml_collections.ConfigDict, dataset: data_lib.Dataset
                    ) -> ml_collections.ConfigDict:
  """A copy of ``config`` whose ``data.num_vars`` is the user's data set's p (inferred from
  ``dataset.normal: [n, T, p]``, so a user's data needs no hand-set size)."""
  shape = np.shape(dataset.normal)
  if len(shape) != 3:
    raise ValueError(f"dataset.normal must be [n, T, p] series; got shape {shape}")
  config = config.copy_and_resolve_references()
  with config.unlocked():
    config.data.num_vars = int(shape[-1])
  return config


def run(config: ml_collections.ConfigDict, workdir: str | pathlib.Path | None = None,
        *, dataset: data_lib.Dataset | None = None) -> Result:
  """Trains AERCA (and the configured variants), evaluates them and the baselines.

  Args:
    config: from ``configs/default.py``.
    workdir: folder for per-variant checkpoints, metrics and ``results.json`` (None:
      in memory).
    dataset: series to use instead of generating ``config.dataset``; ``data.num_vars``
      is taken from its shape.

  Returns:
    A :class:`Result` (``results.json`` in ``workdir`` holds its written fields).

  Raises:
    ValueError: a bad setting (before any data is generated or anything trains).
  """
  config_lib.validate(config, default_config.CONSTRAINTS)
  if dataset is not None:
    config = with_data_shape(config, dataset)
  settings = _check(config)
  start = time.perf_counter()
  parts = _load(config, dataset)
  data_seconds = time.perf_counter() - start
  lag = int(config.model.lag)
  nets = Networks(int(config.data.num_vars), lag, int(config.model.hidden),
                  int(config.model.layers))
  workdir = pathlib.Path(workdir) if workdir is not None else None
  plan = tuple(variant_stage(nets, parts, v, s) for v, s in settings.items())
  trained = stages.run_stages(plan, config, workdir, name="aerca")
  methods, training, params = {}, {}, {}
  for variant in settings:
    state = trained.states[variant]
    params[variant] = jax.device_get(state.seeds.best.params)
    eval_start = time.perf_counter()
    methods[variant] = evaluate_params(nets, params[variant], parts, lag, config.eval)
    training[variant] = _training(state, trained, variant,
                                  time.perf_counter() - eval_start)
  if bool(config.baselines):
    methods.update(baselines(parts, lag, config.eval, int(config.seed)))
  result = Result(methods, training, data_seconds, str(config.dataset), params=params,
                  parts=parts, nets=nets, config=config.to_dict())
  results.write(result, workdir)
  return result
