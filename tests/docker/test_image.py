# ruff: noqa: E501  (docker command lines read better unwrapped)
"""The image, built from the real Dockerfile on the stand-in base (x86_64 here), runs the
node's own commands with the verdicts they owe:

- ``sparkpair preflight --local`` on the recorded host trees (tests/fixtures/hosts, mounted
  read-only): a good Spark head passes, a Spark after a bad upgrade fails on kernel CMA, ptxas
  (the recorded B01 output of Triton 3.6's CUDA 12.8 ptxas) and FlashInfer; and live, on the
  image's own packages: the FlashInfer 0.7.2.post1 the base pins answers the pair vLLM 0.33 asks
  and the ptxas Triton uses for sm_121a accepts it;
- the image's Triton is the pin of the ``kernels`` extra's series (the build printed and checked
  it) and its AOT kernel cache was built by it;
- ``sparkpair plan``: the kernel plan of family 120 (capability faked to 12.1: no GPU here)
  and of a machine with no GPU;
- ``sparkpair node check``: the head is healthy only when ``/health`` answers 200, a worker
  without its headless engine is not;
- and the image carries no Ray;
- and, with ``SPARKPAIR_IMAGE_BASES=v0.33.0,v0.34.0`` (the upgrade lane's docker step, not CI: it adds
  about 3 minutes and 1.5 GB of layers the first time), the same Dockerfile builds on a stand-in of the
  v0.34.0 base (the v0.33.0 stand-in with the real vLLM 0.34.0 wheel and FlashInfer 0.7.4 swapped in,
  tests/docker/standin/vllm-0.34.0/): its plan names vLLM 0.34.0 at the level it is proven and sees
  DeepGEMM unsupported without an nvcc (the stand-in has none), and its preflight passes live on
  FlashInfer 0.7.4. That build skips the AOT kernel build (SPARKPAIR_KERNEL_ARCHS empty): the kernels
  and the Triton are the v0.33.0 image's, whose build ran it. In CI the v0.34.0 base is covered
  without a build: the Dockerfile's release gate runs on vLLM 0.34.0's own wheel in the stack tier
  (tests/stack/test_stack_version.py, ``test_the_dockerfiles_release_gate_passes_on_this_release``).
"""

from __future__ import annotations

import hashlib
import json
import os
import subprocess
import sys
from pathlib import Path

import pytest
from dockerlib import REPO, context_hash, sh

pytestmark = [pytest.mark.docker, pytest.mark.slow, pytest.mark.timeout(2400)]

HOSTS = REPO / "tests" / "fixtures" / "hosts"
STANDIN_034 = REPO / "tests" / "docker" / "standin" / "vllm-0.34.0"


@pytest.fixture(scope="module")
def sparkpair_image_034(standin_image: str) -> str:
    """The sparkpair image from the real Dockerfile on the v0.34.0 stand-in (built here on first use,
    both tags keyed by what they are built from)."""
    h = hashlib.sha256(standin_image.encode() + (STANDIN_034 / "Dockerfile").read_bytes()).hexdigest()[:10]
    base = f"sparkpair-standin-vllm-0.34.0-{h}"
    if sh("docker", "image", "inspect", f"vllm/vllm-openai:{base}", check=False).returncode != 0:
        sh("docker", "build", "--network", "host", "-q", "-t", f"vllm/vllm-openai:{base}",
           "--build-arg", f"BASE={standin_image}", str(STANDIN_034), timeout=1800)  # fmt: skip
    tag = f"sparkpair:sim-vllm-0.34.0-{context_hash()}-{h}"
    if sh("docker", "image", "inspect", tag, check=False).returncode != 0:
        sh("docker", "build", "-q", "-t", tag, "--build-arg", f"VLLM_IMAGE_TAG={base}",
           "--build-arg", f"EXPECT_ARCH={os.uname().machine}", "--build-arg", "SPARKPAIR_KERNEL_ARCHS=",
           str(REPO), timeout=1800)  # fmt: skip
    return tag


#: The bases the image tests build on: the image's default always; v0.34.0 when named (the lane).
BASES = [b for b in os.environ.get("SPARKPAIR_IMAGE_BASES", "v0.33.0").split(",") if b] or ["v0.33.0"]


@pytest.fixture(params=BASES)
def image_on_base(request: pytest.FixtureRequest) -> str:
    """The sparkpair image on the stand-in of each base the Dockerfile builds on."""
    name = "sparkpair_image" if request.param == "v0.33.0" else "sparkpair_image_034"
    return str(request.getfixturevalue(name))


def run(
    image: str,
    *args: str,
    env: dict[str, str] | None = None,
    mounts: tuple[tuple[Path, str], ...] = (),
    entrypoint: str | None = None,
    timeout: float = 600,
) -> subprocess.CompletedProcess[str]:
    """``docker run --rm`` of ``image`` with ``args`` (the entrypoint is ``sparkpair``)."""
    argv = ["docker", "run", "--rm", "--network", "none", "-v", f"{HOSTS}:/hosts:ro"]
    for host, ctr in mounts:
        argv += ["-v", f"{host}:{ctr}"]
    for k, v in (env or {}).items():
        argv += ["-e", f"{k}={v}"]
    if entrypoint:
        argv += ["--entrypoint", entrypoint]
    return sh(*argv, image, *args, check=False, timeout=timeout)


def preflight(
    image: str, out: Path, *args: str, env: dict[str, str] | None = None
) -> tuple[int, dict[str, str], str]:
    """``sparkpair preflight --local`` in the image; (exit code, {check id: status}, output)."""
    out.mkdir(parents=True, exist_ok=True)
    r = run(
        image,
        "preflight",
        "--local",
        "--facts-out",
        "/out/report.json",
        *args,
        env=env,
        mounts=((out, "/out"),),
    )
    rep = json.loads((out / "report.json").read_text())
    return r.returncode, {x["id"]: x["status"] for x in rep["results"]}, r.stdout + r.stderr


def test_preflight_on_a_recorded_good_spark_head_passes(sparkpair_image: str, tmp_path: Path) -> None:
    code, got, out = preflight(sparkpair_image, tmp_path, "--root", "/hosts/spark-head-good",
                               "--env-file", "/hosts/spark-head-good/node.env")  # fmt: skip
    assert code == 0, out
    assert got["flashinfer-dsv4"] == "pass" and got["ptxas"] == "pass" and got["checkpoint"] == "pass", got
    assert not [k for k, v in got.items() if v == "fail"], got


def test_preflight_on_a_recorded_bad_upgrade_fails_naming_the_checks(
    sparkpair_image: str, tmp_path: Path
) -> None:
    code, got, out = preflight(sparkpair_image, tmp_path, "--root", "/hosts/spark-head-bad-kernel",
                               "--env-file", "/hosts/spark-head-bad-kernel/node.env")  # fmt: skip
    assert code == 1, out
    assert {k for k, v in got.items() if v == "fail"} >= {"kernel-cma", "ptxas", "flashinfer-dsv4"}, got
    assert "node spark-a" in out and "sm_121a" in out, out


def test_preflight_live_on_the_images_flashinfer_and_ptxas_passes(image_on_base: str, tmp_path: Path) -> None:
    """The FlashInfer each base carries (0.7.2.post1 on v0.33.0, 0.7.4 on the v0.34.0 stand-in: both a
    dispatch envelope) and the ptxas Triton uses."""
    code, got, out = preflight(image_on_base, tmp_path, "--only", "ptxas,flashinfer",
                               "--env-file", "/hosts/spark-head-good/node.env")  # fmt: skip
    assert code == 0 and got == {"ptxas": "pass", "flashinfer-dsv4": "pass"}, out
    assert "(32, 128)" in out


@pytest.mark.skipif("v0.34.0" not in BASES, reason="the v0.34.0 base is built only with SPARKPAIR_IMAGE_BASES=v0.33.0,v0.34.0 (the upgrade lane)")
def test_on_the_v0_34_base_the_plan_names_the_release_its_proof_and_deepgemms_missing_nvcc(
    sparkpair_image_034: str,
) -> None:
    """The image built on the v0.34.0 stand-in runs vLLM 0.34.0's own code: the plan GB10 would take
    names the release and how far it is proven, and sees DeepGEMM unsupported (no nvcc in the base)."""
    r = run(sparkpair_image_034, "plan", "--json", env={"SPARKPAIR_FAKE_CAPABILITY": "12.1"})
    assert r.returncode == 0, r.stderr[-3000:]
    plan = json.loads(r.stdout)
    assert plan["vllm_version"] == "0.34.0" and plan["version_verified"] is True, plan["line"]
    assert any(n.startswith("vLLM 0.34.0: verified to patch (stack tier; substitutes: torch 2.13.0+cpu for "
                            "==2.14.0; flashinfer-python 0.7.4 for ==0.7.3); not verified to serve on family 120")
               for n in plan["notes"]), plan["notes"]
    assert "no nvcc for DeepGEMM's JIT" in plan["switches"]["deepgemm_unsupported"], plan["switches"]
    r = run(sparkpair_image_034, "plan", env={"SPARKPAIR_FAKE_CAPABILITY": "12.1"})
    assert r.returncode == 0 and "unsupported: no nvcc" in r.stdout, r.stdout[-3000:]


def test_the_image_carries_the_pinned_triton_and_its_kernel_cache(sparkpair_image: str) -> None:
    """The Triton the image compiles our kernels with is the ``kernels`` extra's (the Dockerfile
    asserts it at build; the stand-in carries the pin, as the real base carries torch 2.14's
    Triton 3.8), and the AOT build left its cubins in the shipped cache."""
    pin = sh(sys.executable, str(REPO / "scripts" / "triton_requirement.py")).stdout.strip()
    code = ("import triton, pathlib; from sparkpair_overlay.kernels._common import triton_problem; "
            "print(triton.__version__, repr(triton_problem()), "
            "len(list(pathlib.Path('/opt/sparkpair/triton-cache').rglob('*.cubin'))))")  # fmt: skip
    r = run(sparkpair_image, "-c", code, entrypoint="python3")
    assert r.returncode == 0, r.stderr[-3000:]
    version, problem, cubins = r.stdout.split()
    assert f"triton=={version}" == pin and problem == "''", r.stdout
    assert int(cubins) > 0, r.stdout


def test_plan_on_family_120_takes_sparkpairs_kernels(sparkpair_image: str) -> None:
    r = run(sparkpair_image, "plan", "--json", env={"SPARKPAIR_FAKE_CAPABILITY": "12.1"})
    assert r.returncode == 0, r.stderr[-3000:]
    plan = json.loads(r.stdout)
    assert plan["capability"] == [12, 1] and plan["version_verified"] is True
    assert plan["router"]["bfloat16"]["path"] == "triton-bf16-lowM"
    assert plan["o_proj"]["backend"] == "triton" and "no probe results" in plan["o_proj"]["reason"]


def test_plan_without_a_gpu_patches_nothing(sparkpair_image: str) -> None:
    r = run(sparkpair_image, "plan", "--json")
    assert r.returncode == 0, r.stderr[-3000:]
    plan = json.loads(r.stdout)
    assert plan["platform"] == "cpu" and plan["capability"] is None
    assert {d["path"] for d in plan["router"].values()} == {"upstream"}
    assert plan["o_proj"]["backend"] == "upstream"


def test_node_check_head_is_healthy_only_when_health_answers_200(sparkpair_image: str) -> None:
    env_file = "/hosts/spark-head-good/node.env"
    down = run(
        sparkpair_image,
        "-c",
        f"set -a; . {env_file}; exec sparkpair node check --role head",
        entrypoint="bash",
    )
    assert (
        down.returncode == 1 and "127.0.0.1:8000/health" in down.stdout and "wanted HTTP 200" in down.stdout
    ), down
    up = run(sparkpair_image, "-c",
             "set -a; . " + env_file + "; mkdir -p /tmp/s && touch /tmp/s/health && cd /tmp/s"
             " && (python3 -m http.server 8000 --bind 127.0.0.1 >/dev/null 2>&1 &)"
             " && for _ in $(seq 50); do sparkpair node check --role head && exit 0; sleep 0.2; done; exit 1",
             entrypoint="bash")  # fmt: skip
    assert up.returncode == 0 and "HTTP 200" in up.stdout, up


def test_node_check_worker_without_its_headless_engine_is_unhealthy(sparkpair_image: str) -> None:
    r = run(sparkpair_image, "-c", "set -a; . /hosts/spark-worker-good/node.env; exec sparkpair node check --role worker",
            entrypoint="bash")  # fmt: skip
    assert r.returncode == 1 and "'--headless'" in r.stdout and "node spark-b" in r.stdout, r


def test_the_image_has_no_ray(sparkpair_image: str) -> None:
    r = run(
        sparkpair_image, "-c", "import importlib.util as u; print(u.find_spec('ray'))", entrypoint="python3"
    )
    assert r.returncode == 0 and r.stdout.strip() == "None", r
