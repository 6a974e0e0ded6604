"""The overlay's probe and AOT build cover every token count the DSpark profile sends through the
patched kernels: up to max_num_seqs x (k + 1) for verify and draft steps (docs/reference/speculation.md)."""

from __future__ import annotations

from sparkpair_health.profile import load_profile
from sparkpair_overlay.kernels import fp8_einsum, router_gemm
from sparkpair_overlay.probe import kernels as probe_kernels
from sparkpair_overlay.probe import serve_paths


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
    assert "T" in fp8_einsum._fp8_einsum_kernel.do_not_specialize
