"""The product end to end: real pretrained models, the shipped translators, Redis, Ray Serve, gRPC."""

import pytest
import yaml

from services.client import MotClient
from services.demo import DEMO_CONFIG, QUESTION, demo_documents
from services.ports import free_port
from services.runner import LocalService

pytestmark = pytest.mark.real_models


@pytest.fixture(scope="module")
def client():
    config = yaml.safe_load(DEMO_CONFIG.read_text())
    config.update(grpc_port=free_port(), metrics_port=free_port())
    for part in [config["source"], *config["targets"]]:
        part["placement"] = {"num_cpus": 0, "num_gpus": 0}
    config["translator_placement"] = {"num_cpus": 0, "num_gpus": 0}
    with LocalService(config) as service:
        with MotClient(service.grpc_address, timeout=600, token="") as c:
            c.wait_ready(timeout=300)
            yield c


def test_shared_context_through_translated_caches(client):
    targets = [m for m in client.list_models() if m.role == "target"]
    assert len(targets) == 2 and all(m.has_translator for m in targets)
    put = client.put_context(documents=demo_documents(3))
    assert put.token_count > 100 and not put.already_cached
    for target in targets:
        first = client.generate(put.context_id, target.name, QUESTION, mode="TRANSLATE", max_new_tokens=8)
        again = client.generate(put.context_id, target.name, QUESTION, mode="TRANSLATE", max_new_tokens=8)
        native = client.generate(put.context_id, target.name, QUESTION, mode="NATIVE", max_new_tokens=8)
        assert (first.cache_source, again.cache_source, native.cache_source) == (
            "TRANSLATED_FRESH",
            "TRANSLATED_HIT",
            "NATIVE_PREFILL",
        )
        assert first.text.strip() and again.text == first.text  # same cache, greedy: same answer
        assert first.facts.context_tokens == native.facts.context_tokens > 100
        scored = client.score(
            put.context_id, target.name, " the States of Costa Rica and Nicaragua", prompt=QUESTION, mode="TRANSLATE"
        )
        assert scored.cache_source == "TRANSLATED_HIT" and len(scored.tokens) > 3
    assert client.stats().store_entries >= 4  # text, source cache, two translated caches
