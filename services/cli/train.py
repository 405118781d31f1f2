"""``mot train``: a Mixture-of-Translators per (source, target) pair."""

from __future__ import annotations

from pathlib import Path
from typing import Annotated

import typer

from services.cli.options import check_selection, int_list, pair_name, qa_dev_contexts


def train(
    source: Annotated[str, typer.Option("--source", "-s", help="Source model (zoo name, dir or HF id).")],
    targets: Annotated[list[str], typer.Option("--target", "-t", help="Target model; repeat for several.")],
    steps: Annotated[int, typer.Option(min=1, help="Optimiser steps (one context each).")] = 600,
    context_tokens: Annotated[
        str,
        typer.Option(
            help="Source tokens per training context; a comma-separated list mixes lengths (steps alternate), "
            "validation uses the longest."
        ),
    ] = "256",
    lr: Annotated[float, typer.Option(help="Peak learning rate (warm-up, cosine decay).")] = 2e-3,
    init: Annotated[
        Path | None,
        typer.Option(
            exists=True,
            file_okay=False,
            help="Start from this translator checkpoint (fine-tuning; fresh optimiser) instead of from scratch.",
        ),
    ] = None,
    native_tail: Annotated[int, typer.Option(min=1, help="Last context tokens the target computes itself.")] = 4,
    experts: Annotated[int, typer.Option(min=1)] = 4,
    hidden: Annotated[
        int,
        typer.Option(min=8, help="Hidden width of each expert (with --init, a wider one widens the checkpoint's)."),
    ] = 128,
    mixes: Annotated[
        int, typer.Option(min=1, help="Source-layer mixtures per target layer (more keep more of the source).")
    ] = 4,
    recall: Annotated[
        float,
        typer.Option(
            min=0.0,
            max=1.0,
            help="Fraction of training contexts continued by a passage of themselves, so the target learns to "
            "copy exact names and numbers out of the translated cache (validation then also reports recall_*).",
        ),
    ] = 0.0,
    recompute: Annotated[
        float | None,
        typer.Option(
            min=0.0,
            max=1.0,
            help="Operating point written to the card: the fraction of the context the target recomputes itself. "
            "Default: the --init card's (a fresh translator: none, pure translation).",
        ),
    ] = None,
    recompute_recent: Annotated[
        float, typer.Option(min=0.0, max=1.0, help="Of --recompute, the share taken from the context's end.")
    ] = 0.0,
    recompute_attended: Annotated[
        float,
        typer.Option(
            min=0.0,
            max=1.0,
            help="Of --recompute, the share the context's last tokens read most (as the source saw it).",
        ),
    ] = 0.0,
    recompute_selection: Annotated[
        str | None,
        typer.Option(
            help="How the rest of --recompute is chosen, written to the card: phrases (names and numbers whole), "
            "words, surprisal, error or random. Default: the --init card's (a fresh translator: words).",
        ),
    ] = None,
    through_recompute: Annotated[
        bool,
        typer.Option(
            help="Take the loss on what the target loads at the operating point (the translation with the "
            "recomputed tokens in place), not on the pure translation.",
        ),
    ] = False,
    foreign_weight: Annotated[
        float,
        typer.Option(
            min=0.0,
            help="Weight of a second KL to the target's own behaviour: on another context's continuation (same "
            "register, other document) read after this context's cache, the deranged control distilled. "
            "0: off.",
        ),
    ] = 0.0,
    content_focus: Annotated[
        float,
        typer.Option(
            min=0.0,
            max=1.0,
            help="Weight each continuation token's KL and CE by how much the native context helps predict it: "
            "0 weighs all tokens alike, 1 by that benefit alone (the content a translation must carry).",
        ),
    ] = 0.0,
    value_weight: Annotated[
        float,
        typer.Option(
            min=0.0,
            help="Weight of the values' squared error in the cache-row loss, the keys' being 1 (out of domain "
            "the translated values are what break: reports/experiments/copying/).",
        ),
    ] = 1.0,
    read_weight: Annotated[
        float,
        typer.Option(
            min=0.0,
            max=1.0,
            help="Weight each position's cache-row error by how much the native continuation reads it: 0 "
            "weighs all positions alike, 1 by what is read alone (measured: no change, "
            "reports/experiments/read-weight/).",
        ),
    ] = 0.0,
    first_layer_input: Annotated[
        bool,
        typer.Option(
            help="Also give the translator the target's own layer-0 keys/values of each token (exact on any "
            "text, one layer's projections; reports/experiments/token-features/). With --init, the input is "
            "added to the translator being fine-tuned at zero weight (it starts where it was, but for layer 0 "
            "with --exact-first-layer). Off in the shipped translators: reports/experiments/first-layer-input/.",
        ),
    ] = False,
    exact_first_layer: Annotated[
        bool,
        typer.Option(
            help="With --first-layer-input: emit the target's layer-0 rows as they are (exact) rather than "
            "predicting layer 0 like the others.",
        ),
    ] = True,
    context_heads: Annotated[
        int,
        typer.Option(
            min=0,
            help="Heads of causal attention over the context's positions inside the translator (0: none), so "
            "a position's rows can draw on earlier positions. With --init, added to the translator being "
            "fine-tuned at zero weight (it starts where it was). Off in the shipped translators (measured: it "
            "lifts the training register, not the passage; reports/experiments/context-attention/).",
        ),
    ] = 0,
    context_lr: Annotated[
        float | None,
        typer.Option(
            min=0.0,
            help="Learning rate of the context attention (--context-heads); default: --lr. A block added "
            "to a trained translator starts from zero and barely leaves it at a fine-tuning rate.",
        ),
    ] = None,
    news: Annotated[
        float,
        typer.Option(
            min=0.0,
            max=1.0,
            help="Fraction of training contexts cut from the Lee news articles' train split instead of the "
            "speeches (spread evenly over the steps): a second register, with names and numbers.",
        ),
    ] = 0.0,
    wiki: Annotated[
        float,
        typer.Option(
            min=0.0,
            max=1.0,
            help="Fraction of training contexts cut from Wikipedia articles' train split instead of the speeches "
            "(spread evenly over the steps): a third register, every topic. Its reports then count the "
            "Wikipedia-style QA text as in-register.",
        ),
    ] = 0.0,
    literature: Annotated[
        float,
        typer.Option(
            min=0.0,
            max=1.0,
            help="Fraction of training contexts cut from literature's train split (Alice in Wonderland, Paradise "
            "Lost) instead of the speeches (spread evenly over the steps): a fourth register, not Moby-Dick.",
        ),
    ] = 0.0,
    generated: Annotated[
        float,
        typer.Option(
            min=0.0,
            max=1.0,
            help="Fraction of training contexts cut from prose sampled from a model (mot data generate) instead "
            "of the speeches (spread evenly over the steps): any register, with made-up names.",
        ),
    ] = 0.0,
    generated_by: Annotated[str, typer.Option(help="The model whose --generated prose is read.")] = "smollm2-135m",
    val_every: Annotated[int, typer.Option(min=1)] = 100,
    seed: Annotated[int, typer.Option()] = 0,
    device: Annotated[str, typer.Option(help="cpu or cuda.")] = "cpu",
    out_dir: Annotated[Path, typer.Option("--out", help="Shipped translators go to OUT/<source>__<target>.")] = Path(
        "checkpoints"
    ),
    work_dir: Annotated[
        Path | None, typer.Option(help="Resumable fp32 training state (default: $MOT_HOME/train).")
    ] = None,
) -> None:
    """Train a Mixture-of-Translators per (source, target) pair on the corpus' training split.

    Both LLMs stay frozen. Resumable: rerun the same command to continue from the last checkpoint.
    Validation (held-out speeches) runs every --val-every steps and lands in the checkpoint's card.json.
    """
    import torch

    from mot_core.data import pull_corpus
    from mot_core.loading import load_model
    from mot_core.paths import mot_home
    from mot_core.translation.train import Recipe, train_pair
    from mot_core.translation.training_data import extra_registers, training_data

    check_selection(recompute_selection)
    lengths = int_list(context_tokens)
    if not lengths or min(lengths) < 16:
        raise typer.BadParameter(f"context lengths must be >= 16 tokens, got {context_tokens!r}")
    fractions = {"news": news, "wiki": wiki, "literature": literature, "generated": generated}
    if sum(fractions.values()) > 1.0:
        given = " ".join(f"--{name} {fraction}" for name, fraction in fractions.items() if fraction)
        raise typer.BadParameter(f"{given} leave no room for the speeches (sum > 1)")
    registers = extra_registers(fractions, held_out=qa_dev_contexts, generated_by=generated_by)
    src = load_model(source, device=device)
    recipe = Recipe(
        steps=steps,
        context_tokens=lengths,
        init=str(init) if init is not None else "",
        lr=lr,
        native_tail=native_tail,
        experts=experts,
        hidden=hidden,
        mixes=mixes,
        recall=recall,
        recompute=recompute,
        recompute_recent=recompute_recent,
        recompute_attended=recompute_attended,
        recompute_selection=recompute_selection,
        through_recompute=through_recompute,
        content_focus=content_focus,
        foreign_weight=foreign_weight,
        value_weight=value_weight,
        read_weight=read_weight,
        first_layer_input=first_layer_input,
        exact_first_layer=exact_first_layer,
        context_heads=context_heads,
        context_lr=context_lr,
        val_every=val_every,
        seed=seed,
    )
    data = training_data(
        src.tokenizer, pull_corpus(), lengths, steps, registers, seed=seed, val_samples=recipe.val_samples
    )
    work = work_dir or mot_home() / "train"
    for target in targets:
        tgt = load_model(target, device=device)
        name = pair_name(source, target)
        translator = train_pair(src, tgt, data.samples, data.validation, recipe, work / name, data_card=data.card)
        translator.cpu().save(out_dir / name, dtype=torch.int8)  # shipped: int8 matrices, same card
        size = (out_dir / name / "translator.safetensors").stat().st_size / 1e6
        typer.echo(
            f"{out_dir / name}: {translator.card.version}, {size:.1f} MB, "
            f"validation {translator.card.metrics.get('validation')}"
        )
