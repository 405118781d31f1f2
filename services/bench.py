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

from mot_core.errors import MotError
from mot_core.translation.pairs import context_chunks
from services.client import MotClient
from services.demo import DEMO_CONFIG, DEMO_TEXT
from services.runner import LocalService

QUESTION = "\n\nQuestion: What is this message mainly about?\nAnswer:"
# contexts each replica serves (translated and native) before anything is timed: a replica's first
# calls also grow its heap (mot_core/allocator.py), which a running service has long done
WARMUP_CONTEXTS = 2


def _contexts_of(tokens: int, count: int, tokenizer) -> list[str]:
    """``count`` distinct contexts of ``tokens`` source tokens each: consecutive windows of the demo text.

    A fresh translation needs a context the store has not seen, so every fresh measurement (and the
    warm-up) gets a window of its own.
    """
    contexts = list(context_chunks(tokenizer, DEMO_TEXT.read_text(encoding="utf-8"), tokens, max_chunks=count))
    if len(contexts) < count:
        raise MotError(
            f"the demo text holds {len(contexts)} contexts of {tokens} source tokens, fewer than {count} "
            f"({WARMUP_CONTEXTS} to warm up, one per repeat): lower --repeats or --context-tokens"
        )
    return contexts


def bench_ttft(config: Path = DEMO_CONFIG, context_tokens: int = 1024, repeats: int = 3, echo: Callable = print):
    """Per target, medians of ``repeats``: TTFT with a fresh translation, with a stored one, with native prefill.

    Every replica first serves ``WARMUP_CONTEXTS`` contexts (translated and native), so no row pays
    for a replica's first calls; each fresh measurement translates a context of its own.
    """
    from transformers import AutoTokenizer

    from mot_core.loading import resolve
    from services.config import load_config

    source = load_config(config).source.name
    count = WARMUP_CONTEXTS + repeats
    texts = _contexts_of(context_tokens, count, AutoTokenizer.from_pretrained(resolve(source)))
    with LocalService(config) as service:
        client = MotClient(service.grpc_address, timeout=900)
        models = client.wait_ready(timeout=300)
        contexts = [client.put_context(text) for text in texts]
        warmups, puts = contexts[:WARMUP_CONTEXTS], contexts[WARMUP_CONTEXTS:]
        echo(
            f"contexts: {repeats} x {puts[0].token_count} source tokens ({puts[0].stored_bytes / 1e6:.2f} MB "
            f"source cache each), medians of {repeats} after {WARMUP_CONTEXTS} warm-up contexts per replica and mode"
        )
        echo(f"{'target':<16} {'fresh ms':>9} {'hit ms':>9} {'native ms':>10} {'fresh/native':>12} {'hit/native':>10}")
        rows = []
        for target in (m for m in models if m.role == "target"):
            ask = dict(prompt=QUESTION, max_new_tokens=1)
            for warmup in warmups:
                for mode in ("AUTO", "NATIVE"):
                    client.generate(warmup.context_id, target.name, mode=mode, **ask)
            fresh = [client.generate(put.context_id, target.name, mode="AUTO", **ask) for put in puts]
            hits = [client.generate(put.context_id, target.name, mode="AUTO", **ask) for put in puts]
            natives = [client.generate(put.context_id, target.name, mode="NATIVE", **ask) for put in puts]
            row = {"target": target.name}
            for name, replies in (("fresh", fresh), ("hit", hits), ("native", natives)):
                row[f"{name}_ms"] = statistics.median(r.ttft_ms for r in replies)
                row[f"{name}_sources"] = sorted({r.cache_source for r in replies})
            rows.append(row)
            echo(
                f"{target.name:<16} {row['fresh_ms']:>9.1f} {row['hit_ms']:>9.1f} {row['native_ms']:>10.1f} "
                f"{row['fresh_ms'] / row['native_ms']:>12.3f} {row['hit_ms'] / row['native_ms']:>10.3f}"
                f"   ({'/'.join(row['fresh_sources'])}, then {'/'.join(row['hit_sources'])})"
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
