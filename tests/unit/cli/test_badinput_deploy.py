"""Bad input to the deployment commands (``preflight``, ``node``, ``inspect``): a clear error
naming the file or option, the value seen and the value wanted; exit 2 (inspect: 1); never a
traceback, never exit 0, never a report lost after the checks ran."""

from __future__ import annotations

import json
import os
from pathlib import Path

import pytest
from sparkpair_cli.main import app
from typer.testing import CliRunner

GOOD_ENV = Path(__file__).resolve().parents[2] / "fixtures" / "hosts" / "spark-head-good" / "node.env"


def cli(*args: str) -> tuple[int, str]:
    res = CliRunner().invoke(app, list(args))
    assert res.exception is None or isinstance(res.exception, SystemExit), repr(res.exception)
    return res.exit_code, " ".join(res.output.split())


# 1. --only names a group that does not exist


def test_only_unknown_group_is_refused() -> None:
    code, out = cli("preflight", "--env-file", str(GOOD_ENV), "--only", "bogus")
    assert code == 2, out
    assert "--only 'bogus': no such check group; known: rdma,netdev,gid," in out


def test_only_mixed_known_and_unknown_names_the_unknown() -> None:
    code, out = cli("preflight", "--env-file", str(GOOD_ENV), "--only", "memory,nope")
    assert code == 2, out
    assert "'nope'" in out and "known:" in out


# 2./3. --compare files that are not --facts-out reports


@pytest.mark.parametrize(
    ("content", "fragment"),
    [
        (b"{}", "not a preflight report (no 'node'); wanted a --facts-out file"),
        (b"[1, 2]", "top level is a list"),
        (b"{not json", "not JSON"),
        (b'{"node": "a", "facts": 5}', "facts is a int"),
        (b"x\n\xff\xfe\x00\x01", "not UTF-8 text / not JSON"),
    ],
)
def test_compare_file_that_is_not_a_report(tmp_path: Path, content: bytes, fragment: str) -> None:
    f = tmp_path / "e.json"
    f.write_bytes(content)
    code, out = cli("preflight", "--compare", str(f), "--compare", str(f))
    assert code == 2, out
    assert fragment in out
    assert "e.json" in out


def test_compare_binary_file_names_byte_and_offset(tmp_path: Path) -> None:
    f = tmp_path / "rand.bin"
    f.write_bytes(b"ab\xff\x00")
    code, out = cli("preflight", "--compare", str(f), "--compare", str(f))
    assert code == 2, out
    assert "rand.bin" in out and "0xff at offset 2" in out


def test_compare_missing_file(tmp_path: Path) -> None:
    code, out = cli("preflight", "--compare", str(tmp_path / "gone.json"))
    assert code == 2, out
    assert "gone.json" in out and "cannot read it" in out


def test_compare_good_reports_still_work(tmp_path: Path) -> None:
    for n in ("a", "b"):
        (tmp_path / f"{n}.json").write_text(
            json.dumps(
                {
                    "node": n,
                    "results": [],
                    "facts": {
                        "kernel": "6.8",
                        "driver": "580",
                        "fabric_mtu": 9000,
                        "gid_index": 3,
                        "gid_type": "RoCE v2",
                        "nccl_version": "2.30.7",
                    },
                }
            )
        )
    code, out = cli("preflight", "--compare", str(tmp_path / "a.json"), "--compare", str(tmp_path / "b.json"))
    assert code == 0, out
    assert "same-mtu" in out


@pytest.mark.parametrize("twice", ["same file", "same node"])
def test_compare_needs_two_distinct_nodes(tmp_path: Path, twice: str) -> None:
    for n, node in (("a", "a"), ("b", "a" if twice == "same node" else "b")):
        (tmp_path / f"{n}.json").write_text(json.dumps({"node": node, "results": [], "facts": {}}))
    second = "a.json" if twice == "same file" else "b.json"
    code, out = cli("preflight", "--compare", str(tmp_path / "a.json"), "--compare", str(tmp_path / second))
    assert code == 2, out
    # refused as given twice (naming the file, or the node and both files), not merged
    wanted = "a.json given twice" if twice == "same file" else "node a given twice"
    assert wanted in out and "wanted" in out, out


# 4. --facts-out is checked before any check runs


def test_facts_out_folder_is_refused_up_front(tmp_path: Path) -> None:
    d = tmp_path / "dir.yaml"
    d.mkdir()
    code, out = cli("preflight", "--env-file", str(GOOD_ENV), "--only", "memory", "--facts-out", str(d))
    assert code == 2, out
    assert "is a folder" in out and "dir.yaml" in out
    assert "memory" not in out.replace("--only", "")  # no check ran


def test_facts_out_missing_parent(tmp_path: Path) -> None:
    p = tmp_path / "nope" / "r.json"
    code, out = cli("preflight", "--env-file", str(GOOD_ENV), "--only", "memory", "--facts-out", str(p))
    assert code == 2, out
    assert "does not exist" in out and "nope" in out


def test_facts_out_parent_is_a_file(tmp_path: Path) -> None:
    f = tmp_path / "afile"
    f.write_text("x")
    code, out = cli(
        "preflight", "--env-file", str(GOOD_ENV), "--only", "memory", "--facts-out", str(f / "r.json")
    )
    assert code == 2, out
    assert "is not a folder" in out


@pytest.mark.skipif(os.geteuid() == 0, reason="root writes through permission bits")
def test_facts_out_unwritable_folder(tmp_path: Path) -> None:
    d = tmp_path / "ro"
    d.mkdir()
    d.chmod(0o500)
    try:
        code, out = cli(
            "preflight", "--env-file", str(GOOD_ENV), "--only", "memory", "--facts-out", str(d / "r.json")
        )
    finally:
        d.chmod(0o700)
    assert code == 2, out
    assert "not writable" in out


# 5. a node env file that is not UTF-8


@pytest.mark.parametrize(
    "args",
    [
        ["node", "validate", "--env-file"],
        ["node", "plan", "--role", "head", "--env-file"],
        ["preflight", "--env-file"],
    ],
)
def test_node_env_file_not_utf8(tmp_path: Path, args: list[str]) -> None:
    f = tmp_path / "junk.env"
    f.write_bytes(b"x\n\xff\xfe\n")
    code, out = cli(*args, str(f))
    assert code == 2, out
    assert f"node env file {f}: not UTF-8 text (byte 0xff at offset 2); wanted KEY=VALUE lines" in out


# 6. inspect on a folder with no checkpoint in it


def test_inspect_empty_folder_says_what_is_missing(tmp_path: Path) -> None:
    d = tmp_path / "emptyck"
    d.mkdir()
    code, out = cli("inspect", str(d), "--hf-home", str(tmp_path / "hf"))
    assert code == 1, out
    assert f"no model.safetensors.index.json (or *.safetensors) in {d}" in out
    assert "is not a folder" not in out


def test_inspect_missing_path_still_says_not_a_folder(tmp_path: Path) -> None:
    code, out = cli("inspect", str(tmp_path / "gone"), "--hf-home", str(tmp_path / "hf"))
    assert code == 1, out
    assert "is not a folder" in out


# 7. node env values that once slipped through: refused by every command that reads
# the env file, exit 2, naming node, key, value (cut, never a file's content) and wanted.


@pytest.mark.parametrize(
    ("key", "value", "fragment"),
    [
        ("SPARKPAIR_MODEL", "--trust-remote-code", "starts with '-'"),
        ("SPARKPAIR_MODEL", "../../etc", "neither a Hugging Face repo id nor an absolute path"),
        ("SPARKPAIR_PROFILE", "../../../../etc/passwd", "neither a profile name nor an absolute .yaml path"),
        ("SPARKPAIR_FABRIC_CIDR", "0.0.0.0/0", "a /0 is not a fabric subnet"),
        ("SPARKPAIR_PREFLIGHT_WAIVE", "all", "unknown check ids ['all']"),
        ("SPARKPAIR_NNODES", "\u0662", "ASCII digits"),
        ("NCCL_IB_HCA", "=^rocep1s0f1", "'=^' is not NCCL syntax"),
    ],
)
@pytest.mark.parametrize("command", [["node", "validate"], ["node", "plan", "--role", "head"], ["preflight"]])
def test_node_env_holes_are_refused_by_every_command(
    tmp_path: Path, command: list[str], key: str, value: str, fragment: str
) -> None:
    lines = GOOD_ENV.read_text().splitlines()
    lines = [x for x in lines if not x.startswith(f"{key}=")] + [f"{key}={value}"]
    f = tmp_path / "node.env"
    f.write_text("\n".join(lines) + "\n")
    code, out = cli(*command, "--env-file", str(f))
    assert code == 2, out
    assert f"{key}=" in out and fragment in out and "wanted" in out, out
    assert "root:" not in out and "Traceback" not in out


# Files that are not small regular files: /dev/zero, a FIFO, a huge file. Read whole, /dev/zero
# grows the reader until the host runs out of memory; only a bounded prefix may be read.


@pytest.mark.parametrize("kind", ["/dev/zero", "fifo", "huge"])
def test_node_env_file_that_is_not_a_small_regular_file_is_refused(tmp_path: Path, kind: str) -> None:
    if kind == "fifo":
        path = tmp_path / "node.env"
        os.mkfifo(path)
    elif kind == "huge":
        path = tmp_path / "node.env"
        path.write_bytes(b"# padding\n" * 120_000)  # 1.2 MB of comments: valid lines, too large
    else:
        path = Path(kind)
    code, out = cli("node", "validate", "--env-file", str(path))
    assert code == 2, out
    want = "larger than 1048576 bytes" if kind == "huge" else "not a regular file"
    assert f"node env file {path}: cannot read it" in out and want in out, out


@pytest.mark.parametrize("kind", ["/dev/zero", "fifo", "huge"])
def test_api_key_file_that_is_not_a_small_regular_file_is_refused(tmp_path: Path, kind: str) -> None:
    from sparkpair_serving.apikey import ApiKeyError, resolve_api_key

    if kind == "fifo":
        path = tmp_path / "key"
        os.mkfifo(path)
    elif kind == "huge":
        path = tmp_path / "key"
        path.write_bytes(b"k" * 70_000)
    else:
        path = Path(kind)
    with pytest.raises(ApiKeyError) as e:
        resolve_api_key(key_file=path, env={})
    want = "larger than 65536 bytes" if kind == "huge" else "not a regular file"
    assert f"api_key_file={path}: the key file is" in str(e.value) and want in str(e.value)
    assert "kkkk" not in str(e.value)
