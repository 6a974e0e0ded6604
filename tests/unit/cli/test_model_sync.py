# ruff: noqa: E501
"""The checkpoint manifest and the copy between nodes: a generated checkpoint laid out as a
Hugging Face snapshot (symlinks into blobs/, a hard link) is streamed over a real TCP
connection, arrives as plain files and passes the check; a shard removed, cut short or
changed on the copy fails, naming the node and the file. The receiver writes nothing for a
sender that does not prove the sync token (wrong token, garbage, silence)."""

from __future__ import annotations

import json
import os
import socket
import struct
import subprocess
import sys
import threading
from pathlib import Path

import pytest
from sparkpair_cli.cluster import manifest, transfer

TOKEN = transfer.SyncToken(b"t" * 64, "test token")
"""The token both ends of a test copy hold."""


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def start_receiver(
    into: Path, token: transfer.SyncToken = TOKEN, **kw
) -> tuple[int, threading.Thread, list, list]:
    """A receiver in a thread on a free loopback port: (port, thread, names got, errors); the
    errors hold each refused peer's error, then the error that ended the receiver, if any."""
    port = free_port()
    ready, got, errs = threading.Event(), [], []
    kw.setdefault("accept_timeout_s", 30)

    def rx() -> None:
        try:
            got.extend(transfer.receive(into, "127.0.0.1", port, token=token, on_listen=ready.set,
                                        on_refused=errs.append, **kw))  # fmt: skip
        except Exception as e:  # surfaced by the caller
            errs.append(e)
            ready.set()

    t = threading.Thread(target=rx)
    t.start()
    assert ready.wait(30)
    return port, t, got, errs


def shard(path: Path, names: list[str], n: int = 4096) -> None:
    """A small valid safetensors file: ``names`` each an F32 tensor of ``n`` elements."""
    header, off = {}, 0
    for name in names:
        header[name] = {"dtype": "F32", "shape": [n], "data_offsets": [off, off + 4 * n]}
        off += 4 * n
    h = json.dumps(header).encode()
    path.write_bytes(struct.pack("<Q", len(h)) + h + bytes(range(256)) * (off // 256))


@pytest.fixture
def snapshot(tmp_path: Path) -> Path:
    """models--t--tiny/snapshots/<rev>/ with symlinked shards (HF cache layout) and a hard link."""
    repo = tmp_path / "hub" / "models--t--tiny"
    blobs, snap = repo / "blobs", repo / "snapshots" / ("a" * 40)
    blobs.mkdir(parents=True)
    snap.mkdir(parents=True)
    shard(blobs / "b1", ["model.layers.0.mlp.gate.weight"])
    shard(blobs / "b2", ["model.layers.1.mlp.gate.weight"])
    (blobs / "idx").write_text(json.dumps({"weight_map": {
        "model.layers.0.mlp.gate.weight": "model-00001-of-00002.safetensors",
        "model.layers.1.mlp.gate.weight": "model-00002-of-00002.safetensors"}}))  # fmt: skip
    for name, blob in (("model-00001-of-00002.safetensors", "b1"), ("model-00002-of-00002.safetensors", "b2"),
                       ("model.safetensors.index.json", "idx")):  # fmt: skip
        (snap / name).symlink_to(Path("../../blobs") / blob)
    os.link(blobs / "idx", snap / "config.json")  # a hard link: the same bytes under two names
    return snap


def copy(src: Path, dst: Path) -> list[str]:
    """src -> dst over a loopback TCP connection (receiver in a thread), both holding TOKEN."""
    port, t, got, errs = start_receiver(dst)
    transfer.send(src, "127.0.0.1", port, token=TOKEN)
    t.join(60)
    assert not errs, errs
    return got


def test_the_manifest_follows_symlinks_to_the_bytes(snapshot: Path) -> None:
    m = manifest.build(snapshot)
    assert [e.path for e in m] == ["config.json", "model-00001-of-00002.safetensors",
                                   "model-00002-of-00002.safetensors", "model.safetensors.index.json"]  # fmt: skip
    one = next(e for e in m if e.path.startswith("model-00001"))
    assert one.size == (snapshot / one.path).resolve().stat().st_size > 16000
    assert one.sha256 == manifest.sha256_of(snapshot.parents[1] / "blobs" / "b1")
    assert manifest.check(snapshot, m, "spark-a") == []


def test_a_dangling_snapshot_symlink_is_named(snapshot: Path) -> None:
    want = manifest.build(snapshot)
    (snapshot.parents[1] / "blobs" / "b2").unlink()
    with pytest.raises(manifest.ManifestError, match="model-00002-of-00002.safetensors: cannot read it"):
        manifest.build(snapshot)
    (p,) = manifest.check(snapshot, want, "spark-a")
    assert (
        "node spark-a:" in p and "model-00002-of-00002.safetensors: a dangling symlink to ../../blobs/b2" in p
    )


def test_a_snapshot_sent_over_tcp_arrives_as_plain_files_that_match(snapshot: Path, tmp_path: Path) -> None:
    (snapshot / manifest.MANIFEST_NAME).write_text(manifest.to_json(manifest.build(snapshot)))
    dst = tmp_path / "copy"
    got = copy(snapshot, dst)
    assert manifest.MANIFEST_NAME in got
    for name in ("model-00001-of-00002.safetensors", "config.json", "model.safetensors.index.json"):
        assert (dst / name).is_file() and not (dst / name).is_symlink(), name
    want = manifest.from_json((dst / manifest.MANIFEST_NAME).read_text(), "copy")
    assert manifest.check(dst, want, "spark-b") == []


def test_a_shard_removed_cut_short_or_changed_on_the_copy_is_named_with_the_node(
    snapshot: Path, tmp_path: Path
) -> None:
    want = manifest.build(snapshot)
    dst = tmp_path / "copy"
    copy(snapshot, dst)
    s1, s2 = dst / "model-00001-of-00002.safetensors", dst / "model-00002-of-00002.safetensors"
    size = s1.stat().st_size
    with s1.open("r+b") as f:
        f.truncate(size - 100)
    data = bytearray(s2.read_bytes())
    data[-1] ^= 0xFF
    s2.write_bytes(bytes(data))
    (dst / "model.safetensors.index.json").unlink()
    (dst / "stray.bin").write_bytes(b"x")
    problems = manifest.check(dst, want, "spark-b")
    assert (
        f"node spark-b: {dst}/model-00001-of-00002.safetensors: {size - 100} bytes; wanted {size} bytes"
        in problems[0]
    )
    assert "node spark-b:" in problems[1] and "model-00002-of-00002.safetensors: sha256" in problems[1]
    assert f"node spark-b: {dst}/model.safetensors.index.json: missing" in problems[2]
    assert f"node spark-b: {dst}/stray.bin: not in the manifest" in problems[3]
    assert len(problems) == 4
    # Without hashes, the same-size change is not seen, and the rest still is.
    assert len(manifest.check(dst, want, "spark-b", hashes=False)) == 3


def test_a_receiver_refuses_members_outside_its_folder(tmp_path: Path) -> None:
    import io
    import tarfile

    buf = io.BytesIO()
    with tarfile.open(fileobj=buf, mode="w") as tar:
        info = tarfile.TarInfo("../escape.txt")
        info.size = 1
        tar.addfile(info, io.BytesIO(b"x"))
    errs = _receive_bytes(tmp_path / "in", buf.getvalue())
    assert errs and "outside the destination" in str(errs[0]), errs
    assert not (tmp_path / "escape.txt").exists()


@pytest.mark.parametrize("name", [".", "./", ""])
def test_a_receiver_refuses_a_file_member_naming_its_folder_itself(tmp_path: Path, name: str) -> None:
    """A file member named '.', './' or '' once wrote ``<into>.sparkpair-partial`` beside ``into``."""
    import io
    import tarfile

    buf = io.BytesIO()
    with tarfile.open(fileobj=buf, mode="w", format=tarfile.GNU_FORMAT) as tar:
        info = tarfile.TarInfo(name)
        info.size = 1
        tar.addfile(info, io.BytesIO(b"x"))
    errs = _receive_bytes(tmp_path / "in", buf.getvalue())
    assert errs and "names the destination" in str(errs[0]) and "wanted a file inside it" in str(errs[0]), (
        errs
    )
    assert sorted(p.name for p in tmp_path.iterdir()) == ["in"], list(tmp_path.iterdir())


def _model(*args: str) -> tuple[int, str]:
    from sparkpair_cli.main import app
    from typer.testing import CliRunner

    res = CliRunner().invoke(app, ["model", *args], env={"SPARKPAIR_SYNC_TOKEN": "k" * 40})
    assert res.exception is None or isinstance(res.exception, SystemExit), repr(res.exception)
    return res.exit_code, " ".join(res.output.split())


@pytest.mark.parametrize("value", ["-1", "0", "nan", "inf"])
def test_model_receive_refuses_a_timeout_that_is_not_positive_and_finite(tmp_path: Path, value: str) -> None:
    code, out = _model("receive", "--into", str(tmp_path / "in"), "--bind", "127.0.0.1", "--timeout-s", value)
    assert code == 2 and f"--timeout-s {float(value)}" in out and "wanted a positive, finite" in out, out


@pytest.mark.parametrize("where", ["a-file", "under-a-file"])
def test_model_receive_refuses_an_into_it_cannot_write_before_listening(tmp_path: Path, where: str) -> None:
    f = tmp_path / "f"
    f.write_text("x")
    into = f if where == "a-file" else f / "sub"
    code, out = _model("receive", "--into", str(into), "--bind", "127.0.0.1", "--port", str(free_port()))
    assert code == 2 and "--into=" in out and "listening" not in out, out


def test_model_receive_names_a_bind_that_is_not_an_address(tmp_path: Path) -> None:
    code, out = _model("receive", "--into", str(tmp_path / "in"), "--bind", "bad host")
    assert code == 2 and "--bind 'bad host': not an address" in out, out


def test_model_send_of_a_missing_folder_exits_2_before_connecting(tmp_path: Path) -> None:
    code, out = _model("send", str(tmp_path / "nonexistent"), "--to", "127.0.0.1:1")
    assert code == 2 and "nonexistent does not exist; wanted the checkpoint folder" in out, out


def test_model_verify_exits_1_naming_node_and_file(snapshot: Path, tmp_path: Path) -> None:
    m = tmp_path / "m.json"
    m.write_text(manifest.to_json(manifest.build(snapshot)))
    (snapshot / "config.json").unlink()
    r = subprocess.run([sys.executable, "-m", "sparkpair_cli.main", "model", "verify", str(snapshot),
                        "--manifest", str(m), "--node", "spark-b"], capture_output=True, text=True)  # fmt: skip
    assert r.returncode == 1, r.stdout + r.stderr
    assert f"node spark-b: {snapshot}/config.json: missing" in r.stdout + r.stderr


def test_pull_refuses_a_revision_that_is_not_a_commit_and_names_the_offline_hub(tmp_path: Path) -> None:
    """The parts of ``model pull`` that need no hub (none is reachable here): the pin, and the
    error when the hub cannot be asked."""
    cmd = [sys.executable, "-m", "sparkpair_cli.main", "model", "pull", "t/tiny", "--into", str(tmp_path / "m")]  # fmt: skip
    r = subprocess.run([*cmd, "--revision", "main"], capture_output=True, text=True)
    assert r.returncode == 2 and "--revision 'main'; wanted a full 40-hex commit id" in r.stderr, r.stderr
    env = dict(os.environ, HF_HUB_OFFLINE="1", HF_HOME=str(tmp_path / "hf"))
    r = subprocess.run([*cmd, "--revision", "a" * 40], capture_output=True, text=True, env=env)
    assert r.returncode == 1, r.stdout + r.stderr
    assert f"t/tiny@{'a' * 40}: OfflineModeIsEnabled" in " ".join(r.stderr.split()), r.stderr
    assert "Traceback" not in r.stderr


def test_pull_takes_the_repo_and_revision_from_the_profile(tmp_path: Path) -> None:
    env = dict(os.environ, HF_HUB_OFFLINE="1", HF_HOME=str(tmp_path / "hf"))
    cmd = [sys.executable, "-m", "sparkpair_cli.main", "model", "pull", "--into", str(tmp_path / "m")]
    r = subprocess.run([*cmd, "--profile", "deepseek-v4-flash"], capture_output=True, text=True, env=env)
    said = " ".join(r.stderr.split())
    # the hub is asked for the profile's pin (here it cannot be: offline), nothing else
    assert (
        r.returncode == 1
        and "deepseek-ai/DeepSeek-V4-Flash-0731@9e165c30e2704aec5d9d593cce3eebd58bbef1cb" in said
    )
    r = subprocess.run(
        [*cmd, "--profile", "deepseek-v4-flash", "--revision", "b" * 40], capture_output=True, text=True
    )
    said = " ".join(r.stderr.split())
    assert r.returncode == 2 and f"--revision '{'b' * 40}' and --profile deepseek-v4-flash's" in said, said
    r = subprocess.run([*cmd, "--profile", "tiny-demo"], capture_output=True, text=True)
    assert r.returncode == 2 and "has no --revision" in " ".join(r.stderr.split())
    r = subprocess.run(cmd, capture_output=True, text=True)
    assert r.returncode == 2 and "wanted REPO_ID and --revision, or --profile NAME" in " ".join(
        r.stderr.split()
    )


def test_a_download_or_copy_that_does_not_fit_is_refused_naming_the_shortfall(tmp_path: Path) -> None:
    from sparkpair_cli.cluster import space

    free = space.free_bytes(tmp_path / "not" / "yet")  # the folder's file system, before it exists
    assert free == space.free_bytes(tmp_path) > 0
    (tmp_path / "ck").mkdir()
    (tmp_path / "ck" / "a.safetensors").write_bytes(b"x" * 4096)  # resumed: already complete
    (tmp_path / "ck" / "b.safetensors").write_bytes(b"x" * 10)  # cut short: downloaded again
    sizes = {"a.safetensors": 4096, "b.safetensors": 8192, "c.safetensors": 100}
    assert space.bytes_here(tmp_path / "ck", sizes) == 4096
    assert space.bytes_here(tmp_path / "ck") == 4106
    fits = space.Need(str(tmp_path), 4096 + 8192, 4096, free)
    assert fits.problem("model pull") is None
    big = free + 3 * space.GIB  # what a 155 GiB checkpoint is to a nearly full disk
    short = space.Need(str(tmp_path), big, 0, free)
    why = short.problem("node spark-b")
    assert why and why.startswith(f"node spark-b: {tmp_path} has {free / space.GIB:.1f} GiB free")
    assert f"short by {(3 * space.GIB + space.HEADROOM_BYTES) / space.GIB:.1f} GiB" in why
    assert space.Need(str(tmp_path), big, big, 0).problem("x") is None  # all there: nothing to write


def test_model_space_reports_free_bytes_and_what_the_folder_holds(tmp_path: Path) -> None:
    import json

    (tmp_path / "ck").mkdir()
    (tmp_path / "ck" / "a").write_bytes(b"y" * 123)
    r = subprocess.run([sys.executable, "-m", "sparkpair_cli.main", "model", "space", str(tmp_path / "ck")],
                       capture_output=True, text=True)  # fmt: skip
    got = json.loads(r.stdout)
    assert r.returncode == 0 and got["bytes"] == 123 and got["free"] > 0


def test_the_nodes_serve_with_the_hub_offline() -> None:
    import yaml

    compose = yaml.safe_load((Path(__file__).resolve().parents[3] / "compose.yaml").read_text())
    assert compose["x-node"]["environment"]["HF_HUB_OFFLINE"] == "1"


def _receive_bytes(into: Path, payload: bytes) -> list[Exception]:
    """Run a receiver into ``into`` and feed it ``payload`` raw, after a correct handshake
    (``transfer``'s own sender side of it); return its errors."""
    port, t, _, errs = start_receiver(into)
    with socket.create_connection(("127.0.0.1", port)) as c:
        transfer._authenticate_to_receiver(c, f"127.0.0.1:{port}", TOKEN, 10)
        c.sendall(payload)
    t.join(30)
    return errs


def test_a_stream_cut_short_leaves_the_file_already_there_whole(tmp_path: Path) -> None:
    import io
    import tarfile

    into = tmp_path / "in"
    into.mkdir()
    (into / "big.bin").write_bytes(b"A" * 100_000)
    buf = io.BytesIO()
    with tarfile.open(fileobj=buf, mode="w") as tar:
        info = tarfile.TarInfo("big.bin")
        info.size = 100_000
        tar.addfile(info, io.BytesIO(b"B" * 100_000))
    errs = _receive_bytes(into, buf.getvalue()[:40_000])
    assert errs, "a cut stream was accepted"
    assert (into / "big.bin").read_bytes() == b"A" * 100_000
    assert not list(into.glob("*" + transfer.PARTIAL_SUFFIX))


def test_an_empty_stream_is_refused(tmp_path: Path) -> None:
    import io
    import tarfile

    buf = io.BytesIO()
    with tarfile.open(fileobj=buf, mode="w"):
        pass
    errs = _receive_bytes(tmp_path / "in", buf.getvalue())
    assert errs and "held no file" in str(errs[0]), errs


def test_symlink_loops_and_fifos_are_named_instead_of_hanging(tmp_path: Path) -> None:
    loop = tmp_path / "loop"
    (loop / "sub").mkdir(parents=True)
    (loop / "f").write_text("x")
    (loop / "sub" / "back").symlink_to("..")
    with pytest.raises(manifest.ManifestError, match="loop"):
        manifest.build(loop)
    fifo = tmp_path / "fifo"
    fifo.mkdir()
    os.mkfifo(fifo / "pipe")
    with pytest.raises(manifest.ManifestError, match="not a plain file"):
        manifest.build(fifo)


@pytest.mark.parametrize(
    ("entry", "wanted"),
    [
        ({"path": "../../etc/hostname", "size": 1, "sha256": "0" * 64}, "wanted a relative path"),
        ({"path": "/etc/passwd", "size": 1, "sha256": "0" * 64}, "wanted a relative path"),
        ({"path": "a.bin", "size": 1e400, "sha256": "0" * 64}, "wanted a whole number of bytes"),
        ({"path": "a.bin", "size": -1, "sha256": "0" * 64}, "wanted a whole number of bytes"),
        ({"path": "a.bin", "size": 1, "sha256": "zz"}, "wanted 64 hex digits"),
    ],
)
def test_a_manifest_entry_outside_the_folder_or_malformed_is_refused(entry: dict, wanted: str) -> None:
    text = json.dumps({"schema": manifest.SCHEMA, "files": [entry]})
    with pytest.raises(manifest.ManifestError, match=wanted):
        manifest.from_json(text, "m.json")


def test_model_verify_prints_the_manifest_digest_the_nodes_are_compared_by(
    snapshot: Path, tmp_path: Path
) -> None:
    m = tmp_path / "m.json"
    entries = manifest.build(snapshot)
    m.write_text(manifest.to_json(entries))
    r = subprocess.run([sys.executable, "-m", "sparkpair_cli.main", "model", "verify", str(snapshot),
                        "--manifest", str(m), "--node", "spark-b"], capture_output=True, text=True)  # fmt: skip
    assert r.returncode == 0, r.stdout + r.stderr
    assert f"node spark-b: {manifest.DIGEST_LABEL} {manifest.digest(entries)}" in r.stdout
    other = [manifest.Entry(e.path, e.size, "f" * 64) for e in entries]
    assert manifest.digest(other) != manifest.digest(entries)


def test_pull_refuses_a_revision_with_a_trailing_newline(tmp_path: Path) -> None:
    cmd = [sys.executable, "-m", "sparkpair_cli.main", "model", "pull", "t/tiny", "--into", str(tmp_path / "m")]  # fmt: skip
    r = subprocess.run([*cmd, "--revision", "a" * 40 + "\n"], capture_output=True, text=True)
    assert r.returncode == 2 and "wanted a full 40-hex commit id" in " ".join(r.stderr.split()), r.stderr


def test_a_path_that_looks_like_console_markup_is_printed_as_given(tmp_path: Path) -> None:
    odd = tmp_path / "ck[bold red]x[link=evil.example]y"
    odd.mkdir()
    r = subprocess.run([sys.executable, "-m", "sparkpair_cli.main", "model", "verify", str(odd),
                        "--node", "spark-b"], capture_output=True, text=True)  # fmt: skip
    assert r.returncode == 1 and "Traceback" not in r.stderr, r.stderr
    assert "ck[boldred]x[link=evil.example]y" in "".join(r.stderr.split()), r.stderr


# --- the sender must prove the sync token before the receiver writes anything -------------


def test_a_sender_with_another_token_is_refused_naming_it_and_nothing_is_written(
    snapshot: Path, tmp_path: Path
) -> None:
    """A port scan (connect, close) and a sender with another token are each refused, nothing
    written, and the receiver keeps listening: the sender holding the token then copies."""
    into = tmp_path / "copy"
    port, t, got, errs = start_receiver(into)
    socket.create_connection(("127.0.0.1", port)).close()  # a port scan
    other = transfer.SyncToken(b"u" * 64, "--token-file=/elsewhere")
    with pytest.raises(
        transfer.TransferError, match=r"refused this sender's token \(--token-file=/elsewhere\)"
    ):
        transfer.send(snapshot, "127.0.0.1", port, token=other)
    assert not into.exists(), "the receiver wrote before the sender proved the token"
    assert t.is_alive(), "a refused peer ended the receiver"
    transfer.send(snapshot, "127.0.0.1", port, token=TOKEN)
    t.join(30)
    assert len(errs) == 2 and got, (errs, got)
    # The scanner closed before reading the receiver's challenge: its kernel may answer that
    # challenge with a reset, which the receiver then reads instead of the end of the stream.
    scan = str(errs[0])
    assert scan.startswith("sender 127.0.0.1:"), errs
    assert (
        "closed after 0 of 32 authentication bytes" in scan
        or "connection failed during authentication" in scan
    ), errs
    msg = str(errs[1])
    assert msg.startswith("sender 127.0.0.1:") and "another HMAC-SHA256" in msg, msg
    assert "wanted a `sparkpair model send` holding this receiver's token (test token)" in msg, msg
    assert not manifest.check(into, manifest.build(snapshot), "spark-b")


@pytest.mark.parametrize(
    ("payload", "wanted"),
    [
        (b"GET / HTTP/1.1\r\nHost: x\r\n\r\n" + b"x" * 16, "answered with another HMAC-SHA256"),
        (b"hello", "closed after 5 of 32 authentication bytes"),
    ],
    ids=["garbage", "short-then-closed"],
)
def test_a_client_that_sends_garbage_is_refused_and_nothing_is_written(
    tmp_path: Path, payload: bytes, wanted: str
) -> None:
    into = tmp_path / "copy"
    port, t, _, errs = start_receiver(into, accept_timeout_s=1.5)
    with socket.create_connection(("127.0.0.1", port)) as c:
        hello = c.recv(64)
        c.sendall(payload)
        if len(payload) < 32:
            c.shutdown(socket.SHUT_WR)
        verdict = c.recv(1)
    t.join(30)
    assert hello.startswith(transfer.GREETING)
    assert verdict in (b"R", b""), verdict
    assert len(errs) == 2 and wanted in str(errs[0]) and "refused, nothing written" in str(errs[0]), errs
    assert "within 1.5 s (1 connection(s) refused; the last refusal: sender 127.0.0.1:" in str(errs[1]), errs
    assert not into.exists()


def test_a_client_that_connects_and_stalls_times_out_with_a_clear_message(tmp_path: Path) -> None:
    into = tmp_path / "copy"
    port, t, _, errs = start_receiver(into, handshake_timeout_s=0.5, accept_timeout_s=1.5)
    with socket.create_connection(("127.0.0.1", port)):
        t.join(30)
    assert len(errs) == 2 and "sent no authentication within 0.5 s" in str(errs[0]), errs
    assert str(errs[0]).startswith("sender 127.0.0.1:")
    assert not into.exists()


def test_a_sender_that_stalls_after_the_handshake_is_cut_off(tmp_path: Path) -> None:
    port, t, _, errs = start_receiver(tmp_path / "copy", idle_timeout_s=0.5)
    with socket.create_connection(("127.0.0.1", port)) as c:
        transfer._authenticate_to_receiver(c, f"127.0.0.1:{port}", TOKEN, 10)
        t.join(30)
    assert len(errs) == 1 and "sent nothing for 0.5 s" in str(errs[0]), errs


def test_the_token_comes_from_a_file_or_the_environment_and_is_checked(tmp_path: Path) -> None:
    f = tmp_path / "sync-token"
    tok, created = transfer.resolve_token(f, {}, create=True)
    assert created and f.stat().st_mode & 0o777 == 0o600 and len(tok.secret) == 64
    assert transfer.resolve_token(f, {})[0] == tok  # the sender reads the same bytes
    assert "secret" not in repr(tok) and tok.secret.decode() not in repr(tok)
    env_tok, _ = transfer.resolve_token(None, {transfer.TOKEN_ENV: "k" * 40})
    assert env_tok.secret == b"k" * 40 and env_tok.source == transfer.TOKEN_ENV
    with pytest.raises(
        transfer.TransferError,
        match="no sync token: --token-file, SPARKPAIR_SYNC_TOKEN_FILE and SPARKPAIR_SYNC_TOKEN are unset",
    ):
        transfer.resolve_token(None, {})
    with pytest.raises(
        transfer.TransferError, match=r"--token-file=.*missing.*cannot read the token file \(No such file"
    ):
        transfer.resolve_token(tmp_path / "missing", {})
    (tmp_path / "short").write_text("abc\n")
    with pytest.raises(transfer.TransferError, match="the token has 3 characters; wanted at least 32"):
        transfer.resolve_token(tmp_path / "short", {})
    with pytest.raises(transfer.TransferError, match="not a regular file"):
        transfer.resolve_token(Path("/dev/zero"), {})


def test_model_receive_and_send_as_commands_copy_with_the_token_file_receive_created(
    snapshot: Path, tmp_path: Path
) -> None:
    """The two commands as an operator runs them: receive creates the token file, the sender
    is given a copy of it; a sender without a token is stopped before it connects."""
    tok, into, port = tmp_path / "sync-token", tmp_path / "copy", free_port()
    cli = [sys.executable, "-m", "sparkpair_cli.main", "model"]
    env = {k: v for k, v in os.environ.items() if not k.startswith("SPARKPAIR_SYNC_TOKEN")}
    r = subprocess.run(
        [*cli, "send", str(snapshot), "--to", f"127.0.0.1:{port}"], capture_output=True, text=True, env=env
    )
    assert r.returncode == 2 and "no sync token" in r.stderr and "Traceback" not in r.stderr, r.stderr
    rx = subprocess.Popen([*cli, "receive", "--into", str(into), "--bind", "127.0.0.1", "--port", str(port),
                           "--timeout-s", "60", "--token-file", str(tok)], stderr=subprocess.PIPE, text=True, env=env)  # fmt: skip
    try:
        assert rx.stderr is not None
        lines = [rx.stderr.readline(), rx.stderr.readline()]
        assert "wrote a new sync token" in lines[0] and "listening on" in lines[1], lines
        r = subprocess.run([*cli, "send", str(snapshot), "--to", f"127.0.0.1:{port}"], capture_output=True,
                           text=True, env={**env, "SPARKPAIR_SYNC_TOKEN_FILE": str(tok)})  # fmt: skip
        assert r.returncode == 0, r.stderr
        assert rx.wait(60) == 0
    finally:
        rx.kill()
    assert (into / "model-00001-of-00002.safetensors").read_bytes() == (
        snapshot / "model-00001-of-00002.safetensors"
    ).read_bytes()


def test_preflight_pull_hint_gives_every_required_option_of_model_pull() -> None:
    """The hint preflight prints for a checkpoint that is not there must be a command that runs:
    every required option of `model pull` (today ``--into``) is in it."""
    import typer
    from sparkpair_cli.main import app
    from sparkpair_cli.preflight.checkpoint import pull_hint

    hint = pull_hint("deepseek-ai/DeepSeek-V4-Flash-0731", "9e165c30e2704aec5d9d593cce3eebd58bbef1cb")
    root = typer.main.get_command(app)
    model = root.commands["model"]  # type: ignore[attr-defined]
    pull = model.commands["pull"]
    required = [p.opts[0] for p in pull.params if p.param_type_name == "option" and p.required]
    assert required, "model pull has no required option: this test checks nothing"
    assert all(o in hint for o in required), (required, hint)
    assert "--revision 9e165c30e2704aec5d9d593cce3eebd58bbef1cb" in hint
    assert "SPARKPAIR_MODEL=/models/DeepSeek-V4-Flash-0731" in hint
