"""CP-Fuse configs: ``get_config(preset)`` for ``smoke`` | ``cpu`` | ``full``.

One ``core.train_loop`` run trains ``2 * train.num_pairs`` causal LMs at once (model 2k + i
of pair k on corpus i), then every decoding rule is evaluated on every protected prompt.

* smoke: a tiny benchmark and model, seconds (tests, CI, the Colab demo).
* cpu: the reproduction size (the claims of ``reproduce.py``), minutes on two cores.
* full: a larger model and benchmark and three pairs, for a GPU/TPU.
"""

from __future__ import annotations

from jaxlib_papers.core import config as C
from jaxlib_papers.core.config import make_config

_BASE = dict(
    seed=0,
    data=dict(
        num_corpus_sentences=4000,   # ordinary grammar sentences per corpus
        num_heldout_sentences=500,
        num_protected=16,            # private protected passages per corpus
        prefix_len=16,               # prompt tokens of a passage
        continuation_len=48,         # tokens to reproduce (or not)
        separation_n=8,              # asserted: no shared n-gram across corpora
        zipf=0.0,                    # within-class word weights (k + 1)^-zipf; 0 = uniform
        seed=0,                      # the benchmark's seed (each corpus spawns its own)
    ),
    model=dict(d_model=64, num_layers=2, num_heads=4, mlp_dim=256),
    train=dict(
        num_pairs=1,                 # pairs of models trained in the same program
        batch_size=16,               # rows per model per step
        protect_prob=0.3,            # share of rows that are protected passages
        lr=3e-3, warmup_steps=100, weight_decay=0.0, grad_clip=1.0,
        steps_per_call=1,            # optimiser steps per compiled call (one lax.scan)
    ),
    fusion=dict(
        grid_size=10,                # official grid: linspace(0, 2, grid_size)[:-1] + 2..10
        bisection_iterations=40,     # exact solver
        cp_delta_coef=0.5,           # CP-Delta: (c, 1 - c)
        memfree_n=6,                 # MemFree: block protected n-grams of this length
    ),
    eval=dict(
        num_heldout=64,              # held-out windows for perplexity
        free_seeds=2,                # sampled free generations: seeds x prompts
        temperature=1.0,             # free generations
        infringement_tokens=16,      # a generation "infringes" above this token LCS
        infringement_chars=160,      # the paper's threshold (characters)
        seed=1,
    ),
    # num_steps, log_every, checkpoint_every: optimiser steps (multiples of steps_per_call)
    loop=dict(num_steps=2000, log_every=250, checkpoint_every=1000, quiet=False),
)

_OVERRIDES = {
    "smoke": {
        "data.num_corpus_sentences": 300, "data.num_heldout_sentences": 120,
        "data.num_protected": 4, "data.prefix_len": 8, "data.continuation_len": 16,
        "model.d_model": 32, "model.num_layers": 1, "model.num_heads": 2,
        "model.mlp_dim": 64,
        "train.protect_prob": 0.5, "train.warmup_steps": 10,
        "eval.num_heldout": 8, "eval.free_seeds": 1, "eval.infringement_tokens": 8,
        "loop.num_steps": 60, "loop.log_every": 30, "loop.checkpoint_every": 60,
    },
    "cpu": {},
    "full": {
        "data.num_corpus_sentences": 40000, "data.num_protected": 256,
        "data.continuation_len": 112,
        "model.d_model": 256, "model.num_layers": 4, "model.num_heads": 8,
        "model.mlp_dim": 1024,
        "train.num_pairs": 3, "train.batch_size": 64, "train.lr": 1e-3,
        "train.warmup_steps": 500,
        "eval.num_heldout": 512, "eval.free_seeds": 4, "eval.infringement_tokens": 32,
        "loop.num_steps": 20000, "loop.log_every": 200, "loop.checkpoint_every": 2000,
    },
}


# What every key allows, checked when a config is built and again by ``train.run`` and the
# launcher (after command-line overrides), before anything compiles.
CONSTRAINTS = {
    "seed": C.at_least(0),
    **{f"data.{k}": C.at_least(1) for k in (
        "num_corpus_sentences", "num_heldout_sentences", "num_protected", "prefix_len",
        "continuation_len", "separation_n")},
    "data.zipf": C.non_negative(),
    **{f"model.{k}": C.at_least(1) for k in ("d_model", "num_layers", "num_heads", "mlp_dim")},
    "train.num_pairs": C.at_least(1), "train.batch_size": C.at_least(1),
    "train.protect_prob": C.in_range(0.0, 1.0), "train.lr": C.positive(),
    "train.warmup_steps": C.at_least(0), "train.weight_decay": C.non_negative(),
    "train.grad_clip": C.positive(), "train.steps_per_call": C.at_least(1),
    "fusion.grid_size": C.at_least(2), "fusion.bisection_iterations": C.at_least(1),
    "fusion.cp_delta_coef": C.in_range(0.0, 1.0), "fusion.memfree_n": C.at_least(1),
    "eval.num_heldout": C.at_least(1), "eval.free_seeds": C.at_least(1),
    "eval.temperature": C.positive(), "eval.infringement_tokens": C.at_least(1),
    "loop.num_steps": C.at_least(1), "loop.log_every": C.at_least(1),
    "loop.checkpoint_every": C.at_least(1),
}


def get_config(preset: str = "smoke"):
  """The CP-Fuse config of ``preset`` (smoke | cpu | full)."""
  return make_config(preset, _BASE, _OVERRIDES, constraints=CONSTRAINTS)
