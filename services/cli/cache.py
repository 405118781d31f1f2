"""``mot cache``: encoded KV cache files (.motkv) made, checked and used without the service."""

from __future__ import annotations

from pathlib import Path
from typing import Annotated

import typer

from services.cli.options import ModelArg


def cache_prefill(
    model: ModelArg,
    text_file: Annotated[Path, typer.Option("--text-file", exists=True, dir_okay=False, help="Context text.")],
    out: Annotated[Path, typer.Option("--out", "-o", help="Where to write the encoded cache.")],
    dtype: Annotated[str, typer.Option(help="Storage dtype: float32, bfloat16, float16 or int8.")] = "bfloat16",
    max_tokens: Annotated[int | None, typer.Option(help="Truncate the context to this many tokens.")] = None,
) -> None:
    """Prefill a context with a model and save its encoded KV cache."""
    from mot_core import codec
    from mot_core.cache_ops import prefill
    from mot_core.loading import load_model
    from mot_core.roundtrip import context_token_ids

    lm = load_model(model)
    cache, _ = prefill(lm, context_token_ids(lm, text_file.read_text(encoding="utf-8"), max_tokens), for_targets=True)
    blob = codec.encode(cache, dtype)
    out.write_bytes(blob)
    typer.echo(f"{out}: {cache.seq_len} tokens, {len(blob) / 1e6:.2f} MB ({dtype}), model {lm.fingerprint.id}")


def cache_inspect(path: Annotated[Path, typer.Argument(exists=True, dir_okay=False)]) -> None:
    """Verify a cache file (checksum, structure) and print its header."""
    from mot_core import codec

    header = codec.peek_header(path.read_bytes())
    for key, value in header.items():
        typer.echo(f"{key}: {value}")


def cache_generate(
    model: ModelArg,
    path: Annotated[Path, typer.Argument(exists=True, dir_okay=False, help="Encoded cache file.")],
    prompt: Annotated[str, typer.Option(help="Text run natively after the cached context.")] = "\n\n",
    max_new_tokens: Annotated[int, typer.Option(min=1, max=4096)] = 32,
) -> None:
    """Load a cache file into its model (refused if the fingerprint differs) and continue generating."""
    import torch

    from mot_core import codec
    from mot_core.cache_ops import generate_from_cache
    from mot_core.loading import load_model
    from mot_core.roundtrip import prompt_token_ids

    lm = load_model(model)
    cache = codec.decode(path.read_bytes(), expected_fingerprint=lm.fingerprint.id, dtype=torch.float32)
    new = generate_from_cache(lm, cache, prompt_token_ids(lm, prompt), max_new_tokens=max_new_tokens)
    typer.echo(lm.tokenizer.decode(new[0], skip_special_tokens=True))
