"""The Python client (services/client.py) and ``mot serve`` against a real service.

The service runs as an operator runs it: ``mot serve --config FILE`` in a subprocess (embedded
Redis, Ray, Serve's gRPC proxy, tiny models), started once for the module; the last test stops it
with SIGTERM and checks that it shut down cleanly, leaving no process behind.
"""

from __future__ import annotations

import asyncio
import os
import signal
import subprocess
import sys
import threading
import time
import urllib.request
import uuid
from pathlib import Path

import grpc
import psutil
import pytest
import torch
import yaml
from prometheus_client.parser import text_string_to_metric_families

from mot_core import cache_ops, codec
from mot_core.context_id import context_id as content_id
from mot_core.loading import load_model
from mot_core.translation.recompute import OperatingPoint, blend
from mot_core.translation.translator import load_translator
from services.client import (
    DEFAULT_APPLICATION,
    AsyncMotClient,
    CacheBlob,
    GenerationResult,
    ModelInfo,
    MotClient,
    MotClientError,
    PutResult,
    RetryPolicy,
    ScoreResult,
    Stats,
)
from services.ports import free_port
from tests.integration.service_fixtures import first_layer_mixture, service_config

ROOT = Path(__file__).resolve().parents[2]
MOT = Path(sys.executable).with_name("mot")
# Ray start + four replicas loading their models: over 3 minutes once, when a running eval shared
# the 2 cores with the suite; only a failing run waits the whole time
START_TIMEOUT_S = 300
NO_RETRY = RetryPolicy(max_attempts=1)


def fresh_text(label: str = "") -> str:
    return f"Notice {uuid.uuid4().hex[:12]} {label}: the museum opens at ten and closes at six. Entry is free."


class Served:
    """A ``mot serve`` subprocess and what it printed."""

    def __init__(self, proc: subprocess.Popen, config: dict, stderr_path: Path) -> None:
        self.proc, self.config, self.stderr_path = proc, config, stderr_path
        self.lines: list[str] = []
        self.ready = threading.Event()
        self.reader = threading.Thread(target=self._read, daemon=True)
        self.reader.start()

    def _read(self) -> None:
        assert self.proc.stdout is not None
        for line in self.proc.stdout:
            self.lines.append(line.rstrip("\n"))
            if line.startswith("ready"):
                self.ready.set()
        self.ready.set()  # exited

    def field(self, prefix: str) -> str:
        return next(line.removeprefix(prefix).strip() for line in self.lines if line.startswith(prefix))

    @property
    def address(self) -> str:
        return self.field("gRPC address:").split()[0]

    @property
    def targets(self) -> tuple[str, str]:
        return self.config["targets"][0]["name"], self.config["targets"][1]["name"]  # translated, native

    def descendants(self) -> list[psutil.Process]:
        try:
            return psutil.Process(self.proc.pid).children(recursive=True)
        except psutil.NoSuchProcess:
            return []

    def stop(self, timeout: float = 120) -> int:
        if self.proc.poll() is None:
            self.proc.send_signal(signal.SIGTERM)
        try:
            return self.proc.wait(timeout)
        except subprocess.TimeoutExpired:
            self.proc.kill()
            return self.proc.wait(10)


def _alive(procs: list[psutil.Process]) -> list[psutil.Process]:
    alive = []
    for p in procs:
        try:
            if p.is_running() and p.status() != psutil.STATUS_ZOMBIE:
                alive.append(p)
        except psutil.NoSuchProcess:
            pass
    return alive


@pytest.fixture(scope="module")
def served(service_models, tmp_path_factory):
    work = tmp_path_factory.mktemp("mot-serve")
    # this service runs a mixture translator that reads the target's layer 0, at an operating point:
    # the target recomputes a quarter of each context over the translation (tests/integration/
    # test_service.py covers the pure translation of a ridge map)
    blended = first_layer_mixture(service_models, work / "mixture-recompute", 0.25, recent=0.1, attended=0.1)
    config = service_config(service_models, blended)
    (work / "service.yaml").write_text(yaml.safe_dump(config))
    env = {k: v for k, v in os.environ.items() if k not in ("MOT_REDIS_URL", "MOT_API_TOKEN")}
    stderr_path = work / "serve.stderr"
    with open(stderr_path, "w") as stderr:
        proc = subprocess.Popen(
            [str(MOT), "serve", "--config", str(work / "service.yaml"), "--num-cpus", "4"],
            stdout=subprocess.PIPE,
            stderr=stderr,
            text=True,
            env=env,
            cwd=ROOT,
        )
    server = Served(proc, config, stderr_path)
    seen: list[psutil.Process] = []
    try:
        server.ready.wait(START_TIMEOUT_S)
        if not any(line.startswith("ready") for line in server.lines):
            pytest.fail(
                f"mot serve did not become ready:\n{chr(10).join(server.lines)}\n{stderr_path.read_text()[-3000:]}"
            )
        seen = server.descendants()
        yield server
    finally:  # normally test_serve_stops_cleanly_on_sigterm has stopped it already
        seen += server.descendants()
        server.stop()
        for p in _alive(seen):  # never leave Ray or Redis behind, even after a failure
            p.kill()


@pytest.fixture(scope="module")
def client(served):
    with MotClient(served.address, timeout=60) as c:
        yield c


@pytest.fixture(scope="module")
def models(served):
    return {name: load_model(name) for name in (served.config["source"]["name"], *served.targets)}


# ---------------------------------------------------------------------------------------------- mot serve


def test_serve_prints_address_application_and_redis_mode(served):
    assert served.address == f"127.0.0.1:{served.config['grpc_port']}"
    assert served.field("application:").split()[0] == DEFAULT_APPLICATION
    redis_line = served.field("redis:")
    assert redis_line.startswith("embedded redis-server") and "redis://" not in redis_line
    assert served.lines[-1].startswith("ready")
    models = [line for line in served.lines if line.startswith("model:")]
    assert len(models) == 3 and "translator" in next(m for m in models if served.targets[0] in m)


def test_serve_help_explains():
    out = subprocess.run([str(MOT), "serve", "--help"], capture_output=True, text=True, timeout=60, cwd=ROOT)
    assert out.returncode == 0
    text = " ".join(out.stdout.split())
    for word in ("--config", "--num-cpus", "MOT_REDIS_URL", "SIGTERM", "application", "MOT_API_TOKEN"):
        assert word in text


# ---------------------------------------------------------------------------------------------- client basics


def test_application_name_and_token_metadata(monkeypatch):
    from services.app import APP_NAME

    assert DEFAULT_APPLICATION == APP_NAME
    monkeypatch.setenv("MOT_API_TOKEN", "from-env")
    assert MotClient("127.0.0.1:1")._metadata == (("application", APP_NAME), ("authorization", "Bearer from-env"))
    assert dict(MotClient("127.0.0.1:1", token="given")._metadata)["authorization"] == "Bearer given"
    assert MotClient("127.0.0.1:1", token="")._metadata == (("application", APP_NAME),)
    monkeypatch.delenv("MOT_API_TOKEN")
    assert MotClient("127.0.0.1:1", application="other")._metadata == (("application", "other"),)


def test_client_side_argument_checks():
    c = MotClient("127.0.0.1:1")
    with pytest.raises(ValueError):
        c.put_context("a", documents=["b"])
    with pytest.raises(ValueError):
        c.put_context()
    with pytest.raises(TypeError):
        c.put_context(documents="not a list")
    with pytest.raises(ValueError):
        c.generate_stream("0" * 64, "m", mode="SOMETIMES")
    for bad in ({"max_attempts": 6}, {"max_attempts": 0}, {"initial_backoff": 0}, {"max_backoff": 0.01}):
        with pytest.raises(ValueError):
            RetryPolicy(**bad)
    c.close()


def test_sync_client_round_trip(served, client, models):
    translated, native = served.targets
    infos = client.list_models()
    assert all(isinstance(m, ModelInfo) for m in infos)
    by_name = {m.name: m for m in infos}
    assert by_name[translated].has_translator and not by_name[native].has_translator
    assert by_name[translated].fingerprint == models[translated].fingerprint.id

    text = fresh_text("sync")
    put = client.put_context(text)
    assert isinstance(put, PutResult) and put.context_id == content_id(text) and not put.already_cached
    documents = [fresh_text("a"), fresh_text("b")]
    assert client.put_context(documents=documents).context_id == content_id(documents)

    stream = client.generate_stream(put.context_id, translated, " Entry", max_new_tokens=6)
    pieces = list(stream)
    result = stream.result
    assert isinstance(result, GenerationResult) and result.text == "".join(pieces) and len(pieces) >= 1
    assert result.cache_source == "TRANSLATED_FRESH" and result.facts.generated_tokens == 6
    assert result.ttft_ms == result.facts.ttft_ms > 0
    whole = client.generate(put.context_id, translated, " Entry", max_new_tokens=6)
    assert whole.cache_source == "TRANSLATED_HIT" and whole.text == result.text
    assert client.generate(put.context_id, native, " Entry", max_new_tokens=3).cache_source == "NATIVE_PREFILL"
    stopped = client.generate(put.context_id, native, " Entry", max_new_tokens=30, temperature=0.8, seed=7, top_k=5)
    assert stopped.facts.generated_tokens <= 30

    scored = client.score(put.context_id, native, " closes at six", prompt="\nWhen?", mode="NATIVE")
    assert isinstance(scored, ScoreResult) and scored.cache_source == "NATIVE_PREFILL"
    assert all(t.logprob <= 0 for t in scored.tokens) and "".join(t.text for t in scored.tokens) == " closes at six"

    blob = client.get_cache(put.context_id, translated)
    assert isinstance(blob, bytes)
    cache = codec.decode(blob, expected_fingerprint=models[translated].fingerprint.id)
    assert cache.token_ids[0].tolist() == models[translated].tokenizer(text)["input_ids"][: cache.seq_len]
    info = client.get_cache_blob(put.context_id, translated)
    assert isinstance(info, CacheBlob) and info.data == blob and info.cache_source == "TRANSLATED_HIT"

    # the served cache is the translation (its layer 0 the target's own, from the translator replica's
    # copy of that layer) with the target's own head, a quarter recomputed (a tenth of the context
    # from its end, a tenth that the context's end read most when the source read it), trimmed
    source_lm, target_lm = load_model(served.config["source"]["name"]), models[translated]
    translator = load_translator(served.config["targets"][0]["translator"])
    assert translator.reads_first_layer
    source_ids = source_lm.tokenizer(text, return_tensors="pt")["input_ids"]
    source_cache, _ = cache_ops.prefill(source_lm, source_ids, for_targets=True)
    source_cache = codec.decode(codec.encode(source_cache, "bfloat16"), dtype=torch.float32)  # as the service stores it
    raw = translator.translate(
        source_cache,
        text,
        source_spec=source_lm.spec,
        source_tokenizer=source_lm.tokenizer,
        target_spec=target_lm.spec,
        target_tokenizer=target_lm.tokenizer,
        target_first_layer=target_lm,
    ).cache
    raw = codec.decode(codec.encode(raw, "bfloat16"), dtype=torch.float32)  # as stored
    assert raw.tail_attention is not None and raw.tail_attention.sum() > 0  # the source's, mapped over
    head = cache_ops.replace_head(target_lm, raw)
    blended = blend(target_lm, head, OperatingPoint(0.25, recent=0.1, attended=0.1))
    expected = cache_ops.trim_to_windows(blended, target_lm.spec)
    expected = codec.decode(codec.encode(expected, "bfloat16"), dtype=torch.float32)
    cache = cache.to(torch.float32)
    assert [k.shape for k in cache.keys] == [k.shape for k in expected.keys]
    for got, want in zip(cache.keys + cache.values, expected.keys + expected.values, strict=True):
        # three bfloat16 roundings on the way (source, translation, blend) and other thread counts than
        # the service's: a rounding step may flip here and there, nothing more
        torch.testing.assert_close(got, want, rtol=2e-2, atol=5e-2)
        assert (got - want).abs().mean() < 1e-3
    pure = cache_ops.trim_to_windows(cache_ops.replace_head(target_lm, raw), target_lm.spec)
    assert (cache.keys[-1] - pure.keys[-1]).abs().max() > 0.5  # the recompute did change it

    stats = client.stats()
    assert isinstance(stats, Stats) and stats.store_available and stats.store_entries >= 3
    assert set(stats.counters) >= {"store_hits", "store_misses", "store_evictions", "put_context_prefilled"}
    assert stats.counters.get("generate_translated_hit", 0) + stats.counters.get("generate_translated_fresh", 0) >= 1

    # the text, the source cache and one translated cache: the blend (the translation it was made
    # from is not stored at an operating point; no request reads it)
    assert client.delete_context(put.context_id) == 3
    with pytest.raises(MotClientError) as info:
        client.delete_context(put.context_id)
    assert info.value.code == grpc.StatusCode.NOT_FOUND


def _scraped(port: int) -> set[tuple[str, str, str, str]]:
    """(sample name, component, step, kind) of every sample above zero on the metrics port."""
    with urllib.request.urlopen(f"http://127.0.0.1:{port}/metrics", timeout=10) as response:
        text = response.read().decode()
    return {
        (s.name, s.labels.get("component", ""), s.labels.get("step", ""), s.labels.get("kind", ""))
        for family in text_string_to_metric_families(text)
        for s in family.samples
        if s.value > 0
    }


def test_prometheus_metrics_say_what_each_replica_did(served, client):
    """What an operator scrapes from ``metrics_port`` (Ray's exporter puts ``ray_`` before every
    name): each replica's warm-up, a fresh translation, and the bytes the source and the blending
    target stored (the translator stores nothing at an operating point)."""
    translated, native = served.targets
    ctx = client.put_context(fresh_text("metrics")).context_id
    assert client.generate(ctx, translated, " The", max_new_tokens=2).cache_source == "TRANSLATED_FRESH"
    wanted = {("ray_mot_step_seconds_count", c, "warm_up", "") for c in ("source", "translator", translated, native)}
    wanted |= {("ray_mot_events_total", translated, "", "cache_translated_fresh")}
    wanted |= {("ray_mot_stored_bytes_total", c, "", "") for c in ("source", translated)}
    deadline = time.monotonic() + 60  # Ray exports what replicas record every few seconds
    while (missing := wanted - (seen := _scraped(served.config["metrics_port"]))) and time.monotonic() < deadline:
        time.sleep(2)
    assert not missing, sorted(missing)
    assert ("ray_mot_stored_bytes_total", "translator", "", "") not in seen


def test_stream_closed_early_cancels_the_call(served, client):
    translated, _ = served.targets
    ctx = client.put_context(fresh_text("early close")).context_id
    with client.generate_stream(ctx, translated, " Entry", max_new_tokens=64) as stream:
        first = next(stream)
        assert isinstance(first, str)
    assert stream.result is None
    assert client.generate(ctx, translated, " Entry", max_new_tokens=2).cache_source == "TRANSLATED_HIT"


def test_errors_are_typed_with_status_codes(served, client):
    translated, native = served.targets
    ctx = client.put_context(fresh_text("errors")).context_id
    cases = [
        (grpc.StatusCode.NOT_FOUND, lambda: client.generate("0" * 64, translated, " x")),
        (grpc.StatusCode.NOT_FOUND, lambda: client.score("0" * 64, translated, " x")),
        (grpc.StatusCode.INVALID_ARGUMENT, lambda: client.generate(ctx, "no-such-model", " x")),
        (grpc.StatusCode.INVALID_ARGUMENT, lambda: client.put_context("")),
        (grpc.StatusCode.INVALID_ARGUMENT, lambda: client.get_cache("not-an-id", translated)),
        (grpc.StatusCode.FAILED_PRECONDITION, lambda: client.generate(ctx, native, " x", mode="TRANSLATE")),
        (grpc.StatusCode.FAILED_PRECONDITION, lambda: client.get_cache(ctx, native)),
    ]
    for code, call in cases:
        with pytest.raises(MotClientError) as info:
            call()
        assert info.value.code == code and info.value.details and str(info.value).startswith(code.name)


def test_deadlines(served, client):
    translated, _ = served.targets
    ctx = client.put_context(fresh_text("deadline")).context_id
    for call in (
        lambda: client.generate(ctx, translated, " x", max_new_tokens=64, timeout=0.002),
        lambda: client.score(ctx, translated, " x" * 20, timeout=0.002),
        lambda: client.get_cache(ctx, translated, timeout=0.002),
    ):
        with pytest.raises(MotClientError) as info:
            call()
        assert info.value.code == grpc.StatusCode.DEADLINE_EXCEEDED
    assert client.generate(ctx, translated, " x", max_new_tokens=2, timeout=60).facts.generated_tokens == 2


def test_unreachable_service_unavailable_after_bounded_retries():
    address = f"127.0.0.1:{free_port()}"  # nothing listens there
    policy = RetryPolicy(max_attempts=3, initial_backoff=0.2, max_backoff=0.4)
    with MotClient(address, retry=policy, timeout=20) as c:
        for call in (lambda: c.generate("0" * 64, "m", " x"), lambda: c.get_cache("0" * 64, "m"), c.list_models):
            started = time.monotonic()
            with pytest.raises(MotClientError) as info:
                call()
            elapsed = time.monotonic() - started
            assert info.value.code == grpc.StatusCode.UNAVAILABLE
            assert 0.3 <= elapsed < 15, elapsed  # two client retries wait >= 0.1 + 0.2 s; the deadline bounds it
    with MotClient(address, retry=NO_RETRY, timeout=0.5) as c:
        with pytest.raises(MotClientError) as info:
            c.list_models()
        assert info.value.code in (grpc.StatusCode.UNAVAILABLE, grpc.StatusCode.DEADLINE_EXCEEDED)


# ---------------------------------------------------------------------------------------------- asyncio


def test_async_client(served, models):
    translated, native = served.targets

    async def main() -> None:
        async with AsyncMotClient(served.address, timeout=60) as c:
            assert {m.name for m in await c.list_models()} >= {translated, native}
            text = fresh_text("async")
            put = await c.put_context(text)
            assert put.context_id == content_id(text)
            a, b = await asyncio.gather(
                c.generate(put.context_id, translated, " Entry", max_new_tokens=5),
                c.generate(put.context_id, native, " Entry", max_new_tokens=5),
            )
            assert (a.cache_source, b.cache_source) == ("TRANSLATED_FRESH", "NATIVE_PREFILL")
            stream = c.generate_stream(put.context_id, translated, " Entry", max_new_tokens=5)
            pieces = [piece async for piece in stream]
            assert stream.result.text == "".join(pieces) == a.text and stream.result.cache_source == "TRANSLATED_HIT"
            async with c.generate_stream(put.context_id, translated, " Entry", max_new_tokens=64) as early:
                await early.__anext__()
            assert early.result is None
            scored = await c.score(put.context_id, native, " Entry is free.", mode="NONE")
            assert scored.cache_source == "NONE" and scored.tokens
            blob = await c.get_cache(put.context_id, translated)
            assert codec.decode(blob, expected_fingerprint=models[translated].fingerprint.id).seq_len > 0
            assert (await c.stats()).store_available
            assert await c.delete_context(put.context_id) >= 3
            with pytest.raises(MotClientError) as info:
                await c.generate(put.context_id, translated, " x")
            assert info.value.code == grpc.StatusCode.NOT_FOUND
            with pytest.raises(MotClientError) as info:
                await c.score(put.context_id, "no-such-model", " x")
            assert info.value.code == grpc.StatusCode.INVALID_ARGUMENT

    asyncio.run(main())


# ---------------------------------------------------------------------------------------------- example


def test_rag_orchestrator_example(served):
    translated, native = served.targets
    out = subprocess.run(
        [sys.executable, str(ROOT / "examples" / "rag_orchestrator.py"), "--address", served.address],
        capture_output=True,
        text=True,
        timeout=120,
        cwd=ROOT,
    )
    assert out.returncode == 0, out.stderr[-2000:]
    text = out.stdout
    print(text)  # shown with pytest -rP
    for expected in (translated, native, "TRANSLATED_FRESH", "TRANSLATED_HIT", "NATIVE_PREFILL", "TTFT", "answer:"):
        assert expected in text, text
    assert text.count("[round 1]") == text.count("[round 2]") == 2
    bad = subprocess.run(
        [sys.executable, str(ROOT / "examples" / "rag_orchestrator.py"), "--address", served.address, "--target", "x"],
        capture_output=True,
        text=True,
        timeout=120,
        cwd=ROOT,
    )
    assert bad.returncode != 0 and "unknown target" in bad.stderr


# ---------------------------------------------------------------------------------------------- shutdown (last)


def test_serve_stops_cleanly_on_sigterm(served):
    children = served.descendants()
    assert children, "mot serve runs Ray and Redis as child processes"
    assert served.stop() == 0, served.stderr_path.read_text()[-3000:]
    served.reader.join(10)
    assert served.lines[-1] == "stopped"
    deadline = time.monotonic() + 20
    while _alive(children) and time.monotonic() < deadline:
        time.sleep(0.5)
    assert not _alive(children), [p.cmdline() for p in _alive(children)]
