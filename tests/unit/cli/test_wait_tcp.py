"""The node's TCP wait (``wait_tcp``, built on ``sparkpair_serving.waiting.poll_until``), on a real socket."""

from __future__ import annotations

import socket

import pytest
from sparkpair_cli.deploy.launch import wait_tcp


def test_wait_tcp_returns_once_the_port_listens_and_times_out_naming_it_otherwise() -> None:
    with socket.socket() as srv:
        srv.bind(("127.0.0.1", 0))
        srv.listen(1)
        port = srv.getsockname()[1]
        assert wait_tcp("127.0.0.1", port, timeout_s=60.0) < 60.0
    with pytest.raises(TimeoutError, match=rf"127\.0\.0\.1:{port} did not accept a connection within 1 s"):
        wait_tcp("127.0.0.1", port, timeout_s=1.0)
