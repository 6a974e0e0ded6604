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
- and the image carries no Ray.
"""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest
from dockerlib import REPO, sh

pytestmark = [pytest.mark.docker, pytest.mark.slow, pytest.mark.timeout(2400)]

HOSTS = REPO / "tests" / "fixtures" / "hosts"


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


def test_preflight_live_on_the_images_flashinfer_and_ptxas_passes(
    sparkpair_image: str, tmp_path: Path
) -> None:
    """The FlashInfer the base pins (0.7.2.post1: a dispatch envelope) and the ptxas Triton uses."""
    code, got, out = preflight(sparkpair_image, tmp_path, "--only", "ptxas,flashinfer",
                               "--env-file", "/hosts/spark-head-good/node.env")  # fmt: skip
    assert code == 0 and got == {"ptxas": "pass", "flashinfer-dsv4": "pass"}, out
    assert "(32, 128)" in out


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
