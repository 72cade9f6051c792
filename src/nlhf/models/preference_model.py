"""Pairwise preference model P(y ≻ y′ | x), antisymmetric by construction, cycles allowed.

    from nlhf.models.preference_model import PreferenceModel
    pm = PreferenceModel.from_backbone("path/to/encoder", rank=8)
    pm.prob(["Q"], ["answer A"], ["answer B"])     # P(A ≻ B | Q), shape (1,)

Each (prompt, response) is encoded once into a pooled embedding h, from which a scalar
r = wᵀh and a vector v = U h (``rank`` dimensions) are read.  Then

    P(y ≻ y′ | x) = σ( r(x, y) − r(x, y′) + v(x, y)ᵀ A v(x, y′) ),   A = W − Wᵀ (skew-symmetric).

The logit is odd under swapping y and y′, so P(y ≻ y′) + P(y′ ≻ y) = 1 and P(y ≻ y) = ½ hold
exactly for any weights; with A = 0 it is a Bradley–Terry reward model, and A ≠ 0 expresses
intransitive (cyclic) preferences that no reward can.  The cost per comparison is one encoder
pass per response, so scoring k responses against each other costs k passes, not k².
"""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path

import torch
from safetensors.torch import load_file, save_file
from torch import nn
from transformers import AutoModel, AutoTokenizer

from nlhf.files import atomic_write_json
from nlhf.models.activations import fuse_gelu
from nlhf.models.errors import ModelError, loading
from nlhf.models.memory import into_memory
from nlhf.models.reward_model import KIND_FILE, encode_pairs, read_kind

HEADS_FILE = "preference_heads.safetensors"


def skew_bilinear(v: torch.Tensor, v_prime: torch.Tensor, W: torch.Tensor) -> torch.Tensor:
    """Row-wise vᵀ (W − Wᵀ) v′, odd under swapping v and v′."""
    A = W - W.T
    return torch.einsum("bi,ij,bj->b", v, A, v_prime)


class PreferenceModel(nn.Module):
    """A shared encoder with a reward head and a skew-symmetric interaction head."""

    def __init__(self, encoder, tokenizer, rank: int = 8, max_length: int = 256) -> None:
        super().__init__()
        hidden = encoder.config.hidden_size
        fuse_gelu(encoder)
        self.encoder = encoder
        self.tokenizer = tokenizer
        self.rank = rank
        self.max_length = max_length
        self.reward_head = nn.Linear(hidden, 1)
        self.embed_head = nn.Linear(hidden, rank, bias=False) if rank > 0 else None
        # Pooled embeddings of different responses share a large common part; the cyclic term
        # vᵀAv′ only sees what differs, so v is centred and scaled per dimension (running
        # statistics at evaluation). The same map is applied to both sides: still antisymmetric.
        self.embed_norm = nn.BatchNorm1d(rank, affine=False) if rank > 0 else None
        # A starts at 0: the model starts as a Bradley–Terry model and grows its cyclic part
        # from the data (a random start added noise that cost 28 points of IMDB accuracy).
        self.W = nn.Parameter(torch.zeros(rank, rank)) if rank > 0 else None

    @classmethod
    def from_backbone(
        cls, name_or_path: str, rank: int = 8, max_length: int = 256
    ) -> PreferenceModel:
        with loading(name_or_path, "an encoder backbone"):
            encoder = AutoModel.from_pretrained(name_or_path)
            tokenizer = AutoTokenizer.from_pretrained(name_or_path)
        if tokenizer.pad_token is None:
            tokenizer.pad_token = tokenizer.eos_token
        return cls(into_memory(encoder), tokenizer, rank, max_length)

    @property
    def device(self) -> torch.device:
        return self.reward_head.weight.device

    def embed(self, input_ids, attention_mask, token_type_ids=None):
        """Mean-pooled encoder states → (r, v): shapes (B,) and (B, rank) (or None)."""
        kwargs = {} if token_type_ids is None else {"token_type_ids": token_type_ids}
        states = self.encoder(
            input_ids=input_ids, attention_mask=attention_mask, **kwargs
        ).last_hidden_state
        weights = attention_mask.unsqueeze(-1).to(states.dtype)
        pooled = ((states * weights).sum(1) / weights.sum(1).clamp(min=1.0)).float()
        r = self.reward_head(pooled)[:, 0]
        v = self.embed_norm(self.embed_head(pooled)) if self.embed_head is not None else None
        return r, v

    def encode(self, prompts: Sequence[str], responses: Sequence[str]):
        batch = encode_pairs(self.tokenizer, prompts, responses, self.max_length).to(self.device)
        return self.embed(**batch)

    def logit_from_embeddings(self, r_a, v_a, r_b, v_b) -> torch.Tensor:
        logit = r_a - r_b
        if self.W is not None:
            logit = logit + skew_bilinear(v_a, v_b, self.W)
        return logit

    def logit(
        self, prompts: Sequence[str], responses_a: Sequence[str], responses_b: Sequence[str]
    ) -> torch.Tensor:
        """log-odds of P(a ≻ b | prompt); both sides encoded in one batch."""
        n = len(prompts)
        r, v = self.encode(list(prompts) * 2, list(responses_a) + list(responses_b))
        v_a, v_b = (None, None) if v is None else (v[:n], v[n:])
        return self.logit_from_embeddings(r[:n], v_a, r[n:], v_b)

    def prob(self, prompts, responses_a, responses_b) -> torch.Tensor:
        return torch.sigmoid(self.logit(prompts, responses_a, responses_b))

    def save(self, folder: str | Path) -> Path:
        folder = Path(folder)
        self.encoder.save_pretrained(folder)
        self.tokenizer.save_pretrained(folder)
        heads = {
            k: v.detach().cpu().contiguous()
            for k, v in self.state_dict().items()
            if not k.startswith("encoder.")
        }
        save_file(heads, str(folder / HEADS_FILE))
        meta = {"kind": "preference-model", "rank": self.rank, "max_length": self.max_length}
        atomic_write_json(folder / KIND_FILE, meta)
        return folder

    @classmethod
    def load(cls, folder: str | Path) -> PreferenceModel:
        meta = read_kind(folder)
        if meta.get("kind") != "preference-model":
            raise ValueError(f"{folder}: holds a {meta.get('kind')!r}, not a preference model")
        with loading(folder, "a preference model"):
            encoder = AutoModel.from_pretrained(folder)
            tokenizer = AutoTokenizer.from_pretrained(folder)
            heads = load_file(str(Path(folder) / HEADS_FILE))
        model = cls(into_memory(encoder), tokenizer, meta["rank"], meta["max_length"])
        missing, unexpected = model.load_state_dict(heads, strict=False)
        if unexpected or any(not k.startswith("encoder.") for k in missing):
            raise ModelError(f"{folder}: preference heads do not match (missing {missing})")
        return model
