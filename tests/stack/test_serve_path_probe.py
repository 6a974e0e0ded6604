"""The probe's serve-path candidates as they run in the image, and its fault handling.

Discovery (what each candidate imports, under which names, and the vLLM switch it implies) runs
for real against the installed vLLM 0.33 and its vendored DeepGEMM. DeepGEMM's kernels cannot
run on a CPU, so the fault cases replace a candidate's ``run`` (and, where the fault needs a
DeepGEMM that imports, its ``discover``) with one that raises, returns perturbed numbers, or is
absent, then go through the real ``run_probe`` JSON, the ``sparkpair probe`` command's exit
code and the node's probe step. Bar: DeepGEMM absent, crashing or wrong on a path
either picks a correct alternative and says why in the plan, or stops the node with a verdict
naming the path and each candidate's error.
"""

from __future__ import annotations

import dataclasses
import importlib
import importlib.metadata
import importlib.util
import inspect
import json
import typing
from pathlib import Path

import pytest
import torch

pytestmark = [pytest.mark.stack, pytest.mark.per_version]

from sparkpair_overlay.deepgemm import exported_names, locate_deepgemm  # noqa: E402
from sparkpair_overlay.numerics import rel_fro  # noqa: E402
from sparkpair_overlay.plan import ProbeResults, build_plan  # noqa: E402
from sparkpair_overlay.probe import run_probe  # noqa: E402  (the real one, before any monkeypatch)
from sparkpair_overlay.probe.choice import Candidate, ServePath, Shape, Trial  # noqa: E402
from sparkpair_overlay.probe.serve_paths import serve_paths  # noqa: E402

#: The DeepGEMM entry point each path's deep_gemm candidate calls (serve_paths.py).
DG_SYMBOL = {
    "linear-fp8-block": "fp8_gemm_nt",
    "moe-mxfp4": "m_grouped_fp8_fp4_gemm_nt_contiguous",
    "mhc-prenorm": "tf32_hc_prenorm_gemm",
    "indexer-mqa-logits": "fp8_fp4_mqa_logits",
    "wo_a-scale": "transform_sf_into_required_layout",
}
SUNK = "RuntimeError: Assertion error (csrc/apis/layout.hpp:118): Unknown SF transformation"


def test_the_registry_covers_every_deepgemm_path_with_vllms_alternatives() -> None:
    paths = {p.name: [c.name for c in p.candidates] for p in serve_paths(2)}
    assert paths == {
        "linear-fp8-block": ["deep_gemm", "cutlass", "b12x", "triton"],
        "moe-mxfp4": ["deep_gemm", "b12x", "marlin"],
        "mhc-prenorm": ["deep_gemm", "tilelang"],
        "indexer-mqa-logits": ["deep_gemm"],
        "wo_a-scale": ["deep_gemm"],
    }


def test_discovery_in_the_image_finds_vllms_deepgemm_and_each_alternative() -> None:
    loc = locate_deepgemm()
    names = exported_names(loc)
    for path in serve_paths(2):
        for cand in path.candidates:
            why = cand.discover()
            if cand.uses_deepgemm:
                assert DG_SYMBOL[path.name] in names, (path.name, loc.file)
                # usable here exactly when the located module imports (on a CPU it does not)
                assert (why is None) == loc.usable, (path.name, why)
                if why is not None:
                    assert "vllm.third_party.deep_gemm" in why
            elif cand.name == "tilelang":
                # offered exactly when TileLang is installed; whether its VLLM_USE_DEEP_GEMM=0 can serve
                # DeepSeek-V4 is the choice's question (the serve matrix)
                assert (why is None) == (importlib.util.find_spec("tilelang") is not None), why
            else:
                assert why is None, (path.name, cand.name, why)


def test_every_switch_is_one_vllm_033_accepts() -> None:
    import vllm.envs as envs
    from vllm.config.kernel import KernelConfig, LinearBackend, MoEBackend
    from vllm.engine.arg_utils import EngineArgs

    flags = {
        "--linear-backend": ("linear_backend", LinearBackend),
        "--moe-backend": ("moe_backend", MoEBackend),
    }
    fields = {f.name for f in dataclasses.fields(EngineArgs)}
    src = inspect.getsource(importlib.import_module("vllm.engine.arg_utils"))
    for path in serve_paths(2):
        for cand in path.candidates:
            sw = cand.switch
            for k, _ in (*sw.env, *sw.needs_env):
                assert k in envs.environment_variables, k
            for flag, value in zip(sw.args[::2], sw.args[1::2], strict=True):
                field, literal = flags[flag]
                assert field in fields and f'"{flag}"' in src
                assert value in typing.get_args(literal), (flag, value)
                assert getattr(KernelConfig(**{field: value}), field) == value


def test_the_runners_call_vllms_entry_points_with_their_real_signatures() -> None:
    def params(module: str, name: str) -> list[str]:
        """The parameters, less those with a default that a newer release added after every one the
        runners pass positionally (0.34's ``logits_dtype=torch.float32`` in ``fp8_fp4_mqa_logits`` and,
        before ``indices``, in ``fp8_fp4_paged_mqa_logits``), which the runners leave at that default."""
        sig = inspect.signature(getattr(importlib.import_module(module), name)).parameters.values()
        return [p.name for p in sig
                if not (p.default is not inspect.Parameter.empty and p.name in ADDED_WITH_DEFAULT)]

    fp8u = "vllm.model_executor.layers.quantization.utils.fp8_utils"
    assert params(fp8u, "deepgemm_post_process_fp8_weight_block")[:4] == [
        "wq",
        "ws",
        "quant_block_shape",
        "use_e8m0",
    ]
    assert params(fp8u, "deepgemm_post_process_weight_scale_block")[:5] == [
        "ws",
        "mn",
        "k",
        "quant_block_shape",
        "num_groups",
    ]
    assert params(fp8u, "w8a8_triton_block_scaled_mm") == ["A", "B", "As", "Bs", "block_size", "output_dtype"]
    assert params("vllm.model_executor.kernels.linear.scaled_mm.cutlass", "cutlass_scaled_mm") == [
        "A",
        "B",
        "As",
        "Bs",
        "block_size",
        "output_dtype",
    ]
    assert (
        len(params("vllm.model_executor.kernels.linear.scaled_mm.b12x", "_run_b12x_fp8_block_scaled_mm")) == 5
    )
    assert params("vllm.utils.deep_gemm", "fp8_fp4_mqa_logits") == [
        "q",
        "kv",
        "weights",
        "cu_seqlen_ks",
        "cu_seqlen_ke",
        "max_seqlen_k",
    ]
    assert params("vllm.utils.deep_gemm", "fp8_fp4_paged_mqa_logits") == [
        "q",
        "kv_cache",
        "weights",
        "context_lens",
        "block_tables",
        "schedule_metadata",
        "max_model_len",
        "indices",
    ]
    assert params("vllm.utils.deep_gemm", "get_paged_mqa_logits_metadata") == [
        "context_lens",
        "block_size",
        "num_sms",
        "indices",
    ]
    assert params("vllm.utils.deep_gemm", "get_paged_mqa_page_sizes") == []  # 64 on family 120 (read there)
    assert params("vllm.utils.deep_gemm", "tf32_hc_prenorm_gemm") == ["x", "fn", "out", "sqrsum", "num_split"]
    for name in (
        "fp8_gemm_nt",
        "m_grouped_fp8_fp4_gemm_nt_contiguous",
        "mk_alignment_scope",
        "get_mk_alignment_for_contiguous_layout",
    ):
        assert callable(getattr(importlib.import_module("vllm.utils.deep_gemm"), name))


#: Trailing parameters with a default that a release added to an entry point a runner calls
#: (vLLM 0.34.0: ``utils/deep_gemm.py`` ``fp8_fp4_mqa_logits`` and ``fp8_fp4_paged_mqa_logits``,
#: ``logits_dtype=torch.float32``).
ADDED_WITH_DEFAULT = frozenset({"logits_dtype"})


# --------------------------------------------------------------------------- fault injection


def cpu_run(perturb: float = 0.0, exc: BaseException | None = None):
    """A candidate run on the CPU: ``x @ w.T`` checked against fp64, optionally perturbed or raising."""

    def run(shape: Shape) -> Trial:
        if exc is not None:
            raise exc
        g = torch.Generator().manual_seed(shape.tokens)
        x, w = torch.randn(min(shape.tokens, 16) or 1, 64, generator=g), torch.randn(32, 64, generator=g)
        ref = x.double() @ w.double().t()
        held: dict[str, torch.Tensor] = {}

        def call() -> None:
            held["out"] = (x @ w.t()) * (1.0 + perturb)

        return Trial(call, lambda: rel_fro(held["out"], ref))

    return run


def inject(paths: tuple[ServePath, ...], **faults: dict) -> tuple[ServePath, ...]:
    """Replace candidates' ``run``/``discover``: ``faults["path:cand"] = {"run": ..., "discover": ...}``."""
    out = []
    for p in paths:
        cands = []
        for c in p.candidates:
            f = faults.get(f"{p.name}:{c.name}".replace("-", "_").replace(":", "__"), {})
            cands.append(dataclasses.replace(c, **f) if f else c)
        out.append(dataclasses.replace(p, candidates=tuple(cands)))
    return tuple(out)


def only(paths: tuple[ServePath, ...], *names: str) -> tuple[ServePath, ...]:
    return tuple(p for p in paths if p.name in names)


def timer_of(us: dict[str, float]):
    """Fake timer (a CPU has no CUDA graphs): µs per call by the tag :func:`tagged` gives the call."""

    def timer(call) -> float:  # noqa: ANN001
        return us.get(call.__qualname__.split(".")[0], 10.0)

    return timer


def tagged(name: str, **kw):
    """:func:`cpu_run` whose call carries ``name`` for :func:`timer_of`."""
    run = cpu_run(**kw)

    def tagged_run(shape: Shape) -> Trial:
        t = run(shape)

        def call() -> None:
            t.call()

        call.__qualname__ = f"{name}.call"
        return Trial(call, t.check)

    return tagged_run


OK = {"run": tagged("triton")}
ALIVE = {"discover": lambda: None}  # as on a GPU node where the vendored DeepGEMM imports


def _probe(tmp_path: Path, paths, **env: str) -> dict:
    return run_probe(
        tmp_path / "probe.json",
        2,
        kernels=False,
        registry=paths,
        timer=timer_of({"deep_gemm": 5.0, "triton": 20.0, "cutlass": 30.0}),
        environ=env,
    )


def test_deepgemm_absent_on_a_path_picks_a_correct_alternative_and_the_plan_says_why(tmp_path: Path) -> None:
    if locate_deepgemm().usable:
        pytest.skip("DeepGEMM imports here; the absent case is the CPU's real state")
    paths = inject(
        only(serve_paths(2), "linear-fp8-block"),
        linear_fp8_block__triton=OK,
        linear_fp8_block__cutlass={"run": tagged("cutlass")},
        linear_fp8_block__b12x={"run": cpu_run(exc=RuntimeError("b12x: no kernel for sm_121"))},
    )
    data = _probe(tmp_path, paths)
    c = data["serve_choice"]["choices"][0]
    assert c["candidate"] == "triton" and data["serve_choice"]["verdict"] is None  # faster of the correct two
    assert data["serve_choice"]["args"] == ["--linear-backend", "triton"]
    assert any(
        e.startswith("deep_gemm: unavailable:") and "vllm.third_party.deep_gemm" in e for e in c["evidence"]
    )
    assert any(e.startswith("b12x: RuntimeError: b12x: no kernel for sm_121") for e in c["evidence"])
    assert json.loads((tmp_path / "probe.json").read_text()) == data


def test_deepgemm_crashing_or_wrong_is_never_chosen(tmp_path: Path) -> None:
    paths = inject(
        only(serve_paths(2), "linear-fp8-block", "mhc-prenorm"),
        linear_fp8_block__deep_gemm={**ALIVE, "run": cpu_run(exc=RuntimeError(SUNK[14:]))},
        linear_fp8_block__triton=OK,
        linear_fp8_block__cutlass={"run": cpu_run(exc=NotImplementedError("x"))},
        linear_fp8_block__b12x={"run": cpu_run(exc=NotImplementedError("x"))},
        mhc_prenorm__deep_gemm={**ALIVE, "run": tagged("deep_gemm", perturb=0.05)},
        mhc_prenorm__tilelang={"discover": lambda: None, "run": tagged("tilelang")},
    )
    data = _probe(tmp_path, paths)
    lin, mhc = data["serve_choice"]["choices"]
    assert lin["candidate"] == "triton" and any(SUNK in e for e in lin["evidence"])
    assert mhc["candidate"] == "tilelang"
    assert any(e.startswith("deep_gemm: wrong numbers: error 0.05") for e in mhc["evidence"])
    assert data["serve_choice"]["env"] == {"VLLM_USE_DEEP_GEMM": "0"}
    rows = [r for r in data["serve_paths"] if r["path"] == "mhc-prenorm" and r["candidate"] == "deep_gemm"]
    assert rows and all(not r["ok"] and r["err"] > 0.04 for r in rows)


def test_a_correct_deepgemm_is_chosen_when_fastest(tmp_path: Path) -> None:
    paths = inject(
        only(serve_paths(2), "linear-fp8-block"),
        linear_fp8_block__deep_gemm={**ALIVE, "run": tagged("deep_gemm")},
        linear_fp8_block__triton=OK,
        linear_fp8_block__cutlass={"run": tagged("cutlass")},
        linear_fp8_block__b12x={"run": tagged("b12x", perturb=1.0)},
    )
    data = _probe(tmp_path, paths)
    assert data["serve_choice"]["choices"][0]["candidate"] == "deep_gemm"
    assert data["serve_choice"]["args"] == ["--linear-backend", "deep_gemm"]


def _stop_paths() -> tuple[ServePath, ...]:
    return inject(
        only(serve_paths(2), "moe-mxfp4", "indexer-mqa-logits"),
        moe_mxfp4__deep_gemm={**ALIVE, "run": cpu_run(exc=RuntimeError(SUNK[14:]))},
        indexer_mqa_logits__deep_gemm={**ALIVE, "run": cpu_run(perturb=0.3)},
    )


def test_no_correct_candidate_stops_with_a_verdict_naming_path_and_each_error(tmp_path: Path) -> None:
    data = _probe(tmp_path, _stop_paths())
    verdict = data["serve_choice"]["verdict"]
    moe, idx = verdict.splitlines()
    assert moe.startswith("serve path moe-mxfp4 (MXFP4 routed experts")
    assert "deep_gemm: " + SUNK in moe
    # the alternatives vLLM offers are named with why they were not shown correct (real runners)
    assert "b12x: NotImplementedError: sparkpair probe has no on-device runner" in moe
    assert (
        "marlin: NotImplementedError" in moe
        and "Way around: set SPARKPAIR_SERVE_PATHS=moe-mxfp4=marlin" in moe
    )
    assert idx.startswith("serve path indexer-mqa-logits") and "wrong numbers: error 0.3" in idx
    assert "install a GB10-capable DeepGEMM as the top-level deep_gemm" in idx


def test_the_documented_override_gets_past_the_stop_and_is_recorded(tmp_path: Path) -> None:
    data = _probe(
        tmp_path, _stop_paths(), SPARKPAIR_SERVE_PATHS="moe-mxfp4=marlin,indexer-mqa-logits=deep_gemm"
    )
    sc = data["serve_choice"]
    assert sc["verdict"] is None and [c["forced"] for c in sc["choices"]] == [True, True]
    assert sc["args"] == ["--moe-backend", "marlin"]


def test_tilelang_alone_is_refused_where_vllm_would_leave_no_servable_wo_a(tmp_path: Path) -> None:
    """VLLM_USE_DEEP_GEMM=0 with vLLM's automatic FP8 linear kernel: the serve matrix refuses it (Marlin
    may repack wo_a), so TileLang is dropped, and without DeepGEMM here mHC has no candidate: a stop
    naming why, never a serve that breaks at the first forward."""
    data = _probe(
        tmp_path,
        inject(
            only(serve_paths(2), "mhc-prenorm"),
            mhc_prenorm__tilelang={"discover": lambda: None, "run": tagged("tilelang")},
        ),
    )
    mhc = data["serve_choice"]["choices"][0]
    assert mhc["candidate"] is None and data["serve_choice"]["verdict"]
    assert any("VLLM_USE_DEEP_GEMM=0 with --linear-backend auto" in e for e in mhc["evidence"])


def test_the_plan_records_the_choice_and_its_evidence(tmp_path: Path) -> None:
    data = _probe(
        tmp_path,
        inject(
            only(serve_paths(2), "linear-fp8-block", "mhc-prenorm"),
            linear_fp8_block__triton=OK,
            mhc_prenorm__tilelang={"discover": lambda: None, "run": tagged("tilelang")},
        ),
    )
    probe = ProbeResults.from_json({**data, "capability": [12, 1]})
    plan = build_plan(
        vllm_version=str(importlib.metadata.version("vllm")),
        version_verified=True,
        allow_unverified=False,
        platform="cuda",
        capability=(12, 1),
        probe=probe,
    )
    rec = plan.to_json()["serve_paths"]
    # with the linear backend named (triton: wo_a stays 2-D), VLLM_USE_DEEP_GEMM=0 serves
    assert [c["candidate"] for c in rec["choices"]] == ["triton", "tilelang"]
    assert rec["env"] == {"VLLM_USE_DEEP_GEMM": "0"}
    assert any(
        e.startswith("deep_gemm: unavailable:") or e.startswith("deep_gemm: ")
        for e in rec["choices"][1]["evidence"]
    )


# --------------------------------------------------------------------------- command and node


def _cli(monkeypatch: pytest.MonkeyPatch, tmp_path: Path, paths) -> tuple[int, str]:
    import sparkpair_overlay.probe as probe_mod
    import typer
    from sparkpair_cli import cmd_probe
    from typer.testing import CliRunner

    monkeypatch.setattr(
        probe_mod,
        "run_probe",
        lambda out, tp, cb, **kw: run_probe(
            out, tp, cb, kernels=False, registry=paths, timer=timer_of({}), environ={}, **kw
        ),
    )
    app = typer.Typer()

    @app.callback()
    def _root() -> None:
        """test root"""

    cmd_probe.register(app)
    res = CliRunner().invoke(app, ["probe", "--out", str(tmp_path / "p.json")])
    return res.exit_code, res.output


def test_sparkpair_probe_exits_3_with_the_verdict_when_a_path_has_no_correct_candidate(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    code, out = _cli(monkeypatch, tmp_path, _stop_paths())
    assert code == 3 and "serve path moe-mxfp4" in out and (tmp_path / "p.json").exists()
    code, out = _cli(
        monkeypatch, tmp_path, inject(only(serve_paths(2), "linear-fp8-block"), linear_fp8_block__triton=OK)
    )
    assert code == 0 and "serve path linear-fp8-block: triton" in out


def _node_env():
    from sparkpair_cli.deploy.nodeenv import load_node_env_file

    return load_node_env_file(Path(__file__).resolve().parents[1] / "fixtures/hosts/spark-head-good/node.env")


def test_the_node_stops_on_the_verdict_and_passes_a_choice_to_vllm(tmp_path: Path) -> None:
    import typer
    from sparkpair_cli import cmd_node
    from sparkpair_serving.profile import load_profile

    profile = load_profile("deepseek-v4-flash")
    _probe(tmp_path, _stop_paths())
    with pytest.raises(typer.Exit) as e:
        cmd_node._apply_probe(_node_env(), profile, tmp_path / "probe.json", {})
    assert e.value.exit_code == cmd_node.EXIT_PREFLIGHT

    _probe(
        tmp_path,
        inject(
            only(serve_paths(2), "linear-fp8-block", "mhc-prenorm"),
            linear_fp8_block__triton=OK,
            mhc_prenorm__tilelang={"discover": lambda: None, "run": tagged("tilelang")},
        ),
    )
    env, prof = cmd_node._apply_probe(_node_env(), profile, tmp_path / "probe.json", {"X": "1"})
    assert env["VLLM_USE_DEEP_GEMM"] == "0" and env["SPARKPAIR_PROBE_RESULTS"] == str(tmp_path / "probe.json")
    assert prof.server.args[-2:] == ["--linear-backend", "triton"]
    assert profile.server.args[-2:] != ["--linear-backend", "triton"]  # the loaded profile is not mutated


def test_candidate_objects_stay_small() -> None:
    assert [f.name for f in dataclasses.fields(Candidate)] == [
        "path",
        "name",
        "discover",
        "run",
        "switch",
        "uses_deepgemm",
    ]


def test_off_family_120_the_serve_paths_are_not_probed_and_cannot_stop_the_node(tmp_path: Path) -> None:
    # No device capability here (a CPU); on an H200 (9.0) or a B200 (10.0) the same holds.
    data = run_probe(tmp_path / "probe.json", 2, kernels=False, timer=timer_of({}), environ={})
    assert data["serve_paths"] == [] and data["serve_choice"]["verdict"] is None
    assert data["serve_paths_skipped"].startswith("serve paths not probed: cap None is not family 120")
