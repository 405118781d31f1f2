"""``make demo``: the whole service on this machine, one RAG context shared by two target models.

Starts the service (embedded Redis, Ray Serve, gRPC) from a config, puts a few documents as one
context (the source model prefills it once), asks each target model a question about it, and
prints per target: the answer, TTFT with the translated cache (fresh, then a store hit) next to
TTFT with native prefill, where each cache came from, and the bytes in Redis. Then shuts down.
"""

from __future__ import annotations

import logging
import time
from pathlib import Path

from services.client import MotClient
from services.runner import LocalService

log = logging.getLogger(__name__)

DEMO_CONFIG = Path(__file__).resolve().parent.parent / "configs" / "local.yaml"
DEMO_TEXT = Path(__file__).resolve().parent.parent / "data" / "demo" / "lincoln-1864.txt"
QUESTION = "\n\nQuestion: At whose request was an engineer authorized to survey the river San Juan?\nAnswer:"


def demo_documents(count: int = 6) -> list[str]:
    """The first paragraphs of a held-out speech, as separate retrieved documents."""
    paragraphs = [p.strip() for p in DEMO_TEXT.read_text(encoding="utf-8").split("\n\n") if len(p.strip()) > 80]
    return paragraphs[:count]


def run_demo(config: Path = DEMO_CONFIG, echo=print, max_new_tokens: int = 24) -> list[dict]:
    rows = []
    with LocalService(config) as service:
        client = MotClient(service.grpc_address, timeout=600)
        models = client.wait_ready(timeout=120)
        targets = [m for m in models if m.role == "target"]
        documents = demo_documents()
        started = time.perf_counter()
        put = client.put_context(documents=documents)
        echo(
            f"\ncontext {put.context_id[:16]}...: {len(documents)} documents, {put.token_count} source tokens, "
            f"prefilled by {put.source_model} in {time.perf_counter() - started:.2f} s, "
            f"{put.stored_bytes / 1e6:.2f} MB in Redis"
        )
        echo(f"question: {QUESTION.strip()}")
        for target in targets:
            ask = dict(prompt=QUESTION, max_new_tokens=max_new_tokens, stop=["\n"])
            first = client.generate(put.context_id, target.name, mode="AUTO", **ask)
            again = client.generate(put.context_id, target.name, mode="AUTO", **ask)
            native = client.generate(put.context_id, target.name, mode="NATIVE", **ask)
            rows.append({"target": target.name, "first": first, "again": again, "native": native})
            echo(f"\n== {target.name} (translator: {target.translator_version or 'none'})")
            echo(f"  {'cache':<18} {'TTFT ms':>9}  answer")
            for label, result in (("first request", first), ("repeat", again), ("native prefill", native)):
                echo(f"  {result.cache_source:<18} {result.ttft_ms:>9.1f}  {result.text.strip()!r}  [{label}]")
            if native.ttft_ms > 0:
                echo(f"  TTFT translated-hit / native prefill: {again.ttft_ms / native.ttft_ms:.2f}x")
        stats = client.stats()
        echo(
            f"\nRedis: {stats.store_entries} entries, {stats.store_bytes / 1e6:.2f} MB "
            f"(budget {stats.store_budget_bytes / 1e9:.1f} GB)"
        )
        client.close()
    echo("service stopped")
    return rows
