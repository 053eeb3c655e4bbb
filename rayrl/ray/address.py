"""Whether a Ray cluster's address answers, checked before `ray.init` tries to join it, and
the whole of Ray's reason when joining fails.

Ray 2.60 does not fail fast on an address where nothing listens: `ray.init("host:port")`
retries its GCS client 20 times (`RAY_NUM_REDIS_GET_RETRIES`), each try waiting about 40 s
(5 s to connect, 5 s for the pubsub channel, 30 s for the cluster's id), so a mistyped port
costs a user about 14 minutes of warnings before the error. One TCP connection to the
address's port says in a moment whether anything accepts connections there. A refusal is
tried again for `REFUSED_RETRY_S` (a head started in the background a moment before the run
may not listen yet); a host that drops packets is given `ANSWER_TIMEOUT_S`. Ray has no public
probe of an address, and its private health check may change between versions, so the
probe is a plain socket. It checks only that something listens
there, not that it is a Ray head: what it lets through is Ray's to judge, as before.

Where Ray does fail, its `ConnectionError` says only "Failed to connect to Ray cluster at
..." and keeps its reason (no raylet registered in time, a token refused) in the exception's
cause; `connect_failure` puts the causes in the one line the user reads.

`auto` is the Ray that `ray start` started on this machine (`resolve_auto`). Ray's own
`auto` falls back to any Ray it finds running here, and that includes a Ray another program
started for itself, such as another `rayrl train`'s local Ray or a notebook's `ray.init()`:
such a Ray ends with its program, and a run that joined it would die with it, so rayrl does
not take that fallback.
"""

from __future__ import annotations

import os
import socket
import time

from rayrl.compat import ray_internals
from rayrl.errors import UserError

ANSWER_TIMEOUT_S = 10.0
"""How long a host that neither accepts nor refuses a connection is given (a firewall that
drops packets); a head on another continent answers in well under a second."""

REFUSED_RETRY_S = 10.0
"""How long a refused connection is tried again before the run ends: `ray start --head`
returns once its GCS listens, but a head started in the background (`--block &`, a compose
file, a batch job's first step) may be a few seconds behind the driver."""

CLIENT_SCHEME = "ray://"

PROXY_SETTING = "RAY_grpc_enable_http_proxy"
"""With it set, Ray's connections go through `http_proxy`/`https_proxy`, which a plain
socket does not: the head may be reachable to Ray and not to the probe, which then stands
aside (Ray's own constant `GRPC_ENABLE_HTTP_PROXY` reads it the same way)."""


def host_and_port(address: str) -> tuple[str, int] | None:
    """The host and port of `host:port`, `[v6]:port` or `ray://host:port`; None for the
    forms Ray resolves or refuses itself (`auto`, `local`, a bare host, an unbracketed IPv6
    address, a port out of range)."""
    if address.startswith(CLIENT_SCHEME):
        address = address[len(CLIENT_SCHEME) :]
    if "://" in address:
        return None
    host, colon, port = address.rpartition(":")
    if host.startswith("[") and host.endswith("]"):
        host = host[1:-1]
    elif ":" in host:
        return None
    if not colon or not host or not (port.isascii() and port.isdigit()):
        return None
    if not 0 < int(port) < 65536:
        return None
    return host, int(port)


AUTO = "auto"


def resolve_auto(source: str = "--address") -> str:
    """The address of the Ray that `ray start` started on this machine, for `auto` given
    by `source` (`--address` or `RAY_ADDRESS`): the one `ray start` records in Ray's temp
    directory (`ray_current_cluster`, under $RAY_TMPDIR or /tmp; `ray stop` removes it).
    Without one, a `UserError`: the Rays that other programs started for themselves, which
    Ray's own `auto` would join (see the module's docstring), are not joined."""
    recorded = ray_internals.recorded_ray_address()
    if recorded:
        return recorded
    if source == "RAY_ADDRESS":
        advice = "unset RAY_ADDRESS to start a local Ray"
    else:
        advice = "drop --address to start a local Ray for this run"
    others = ray_internals.running_ray_addresses()
    running = f" (running here, not joined: {', '.join(others)})" if others else ""
    raise UserError(
        f"{source}=auto: no `ray start` Ray is recorded in {ray_internals.ray_address_file()}; a "
        f"Ray another program started for itself ends with it{running}; start one with "
        f"`ray start --head`, pass the address of the Ray to join, or {advice}"
    )


def given(address: str, source: str, resolved: str | None = None) -> str:
    """How an address is named in an error: where it came from, and for `auto` the address
    it stood for."""
    named = f"{source}={address}"
    return named if resolved is None else f"{named} ({resolved}, recorded by `ray start`)"


def check_reachable(
    address: str,
    source: str = "--address",
    retry_s: float = REFUSED_RETRY_S,
    *,
    shown: str | None = None,
) -> None:
    """Raise a `UserError` naming `address` (and `source`, where it came from: `--address`
    or `RAY_ADDRESS`; or `shown`, what `given` made of them) when nothing accepts a
    connection at its port within `retry_s`."""
    target = host_and_port(address)
    if target is None or os.environ.get(PROXY_SETTING, "0").lower() in ("1", "true"):
        return
    host, port = target
    deadline = time.monotonic() + retry_s
    while True:
        try:
            with socket.create_connection(target, timeout=ANSWER_TIMEOUT_S):
                return
        except ConnectionRefusedError as exc:
            if time.monotonic() < deadline:
                time.sleep(0.5)
                continue
            refused = f"{exc.strerror} for {retry_s:g} s"
            reason = f"nothing accepts connections at {host}:{port} ({refused})"
        except socket.gaierror as exc:
            reason = f"the host name '{host}' does not resolve ({exc.strerror})"
        except TimeoutError:
            reason = f"{host}:{port} did not answer within {ANSWER_TIMEOUT_S:.0f} s"
        except OSError as exc:
            reason = f"{host}:{port} cannot be reached ({exc.strerror or exc})"
        break
    valid = (
        "the address `ray start --head` printed (its GCS port, 6379 unless --port), "
        "`ray://host:10001` for Ray Client, or `auto` for the Ray `ray start` started on this "
        "machine"
    )
    if source == "RAY_ADDRESS":
        advice = f"unset RAY_ADDRESS to start a local Ray, or set it to {valid}"
    else:
        advice = f"pass {valid}"
    named = shown or given(address, source)
    raise UserError(f"cannot connect to the Ray cluster at {named}: {reason}; {advice}")


def connect_failure(
    address: str, source: str, exc: BaseException, *, shown: str | None = None
) -> UserError:
    """The error to end with when `ray.init` could not join `address` (named as for
    `check_reachable`): Ray's message and, after it, each cause it chained (its own message
    says only that it failed), on one line."""
    reasons: list[str] = []
    seen: set[int] = set()
    error: BaseException | None = exc
    while error is not None and id(error) not in seen:
        seen.add(id(error))
        text = " ".join(str(error).split()) or type(error).__name__
        if text not in reasons:
            reasons.append(text)
        error = error.__cause__
    why = ": ".join(reasons)
    named = shown or given(address, source)
    return UserError(f"cannot connect to the Ray cluster at {named}: {why}")
