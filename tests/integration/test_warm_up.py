"""Replicas warm up at start (``warm_up``): every path a request takes, once, on a short text, so
that the first request does not pay for first calls. Warming up must touch nothing shared: no
store entry, no call into another replica."""

from __future__ import annotations

import pytest

from mot_core.loading import load_model_meta
from mot_core.translation.translator import load_translator
from services.config import Limits, StoreConfig, TargetSpec
from services.engines import SourceEngine, TargetEngine, TranslatorEngine
from services.store import RedisCacheStore
from tests.integration.service_fixtures import first_layer_mixture


def _never(*args):
    pytest.fail(f"warming up called another replica with {args}")


def test_every_replica_warms_up_on_its_own_and_writes_nothing(redis_server, service_models, tmp_path):
    dirs = service_models["dirs"]
    source_name, target_name = str(dirs["llama"]), str(dirs["gemma3_text"])
    # a translator with an operating point (recent and attended shares) and the target's layer 0 as
    # input: the warm-up runs the translator, the layer-0 pass and the recompute
    translator = load_translator(first_layer_mixture(service_models, tmp_path / "mixture", 0.5, 0.2, 0.1))
    config = StoreConfig(namespace="warm-up", max_bytes=64 << 20, chunk_bytes=1 << 16)
    with RedisCacheStore(redis_server.url, config) as store:
        engines = {
            "source": SourceEngine(source_name, store, config, Limits()),
            "translator": TranslatorEngine(
                load_model_meta(source_name),
                {target_name: load_model_meta(target_name, first_layer=True)},
                {target_name: translator},
                store,
                config,
                _never,
                warm_up_tokens=200,  # and its shapes of contexts to 200 tokens, on a CPU with bfloat16 matmuls
            ),
            "target": TargetEngine(
                TargetSpec(name=target_name), None, store, Limits(), _never, translator_card=translator.card
            ),
            "target without a translator": TargetEngine(str(dirs["qwen2"]), None, store, Limits(), None),
        }
        for role, engine in engines.items():
            assert engine.warm_up() > 0, role
        stats = store.stats()
        assert stats.entries == 0 and stats.hits == 0 and stats.misses == 0
