"""Training a Mixture-of-Translators for one (source, target) pair, with both LLMs frozen.

Loss per sample: KL(native || translated) on the continuation's next-token distributions (the
target's own behaviour is the teacher), plus cross-entropy on the continuation tokens, plus an
auxiliary MSE between predicted and native pre-RoPE K|V rows (standardised). With
``through_recompute`` the two first are taken on the cache the target loads at the translator's
operating point (its card's recompute fraction), not on the pure translation. With ``content_focus``
the KL and CE of each continuation token are weighted by how much the native context helps predict
it (``objective.content_weights``). With ``foreign_weight`` the translated cache is also distilled
on another context's continuation (``foreign_index``). Deterministic given the seed; resumable
from its last checkpoint (weights, optimiser moments and step, all in safetensors + JSON);
validated periodically on held-out samples.
"""

from __future__ import annotations

import json
import logging
import math
import random
import time
from dataclasses import asdict, dataclass, field, replace
from pathlib import Path

import torch
from safetensors.torch import load_file
from tqdm import tqdm

from mot_core.cache_ops import attention_to_cache, to_model_cache
from mot_core.errors import MotError
from mot_core.loading import LoadedModel
from mot_core.translation.features import key_columns
from mot_core.translation.mixture import MixtureTranslator
from mot_core.translation.objective import (
    PreparedSample,
    blended_cache,
    content_weights,
    continuation_logits,
    kl_per_token,
    nll_per_token,
    operating_point_cache,
    prepare,
    rows_model_cache,
    translated_rows,
)
from mot_core.translation.samples import Sample, with_recall
from mot_core.translation.translator import TranslatorCard, load_translator, write_tensors

log = logging.getLogger(__name__)

OPTIMIZER_FILE = "optimizer.safetensors"
STATE_FILE = "train_state.json"


@dataclass
class Recipe:
    context_tokens: list[int] = field(default_factory=lambda: [256])  # source tokens per context; several alternate
    continuation_tokens: int = 64
    steps: int = 600
    lr: float = 2e-3
    kl_weight: float = 1.0
    ce_weight: float = 0.2
    mse_weight: float = 1.0
    native_tail: int = 4
    experts: int = 4
    top_k: int = 2
    hidden: int = 128
    mixes: int = 4  # source-layer mixtures per target layer
    recall: float = 0.0  # fraction of training contexts whose continuation repeats the context (samples.with_recall)
    stats_samples: int = 16
    val_every: int = 100
    val_samples: int = 8
    seed: int = 0
    init: str = ""  # translator checkpoint to start from (fine-tuning), "" for a fresh one
    # the operating point written to the card (TranslatorCard.recompute_fraction / recompute_recent /
    # recompute_attended); None keeps the ``init`` card's (a fresh translator has none: pure translation)
    recompute: float | None = None
    recompute_recent: float = 0.0
    recompute_attended: float = 0.0
    recompute_selection: str | None = None  # None keeps the ``init`` card's (recompute.SELECTIONS)
    # the loss (and validation) on the cache after the target's recompute at that operating point
    # (objective.blended_cache), not on the pure translation
    through_recompute: bool = False
    # weight each continuation token's KL and CE by how much the native context helps predict it
    # (objective.content_weights): 0 weighs all alike, 1 by that benefit alone
    content_focus: float = 0.0
    # weight of the value columns' squared error in the row loss, the keys' being 1: out of domain it
    # is the values that break (reports/experiments/copying/, "The same swaps on news text")
    value_weight: float = 1.0
    # also read the target's own layer-0 rows of each token (MixtureTranslator, first_layer_input);
    # with ``init``, added to the translator being fine-tuned; ``exact_first_layer``: layer 0 is then
    # the target's own rows rather than predicted
    first_layer_input: bool = False
    exact_first_layer: bool = True
    # weight of a second KL to the target's own behaviour: on the continuation of another context of
    # the same register (``foreign_index``), read after this context's cache. It is the deranged
    # control, distilled: a translated cache must help unrelated text of its register no more than
    # the native cache does (out of register the translated caches carry the register's style and
    # too little of the passage). Measured in reports/experiments/foreign-distillation/: the control
    # falls, and retention with it; off by default
    foreign_weight: float = 0.0
    # weight each position's row error by how much the native continuation reads it
    # (``read_shares``): 0 weighs all positions alike, 1 by what is read alone. At inference,
    # recomputing the positions a continuation reads lifts text out of register most
    # (reports/experiments/attended-recompute/); this asks the translator for those rows first.
    # Measured in reports/experiments/read-weight/: no change against its control; off by default
    read_weight: float = 0.0
    # heads of causal attention over the context inside the translator (MixtureTranslator, context_heads);
    # with ``init``, added to the translator being fine-tuned at zero weight
    context_heads: int = 0
    # learning rate of the context attention (its block and map); None: ``lr``. A block added to a
    # trained translator starts from a zero map, which at the fine-tuning rate barely leaves zero
    context_lr: float | None = None


def _new_translator(source: LoadedModel, target: LoadedModel, recipe: Recipe, stats: list[PreparedSample]):
    card = TranslatorCard.for_pair(
        MixtureTranslator.kind,
        source,
        target,
        recipe.native_tail,
        target_windows=list(target.spec.sliding_windows),
        experts=recipe.experts,
        top_k=recipe.top_k,
        hidden=recipe.hidden,
        mixes=recipe.mixes,
    )
    translator = MixtureTranslator.from_card(card)
    src = torch.cat([p.aligned_rows[1:] for p in stats])  # row 0 may be an empty-span BOS
    tgt = torch.cat([p.native_rows[1:] for p in stats if p.native_rows is not None])
    translator.source_mean.copy_(src.mean(0))
    translator.source_std.copy_(src.std(0).clamp_min(1e-4))
    translator.target_mean.copy_(tgt.mean(0))
    translator.target_std.copy_(tgt.std(0).clamp_min(1e-4))
    if recipe.first_layer_input:
        translator = translator.with_first_layer_input(_first_layer_stats(stats), exact=recipe.exact_first_layer)
    return translator.with_context_attention(recipe.context_heads) if recipe.context_heads else translator


def _first_layer_stats(stats: list[PreparedSample]) -> torch.Tensor:
    return torch.cat([p.first_layer_rows[1:] for p in stats])  # position 0 is the native head


def _initial_translator(
    path: str, source: LoadedModel, target: LoadedModel, mixes: int, hidden: int
) -> MixtureTranslator:
    """A trained translator to fine-tune; it must be a mixture for exactly this pair. Given more
    ``mixes`` or wider experts (``hidden``) than it has, it gets them (computing the same at first)."""
    translator = load_translator(path)
    card = translator.card
    if not isinstance(translator, MixtureTranslator):
        raise MotError(f"{path} is a {card.kind!r} translator; fine-tuning needs a mixture")
    if (card.source_fingerprint, card.target_fingerprint) != (source.fingerprint.id, target.fingerprint.id):
        raise MotError(f"{path} translates {card.source_model}->{card.target_model}, not {source.name}->{target.name}")
    if mixes > translator.mixes:
        translator = translator.with_mixes(mixes)
    if hidden > translator.hidden:
        translator = translator.with_hidden(hidden)
    return translator.to(source.device).train()


def foreign_index(samples: list[Sample], i: int) -> int | None:
    """The sample whose continuation sample ``i``'s cache is also distilled on (``Recipe.foreign_weight``):
    the latest earlier one of the same register cut from another document (as the deranged control
    of ``mot eval`` is), None for the first of its register."""
    for j in range(i - 1, -1, -1):
        if samples[j].register == samples[i].register and samples[j].document != samples[i].document:
            return j
    return None


def sample_loss(
    translator: MixtureTranslator,
    source: LoadedModel,
    target: LoadedModel,
    prepared: PreparedSample,
    recipe: Recipe,
    foreign: PreparedSample | None = None,
) -> tuple[torch.Tensor, dict[str, float]]:
    keep, tail = prepared.keep, prepared.tail_ids
    cont = prepared.continuation_ids
    with torch.no_grad():
        teacher = continuation_logits(target, to_model_cache(target, prepared.native_cache), tail, cont)
        weights: torch.Tensor | float = 1.0  # without a focus, no forward without the context
        if recipe.content_focus > 0:
            unaided = continuation_logits(target, None, tail, cont)
            weights = content_weights(teacher, unaided, cont, recipe.content_focus)
    if recipe.through_recompute:
        rows = translated_rows(translator, prepared, target, all_positions=True)
        cache = blended_cache(target, rows, prepared, translator.card.operating_point)
        load = lambda: to_model_cache(target, cache)  # noqa: E731
    else:
        rows = translated_rows(translator, prepared, target)
        load = lambda: rows_model_cache(target, rows, prepared.target_ids, keep)  # noqa: E731
    student = continuation_logits(target, load(), tail, cont)
    kl = (weights * kl_per_token(teacher, student)).mean()
    ce = (weights * nll_per_token(student, cont)).mean()
    loss = recipe.kl_weight * kl + recipe.ce_weight * ce
    parts = {"kl": kl.item(), "ce": ce.item()}
    if foreign is not None and recipe.foreign_weight > 0:
        with torch.no_grad():
            native = to_model_cache(target, prepared.native_cache)
            teacher = continuation_logits(target, native, foreign.tail_ids, foreign.continuation_ids)
        student = continuation_logits(target, load(), foreign.tail_ids, foreign.continuation_ids)
        foreign_kl = kl_per_token(teacher, student).mean()
        loss = loss + recipe.foreign_weight * foreign_kl
        parts["foreign_kl"] = foreign_kl.item()
    if prepared.native_rows is not None and recipe.mse_weight > 0:
        error = ((rows[1:keep] - prepared.native_rows[1:keep]) / translator.target_std) ** 2
        if recipe.value_weight != 1.0:
            keys = key_columns(target.spec).to(error.device)
            error = error * torch.where(keys, 1.0, recipe.value_weight)
        mse = error.mean() if recipe.read_weight == 0 else _read_weighted(error, read_shares(target, prepared), recipe)
        loss = loss + recipe.mse_weight * mse
        parts["mse"] = mse.item()
    return loss, parts


@torch.no_grad()
def read_shares(target: LoadedModel, prepared: PreparedSample) -> torch.Tensor:
    """``[keep]``, summing to 1: how much the native tail and continuation read each cached position
    (``cache_ops.attention_to_cache``; position 0, the attention sink, reads as 0)."""
    queries = torch.cat((prepared.tail_ids, prepared.continuation_ids), dim=-1)
    shares = attention_to_cache(target, prepared.native_cache, queries)
    return shares / shares.sum().clamp_min(1e-12)


def _read_weighted(error: torch.Tensor, shares: torch.Tensor, recipe: Recipe) -> torch.Tensor:
    """The row loss of ``error [keep-1, L, F]`` (positions 1..keep-1), each position weighted by
    ``1 - read_weight`` of a uniform share and ``read_weight`` of its ``read_shares`` (which give the
    sink, position 0, nothing: those of 1..keep-1 sum to 1); the mean when 0."""
    read = shares[1 : error.shape[0] + 1].to(error.device)
    weights = (1 - recipe.read_weight) / error.shape[0] + recipe.read_weight * read
    return (error.mean((1, 2)) * weights).sum()


@torch.no_grad()
def validate(
    translator,
    source: LoadedModel,
    target: LoadedModel,
    prepared: list[PreparedSample],
    *,
    at_operating_point: bool = False,
) -> dict[str, float]:
    """Mean NLL per continuation token under native / none / translated, and the retention.

    ``translated`` is the pure translation, or with ``at_operating_point`` what the target loads
    after recomputing its card's fraction of the context (``objective.operating_point_cache``).
    """
    totals = {"native": 0.0, "none": 0.0, "translated": 0.0}
    count = 0
    for p in prepared:
        tail, cont = p.tail_ids, p.continuation_ids
        if at_operating_point:
            translated = to_model_cache(target, operating_point_cache(translator, p, target))
        else:
            translated = rows_model_cache(target, translated_rows(translator, p, target), p.target_ids, p.keep)
        caches = {"native": to_model_cache(target, p.native_cache), "none": None, "translated": translated}
        for name, cache in caches.items():
            totals[name] += nll_per_token(continuation_logits(target, cache, tail, cont), cont).sum().item()
        count += cont.shape[-1]
    nll = {k: v / count for k, v in totals.items()}
    gap = nll["none"] - nll["native"]
    return {
        **{f"nll_{k}": v for k, v in nll.items()},
        "retention": (nll["none"] - nll["translated"]) / gap if gap > 0 else float("nan"),
    }


def _validation_metrics(translator, source, target, val, recall_val, recipe: Recipe) -> dict[str, float]:
    point = recipe.through_recompute
    metrics = validate(translator, source, target, val, at_operating_point=point)
    if recall_val:
        recall = validate(translator, source, target, recall_val, at_operating_point=point)
        metrics |= {f"recall_{k}": v for k, v in recall.items()}
    return metrics


def _lr_factor(step: int, steps: int, warmup: int = 20) -> float:
    """Linear warm-up, then cosine decay to zero."""
    return min(1.0, (step + 1) / warmup) * 0.5 * (1 + math.cos(math.pi * min(step, steps) / steps))


def _parameter_groups(translator: MixtureTranslator, recipe: Recipe) -> list[dict]:
    """The optimiser's parameter groups, each with the ``base_lr`` the schedule scales."""
    context = translator.context_parameters()
    own = [p for p in translator.parameters() if all(p is not c for c in context)]
    context_lr = recipe.lr if recipe.context_lr is None else recipe.context_lr
    groups = [(own, recipe.lr), (context, context_lr)]
    return [{"params": params, "lr": lr, "base_lr": lr} for params, lr in groups if params]


def _save(translator: MixtureTranslator, optimizer: torch.optim.Optimizer, step: int, out: Path) -> None:
    translator.save(out)
    names = {id(p): n for n, p in translator.named_parameters()}
    moments = {}
    for group in optimizer.param_groups:
        for param in group["params"]:
            for key, value in optimizer.state.get(param, {}).items():
                moments[f"{names[id(param)]}|{key}"] = torch.as_tensor(value).detach().contiguous().cpu()
    write_tensors(out / OPTIMIZER_FILE, moments)
    (out / STATE_FILE).write_text(json.dumps({"step": step}))


def _resume(out: Path, translator: MixtureTranslator, optimizer: torch.optim.Optimizer) -> int:
    saved = load_translator(out)
    translator.load_state_dict(saved.state_dict())
    params = dict(translator.named_parameters())
    for key, value in load_file(str(out / OPTIMIZER_FILE)).items():
        name, slot = key.split("|")
        optimizer.state[params[name]][slot] = value
    return json.loads((out / STATE_FILE).read_text())["step"]


def train_pair(
    source: LoadedModel,
    target: LoadedModel,
    train: list[Sample],
    validation: list[Sample],
    recipe: Recipe,
    out: Path,
    *,
    data_card: dict | None = None,
) -> MixtureTranslator:
    """Train (or resume) a translator into ``out``; returns it with validation metrics in its card."""
    random.seed(recipe.seed)
    torch.manual_seed(recipe.seed)
    for lm in (source, target):
        lm.model.requires_grad_(False)
    started = time.perf_counter()
    prepare_one = lambda s: prepare(source, target, s, recipe.continuation_tokens, recipe.native_tail)  # noqa: E731
    val = [prepare_one(s) for s in tqdm(validation[: recipe.val_samples], desc="validation set", unit="ctx")]
    recall_val = []  # the same contexts, continued by a passage of themselves: can the target copy from the cache?
    if recipe.recall > 0:
        train = with_recall(train, recipe.recall, seed=recipe.seed)
        recall_samples = with_recall(validation[: recipe.val_samples], 1.0, seed=recipe.seed + 1)
        recall_val = [prepare_one(s) for s in tqdm(recall_samples, desc="recall validation set", unit="ctx")]

    def statistics() -> list[PreparedSample]:  # standardisation statistics, for what is new
        return [prepare_one(s) for s in tqdm(train[: recipe.stats_samples], desc="statistics", unit="ctx")]

    if recipe.init:
        translator = _initial_translator(recipe.init, source, target, recipe.mixes, recipe.hidden)
        if recipe.first_layer_input and not translator.reads_first_layer:
            rows = _first_layer_stats(statistics())
            translator = translator.with_first_layer_input(rows, exact=recipe.exact_first_layer).train()
        if recipe.context_heads and not translator.reads_context:
            translator = translator.with_context_attention(recipe.context_heads).train()
    else:
        translator = _new_translator(source, target, recipe, statistics())
    if recipe.recompute is not None:
        translator.card = replace(
            translator.card,
            recompute_fraction=recipe.recompute,
            recompute_recent=recipe.recompute_recent,
            recompute_attended=recipe.recompute_attended,
        )
    if recipe.recompute_selection is not None:
        translator.card = replace(translator.card, recompute_selection=recipe.recompute_selection)
    if recipe.through_recompute and translator.card.recompute_fraction is None:
        raise MotError(
            "training through the recompute needs an operating point: --recompute, or an --init that has one"
        )
    optimizer = torch.optim.AdamW(_parameter_groups(translator, recipe), weight_decay=0.0)
    step, history, row_steps, warned = 0, [], 0, False
    latest: dict[str, tuple[int, PreparedSample]] = {}  # register -> (index, prepared) of its latest sample
    if (out / STATE_FILE).is_file():
        step = _resume(out, translator, optimizer)
        metrics = load_translator(out).card.metrics
        history, row_steps = metrics.get("history", []), metrics.get("row_loss_steps", 0)
        log.info("resumed %s at step %d", out, step)
    elif recipe.init:  # where fine-tuning starts from, on the same validation samples
        history.append({"step": 0, **_validation_metrics(translator.eval(), source, target, val, recall_val, recipe)})
        log.info("step 0 (from %s): %s", recipe.init, history[-1])
    bar = tqdm(total=recipe.steps, initial=step, desc=f"train {source.name}->{target.name}", unit="step")
    while step < recipe.steps:
        translator.train()
        index = step % len(train)
        prepared = prepare_one(train[index])
        foreign = None
        if recipe.foreign_weight > 0:
            register = train[index].register
            if (j := foreign_index(train, index)) is not None:
                # prepared last time unless a resume (or a same-document neighbour) came between
                seen, kept = latest.get(register, (None, None))
                foreign = kept if seen == j else prepare_one(train[j])
            latest[register] = (index, prepared)
        loss, parts = sample_loss(translator, source, target, prepared, recipe, foreign)
        row_steps += "mse" in parts
        if "mse" not in parts and recipe.mse_weight > 0 and not warned:
            warned = True  # a run whose row loss (and --value-weight) does not apply must say so
            log.warning(
                "step %d has no row loss: its context is past %s's sliding window, where the native rows "
                "are not all kept (the card counts row_loss_steps)",
                step,
                target.name,
            )
        optimizer.zero_grad()
        loss.backward()
        torch.nn.utils.clip_grad_norm_(translator.parameters(), 1.0)
        for group in optimizer.param_groups:
            group["lr"] = group["base_lr"] * _lr_factor(step, recipe.steps)
        optimizer.step()
        step += 1
        bar.update(1)
        bar.set_postfix({k: f"{v:.3f}" for k, v in parts.items()})
        if step % recipe.val_every == 0 or step == recipe.steps:
            translator.eval()
            metrics = _validation_metrics(translator, source, target, val, recall_val, recipe)
            history.append({"step": step, **metrics})
            log.info("step %d: %s", step, {k: round(v, 4) for k, v in metrics.items()})
            translator.card.recipe = {**asdict(recipe), "data": data_card or {}}
            translator.card.metrics = {
                "validation": history[-1],
                "history": history,
                "train_seconds": time.perf_counter() - started,
                "row_loss_steps": row_steps,
            }
            _save(translator, optimizer, step, out)
    bar.close()
    return translator.eval()
