"""AERCA configs: ``get_config("<dataset>,<preset>")`` (or ``get_config(preset)``: linear).

Data sets: ``linear``, ``nonlinear``, ``lorenz96``, ``lotka_volterra``; presets
``smoke`` | ``cpu`` | ``full``. The base holds the official defaults (loss weights 0.5,
elastic-net mix 0.5, H = 50, coded KL and lag-axis smoothness, 10 training series split
8 / 2, patience 20, up to 5000 epochs, Adam 1e-4) and each data set's official lag K and
depth L. The ``cpu`` preset is the reproduction size (Adam 1e-3 and at most 800 epochs, as
in the brief's CPU plan; nonlinear with L = 3; Lorenz-96 with p = 10, T = 500 and at most
200 epochs); ``full`` is the paper's.

An aerca step is one epoch (one Adam step per training series): each trained variant is
a stage of ``optim.max_epochs`` steps (a positive multiple of ``optim.epochs_per_step``),
``optim.epochs_per_step`` per compiled call; ``loop.log_every`` and
``loop.checkpoint_every`` count epochs too.

Launcher: ``--config=jaxlib_papers/aerca/configs/default.py:nonlinear,cpu``.
"""

from __future__ import annotations

from jaxlib_papers.aerca.data import DATASETS
from jaxlib_papers.core import config as config_lib

_BASE = dict(
    seed=0,                      # model seed: seeds are jax.random.split(key(seed), S)
    num_seeds=5,                 # S, seeds trained together by jax.vmap
    dataset="linear",
    data=dict(
        seed=0,                  # data seed (graph, coefficients, noise, anomalies)
        # True: seed s trains and is scored on its own draw (data seed seed + s), as the
        # official code's --seed draws the data with the model; False: every seed on one.
        draw_per_seed=True,
        num_train=10,            # normal series for fitting; the last num_val validate
        num_val=2,
        num_test=100,            # normal (graph) and abnormal (root causes) test series
        length=500,              # T
        num_vars=4,              # p (Lotka-Volterra: 2 x species)
    ),
    model=dict(lag=1,            # K
               hidden=50,        # H
               layers=1),        # L, hidden layers per coefficient MLP
    loss=dict(lambda_encoder=0.5, lambda_decoder=0.5,   # lambda_en, lambda_de
              gamma_encoder=0.5, gamma_decoder=0.5,     # gamma_en, gamma_de
              beta=0.5,                                 # beta (KL)
              alpha=0.5,                                # elastic-net mix
              kl_form="code",                           # "code" | "paper"
              smooth_axis="lag",                        # "lag" (code) | "time" (paper)
              decoder=True),
    # An aerca step is one epoch (one Adam step per training series): the training stage
    # runs max_epochs steps (a multiple of epochs_per_step), epochs_per_step per call.
    optim=dict(lr=1e-4, max_epochs=5000, patience=20, epochs_per_step=10),
    # Extra trained variants besides "aerca": "paper_kl" (the paper's KL form) and
    # "encoder_only" (no decoder, no KL).
    variants=("aerca",),
    baselines=True,              # VAR residual z, raw-value z, random ranking
    eval=dict(max_k=10, pot_risk=1e-2, pot_level=0.98, star_ks=(1, 10, 100, 500)),
    # Cadence in steps, i.e. epochs; the number of steps is optim.max_epochs.
    loop=dict(log_every=100, checkpoint_every=1000000, quiet=False),
    # XLA options of the compiled train step (core.compiler.named): "default", the
    # backend's own, or "cpu_threaded_dots" (XLA:CPU: the matmuls to XLA's Eigen dot
    # instead of YNNPACK's), which the nonlinear data set takes: its GVARs' [n, 50] x
    # [50, 50] products, 1.11-1.16x an epoch on one core, one device on two cores and two
    # devices; Lorenz-96 0.96x, linear 1.01x (seeds/aerca.md, "XLA's own dots"). No effect
    # off CPU.
    compiler_options="default",
)

# Official per-data-set settings (K, H, L, T, p, seeds of the args files).
DATASET_DEFAULTS = {
    "linear": {"model.lag": 1, "model.layers": 1, "data.length": 500, "data.num_vars": 4},
    "nonlinear": {"model.lag": 5, "model.layers": 8, "data.length": 500,
                  "data.num_vars": 6, "compiler_options": "cpu_threaded_dots"},
    "lorenz96": {"model.lag": 1, "model.layers": 2, "data.length": 2000,
                 "data.num_vars": 20},
    "lotka_volterra": {"model.lag": 1, "model.layers": 2, "data.length": 1950,
                       "data.num_vars": 40},
}

_PRESETS = {
    "smoke": {"num_seeds": 2, "data.num_test": 6, "data.length": 120,
              "optim.lr": 1e-3, "optim.max_epochs": 6, "optim.epochs_per_step": 3,
              "model.hidden": 16},
    "cpu": {"num_seeds": 3, "data.num_test": 50, "optim.lr": 1e-3, "optim.max_epochs": 800,
            "optim.epochs_per_step": 10, "loop.log_every": 100},
    "full": {},
}

DATASET_PRESETS = {
    ("nonlinear", "smoke"): {"model.layers": 1, "model.lag": 2},
    ("nonlinear", "cpu"): {"model.layers": 3},
    ("lorenz96", "smoke"): {"data.num_vars": 6, "model.layers": 1},
    # The coded KL has no lower bound, so the validation loss keeps falling and early
    # stopping rarely fires on Lorenz-96: the epoch cap sets the cost (0.22 CPU-s per epoch
    # for 3 seeds at p = 10, T = 500).
    ("lorenz96", "cpu"): {"data.num_vars": 10, "data.length": 500, "optim.max_epochs": 200},
    ("lotka_volterra", "smoke"): {"data.num_vars": 8, "model.layers": 1},
    ("lotka_volterra", "cpu"): {"data.num_vars": 20, "data.length": 1000},
}


C = config_lib
# What every key allows, checked when a config is built and again by ``train.run`` and the
# launcher (after command-line overrides), before any data is generated.
CONSTRAINTS = {
    "seed": C.at_least(0), "num_seeds": C.at_least(1), "dataset": C.one_of(*DATASETS),
    "data.seed": C.at_least(0), "data.draw_per_seed": C.one_of(True, False),
    "data.num_train": C.at_least(2), "data.num_val": C.at_least(1),
    "data.num_test": C.at_least(1), "data.length": C.at_least(4), "data.num_vars": C.at_least(2),
    "model.lag": C.at_least(1), "model.hidden": C.at_least(1), "model.layers": C.at_least(1),
    **{f"loss.{k}": C.non_negative() for k in ("lambda_encoder", "lambda_decoder",
                                              "gamma_encoder", "gamma_decoder", "beta")},
    "loss.alpha": C.in_range(0.0, 1.0), "loss.kl_form": C.one_of("code", "paper"),
    "loss.smooth_axis": C.one_of("lag", "time"),
    "optim.lr": C.positive(), "optim.max_epochs": C.at_least(1),
    "optim.patience": C.at_least(1), "optim.epochs_per_step": C.at_least(1),
    "variants": C.each(C.one_of("aerca", "paper_kl", "encoder_only")),
    "eval.max_k": C.at_least(1), "eval.pot_risk": C.in_range(0.0, 1.0, low_open=True),
    "eval.pot_level": C.in_range(0.0, 1.0, low_open=True, high_open=True),
    "loop.log_every": C.at_least(1), "loop.checkpoint_every": C.at_least(1),
    "compiler_options": C.one_of("default", "cpu_threaded_dots"),
}


def get_config(spec: str = "smoke"):
  """``"<dataset>,<preset>"`` or ``"<preset>"`` (linear) -> ConfigDict."""
  dataset, preset = "linear", spec
  if "," in spec:
    dataset, preset = (part.strip() for part in spec.split(",", 1))
  return dataset_config(dataset, preset)


def dataset_config(dataset: str, preset: str = "smoke", **overrides):
  """Config of ``dataset`` at ``preset``, then dotted ``overrides``."""
  if dataset not in DATASETS:
    raise ValueError(f"dataset must be one of {DATASETS}; got {dataset!r}")
  config = config_lib.make_config(preset, _BASE, {p: dict(v) for p, v in _PRESETS.items()})
  with config.unlocked():
    config.dataset = dataset
    config_lib.apply_overrides(config, {**DATASET_DEFAULTS[dataset], **_PRESETS[preset],
                                        **DATASET_PRESETS.get((dataset, preset), {}),
                                        **overrides})
  return C.validate(config, CONSTRAINTS)
