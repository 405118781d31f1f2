"""Generated prose: the prompts in turn, full length, reproducible from its card, kept when unchanged."""

import json

from mot_core import synthetic
from mot_core.synthetic import PROMPTS, Sampling, generate_documents, write_generated

SMALL = Sampling(documents=3, new_tokens=24, batch=2, seed=5)


def test_documents_continue_the_prompts_in_turn_and_repeat_given_the_seed(tiny_models):
    model = tiny_models["llama"]
    texts = generate_documents(model, SMALL)
    assert len(texts) == 3
    for i, text in enumerate(texts):
        prompt = PROMPTS[i % len(PROMPTS)]
        assert text.startswith(prompt)
        # end-of-text is suppressed: every document gets its 24 new tokens (a few may decode to nothing)
        assert len(model.tokenizer(text[len(prompt) :], add_special_tokens=False)["input_ids"]) >= 12
    assert generate_documents(model, SMALL) == texts
    assert generate_documents(model, Sampling(documents=3, new_tokens=24, batch=2, seed=6)) != texts
    assert model.tokenizer.padding_side == "right"  # the shared tokenizer is left as it was


def test_the_corpus_is_written_with_its_card_and_kept_while_the_settings_hold(tiny_models, tmp_path, monkeypatch):
    monkeypatch.setenv("MOT_HOME", str(tmp_path))
    model = tiny_models["qwen2"]
    runs = []
    root = write_generated(model, SMALL, progress=runs.append)
    lines = [json.loads(line) for line in (root / "train.jsonl").read_text().splitlines()]
    assert [line["prompt"] for line in lines] == [0, 1, 2] and root == synthetic.generated_root(model.name)
    card = json.loads((root / "card.json").read_text())
    assert card["fingerprint"] == model.fingerprint.id and card["seed"] == 5 and card["new_tokens"] == 24
    assert runs == [2, 1]
    write_generated(model, SMALL, progress=runs.append)
    assert runs == [2, 1]  # same settings: nothing sampled again
    write_generated(model, Sampling(documents=2, new_tokens=24, batch=2, seed=5), progress=runs.append)
    assert runs == [2, 1, 2] and len((root / "train.jsonl").read_text().splitlines()) == 2


def test_a_model_named_by_its_path_writes_under_mot_home(tmp_path, monkeypatch):
    monkeypatch.setenv("MOT_HOME", str(tmp_path / "home"))
    assert synthetic.generated_root("/models/my-lm") == tmp_path / "home" / "data" / "generated" / "my-lm"
