"""Listeners for the egress attacker tests: one on every address of this host (what a
service bound to 0.0.0.0 offers there), and a public-looking one (TEST-NET-3, 203.0.113.x)
in a network namespace of its own behind a veth pair, reachable from this host the way an
internet server is: by a route, not by an address of the host."""

from __future__ import annotations

import contextlib
import ipaddress
import os
import random
import shutil
import socket
import subprocess
import sys
import threading
from collections.abc import Iterator

import psutil

BANNER = b"hello from the other side\n"
_SERVER = """
import socket, sys
server = socket.socket()
server.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
server.bind(("0.0.0.0", int(sys.argv[1])))
server.listen(16)
print("listening", flush=True)
while True:
    connection, _ = server.accept()
    connection.sendall(BANNER)
    connection.close()
""".replace("BANNER", repr(BANNER))


def host_addresses() -> list[str]:
    """This host's addresses but loopback's (IPv6 link-local ones need a scope: left out)."""
    found = []
    for entries in psutil.net_if_addrs().values():
        for entry in entries:
            if entry.family not in (socket.AF_INET, socket.AF_INET6):
                continue
            address = ipaddress.ip_address(entry.address.split("%", 1)[0])
            if not (address.is_loopback or address.is_link_local):
                found.append(str(address))
    return sorted(set(found))


@contextlib.contextmanager
def listener_on_every_address() -> Iterator[int]:
    """A TCP server on 0.0.0.0 and [::] of this host (one port), sending BANNER."""
    with socket.socket(socket.AF_INET6) as server6:
        server6.setsockopt(socket.IPPROTO_IPV6, socket.IPV6_V6ONLY, 0)
        server6.bind(("::", 0))
        server6.listen(16)
        stop = threading.Event()

        def serve() -> None:
            server6.settimeout(0.2)
            while not stop.is_set():
                try:
                    connection, _ = server6.accept()
                except OSError:
                    continue
                with connection:
                    connection.sendall(BANNER)

        thread = threading.Thread(target=serve, daemon=True)
        thread.start()
        try:
            yield server6.getsockname()[1]
        finally:
            stop.set()
            thread.join(timeout=5)


def _ip(*args: str, netns_pid: int | None = None) -> None:
    argv = ["ip", *args]
    if netns_pid is not None:
        argv = ["nsenter", f"--net=/proc/{netns_pid}/ns/net", *argv]
    subprocess.run(argv, check=True, capture_output=True, timeout=10)


@contextlib.contextmanager
def public_looking_server(port: int = 8080) -> Iterator[tuple[str, int] | None]:
    """(address, port) of a server at a public-looking address, or None where this process
    may not make network namespaces and links (not root, no iproute2). Nothing outlives it:
    the namespace dies with its one process, and its veth pair and route with it."""
    tools = all(shutil.which(tool) for tool in ("ip", "unshare", "nsenter"))
    if os.geteuid() != 0 or not tools:
        yield None
        return
    helper = subprocess.Popen(
        ["unshare", "--net", sys.executable, "-c", _SERVER, str(port)],
        stdout=subprocess.PIPE,
        stderr=subprocess.DEVNULL,
    )
    try:
        yield _wire(helper, port)
    finally:
        helper.kill()
        helper.wait()


def _wire(helper: subprocess.Popen, port: int) -> tuple[str, int] | None:
    """A veth pair from this host into the helper's namespace, a public-looking address
    there and a route to it here; None when this host refuses any of it."""
    if helper.stdout is None or helper.stdout.readline() != b"listening\n":
        return None
    suffix = f"{random.randrange(16**6):06x}"
    host_side, far_side = f"egh{suffix}", f"egn{suffix}"
    try:
        _ip("link", "add", host_side, "type", "veth", "peer", "name", far_side)
        _ip("link", "set", far_side, "netns", str(helper.pid))
        _ip("link", "set", host_side, "up")
        # Another test run on this machine may hold an address: take a free one.
        for _ in range(20):
            address = f"203.0.113.{random.randint(2, 254)}"
            try:
                _ip("route", "add", f"{address}/32", "dev", host_side)
                break
            except subprocess.CalledProcessError:
                continue
        else:
            return None
        for args in (
            ("link", "set", "lo", "up"),
            ("addr", "add", f"{address}/32", "dev", far_side),
            ("link", "set", far_side, "up"),
            ("route", "add", "default", "dev", far_side),
        ):
            _ip(*args, netns_pid=helper.pid)
        with socket.create_connection((address, port), timeout=5) as check:
            if check.recv(100) != BANNER:
                return None
    except (subprocess.CalledProcessError, OSError):
        return None
    return address, port
