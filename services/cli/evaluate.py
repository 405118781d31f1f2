"""``mot eval``: a translator against native, no context, a deranged control and ridge, side by side."""

from __future__ import annotations

from pathlib import Path
from typing import Annotated

import typer

from mot_core.errors import MotError
from services.cli.options import check_selection, fraction_list, fraction_or_none, int_list, pair_name


def evaluate(
    source: Annotated[str, typer.Option("--source", "-s", help="Source model.")],
    target: Annotated[str, typer.Option("--target", "-t", help="Target model.")],
    corpus: Annotated[Path, typer.Option(exists=True, dir_okay=False, help=".txt or .jsonl with a 'text' field.")],
    checkpoint: Annotated[Path | None, typer.Option(help="Translator dir (default: the shipped one).")] = None,
    context_tokens: Annotated[str, typer.Option(help="Comma-separated context lengths.")] = "256,1024,2048",
    samples: Annotated[int, typer.Option(min=1, help="Samples per context length.")] = 200,
    qa: Annotated[
        Path | None, typer.Option(exists=True, dir_okay=False, help="QA JSONL (context, question, choices, answer).")
    ] = None,
    qa_items: Annotated[int, typer.Option(min=1, help="QA items used.")] = 1000,
    ridge_contexts: Annotated[
        int, typer.Option(min=0, help="256-token training contexts the ridge baseline is fitted on (0: no ridge).")
    ] = 130,
    recompute: Annotated[
        str | None,
        typer.Option(
            help="Operating point: fraction of context tokens the target recomputes itself, or 'none' for pure "
            "translation (default: the checkpoint card's recompute_fraction)."
        ),
    ] = None,
    recent: Annotated[
        float | None,
        typer.Option(
            min=0.0,
            max=1.0,
            help="Of the recompute fraction, the share of the context taken from its end (the tokens a "
            "continuation leans on most) instead of the most surprising words (default: the card's recompute_recent).",
        ),
    ] = None,
    selection: Annotated[
        str | None,
        typer.Option(
            help="How the recompute fraction (past the recent share) is chosen: phrases, words, surprisal, error "
            "or random (default: the card's recompute_selection)."
        ),
    ] = None,
    attended: Annotated[
        float | None,
        typer.Option(
            min=0.0,
            max=1.0,
            help="Of the recompute fraction, the share of the context its last tokens read most (their attention "
            "when the source read the context) instead of by the selection (default: the card's recompute_attended).",
        ),
    ] = None,
    sweep: Annotated[
        str, typer.Option(help="Comma-separated recompute fractions reported side by side (quality vs cost).")
    ] = "",
    ablations: Annotated[
        bool,
        typer.Option(
            help="Also score the simpler recompute selections at the operating point (for phrases: words, "
            "surprisal, error, random), all of it by the selection (<selection>-only) and all of it from the "
            "end (recent-only): up to six more conditions per sample and QA item."
        ),
    ] = True,
    seed: Annotated[int, typer.Option()] = 0,
    out: Annotated[Path, typer.Option(help="Report directory (report.json, report.md, report.png).")] = Path(
        "out/eval"
    ),
    report_only: Annotated[
        bool,
        typer.Option(
            "--report-only",
            help="Score nothing: write the report of what OUT/progress.jsonl holds so far (an interim report; "
            "safe while the run that writes it goes on). Same options as that run.",
        ),
    ] = False,
) -> None:
    """Evaluate a translator on held-out text: native / none / translated / deranged / ridge, side by side.

    Reports NLL, retention, content gain, KL, top-1, greedy-32 match and translation vs prefill time per
    context length, and QA accuracy / QA retention with --qa. The ridge baseline is fitted on the
    training split (cached under $MOT_HOME/ridge).

    Each sample and QA item is recorded in OUT/progress.jsonl as soon as it is scored: run the same
    command again after a stop and it goes on where it was (the report covers every sample asked for).
    The same command with --report-only reports what is scored so far.
    """
    import torch

    from mot_core.benchmarks import cpu_name
    from mot_core.data import pull_corpus
    from mot_core.evaluation import EVAL_FORMAT, Knob, qa_accuracy, qa_scored, read_qa_items, write_report
    from mot_core.evaluation import evaluate as run_eval
    from mot_core.journal import Journal
    from mot_core.loading import load_model
    from mot_core.paths import mot_home
    from mot_core.translation.pairs import baseline_ridge
    from mot_core.translation.samples import cut_samples, read_corpus
    from mot_core.translation.translator import load_translator, serving_dtype
    from services.engines import resolve_translator_path

    check_selection(selection)
    src, tgt = load_model(source), load_model(target)
    translator = load_translator(checkpoint or resolve_translator_path(pair_name(source, target)))
    card = translator.card
    if ridge_contexts == 0 or report_only:  # a report-only run reads the ridge's scores from the journal
        ridge = None
    else:
        ridge = baseline_ridge(
            src,
            tgt,
            lambda: pull_corpus().texts("train"),
            contexts=ridge_contexts,
            native_tail=card.native_tail,
            directory=mot_home() / "ridge" / f"{pair_name(source, target)}-{ridge_contexts}",
        )
    documents = read_corpus(corpus)
    by_length = {
        n: cut_samples(documents, src.tokenizer, context_tokens=n, count=samples, seed=seed + n)
        for n in int_list(context_tokens)
    }
    translators = {"translated": translator, **({"ridge": ridge} if ridge is not None else {})}
    knob = Knob(
        card.recompute_fraction if recompute is None else fraction_or_none(recompute),
        selection or card.recompute_selection,
        card.recompute_recent if recent is None else recent,
        card.recompute_attended if attended is None else attended,
    )
    settings = {"operating_point": knob.fraction, "recent": knob.recent, "selection": knob.selection}
    if knob.attended:  # journals written before the share existed are runs without it
        settings["attended"] = knob.attended
    sweep_fractions = fraction_list(sweep)
    settings |= {
        "sweep": sweep_fractions,
        "ablations": ablations,
        "format": EVAL_FORMAT,
        "source": src.fingerprint.id,
        "target": tgt.fingerprint.id,
        "translator": card.version,
        "ridge_contexts": ridge_contexts,  # refitted per machine from the training split: known by its recipe
        "native_tail": card.native_tail,
    }
    journal = Journal(out / "progress.jsonl", settings, read_only=report_only)
    if report_only:
        typer.echo(f"interim report from {out / 'progress.jsonl'}: {len(journal)} samples and QA items scored so far")
    elif len(journal):
        typer.echo(f"going on from {out / 'progress.jsonl'}: {len(journal)} samples and QA items already scored")
    common = {
        "native_tail": card.native_tail,
        "knob": knob,
        "sweep": sweep_fractions,
        "ablations": ablations,
        "journal": journal,
        "score": not report_only,
    }
    result = run_eval(src, tgt, translators, by_length, **common)
    qa_result, items = None, []
    if qa is not None:
        items = read_qa_items(qa)[:qa_items]
        qa_result = qa_accuracy(src, tgt, translators, items, **common) or None
    if not result.rows:
        raise MotError(f"{out / 'progress.jsonl'} holds no sample of these settings yet: nothing to report")
    meta = {
        "source": source,
        "target": target,
        "translator": card.version,
        "corpus": str(corpus),
        "samples": samples,
        "seed": seed,
        "ridge_contexts": ridge_contexts,
        "recompute": knob.fraction,
        "recent": knob.recent,
        "attended": knob.attended,
        "selection": knob.selection,
        "sweep": sweep_fractions,
        "ablations": ablations,
        "qa_items": len(items),
        "qa_items_scored": qa_scored(items, journal),
        "report_only": report_only,
        "machine": {
            "cpu": cpu_name(),
            "torch_threads": torch.get_num_threads(),
            "translator_dtype": str(serving_dtype(tgt.device.type)).removeprefix("torch."),
        },
    }
    write_report(out, result, qa_result, meta)
    typer.echo((out / "report.md").read_text())
    typer.echo(f"wrote {out}/report.json, report.md, report.png")
