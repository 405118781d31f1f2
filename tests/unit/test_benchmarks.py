from mot_core.benchmarks import bench_codec


def test_codec_bench_reports_side_by_side_rows(tiny_models):
    rows = bench_codec(tiny_models["gemma3_text"], context_tokens=64, repeats=1)
    assert [r.dtype for r in rows] == ["bfloat16", "int8"]
    for row in rows:
        assert row.context_tokens == 64 and row.prefill_s > 0 and row.encode_gbps > 0 and row.decode_gbps > 0
    assert rows[1].encoded_mb < rows[0].encoded_mb  # int8 halves the bytes of bf16 (plus small scales)
