"""The routes an egress sandbox gets (pure): what is unreachable, what an operator opens, and
that nothing opened can reach the worker's or the platform's own addresses. What a task
really sees is tests/integration/test_hostile_tenant.py's attacker."""

from __future__ import annotations

import ipaddress

import pytest

from sandbox.egress_filter import (
    DENIED_NETWORKS,
    EgressPolicy,
    parse_networks,
    route_commands,
)


def _table(lines: list[str]) -> dict[ipaddress.IPv4Network, str]:
    """{network: "unreachable" | "gateway"} from the `ip -batch` lines, over the table
    slirp4netns configures (its network on the tap device, a default route)."""
    table = {ipaddress.ip_network("10.0.2.0/24"): "gateway"}
    for line in lines:
        words = line.split()
        if words[2] == "unreachable":
            table[ipaddress.ip_network(words[3])] = "unreachable"
        else:
            assert words[3:] == ["via", "10.0.2.2"], line
            table[ipaddress.ip_network(words[2])] = "gateway"
    return table


def _decides(table, address: str) -> str:
    """What the kernel does with `address`: the longest prefix that holds it, else the
    default route (slirp's gateway, the public internet)."""
    ip = ipaddress.ip_address(address)
    matches = [n for n in table if n.version == ip.version and ip in n]
    return table[max(matches, key=lambda n: n.prefixlen)] if matches else "gateway"


@pytest.mark.parametrize(
    "address",
    [
        "10.1.2.3",
        "172.16.0.1",
        "172.31.255.254",
        "192.168.1.1",
        "169.254.169.254",  # the cloud metadata service
        "100.100.100.200",  # another cloud's, in the shared range
        "127.0.0.1",
        "10.0.2.2",  # slirp's gateway (the host's loopback when not disabled)
        "10.0.2.5",  # another address of slirp's network: would be connected to as is
        "224.0.0.1",
        "255.255.255.255",
        "0.0.0.1",
    ],
)
def test_private_link_local_and_metadata_addresses_are_unreachable(address):
    assert _decides(_table(route_commands(EgressPolicy(), host=())), address) == "unreachable"


@pytest.mark.parametrize("address", ["10.0.2.3", "93.184.215.14", "1.1.1.1", "203.0.113.80"])
def test_slirps_dns_and_public_addresses_go_out(address):
    assert _decides(_table(route_commands(EgressPolicy(), host=())), address) == "gateway"


def test_the_hosts_and_the_platforms_addresses_are_unreachable_even_when_public():
    lines = route_commands(
        EgressPolicy(denied=("198.51.100.20",)), host=("203.0.113.5", "fd00::2", "fe80::1")
    )
    table = _table(lines)
    assert _decides(table, "203.0.113.5") == "unreachable"  # the worker's public address
    assert _decides(table, "198.51.100.20") == "unreachable"  # a managed Redis
    assert _decides(table, "203.0.113.6") == "gateway"


def test_an_opened_private_network_keeps_the_host_and_the_platform_closed():
    policy = EgressPolicy(denied=("10.20.0.5",), allowed=("10.20.0.0/16", "10.0.0.0/8"))
    table = _table(route_commands(policy, host=("10.20.0.9",)))
    assert _decides(table, "10.20.30.40") == "gateway"
    assert _decides(table, "10.99.0.1") == "gateway"  # the whole 10/8 was opened
    assert _decides(table, "10.20.0.5") == "unreachable"  # the platform's Redis
    assert _decides(table, "10.20.0.9") == "unreachable"  # the worker itself
    assert _decides(table, "10.0.2.7") == "unreachable"  # slirp's own network stays shut
    assert _decides(table, "192.168.0.1") == "unreachable"


def test_opening_slirps_network_is_ignored():
    table = _table(route_commands(EgressPolicy(allowed=("10.0.2.0/24",)), host=()))
    assert _decides(table, "10.0.2.2") == "unreachable"


def test_ipv6_is_closed_altogether():
    lines = route_commands(EgressPolicy(), host=("fd00::2",))
    assert lines[-1] == "route add unreachable ::/0"


def test_every_builtin_network_is_one_and_a_bad_setting_says_which():
    assert len(parse_networks(DENIED_NETWORKS)) == len(DENIED_NETWORKS)
    with pytest.raises(ValueError, match="'intranet' is not an IP network"):
        parse_networks(["10.0.0.0/8", "intranet"])
