"""One loader for every way a user names a model: zoo name, local directory, or Hugging Face id."""

from __future__ import annotations

import logging
from dataclasses import dataclass
from pathlib import Path

import torch

from mot_core.arch import ArchSpec, arch_spec
from mot_core.errors import UnknownModelError
from mot_core.fingerprint import ModelFingerprint, fingerprint_model
from mot_core.zoo import ZOO, is_pulled, model_dir, read_card

log = logging.getLogger(__name__)


@dataclass
class LoadedModel:
    name: str
    model: torch.nn.Module
    tokenizer: object
    spec: ArchSpec
    fingerprint: ModelFingerprint

    @property
    def device(self) -> torch.device:
        return next(self.model.parameters()).device


def resolve(name_or_path: str) -> str:
    """Map a user-given model name to something ``from_pretrained`` accepts."""
    if name_or_path in ZOO:
        if not is_pulled(name_or_path):
            raise UnknownModelError(
                f"zoo model {name_or_path!r} is not pulled yet; run: mot models pull {name_or_path}"
            )
        return str(model_dir(name_or_path))
    if Path(name_or_path).expanduser().is_dir():
        return str(Path(name_or_path).expanduser())
    if Path(name_or_path).expanduser().exists():
        raise UnknownModelError(f"{name_or_path!r} is a file; give a model directory, a zoo name or a HF id")
    return name_or_path  # a Hugging Face hub id (needs hub access)


def load_model(
    name_or_path: str, *, device: str | torch.device = "cpu", dtype: torch.dtype = torch.float32
) -> LoadedModel:
    from transformers import AutoModelForCausalLM, AutoTokenizer

    location = resolve(name_or_path)
    try:
        tokenizer = AutoTokenizer.from_pretrained(location)
        model = AutoModelForCausalLM.from_pretrained(location, dtype=dtype)
    except (OSError, ValueError) as exc:
        known = ", ".join(ZOO)
        raise UnknownModelError(
            f"cannot load model {name_or_path!r} (zoo names: {known}; or a local directory / HF id): "
            f"{str(exc).splitlines()[0]}"
        ) from None
    model.to(device).eval()
    card = read_card(Path(location)) if Path(location).is_dir() else None
    if card is not None and dtype == torch.float32 and "fingerprint" in card:
        fingerprint = ModelFingerprint.from_dict(card["fingerprint"])
    else:
        fingerprint = fingerprint_model(model, tokenizer)
    log.info("loaded %s (%s) fingerprint %s", name_or_path, model.config.model_type, fingerprint.id)
    return LoadedModel(name_or_path, model, tokenizer, arch_spec(model.config, tokenizer), fingerprint)


@dataclass
class FirstLayer:
    """A model's embedding and layer 0 only: what its layer-0 keys/values of any token need
    (``cache_ops.first_layer_kv``), for a translator that reads them, without the rest of the weights."""

    name: str
    model: torch.nn.Module  # the model's own class, cut to one decoder layer
    spec: ArchSpec  # of the whole model

    @property
    def device(self) -> torch.device:
        return next(self.model.parameters()).device


def load_first_layer(name_or_path: str, *, device: str | torch.device = "cpu") -> FirstLayer:
    """The model's own class and weights, built with one decoder layer (the others are never read)."""
    return load_model_meta(name_or_path, first_layer=True, device=device).first_layer


@dataclass
class ModelMeta:
    """A model without its weights: enough to tokenise, align and assemble caches for it (and, for a
    translator that reads them, its layer 0: ``first_layer``)."""

    name: str
    tokenizer: object
    spec: ArchSpec
    first_layer: FirstLayer | None = None


def load_model_meta(name_or_path: str, *, first_layer: bool = False, device: str | torch.device = "cpu") -> ModelMeta:
    from transformers import AutoConfig, AutoModelForCausalLM, AutoTokenizer

    location = resolve(name_or_path)
    try:
        tokenizer = AutoTokenizer.from_pretrained(location)
        config = AutoConfig.from_pretrained(location)
        spec = arch_spec(config, tokenizer)
        layer0 = None
        if first_layer:
            cut = {"num_hidden_layers": 1}
            if getattr(config, "layer_types", None):
                cut["layer_types"] = config.layer_types[:1]
            report = logging.getLogger("transformers.modeling_utils")
            level = report.level
            report.setLevel(logging.ERROR)  # its warning would list every weight of the layers left out
            try:
                model = AutoModelForCausalLM.from_pretrained(location, dtype=torch.float32, **cut)
            finally:
                report.setLevel(level)
            layer0 = FirstLayer(name_or_path, model.to(device).eval(), spec)
            log.info("loaded %s: embedding and layer 0 only", name_or_path)
    except (OSError, ValueError) as exc:
        raise UnknownModelError(f"cannot load model {name_or_path!r}: {str(exc).splitlines()[0]}") from None
    return ModelMeta(name_or_path, tokenizer, spec, layer0)
