"""Networks: eps backbones that also return their last features, and the covariance heads.

Every backbone is called as ``model.apply(params, x, t) -> (eps_hat, features)`` with x
[B, ...] and integer t [B], or t [1] for a time shared by the batch (the samplers' steps):
the time embedding is computed at t's shape and broadcast, so a shared t costs its MLP once
rather than once per sample. The heads read only the (frozen) features, as in the paper, and
their output layer is zero-initialised.
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
  """
  width: int = 256
  depth: int = 3
  time_embed_dim: int = 64

  @nn.compact
  def __call__(self, x: Array, t: Array) -> tuple[Array, Array]:
    temb = timestep_embedding(t, self.time_embed_dim)
    temb = core_nn.Dense(self.width)(nn.silu(core_nn.Dense(self.width)(temb)))
    h = core_nn.Dense(self.width)(x) + temb
    for _ in range(self.depth):
      # Time enters every block: the eps map changes sharply with t at small t.
      y = core_nn.Dense(self.width)(nn.silu(h)) + core_nn.Dense(self.width, use_bias=False)(temb)
      h = h + core_nn.Dense(self.width)(nn.silu(y))
    features = nn.silu(h)
    return core_nn.Dense(x.shape[-1])(features), features


class VectorHead(nn.Module):
  """A covariance head on backbone features [B, W] -> [B, out_dim] (zero-init output)."""
  out_dim: int
  hidden: Sequence[int] = (128, 128)

  @nn.compact
  def __call__(self, features: Array) -> Array:
    h = features
    for width in self.hidden:
      h = nn.silu(core_nn.Dense(width)(h))
    return core_nn.Dense(self.out_dim, kernel_init=nn.initializers.zeros)(h)


class _ResBlock(nn.Module):
  channels: int
  groups: int

  @nn.compact
  def __call__(self, x: Array, temb: Array) -> Array:
    h = core_nn.Conv(self.channels, (3, 3))(nn.silu(nn.GroupNorm(min(self.groups, x.shape[-1]))(x)))
    h = h + core_nn.Dense(self.channels)(nn.silu(temb))[:, None, None, :]
    h = nn.silu(nn.GroupNorm(min(self.groups, self.channels))(h))
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
    temb = core_nn.Dense(temb_dim)(nn.silu(core_nn.Dense(temb_dim)(temb)))
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
    features = nn.silu(nn.GroupNorm(min(self.groups, h.shape[-1]))(h))
    return core_nn.Conv(x.shape[-1], (3, 3))(features), features


class ImageHead(nn.Module):
  """A convolutional covariance head on UNet features [B, H, W, ch] -> [B, H, W, C]."""
  out_channels: int = 3
  hidden: int = 64

  @nn.compact
  def __call__(self, features: Array) -> Array:
    h = nn.silu(core_nn.Conv(self.hidden, (3, 3))(features))
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
