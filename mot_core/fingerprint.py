"""Model fingerprints: a cache may only ever be loaded into the exact model that made it.

A fingerprint combines three hashes, any change to which changes the cache space:
the architecture (the structural config), the weights (every tensor's name, dtype, shape and
bytes) and the tokenizer (its full serialisation and special tokens).
"""

from __future__ import annotations

import hashlib
import json
from dataclasses import asdict, dataclass

import torch

# Config keys that describe how a model was saved or run, not what it computes.
_VOLATILE_CONFIG_KEYS = {
    "transformers_version",
    "dtype",
    "torch_dtype",
    "_name_or_path",
    "quantization_config",
    "architectures",
    "use_cache",
    "_attn_implementation_autoset",
    "output_attentions",
    "output_hidden_states",
    "return_dict",
    "_commit_hash",
}


@dataclass(frozen=True)
class ModelFingerprint:
    model_type: str
    architecture: str
    weights: str
    tokenizer: str

    @property
    def id(self) -> str:
        """Short stable identifier, e.g. ``llama-3f2a...`` (what caches and Redis keys carry)."""
        combined = hashlib.sha256(f"{self.architecture}:{self.weights}:{self.tokenizer}".encode()).hexdigest()
        return f"{self.model_type}-{combined[:32]}"

    def to_dict(self) -> dict[str, str]:
        return {**asdict(self), "id": self.id}

    @classmethod
    def from_dict(cls, data: dict[str, str]) -> ModelFingerprint:
        return cls(data["model_type"], data["architecture"], data["weights"], data["tokenizer"])


def architecture_hash(config) -> str:
    structural = {k: v for k, v in config.to_dict().items() if k not in _VOLATILE_CONFIG_KEYS}
    return hashlib.sha256(json.dumps(structural, sort_keys=True, default=str).encode()).hexdigest()


def weights_hash(model: torch.nn.Module) -> str:
    digest = hashlib.sha256()
    for name, tensor in sorted(model.state_dict().items()):
        t = tensor.detach().to("cpu").contiguous()
        digest.update(f"{name}|{t.dtype}|{tuple(t.shape)}|".encode())
        digest.update(t.view(torch.uint8).numpy().data if t.numel() else b"")
    return digest.hexdigest()


def tokenizer_hash(tokenizer) -> str:
    backend = getattr(tokenizer, "backend_tokenizer", None)
    serialised = backend.to_str() if backend is not None else json.dumps(tokenizer.get_vocab(), sort_keys=True)
    specials = json.dumps(tokenizer.special_tokens_map, sort_keys=True, default=str)
    return hashlib.sha256(f"{serialised}\n{specials}".encode()).hexdigest()


def fingerprint_model(model: torch.nn.Module, tokenizer) -> ModelFingerprint:
    return ModelFingerprint(
        model_type=model.config.model_type,
        architecture=architecture_hash(model.config),
        weights=weights_hash(model),
        tokenizer=tokenizer_hash(tokenizer),
    )
