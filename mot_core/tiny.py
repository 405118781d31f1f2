"""Tiny random-initialised models built from the real transformers configs of each architecture.

For tests and CI: same code paths as the real models (GQA, head_dim 64/256, Gemma-3's
sliding/global layer pattern with per-layer RoPE), small enough to run in milliseconds, and
no download. The tokenizer is a real byte-level BPE trained on a few sentences.
"""

from __future__ import annotations

from pathlib import Path

import torch
from tokenizers import Tokenizer, decoders, models, pre_tokenizers, processors, trainers
from transformers import AutoModelForCausalLM, PreTrainedTokenizerFast

from mot_core.arch import arch_spec
from mot_core.fingerprint import fingerprint_model
from mot_core.loading import LoadedModel

TINY_VOCAB = 384
_CORPUS = [
    "The quick brown fox jumps over the lazy dog. Pack my box with five dozen liquor jugs.",
    "In 1790 the President addressed Congress on the state of the Union, the militia and the debt.",
    "Numbers like 42, 3.14 and 2048 appear in text; so do names such as Ada Lovelace and Alan Turing.",
    "Caches store keys and values for every layer, head and position of a transformer.",
    "Unicode: naïve café, Straße, 東京, emoji 🙂, tabs\tand  double  spaces.\nNew lines too.",
]

TINY_ARCHITECTURES = ("llama", "qwen2", "gemma3_text")


def tiny_tokenizer(vocab_size: int = TINY_VOCAB, bos: bool = True) -> PreTrainedTokenizerFast:
    tok = Tokenizer(models.BPE())
    tok.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    tok.decoder = decoders.ByteLevel()
    trainer = trainers.BpeTrainer(
        vocab_size=vocab_size,
        special_tokens=["<bos>", "<eos>", "<pad>"],
        initial_alphabet=pre_tokenizers.ByteLevel.alphabet(),
        show_progress=False,
    )
    tok.train_from_iterator(_CORPUS * 4, trainer=trainer)
    if bos:
        tok.post_processor = processors.TemplateProcessing(
            single="<bos> $A", pair="<bos> $A $B", special_tokens=[("<bos>", tok.token_to_id("<bos>"))]
        )
    return PreTrainedTokenizerFast(tokenizer_object=tok, bos_token="<bos>", eos_token="<eos>", pad_token="<pad>")


def tiny_config(architecture: str, vocab_size: int = TINY_VOCAB):
    """A small config of a real architecture, keeping the structural traits of the zoo models."""
    from transformers import Gemma3TextConfig, LlamaConfig, Qwen2Config

    common = dict(
        vocab_size=vocab_size,
        initializer_range=0.3,
        bos_token_id=0,
        eos_token_id=1,
        pad_token_id=2,
        max_position_embeddings=512,
    )
    if architecture == "llama":  # SmolLM2-like: GQA 6/2, head_dim 16
        return LlamaConfig(
            hidden_size=96,
            intermediate_size=192,
            num_hidden_layers=4,
            num_attention_heads=6,
            num_key_value_heads=2,
            rope_parameters={"rope_type": "default", "rope_theta": 100000.0},
            tie_word_embeddings=True,
            **common,
        )
    if architecture == "qwen2":  # Qwen2.5-like: GQA 4/2, head_dim 64, qkv bias
        return Qwen2Config(
            hidden_size=128,
            intermediate_size=256,
            num_hidden_layers=3,
            num_attention_heads=4,
            num_key_value_heads=2,
            head_dim=64,
            tie_word_embeddings=True,
            rope_parameters={"rope_type": "default", "rope_theta": 1000000.0},
            **common,
        )
    if architecture == "gemma3_text":  # Gemma-3-like: 5 sliding : 1 global, head_dim 256, window 8
        return Gemma3TextConfig(
            hidden_size=64,
            intermediate_size=128,
            num_hidden_layers=6,
            num_attention_heads=2,
            num_key_value_heads=1,
            head_dim=256,
            sliding_window=8,
            layer_types=["sliding_attention"] * 5 + ["full_attention"],
            rope_parameters={
                "sliding_attention": {"rope_type": "default", "rope_theta": 10000.0},
                "full_attention": {"rope_type": "default", "rope_theta": 1000000.0},
            },
            **common,
        )
    raise ValueError(f"no tiny config for {architecture!r}; choose from {TINY_ARCHITECTURES}")


def tiny_model(architecture: str, seed: int = 0) -> LoadedModel:
    torch.manual_seed(seed)
    tokenizer = tiny_tokenizer()
    model = AutoModelForCausalLM.from_config(tiny_config(architecture, len(tokenizer)), dtype=torch.float32).eval()
    return LoadedModel(
        f"tiny-{architecture}",
        model,
        tokenizer,
        arch_spec(model.config, tokenizer),
        fingerprint_model(model, tokenizer),
    )


def save_tiny(architecture: str, directory: Path, seed: int = 0) -> Path:
    """Write a tiny model as a normal HF directory, loadable by ``load_model(path)``."""
    lm = tiny_model(architecture, seed)
    lm.model.save_pretrained(directory)
    lm.tokenizer.save_pretrained(directory)
    return directory
