"""Networks: eps backbones that also return their last features, and the covariance heads.

Every backbone is called as ``model.apply(params, x, t) -> (eps_hat, features)`` with x
[B, ...] and integer t [B], or t [1] for a time shared by the batch (the samplers' steps):
the time embedding is computed at t's shape and broadcast, so a shared t costs its MLP once
rather than once per sample. The heads read only the (frozen) features, as in the paper, and
their output layer is zero-initialised.

A frozen network's time path is a fixed function of the integer t, so the vector backbone
can hand it over as a table: :func:`time_feature_table` computes what ``MLPBackbone``
derives from t alone at every timestep once, and ``time_features=`` (rows of it gathered at
t) takes the place of that computation. OCM's head training, whose backbone never changes,
runs on it (``kernel.HeadState.time_table``).
"""

from __future__ import annotations

from collections.abc import Sequence

import flax.linen as nn
import jax
import jax.numpy as jnp

from jaxlib_papers.core import nn as core_nn

Array = jax.Array


def timestep_embedding(t: Array, dim: int, max_period: float = 10000.0) -> Array:
  """Sinusoidal embedding of integer (or real) timesteps t [B] -> [B, dim] ([sin, cos])."""
  return core_nn.timestep_embedding(t, dim, max_period)


class MLPBackbone(nn.Module):
  """Residual MLP eps network for vectors.

  x [B, D], t [B] or [1] -> (eps [B, D], features [B, W]).

  Its time features are what it computes from t alone: the time embedding and each block's
  projection of it, a tuple of ``1 + depth`` arrays [T, W] for t [T]. ``x=None`` returns
  them, and ``time_features=`` (the tuple, each [B, W] or [1, W]) is used in place of t's
  computation (t is then ignored): the same eps and features, without the time layers.
  """
  width: int = 256
  depth: int = 3
  time_embed_dim: int = 64

  @nn.compact
  def __call__(self, x: Array | None, t: Array | None, *,
               time_features: tuple[Array, ...] | None = None):
    # Layers are named as flax's automatic names would number them in this call order (the
    # parameter tree is the same whether or not the time layers run): Dense_0 / Dense_1 the
    # time MLP (outer / inner), Dense_2 the input, 3 + 3 b .. 5 + 3 b block b, then the output.
    dense = lambda i, width, **kw: core_nn.Dense(width, name=f"Dense_{i}", **kw)
    if (t if time_features is None else x) is None:
      raise ValueError("MLPBackbone needs t unless time_features are given, and x when they "
                       "are (x=None with t returns t's time features)")
    if time_features is None:
      temb = timestep_embedding(t, self.time_embed_dim)
      temb = dense(0, self.width)(core_nn.silu(dense(1, self.width)(temb)))
      # Time enters every block: the eps map changes sharply with t at small t.
      project = lambda b: dense(4 + 3 * b, self.width, use_bias=False)(temb)
      if x is None:
        return (temb, *(project(b) for b in range(self.depth)))
    elif len(time_features) != 1 + self.depth:
      raise ValueError(f"time_features must hold {1 + self.depth} arrays (the embedding and "
                       f"one per block), got {len(time_features)}")
    else:
      temb = time_features[0]
      project = lambda b: time_features[1 + b]
    h = dense(2, self.width)(x) + temb
    for b in range(self.depth):
      y = dense(3 + 3 * b, self.width)(core_nn.silu(h)) + project(b)
      h = h + dense(5 + 3 * b, self.width)(core_nn.silu(y))
    features = core_nn.silu(h)
    return dense(3 + 3 * self.depth, x.shape[-1])(features), features


def time_feature_table(model: nn.Module, params, num_steps: int) -> tuple[Array, ...] | None:
  """A backbone's time features at every integer t in [0, num_steps], or None.

  Only ``MLPBackbone`` has them (the UNet's time path is a small part of its cost); gather
  rows with :func:`gather_time_features`.

  Returns:
    ``1 + depth`` arrays [num_steps + 1, W] (MLPBackbone), else None.
  """
  if not isinstance(model, MLPBackbone):
    return None
  return model.apply(params, None, jnp.arange(num_steps + 1))


def gather_time_features(table: tuple[Array, ...], t: Array) -> tuple[Array, ...]:
  """Rows t (int [B]) of :func:`time_feature_table`: each [B, W]."""
  return tuple(a[t] for a in table)


class VectorHead(nn.Module):
  """A covariance head on backbone features [B, W] -> [B, out_dim] (zero-init output)."""
  out_dim: int
  hidden: Sequence[int] = (128, 128)

  @nn.compact
  def __call__(self, features: Array) -> Array:
    h = features
    for width in self.hidden:
      h = core_nn.silu(core_nn.Dense(width)(h))
    return core_nn.Dense(self.out_dim, kernel_init=nn.initializers.zeros)(h)


class _ResBlock(nn.Module):
  channels: int
  groups: int

  @nn.compact
  def __call__(self, x: Array, temb: Array) -> Array:
    h = core_nn.silu(nn.GroupNorm(min(self.groups, x.shape[-1]))(x))
    h = core_nn.Conv(self.channels, (3, 3))(h)
    h = h + core_nn.Dense(self.channels)(core_nn.silu(temb))[:, None, None, :]
    h = core_nn.silu(nn.GroupNorm(min(self.groups, self.channels))(h))
    h = core_nn.Conv(self.channels, (3, 3))(h)
    if x.shape[-1] != self.channels:
      x = core_nn.Conv(self.channels, (1, 1))(x)
    return x + h


class UNet(nn.Module):
  """A small DDPM-style UNet; x [B, H, W, C], t [B] or [1] -> (eps like x, features [B, H, W, ch]).

  (No attention: at the scales the suite trains it adds little, and the covariance heads
  only need the last feature map.)
  """
  base_channels: int = 64
  channel_mults: Sequence[int] = (1, 2, 2)
  blocks_per_level: int = 2
  groups: int = 8

  @nn.compact
  def __call__(self, x: Array, t: Array) -> tuple[Array, Array]:
    if x.ndim != 4:
      raise ValueError(f"UNet expects x [B, H, W, C], got shape {x.shape}")
    temb_dim = 4 * self.base_channels
    temb = timestep_embedding(t, self.base_channels)
    temb = core_nn.Dense(temb_dim)(core_nn.silu(core_nn.Dense(temb_dim)(temb)))
    h = core_nn.Conv(self.base_channels, (3, 3))(x)
    skips = [h]
    for level, mult in enumerate(self.channel_mults):
      for _ in range(self.blocks_per_level):
        h = _ResBlock(self.base_channels * mult, self.groups)(h, temb)
        skips.append(h)
      if level < len(self.channel_mults) - 1:
        h = core_nn.Conv(h.shape[-1], (3, 3), strides=(2, 2))(h)
        skips.append(h)
    h = _ResBlock(h.shape[-1], self.groups)(h, temb)
    for level, mult in reversed(list(enumerate(self.channel_mults))):
      for _ in range(self.blocks_per_level + 1):
        h = _ResBlock(self.base_channels * mult, self.groups)(
            jnp.concatenate([h, skips.pop()], axis=-1), temb)
      if level > 0:
        b, hh, ww, c = h.shape
        h = jax.image.resize(h, (b, 2 * hh, 2 * ww, c), "nearest")
        h = core_nn.Conv(c, (3, 3))(h)
    features = core_nn.silu(nn.GroupNorm(min(self.groups, h.shape[-1]))(h))
    return core_nn.Conv(x.shape[-1], (3, 3))(features), features


class ImageHead(nn.Module):
  """A convolutional covariance head on UNet features [B, H, W, ch] -> [B, H, W, C]."""
  out_channels: int = 3
  hidden: int = 64

  @nn.compact
  def __call__(self, features: Array) -> Array:
    h = core_nn.silu(core_nn.Conv(self.hidden, (3, 3))(features))
    return core_nn.Conv(self.out_channels, (3, 3), kernel_init=nn.initializers.zeros)(h)


def make_backbone(kind: str, **kwargs) -> nn.Module:
  if kind == "mlp":
    return MLPBackbone(**kwargs)
  if kind == "unet":
    return UNet(**kwargs)
  raise ValueError(f"backbone kind must be 'mlp' or 'unet', got {kind!r}")


def make_head(kind: str, out_dim: int, **kwargs) -> nn.Module:
  if kind == "mlp":
    return VectorHead(out_dim=out_dim, **kwargs)
  if kind == "unet":
    return ImageHead(out_channels=out_dim, **kwargs)
  raise ValueError(f"head kind must be 'mlp' or 'unet', got {kind!r}")
