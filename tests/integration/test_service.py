"""The service end to end: real redis-server, real Ray Serve, real gRPC over loopback, tiny models.

One service for the whole module (starting Ray and Serve takes ~20 s on two cores). It runs
with an API token and against a Redis the test owns (``MOT_REDIS_URL``), so the auth test and the
Redis outage test (the last one here) share that start. Every test uses its own context text.
"""

from __future__ import annotations

import re
import secrets
import threading
import time
import uuid
from collections import Counter

import grpc
import pytest
import redis
import torch

from mot.v1 import mot_pb2, mot_pb2_grpc
from mot_core import codec
from mot_core.context_id import context_id as content_id
from mot_core.context_id import join_documents
from mot_core.errors import FingerprintMismatchError
from mot_core.generation import score_continuation
from mot_core.loading import load_model
from services.client import MotClient, MotClientError, RetryPolicy
from services.config import StoreConfig
from services.embedded_redis import EmbeddedRedis
from services.ports import free_port
from services.store import RedisCacheStore, translated_key
from tests.integration.service_fixtures import METADATA, SOURCE_THREADS, service_config

TOKEN = "test-token-" + secrets.token_hex(8)
NO_RETRY = RetryPolicy(max_attempts=1)
READY_TIMEOUT_S = 60


def fresh_text(label: str = "") -> str:
    """A new context each call: a few sentences plus a unique tag (the content id is the text's hash)."""
    return (
        f"Report {uuid.uuid4().hex[:12]} {label}. The harbour opens at nine. Ships leave at noon, "
        "and the last ferry returns before dusk. Tickets cost four coins."
    )


class Service:
    def __init__(self, local, config: dict, redis_server: EmbeddedRedis) -> None:
        self.local, self.config, self.redis = local, config, redis_server
        self.address = local.grpc_address
        self.source = config["source"]["name"]
        self.translated = config["targets"][0]["name"]  # has the ridge translator
        self.native = config["targets"][1]["name"]  # no translator

    def client(self, **kwargs) -> MotClient:
        kwargs.setdefault("token", TOKEN)
        kwargs.setdefault("timeout", 60)
        return MotClient(self.address, **kwargs)


@pytest.fixture(scope="module")
def service(service_models):
    from services.runner import LocalService

    config = service_config(service_models)
    server = EmbeddedRedis(maxmemory=256 << 20, port=free_port(), password=secrets.token_hex(16)).start()
    local = LocalService(config, num_cpus=4)
    with pytest.MonkeyPatch.context() as mp:
        mp.setenv("MOT_REDIS_URL", server.url)
        mp.setenv("MOT_API_TOKEN", TOKEN)
        try:
            local.start()
            svc = Service(local, config, server)
            with svc.client() as client:
                client.wait_ready(timeout=READY_TIMEOUT_S)  # Serve's gRPC proxy may need a moment
            yield svc
        finally:
            local.stop()  # serve.delete + ray.shutdown
            server.stop()


@pytest.fixture(scope="module")
def client(service):
    with service.client() as c:
        yield c


@pytest.fixture(scope="module")
def models(service):
    """The tiny models in this process, to check the service's numbers against."""
    return {name: load_model(name) for name in (service.source, service.translated, service.native)}


def assert_code(code: grpc.StatusCode, call, *args, **kwargs) -> MotClientError:
    with pytest.raises(MotClientError) as info:
        result = call(*args, **kwargs)
        if hasattr(result, "__next__"):  # a stream: the error comes with the first message
            list(result)
    err = info.value
    assert err.code == code, f"expected {code.name}, got {err.code.name}: {err.details}"
    assert err.details and "\n" not in err.details, f"details must be one line: {err.details!r}"
    return err


# ---------------------------------------------------------------------------------------------- basics


def test_list_models_reports_roles_fingerprints_and_translators(service, client, models):
    infos = {m.name: m for m in client.list_models()}
    assert set(infos) == {service.source, service.translated, service.native}
    assert infos[service.source].role == "source"
    assert infos[service.translated].role == infos[service.native].role == "target"
    for name, info in infos.items():
        assert info.fingerprint == models[name].fingerprint.id
        assert info.model_type == models[name].spec.model_type
        assert info.num_layers == models[name].spec.num_layers
    assert infos[service.translated].translator == service.config["targets"][0]["translator"]
    assert infos[service.translated].translator_version.startswith("ridge-")
    assert infos[service.native].translator == "" and infos[service.native].translator_version == ""


def test_server_reflection_describes_the_api(service):
    """grpcurl-style discovery: the service and its methods come from the server, not from the .proto."""
    from google.protobuf.descriptor_pool import DescriptorPool
    from grpc_reflection.v1alpha.proto_reflection_descriptor_database import ProtoReflectionDescriptorDatabase

    with grpc.insecure_channel(service.address) as channel:
        database = ProtoReflectionDescriptorDatabase(channel)
        assert "mot.v1.MotCache" in database.get_services()
        described = DescriptorPool(database).FindServiceByName("mot.v1.MotCache")
        expected = {m.name for m in mot_pb2.DESCRIPTOR.services_by_name["MotCache"].methods}
        assert {m.name for m in described.methods} == expected
        generate = described.methods_by_name["Generate"]
        assert generate.server_streaming and generate.input_type.full_name == "mot.v1.GenerateRequest"


def test_put_generate_score_delete_through_the_client(service, client, models):
    text = fresh_text("roundtrip")
    put = client.put_context(text)
    assert put.context_id == content_id(text)
    assert put.source_model == service.source and put.source_fingerprint == models[service.source].fingerprint.id
    assert put.token_count == len(models[service.source].tokenizer(text)["input_ids"])
    assert put.stored_bytes > 0 and not put.already_cached
    again = client.put_context(text)
    assert again.already_cached and again.context_id == put.context_id

    docs = [fresh_text("doc one"), "Second document.\r\nWith a CRLF line."]
    put_docs = client.put_context(documents=docs)
    assert put_docs.context_id == content_id(join_documents(docs)) == content_id(docs)

    first = client.generate(put.context_id, service.translated, " The ferry", max_new_tokens=6)
    second = client.generate(put.context_id, service.translated, " The ferry", max_new_tokens=6)
    assert (first.cache_source, second.cache_source) == ("TRANSLATED_FRESH", "TRANSLATED_HIT")
    assert first.text == second.text and first.facts.generated_tokens == 6 and first.facts.finish_reason == "length"
    assert first.facts.context_tokens == len(models[service.translated].tokenizer(text)["input_ids"])
    assert first.facts.translator_version.startswith("ridge-")
    assert 0 < first.facts.ttft_ms <= first.facts.total_ms and second.facts.cache_ms > 0

    scored = client.score(put.context_id, service.translated, " Tickets cost four coins.")
    assert scored.cache_source == "TRANSLATED_HIT" and len(scored.tokens) > 0
    assert scored.total_logprob == pytest.approx(sum(scored.logprobs), abs=1e-3)

    stats = client.stats()
    assert stats.store_available and stats.store_entries >= 4 and 0 < stats.store_bytes <= stats.store_budget_bytes

    deleted = client.delete_context(put.context_id)
    assert deleted >= 3  # text, source cache, translated cache
    assert_code(grpc.StatusCode.NOT_FOUND, client.generate, put.context_id, service.translated, " x")
    assert_code(grpc.StatusCode.NOT_FOUND, client.delete_context, put.context_id)


def test_auto_translate_and_native_modes(service, client):
    ctx = client.put_context(fresh_text("modes")).context_id
    # a target without a translator: AUTO prefills natively (and says so), TRANSLATE is refused
    auto = client.generate(ctx, service.native, " Ships", mode="AUTO", max_new_tokens=4)
    assert auto.cache_source == "NATIVE_PREFILL" and auto.facts.translator_version == ""
    err = assert_code(
        grpc.StatusCode.FAILED_PRECONDITION, client.generate, ctx, service.native, " Ships", mode="TRANSLATE"
    )
    assert "translator" in err.details
    # NATIVE always prefills, even where a translated cache exists
    assert client.generate(ctx, service.translated, " Ships", mode="TRANSLATE").cache_source == "TRANSLATED_FRESH"
    for _ in range(2):
        native = client.generate(ctx, service.translated, " Ships", mode="NATIVE", max_new_tokens=4)
        assert native.cache_source == "NATIVE_PREFILL" and native.facts.translator_version == ""
    assert client.generate(ctx, service.translated, " Ships", mode="AUTO", max_new_tokens=4).cache_source == (
        "TRANSLATED_HIT"
    )


@pytest.mark.parametrize("target_attr", ["translated", "native"])
def test_score_native_equals_in_process_logprobs(service, client, models, target_attr):
    target = getattr(service, target_attr)
    text, prompt, continuation = fresh_text("score"), "\nQuestion: when?\nAnswer:", " The harbour opens at nine."
    ctx = client.put_context(text).context_id
    native = client.score(ctx, target, continuation, prompt=prompt, mode="NATIVE")
    assert native.cache_source == "NATIVE_PREFILL"

    lm = models[target]  # the same model files, in this process, without any cache: one plain forward pass
    ctx_ids = lm.tokenizer(text, return_tensors="pt")["input_ids"]
    prompt_ids = lm.tokenizer(prompt, add_special_tokens=False, return_tensors="pt")["input_ids"]
    cont_ids = lm.tokenizer(continuation, add_special_tokens=False, return_tensors="pt")["input_ids"]
    with torch.no_grad():
        expected = score_continuation(lm, None, torch.cat((ctx_ids, prompt_ids), dim=-1), cont_ids)
    assert [t.token_id for t in native.tokens] == cont_ids[0].tolist()
    assert [t.text for t in native.tokens] == [lm.tokenizer.decode([int(t)]) for t in cont_ids[0]]
    torch.testing.assert_close(torch.tensor(native.logprobs), expected.float(), atol=1e-4, rtol=0)
    assert native.total_logprob == pytest.approx(float(expected.sum()), abs=1e-3)

    none = client.score(ctx, target, continuation, prompt=prompt, mode="NONE")
    assert none.cache_source == "NONE" and len(none.tokens) == len(native.tokens)
    assert max(abs(a - b) for a, b in zip(none.logprobs, native.logprobs, strict=True)) > 1e-2


# ---------------------------------------------------------------------------------------------- errors

BAD_IDS = ["", "xyz", "A" * 64, "0" * 63, "0" * 65, "g" * 64]


def test_error_paths_map_to_status_codes(service, client):
    t, n = service.translated, service.native
    ctx = client.put_context(fresh_text("errors")).context_id
    unknown = "0" * 64
    NOT_FOUND, INVALID = grpc.StatusCode.NOT_FOUND, grpc.StatusCode.INVALID_ARGUMENT

    # unknown context id
    for call in (
        lambda: client.generate(unknown, t, " x"),
        lambda: client.generate(unknown, n, " x", mode="NATIVE"),
        lambda: client.score(unknown, t, " x"),
        lambda: client.get_cache(unknown, t),
        lambda: client.delete_context(unknown),
    ):
        assert "unknown context id" in assert_code(NOT_FOUND, call).details
    # unknown model
    for call in (
        lambda: client.generate(ctx, "no-such-model", " x"),
        lambda: client.score(ctx, service.source, " x"),  # the source is not a target
        lambda: client.get_cache(ctx, "no-such-model"),
    ):
        assert "unknown target model" in assert_code(INVALID, call).details
    # bad context ids
    for bad in BAD_IDS:
        assert "context_id" in assert_code(INVALID, client.generate, bad, t, " x").details
        assert_code(INVALID, client.delete_context, bad)
        assert_code(INVALID, client.score, bad, t, " x")
    # empty input
    assert "empty" in assert_code(INVALID, client.put_context, "").details
    assert "empty" in assert_code(INVALID, client.put_context, " \n\t ").details
    assert "empty" in assert_code(INVALID, client.put_context, documents=[]).details
    assert "empty" in assert_code(INVALID, client.score, ctx, t, "").details
    # oversize input (limits from service_fixtures: 20,000 chars, 2,048 tokens, 64 new tokens, 64 KiB requests)
    limits = service.config["limits"]
    assert "characters" in assert_code(INVALID, client.put_context, "a" * (limits["max_context_chars"] + 1)).details
    assert "tokens" in assert_code(INVALID, client.put_context, "ab " * 1500 + uuid.uuid4().hex).details
    assert "bytes" in assert_code(INVALID, client.put_context, "é" * 40_000).details  # 80 KB of UTF-8
    assert "prompt" in assert_code(INVALID, client.generate, ctx, t, "p" * 20_001).details
    assert "max_new_tokens" in assert_code(INVALID, client.generate, ctx, t, " x", max_new_tokens=65).details
    # bad options
    assert_code(INVALID, client.generate, ctx, t, " x", temperature=-1.0)
    assert_code(INVALID, client.generate, ctx, t, " x", top_p=1.5)
    assert "Score only" in assert_code(INVALID, client.generate, ctx, t, " x", mode="NONE").details
    # the service still answers normally afterwards
    assert client.generate(ctx, n, " x", max_new_tokens=2).cache_source == "NATIVE_PREFILL"


def test_the_callers_budget_reaches_the_model_deployments(service, client):
    """A spent ``mot-timeout-ms`` budget stops the work in the target deployment, though the gRPC call
    itself could wait a minute: the deadline travels down the chain, not only to the proxy."""
    ctx = client.put_context(fresh_text("deadline")).context_id
    metadata = (*METADATA, ("authorization", f"Bearer {TOKEN}"), ("mot-timeout-ms", "0"))
    with grpc.insecure_channel(service.address) as channel:
        stub = mot_pb2_grpc.MotCacheStub(channel)
        for mode, stage in ((mot_pb2.CACHE_MODE_NATIVE, "native prefill"), (mot_pb2.CACHE_MODE_AUTO, "translation")):
            request = mot_pb2.GenerateRequest(context_id=ctx, target_model=service.translated, prompt=" x", mode=mode)
            with pytest.raises(grpc.RpcError) as info:
                list(stub.Generate(request, metadata=metadata, timeout=60))
            assert info.value.code() == grpc.StatusCode.DEADLINE_EXCEEDED
            assert f"deadline exceeded before {stage}" in info.value.details()
        score = mot_pb2.ScoreRequest(context_id=ctx, target_model=service.native, continuation=" x")
        with pytest.raises(grpc.RpcError) as info:
            stub.Score(score, metadata=metadata, timeout=60)
        assert info.value.code() == grpc.StatusCode.DEADLINE_EXCEEDED
    # with time to spare, the same requests go through (the client sends its budget on every call)
    assert client.generate(ctx, service.translated, " x", max_new_tokens=2, timeout=60).facts.generated_tokens == 2
    assert client.stats().counters["error_deadline_exceeded"] >= 3


def test_unauthenticated_without_the_token(service):
    for token in ("", "wrong-token"):
        with service.client(token=token, retry=NO_RETRY) as anonymous:
            err = assert_code(grpc.StatusCode.UNAUTHENTICATED, anonymous.list_models)
            assert "authorization" in err.details
            assert_code(grpc.StatusCode.UNAUTHENTICATED, anonymous.put_context, "hello")
            assert_code(grpc.StatusCode.UNAUTHENTICATED, anonymous.generate, "0" * 64, service.translated, " x")
    with grpc.insecure_channel(service.address) as channel:  # the bare generated stub, application metadata only
        raw = mot_pb2_grpc.MotCacheStub(channel)
        with pytest.raises(grpc.RpcError) as info:
            raw.Stats(mot_pb2.StatsRequest(), metadata=METADATA, timeout=30)
        assert info.value.code() == grpc.StatusCode.UNAUTHENTICATED
        bearer = (*METADATA, ("authorization", f"Bearer {TOKEN}"))
        assert raw.Stats(mot_pb2.StatsRequest(), metadata=bearer, timeout=30).store_available


# ---------------------------------------------------------------------------------------------- caches


def test_get_cache_decodes_for_the_target(service, client, models):
    text = fresh_text("get cache")
    ctx = client.put_context(text).context_id
    lm = models[service.translated]
    blob = client.get_cache_blob(ctx, service.translated)
    assert blob.cache_source == "TRANSLATED_FRESH" and blob.target_fingerprint == lm.fingerprint.id
    cache = codec.decode(blob.data, expected_fingerprint=lm.fingerprint.id)
    target_ids = lm.tokenizer(text)["input_ids"]
    assert 0 < cache.seq_len <= len(target_ids)
    assert cache.token_ids[0].tolist() == target_ids[: cache.seq_len]
    assert cache.num_layers == lm.spec.num_layers
    with pytest.raises(FingerprintMismatchError):
        codec.decode(blob.data, expected_fingerprint=models[service.native].fingerprint.id)
    again = client.get_cache_blob(ctx, service.translated)
    assert again.cache_source == "TRANSLATED_HIT" and again.data == blob.data
    assert_code(grpc.StatusCode.FAILED_PRECONDITION, client.get_cache, ctx, service.native)


def _replica_logs(service: Service, *needles: str, timeout: float = 15.0) -> list[str]:
    """The text of every replica's Serve log, once each needle is in one of them (or at the timeout):
    Serve writes a replica's log through a buffer."""
    deadline = time.monotonic() + timeout
    while True:
        logs = [p.read_text(errors="replace") for p in sorted(service.local.replica_logs.glob("replica_*.log"))]
        if all(any(n in text for text in logs) for n in needles) or time.monotonic() > deadline:
            return logs
        time.sleep(0.5)


def test_corrupted_translated_entry_is_detected_dropped_and_recomputed(service, client, models):
    ctx = client.put_context(fresh_text("corrupt")).context_id
    first = client.generate(ctx, service.translated, " The", max_new_tokens=5)
    assert first.cache_source == "TRANSLATED_FRESH"
    info = next(m for m in client.list_models() if m.name == service.translated)
    key = translated_key(
        ctx, models[service.source].fingerprint.id, models[service.translated].fingerprint.id, info.translator_version
    )
    store = RedisCacheStore(service.redis.url, StoreConfig(namespace=service.config["store"]["namespace"]))
    raw = redis.Redis.from_url(service.redis.url)
    try:
        manifest = raw.hgetall(store.manifest_key(key))
        gen, parts = manifest[b"gen"].decode(), int(manifest[b"n"])
        assert parts >= 2, "the test config splits entries into several parts"
        part = store.part_key(key, gen, parts // 2)
        garbage = secrets.token_bytes(len(raw.get(part)))  # same length: only the checksum can tell
        assert raw.set(part, garbage, keepttl=True)
    finally:
        raw.close()
        store.close()

    again = client.generate(ctx, service.translated, " The", max_new_tokens=5)
    assert again.cache_source == "TRANSLATED_FRESH"  # detected, dropped, translated again
    assert again.text == first.text
    assert client.generate(ctx, service.translated, " The", max_new_tokens=5).cache_source == "TRANSLATED_HIT"
    dropped = f"cache entry {key.entry_id} dropped: checksum mismatch"
    assert any(dropped in text for text in _replica_logs(service, dropped))


def test_concurrent_clients_share_one_translation(service):
    with service.client() as setup:
        ctx = setup.put_context(fresh_text("concurrent")).context_id
    n = 16
    barrier = threading.Barrier(n)
    results: list = [None] * n

    def worker(i: int) -> None:
        with service.client() as c:
            barrier.wait()
            try:
                results[i] = c.generate(ctx, service.translated, " Tickets", max_new_tokens=8)
            except Exception as exc:  # noqa: BLE001 - reported below
                results[i] = exc

    threads = [threading.Thread(target=worker, args=(i,)) for i in range(n)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(120)
    failures = [r for r in results if not hasattr(r, "cache_source")]
    assert not failures, failures
    assert Counter(r.cache_source for r in results) == {"TRANSLATED_FRESH": 1, "TRANSLATED_HIT": n - 1}
    assert len({r.text for r in results}) == 1


def test_replica_logs_say_what_each_replica_loaded_and_did(service, client):
    """Our INFO lines reach Serve's replica logs: each replica's torch threads (configured for the
    source, Ray's default for the rest), the model each loaded, and each translation with where its
    time went."""
    ctx = client.put_context(fresh_text("logs")).context_id
    assert client.generate(ctx, service.translated, " The", max_new_tokens=2).cache_source == "TRANSLATED_FRESH"
    wanted = (f"loaded {service.source} ", f"translated {ctx[:12]} for {service.translated}")
    started = [text for text in _replica_logs(service, *wanted) if "replica started; torch threads:" in text]
    assert len(started) == 4, "source, translator and two targets each log their start"
    source_log = next((text for text in started if wanted[0] in text), "")
    assert f"torch threads: {SOURCE_THREADS}" in source_log
    assert all("torch threads: 1" in text for text in started if text is not source_log)
    translation = re.compile(
        rf"{re.escape(wanted[1])} in [\d.]+ s \(fetch [\d.]+, decode [\d.]+, translate [\d.]+, encode\+store [\d.]+;"
    )
    assert any(translation.search(text) for text in started if text is not source_log), "with its steps' times"


# ---------------------------------------------------------------------------------------------- Redis outage (last)


def _restart_later(server: EmbeddedRedis, delay: float) -> threading.Thread:
    thread = threading.Thread(target=lambda: (time.sleep(delay), server.start()), daemon=True)
    thread.start()
    return thread


def test_redis_outage_native_keeps_working_and_translation_resumes(service, client):
    t, n = service.translated, service.native
    ctx = client.put_context(fresh_text("outage")).context_id
    before = client.generate(ctx, t, " Ships", max_new_tokens=5)
    assert before.cache_source == "TRANSLATED_FRESH"
    native_before = client.generate(ctx, t, " Ships", mode="NATIVE", max_new_tokens=5)

    service.redis.stop()
    with service.client(retry=NO_RETRY, timeout=30) as c:
        # native requests go on: the ingress keeps the texts of recent contexts in memory
        during = c.generate(ctx, t, " Ships", mode="NATIVE", max_new_tokens=5)
        assert during.cache_source == "NATIVE_PREFILL" and during.text == native_before.text
        assert c.generate(ctx, n, " Ships", max_new_tokens=3).cache_source == "NATIVE_PREFILL"  # AUTO, no translator
        assert c.score(ctx, n, " Ships leave.", mode="NATIVE").cache_source == "NATIVE_PREFILL"
        # anything that needs the store says UNAVAILABLE (retryable)
        UNAVAILABLE = grpc.StatusCode.UNAVAILABLE
        for call in (
            lambda: c.generate(ctx, t, " Ships"),
            lambda: c.generate(ctx, t, " Ships", mode="TRANSLATE"),
            lambda: c.score(ctx, t, " Ships leave."),
            lambda: c.get_cache(ctx, t),
            lambda: c.put_context(fresh_text("while down")),
            lambda: c.delete_context(ctx),
        ):
            assert "unavailable" in assert_code(UNAVAILABLE, call).details.lower()
        stats = c.stats()
        assert not stats.store_available and stats.store_entries == 0
        # an unknown context cannot be served natively either: its text is nowhere
        assert_code(UNAVAILABLE, c.generate, "f" * 64, n, " x", mode="NATIVE")

    # the client retries UNAVAILABLE with backoff: Redis comes back (empty) while it waits
    patient = RetryPolicy(max_attempts=5, initial_backoff=0.8, max_backoff=2.0)
    with service.client(retry=patient, timeout=60) as c:
        restarter = _restart_later(service.redis, 0.2)  # streaming Generate: retried by the client itself
        after = c.generate(ctx, t, " Ships", max_new_tokens=5)
        restarter.join()
        assert after.cache_source == "TRANSLATED_FRESH"  # nothing survived; re-made from the remembered text
        assert after.text == before.text
        # the translator found no source cache in the store and had the source deployment make it again
        remade = f"source cache of {ctx[:12]} missing; prefilling again"
        via_source = re.compile(rf"translated {ctx[:12]} for {t} in [\d.]+ s \(fetch [\d.]+, decode [\d.]+, via source")
        logs = _replica_logs(service, remade)
        assert any(remade in text for text in logs) and any(via_source.search(text) for text in logs)
        assert c.generate(ctx, t, " Ships", max_new_tokens=5).cache_source == "TRANSLATED_HIT"
        assert c.stats().store_available

        fresh = c.put_context(fresh_text("after restart")).context_id
        service.redis.stop()
        restarter = _restart_later(service.redis, 0.2)  # unary Score: retried by gRPC's retryPolicy
        scored = c.score(fresh, t, " Ships leave.")
        restarter.join()
        assert scored.cache_source == "TRANSLATED_FRESH"
