"""The overlay's probe and AOT build cover every token count the DSpark profile sends through the
patched kernels: up to max_num_seqs x (k + 1) for verify and draft steps (docs/reference/speculation.md)."""

from __future__ import annotations

from sparkpair_overlay.kernels import fp8_einsum, router_gemm
from sparkpair_overlay.probe import kernels as probe_kernels
from sparkpair_overlay.probe import serve_paths
from sparkpair_serving.profile import load_profile

REV = "9e165c30e2704aec5d9d593cce3eebd58bbef1cb"
"""The 0731 commit configs/profiles/deepseek-v4-flash.yaml pins (--revision)."""


def test_the_probe_measures_the_default_profiles_verify_and_draft_step() -> None:
    server = load_profile("deepseek-v4-flash").server
    verify = server.verify_tokens()
    assert verify == serve_paths.VERIFY_TOKENS == 36
    assert server.max_num_seqs() == serve_paths.DECODE_BATCH
    assert (
        server.speculation is not None and server.speculation.num_speculative_tokens == serve_paths.DSPARK_K
    )
    assert verify in probe_kernels.ROUTER_MS and verify in probe_kernels.O_PROJ_TS
    # every per-token DeepGEMM serve path is tried at the verify step too (not the load-time transform)
    for path in serve_paths.serve_paths(tp=2):
        if all(s.tokens == 0 for s in path.shapes):
            continue
        assert verify in {s.tokens for s in path.shapes}, (path.name, [s.tokens for s in path.shapes])


def test_the_aot_variants_serve_every_token_count_because_the_count_is_never_specialised() -> None:
    # Triton specialises an int argument on == 1 and on divisibility by 16 unless told not to;
    # with M / T in do_not_specialize one compiled variant per config serves M = 1 .. 36 and beyond.
    assert "M" in router_gemm._router_dot_kernel.do_not_specialize
    assert "M" in router_gemm._router_rows_kernel.do_not_specialize
    assert all("T" in k.do_not_specialize for k in fp8_einsum.JITTED.values())
    assert len(fp8_einsum.JITTED) == 5


def test_inspect_requires_the_dspark_draft_weights_for_the_dspark_profile(tmp_path) -> None:  # type: ignore[no-untyped-def]
    import json
    import shutil
    from pathlib import Path

    from sparkpair_cli.preflight.checkpoint import expects_draft, inspect_checkpoint, resolve_model_dir

    good = Path(__file__).resolve().parents[2] / "fixtures/hosts/spark-head-good/models"
    d = resolve_model_dir("deepseek-ai/DeepSeek-V4-Flash-0731", good, REV)
    assert d is not None
    assert expects_draft(load_profile("deepseek-v4-flash")) and not expects_draft(
        load_profile("deepseek-v4-flash-nospec")
    )
    rep = inspect_checkpoint(d, gate_dtype="BF16", need_draft=True)
    assert rep.problems == [] and rep.draft_tensors == 1 and "draft (mtp.*) tensors 1" in rep.summary
    # The same checkpoint without its draft (the preview): named, with what is wanted.
    nodraft = tmp_path / "ckpt"
    shutil.copytree(d, nodraft)
    idx = nodraft / "model.safetensors.index.json"
    data = json.loads(idx.read_text())
    data["weight_map"] = {k: v for k, v in data["weight_map"].items() if not k.startswith("mtp.")}
    idx.write_text(json.dumps(data))
    bad = inspect_checkpoint(nodraft, need_draft=True)
    assert any("draft weights: no mtp.* tensors in 2 shards" in p and "0731" in p for p in bad.problems), (
        bad.problems
    )
    assert inspect_checkpoint(nodraft).problems == []


def test_preflight_memory_counts_the_nodes_checkpoint_share_with_the_draft(tmp_path, monkeypatch) -> None:  # type: ignore[no-untyped-def]
    import json
    from pathlib import Path

    from sparkpair_cli.deploy.nodeenv import load_node_env_file
    from sparkpair_cli.preflight import checks as pf

    hosts = Path(__file__).resolve().parents[2] / "fixtures/hosts"
    monkeypatch.delenv("HF_HOME", raising=False)
    (tmp_path / "proc").mkdir()
    gib = 1 << 30
    (tmp_path / "proc/meminfo").write_text(
        "".join(
            f"{k}: {v * gib // 1024} kB\n"
            for k, v in (("MemTotal", 128), ("MemFree", 126), ("MemAvailable", 126))
        )
    )
    env = load_node_env_file(hosts / "spark-head-good" / "node.env")
    snap = tmp_path / f"models/hub/models--deepseek-ai--DeepSeek-V4-Flash-0731/snapshots/{REV}"
    snap.mkdir(parents=True)
    (tmp_path / "models/hub/models--deepseek-ai--DeepSeek-V4-Flash-0731/refs").mkdir()
    (tmp_path / "models/hub/models--deepseek-ai--DeepSeek-V4-Flash-0731/refs/main").write_text(REV)
    (snap / "model.safetensors.index.json").write_text(
        json.dumps({"weight_map": {"mtp.0.x": "a.safetensors"}})
    )
    with (snap / "a.safetensors").open("wb") as f:  # sparse: the size stat reports, no disk used
        f.truncate(156 * gib)
    rep = pf.run_local(env, load_profile("deepseek-v4-flash"), root=tmp_path, only=["memory"])
    got = {r.id: r for r in rep.results}
    assert (
        got["memory-weights"].status == "pass"
        and "78.0 GiB (incl. the DSpark draft" in got["memory-weights"].message
    )
    with (snap / "a.safetensors").open("r+b") as f:
        f.truncate(230 * gib)
    rep = pf.run_local(env, load_profile("deepseek-v4-flash"), root=tmp_path, only=["memory"])
    bad = {r.id: r for r in rep.results}["memory-weights"]
    assert bad.status == "fail" and "115.0 GiB" in bad.message and "< 108.8 GiB" in bad.message, bad.message
