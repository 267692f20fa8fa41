"""A small text encoder without transformers: token ids and an attention mask in, one vector per
sequence out. Small enough for tests of token inputs, keyword binding and flexible sequence lengths.
"""

from __future__ import annotations

import torch
from torch import nn


class TinyText(nn.Module):
    def __init__(self, vocab_size: int = 100, width: int = 32, heads: int = 2, classes: int = 4) -> None:
        super().__init__()
        self.vocab_size = vocab_size
        self.embed = nn.Embedding(vocab_size, width)
        self.attention = nn.MultiheadAttention(width, heads, batch_first=True)
        self.norm = nn.LayerNorm(width)
        self.head = nn.Linear(width, classes)

    def forward(self, input_ids: torch.Tensor, attention_mask: torch.Tensor) -> dict[str, torch.Tensor]:
        x = self.embed(input_ids)
        bias = (1.0 - attention_mask[:, None, :].float()) * -1e4  # padded keys get no weight
        bias = bias.expand(-1, input_ids.shape[1], -1).repeat_interleave(self.attention.num_heads, dim=0)
        attended, _ = self.attention(x, x, x, attn_mask=bias, need_weights=False)
        hidden = self.norm(x + attended)
        weights = attention_mask.float().unsqueeze(-1)
        pooled = (hidden * weights).sum(1) / weights.sum(1).clamp(min=1.0)
        return {"logits": self.head(pooled), "hidden": hidden}
