"""OCM configs: ``get_config(preset)`` for ``smoke`` | ``cpu`` | ``full``.

Two training stages, each its own ``core.train_loop`` run (``workdir/dsm``, ``workdir/heads``):
the eps network by DSM (``loop``), then the OCM / SN / NPR heads on the frozen network
(``head_loop``). Every train-loop call runs ``*.steps_per_call`` optimizer steps as one
``lax.scan``; ``loop.num_steps`` (and ``log_every``, ``checkpoint_every``) count optimizer
steps and must be multiples of ``dsm.steps_per_call`` (``head_loop``: of
``heads.steps_per_call``).

* smoke: the 8-mode ring, a small MLP, seconds (tests, CI, the Colab demo).
* cpu: the reproduction size (ring2d; ``launch.reproduce`` also runs ``data.name=gmm16``).
* full: CIFAR-10 (tensorflow-datasets), the cosine schedule and a UNet, for a GPU/TPU.
"""

from __future__ import annotations

from jaxlib_papers.core import config as C
from jaxlib_papers.core.config import make_config

_BASE = dict(
    seed=0,
    data=dict(
        name="ring2d",            # "ring2d" | "gmm" (alias "gmm16") | "cifar10"
        num_modes=8,
        radius=0.8,               # ring radius (ring2d) / spread of the means (gmm16)
        std=0.1,                  # component std (ring2d)
        dim=16,                   # gmm dimension
        mixture_seed=0,           # gmm mixture
        std_range=(0.05, 0.2),    # gmm per-dimension component stds (uniform)
        train_limit=-1,           # cifar10: number of train images to read (-1: all)
        eval_split="test",        # cifar10 split for the NELBO
        path="",                  # your own samples (.npy): [N, D] vectors (model.kind
                                  # mlp) or [N, H, W, C] images in [-1, 1] (unet); `name`
                                  # is then ignored and shapes come from the file
    ),
    schedule=dict(kind="linear", num_steps=1000),
    model=dict(
        kind="mlp",               # "mlp" (vectors) | "unet" (images)
        width=128, depth=3, time_embed_dim=64,                        # mlp
        base_channels=64, channel_mults=(1, 2, 2), blocks_per_level=2,  # unet
        head_hidden=128, head_depth=2,
    ),
    dsm=dict(batch_size=256, lr=1e-3, warmup_steps=200, grad_clip=1.0, ema_decay=0.998,
             steps_per_call=10),
    heads=dict(names=("ocm", "sn", "npr"), num_probes=1, batch_size=256, lr=1e-3,
               warmup_steps=100, ema_decay=0.995, steps_per_call=10,
               # What the heads output: "linear" (the paper's h / E[eps^2] / E[(eps-eps_hat)^2])
               # or "exp" / "softplus" (Var[eps | x_t] positive, relative precision).
               param="exp",
               loss="rmse"),  # "mse" (the paper's) | "rmse" | "nll" (covariance.head_losses)
    eval=dict(
        sample_steps=(5, 10, 20),
        quality_steps=(10,),      # the K's with samples (MMD / FID)
        decoder="official",       # p(x0 | x_1) variance: "official" tilde_beta(1, 2) for
                                  # every method, or "method" (each method's own)
        eta=1.0,                  # 1 = DDPM sampler (the NELBO needs eta > 0)
        ddim_eta=0.0,             # an extra DDIM sample-quality row at this eta
        methods=("beta_tilde", "beta", "analytic", "sn", "npr", "ocm", "exact"),
        num_nelbo=4000,
        num_samples=2000,
        analytic_samples=2000,
        error_timesteps=(54, 112, 251, 500),  # incl. the smallest skip step of K = 20, 10, 5
        error_samples=4000,
        max_var=1.0,              # x0-covariance clip (data in [-1, 1])
        jacobian_points=1000,     # held-out points of the "jacobian" diagnostic (d jvps per
                                  # x_t; only when eval.methods lists it, vectors only)
        clip_x0=-1.0,             # > 0: clip x0_hat to [-clip, clip] (images use 1)
        seed=1,
    ),
    # 16,000 DSM steps (1,600 calls of 10). OCM regresses onto the eps network's own Jacobian,
    # so at small t it is only as good as the backbone: at 4,000 steps the check held 8 of
    # its 16 claims, at 16,000 15 (seed 0), at 32,000 15 (seeds/ocm.md, "DSM budget").
    loop=dict(num_steps=16000, log_every=4000, checkpoint_every=8000, quiet=False),
    head_loop=dict(num_steps=2000, log_every=500, checkpoint_every=1000, quiet=False),
    # XLA options of the two compiled train steps (core.compiler.named): on XLA:CPU
    # "cpu_threaded_dots" runs their small matmuls on every core (Eigen's dot, not
    # YNNPACK's one-thread dot): the MLP's DSM and head steps ~1.5x faster on 2 cores, the
    # same function (seeds/ocm.md); no effect off CPU. "default": the backend's own, which
    # the UNet presets keep (full, and configs/digits.py: its DSM step was no faster).
    compiler_options="cpu_threaded_dots",
)

_OVERRIDES = {
    "smoke": {
        "model.width": 64, "model.depth": 2, "model.head_hidden": 64,
        "dsm.lr": 2e-3, "dsm.warmup_steps": 50,
        "dsm.ema_decay": 0.99,
        "heads.lr": 2e-3, "heads.warmup_steps": 20, "heads.ema_decay": 0.95,
        "eval.sample_steps": (10,),
        "eval.num_nelbo": 1024, "eval.num_samples": 1024, "eval.analytic_samples": 512,
        "eval.error_samples": 1024,
        "loop.num_steps": 600, "loop.log_every": 300, "loop.checkpoint_every": 600,
        "head_loop.num_steps": 300, "head_loop.log_every": 150, "head_loop.checkpoint_every": 300,
    },
    "cpu": {},
    "full": {
        "compiler_options": "default",
        "data.name": "cifar10",
        "schedule.kind": "cosine",
        "model.kind": "unet", "model.base_channels": 128, "model.channel_mults": (1, 2, 2, 2),
        "model.head_hidden": 128,
        "dsm.batch_size": 128, "dsm.lr": 2e-4, "dsm.warmup_steps": 5000, "dsm.ema_decay": 0.9999,
        "dsm.steps_per_call": 100,
        "heads.batch_size": 128, "heads.lr": 1e-4, "heads.warmup_steps": 1000,
        "heads.ema_decay": 0.9999,
        "heads.steps_per_call": 100,
        "eval.sample_steps": (10, 25, 50), "eval.quality_steps": (10, 25, 50),
        "eval.methods": ("beta_tilde", "beta", "analytic", "sn", "npr", "ocm"),
        "eval.num_nelbo": 10000, "eval.num_samples": 10000, "eval.analytic_samples": 5000,
        "eval.error_timesteps": (), "eval.clip_x0": 1.0,
        "loop.num_steps": 800000, "loop.log_every": 1000, "loop.checkpoint_every": 10000,
        "head_loop.num_steps": 150000, "head_loop.log_every": 1000,
        "head_loop.checkpoint_every": 10000,
    },
}


def _loop(group: str) -> dict[str, C.Constraint]:
  return {f"{group}.num_steps": C.at_least(0), f"{group}.log_every": C.at_least(1),
          f"{group}.checkpoint_every": C.at_least(1)}


def _optim(group: str) -> dict[str, C.Constraint]:
  return {f"{group}.batch_size": C.at_least(1), f"{group}.lr": C.positive(),
          f"{group}.warmup_steps": C.at_least(0), f"{group}.steps_per_call": C.at_least(1),
          f"{group}.ema_decay": C.in_range(0.0, 1.0, high_open=True)}


# What every key allows, checked when a config is built and again by ``train.run`` and the
# launcher (after command-line overrides), before anything compiles.
CONSTRAINTS = {
    "seed": C.at_least(0),
    "compiler_options": C.one_of("default", "cpu_threaded_dots"),
    "data.name": C.one_of("ring2d", "gmm", "gmm16", "cifar10", "digits"),
    "data.path": C.existing_file(),
    "data.num_modes": C.at_least(1), "data.std": C.positive(), "data.dim": C.at_least(1),
    "schedule.kind": C.one_of("linear", "cosine"), "schedule.num_steps": C.at_least(2),
    "model.kind": C.one_of("mlp", "unet"), "model.width": C.at_least(1),
    "model.depth": C.at_least(1), "model.head_hidden": C.at_least(1),
    "model.head_depth": C.at_least(1),
    **_optim("dsm"), "dsm.grad_clip": C.positive(),
    **_optim("heads"), "heads.num_probes": C.at_least(1),
    "heads.names": C.each(C.one_of("ocm", "sn", "npr")),
    "heads.param": C.one_of("linear", "exp", "softplus"),
    "heads.loss": C.one_of("mse", "rmse", "nll"),
    "eval.sample_steps": C.each(C.at_least(1)), "eval.eta": C.in_range(0.0, 1.0),
    "eval.num_nelbo": C.at_least(1), "eval.num_samples": C.at_least(1),
    "eval.jacobian_points": C.at_least(1),
    "eval.decoder": C.one_of("official", "method"),
    **_loop("loop"), **_loop("head_loop"),
}


def get_config(preset: str = "smoke"):
  """The OCM config of ``preset`` (smoke | cpu | full)."""
  return make_config(preset, _BASE, _OVERRIDES, constraints=CONSTRAINTS)
