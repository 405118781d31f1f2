"""Service benchmark: TTFT through gRPC with a translated cache vs native prefill, and store throughput.

Side by side in one run, medians of ``repeats``; absolute times on a shared CPU are noisy, the
ratios are the numbers to read.
"""

from __future__ import annotations

import os
import statistics
import time
from collections.abc import Callable
from pathlib import Path

from services.client import MotClient
from services.demo import DEMO_CONFIG, DEMO_TEXT
from services.runner import LocalService

QUESTION = "\n\nQuestion: What is this message mainly about?\nAnswer:"


def _context_of(tokens: int, tokenizer) -> str:
    text = DEMO_TEXT.read_text(encoding="utf-8")
    offsets = tokenizer(text, add_special_tokens=False, return_offsets_mapping=True)["offset_mapping"]
    return text[: offsets[min(tokens, len(offsets)) - 1][1]]


def bench_ttft(config: Path = DEMO_CONFIG, context_tokens: int = 1024, repeats: int = 3, echo: Callable = print):
    from transformers import AutoTokenizer

    from mot_core.loading import resolve

    with LocalService(config) as service:
        client = MotClient(service.grpc_address, timeout=900)
        models = client.wait_ready(timeout=300)
        source = next(m for m in models if m.role == "source")
        context = _context_of(context_tokens, AutoTokenizer.from_pretrained(resolve(source.name)))
        put = client.put_context(context)
        echo(f"context: {put.token_count} source tokens, {put.stored_bytes / 1e6:.2f} MB source cache")
        echo(f"{'target':<16} {'fresh ms':>9} {'hit ms':>9} {'native ms':>10} {'hit/native':>10}")
        rows = []
        for target in (m for m in models if m.role == "target"):
            ask = dict(prompt=QUESTION, max_new_tokens=1)
            fresh = client.generate(put.context_id, target.name, mode="AUTO", **ask)
            hits = [client.generate(put.context_id, target.name, mode="AUTO", **ask) for _ in range(repeats)]
            natives = [client.generate(put.context_id, target.name, mode="NATIVE", **ask) for _ in range(repeats)]
            hit = statistics.median(r.ttft_ms for r in hits)
            native = statistics.median(r.ttft_ms for r in natives)
            rows.append(
                {
                    "target": target.name,
                    "fresh_ms": fresh.ttft_ms,
                    "hit_ms": hit,
                    "native_ms": native,
                    "fresh_source": fresh.cache_source,
                    "hit_source": hits[0].cache_source,
                }
            )
            echo(
                f"{target.name:<16} {fresh.ttft_ms:>9.1f} {hit:>9.1f} {native:>10.1f} {hit / native:>10.3f}"
                f"   ({fresh.cache_source}, then {hits[0].cache_source})"
            )
        client.close()
    return rows


def bench_store(megabytes: int = 20, repeats: int = 5, echo: Callable = print) -> dict:
    from services.config import StoreConfig
    from services.embedded_redis import EmbeddedRedis
    from services.store import RedisCacheStore, source_key

    blob = os.urandom(megabytes * 1_000_000)
    key = source_key("0" * 64, "bench")
    with EmbeddedRedis(maxmemory=(megabytes * 4) << 20) as server:
        store = RedisCacheStore(server.url, StoreConfig(max_bytes=(megabytes * 3) << 20))
        puts, gets = [], []
        for _ in range(repeats):
            started = time.perf_counter()
            store.put(key, blob)
            puts.append(time.perf_counter() - started)
            started = time.perf_counter()
            assert store.get(key) == blob
            gets.append(time.perf_counter() - started)
        store.close()
    result = {
        "mb": megabytes,
        "put_mb_s": megabytes / statistics.median(puts),
        "get_mb_s": megabytes / statistics.median(gets),
    }
    echo(
        f"store: {megabytes} MB blob, put {result['put_mb_s']:.0f} MB/s, get {result['get_mb_s']:.0f} MB/s "
        f"(median of {repeats}, embedded redis-server, 8 MiB chunks)"
    )
    return result
