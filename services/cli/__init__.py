"""``mot``: the command line for the MoT cache service.

This module is the map of the commands; each lives in the module named beside it, and imports
torch, transformers or Ray only when it runs (``mot --help`` stays fast).

Expected failures (unknown model, corrupted cache file, failed download) are printed as one
line on stderr with exit code 2; a traceback means a bug.
"""

from __future__ import annotations

import logging
import sys
from typing import Annotated

import typer

from mot_core.allocator import retain_freed_memory
from mot_core.errors import MotError
from services.cli import benchmarks, cache, data, demos, evaluate, models, serve, train, translator

app = typer.Typer(
    help="Share one LLM context across heterogeneous models by storing and translating KV caches.",
    no_args_is_help=True,
    pretty_exceptions_enable=False,
    rich_markup_mode="markdown",  # docstrings reflow: their line breaks are not the terminal's
    add_completion=False,
)
app.command("train")(train.train)
app.command("eval")(evaluate.evaluate)
app.command("demo")(demos.demo)
app.command("roundtrip")(demos.roundtrip)
app.command("bench")(benchmarks.bench)
app.command("bench-translation")(benchmarks.bench_translation)
app.command("serve")(serve.serve)
app.command("bench-service")(benchmarks.bench_service)

models_app = typer.Typer(help="Pull and list the real pretrained models of the zoo.", no_args_is_help=True)
models_app.command("pull")(models.models_pull)
models_app.command("list")(models.models_list)

data_app = typer.Typer(
    help="Fetch the training corpora (speeches, news, Wikipedia, literature) with their fixed splits and a novel "
    "held out for evaluation; or sample a training register from a model.",
    no_args_is_help=True,
)
data_app.command("pull")(data.data_pull)
data_app.command("generate")(data.data_generate)

cache_app = typer.Typer(help="Make, inspect and use encoded KV cache files (.motkv).", no_args_is_help=True)
cache_app.command("prefill")(cache.cache_prefill)
cache_app.command("inspect")(cache.cache_inspect)
cache_app.command("generate")(cache.cache_generate)

translator_app = typer.Typer(
    help="Inspect a trained translator checkpoint, or re-save it with how it is served changed.", no_args_is_help=True
)
translator_app.command("show")(translator.translator_show)
translator_app.command("set")(translator.translator_set)

app.add_typer(models_app, name="models")
app.add_typer(data_app, name="data")
app.add_typer(cache_app, name="cache")
app.add_typer(translator_app, name="translator")


@app.callback()
def _configure(verbose: Annotated[bool, typer.Option("--verbose", "-v", help="Debug logging.")] = False) -> None:
    logging.basicConfig(
        level=logging.DEBUG if verbose else logging.INFO,
        format="%(asctime)s %(levelname)s %(name)s: %(message)s",
        datefmt="%H:%M:%S",
    )
    for noisy in ("httpx", "urllib3", "filelock", "transformers"):
        logging.getLogger(noisy).setLevel(logging.WARNING)
    retain_freed_memory()


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
