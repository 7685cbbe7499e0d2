"""Capped uplinks for the scale lab's nodes, all on one loopback: one HTB class per node's port.

Every node of a lab listens on its own TCP port of 127.0.0.1 (`port_of`), and p2pd (go-libp2p's TCP transport,
which reuses the listening port for its dials: two daemons on 41001 and 41002 connect 41002 -> 41001) sends
everything from that port. So the egress of loopback,
classified by source port, is each node's uplink: `Uplinks.cap(port, mbit)` gives that port a class of its own
(HTB, `mbit` rate and ceiling); other traffic goes unshaped. This changes the loopback of the network namespace it
runs in, so it refuses the machine's own (the lab must run in a namespace of its own:
`ip netns add s3lab && ip netns exec s3lab ip link set lo up && ip netns exec s3lab python bench/scale/lab.py
--uplink-mbit 20 ...`), and `close()` removes what it added.
"""

from __future__ import annotations

import socket
import subprocess

FIRST_PORT = 41000  # node i of a lab listens on FIRST_PORT + i
BURST = "256k"  # loopback's MTU is 64 KiB: a class's burst must hold a few of its packets


def port_of(index: int) -> int:
    """The TCP port of the lab's node number `index` (0: the first bootstrap)."""
    return FIRST_PORT + index


def in_own_namespace() -> bool:
    """This process runs in a network namespace that holds a loopback alone (one made for the lab, not the
    machine's, whose loopback other programs use)."""
    return [name for _, name in socket.if_nameindex()] == ["lo"]


class Uplinks:
    """HTB classes on this namespace's loopback, one per capped port."""

    def __init__(self, dev: str = "lo") -> None:
        if not in_own_namespace():
            raise RuntimeError(
                "capped uplinks change the loopback: run the lab in a network namespace of its own "
                "(ip netns exec NAME python bench/scale/lab.py ...)"
            )
        self.dev = dev
        self.classes: dict[int, float] = {}
        self._sh("tc", "qdisc", "replace", "dev", dev, "root", "handle", "1:", "htb", "default", "ffff")
        self._sh("tc", "class", "add", "dev", dev, "parent", "1:", "classid", "1:ffff", "htb", "rate", "100gbit")

    @staticmethod
    def _sh(*cmd: str) -> None:
        subprocess.run(cmd, check=True, capture_output=True)

    def cap(self, port: int, mbit: float) -> None:
        """Packets sent from `port` leave at most at `mbit` Mbit/s."""
        classid = f"1:{len(self.classes) + 1:x}"
        self._sh(
            "tc",
            "class",
            "add",
            "dev",
            self.dev,
            "parent",
            "1:",
            "classid",
            classid,
            "htb",
            "rate",
            f"{mbit}mbit",
            "ceil",
            f"{mbit}mbit",
            "burst",
            BURST,
            "cburst",
            BURST,
        )
        self._sh(
            "tc",
            "filter",
            "add",
            "dev",
            self.dev,
            "parent",
            "1:",
            "protocol",
            "ip",
            "prio",
            "1",
            "u32",
            "match",
            "ip",
            "sport",
            str(port),
            "0xffff",
            "flowid",
            classid,
        )
        self.classes[port] = mbit

    def close(self) -> None:
        """Remove the root qdisc (and with it every class and filter)."""
        subprocess.run(["tc", "qdisc", "del", "dev", self.dev, "root"], capture_output=True)
        self.classes.clear()
