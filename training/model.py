"""The cross-encoder as PyTorch trains it: all-MiniLM-L6-v2's BERT encoder, low-rank adapters, one head per task.

The forward pass is the same arithmetic as the numpy engine that read it (commit 8c2b583, ``_encoder.py``):
post-layer-norm BERT, GELU in its tanh form, the [CLS] state into a linear head per task. Only the adapters
(``A``, ``B`` of every linear layer), the layer norms and the heads are trained; the base weights stay frozen, so
what ships is small and is merged into the base at load time (W + B @ A * scale).
"""

from __future__ import annotations

import math

import torch
from torch import nn

TASKS = ("relevance", "answer", "support")  # question alone; question + reference or output; statement


class LoRALinear(nn.Module):
    def __init__(self, weight: torch.Tensor, bias: torch.Tensor, rank: int, alpha: float) -> None:
        super().__init__()
        out_f, in_f = weight.shape
        self.weight = nn.Parameter(weight.clone(), requires_grad=False)
        self.bias = nn.Parameter(bias.clone())
        self.A = nn.Parameter(torch.empty(rank, in_f))
        self.B = nn.Parameter(torch.zeros(out_f, rank))
        nn.init.kaiming_uniform_(self.A, a=math.sqrt(5))
        self.scale = alpha / rank

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return nn.functional.linear(x, self.weight, self.bias) + (x @ self.A.t() @ self.B.t()) * self.scale

    def merged(self) -> torch.Tensor:
        return self.weight + (self.B @ self.A) * self.scale


class CrossEncoder(nn.Module):
    def __init__(self, base: dict[str, torch.Tensor], layers: int = 6, heads: int = 12, rank: int = 16,
                 alpha: float = 32.0, eps: float = 1e-12, dropout: float = 0.1) -> None:
        super().__init__()
        g = lambda k: base[k].float()  # noqa: E731
        self.word = nn.Parameter(g("embeddings.word_embeddings.weight"), requires_grad=False)
        self.pos = nn.Parameter(g("embeddings.position_embeddings.weight"), requires_grad=False)
        self.typ = nn.Parameter(g("embeddings.token_type_embeddings.weight"), requires_grad=False)
        H = self.word.shape[1]
        self.H, self.NH, self.eps = H, heads, eps
        self.eln = nn.LayerNorm(H, eps=eps)
        self.eln.weight.data, self.eln.bias.data = g("embeddings.LayerNorm.weight"), g("embeddings.LayerNorm.bias")
        self.layers = nn.ModuleList()
        for i in range(layers):
            p = f"encoder.layer.{i}."
            m = nn.Module()
            for name, key in (("q", "attention.self.query"), ("k", "attention.self.key"),
                              ("v", "attention.self.value"), ("o", "attention.output.dense"),
                              ("fi", "intermediate.dense"), ("fo", "output.dense")):
                setattr(m, name, LoRALinear(g(p + key + ".weight"), g(p + key + ".bias"), rank, alpha))
            m.ln1 = nn.LayerNorm(H, eps=eps)
            m.ln1.weight.data, m.ln1.bias.data = g(p + "attention.output.LayerNorm.weight"), \
                g(p + "attention.output.LayerNorm.bias")
            m.ln2 = nn.LayerNorm(H, eps=eps)
            m.ln2.weight.data, m.ln2.bias.data = g(p + "output.LayerNorm.weight"), g(p + "output.LayerNorm.bias")
            self.layers.append(m)
        self.heads = nn.Linear(H, len(TASKS))
        nn.init.normal_(self.heads.weight, std=0.02)
        nn.init.zeros_(self.heads.bias)
        self.drop = nn.Dropout(dropout)

    def forward(self, ids: torch.Tensor, types: torch.Tensor, mask: torch.Tensor) -> torch.Tensor:
        """Logits, shape (batch, len(TASKS))."""
        B, L = ids.shape
        x = self.word[ids] + self.pos[:L][None] + self.typ[types]
        x = self.drop(self.eln(x))
        bias = (~mask)[:, None, None, :].float() * -1e9
        hd = self.H // self.NH
        for m in self.layers:
            q = m.q(x).view(B, L, self.NH, hd).transpose(1, 2)
            k = m.k(x).view(B, L, self.NH, hd).transpose(1, 2)
            v = m.v(x).view(B, L, self.NH, hd).transpose(1, 2)
            att = (q @ k.transpose(-1, -2)) / math.sqrt(hd) + bias
            att = self.drop(att.softmax(-1))
            ctx = (att @ v).transpose(1, 2).reshape(B, L, self.H)
            x = m.ln1(x + self.drop(m.o(ctx)))
            h = nn.functional.gelu(m.fi(x), approximate="tanh")
            x = m.ln2(x + self.drop(m.fo(h)))
        return self.heads(self.drop(x[:, 0]))

    def trainable(self) -> list[nn.Parameter]:
        return [p for p in self.parameters() if p.requires_grad]

    def export(self) -> dict[str, torch.Tensor]:
        """What ships: the adapters, biases and layer norms (the trained parameters) and the heads."""
        out = {"eln.w": self.eln.weight, "eln.b": self.eln.bias, "heads.w": self.heads.weight,
               "heads.b": self.heads.bias}
        for i, m in enumerate(self.layers):
            for name in ("q", "k", "v", "o", "fi", "fo"):
                lin = getattr(m, name)
                out[f"l{i}.{name}.A"] = lin.A * lin.scale
                out[f"l{i}.{name}.B"] = lin.B
                out[f"l{i}.{name}.b"] = lin.bias
            out[f"l{i}.ln1.w"], out[f"l{i}.ln1.b"] = m.ln1.weight, m.ln1.bias
            out[f"l{i}.ln2.w"], out[f"l{i}.ln2.b"] = m.ln2.weight, m.ln2.bias
        return {k: v.detach().float().cpu().contiguous() for k, v in out.items()}
