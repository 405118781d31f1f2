"""Would the target's own token features make translated values carry over to other text?

Out of the training register it is the translated *values* that break (`../copying/`: on news and
on *Moby-Dick*, native values with translated keys restore most of what is lost, chiefly in the
sliding-window layers). A translator sees only the source's rows, aligned onto the target's
tokens. But the target's layer-0 keys/values are a function of each target token alone
(`cache_ops.first_layer_kv`), exact on any text for the price of one layer. This closed-form
probe asks whether adding them as input features makes the values of the deeper layers easier to
predict *out of register*, before anyone builds a translator around them.

Ridge maps (``RidgeFitter``) fitted on training speeches, from
  A: aligned source rows (every third source layer, as a cheaper stand-in for all),
  B: A plus the target's layer-0 rows,
  C: the target's layer-0 rows alone,
to the target's value columns of layers 1.. (sliding and global layers scored apart), then R²
on held-out text of four kinds. Contexts fit inside Gemma-3's 512-token window, so every native
row is there.

    python reports/experiments/token-features/probe.py -t gemma3-270m --out gemma3.json
"""

from __future__ import annotations

import argparse
import json
from pathlib import Path

import torch
from tqdm import tqdm

from mot_core.data import pull_corpus
from mot_core.evaluation import retention
from mot_core.loading import load_model
from mot_core.paths import data_dir
from mot_core.translation.objective import continuation_logits, nll_per_token, prepare, rows_model_cache
from mot_core.translation.pairs import PairRows, context_chunks, pair_rows
from mot_core.translation.ridge import RidgeFitter
from mot_core.translation.samples import cut_samples, read_corpus

SOURCE_LAYER_STRIDE = 3  # --source-stride: every third source layer by default, 1 for all of them


def features(rows, name: str, stride: int = SOURCE_LAYER_STRIDE) -> torch.Tensor:
    source = rows.aligned[:, ::stride].reshape(rows.aligned.shape[0], -1)
    token = rows.target[:, 0]
    return {"A": source, "B": torch.cat((source, token), 1), "C": token}[name]


def value_columns(rows, target_spec) -> torch.Tensor:
    """``[T, L_t - 1, H*D]`` the values of layers 1.. (layer 0 is an input of B and C)."""
    t, layers, _ = rows.target.shape
    per_head = rows.target.reshape(t, layers, target_spec.num_kv_heads, 2, target_spec.head_dim)
    return per_head[:, 1:, :, 1].reshape(t, layers - 1, -1)


def with_values(native_rows: torch.Tensor, values: torch.Tensor, target_spec) -> torch.Tensor:
    """Native rows with the values of layers 1.. (positions 1..) replaced by ``values``."""
    t, layers, width = native_rows.shape
    rows = native_rows.clone().reshape(t, layers, target_spec.num_kv_heads, 2, target_spec.head_dim)
    rows[1:, 1:, :, 1] = values.reshape(t - 1, layers - 1, target_spec.num_kv_heads, target_spec.head_dim)
    return rows.reshape(t, layers, width)


def value_retention(
    source, target, maps: dict, documents: list[str], tokens: int, count: int, stride: int = SOURCE_LAYER_STRIDE
) -> dict:
    """NLL retention with the target's own keys and these maps' values (the values alone judged)."""
    samples = cut_samples(documents, source.tokenizer, context_tokens=tokens, count=count, seed=7)
    sums: dict[str, float] = {}
    scored = 0
    for sample in tqdm(samples, desc="retention"):
        p = prepare(source, target, sample, 64, 4)
        rows = PairRows(p.aligned_rows[: p.keep], p.native_rows)
        caches = {"native": rows_model_cache(target, p.native_rows, p.target_ids, p.keep), "none": None}
        for name, (weight, x_mean, y_mean) in maps.items():
            values = (features(rows, name, stride)[1:] - x_mean) @ weight + y_mean
            caches[name] = rows_model_cache(
                target, with_values(p.native_rows, values, target.spec), p.target_ids, p.keep
            )
        for name, cache in caches.items():
            logits = continuation_logits(target, cache, p.tail_ids, p.continuation_ids)
            sums[name] = sums.get(name, 0.0) + nll_per_token(logits, p.continuation_ids).sum().item()
        scored += p.continuation_ids.shape[-1]
    nll = {k: v / scored for k, v in sums.items()}
    return {name: retention(nll["none"], nll[name], nll["native"]) for name in maps} | {"nll": nll}


def chunks(documents: list[str], tokenizer, tokens: int, count: int) -> list[str]:
    """``count`` contexts spread evenly over all of the text (not just its first documents)."""
    pieces = [piece for document in documents for piece in context_chunks(tokenizer, document, tokens)]
    return pieces[:: max(1, len(pieces) // count)][:count]


@torch.no_grad()
def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("-s", "--source", default="smollm2-135m")
    parser.add_argument("-t", "--target", default="gemma3-270m")
    parser.add_argument("--tokens", type=int, default=400, help="source tokens per context (inside the window)")
    parser.add_argument("--train-contexts", type=int, default=40)
    parser.add_argument("--test-contexts", type=int, default=10)
    parser.add_argument("--alpha", type=float, default=1e-2)
    parser.add_argument("--source-stride", type=int, default=SOURCE_LAYER_STRIDE, help="use every Nth source layer")
    parser.add_argument("--retention-samples", type=int, default=0, help="also NLL retention with these values")
    parser.add_argument("--out", type=Path, required=True)
    args = parser.parse_args()
    stride = args.source_stride
    source, target = load_model(args.source), load_model(args.target)
    split = pull_corpus()
    tests = {
        "validation speeches": split.texts("validation"),
        "news dev": read_corpus(data_dir() / "news" / "dev.jsonl"),
        "wikipedia dev": read_corpus(data_dir() / "wiki" / "dev.jsonl"),
        "moby-dick": read_corpus(data_dir() / "moby-dick" / "moby-dick.txt"),
    }
    sliding = torch.tensor([w is not None for w in target.spec.sliding_windows[1:]])
    fitters: dict[str, RidgeFitter] = {}
    for text in tqdm(chunks(split.texts("train"), source.tokenizer, args.tokens, args.train_contexts), desc="fit"):
        rows = pair_rows(source, target, text)
        y = value_columns(rows, target.spec)[1:]
        for name in "ABC":
            x = features(rows, name, stride)[1:]
            fitters.setdefault(name, RidgeFitter(x.shape[1], y[0].numel())).add(x, y)
    maps = {name: fitter.solve(args.alpha) for name, fitter in fitters.items()}
    result = {"tokens": args.tokens, "train_contexts": args.train_contexts, "alpha": args.alpha}
    result |= {"source_stride": args.source_stride, "r2": {}}
    for test, documents in tests.items():
        sse = {name: torch.zeros(2) for name in "ABC"}
        ys = []
        for text in tqdm(chunks(documents, source.tokenizer, args.tokens, args.test_contexts), desc=test):
            rows = pair_rows(source, target, text)
            y = value_columns(rows, target.spec)[1:]
            ys.append(y)
            for name, (weight, x_mean, y_mean) in maps.items():
                pred = ((features(rows, name, stride)[1:] - x_mean) @ weight + y_mean).reshape(y.shape)
                err = (pred - y).pow(2).sum((0, 2))  # per layer
                sse[name] += torch.stack((err[sliding].sum(), err[~sliding].sum()))
        y = torch.cat(ys)
        dev = (y - y.mean(0)).pow(2).sum((0, 2))
        sst = torch.stack((dev[sliding].sum(), dev[~sliding].sum()))
        kinds = [k for k, layers in (("sliding", sliding), ("global", ~sliding)) if layers.any()]
        result["r2"][test] = {
            name: {kind: float(1 - e[i] / sst[i]) for i, kind in enumerate(("sliding", "global")) if kind in kinds}
            for name, e in sse.items()
        }
        row = "  ".join(f"{n}: " + "/".join(f"{r:.3f}" for r in v.values()) for n, v in result["r2"][test].items())
        print(f"{test:>20}  R² values ({'/'.join(kinds)} layers)  {row}", flush=True)
        if args.retention_samples:
            kept = value_retention(
                source, target, maps, documents, args.tokens, args.retention_samples, args.source_stride
            )
            result.setdefault("value_retention", {})[test] = kept
            print(
                f"{test:>20}  retention, native keys + values of  " + "  ".join(f"{n}: {kept[n]:.3f}" for n in maps),
                flush=True,
            )
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.write_text(json.dumps(result, indent=2))


if __name__ == "__main__":
    main()
