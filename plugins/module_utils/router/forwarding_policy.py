# Copyright: xdpfleet developers
# GNU General Public License v2.0 only (see COPYING or https://www.gnu.org/licenses/gpl-2.0.txt)
"""What the kernel's forwarding path would decide that the XDP router does not: the host's netfilter rules on the
forwarding path and reverse-path filtering, read before the router attaches.

A frame the router forwards in XDP (bpf_fib_lookup, then a redirect out of the egress port's driver) never enters
the kernel's IP stack: it passes no netfilter hook (prerouting, forward, postrouting, nor a port's netdev ingress or
egress chain: no filtering, no NAT, no conntrack), and no source validation (net.ipv4.conf.*.rp_filter). A host
with such rules or with rp_filter on would forward in XDP what its kernel drops or rewrites, so the router refuses
it, naming each finding, unless the user lets it forward past them (bypass_forwarding_rules).

bpf_fib_lookup cannot do these checks itself: its flags (DIRECT, OUTPUT, SKIP_NEIGH, TBID, SRC in 6.8, MARK) choose
the table or fill in fields; BPF_FIB_LOOKUP_SRC derives the source address the host would send from, it does not
validate the frame's source.

Where the rules are read from: `nft -j list ruleset`, which also shows what iptables-nft made (tables filter, nat,
... in families ip and ip6); the legacy iptables tables are only listed (/proc/net/ip_tables_names,
ip6_tables_names): their rules cannot be read without iptables, so a legacy table that exists is a finding.
"""

from __future__ import annotations

import json
import subprocess

# The hooks a routed frame passes in the families that see IP; an XDP redirect skips every one of them.
FORWARDING_HOOKS = ("prerouting", "forward", "postrouting")
# Hooks bound to devices (netdev family, and inet ingress): they apply when bound to a router port.
DEVICE_HOOKS = ("ingress", "egress")
IP_FAMILIES = ("ip", "ip6", "inet")
LEGACY_TABLE_LISTS = {"iptables": "/proc/net/ip_tables_names", "ip6tables": "/proc/net/ip6_tables_names"}
RP_FILTER_MODES = {1: "strict", 2: "loose"}
BYPASS = "bypass_forwarding_rules"


def run_nft() -> subprocess.CompletedProcess:
    return subprocess.run(["nft", "-j", "list", "ruleset"], capture_output=True, text=True, check=False)


def _chain_devices(chain: dict) -> list[str] | None:
    """The devices a device hook's chain is bound to; None where nft does not say (nft before 1.0.7 leaves "dev" out
    of its JSON)."""
    devices = chain.get("dev", chain.get("devs"))
    if devices is None:
        return None
    return [devices] if isinstance(devices, str) else list(devices)


def nftables_findings(ruleset: dict, ports: list[str]) -> list[str]:
    """Base chains on the forwarding path (or on a router port's device hooks) that can decide anything: with rules,
    or with a policy other than accept. An empty chain with policy accept changes nothing and is not a finding."""
    chains, rules = [], {}
    for item in ruleset.get("nftables", []):
        if "chain" in item:
            chains.append(item["chain"])
        elif "rule" in item:
            rule = item["rule"]
            key = (rule.get("family"), rule.get("table"), rule.get("chain"))
            rules[key] = rules.get(key, 0) + 1
    findings = []
    for chain in chains:
        family, hook = chain.get("family"), chain.get("hook")
        where = ""
        if hook in DEVICE_HOOKS:
            devices = _chain_devices(chain)
            if devices is not None and not set(devices) & set(ports):
                continue
            where = f" on {', '.join(devices)}" if devices else " on a device nft does not name"
        elif not (family in IP_FAMILIES and hook in FORWARDING_HOOKS):
            continue  # no hook: reached only by a jump from a base chain, which is checked itself
        count = rules.get((family, chain.get("table"), chain.get("name")), 0)
        policy = chain.get("policy", "accept")
        if count or policy != "accept":
            findings.append(
                f"nftables table {family} {chain.get('table')} chain {chain.get('name')} (hook {hook}{where}): "
                f"{count} rule{'' if count == 1 else 's'}, policy {policy}"
            )
    return findings


def legacy_findings(read_text) -> list[str]:
    findings = []
    for tool, path in LEGACY_TABLE_LISTS.items():
        for table in (read_text(path) or "").split():
            findings.append(f"legacy {tool} table {table} exists ({path}; its rules cannot be read without {tool})")
    return findings


def read_text(path: str) -> str | None:
    try:
        with open(path) as f:
            return f.read()
    except FileNotFoundError:
        return None


def netfilter_problems(ports: list[str], run=run_nft, read=read_text) -> list[str]:
    """The netfilter rules on the forwarding path that an XDP redirect would skip, as one refusal (or none)."""
    try:
        listed = run()
    except FileNotFoundError:
        return [
            f"{BYPASS}: nft (Debian and EL package nftables) is not installed, so the netfilter rules on the kernel's "
            f"forwarding path cannot be read; install it, or set {BYPASS}: true to forward in XDP past whatever "
            "rules there are"
        ]
    if listed.returncode != 0:
        return [
            f"{BYPASS}: `nft -j list ruleset` failed ({listed.stderr.strip() or listed.returncode}), so the netfilter "
            f"rules on the kernel's forwarding path cannot be read; set {BYPASS}: true to forward in XDP past them"
        ]
    findings = nftables_findings(json.loads(listed.stdout or "{}"), ports) + legacy_findings(read)
    if not findings:
        return []
    return [
        f"{BYPASS}: the kernel's forwarding path has netfilter rules that frames forwarded in XDP would skip (no "
        f"filtering, NAT or conntrack): {'; '.join(findings)}. Move them off the forwarding path, leave routing to "
        f"the kernel (no XDP router), or set {BYPASS}: true to forward in XDP past them"
    ]


def rp_filter_problems(ports: list[str], read) -> list[str]:
    """Ports where the kernel validates sources (IPv4 rp_filter: the larger of net.ipv4.conf.all and the port's)."""
    problems = []
    everywhere = int(read("ipv4/conf/all/rp_filter") or 0)
    for port in ports:
        own = int(read(f"ipv4/conf/{port}/rp_filter") or 0)
        effective = max(everywhere, own)
        if effective:
            problems.append(
                f"{BYPASS}: reverse-path filtering is on for {port} ({RP_FILTER_MODES.get(effective, effective)}: the "
                f"larger of net.ipv4.conf.all.rp_filter={everywhere} and net.ipv4.conf.{port}.rp_filter={own}); the "
                "kernel drops a frame whose source it would not route back out of that port (loose: out of any "
                "port), frames forwarded in XDP are not checked. Set both to 0, or set "
                f"{BYPASS}: true to forward in XDP without the check"
            )
    return problems
