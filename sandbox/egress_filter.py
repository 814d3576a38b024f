"""What an egress-enabled sandbox may not reach, enforced inside the sandbox's own network
namespace whatever the deployment around it.

slirp4netns makes the task's connections as ordinary sockets of the worker: whatever the
worker can reach, the task could, and in compose or Kubernetes that is the platform's Redis
and PostgreSQL (on another address of the worker's network), the other pods, the node and the
cloud's metadata service. So before the command starts, the sandbox's routing table gets an
`unreachable` route for each of these, and a connect(2) there fails at once with
EHOSTUNREACH ("No route to host") inside the sandbox, before slirp4netns ever sees it:

* the private, shared, loopback, link-local (169.254.169.254, the metadata services),
  benchmark, multicast and reserved IPv4 ranges (DENIED_NETWORKS);
* slirp4netns's own network (10.0.2.0/24) but its DNS forwarder 10.0.2.3: an address there
  other than its gateway and DNS would be connected to as is, on the worker's network;
* every address of the worker's host (a service listening on 0.0.0.0 there, such as a
  Redis or the kubelet, is reachable on them, public ones included);
* the addresses the platform's Redis and PostgreSQL resolve to, even when public (a managed
  Redis), and any network the operator adds (WORKER_EGRESS_DENIED_NETWORKS);
* all of IPv6: slirp4netns runs without it, and the table says so.

The operator may open private networks the tasks need (WORKER_EGRESS_ALLOWED_NETWORKS, e.g.
a tenant's service behind a VPN): routes win by prefix length, so the host's and the
platform's addresses, being /32, stay unreachable inside them.

The routes are written with iproute2 from the user namespace that owns the sandbox's network
namespace (nsenter joins it; the command itself has no capability there and cannot change
them: bwrap dropped them all and set no_new_privs).

Pure Python, no Django: the worker passes the policy in (`workers.shell_sandbox`).
"""

from __future__ import annotations

import ipaddress
import os
import subprocess
import time
from collections.abc import Iterable, Sequence
from dataclasses import dataclass

import psutil

from .tools import tool_path

IPNetwork = ipaddress.IPv4Network | ipaddress.IPv6Network

DENIED_NETWORKS = (
    "0.0.0.0/8",  # "this network"
    "10.0.0.0/8",  # private (RFC 1918)
    "100.64.0.0/10",  # carrier-grade NAT, some clouds' internal services
    "127.0.0.0/8",  # loopback (the namespace's own stays: its local table wins)
    "169.254.0.0/16",  # link-local: the cloud metadata services (169.254.169.254)
    "172.16.0.0/12",  # private (RFC 1918)
    "192.0.0.0/24",  # IETF protocol assignments
    "192.168.0.0/16",  # private (RFC 1918)
    "198.18.0.0/15",  # benchmarking
    "224.0.0.0/4",  # multicast
    "240.0.0.0/4",  # reserved, and the broadcast address
)
SLIRP_NETWORK = ipaddress.ip_network("10.0.2.0/24")
SLIRP_GATEWAY = "10.0.2.2"
SLIRP_DNS = ipaddress.ip_network("10.0.2.3/32")
# The worker's own addresses are read again after this long (an interface may change).
HOST_ADDRESSES_SECONDS = 60.0
SETUP_TIMEOUT_SECONDS = 10.0


class EgressFilterError(RuntimeError):
    pass


@dataclass(frozen=True)
class EgressPolicy:
    """What the worker adds to the built-in list: `denied` networks (the platform's own
    endpoints, the operator's) and `allowed` ones (private networks the operator opens)."""

    denied: tuple[str, ...] = ()
    allowed: tuple[str, ...] = ()


def parse_networks(values: Iterable[str]) -> list[IPNetwork]:
    """CIDRs or bare addresses; ValueError names the first bad one."""
    networks = []
    for value in values:
        try:
            networks.append(ipaddress.ip_network(value.strip(), strict=False))
        except ValueError as error:
            raise ValueError(f"{value!r} is not an IP network: {error}") from None
    return networks


_host_addresses: tuple[float, tuple[str, ...]] = (0.0, ())


def host_addresses() -> tuple[str, ...]:
    """Every address of the worker's interfaces but loopback's, IPv4 and IPv6."""
    global _host_addresses
    read_at, addresses = _host_addresses
    if time.monotonic() - read_at < HOST_ADDRESSES_SECONDS and addresses:
        return addresses
    found = set()
    for entries in psutil.net_if_addrs().values():
        for entry in entries:
            if entry.family.name not in ("AF_INET", "AF_INET6"):
                continue
            address = ipaddress.ip_address(entry.address.split("%", 1)[0])
            if not address.is_loopback:
                found.add(str(address))
    _host_addresses = (time.monotonic(), tuple(sorted(found)))
    return _host_addresses[1]


def _slirp_network_but_dns() -> list[IPNetwork]:
    return sorted(SLIRP_NETWORK.address_exclude(SLIRP_DNS))  # type: ignore[arg-type]


def route_commands(policy: EgressPolicy, host: Sequence[str]) -> list[str]:
    """The `ip -batch` lines that shape the sandbox's table (pure: tested as such)."""
    allowed = [n for n in parse_networks(policy.allowed) if n.version == 4]
    unreachable: list[IPNetwork] = [
        *parse_networks(DENIED_NETWORKS),
        *_slirp_network_but_dns(),
        *parse_networks(host),
        *parse_networks(policy.denied),
    ]
    lines, seen = [], set()
    for network in allowed:
        # Opened through slirp's gateway: more specific than the denied range around it
        # (slirp's own network stays shut: its pieces are more specific still).
        if network not in seen and not network.subnet_of(SLIRP_NETWORK):  # type: ignore[arg-type]
            seen.add(network)
            lines.append(f"route add {network} via {SLIRP_GATEWAY}")
    for network in unreachable:
        if network.version == 4 and network not in seen:
            seen.add(network)
            lines.append(f"route add unreachable {network}")
    if os.path.exists("/proc/net/if_inet6"):  # a kernel without IPv6 has nothing to close
        lines.append("route add unreachable ::/0")
    return lines


def apply_policy(*, policy: EgressPolicy, sandbox_pid: int, owner_fd: int) -> None:
    """Write the routes into the sandbox's network namespace (after slirp4netns configured
    it, before the command starts). `owner_fd`: the user namespace owning that network
    namespace. Any failure raises: a sandbox whose filter is not in place never runs."""
    ip, nsenter = tool_path("ip"), tool_path("nsenter")
    if ip is None or nsenter is None:
        raise EgressFilterError(
            "egress needs iproute2 (ip) and util-linux (nsenter) on the worker to refuse "
            "private addresses; neither may be missing"
        )
    # In the owner namespace the sandbox's user is uid 0. A worker running as that user
    # keeps its ids (and is root there, with the namespace's capabilities); a root worker,
    # whose sandboxes run as another user, becomes that uid 0.
    credentials = ["--preserve-credentials"] if os.geteuid() != 0 else []
    argv = [
        nsenter,
        *credentials,
        f"--user=/proc/self/fd/{owner_fd}",
        f"--net=/proc/{sandbox_pid}/ns/net",
        ip,
        "-batch",
        "-",
    ]
    script = "\n".join(route_commands(policy, host_addresses())) + "\n"
    deadline = time.monotonic() + SETUP_TIMEOUT_SECONDS
    while True:
        done = _nsenter_ip(argv, script=script, owner_fd=owner_fd)
        message = done.stderr.decode("utf-8", "replace").strip().splitlines()
        if done.returncode == 0:
            return
        # Sandboxes started side by side: nsenter may enter the owner namespace before its
        # id maps are written and cannot take its ids there yet ("setgid failed: Invalid
        # argument", seen about once in a few hundred starts under load). Nothing has been
        # written then: try again until the maps are there, within the setup's deadline.
        not_mapped_yet = bool(message) and message[-1].startswith(
            ("nsenter: setgid failed", "nsenter: setuid failed")
        )
        if not (not_mapped_yet and time.monotonic() < deadline):
            raise EgressFilterError(
                "could not write the sandbox's routes: "
                + (message[-1] if message else f"exit {done.returncode}")
            )
        time.sleep(0.002)


def _nsenter_ip(argv: list[str], *, script: str, owner_fd: int) -> subprocess.CompletedProcess:
    try:
        return subprocess.run(
            argv,
            input=script.encode(),
            capture_output=True,
            pass_fds=(owner_fd,),
            env={"PATH": "/usr/sbin:/usr/bin:/sbin:/bin"},
            timeout=SETUP_TIMEOUT_SECONDS,
            check=False,
        )
    except (OSError, subprocess.SubprocessError) as error:
        raise EgressFilterError(f"could not write the sandbox's routes: {error}") from error
