"""``mot demo`` and ``mot roundtrip``: the service, and the cache path of each model, shown working."""

from __future__ import annotations

from pathlib import Path
from typing import Annotated

import typer


def demo(
    config: Annotated[
        Path | None, typer.Option(exists=True, dir_okay=False, help="Service config (default: configs/local.yaml).")
    ] = None,
    max_new_tokens: Annotated[int, typer.Option(min=1)] = 24,
) -> None:
    """Start the service here, share one RAG context with every target model, compare TTFT, shut down."""
    from services.demo import DEMO_CONFIG, run_demo

    run_demo(config or DEMO_CONFIG, echo=typer.echo, max_new_tokens=max_new_tokens)


def roundtrip(
    models: Annotated[list[str] | None, typer.Option("--model", "-m", help="Repeatable; default: the zoo.")] = None,
    context_tokens: Annotated[int, typer.Option(min=2, help="Context length in tokens.")] = 512,
    dtype: Annotated[str, typer.Option(help="Codec dtype for the stored cache.")] = "bfloat16",
    max_new_tokens: Annotated[int, typer.Option(min=1)] = 32,
) -> None:
    """Run one real context through prefill -> extract -> encode -> decode -> load -> generate per model."""
    from mot_core.loading import load_model
    from mot_core.roundtrip import demo_text, run_round_trip
    from mot_core.zoo import ZOO

    text = demo_text()
    for name in models or list(ZOO):
        lm = load_model(name)
        report = run_round_trip(lm, text, max_context_tokens=context_tokens, dtype=dtype, max_new_tokens=max_new_tokens)
        typer.echo(f"\n== {name} ({lm.spec.model_type}, fingerprint {lm.fingerprint.id})")
        typer.echo(f"context: {report.context_tokens} tokens; cache {report.encoded_bytes / 1e6:.2f} MB as {dtype}")
        for step, seconds in report.timings_s.items():
            typer.echo(f"  {step:<28} {seconds * 1000:9.1f} ms")
        verdict = "identical" if report.identical else f"first {report.matching_tokens} identical"
        typer.echo(
            f"generated ({verdict} to plain generation, {report.new_tokens} tokens): {report.generated_text.strip()!r}"
        )
