"""Tiny, real tokenisers trained in-process, so alignment tests need no download.

Each builder mimics the offset behaviour of a tokeniser family the service meets in practice:

* ``byte_level_bpe``: GPT-2 / SmolLM2 / Qwen style byte-level BPE. Offsets keep the leading
  space (``trim_offsets=False``), and a character split over several byte tokens gives every
  one of them the same character span.
* ``byte_level_bpe_trimmed``: the same with ``trim_offsets=True`` (GPT-2's Hugging Face
  default), where whitespace-only tokens can end up with an empty span.
* ``gemma_bpe``: Gemma style: a normaliser that turns spaces into ``▁``, no pre-tokeniser, and a
  BPE with byte fallback (``<0xE2>`` tokens for characters outside the vocabulary).
* ``metaspace_unigram``: SentencePiece / T5 style Metaspace pre-tokeniser with a Unigram model
  and an ``<unk>`` token.

All of them add a BOS special token through a ``TemplateProcessing`` post-processor, as the
real models do, and are wrapped in ``transformers.PreTrainedTokenizerFast``.
"""

from __future__ import annotations

import functools
import json

from tokenizers import Tokenizer, decoders, models, normalizers, pre_tokenizers, processors, trainers
from transformers import PreTrainedTokenizerFast

CORPUS = [
    "The quick brown fox jumps over the lazy dog. The dog sleeps; the fox runs away!",
    "Caches store keys and values for every token, so a long prompt need not be read twice.",
    "def translate(cache, source, target):\n    return mix(cache[source], target)  # TODO\n",
    "Numbers like 3.14159, 2048 and 1e-6 show up in code and in prose alike.",
    "Ünïcödé tëxt: café, naïve, façade, Straße, São Paulo, Zürich, Kraków, Ελληνικά, русский.",
    "日本語のテキストも少し入れておきます。中文文本也在这里。한국어 문장도 있습니다.",
    "Emoji appear too: 😀 🚀 👍🏽 👨‍👩‍👧 ❤️ and flags 🇫🇷🇯🇵.",
    "Tabs\tand  double  spaces,\n\nblank lines, and trailing spaces   \n",
    "Combining marks: e\u0301 a\u0308 n\u0303 and o\u0302 compose with the letter before them.",
    "She said: \u201cit's fine\u201d \u2014 then left\u2026 <b>bold</b> [x] {y} (z) #tag @user",
]

BOS = "<bos>"
UNK = "<unk>"
PAD = "<pad>"
VOCAB_SIZE = 400


def _corpus() -> list[str]:
    # Repeat so the trainer sees every pair often enough to merge it.
    return CORPUS * 3


def _with_bos(tok: Tokenizer, extra: list[processors.PostProcessor] | None = None) -> Tokenizer:
    bos_id = tok.token_to_id(BOS)
    assert bos_id is not None
    template = processors.TemplateProcessing(single=f"{BOS} $A", pair=f"{BOS} $A $B", special_tokens=[(BOS, bos_id)])
    tok.post_processor = processors.Sequence([*(extra or []), template]) if extra else template
    return tok


def _wrap(tok: Tokenizer) -> PreTrainedTokenizerFast:
    return PreTrainedTokenizerFast(tokenizer_object=tok, bos_token=BOS, unk_token=UNK, pad_token=PAD)


def _byte_level(trim_offsets: bool) -> Tokenizer:
    tok = Tokenizer(models.BPE())
    tok.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False, use_regex=True)
    tok.decoder = decoders.ByteLevel()
    trainer = trainers.BpeTrainer(
        vocab_size=VOCAB_SIZE,
        special_tokens=[PAD, BOS, UNK],
        initial_alphabet=pre_tokenizers.ByteLevel.alphabet(),
        show_progress=False,
    )
    tok.train_from_iterator(_corpus(), trainer=trainer)
    return _with_bos(tok, [processors.ByteLevel(trim_offsets=trim_offsets)])


@functools.cache
def byte_level_bpe() -> PreTrainedTokenizerFast:
    return _wrap(_byte_level(trim_offsets=False))


@functools.cache
def byte_level_bpe_trimmed() -> PreTrainedTokenizerFast:
    return _wrap(_byte_level(trim_offsets=True))


@functools.cache
def gemma_bpe() -> PreTrainedTokenizerFast:
    tok = Tokenizer(models.BPE(unk_token=UNK))
    tok.normalizer = normalizers.Replace(" ", "\u2581")
    tok.decoder = decoders.Sequence([decoders.Replace("\u2581", " "), decoders.ByteFallback(), decoders.Fuse()])
    trainer = trainers.BpeTrainer(vocab_size=VOCAB_SIZE, special_tokens=[PAD, BOS, UNK], show_progress=False)
    tok.train_from_iterator(_corpus(), trainer=trainer)
    # Give the trained model SentencePiece byte fallback: every byte gets a <0xNN> token, so
    # characters outside the tiny vocabulary become 2-4 tokens that share one character span.
    spec = json.loads(tok.to_str())
    vocab = spec["model"]["vocab"]
    for byte in range(256):
        vocab.setdefault(f"<0x{byte:02X}>", len(vocab))
    spec["model"]["byte_fallback"] = True
    tok = Tokenizer.from_str(json.dumps(spec))
    return _wrap(_with_bos(tok))


@functools.cache
def metaspace_unigram() -> PreTrainedTokenizerFast:
    tok = Tokenizer(models.Unigram())
    tok.normalizer = normalizers.NFKC()
    tok.pre_tokenizer = pre_tokenizers.Metaspace(replacement="\u2581", prepend_scheme="always")
    tok.decoder = decoders.Metaspace(replacement="\u2581", prepend_scheme="always")
    trainer = trainers.UnigramTrainer(
        vocab_size=VOCAB_SIZE, special_tokens=[PAD, BOS, UNK], unk_token=UNK, show_progress=False
    )
    tok.train_from_iterator(_corpus(), trainer=trainer)
    return _wrap(_with_bos(tok))


ALL_BUILDERS = {
    "byte_level_bpe": byte_level_bpe,
    "byte_level_bpe_trimmed": byte_level_bpe_trimmed,
    "gemma_bpe": gemma_bpe,
    "metaspace_unigram": metaspace_unigram,
}
