"""``mot bench*``: each cost measured side by side with the native prefill it replaces."""

from __future__ import annotations

from pathlib import Path
from typing import Annotated

import typer

from mot_core.errors import MotError


def bench(
    models: Annotated[list[str] | None, typer.Option("--model", "-m", help="Repeatable; default: the zoo.")] = None,
    context_tokens: Annotated[int, typer.Option(min=16)] = 1024,
    repeats: Annotated[int, typer.Option(min=1)] = 3,
    threads: Annotated[int | None, typer.Option(help="torch threads (default: torch's choice).")] = None,
) -> None:
    """Native prefill time vs codec encode/decode throughput, side by side in one run."""
    from mot_core.benchmarks import bench_codec, set_benchmark_threads
    from mot_core.loading import load_model
    from mot_core.zoo import ZOO

    used = set_benchmark_threads(threads)
    typer.echo(f"torch threads: {used}; median of {repeats} runs; GB/s counts encoded bytes")
    header = (
        f"{'model':<14} {'tokens':>6} {'prefill s':>9} {'dtype':<8} {'MB':>7} {'enc GB/s':>8} {'dec GB/s':>8} "
        f"{'(enc+dec)/prefill':>17}"
    )
    typer.echo(header)
    for name in models or list(ZOO):
        for row in bench_codec(load_model(name), context_tokens, repeats):
            typer.echo(
                f"{row.model:<14} {row.context_tokens:>6} {row.prefill_s:>9.3f} {row.dtype:<8} "
                f"{row.encoded_mb:>7.2f} {row.encode_gbps:>8.2f} {row.decode_gbps:>8.2f} "
                f"{row.codec_over_prefill:>17.4f}"
            )


def bench_translation(
    config: Annotated[
        Path | None,
        typer.Option(
            exists=True,
            dir_okay=False,
            help="Service config naming the source and each target's translator (default: configs/local.yaml, "
            "the shipped translators).",
        ),
    ] = None,
    corpus: Annotated[
        Path | None,
        typer.Option(exists=True, dir_okay=False, help="Text to cut contexts from (.txt/.jsonl; default: demo text)."),
    ] = None,
    context_tokens: Annotated[int, typer.Option(min=16)] = 1024,
    samples: Annotated[int, typer.Option(min=1)] = 5,
    seed: Annotated[int, typer.Option()] = 7,
    threads: Annotated[int | None, typer.Option(help="torch threads (default: torch's choice).")] = None,
) -> None:
    """Translation at each translator's operating point vs the target's native prefill, side by side.

    The translator issue's cost bar (at most 0.25x at 1024 tokens), timed as `mot eval` times it:
    per context, alignment + translator + the target's recompute + loading into the model against
    the target's own prefill of the same context, each the fastest of back-to-back runs; the
    median over contexts. A few minutes instead of an acceptance run's hours. The ratio depends on
    the machine: a CPU without bfloat16 matmuls runs the translator in float32 and pays more.
    The "first call" column is each context's first translation, as a service translates a new
    context once, after the replica's warm-up (the config's warm_up_tokens).
    """
    from mot_core.benchmarks import cpu_name, set_benchmark_threads
    from mot_core.loading import load_model
    from mot_core.roundtrip import DEMO_TEXT_PATH
    from mot_core.translation.cost import translation_cost
    from mot_core.translation.samples import cut_samples, read_corpus
    from mot_core.translation.translator import load_translator, serving_dtype
    from services.config import load_config
    from services.demo import DEMO_CONFIG
    from services.engines import resolve_translator_path

    service = load_config(config or DEMO_CONFIG)
    used = set_benchmark_threads(threads)
    src = load_model(service.source.name)
    text = corpus or DEMO_TEXT_PATH
    contexts = cut_samples(read_corpus(text), src.tokenizer, context_tokens=context_tokens, count=samples, seed=seed)
    if len(contexts) < samples:
        raise MotError(f"{text} gave {len(contexts)} contexts of {context_tokens} tokens, not {samples}")
    dtype = str(serving_dtype(src.device.type)).removeprefix("torch.")
    typer.echo(
        f"{cpu_name()}; torch threads: {used}; translator matmuls in {dtype}; {samples} contexts of "
        f"{context_tokens} {src.name} tokens; per context the fastest of back-to-back runs and the first call "
        "(a new context, as served), median over contexts"
    )
    typer.echo(
        f"{'target':<14} {'translator':<26} {'operating point':<18} {'prefill s':>9} {'translate s':>11} "
        f"{'translate/prefill':>17} {'first call':>10}  per context (fastest; first call)"
    )
    for spec in (t for t in service.targets if t.translator):
        translator = load_translator(resolve_translator_path(spec.translator))
        translator.warm_up_shapes(service.warm_up_tokens)  # as the translator replica does at start
        cost = translation_cost(src, load_model(spec.name), translator, contexts)
        typer.echo(
            f"{Path(spec.name).name:<14} {cost.translator:<26} {cost.operating_point:<18} "
            f"{cost.median_native_s:>9.3f} {cost.median_translate_s:>11.3f} "
            f"{cost.median_ratio:>16.3f}x {cost.median_first_ratio:>9.3f}x  "
            + ", ".join(f"{r:.3f}" for r in cost.ratios)
            + "; "
            + ", ".join(f"{r:.3f}" for r in cost.first_ratios)
        )


def bench_service(
    config: Annotated[
        Path | None, typer.Option(exists=True, dir_okay=False, help="Default: configs/local.yaml.")
    ] = None,
    context_tokens: Annotated[int, typer.Option(min=16)] = 1024,
    repeats: Annotated[int, typer.Option(min=1)] = 3,
) -> None:
    """End-to-end TTFT through gRPC per target, side by side: a fresh translation, a translated-cache
    hit and native prefill (medians over --repeats contexts, after warm-up); store MB/s for 20 MB."""
    from services.bench import bench_store, bench_ttft
    from services.demo import DEMO_CONFIG

    bench_store(echo=typer.echo)
    bench_ttft(config or DEMO_CONFIG, context_tokens, repeats, echo=typer.echo)
