"""The address check before joining a Ray cluster, and the reason a failed join ends with
(`rayrl.ray.address`). Real sockets on 127.0.0.1: one that listens, one that refuses."""

from __future__ import annotations

import socket
import threading
import time

import pytest

from rayrl.errors import UserError
from rayrl.ray.address import (
    PROXY_SETTING,
    check_reachable,
    connect_failure,
    given,
    host_and_port,
    resolve_auto,
)
from tests.ports import refusing_port


@pytest.mark.parametrize(
    ("address", "target"),
    [
        ("10.0.0.5:6379", ("10.0.0.5", 6379)),
        ("head.example.org:6380", ("head.example.org", 6380)),
        ("ray://10.0.0.5:10001", ("10.0.0.5", 10001)),
        ("[::1]:6379", ("::1", 6379)),
        ("auto", None),  # Ray finds a Ray started on this machine
        ("local", None),
        ("10.0.0.5", None),  # Ray's own error says what is missing
        ("fe80::1", None),  # unbracketed IPv6: Ray refuses it
        ("2001:db8::1:6379", None),
        ("http://10.0.0.5:8265", None),  # a dashboard's address: Ray says it is not one
        ("10.0.0.5:port", None),
        ("10.0.0.5:99999", None),
        ("10.0.0.5:\u0663\u0663", None),  # digits, but not a port
    ],
)
def test_only_host_and_port_addresses_are_probed(address, target):
    assert host_and_port(address) == target


def test_an_address_where_something_listens_passes():
    with socket.socket() as server:
        server.bind(("127.0.0.1", 0))
        server.listen()
        check_reachable(f"127.0.0.1:{server.getsockname()[1]}")


def test_a_refusing_address_is_tried_for_its_grace_then_named_with_what_is_valid():
    with refusing_port() as (_, port):
        address = f"127.0.0.1:{port}"
        started = time.monotonic()
        with pytest.raises(UserError) as error:
            check_reachable(address, retry_s=1.0)
    waited = time.monotonic() - started
    assert 1.0 <= waited < 5.0  # its grace, not a connect timeout
    message = str(error.value)
    assert f"--address={address}" in message
    assert "Connection refused for 1 s" in message
    assert "ray start --head" in message  # what would be valid


def test_a_head_that_starts_listening_within_the_grace_is_joined():
    with refusing_port() as (sock, port):
        threading.Timer(0.6, sock.listen).start()
        check_reachable(f"127.0.0.1:{port}", retry_s=10.0)


def test_an_address_from_ray_address_says_so_and_how_to_run_locally():
    with refusing_port() as (_, port), pytest.raises(UserError) as error:
        check_reachable(f"127.0.0.1:{port}", "RAY_ADDRESS", retry_s=0.0)
    assert f"RAY_ADDRESS=127.0.0.1:{port}" in str(error.value)
    assert "unset RAY_ADDRESS to start a local Ray" in str(error.value)


def test_behind_grpcs_http_proxy_the_probe_stands_aside(monkeypatch):
    """Ray's connections then go through the proxy, which a plain socket does not."""
    monkeypatch.setenv(PROXY_SETTING, "1")
    with refusing_port() as (_, port):
        check_reachable(f"127.0.0.1:{port}", retry_s=0.0)


def test_a_host_that_does_not_resolve_is_named():
    # the trailing dot: a fully qualified name, which no search domain can make resolve
    with pytest.raises(UserError, match=r"'no-such-host\.invalid\.' does not resolve"):
        check_reachable("no-such-host.invalid.:6379")


def test_a_failed_join_says_the_reason_ray_chained_to_its_error():
    """Ray 2.60 raises `ConnectionError("Failed to connect to Ray cluster at ...")` from the
    error that says why; both, on one line."""
    try:
        try:
            raise RuntimeError("no raylet registered\n within 60 s")
        except RuntimeError as cause:
            raise ConnectionError("Failed to connect to Ray cluster at 10.0.0.5:6379") from cause
    except ConnectionError as exc:
        message = str(connect_failure("10.0.0.5:6379", "--address", exc))
    assert message == (
        "cannot connect to the Ray cluster at --address=10.0.0.5:6379: Failed to connect to "
        "Ray cluster at 10.0.0.5:6379: no raylet registered within 60 s"
    )


def test_auto_is_the_ray_that_ray_start_recorded(tmp_path, monkeypatch):
    """`ray start` writes its address to <Ray's temp dir>/ray_current_cluster."""
    monkeypatch.setenv("RAY_TMPDIR", str(tmp_path))
    (tmp_path / "ray").mkdir()
    (tmp_path / "ray" / "ray_current_cluster").write_text("10.0.0.5:6379\n")
    assert resolve_auto() == "10.0.0.5:6379"
    assert given("auto", "--address", "10.0.0.5:6379") == (
        "--address=auto (10.0.0.5:6379, recorded by `ray start`)"
    )


@pytest.mark.parametrize(
    ("source", "advice"),
    [("--address", "drop --address to start"), ("RAY_ADDRESS", "unset RAY_ADDRESS to start")],
)
def test_auto_without_a_ray_started_by_ray_start_is_refused(tmp_path, monkeypatch, source, advice):
    monkeypatch.setenv("RAY_TMPDIR", str(tmp_path))
    with pytest.raises(UserError) as error:
        resolve_auto(source)
    message = str(error.value)
    recorded = tmp_path / "ray" / "ray_current_cluster"
    assert message.startswith(f"{source}=auto: no `ray start` Ray is recorded in {recorded}")
    assert "ray start --head" in message
    assert advice in message
