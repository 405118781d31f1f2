"""A running service for integration tests: tiny models of three architectures, a ridge
translator fitted on the spot (or a mixture trained a few steps), real Redis, real Ray Serve,
real gRPC on loopback."""

from __future__ import annotations

from pathlib import Path

import grpc

from mot.v1 import mot_pb2_grpc
from mot_core.roundtrip import demo_text
from mot_core.tiny import save_tiny, tiny_model
from mot_core.translation.pairs import context_chunks, fit_ridge
from mot_core.translation.samples import cut_samples
from mot_core.translation.train import Recipe, train_pair
from services.app import APP_NAME
from services.ports import free_port

METADATA = (("application", APP_NAME),)


def _translated_pair(dirs: dict) -> tuple:
    """The tiny source and translated target as loaded models named by their saved directories
    (so a translator fitted on them names the models the service loads)."""
    source, target = tiny_model("llama", seed=0), tiny_model("gemma3_text", seed=1)
    source.name, target.name = str(dirs["llama"]), str(dirs["gemma3_text"])
    return source, target


def build_models_and_translator(root: Path) -> dict:
    """Tiny source/targets saved as HF directories plus a ridge translator source -> gemma3."""
    dirs = {arch: save_tiny(arch, root / arch, seed=i) for i, arch in enumerate(("llama", "gemma3_text", "qwen2"))}
    source, target = _translated_pair(dirs)
    contexts = list(context_chunks(source.tokenizer, demo_text(), 5, max_chunks=60))
    fit_ridge(source, target, contexts, alpha=1e-2, native_tail=1).save(root / "ridge-llama-gemma3")
    return {"dirs": dirs, "translator": root / "ridge-llama-gemma3"}


def first_layer_mixture(built: dict, out: Path, fraction: float, recent: float, attended: float = 0.0) -> Path:
    """A mixture translator source -> gemma3 that reads the target's own layer 0 (so the translator
    replica loads that layer), trained a few steps, shipping an operating point like the real ones."""
    source, target = _translated_pair(built["dirs"])
    text = demo_text()
    train = cut_samples([text], source.tokenizer, context_tokens=6, continuation_chars=60, count=8, seed=0)
    recipe = Recipe(
        context_tokens=[6],
        continuation_tokens=8,
        steps=2,
        mixes=1,
        native_tail=1,
        val_every=10,
        val_samples=2,
        stats_samples=4,
        recompute=fraction,
        recompute_recent=recent,
        recompute_attended=attended,
        first_layer_input=True,
    )
    train_pair(source, target, train, train[:2], recipe, out)
    return out


SOURCE_THREADS = 2  # the source replica's torch threads; the others get Ray's default, 1


def service_config(built: dict, translator: Path | None = None) -> dict:
    """The test service; ``translator`` replaces the ridge one (e.g. with an operating point)."""
    zero = {"num_cpus": 0, "num_gpus": 0}
    translator = translator or built["translator"]
    return {
        "source": {"name": str(built["dirs"]["llama"]), "placement": {**zero, "torch_threads": SOURCE_THREADS}},
        "targets": [
            {"name": str(built["dirs"]["gemma3_text"]), "translator": str(translator), "placement": zero},
            {"name": str(built["dirs"]["qwen2"]), "placement": zero},
        ],
        "translator_placement": zero,
        "grpc_port": free_port(),
        "metrics_port": free_port(),
        "store": {"namespace": "test", "ttl_seconds": 600, "max_bytes": 64 << 20, "chunk_bytes": 1 << 16},
        "limits": {
            "max_context_chars": 20_000,
            "max_context_tokens": 2048,
            "max_new_tokens": 64,
            "max_request_bytes": 64 * 1024,
        },
    }


def stub(address: str) -> mot_pb2_grpc.MotCacheStub:
    return mot_pb2_grpc.MotCacheStub(grpc.insecure_channel(address))
