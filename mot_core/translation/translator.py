"""What every translator shares: the translate pipeline, its card, and safe save/load.

A translator is an ``nn.Module`` that maps aligned source rows ``[T_t, L_s, F_s]`` to target
rows ``[T_t, L_t, F_t]`` (``predict_rows``). Around that, ``translate`` does what does not
depend on the translator kind: causal span alignment of the two tokenisations, un-rotating the
source keys, leaving the last ``native_tail`` context tokens for the target to compute itself, and
re-rotating with the target's per-layer RoPE. Position 0 is predicted too, but the target replaces
it with its own before use (``recompute.blend`` at an operating point, one more recomputed row;
``cache_ops.replace_head`` without one, one token of compute). Weights are saved
as safetensors next to a JSON card; nothing is ever unpickled.
"""

from __future__ import annotations

import hashlib
import importlib
import inspect
import json
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any, ClassVar

import torch
from safetensors import safe_open
from safetensors.torch import load_file
from safetensors.torch import save as serialised
from torch import nn

from mot_core.alignment import Alignment, align
from mot_core.arch import ArchSpec
from mot_core.codec import quantise_int8
from mot_core.errors import FingerprintMismatchError, MotError
from mot_core.kv_cache import PER_TOKEN, KVCache
from mot_core.loading import FirstLayer, LoadedModel
from mot_core.translation.assemble import rows_to_cache
from mot_core.translation.features import align_rows, first_layer_rows, kv_rows
from mot_core.translation.recompute import DEFAULT_SELECTION, OperatingPoint

WEIGHTS_FILE = "translator.safetensors"
CARD_FILE = "card.json"
INT8_SCALE = ".int8_scale"  # suffix of the per-channel scales of an int8-stored tensor
INT8_MIN_ELEMENTS = 1 << 16  # smaller tensors stay float32 in int8 checkpoints


@dataclass
class TranslatorCard:
    kind: str
    source_model: str
    target_model: str
    source_fingerprint: str
    target_fingerprint: str
    native_tail: int = 0
    # the shipped operating point of the quality knob: fraction of context tokens the target
    # recomputes itself (recompute.blend); None: pure translation
    recompute_fraction: float | None = None
    # of that fraction, the share of the context taken from its end (the tokens a continuation leans
    # on most) rather than by the selection; see recompute.select_positions
    recompute_recent: float = 0.0
    # how the rest of the fraction is chosen (recompute.SELECTIONS); cards written before the
    # choice existed were measured with the default
    recompute_selection: str = DEFAULT_SELECTION
    # of that fraction, the share the context's last tokens read most when the source read it
    # (KVCache.tail_attention, recompute.most_attended)
    recompute_attended: float = 0.0
    config: dict[str, Any] = field(default_factory=dict)  # constructor arguments of the module
    recipe: dict[str, Any] = field(default_factory=dict)  # how it was trained (data, steps, seed, ...)
    metrics: dict[str, Any] = field(default_factory=dict)  # measured on held-out data only
    version: str = ""  # content hash of the weights and config, filled in by save()

    def __post_init__(self) -> None:
        try:
            _ = self.operating_point  # raises ValueError on shares that do not fit
        except ValueError as e:
            raise MotError(
                f"translator card {self.source_model}->{self.target_model}: its operating point (recompute_fraction, "
                f"recompute_selection, recompute_recent, recompute_attended): {e}"
            ) from None

    @property
    def operating_point(self) -> OperatingPoint | None:
        """What the target recomputes itself over this translator's cache (None: pure translation)."""
        if self.recompute_fraction is None:
            return None
        return OperatingPoint(
            self.recompute_fraction, self.recompute_selection, self.recompute_recent, self.recompute_attended
        )

    @classmethod
    def for_pair(cls, kind: str, source, target, native_tail: int, **config) -> TranslatorCard:
        """A card for ``source -> target`` (loaded models); ``config`` adds to the shape both share."""
        shape = dict(
            source_layers=source.spec.num_layers,
            source_width=2 * source.spec.num_kv_heads * source.spec.head_dim,
            target_layers=target.spec.num_layers,
            target_width=2 * target.spec.num_kv_heads * target.spec.head_dim,
        )
        return cls(
            kind,
            source.name,
            target.name,
            source.fingerprint.id,
            target.fingerprint.id,
            native_tail,
            config={**shape, **config},
        )


def source_notes(source_cache: KVCache, alignment: Alignment) -> dict[str, torch.Tensor | None]:
    """The source prefill's per-token notes (``prefill(for_targets=True)``: surprisal, tail attention)
    at each target token: the largest over the source tokens it overlaps, so a target token that
    shares a character with a surprising or much-read source token is one too."""
    return {
        name: None if getattr(source_cache, name) is None else alignment.overlap_max(getattr(source_cache, name)[0])
        for name in PER_TOKEN
    }


@dataclass
class TranslationResult:
    cache: KVCache  # covers target_ids[:cache.seq_len]
    target_ids: torch.Tensor  # the target's tokenisation of the whole context [1, T_t]

    @property
    def native_ids(self) -> torch.Tensor:
        """Context tokens the target must still run itself (the native tail)."""
        return self.target_ids[:, self.cache.seq_len :]


# Translator kinds and the module defining each (imported only when a checkpoint needs it).
KIND_MODULES = {"ridge": "mot_core.translation.ridge", "mixture": "mot_core.translation.mixture"}


def serving_dtype(device_type: str) -> torch.dtype:
    """The dtype a translator's matmuls serve in on ``device_type``: bfloat16 on a GPU or a CPU with
    bfloat16 matmuls (AVX-512 BF16 or AMX), float32 on any other CPU (AVX2 alone), where the
    translation then costs more of a prefill (README, "The cost column depends on the CPU")."""
    if device_type == "cuda" or (device_type == "cpu" and torch.ops.mkldnn._is_mkldnn_bf16_supported()):
        return torch.bfloat16
    return torch.float32


class CacheTranslator(nn.Module):
    kind: ClassVar[str] = ""

    def __init__(self, card: TranslatorCard) -> None:
        super().__init__()
        self.card = card

    @classmethod
    def from_card(cls, card: TranslatorCard) -> CacheTranslator:
        """An untrained module of the shape the card describes (weights are loaded after)."""
        raise NotImplementedError

    @property
    def reads_first_layer(self) -> bool:
        """Whether ``predict_rows`` needs the target's own layer-0 rows (``features.first_layer_rows``)."""
        return False

    @property
    def serves_all_positions(self) -> bool:
        """Whether serving translates every position in every layer: the card's operating point has
        the target recompute part of the context (``recompute.blend``), which reads whole windows."""
        return self.card.operating_point is not None

    def predict_rows(
        self, aligned: torch.Tensor, *, all_positions: bool = False, first_layer: torch.Tensor | None = None
    ) -> torch.Tensor:
        """Aligned source rows ``[T_t, L_s, F_s]`` -> pre-RoPE target rows ``[T_t, L_t, F_t]``.

        Sliding-window layers may skip the positions the target will not keep, unless ``all_positions``.
        ``first_layer [T_t, F_t]``: the target's layer-0 rows, for a translator that ``reads_first_layer``.
        """
        raise NotImplementedError

    def warm_up_shapes(self, up_to_tokens: int) -> int:
        """Run, ahead of any request, the matmul shapes that serving a context of up to
        ``up_to_tokens`` target tokens meets for the first time; how many row counts were run. A
        translator whose shapes cost nothing new (this one) runs none."""
        return 0

    @torch.no_grad()
    def inference_rows(
        self, aligned: torch.Tensor, *, all_positions: bool = False, first_layer: torch.Tensor | None = None
    ) -> torch.Tensor:
        """``predict_rows`` for serving, in ``serving_dtype`` (bfloat16 where the hardware has its
        matmuls: on the 2-core reference CPU, Qwen2.5's at 1024 tokens take 0.085 s against 0.291 s
        in float32; relative error ~0.3%, below the codec's bfloat16 rounding), float32 out."""
        fast = serving_dtype(aligned.device.type) == torch.bfloat16
        with torch.autocast(aligned.device.type, dtype=torch.bfloat16, enabled=fast):
            return self.predict_rows(aligned, all_positions=all_positions, first_layer=first_layer).float()

    @torch.no_grad()
    def translate(
        self,
        source_cache: KVCache,
        text: str,
        *,
        source_spec: ArchSpec,
        source_tokenizer,
        target_spec: ArchSpec,
        target_tokenizer,
        target_first_layer: FirstLayer | LoadedModel | None = None,
        all_positions: bool | None = None,
    ) -> TranslationResult:
        """Translate ``source_cache`` (of ``text``) into the target's cache space.

        ``target_first_layer``: the target (or just its layer 0, ``loading.load_first_layer``), for a
        translator that ``reads_first_layer``. With ``all_positions`` (default:
        ``serves_all_positions``), sliding layers hold every position: the target's
        recompute (``recompute.blend``) needs them and trims afterwards.
        """
        if self.reads_first_layer and target_first_layer is None:
            raise MotError(
                f"translator {self.card.source_model}->{self.card.target_model} reads the target's layer 0: "
                "pass target_first_layer (loading.load_first_layer)"
            )
        if source_cache.fingerprint != self.card.source_fingerprint:
            raise FingerprintMismatchError(
                f"translator {self.card.source_model}->{self.card.target_model} expects source "
                f"{self.card.source_fingerprint}, got a cache of {source_cache.fingerprint}"
            )
        alignment = align(source_tokenizer, target_tokenizer, text, causal=True)
        if alignment.source_ids != source_cache.token_ids[0].tolist():
            raise MotError("the source cache does not hold this text's tokens (different text or tokenizer)")
        aligned = align_rows(kv_rows(source_cache, source_spec), alignment.to_sparse())
        device = next(iter(self.state_dict().values())).device
        if all_positions is None:
            all_positions = self.serves_all_positions
        target_ids = torch.tensor([alignment.target_ids])
        keep = max(1, target_ids.shape[-1] - self.card.native_tail)
        first_layer = None
        if self.reads_first_layer:
            first_layer = first_layer_rows(target_first_layer, target_ids[:, :keep]).to(device)
        # only the cached tokens: a sliding layer's window ends at the last of them, not at the tail's end
        rows = self.inference_rows(aligned[:keep].to(device), all_positions=all_positions, first_layer=first_layer)
        rows = rows.cpu()
        cache = rows_to_cache(
            rows,
            target_spec,
            target_ids[:, :keep],
            self.card.target_fingerprint,
            all_positions=all_positions,
            **source_notes(source_cache, alignment),
        )
        return TranslationResult(cache, target_ids)

    def save(self, directory: Path, *, dtype: torch.dtype = torch.float32) -> Path:
        """Weights (safetensors) + card (JSON). ``dtype=torch.bfloat16`` halves the size for shipping,
        ``torch.int8`` quarters the large matrices (symmetric, one scale per output channel; small
        tensors stay float32). The module's own floats are rounded first, so what is saved is
        exactly what this module computes."""
        directory.mkdir(parents=True, exist_ok=True)
        tensors: dict[str, torch.Tensor] = {}
        with torch.no_grad():
            for name, tensor in self.state_dict().items():
                if not tensor.is_floating_point() or dtype == torch.float32:
                    tensors[name] = tensor
                elif dtype == torch.int8:
                    if _quantised(tensor):
                        q, scale = quantise_int8(tensor, dim=-2)
                        tensor.copy_(q * scale)
                        tensors[name], tensors[name + INT8_SCALE] = q, scale
                    else:
                        tensors[name] = tensor
                else:
                    tensor.copy_(tensor.to(dtype).to(tensor.dtype))
                    tensors[name] = tensor.to(dtype)
        tensors = {k: v.detach().contiguous().cpu() for k, v in tensors.items()}
        # the shape config too: the same weights read with another config (say the router's top_k)
        # compute something else, and the service keys translated caches by this version
        digest = hashlib.sha256(json.dumps(self.card.config, sort_keys=True).encode())
        for name in sorted(tensors):
            digest.update(name.encode())
            digest.update(tensors[name].view(torch.uint8).numpy().tobytes() if tensors[name].numel() else b"")
        self.card.version = f"{self.kind}-{digest.hexdigest()[:16]}"
        write_tensors(directory / WEIGHTS_FILE, tensors, {"kind": self.kind, "version": self.card.version})
        (directory / CARD_FILE).write_text(json.dumps(asdict(self.card), indent=2))
        return directory


def write_tensors(path: Path, tensors: dict[str, torch.Tensor], metadata: dict[str, str] | None = None) -> None:
    """Safetensors bytes written by Python, not ``save_file``: that one creates the file 0600 whatever
    the umask, which a service or a resumed training job running as another user (the image's uid 1000,
    reading a mounted volume) could not read."""
    path.write_bytes(serialised(tensors, metadata=metadata))


def load_translator(directory: Path | str, device: str | torch.device = "cpu") -> CacheTranslator:
    directory = Path(directory)
    card_path = directory / CARD_FILE
    if not card_path.is_file():
        raise MotError(f"{directory} is not a translator checkpoint (no {CARD_FILE})")
    card = TranslatorCard(**json.loads(card_path.read_text()))
    if card.kind not in KIND_MODULES:
        raise MotError(f"unknown translator kind {card.kind!r}; known: {sorted(KIND_MODULES)}")
    kinds = {cls.kind: cls for cls in _subclasses(importlib.import_module(KIND_MODULES[card.kind]))}
    module = kinds[card.kind].from_card(card)
    stored = load_file(str(directory / WEIGHTS_FILE))
    state = {k: v.float() if v.is_floating_point() else v for k, v in stored.items() if not k.endswith(INT8_SCALE)}
    for name in [k for k in state if k + INT8_SCALE in stored]:
        state[name] = state[name] * stored[name + INT8_SCALE].float()  # int8 * float32 -> float32, as saved
    module.load_state_dict(state)
    return module.to(device).eval()


def stored_dtype(directory: Path | str) -> torch.dtype:
    """How a checkpoint's matrices are stored (int8 or float32), from its header alone: re-saving in
    the same dtype gives int8-rounded weights back exactly."""
    with safe_open(str(Path(directory) / WEIGHTS_FILE), "pt") as stored:
        return torch.int8 if any(name.endswith(INT8_SCALE) for name in stored.keys()) else torch.float32


def _quantised(tensor: torch.Tensor) -> bool:
    return tensor.dim() >= 2 and tensor.numel() >= INT8_MIN_ELEMENTS


def _subclasses(module) -> list[type[CacheTranslator]]:
    return [
        obj for _, obj in inspect.getmembers(module, inspect.isclass) if issubclass(obj, CacheTranslator) and obj.kind
    ]
