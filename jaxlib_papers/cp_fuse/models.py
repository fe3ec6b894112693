"""A small pre-LN causal transformer language model (flax linen)."""

from __future__ import annotations

import flax.linen as nn
import jax
import jax.numpy as jnp

from jaxlib_papers.core import nn as core_nn
from jaxlib_papers.core import prng


class Block(nn.Module):
  """Pre-LN block: x + attn(LN x), then x + mlp(LN x). ``x: [B, T, d]``."""

  num_heads: int
  mlp_dim: int

  @nn.compact
  def __call__(self, x: jax.Array, mask: jax.Array) -> jax.Array:
    h = nn.LayerNorm()(x)
    h = nn.MultiHeadDotProductAttention(num_heads=self.num_heads,
                                         kernel_init=prng.lecun_normal())(h, h, mask=mask)
    x = x + h
    h = nn.LayerNorm()(x)
    h = core_nn.Dense(self.mlp_dim)(h)
    h = core_nn.Dense(x.shape[-1])(nn.gelu(h))
    return x + h


class CausalLM(nn.Module):
  """``tokens: [B, T] int32 -> logits [B, T, vocab]`` (position t predicts token t + 1).

  Attributes:
    vocab_size: V.
    d_model: width d.
    num_layers, num_heads, mlp_dim: block sizes.
    max_len: the longest T (learned position embeddings).
  """

  vocab_size: int
  d_model: int = 64
  num_layers: int = 2
  num_heads: int = 4
  mlp_dim: int = 256
  max_len: int = 64

  @nn.compact
  def __call__(self, tokens: jax.Array) -> jax.Array:
    length = tokens.shape[-1]
    if length > self.max_len:
      raise ValueError(f"tokens has length {length} > max_len={self.max_len}")
    x = nn.Embed(self.vocab_size, self.d_model)(tokens)
    pos = self.param("pos_embed", nn.initializers.normal(0.02), (self.max_len, self.d_model))
    x = x + pos[:length]
    mask = nn.make_causal_mask(jnp.ones(tokens.shape, bool))
    for _ in range(self.num_layers):
      x = Block(self.num_heads, self.mlp_dim)(x, mask)
    x = nn.LayerNorm()(x)
    return core_nn.Dense(self.vocab_size)(x)
