"""mot train's contexts: the speeches with other registers spread through them, reproducible from the card."""

import json
import random

import pytest

from mot_core.data import CorpusSplit
from mot_core.errors import MotError
from mot_core.synthetic import generated_root
from mot_core.translation.training_data import extra_registers, training_data

WORDS = "the river council ship harbour merchant winter letter bridge garden soldier treaty".split()


def prose(seed: int, words: int = 700) -> str:
    rng = random.Random(seed)
    return " ".join(rng.choice(WORDS) for _ in range(words)) + "."


@pytest.fixture
def speeches(tmp_path) -> CorpusSplit:
    (tmp_path / "sotu" / "speeches").mkdir(parents=True)
    names = [f"speech{i}.txt" for i in range(4)]
    for i, name in enumerate(names):
        (tmp_path / "sotu" / "speeches" / name).write_text(prose(i))
    return CorpusSplit(tmp_path / "sotu", train=tuple(names[:3]), validation=(names[3],))


@pytest.fixture
def generated(tmp_path, monkeypatch):
    """Sampled prose where `mot data generate` writes it (its own MOT_HOME)."""
    monkeypatch.setenv("MOT_HOME", str(tmp_path / "home"))
    root = generated_root("writer")
    root.mkdir(parents=True)
    (root / "train.jsonl").write_text("".join(json.dumps({"text": prose(100 + i)}) + "\n" for i in range(3)))
    (root / "card.json").write_text(json.dumps({"model": "writer", "seed": 5}))
    return extra_registers({"generated": 0.25}, held_out=list, generated_by="writer")


def test_a_register_takes_its_share_of_the_steps_spread_through_the_speeches(tiny_models, speeches, generated):
    tokenizer = tiny_models["llama"].tokenizer
    data = training_data(tokenizer, speeches, [32, 48], 16, generated, seed=3, val_samples=2)
    registers = [s.register for s in data.samples]
    assert len(registers) == 16 and registers.count("generated") == 4 and registers.count("speeches") == 12
    assert registers.index("generated") < 4 and registers[-4:].count("generated") == 1  # spread, not at the end
    assert all(s.register == "" for s in data.validation) and len(data.validation) == 2
    speech_texts = {prose(i) for i in range(3)}
    assert all(any(s.context in text for text in speech_texts) for s in data.samples if s.register == "speeches")
    assert all(s.context in prose(3) for s in data.validation)  # validation: the held-out speech only
    card = data.card["generated"]
    assert card["model"] == "writer" and card["fraction"] == 0.25 and card["contexts"] == 4
    assert card["train_documents"] == 3 and data.card["train_documents"] == 3
    assert training_data(tokenizer, speeches, [32, 48], 16, generated, seed=3, val_samples=2) == data
    assert training_data(tokenizer, speeches, [32, 48], 16, generated, seed=4, val_samples=2).samples != data.samples


def test_mixes_that_cannot_be_made_are_refused_before_anything_is_fetched(tmp_path, monkeypatch):
    monkeypatch.setenv("MOT_HOME", str(tmp_path))
    with pytest.raises(ValueError, match="leave no room for the speeches"):
        extra_registers({"news": 0.6, "wiki": 0.5}, held_out=list, generated_by="writer")
    with pytest.raises(ValueError, match="unknown registers"):
        extra_registers({"poetry": 0.1}, held_out=list, generated_by="writer")
    with pytest.raises(MotError, match="mot data generate --model nobody"):
        extra_registers({"news": 0.2, "generated": 0.3}, held_out=list, generated_by="nobody")
    assert not (tmp_path / "data" / "news").exists()
    assert extra_registers({"news": 0.0}, held_out=list, generated_by="writer") == []
