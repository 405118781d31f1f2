"""Translators on tiny models of the three architectures: shapes, positions, save/load, training."""

import itertools
import json
import math
import os
import stat
from unittest.mock import patch

import pytest
import torch
import torch.nn.functional as F

from mot_core import cache_ops
from mot_core.errors import MotError
from mot_core.evaluation import Knob, evaluate, qa_accuracy
from mot_core.roundtrip import demo_text
from mot_core.tiny import tiny_model
from mot_core.translation.pairs import baseline_ridge, context_chunks, fit_ridge
from mot_core.translation.recompute import OperatingPoint
from mot_core.translation.samples import cut_lengths, cut_samples, interleave, with_recall
from mot_core.translation.train import Recipe, sample_loss, train_pair
from mot_core.translation.translator import load_translator, serving_dtype

TEXT = "In 1790 the President addressed Congress on the state of the Union, the militia and the debt."


@pytest.fixture(scope="module")
def pair():
    return tiny_model("llama", seed=0), tiny_model("gemma3_text", seed=1)


@pytest.fixture(scope="module")
def ridge(pair):
    source, target = pair
    contexts = list(context_chunks(source.tokenizer, demo_text(), 5, max_chunks=40))
    return fit_ridge(source, target, contexts, alpha=1e-2, native_tail=2)


@pytest.fixture(scope="module")
def samples(pair):
    source, _ = pair
    text = demo_text()
    train = cut_samples([text[:20000]], source.tokenizer, context_tokens=6, continuation_chars=60, count=40, seed=0)
    val = cut_samples([text[20000:]], source.tokenizer, context_tokens=6, continuation_chars=60, count=4, seed=1)
    return train, val


def _translate_long_text(translator, source, target):
    """The source's own cache of a text longer than the tiny Gemma's sliding window of 8, translated."""
    text = TEXT * 2
    source_cache, _ = cache_ops.prefill(source, source.tokenizer(text, return_tensors="pt").input_ids, for_targets=True)
    return translator.translate(
        source_cache,
        text,
        source_spec=source.spec,
        source_tokenizer=source.tokenizer,
        target_spec=target.spec,
        target_tokenizer=target.tokenizer,
    )


@pytest.mark.parametrize("target_arch", ["gemma3_text", "qwen2"])
def test_translated_cache_loads_into_the_target(target_arch):
    """GQA, head_dim 64/256 and sliding layers: the output is exactly what the target itself would hold."""
    source, target = tiny_model("llama", seed=0), tiny_model(target_arch, seed=1)
    contexts = list(context_chunks(source.tokenizer, demo_text(), 5, max_chunks=20))
    translator = fit_ridge(source, target, contexts, native_tail=2)
    result = _translate_long_text(translator, source, target)
    native, _ = cache_ops.prefill(target, result.target_ids[:, : result.cache.seq_len])
    assert result.cache.seq_len == result.target_ids.shape[-1] - 2 and result.native_ids.shape[-1] == 2
    assert result.cache.fingerprint == target.fingerprint.id and result.cache.rope_applied
    # the source's surprisal comes along per target token (for the target's recompute); BOS has none
    surprisal = result.cache.surprisal
    assert surprisal.shape == result.cache.token_ids.shape and surprisal[0, 0] == 0 and (surprisal[0, 1:] > 0).all()
    for layer in range(target.spec.num_layers):
        assert result.cache.keys[layer].shape == native.keys[layer].shape
        assert result.cache.values[layer].dtype == torch.float32
    # the native head: position 0 (BOS / attention sink) becomes exactly the target's own
    headed = cache_ops.replace_head(target, result.cache)
    full_layer = target.spec.sliding_windows.index(None)
    torch.testing.assert_close(headed.keys[full_layer][:, :, 0], native.keys[full_layer][:, :, 0], atol=1e-5, rtol=0)
    assert not torch.allclose(result.cache.keys[full_layer][:, :, 0], native.keys[full_layer][:, :, 0])
    # every other position keeps the translation, re-rotated with the target's RoPE at its own position
    torch.testing.assert_close(headed.keys[full_layer][:, :, 1:], result.cache.keys[full_layer][:, :, 1:])
    logits = cache_ops.next_token_logits(target, headed, result.native_ids)
    assert torch.isfinite(logits).all()


def test_the_ridge_baseline_is_fitted_once_and_again_for_other_models_or_tail(pair, tmp_path):
    source, target = pair
    reads = []

    def documents():
        reads.append(1)
        return [demo_text(), demo_text()[::-1]]

    fit = dict(contexts=3, directory=tmp_path / "ridge", context_tokens=5)
    first = baseline_ridge(source, target, documents, native_tail=2, **fit)
    assert first.card.recipe["rows"] > 0 and first.card.recipe["contexts"] == 3 and len(reads) == 1
    # the first 3 pieces at 2 a document: the same fit as those pieces given by hand
    pieces = [*context_chunks(source.tokenizer, demo_text(), 5, max_chunks=2)]
    pieces += [*context_chunks(source.tokenizer, demo_text()[::-1], 5, max_chunks=1)]
    assert torch.equal(first.weight, fit_ridge(source, target, pieces, native_tail=2).weight)
    kept = baseline_ridge(source, target, documents, native_tail=2, **fit)
    assert len(reads) == 1 and kept.card.version == first.card.version  # kept, not refitted
    other_tail = baseline_ridge(source, target, documents, native_tail=3, **fit)
    assert len(reads) == 2 and other_tail.card.native_tail == 3
    other_target = tiny_model("qwen2", seed=1)
    refitted = baseline_ridge(source, other_target, documents, native_tail=3, **fit)
    assert len(reads) == 3 and refitted.card.target_fingerprint == other_target.fingerprint.id


def test_foreign_source_cache_is_refused(pair, ridge):
    source, target = pair
    other = tiny_model("qwen2")
    cache, _ = cache_ops.prefill(other, other.tokenizer(TEXT, return_tensors="pt").input_ids)
    with pytest.raises(Exception, match="expects source"):
        ridge.translate(
            cache,
            TEXT,
            source_spec=other.spec,
            source_tokenizer=other.tokenizer,
            target_spec=target.spec,
            target_tokenizer=target.tokenizer,
        )


@pytest.fixture
def umask_022():
    """The usual umask, whatever the runner's: the files' modes are then the writer's doing."""
    previous = os.umask(0o022)
    yield
    os.umask(previous)


def test_checkpoint_round_trip_is_bit_exact(tmp_path, pair, samples, umask_022):
    source, target = pair
    train, val = samples
    recipe = Recipe(
        context_tokens=[6], continuation_tokens=8, steps=3, val_every=3, val_samples=2, stats_samples=4, native_tail=2
    )
    trained = train_pair(source, target, train, val, recipe, tmp_path / "ck")
    loaded = load_translator(tmp_path / "ck")
    assert loaded.card.version == trained.card.version and loaded.card.version.startswith("mixture-")
    for (name, a), (_, b) in zip(trained.state_dict().items(), loaded.state_dict().items(), strict=True):
        assert torch.equal(a, b), name
    assert loaded.card.metrics["validation"]["step"] == 3
    rerouted = loaded.with_top_k(1)  # same weights, computing something else
    rerouted.save(tmp_path / "top1")
    assert rerouted.card.version != trained.card.version
    # readable by a service running as another user (the image's uid 1000 reading a mounted volume)
    # (and its resume state: a training job resumed by another user)
    for directory in (tmp_path / "top1", tmp_path / "ck"):
        assert {f.name: stat.S_IMODE(f.stat().st_mode) for f in directory.iterdir()} == {
            f.name: 0o644 for f in directory.iterdir()
        }


@pytest.mark.parametrize("dtype", [torch.bfloat16, torch.int8])
def test_shipping_dtypes_load_exactly_what_the_module_computes(tmp_path, monkeypatch, pair, samples, dtype):
    from mot_core.translation import translator as translator_module

    monkeypatch.setattr(translator_module, "INT8_MIN_ELEMENTS", 64)  # tiny models: quantise their matrices too
    source, target = pair
    train, val = samples
    recipe = Recipe(
        context_tokens=[6], continuation_tokens=8, steps=2, val_every=2, val_samples=2, stats_samples=4, native_tail=2
    )
    trained = train_pair(source, target, train, val, recipe, tmp_path / "ck")
    before = {k: v.clone() for k, v in trained.state_dict().items()}
    trained.save(tmp_path / "full")
    trained.save(tmp_path / "shipped", dtype=dtype)
    loaded = load_translator(tmp_path / "shipped")
    assert loaded.card.version == trained.card.version
    for name, value in trained.state_dict().items():
        assert torch.equal(value, loaded.state_dict()[name]), name  # what is saved is what the module now computes
        assert torch.allclose(value, before[name], rtol=0.02, atol=0.02 * float(before[name].abs().max())), name
    size = lambda d: (tmp_path / d / "translator.safetensors").stat().st_size  # noqa: E731
    assert size("shipped") < 0.6 * size("full")


def test_the_card_counts_the_steps_with_a_row_loss(tmp_path, pair, samples, caplog):
    """Past the target's sliding window the native rows are not all kept, so the row loss (and
    --value-weight) cannot apply: the run says so rather than silently training without it."""
    source, target = pair
    train, val = samples
    small = dict(continuation_tokens=8, steps=2, val_every=2, val_samples=2, stats_samples=4, native_tail=2)
    inside = train_pair(source, target, train, val, Recipe(context_tokens=[6], **small), tmp_path / "inside")
    assert inside.card.metrics["row_loss_steps"] == 2
    long_train = cut_samples([demo_text()], source.tokenizer, context_tokens=24, continuation_chars=60, count=4, seed=0)
    with caplog.at_level("WARNING", logger="mot_core.translation.train"):
        past = train_pair(
            source,
            target,
            long_train,
            val,
            Recipe(context_tokens=[24], init=str(tmp_path / "inside"), **small),
            tmp_path / "past",
        )
    assert past.card.metrics["row_loss_steps"] == 0
    assert "no row loss" in caplog.text


def test_fine_tuning_starts_from_the_given_checkpoint(tmp_path, pair, samples):
    source, target = pair
    train, val = samples
    small = dict(context_tokens=[6], continuation_tokens=8, val_every=1, val_samples=2, stats_samples=4, native_tail=2)
    first = train_pair(source, target, train, val, Recipe(steps=2, **small), tmp_path / "first")
    frozen = Recipe(steps=1, lr=0.0, init=str(tmp_path / "first"), **small)  # lr 0: weights stay as loaded
    tuned = train_pair(source, target, train, val, frozen, tmp_path / "tuned")
    for (name, a), (_, b) in zip(first.state_dict().items(), tuned.state_dict().items(), strict=True):
        assert torch.equal(a, b), name
    assert tuned.card.recipe["init"] == str(tmp_path / "first")
    with pytest.raises(MotError, match="not"):
        train_pair(target, source, train, val, frozen, tmp_path / "swapped")


def test_training_through_the_recompute_learns_what_the_target_loads(tmp_path, pair, samples):
    """The loss after the target's recompute: all of it recomputed leaves nothing to learn; half of it
    still sends gradients through the target's attention into the translator."""
    from mot_core.translation.objective import prepare

    source, target = pair
    train, val = samples
    small = dict(context_tokens=[6], continuation_tokens=8, val_every=1, val_samples=2, stats_samples=4, native_tail=2)
    first = train_pair(source, target, train, val, Recipe(steps=2, **small), tmp_path / "first")
    assert first.card.recompute_fraction is None
    for init in ("", str(tmp_path / "first")):  # neither a fresh translator nor this card has an operating point
        with pytest.raises(MotError, match="needs an operating point"):
            recipe = Recipe(steps=1, through_recompute=True, init=init, **small)
            train_pair(source, target, train, val, recipe, tmp_path / "x")

    point = dict(recompute=0.5, recompute_recent=0.25, through_recompute=True)
    recipe = Recipe(steps=1, init=str(tmp_path / "first"), **point, **small)
    tuned = train_pair(source, target, train, val, recipe, tmp_path / "tuned")
    assert (tuned.card.recompute_fraction, tuned.card.recompute_recent) == (0.5, 0.25)
    assert tuned.card.recipe["through_recompute"] and math.isfinite(tuned.card.metrics["history"][0]["retention"])
    recipe = Recipe(steps=1, through_recompute=True, init=str(tmp_path / "tuned"), **small)
    again = train_pair(source, target, train, val, recipe, tmp_path / "again")
    assert (again.card.recompute_fraction, again.card.recompute_recent) == (0.5, 0.25)  # kept from --init

    prepared = prepare(source, target, train[0], 8, 2)
    recipe = Recipe(through_recompute=True, mse_weight=0.0, **small)

    def loss_and_grad(fraction: float, recent: float) -> tuple[dict[str, float], float]:
        again.card.recompute_fraction, again.card.recompute_recent = fraction, recent
        again.zero_grad()
        loss, parts = sample_loss(again, source, target, prepared, recipe)
        loss.backward()
        return parts, sum(p.grad.abs().sum().item() for p in again.parameters() if p.grad is not None)

    everything, no_grad = loss_and_grad(1.0, 0.0)
    assert everything["kl"] == pytest.approx(0.0, abs=1e-5) and no_grad == pytest.approx(0.0, abs=1e-6)
    half, grad = loss_and_grad(0.5, 0.25)
    assert half["kl"] > 1e-4 and grad > 0


def test_the_differentiable_recompute_computes_what_the_served_one_does(pair, samples):
    from mot_core.translation.objective import blended_cache, prepare, translated_cache, translated_rows
    from mot_core.translation.train import _new_translator

    source, target = pair
    train, _ = samples
    prepared = prepare(source, target, train[0], 8, 2)
    translator = _new_translator(source, target, Recipe(native_tail=2), [prepared])
    point = OperatingPoint(0.5, recent=0.25)
    with torch.no_grad():
        rows = translated_rows(translator, prepared, target, all_positions=True)
        trained_on = cache_ops.to_model_cache(target, blended_cache(target, rows, prepared, point))
    served = cache_ops.to_model_cache(target, translated_cache(translator, prepared, target, point))
    # serving runs the translator's matmuls in bfloat16 where the CPU has them (serving_dtype): its
    # rows then differ by that rounding, carried through the recompute, so the tolerance scales with it
    rtol = 2 * torch.finfo(serving_dtype("cpu")).eps
    for a, b in zip(trained_on.layers, served.layers, strict=True):
        torch.testing.assert_close(b.keys, a.keys, rtol=rtol, atol=1e-2)
        torch.testing.assert_close(b.values, a.values, rtol=rtol, atol=1e-2)


def test_content_focus_weighs_the_tokens_the_context_helps_predict(pair, samples):
    from mot_core.translation.objective import content_weights, nll_per_token, prepare
    from mot_core.translation.train import _new_translator

    ids = torch.tensor([[1, 2, 3, 4]])
    unaided = torch.zeros(4, 8)  # uniform: NLL log 8 at every token
    native = unaided.clone()
    native[0, 1], native[1, 2] = 4.0, 2.0  # the context helps the first token most, the second less
    native[3, 0] = 3.0  # and makes the last one worse
    benefit = nll_per_token(unaided, ids) - nll_per_token(native, ids)
    assert benefit[0] > benefit[1] > 0 == benefit[2] > benefit[3]

    assert torch.equal(content_weights(native, unaided, ids, 0.0), torch.ones(4))
    alone = content_weights(native, unaided, ids, 1.0)
    assert alone.mean().item() == pytest.approx(1.0)
    assert alone[0] > alone[1] > 0 and alone[2] == alone[3] == 0
    assert torch.allclose(content_weights(native, unaided, ids, 0.5), 0.5 + 0.5 * alone)
    assert torch.equal(content_weights(unaided, unaided, ids, 1.0), torch.ones(4))  # nothing helps: alike

    source, target = pair
    train, _ = samples
    prepared = prepare(source, target, train[0], 8, 2)
    translator = _new_translator(source, target, Recipe(native_tail=2), [prepared])
    plain, _ = sample_loss(translator, source, target, prepared, Recipe(native_tail=2, mse_weight=0.0))
    recipe = Recipe(native_tail=2, mse_weight=0.0, content_focus=1.0)
    focused, _ = sample_loss(translator, source, target, prepared, recipe)
    assert math.isfinite(focused.item()) and focused.item() != pytest.approx(plain.item())
    focused.backward()
    assert any(p.grad is not None and p.grad.abs().sum() > 0 for p in translator.parameters())


def test_a_second_corpus_is_spread_through_training_and_leaves_the_first_cut_alone(pair):
    """``mot train --news``: fewer speech contexts are a prefix of the full cut (an ablation changes
    only the mix), and the news contexts are spread over the steps rather than bunched at the end."""
    source, _ = pair
    text = demo_text()
    full = cut_lengths([text[:20000]], source.tokenizer, [6, 9], 20, seed=0)
    by_length = [
        cut_samples([text[:20000]], source.tokenizer, context_tokens=n, count=10, seed=i) for i, n in enumerate([6, 9])
    ]
    assert full[0::2] == by_length[0] and full[1::2] == by_length[1]  # lengths alternate, one cut each
    fewer = cut_lengths([text[:20000]], source.tokenizer, [6, 9], 11, seed=0)
    assert fewer == full[:11]
    other = cut_lengths([text[20000:]], source.tokenizer, [6, 9], 9, seed=1000)
    mixed = interleave(fewer, other)
    assert len(mixed) == 20
    assert [s for s in mixed if s in fewer] == fewer and [s for s in mixed if s in other] == other
    where = [i for i, s in enumerate(mixed) if s in other]
    assert where[0] <= 2 and where[-1] >= 17 and max(b - a for a, b in itertools.pairwise(where)) <= 3
    assert interleave(fewer, []) == fewer


def test_recall_samples_repeat_their_own_context(tmp_path, pair, samples):
    source, target = pair
    train, val = samples
    recalled = with_recall(train, 1.0, seed=3)
    for plain, recall in zip(train, recalled, strict=True):
        assert recall.context == plain.context and recall.continuation.startswith("\n")
        assert recall.continuation[1:] and recall.continuation[1:] in plain.context
    assert with_recall(train, 0.0, seed=3) == train
    mixed = with_recall(train, 0.5, seed=3)
    assert 0 < sum(m != t for m, t in zip(mixed, train, strict=True)) < len(train)
    assert with_recall(train, 0.5, seed=3) == mixed  # deterministic given the seed
    small = dict(context_tokens=[6], continuation_tokens=8, val_every=1, val_samples=2, stats_samples=4, native_tail=2)
    trained = train_pair(source, target, train, val, Recipe(steps=1, recall=0.5, **small), tmp_path / "recall")
    validation = trained.card.metrics["validation"]
    for condition in ("native", "none", "translated"):  # the repeats are validated beside the plain samples
        assert math.isfinite(validation[f"recall_nll_{condition}"]) and math.isfinite(validation[f"nll_{condition}"])


def test_more_mixtures_start_from_the_same_translator(tmp_path, pair, samples):
    """Widening to more source-layer mixtures (and loading a checkpoint saved before they existed)
    keeps what the translator computes, so fine-tuning starts where the checkpoint was."""
    from mot_core.translation.mixture import MixtureTranslator
    from mot_core.translation.objective import prepare

    source, target = pair
    train, val = samples
    small = dict(context_tokens=[6], continuation_tokens=8, val_every=10, val_samples=2, stats_samples=4, native_tail=2)
    one = train_pair(source, target, train, val, Recipe(steps=3, mixes=1, **small), tmp_path / "one")
    rows = prepare(source, target, val[0], 8, 2).aligned_rows
    with torch.no_grad():
        reference = one.predict_rows(rows, all_positions=True)
        wider = one.with_mixes(3)
        assert wider.layer_logits.shape[1] == 3 and wider.card.config["mixes"] == 3
        torch.testing.assert_close(wider.predict_rows(rows, all_positions=True), reference)
        legacy_card = one.card.__class__(**{**one.card.__dict__, "config": {**one.card.config}})
        legacy_card.config.pop("mixes")
        legacy = {k: v.squeeze(1) if k in ("layer_logits", "base") else v for k, v in one.state_dict().items()}
        reloaded = MixtureTranslator.from_card(legacy_card)
        reloaded.load_state_dict(legacy)
        torch.testing.assert_close(reloaded.predict_rows(rows, all_positions=True), reference)
    tuned = train_pair(
        source,
        target,
        train,
        val,
        Recipe(steps=1, lr=0.0, mixes=3, init=str(tmp_path / "one"), **small),
        tmp_path / "tuned",
    )
    assert tuned.mixes == 3
    history = tuned.card.metrics["history"]
    assert history[0]["step"] == 0 and history[0]["retention"] == pytest.approx(history[-1]["retention"], abs=1e-5)


def test_wider_experts_start_from_the_same_translator(tmp_path, pair, samples):
    """Widening the experts keeps what the translator computes; fine-tuning then moves the new units."""
    from mot_core.translation.objective import prepare

    source, target = pair
    train, val = samples
    small = dict(context_tokens=[6], continuation_tokens=8, val_every=10, val_samples=2, stats_samples=4, native_tail=2)
    narrow = train_pair(source, target, train, val, Recipe(steps=3, mixes=1, hidden=8, **small), tmp_path / "narrow")
    rows = prepare(source, target, val[0], 8, 2).aligned_rows
    with torch.no_grad():
        wider = narrow.with_hidden(12)
        assert wider.hidden == 12 and wider.card.config["hidden"] == 12
        torch.testing.assert_close(
            wider.predict_rows(rows, all_positions=True), narrow.predict_rows(rows, all_positions=True)
        )
    with pytest.raises(ValueError, match="narrow"):
        wider.with_hidden(8)
    tuned = train_pair(
        source,
        target,
        train,
        val,
        Recipe(steps=2, lr=1e-2, mixes=1, hidden=12, init=str(tmp_path / "narrow"), **small),
        tmp_path / "tuned",
    )
    assert tuned.hidden == 12
    assert tuned.w_out[:, :, 8:].abs().sum() > 0  # the new units learnt to write


def test_training_reduces_the_loss(pair, samples):
    source, target = pair
    train, val = samples
    recipe = Recipe(
        context_tokens=[6],
        continuation_tokens=8,
        steps=40,
        lr=5e-3,
        val_every=1000,
        val_samples=2,
        stats_samples=8,
        native_tail=2,
    )
    from mot_core.translation.objective import prepare
    from mot_core.translation.train import _new_translator

    torch.manual_seed(0)
    fixed = [prepare(source, target, s, 8, 2) for s in train[:8]]
    translator = _new_translator(source, target, recipe, fixed)
    optimizer = torch.optim.AdamW(translator.parameters(), lr=recipe.lr)

    def mean_loss() -> float:
        with torch.no_grad():
            return sum(sample_loss(translator, source, target, p, recipe)[0].item() for p in fixed) / len(fixed)

    before = mean_loss()
    for step in range(recipe.steps):
        loss, _ = sample_loss(translator, source, target, fixed[step % len(fixed)], recipe)
        optimizer.zero_grad()
        loss.backward()
        optimizer.step()
    assert mean_loss() < 0.9 * before


def test_eval_conditions_share_samples(pair, ridge, samples):
    source, target = pair
    _, val = samples
    result = evaluate(
        source, target, {"translated": ridge, "ridge": ridge}, {6: val[:2]}, native_tail=2, continuation_tokens=8
    )
    rows = {r["condition"]: r for r in result.rows}
    assert set(rows) == {"native", "none", "translated", "deranged", "ridge", "native-deranged"}
    assert {r["samples"] for r in rows.values()} == {2}
    assert rows["native"]["kl"] == 0 and rows["native"]["top1"] == 1 and rows["native"]["retention"] == 1
    assert rows["translated"]["nll"] == rows["ridge"]["nll"]  # same translator, same samples -> same numbers
    assert "content_gain" in result.per_length[6] and result.per_length[6]["native_prefill_s"] > 0
    assert rows["native-deranged"]["nll"] != rows["native"]["nll"]  # another sample's context, not this one's
    native_gain = result.per_length[6]["native_content_gain"]
    assert native_gain == pytest.approx(1 - rows["native-deranged"]["retention"])


def test_a_condition_that_older_journal_records_lack_gets_no_row():
    """A journal begun before ``native-deranged`` existed still reports, without averaging the new
    condition over records that never scored it."""
    from mot_core.evaluation import _summarise

    def record(*conditions):
        scores = {"nll": 2.0, "kl": 0.1, "top1": 3, "greedy": 1}
        return {"tokens": 4, "greedy_tokens": 2, "conditions": {c: dict(scores) for c in conditions}}

    old = record("native", "none", "translated", "deranged")
    new = record("native", "none", "translated", "deranged", "native-deranged")
    rows, info = _summarise(6, [old, new], {}, {})
    assert [r["condition"] for r in rows] == ["native", "none", "translated", "deranged"]
    assert "native_content_gain" not in info
    rows, info = _summarise(6, [new, new], {}, {})
    assert rows[-1]["condition"] == "native-deranged" and "native_content_gain" in info


def test_a_run_resumed_on_another_machine_reports_the_cost_of_each():
    """Timings from two machines (a journal resumed elsewhere) get a ratio per machine beside the
    pooled one; records from before the machine was recorded count as their own group."""
    from mot_core.evaluation import _summarise

    def record(native_s, translate_s, machine=None):
        scores = {"nll": 2.0, "kl": 0.1, "top1": 3, "greedy": 1}
        timing = {"native_s": native_s, "translate_s": {"translated": translate_s}}
        if machine is not None:
            timing["machine"] = machine
        conditions = {c: dict(scores) for c in ("native", "none", "translated", "deranged")}
        return {"tokens": 4, "greedy_tokens": 2, "conditions": conditions, "timing": timing}

    one_machine = [record(4.0, 1.0, "cpu A"), record(5.0, 1.0, "cpu A")]
    _, info = _summarise(6, one_machine, {}, {"translated": None})
    assert "cost_by_machine" not in info
    mixed = [*one_machine, record(2.0, 0.6, "cpu B"), record(3.0, 0.5)]
    _, info = _summarise(6, mixed, {}, {"translated": None})
    by_machine = info["cost_by_machine"]
    assert by_machine["cpu A"] == {"samples": 2, "translate_over_prefill": pytest.approx(1.0 / 4.5)}
    assert by_machine["cpu B"]["translate_over_prefill"] == pytest.approx(0.3)
    assert by_machine["not recorded"]["samples"] == 1


@pytest.mark.parametrize("arch", ["llama", "qwen2", "gemma3_text"])
def test_rows_and_caches_convert_both_ways(arch):
    """kv_rows then rows_to_cache gives the model's own cache back (head and K/V layout included)."""
    from mot_core.translation.assemble import rows_to_cache
    from mot_core.translation.features import key_columns, kv_rows

    lm = tiny_model(arch)
    ids = lm.tokenizer("The quick brown", return_tensors="pt").input_ids[:, :7]  # inside the tiny Gemma window
    cache, _ = cache_ops.prefill(lm, ids)
    rows = kv_rows(cache, lm.spec)
    rebuilt = rows_to_cache(rows, lm.spec, ids, lm.fingerprint.id)
    for a, b in zip(rebuilt.keys + rebuilt.values, cache.keys + cache.values, strict=True):
        torch.testing.assert_close(a, b, atol=1e-5, rtol=1e-5)
    # key_columns picks the keys out of a row: with the values zeroed the keys still come back
    keys_only = rows_to_cache(rows * key_columns(lm.spec), lm.spec, ids, lm.fingerprint.id)
    for a, b in zip(keys_only.keys, cache.keys, strict=True):
        torch.testing.assert_close(a, b, atol=1e-5, rtol=1e-5)
    assert all(v.abs().max() == 0 for v in keys_only.values)


def test_align_rows_mixes_each_layer_by_the_alignment_and_stores_them_layer_major():
    """The sparse per-layer product equals the dense one, from rows stored either way, and comes out
    stored layer-major (what the translator's standardisation reads in order)."""
    from mot_core.translation.features import align_rows

    rows = torch.randn(6, 4, 10)  # [source tokens, layers, width]
    weights = torch.zeros(5, 6)
    weights[0, 0], weights[1, 1:3], weights[2, 3], weights[3, 3:5], weights[4, 5] = 1.0, 0.5, 1.0, 0.5, 1.0
    expected = torch.einsum("ts,slf->tlf", weights, rows)
    for stored in (rows, rows.transpose(0, 1).contiguous().transpose(0, 1)):
        for given in (weights, weights.to_sparse()):
            mixed = align_rows(stored, given)
            torch.testing.assert_close(mixed, expected)
            assert mixed.transpose(0, 1).is_contiguous()


def test_value_weight_scales_the_value_part_of_the_row_loss(pair, samples):
    """The row loss is keys' error + value_weight * values' error: linear in the weight."""
    from mot_core.translation.objective import prepare
    from mot_core.translation.train import _new_translator

    source, target = pair
    train, _ = samples
    prepared = prepare(source, target, train[0], 8, 2)
    translator = _new_translator(source, target, Recipe(native_tail=2), [prepared])
    rows_only = {"native_tail": 2, "kl_weight": 0.0, "ce_weight": 0.0}
    loss = {
        w: sample_loss(translator, source, target, prepared, Recipe(**rows_only, value_weight=w))[0].item()
        for w in (0.0, 1.0, 3.0)
    }
    keys, values = loss[0.0], loss[1.0] - loss[0.0]
    assert keys > 0 and values > 0
    assert loss[3.0] == pytest.approx(keys + 3 * values, rel=1e-4)


def test_read_weight_weighs_each_positions_row_error_by_what_the_continuation_reads(pair, samples):
    """read_weight 0 is the plain mean, 1 the error weighted by the native continuation's reading
    of each position (position 0, the sink, aside), and the loss is linear in between."""
    from mot_core.translation.objective import prepare, translated_rows
    from mot_core.translation.train import _new_translator, read_shares

    source, target = pair
    train, _ = samples
    prepared = prepare(source, target, train[0], 8, 2)
    translator = _new_translator(source, target, Recipe(native_tail=2), [prepared])
    shares = read_shares(target, prepared)
    assert shares.shape == (prepared.keep,) and shares[0] == 0 and shares.sum() == pytest.approx(1.0)
    assert shares[1:].std() > 0.1 * shares[1:].mean()  # not uniform: the weighting can differ from the mean
    rows_only = {"native_tail": 2, "kl_weight": 0.0, "ce_weight": 0.0}
    loss = {
        w: sample_loss(translator, source, target, prepared, Recipe(**rows_only, read_weight=w))[0].item()
        for w in (0.0, 0.5, 1.0)
    }
    keep = prepared.keep
    with torch.no_grad():
        rows = translated_rows(translator, prepared, target)
        error = (((rows[1:keep] - prepared.native_rows[1:keep]) / translator.target_std) ** 2).mean((1, 2))
    assert loss[0.0] == pytest.approx(error.mean().item(), rel=1e-4)
    assert loss[1.0] == pytest.approx((error * shares[1:keep]).sum().item() / shares[1:keep].sum().item(), rel=1e-4)
    assert loss[1.0] != pytest.approx(loss[0.0], rel=1e-3)
    assert loss[0.5] == pytest.approx((loss[0.0] + loss[1.0]) / 2, rel=1e-4)


def test_recomputing_every_token_gives_the_native_numbers(pair, ridge, samples):
    """The quality knob's end point: fraction 1 is the target's own prefill, whatever the translator."""
    source, target = pair
    _, val = samples
    result = evaluate(
        source,
        target,
        {"translated": ridge},
        {6: val[:2]},
        native_tail=2,
        continuation_tokens=8,
        knob=Knob(0.5, recent=0.25),
        sweep=[0.0, 1.0],
    )
    rows = {r["condition"]: r for r in result.rows}
    assert {"recompute@0", "recompute@1", "random@0.5", "error@0.5", "words-only@0.5", "recent-only@0.5"} <= set(rows)
    assert [rows[c]["recent"] for c in ("recompute@0", "recompute@1", "words-only@0.5", "recent-only@0.5")] == [
        0.0,
        0.25,
        0.0,
        0.5,
    ]
    assert rows["recompute@1"]["nll"] == pytest.approx(rows["native"]["nll"], abs=1e-4)
    assert rows["recompute@1"]["top1"] == 1 and rows["recompute@1"]["greedy_match"] == 1
    assert rows["recompute@0"]["selection"] == "words" and rows["random@0.5"]["selection"] == "random"
    assert rows["error@0.5"]["selection"] == "error" and "cost_ratio" not in rows["error@0.5"]
    assert all(rows[c]["cost_ratio"] > 0 for c in ("translated", "recompute@0", "recompute@1", "random@0.5"))
    for ablation in ("random@0.5", "words-only@0.5", "recent-only@0.5"):  # the operating point's timing
        assert rows[ablation]["cost_ratio"] == rows["translated"]["cost_ratio"]
    assert result.per_length[6]["recompute"] == 0.5 and result.per_length[6]["recent"] == 0.25


def test_report_has_the_issue_keys_and_renders(tmp_path, pair, ridge, samples):
    import json

    from mot_core.evaluation import write_report

    source, target = pair
    _, val = samples
    result = evaluate(
        source,
        target,
        {"translated": ridge, "ridge": ridge},
        {6: val[:2]},
        native_tail=2,
        continuation_tokens=8,
        sweep=[0.5],
    )
    qa = {"native": 0.9, "none": 0.5, "translated": 0.6, "ridge": 0.55, "recompute@0.5": 0.7}
    write_report(tmp_path, result, qa, {"source": "s", "target": "t"})
    report = json.loads((tmp_path / "report.json").read_text())
    scored = [r for r in report["rows"] if "context_tokens" in r]
    required = {"context_tokens", "condition", "nll", "retention", "kl", "top1", "greedy_match"}
    assert all(required <= set(r) for r in scored)
    assert all({"content_gain", "native_prefill_s", "translate_s"} <= set(r) for r in scored)
    assert {r["condition"]: r["qa_accuracy"] for r in report["rows"] if "qa_accuracy" in r} == qa
    assert report["qa_retention"] == pytest.approx(0.25)
    assert report["qa_retention_by_condition"]["recompute@0.5"] == pytest.approx(0.5)
    assert "recompute@0.5" in (tmp_path / "report.md").read_text()
    assert (tmp_path / "report.png").read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"


def test_sliding_layers_of_a_mixture_translation_hold_no_empty_rows(tmp_path, pair, samples):
    """A sliding layer keeps the window ending at the last cached token; predicting the window of the
    whole context instead (native tail included) left the tail's share of it at zero."""
    source, target = pair
    train, val = samples
    small = dict(context_tokens=[6], continuation_tokens=8, val_every=10, val_samples=2, stats_samples=4, native_tail=2)
    translator = train_pair(source, target, train, val, Recipe(steps=1, **small), tmp_path / "ck")
    cache = _translate_long_text(translator, source, target).cache
    sliding = [i for i, w in enumerate(target.spec.sliding_windows) if w is not None]
    assert sliding and cache.kept_len(sliding[0]) < cache.seq_len
    for layer in range(target.spec.num_layers):
        assert (cache.values[layer][0].abs().sum(-1) > 0).all(), f"layer {layer} holds empty rows"


def test_eval_prepares_each_sample_once_beside_its_control():
    from mot_core.evaluation import _with_neighbours
    from mot_core.translation.samples import Sample

    calls = []

    def prepare_one(sample):
        calls.append(sample.context)
        return f"prepared {sample.context}"

    def cut(names, documents=None):  # one document each unless told
        return [Sample(n, "", d) for n, d in zip(names, documents or range(len(names)), strict=True)]

    pairs = list(_with_neighbours(prepare_one, cut("abc")))
    assert pairs == [(0, "prepared a", "prepared b"), (1, "prepared b", "prepared c"), (2, "prepared c", "prepared a")]
    assert calls == ["a", "b", "c"]  # the first is kept for the last one's control, not prepared again
    assert list(_with_neighbours(prepare_one, cut("x"))) == [(0, "prepared x", None)]
    assert list(_with_neighbours(prepare_one, [])) == []
    calls.clear()  # going on after a stop: only what is left, and the controls it needs
    assert list(_with_neighbours(prepare_one, cut("abcd"), todo=[1, 3])) == [
        (1, "prepared b", "prepared c"),
        (3, "prepared d", "prepared a"),
    ]
    assert calls == ["b", "c", "d", "a"]


def test_the_deranged_control_comes_from_another_document_where_there_is_one():
    from mot_core.evaluation import _sample_inputs, control_index
    from mot_core.translation.samples import Sample

    samples = [Sample(c, "", d) for c, d in zip("abcde", [0, 0, 1, 1, 0], strict=True)]
    assert [control_index(samples, i) for i in range(5)] == [2, 2, 4, 4, 2]
    one_text = [Sample(c, "", 0) for c in "abc"]  # a .txt corpus: the next passage of the same text
    assert [control_index(one_text, i) for i in range(3)] == [1, 2, 0]
    assert control_index(samples[:1], 0) is None
    # the journal key follows the control: a sample whose control changed is scored again
    assert _sample_inputs(samples, 0) != _sample_inputs([*samples[:2], Sample("z", "", 1), *samples[3:]], 0)
    assert _sample_inputs(samples, 0) == _sample_inputs([*samples[:1], Sample("z", "", 0), *samples[2:]], 0)


def test_a_stopped_evaluation_goes_on_where_it_was(tmp_path, pair, ridge, samples):
    """Samples and QA items in the journal are not scored again, and the report is the same as one
    run; a journal written with other settings is refused."""
    from mot_core.journal import Journal, JournalMismatchError

    source, target = pair
    _, val = samples
    items = [{"context": val[0].context, "question": "What?", "choices": ["a b", "c d"], "answer": "c d"}] * 2
    common = dict(native_tail=2, continuation_tokens=8, knob=Knob(0.5))
    settings = {"translator": "ridge", "operating_point": 0.5}
    whole = evaluate(source, target, {"translated": ridge}, {6: val[:3]}, **common)

    path = tmp_path / "progress.jsonl"
    evaluate(source, target, {"translated": ridge}, {6: val[:2]}, **common, journal=Journal(path, settings))
    qa_accuracy(source, target, {"translated": ridge}, items[:1], native_tail=2, journal=Journal(path, settings))
    with path.open("a") as fh:
        fh.write('{"key": "6:2", "inp')  # a line cut short by a kill
    journal = Journal(path, settings)
    assert len(journal) == 3  # samples 0 and 1, QA item 0; the cut line is dropped
    resumed = evaluate(source, target, {"translated": ridge}, {6: val[:3]}, **common, journal=journal)
    # sample 1's control was sample 0 in the 2-sample run and is sample 2 now: it is scored again
    assert len(journal) == 4 and len(path.read_text().splitlines()) == 1 + 3 + 2
    for a, b in zip(whole.rows, resumed.rows, strict=True):
        assert a["condition"] == b["condition"] and a["samples"] == b["samples"] == 3
        assert a["nll"] == pytest.approx(b["nll"], abs=1e-5)
    qa_accuracy(source, target, {"translated": ridge}, items, native_tail=2, journal=journal)
    assert len(journal) == 5 and len(path.read_text().splitlines()) == 1 + 3 + 2 + 1
    assert all(json.loads(line) for line in path.read_text().splitlines())
    with pytest.raises(JournalMismatchError, match="operating_point"):
        Journal(path, {"translator": "ridge", "operating_point": 0.2})


def test_an_interim_report_reads_the_journal_and_writes_nothing(tmp_path, pair, ridge, samples):
    """``score=False`` reports the samples and QA items a run has journalled so far, and leaves the
    journal as it is, even a line that run may be writing at this moment."""
    from mot_core.evaluation import accuracy_of, qa_keys, qa_scored, write_report
    from mot_core.journal import Journal, JournalMismatchError

    source, target = pair
    _, val = samples
    items = [{"context": s.context, "question": "What?", "choices": ["a b", "c d"], "answer": "c d"} for s in val]
    knob = dict(native_tail=2, knob=Knob(0.5), ablations=False)
    common = dict(knob, continuation_tokens=8)
    settings = {"translator": "ridge", "operating_point": 0.5}
    path = tmp_path / "progress.jsonl"
    with pytest.raises(MotError, match="does not exist"):
        Journal(path, settings, read_only=True)
    translators = {"translated": ridge, "ridge": ridge}
    evaluate(source, target, translators, {6: val[:3]}, **common, journal=Journal(path, settings))
    qa_accuracy(source, target, translators, items[:2], **knob, journal=Journal(path, settings))
    lines = path.read_text().splitlines()
    path.write_text("\n".join(lines[:3] + lines[4:5]) + '\n{"key": "6:2", "inp')  # samples 0, 1, QA item 0
    written = path.read_bytes()

    journal = Journal(path, settings, read_only=True)
    interim = evaluate(source, target, {"translated": ridge}, {6: val[:3]}, **common, journal=journal, score=False)
    qa = qa_accuracy(source, target, {"translated": ridge}, items, **knob, journal=journal, score=False)
    assert path.read_bytes() == written
    records = [json.loads(line)["record"] for line in lines[1:3]]
    tokens = sum(r["tokens"] for r in records)
    for row in interim.rows:  # the ridge's rows too, although no ridge was given: they are in the journal
        assert row["samples"] == 2
        assert row["nll"] == pytest.approx(sum(r["conditions"][row["condition"]]["nll"] for r in records) / tokens)
    assert {r["condition"] for r in interim.rows} == {
        "native",
        "none",
        "translated",
        "deranged",
        "ridge",
        "native-deranged",
    }
    assert qa == {c: float(right) for c, right in json.loads(lines[4])["record"].items()}
    assert qa_scored(items, journal) == 1
    meta = {"samples": 3, "qa_items": 4, "qa_items_scored": 1, "report_only": True}
    write_report(tmp_path / "report", interim, qa, meta)
    assert "of 3 samples, 2 at 6 tokens, 1 of 4 QA items" in (tmp_path / "report" / "report.md").read_text()
    with pytest.raises(MotError, match="read-only"):
        journal.add("6:2", "x", {})
    with pytest.raises(JournalMismatchError, match="give that run's options"):
        Journal(path, {"translator": "ridge", "operating_point": 0.2}, read_only=True)
    assert accuracy_of([Journal.read(path).get(*key) for key in qa_keys(items)[:1]]) == qa  # its own settings
    assert path.read_bytes() == written


def test_mixture_computes_its_formula_per_token():
    """The layer-major, batched computation equals the translator's formula written per token and
    layer: a mixture of source layers, a linear map of all mixtures, plus the top-k experts on the
    first mixture; sliding layers only where the target keeps positions."""
    from mot_core.translation.mixture import MixtureTranslator
    from mot_core.translation.translator import TranslatorCard

    torch.manual_seed(0)
    windows = [None, 4, None, 4, 4]
    card = TranslatorCard("mixture", "s", "t", "s-fp", "t-fp")
    config = dict(source_layers=3, source_width=6, target_layers=5, target_width=4, target_windows=windows)
    translator = MixtureTranslator(card, **config, experts=3, top_k=2, hidden=5, mixes=2)
    with torch.no_grad():
        for parameter in translator.parameters():
            parameter.normal_()
        for name, buffer in translator.named_buffers():
            buffer.copy_(torch.rand_like(buffer) + 0.5 if name.endswith("std") else torch.randn_like(buffer))
    aligned = torch.randn(7, 3, 6)

    t = translator
    x = (aligned - t.source_mean) / t.source_std
    expected = torch.zeros(7, 5, 4)
    for layer, window in enumerate(windows):
        for token in range(7):
            if window is not None and token < 7 - (window - 1):
                continue  # outside the window the target keeps: left at zero
            mixed = t.layer_logits[layer].softmax(-1) @ x[token]  # [M, Fs]
            out = t.base_bias[layer] + sum(mixed[m] @ t.base[layer, m] for m in range(2))
            gate_logits = mixed[0] @ t.router[layer]
            top = gate_logits.topk(2)
            for gate, expert in zip(top.values.softmax(-1), top.indices, strict=True):
                out = out + gate * (F.gelu(mixed[0] @ t.w_in[layer, expert]) @ t.w_out[layer, expert])
            expected[token, layer] = out * t.target_std[layer] + t.target_mean[layer]
    with torch.no_grad():
        torch.testing.assert_close(translator.predict_rows(aligned), expected, rtol=1e-4, atol=1e-4)
        kept_everywhere = translator.predict_rows(aligned, all_positions=True)
    assert kept_everywhere[0, 1].abs().sum() > 0  # every position of the sliding layers too
    torch.testing.assert_close(kept_everywhere[4:], expected[4:], rtol=1e-4, atol=1e-4)
    torch.testing.assert_close(kept_everywhere[:, [0, 2]], expected[:, [0, 2]], rtol=1e-4, atol=1e-4)
    # serving (no autograd) standardises in place and, on a CPU (float32 here, bfloat16 under the
    # autocast below), runs each token's chosen experts only (routes_experts); training keeps the
    # graph and runs them all, gated
    with torch.no_grad():
        serving = translator.predict_rows(aligned)
    training = translator.predict_rows(aligned)
    assert training.requires_grad
    torch.testing.assert_close(training.detach(), expected, rtol=1e-4, atol=1e-4)
    torch.testing.assert_close(serving, training.detach(), rtol=1e-5, atol=1e-5)
    # under autocast, serving keeps its weights cast between calls (the same operands as autocast's
    # own casts on every call), and a parameter changed in place (an optimiser step) is cast again
    with torch.autocast("cpu", dtype=torch.bfloat16):
        with torch.no_grad():
            kept_cast = translator.predict_rows(aligned)
            assert torch.equal(kept_cast, translator.predict_rows(aligned))
        torch.testing.assert_close(kept_cast, training.detach(), rtol=0.05, atol=0.1)
        with torch.no_grad():
            translator.w_out.mul_(2)
            after_step = translator.predict_rows(aligned)
        assert not torch.equal(after_step, kept_cast)
        torch.testing.assert_close(after_step, translator.predict_rows(aligned).detach(), rtol=0.05, atol=0.1)
    # the output scale is folded into the serving weights: new statistics (a buffer) are folded in again
    with torch.no_grad():
        before = translator.predict_rows(aligned, all_positions=True)
        translator.target_mean.add_(1.0)
        after = translator.predict_rows(aligned, all_positions=True)
        torch.testing.assert_close(after, before + 1.0, rtol=1e-5, atol=1e-5)


def test_serving_rounds_its_matmuls_up_to_repeating_shapes_and_keeps_only_its_rows():
    """Serving on a CPU computes a multiple of ``ROW_BUCKET`` rows per product (padding past the
    context, each expert's group run over the rows after it), so that a new context meets kernels
    built for an earlier one; the rows it returns are those of the exact computation (training's,
    which neither pads nor routes), for every length around the bucket and for sliding layers."""
    from mot_core.translation import mixture
    from mot_core.translation.mixture import MixtureTranslator
    from mot_core.translation.translator import TranslatorCard

    torch.manual_seed(1)
    card = TranslatorCard("mixture", "s", "t", "s-fp", "t-fp")
    config = dict(source_layers=3, source_width=6, target_layers=3, target_width=4, target_windows=[None, 40, None])
    translator = MixtureTranslator(card, **config, experts=3, top_k=2, hidden=5, mixes=2)
    with torch.no_grad():
        for parameter in translator.parameters():
            parameter.normal_()
    shapes = set()
    matmul = torch.Tensor.__matmul__

    def recording(a, b):
        if tuple(b.shape) in ((6, 5), (5, 4)):  # an expert's input and output maps
            shapes.add(a.shape[-2])
        return matmul(a, b)

    for length in (mixture.ROW_BUCKET - 1, mixture.ROW_BUCKET + 1, 2 * mixture.ROW_BUCKET + 7):
        aligned = torch.randn(length, 3, 6)
        for all_positions in (False, True):
            exact = translator.predict_rows(aligned, all_positions=all_positions).detach()
            with torch.no_grad(), patch.object(torch.Tensor, "__matmul__", recording):
                served = translator.predict_rows(aligned, all_positions=all_positions)
            assert served.shape == exact.shape == (length, 3, 4)
            torch.testing.assert_close(served, exact, rtol=1e-5, atol=1e-5)
    assert shapes and all(rows % mixture.ROW_BUCKET == 0 for rows in shapes)  # every expert's products


@pytest.mark.parametrize("dtype", [torch.bfloat16, torch.float32])
def test_warm_up_runs_every_serving_row_count_where_a_new_shape_builds_kernels(dtype):
    """Where the translator serves in bfloat16 on a CPU (each new matmul shape builds kernels),
    ``warm_up_shapes`` runs every row count a context up to the given size is served with, the
    experts' products over each of them too; in float32 it runs nothing."""
    from mot_core.translation import mixture
    from mot_core.translation.mixture import MixtureTranslator
    from mot_core.translation.translator import TranslatorCard

    card = TranslatorCard("mixture", "s", "t", "s-fp", "t-fp", recompute_fraction=0.1)
    config = dict(source_layers=3, source_width=6, target_layers=2, target_width=4, target_windows=[None, 40])
    translator = MixtureTranslator(card, **config, experts=3, top_k=1, hidden=5)
    served, expert_rows = [], set()
    inference_rows, matmul = translator.inference_rows, torch.Tensor.__matmul__

    def recording(aligned, **kwargs):
        served.append((aligned.shape[0], kwargs["all_positions"]))
        return inference_rows(aligned, **kwargs)

    def expert_matmul(a, b):
        if tuple(b.shape) == (6, 5):  # an expert's input map
            expert_rows.add(a.shape[-2])
        return matmul(a, b)

    bucket = mixture.ROW_BUCKET
    with (
        patch.object(mixture, "serving_dtype", lambda device_type: dtype),
        patch.object(translator, "inference_rows", recording),
        patch.object(torch.Tensor, "__matmul__", expert_matmul),
    ):
        counts = translator.warm_up_shapes(2 * bucket + 7)
    if dtype == torch.float32:
        assert counts == 0 and not served
        return
    rows = [bucket, 2 * bucket, 3 * bucket]
    assert counts == 3 and served == [(n, True) for n in rows]  # all positions: the card has an operating point
    assert expert_rows == set(rows)


def test_a_rerouted_translator_is_the_same_weights_at_another_k(tmp_path):
    """``with_top_k``: what a module built with that k holds and computes, as its own version with
    its parent named; the parent is untouched; a k the experts cannot give is refused."""
    from dataclasses import replace

    from mot_core.translation.mixture import MixtureTranslator
    from mot_core.translation.translator import TranslatorCard

    config = dict(source_layers=3, source_width=6, target_layers=2, target_width=4, target_windows=[None, 4])
    config |= dict(experts=3, top_k=2, hidden=5)
    card = TranslatorCard("mixture", "s", "t", "s-fp", "t-fp", config=config, metrics={"validation": {"step": 3}})
    torch.manual_seed(0)
    parent = MixtureTranslator.from_card(card)
    with torch.no_grad():
        for parameter in parent.parameters():
            parameter.normal_()
    parent.save(tmp_path / "parent")
    rerouted = parent.with_top_k(1)
    built = MixtureTranslator.from_card(replace(card, config=config | {"top_k": 1}))
    built.load_state_dict(parent.state_dict())
    aligned = torch.randn(7, 3, 6)
    with torch.no_grad():
        torch.testing.assert_close(rerouted.predict_rows(aligned), built.predict_rows(aligned), rtol=0, atol=0)
        assert not torch.allclose(rerouted.predict_rows(aligned), parent.predict_rows(aligned))
    assert parent.top_k == parent.card.config["top_k"] == 2 and "rerouted" not in parent.card.recipe
    rerouted.save(tmp_path / "top1")
    loaded = load_translator(tmp_path / "top1")
    assert loaded.top_k == 1 and loaded.card.version not in ("", parent.card.version)
    assert loaded.card.recipe["rerouted"] == {"from": parent.card.version, "top_k": 1}
    assert loaded.card.metrics == {"parent": {"validation": {"step": 3}}}  # measured at k=2, not its own
    again = loaded.with_top_k(3)  # rerouted twice: still the trained translator and its metrics
    assert again.card.recipe["rerouted"]["from"] == parent.card.version and again.card.metrics == loaded.card.metrics
    for k in (0, 4):
        with pytest.raises(ValueError, match="between 1 and the 3 experts"):
            parent.with_top_k(k)


def test_a_translator_made_under_inference_mode_serves_and_sees_its_changes():
    """Inference tensors have no version counter for the serving weights' cache to read: such a
    translator (loaded inside ``torch.inference_mode``, as a server may) serves the same rows and
    follows an in-place change of its weights."""
    from mot_core.translation.mixture import MixtureTranslator
    from mot_core.translation.translator import TranslatorCard

    card = TranslatorCard("mixture", "s", "t", "s-fp", "t-fp")
    config = dict(source_layers=3, source_width=6, target_layers=2, target_width=4, target_windows=[None, None])
    torch.manual_seed(0)
    plain = MixtureTranslator(card, **config, experts=3, top_k=2, hidden=5)
    with torch.no_grad():
        for parameter in plain.parameters():
            parameter.normal_()
    aligned = torch.randn(7, 3, 6)
    with torch.inference_mode():
        loaded = MixtureTranslator(card, **config, experts=3, top_k=2, hidden=5)
        loaded.load_state_dict(plain.state_dict())
        assert all(p.is_inference() for p in loaded.parameters())
        rows = loaded.predict_rows(aligned)
        with torch.no_grad():
            torch.testing.assert_close(rows, plain.predict_rows(aligned))
        loaded.target_mean.add_(1.0)
        torch.testing.assert_close(loaded.predict_rows(aligned), rows + 1.0)


def test_a_phrases_operating_point_is_ablated_by_every_simpler_selection():
    from mot_core.evaluation import sweep_variants

    variants = sweep_variants(Knob(0.1, "phrases", recent=0.03), [0.2])
    assert {name: v.point.selection for name, v in variants.items()} == {
        "recompute@0.2": "phrases",
        "words@0.1": "words",
        "surprisal@0.1": "surprisal",
        "error@0.1": "error",
        "random@0.1": "random",
        "phrases-only@0.1": "phrases",
        "recent-only@0.1": "words",  # no budget left for a selection
    }
    assert variants["phrases-only@0.1"].point.recent == 0.0 and variants["recent-only@0.1"].point.recent == 0.1
    assert all(v.ablation for name, v in variants.items() if name != "recompute@0.2")
    # a words point is not ablated by a finer one
    assert "phrases@0.1" not in sweep_variants(Knob(0.1, recent=0.03), [])


def test_an_attended_operating_point_is_ablated_without_its_share():
    from mot_core.evaluation import sweep_variants

    variants = sweep_variants(Knob(0.1, "phrases", recent=0.03, attended=0.03), [0.2, 0.04])
    assert variants["no-attended@0.1"].point.attended == 0.0 and variants["no-attended@0.1"].point.recent == 0.03
    assert variants["words@0.1"].point.attended == 0.03 and variants["recompute@0.2"].point.attended == 0.03
    assert variants["recompute@0.04"].point.attended == pytest.approx(0.01)  # what fits after the recent share
    assert variants["phrases-only@0.1"].point.attended == 0.0 and variants["recent-only@0.1"].point.attended == 0.0


def test_card_refuses_a_recent_share_beyond_its_fraction():
    """The share from the end is part of the recompute fraction: a card that says otherwise fails
    when it is loaded, not on the first request that recomputes."""
    from mot_core.errors import MotError
    from mot_core.translation.translator import TranslatorCard

    card = TranslatorCard("mixture", "s", "t", "s-fp", "t-fp", recompute_fraction=0.1, recompute_recent=0.03)
    assert card.operating_point == OperatingPoint(0.1, "words", recent=0.03)
    assert TranslatorCard("mixture", "s", "t", "s-fp", "t-fp").operating_point is None  # pure translation
    with pytest.raises(MotError, match="got recent 0.2, attended 0.0, fraction 0.1"):
        TranslatorCard("mixture", "s", "t", "s-fp", "t-fp", recompute_fraction=0.1, recompute_recent=0.2)
    assert card.recompute_selection == "words"  # cards written before the field: what they were measured with
    with pytest.raises(MotError, match="unknown selection 'names'"):
        TranslatorCard("mixture", "s", "t", "s-fp", "t-fp", recompute_fraction=0.1, recompute_selection="names")
    shares = dict(recompute_fraction=0.1, recompute_recent=0.03)
    assert TranslatorCard("mixture", "s", "t", "s-fp", "t-fp", 4, recompute_attended=0.07, **shares)
    with pytest.raises(MotError, match="attended 0.08"):  # with the recent share, more than the fraction
        TranslatorCard("mixture", "s", "t", "s-fp", "t-fp", 4, recompute_attended=0.08, **shares)
    # the source observed what the end reads: no native tail needed
    assert TranslatorCard("mixture", "s", "t", "s-fp", "t-fp", 0, recompute_attended=0.03, **shares)


def test_the_target_first_layer_input_starts_where_the_translator_was(tmp_path, pair, samples):
    """Adding the target's layer-0 rows as an input changes nothing but layer 0, which becomes exactly
    the target's own; fine-tuning then uses the input (its map leaves zero), and the served path
    (``translate`` with the target's layer 0 loaded on its own) computes the same rows."""
    from mot_core.loading import load_first_layer
    from mot_core.tiny import save_tiny
    from mot_core.translation.objective import prepare, translated_cache

    source, target = pair
    train, val = samples
    small = dict(context_tokens=[6], continuation_tokens=8, val_every=10, val_samples=2, stats_samples=4, native_tail=2)
    plain = train_pair(source, target, train, val, Recipe(steps=2, mixes=1, **small), tmp_path / "plain")
    prepared = prepare(source, target, val[0], 8, 2)
    rows, first = prepared.aligned_rows[: prepared.keep], prepared.first_layer_rows
    with torch.no_grad():
        reference = plain.predict_rows(rows, all_positions=True)
        reading = plain.with_first_layer_input(first)
        assert reading.reads_first_layer and reading.card.config["first_layer_input"]
        with pytest.raises(ValueError, match="layer-0 rows"):
            reading.predict_rows(rows)
        widened = reading.predict_rows(rows, all_positions=True, first_layer=first)
    torch.testing.assert_close(widened[:, 1:], reference[:, 1:])
    assert torch.equal(widened[:, 0], first)  # exact, where the plain translator only approximates it
    assert not torch.allclose(reference[:, 0], first, atol=1e-3)
    predicting = plain.with_first_layer_input(first, exact=False)  # layer 0 predicted as before
    with torch.no_grad():
        torch.testing.assert_close(predicting.predict_rows(rows, all_positions=True, first_layer=first), reference)

    tuned = train_pair(
        source,
        target,
        train,
        val,
        Recipe(steps=3, lr=1e-2, mixes=1, init=str(tmp_path / "plain"), first_layer_input=True, **small),
        tmp_path / "tuned",
    )
    assert tuned.first_layer_map.abs().sum() > 0
    loaded = load_translator(tmp_path / "tuned")
    assert loaded.reads_first_layer and torch.equal(loaded.first_layer_map, tuned.first_layer_map)

    # served: the target's layer 0 loaded alone gives the same rows as the whole target
    layer0 = load_first_layer(str(save_tiny("gemma3_text", tmp_path / "target", seed=1)))
    assert len(layer0.model.model.layers) == 1
    text = val[0].context
    source_cache, _ = cache_ops.prefill(source, source.tokenizer(text, return_tensors="pt").input_ids, for_targets=True)
    specs = dict(
        source_spec=source.spec,
        source_tokenizer=source.tokenizer,
        target_spec=target.spec,
        target_tokenizer=target.tokenizer,
        all_positions=True,
    )
    with pytest.raises(MotError, match="reads the target's layer 0"):
        loaded.translate(source_cache, text, **specs)
    served = loaded.translate(source_cache, text, target_first_layer=layer0, **specs).cache
    expected = translated_cache(loaded, prepared, target, OperatingPoint(0.0))
    for got, want in zip(served.keys[1:] + served.values, expected.keys[1:] + expected.values, strict=True):
        torch.testing.assert_close(got[:, :, 1:], want[:, :, 1:])  # position 0 is the native head in `expected`
    native, _ = cache_ops.prefill(target, prepared.target_ids[:, : prepared.keep])
    torch.testing.assert_close(served.values[0], native.values[0], rtol=0, atol=1e-6)


def test_context_attention_starts_where_the_translator_was_and_stays_causal(tmp_path, pair, samples):
    """Adding attention over the context changes nothing until its map is trained; then a position's
    rows draw on earlier positions (a change at position j moves rows after j) and never on later ones
    (the causal alignment's promise holds); fine-tuning trains the map, and it saves and loads."""
    from mot_core.translation.objective import prepare

    source, target = pair
    train, val = samples
    small = dict(context_tokens=[6], continuation_tokens=8, val_every=10, val_samples=2, stats_samples=4, native_tail=2)
    plain = train_pair(source, target, train, val, Recipe(steps=2, mixes=1, **small), tmp_path / "plain")
    prepared = prepare(source, target, val[0], 8, 2)
    rows = prepared.aligned_rows[: prepared.keep]
    attending = plain.with_context_attention(2)
    assert attending.reads_context and attending.card.config["context_heads"] == 2
    with pytest.raises(ValueError, match="already"):
        attending.with_context_attention(2)
    with torch.no_grad():
        torch.testing.assert_close(attending.predict_rows(rows), plain.predict_rows(rows))
        attending.context_map.normal_(std=0.5)
        before = attending.predict_rows(rows, all_positions=True)
        j = 2
        moved = rows.clone()
        moved[j] += 3.0
        after = attending.predict_rows(moved, all_positions=True)
        plain_after = plain.predict_rows(moved, all_positions=True)
    torch.testing.assert_close(after[:j], before[:j])  # nothing reads a later position
    assert not torch.allclose(after[j + 1 :], before[j + 1 :], atol=1e-4)  # later positions read position j
    torch.testing.assert_close(plain_after[j + 1 :], plain.predict_rows(rows, all_positions=True)[j + 1 :])
    long_rows = rows[torch.arange(20) % len(rows)]  # longer than the tiny Gemma's sliding window of 8
    with torch.no_grad():  # a sliding layer's kept positions get the rows they get with every position
        kept, every = attending.predict_rows(long_rows), attending.predict_rows(long_rows, all_positions=True)
    sliding = [i for i, w in enumerate(attending.target_windows) if w is not None]
    assert sliding
    for layer in sliding:
        start = len(long_rows) - (attending.target_windows[layer] - 1)
        torch.testing.assert_close(kept[start:, layer], every[start:, layer])
        assert not kept[:start, layer].any()

    tuned = train_pair(
        source,
        target,
        train,
        val,
        Recipe(steps=3, lr=1e-2, mixes=1, init=str(tmp_path / "plain"), context_heads=2, **small),
        tmp_path / "tuned",
    )
    assert tuned.context_map.abs().sum() > 0
    loaded = load_translator(tmp_path / "tuned")
    assert loaded.reads_context
    for name, tensor in tuned.state_dict().items():
        assert torch.equal(loaded.state_dict()[name], tensor), name
    with torch.no_grad():
        torch.testing.assert_close(loaded.inference_rows(rows), tuned.predict_rows(rows), rtol=2e-2, atol=2e-2)
    frozen = train_pair(  # the block's own learning rate: at 0 it stays where it started
        source,
        target,
        train,
        val,
        Recipe(steps=2, lr=1e-2, mixes=1, init=str(tmp_path / "plain"), context_heads=2, context_lr=0.0, **small),
        tmp_path / "frozen",
    )
    assert not frozen.context_map.any() and not torch.equal(frozen.base, plain.base)


def test_foreign_continuations_come_from_the_same_register_and_another_document():
    from mot_core.translation.samples import Sample
    from mot_core.translation.train import foreign_index

    stream = [Sample("a", "x", 0, "speeches"), Sample("b", "y", 3, "news"), Sample("c", "z", 0, "speeches")]
    stream += [Sample("d", "w", 1, "speeches"), Sample("e", "v", 4, "news")]
    assert [foreign_index(stream, i) for i in range(len(stream))] == [None, None, None, 2, 1]


def test_a_run_with_foreign_distillation_resumes_where_it_stopped(tmp_path, monkeypatch, pair, samples):
    """Interrupted after its checkpoint at step 2 and rerun, training ends with the same weights as an
    unbroken run: the optimiser's moments, the step and the foreign samples all come back."""
    from dataclasses import replace

    import mot_core.translation.train as training

    source, target = pair
    train, val = [replace(s, document=i % 3) for i, s in enumerate(samples[0])], samples[1]
    recipe = Recipe(
        context_tokens=[6],
        continuation_tokens=8,
        steps=4,
        val_every=2,
        val_samples=2,
        stats_samples=4,
        native_tail=2,
        foreign_weight=1.0,
    )
    unbroken = train_pair(source, target, train, val, recipe, tmp_path / "unbroken")

    calls, real_loss = [], training.sample_loss

    def crash_at_step_three(*args, **kwargs):
        calls.append(args[-1])
        if len(calls) == 3:
            raise KeyboardInterrupt
        return real_loss(*args, **kwargs)

    monkeypatch.setattr(training, "sample_loss", crash_at_step_three)
    with pytest.raises(KeyboardInterrupt):
        train_pair(source, target, train, val, recipe, tmp_path / "resumed")
    assert calls[0] is None and calls[1] is not None  # step 1 reads step 0's sample (document 0 vs 1)
    monkeypatch.setattr(training, "sample_loss", real_loss)
    resumed = train_pair(source, target, train, val, recipe, tmp_path / "resumed")
    for (name, a), b in zip(unbroken.state_dict().items(), resumed.state_dict().values(), strict=True):
        assert torch.equal(a, b), name
    assert resumed.card.metrics["history"][-1] == unbroken.card.metrics["history"][-1]
