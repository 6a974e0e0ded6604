"""The upgrade lane's reading of two vLLM source trees (scripts/sparkpair_cli/vllm_lane/): each change
the overlay cares about is named with the right status, on small trees written here with the shapes
vLLM 0.33/0.34 use (the lane on the real 0.34.0 wheel: docs/operations.md, "Upgrading vLLM"), and an
unchanged tree gives no ``ACTION``.
"""

from __future__ import annotations

import subprocess
import textwrap
from pathlib import Path

import pytest
from sparkpair_cli.vllm_lane import cli, pins, source, wheels
from sparkpair_cli.vllm_lane.findings import LaneError
from sparkpair_overlay import versions
from sparkpair_overlay.serve_matrix import FP8_BLOCK_KERNEL, LINEAR_BACKENDS

O_PROJ = """
from vllm.platforms import current_platform
from vllm.utils.deep_gemm import fp8_einsum


def compute_fp8_einsum_recipe(
    block_size: int = 128,
) -> tuple[tuple[int, int, int], bool]:
    cap = current_platform.get_device_capability()
    assert cap is not None, "DeepseekV4 attention requires a CUDA device"
    einsum_recipe = (1, 128, 128) if cap.major <= 9 else (1, 1, block_size)
    tma_aligned_scales = cap.major >= 10
    return einsum_recipe, tma_aligned_scales
"""
FIXED_RECIPE = "einsum_recipe = (1, 128, 128) if cap.major <= 9 or cap.major == 12 else (1, 1, block_size)"
GATE = """
class GateLinear:
    def __init__(self):
        is_hopper = current_platform.is_device_capability((9, 0))
        is_blackwell = current_platform.is_device_capability_family(100)
"""
DEEP_GEMM = """
def is_deep_gemm_supported() -> bool:
    is_supported_arch = current_platform.support_deep_gemm()
    return is_supported_arch and envs.VLLM_USE_DEEP_GEMM and has_deep_gemm()
"""
DEEP_GEMM_NVCC = """
def is_deep_gemm_supported() -> bool:
    is_supported_arch = current_platform.support_deep_gemm()
    if not (is_supported_arch and envs.VLLM_USE_DEEP_GEMM and has_deep_gemm()):
        return False
    nvcc = _deep_gemm_nvcc_path()
    if nvcc is None:
        logger.warning_once("no nvcc")
        return False
    version = _nvcc_version(nvcc)
    if version is not None and version < (12, 9):
        return False
    return True
"""
ENVS = """
environment_variables = {
    "VLLM_USE_DEEP_GEMM": lambda: True,
    "VLLM_USE_DEEP_GEMM_E8M0": lambda: True,
}
"""
KERNEL = "LinearBackend = Literal[" + ", ".join(f'"{v}"' for v in LINEAR_BACKENDS) + "]\n"
CUDA_KERNELS = [
    "FlashInferFp8DeepGEMMDynamicBlockScaledKernel",
    "DeepGemmFp8BlockScaledMMKernel",
    "CutlassFp8BlockScaledMMKernel",
    "B12xFp8BlockScaledMMKernel",
    "MarlinFP8ScaledMMLinearKernel",
    "HummingFP8ScaledMMLinearKernel",
    "TritonFp8BlockScaledMMKernel",
    "BlockWiseTorchFP8ScaledMMLinearKernel",
]
LINEAR = "_POSSIBLE_FP8_BLOCK_KERNELS: dict = {PlatformEnum.CUDA: [" + ", ".join(CUDA_KERNELS) + "]}\n"


def tree(**changes: str):
    """A reader over a small vLLM tree: the files the lane's comparisons read, 0.33's shapes."""
    files = {
        "vllm/models/deepseek_v4/nvidia/ops/o_proj.py": O_PROJ,
        "vllm/model_executor/layers/fused_moe/router/gate_linear.py": GATE,
        "vllm/utils/deep_gemm.py": DEEP_GEMM,
        "vllm/envs.py": ENVS,
        "vllm/config/kernel.py": KERNEL,
        "vllm/model_executor/kernels/linear/__init__.py": LINEAR,
    }
    files.update(changes)
    return lambda path: textwrap.dedent(files[path]) if path in files else None


def by_section(findings, section: str) -> list[tuple[str, str]]:
    return [(f.status, f.text) for f in findings if f.section == section]


def test_the_tree_matches_the_serve_matrix():
    assert set(FP8_BLOCK_KERNEL.values()) <= set(CUDA_KERNELS)


def test_an_unchanged_tree_is_same_in_every_section_the_source_decides():
    f = source.compare_source(tree(), tree(), "0.33.0", "0.33.0", versions.release("0.33.0"))
    for section in ("recipe", "router", "DeepGEMM", "switches"):
        assert {s for s, _ in by_section(f, section)} == {"same"}, by_section(f, section)
    assert source.recipe_table(tree())[(12, 1)] == ((1, 1, 128), True)
    assert source.recipe_table(tree())[(9, 0)] == ((1, 128, 128), False)


def test_a_recipe_fixed_for_family_120_is_an_upstream_fix():
    new = tree(
        **{
            "vllm/models/deepseek_v4/nvidia/ops/o_proj.py": O_PROJ.replace(
                "einsum_recipe = (1, 128, 128) if cap.major <= 9 else (1, 1, block_size)", FIXED_RECIPE
            )
        }
    )
    f = by_section(source.compare_source(tree(), new, "0.34.0", "0.35.0", None), "recipe")
    assert ("changed", "capability 12.1: (1,1,128) tma=True -> (1,128,128) tma=True") in f
    assert any(s == "UPSTREAM FIX" and "family 120 now gets (1,128,128)" in t for s, t in f), f


def test_a_family_120_router_tier_is_an_upstream_fix():
    gate = GATE + "        is_spark = current_platform.is_device_capability_family(120)\n"
    f = by_section(
        source.compare_source(
            tree(),
            tree(**{"vllm/model_executor/layers/fused_moe/router/gate_linear.py": gate}),
            "0.34.0",
            "0.35.0",
            None,
        ),
        "router",
    )
    assert [s for s, _ in f] == ["UPSTREAM FIX"] and "is_device_capability_family(120)" in f[0][1]


def test_deepgemms_nvcc_condition_is_handled_only_where_the_record_states_it():
    new = tree(**{"vllm/utils/deep_gemm.py": DEEP_GEMM_NVCC})
    handled = by_section(
        source.compare_source(tree(), new, "0.33.0", "0.34.0", versions.release("0.34.0")), "DeepGEMM"
    )
    assert [s for s, _ in handled] == ["handled"] and "nvcc >= 12.9" in handled[0][1]
    fresh = by_section(source.compare_source(tree(), new, "0.33.0", "0.35.0", None), "DeepGEMM")
    assert [s for s, _ in fresh] == ["ACTION"] and "deepgemm_min_nvcc=(12, 9)" in fresh[0][1]


def test_a_deepgemm_condition_the_matrix_does_not_model_is_an_action():
    new = tree(
        **{
            "vllm/utils/deep_gemm.py": DEEP_GEMM.replace(
                "has_deep_gemm()", "has_deep_gemm() and is_blackwell()"
            )
        }
    )
    f = by_section(source.compare_source(tree(), new, "0.34.0", "0.35.0", None), "DeepGEMM")
    assert any(s == "ACTION" and "is_blackwell" in t for s, t in f), f


def test_new_switches_and_a_new_linear_backend_are_named():
    envs = ENVS.replace(
        "}", '    "VLLM_FP8_EINSUM_BACKEND": lambda: "auto",\n    "VLLM_OTHER": lambda: 1,\n}'
    )
    kernel = KERNEL.replace('"auto",', '"auto", "sm120_grouped",')
    f = by_section(
        source.compare_source(
            tree(), tree(**{"vllm/envs.py": envs, "vllm/config/kernel.py": kernel}), "0.34.0", "0.35.0", None
        ),
        "switches",
    )
    assert any(
        s == "changed" and "VLLM_FP8_EINSUM_BACKEND" in t and "VLLM_OTHER" not in t.split("(")[0]
        for s, t in f
    ), f
    assert any(s == "ACTION" and "sm120_grouped" in t for s, t in f), f


def test_a_reordered_fp8_block_kernel_list_is_an_action():
    reordered = (
        "_POSSIBLE_FP8_BLOCK_KERNELS: dict = {PlatformEnum.CUDA: ["
        + ", ".join([CUDA_KERNELS[0], CUDA_KERNELS[2], CUDA_KERNELS[1], *CUDA_KERNELS[3:]])
        + "]}\n"
    )
    f = by_section(
        source.compare_source(
            tree(),
            tree(**{"vllm/model_executor/kernels/linear/__init__.py": reordered}),
            "0.34.0",
            "0.35.0",
            None,
        ),
        "switches",
    )
    assert any(s == "ACTION" and "CUDA FP8 block kernels" in t for s, t in f), f


def test_pins_the_registry_lacks_become_named_substitutes_and_a_broken_shared_pin_is_an_action():
    registry = {
        "torch": ["2.15.0", "2.14.0", "2.13.0+cpu", "2.13.0"],
        "flashinfer-python": ["0.7.4", "0.7.2.post1", "0.7.2"],
    }
    requires = [
        "torch==2.14.0",
        "flashinfer-python==0.7.3",
        "transformers<5.20.0,>=5.16.1",
        "cupy==13.0; extra == 'cuda'",
        "numpy",
    ]
    f, chosen, subs = pins.pin_findings(
        requires, {"transformers": "5.20.2", "numpy": "2.3.5"}, registry.__getitem__
    )
    assert chosen == {"torch": "2.13.0+cpu", "flashinfer-python": "0.7.4"}
    assert subs == [
        versions.Substitute("torch", "==2.14.0", "2.13.0+cpu"),
        versions.Substitute("flashinfer-python", "==0.7.3", "0.7.4"),
    ]
    assert subs == list(versions.release("0.34.0").substitutes)  # what the 0.34.0 record names
    assert (
        "ACTION",
        "scripts/stack-requirements.txt pins transformers==5.20.2; vLLM asks transformers<5.20.0,>=5.16.1",
    ) in [(x.status, x.text) for x in f]
    f, chosen, subs = pins.pin_findings(["flashinfer-python==0.7.2.post1"], {}, registry.__getitem__)
    assert chosen == {"flashinfer-python": "0.7.2.post1"} and subs == [] and f[0].status == "same"


def test_the_base_is_the_newest_older_stack_release_and_bad_versions_are_refused():
    assert cli.base_release("0.34.0") == "0.33.0"
    assert cli.base_release("0.35.0") == "0.34.0"
    with pytest.raises(LaneError, match="no stack-tier release older than vLLM 0.33.0"):
        cli.base_release("0.33.0")
    with pytest.raises(LaneError, match="'0.35.0rc1' is not a release version"):
        cli.parse_version("0.35.0rc1")
    for bad in ("0.35", "00.35.0", "0.35.0.1", "\u0660.\u0663\u0665.\u0660"):  # the last: Arabic-Indic digits
        with pytest.raises(LaneError, match="is not a release version"):
            cli.parse_version(bad)


@pytest.mark.parametrize("bad", ["00.35.0", "0.35", "\u0660.\u0663\u0665.\u0660", "0.35.0;ls"])
def test_the_lane_script_refuses_a_bad_version_before_installing_anything(bad: str) -> None:
    script = Path(__file__).resolve().parents[3] / "scripts" / "vllm-lane.sh"
    r = subprocess.run(["bash", str(script), bad], capture_output=True, text=True, timeout=30)
    assert r.returncode == 2, r.stdout + r.stderr
    assert f"VERSION={bad!r}"[:12] in r.stderr and "wanted MAJOR.MINOR.PATCH" in r.stderr, r.stderr
    assert "installing" not in r.stdout + r.stderr  # scripts/setup.sh never ran


def test_a_version_the_registry_does_not_have_exits_2_naming_it(tmp_path, monkeypatch, capsys):
    """pip itself is asked (the package registry, as the lane asks it) and its refusal is passed on."""
    monkeypatch.setattr(wheels, "WHEEL_CACHE", tmp_path)
    assert cli.main(["0.34.999", "--no-stack"]) == 2
    err = capsys.readouterr().err
    assert (
        "pip could not download vllm==0.34.999" in err and "wanted a release the package registry has" in err
    )
    assert not list(tmp_path.glob("*.whl"))


def test_a_json_path_that_cannot_be_written_exits_2_before_any_download(tmp_path, monkeypatch, capsys):
    """--json naming a folder, nothing, or a path under a file: refused before the wheels are fetched (it
    was written last, after the stack tier, and raised a traceback that lost the findings)."""

    def no_download(version: str, cache=None):  # noqa: ANN001, ANN202 - fetch_wheel's signature
        raise AssertionError("fetched a wheel for a run that must stop first")

    monkeypatch.setattr(cli, "fetch_wheel", no_download)
    a_file = tmp_path / "f"
    a_file.write_text("x")
    cases = ((tmp_path, "is a folder"), ("", "empty"), (a_file / "x.json", "is a file, not a folder"))
    for bad, why in cases:
        assert cli.main(["0.34.0", "--no-stack", "--json", str(bad)]) == 2
        err = capsys.readouterr().err
        assert f"--json={str(bad)!r}" in err and why in err and "wanted" in err, err


def test_a_cached_wheel_that_is_not_one_exits_2_naming_the_file_and_the_way_out(
    tmp_path, monkeypatch, capsys
):
    """A truncated download, a stray folder or a zip without METADATA in the wheel cache raised a
    zipfile traceback on every later run; it is named, with the way out (delete it)."""
    import zipfile

    monkeypatch.setattr(wheels, "WHEEL_CACHE", tmp_path)
    whl = tmp_path / "vllm-0.34.0-cp38-abi3-manylinux_2_28_x86_64.whl"
    for make in (
        lambda: whl.write_bytes(b""),
        lambda: whl.write_bytes(b"PK\x03\x04 truncated"),
        lambda: zipfile.ZipFile(whl, "w").close(),
        lambda: whl.mkdir(),
    ):
        make()
        assert cli.main(["0.34.0", "--base", "0.34.0", "--no-stack"]) == 2
        err = capsys.readouterr().err
        assert f"{whl} is not a readable wheel" in err and "delete the file and run again" in err, err
        whl.rmdir() if whl.is_dir() else whl.unlink()


def test_a_version_with_a_newline_is_refused_before_setup_runs(tmp_path: Path) -> None:
    """grep matched the version line by line, so "0.34.0<newline>junk" passed the check and
    scripts/setup.sh ran before Python refused it. The script runs from a copy whose setup.sh only
    says that it ran."""
    (tmp_path / "scripts").mkdir()
    script = tmp_path / "scripts" / "vllm-lane.sh"
    script.write_text((Path(__file__).resolve().parents[3] / "scripts" / "vllm-lane.sh").read_text())
    (tmp_path / "scripts" / "setup.sh").write_text("#!/bin/sh\necho SETUP-RAN >&2\nexit 1\n")
    (tmp_path / "scripts" / "setup.sh").chmod(0o755)
    for bad in ("0.34.0\njunk", "junk\n0.34.0"):
        r = subprocess.run(["bash", str(script), bad], capture_output=True, text=True, timeout=30)
        assert r.returncode == 2, r.stdout + r.stderr
        assert "SETUP-RAN" not in r.stderr and "is not a release version" in r.stderr, r.stderr
