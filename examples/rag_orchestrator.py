"""An agent orchestrator that shares one RAG context with two target models through the MoT cache.

The retrieved documents are stored once (the service's source model prefills them); then two
agents, each backed by a different target model, answer questions about them concurrently. A
target with a translator gets the context as a translated cache (TRANSLATED_FRESH the first
time, TRANSLATED_HIT afterwards) instead of prefilling it; one without prefills natively
(NATIVE_PREFILL). Per agent and round it prints the answer, the cache source and the time to
first token.

    mot serve --config service.yaml &          # prints the gRPC address
    python examples/rag_orchestrator.py --address 127.0.0.1:9000
    python examples/rag_orchestrator.py --address ... --target gemma3-270m --target qwen2.5-0.5b

Targets default to the service's first two targets (from ListModels), preferring those with a
translator. The bearer token, if the service needs one, comes from --token or $MOT_API_TOKEN.
"""

from __future__ import annotations

import argparse
import asyncio
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))  # run from a checkout without installing

from services.client import AsyncMotClient, GenerationResult, ModelInfo, MotClientError  # noqa: E402

DOCUMENTS = [
    "Harbor Street Library opens at 9 a.m. on weekdays and at 11 a.m. on Saturdays. It is closed on Sundays.",
    "The library lends up to 12 books per card. Loans last three weeks and can be renewed twice online.",
    "Late returns cost 20 cents per book per day, capped at 5 dollars per book. Children's books have no late fee.",
    "The reading room on the second floor is silent. Group study rooms can be booked for two hours at a time.",
]

QUESTIONS = [
    "When does the library open on Saturdays?",
    "How much is the late fee per day?",
]


def pick_targets(models: list[ModelInfo], wanted: list[str], count: int = 2) -> list[str]:
    targets = [m for m in models if m.role == "target"]
    names = {m.name for m in targets}
    if wanted:
        unknown = [w for w in wanted if w not in names]
        if unknown:
            raise SystemExit(f"unknown target(s) {', '.join(unknown)}; the service has: {', '.join(sorted(names))}")
        return wanted
    targets.sort(key=lambda m: not m.has_translator)  # translated targets first (stable otherwise)
    if not targets:
        raise SystemExit("the service lists no target model")
    return [m.name for m in targets[:count]]


async def ask(client: AsyncMotClient, context_id: str, target: str, question: str, max_new_tokens: int):
    prompt = f"\n\nQuestion: {question}\nAnswer:"
    return await client.generate(context_id, target, prompt, max_new_tokens=max_new_tokens, stop=["\n"])


def report(round_no: int, target: str, result: GenerationResult | BaseException) -> None:
    if isinstance(result, BaseException):
        print(f"[round {round_no}] {target}: failed: {result}")
        return
    facts = result.facts
    print(f"[round {round_no}] {target}")
    print(f"    answer:       {result.text.strip()!r}")
    print(f"    cache source: {facts.cache_source}")
    print(
        f"    TTFT:         {facts.ttft_ms:.1f} ms (cache {facts.cache_ms:.1f} ms, {facts.context_tokens} ctx tokens)"
    )


async def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--address", default="127.0.0.1:9000", help="host:port of the service's gRPC proxy")
    parser.add_argument(
        "--target", action="append", default=[], help="target model name (repeat; default: two from ListModels)"
    )
    parser.add_argument("--token", default=None, help="bearer token (default: $MOT_API_TOKEN)")
    parser.add_argument("--max-new-tokens", type=int, default=24)
    parser.add_argument("--timeout", type=float, default=120.0, help="per-call deadline in seconds")
    args = parser.parse_args(argv)

    async with AsyncMotClient(args.address, token=args.token, timeout=args.timeout) as client:
        try:
            models = await client.list_models()
            targets = pick_targets(models, args.target)
            source = next((m.name for m in models if m.role == "source"), "?")
            put = await client.put_context(documents=DOCUMENTS)
            print(f"context {put.context_id[:16]}...: {put.token_count} tokens prefilled once by {source}")
            print(f"  ({'already cached' if put.already_cached else f'{put.stored_bytes} bytes stored'})")
            for round_no, question in enumerate(QUESTIONS, 1):
                print(f"\nQ{round_no}: {question}")
                results = await asyncio.gather(
                    *(ask(client, put.context_id, t, question, args.max_new_tokens) for t in targets),
                    return_exceptions=True,
                )
                for target, result in zip(targets, results, strict=True):
                    report(round_no, target, result)
        except MotClientError as exc:
            print(f"error: {exc}", file=sys.stderr)
            return 1
    return 0


if __name__ == "__main__":
    sys.exit(asyncio.run(main()))
