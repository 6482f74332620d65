#!/usr/bin/env python3
"""check-routes.py OUT SIZE MODE - checks the btl_tcp_stats lines of one job.

Each rank prints (btl_tcp_stats=1, pml_stats=1) at finalize:
  pml_peers rank=R self=[R] sm=[..] tcp=[..] openib=[..]   (the pml's route)
  [rank R host H] btl_tcp peer P (IP:PORT): sent N frags B bytes, received M frags C bytes
  [rank R host H] btl_tcp stats: N connects, N accepts, N refused, ..., N peer failures, ...
MODE "local": every rank on one host, tcp carries everything (btl self,tcp):
  some tcp peer traffic exists, every peer line names a same-host peer, the
  pml routes every other rank over tcp.
MODE "hosts=K": K namespace hosts, btl self,sm,tcp: ranks spread evenly over
  K hosts, tcp traffic exists between hosts and never between ranks of one host
  (those use sm); the pml routes same-host ranks over sm and other-host ranks
  over tcp. Exit 0 when all hold; prints the route table.
"""
import re
import sys

out, size, mode = sys.argv[1], int(sys.argv[2]), sys.argv[3]
peer_re = re.compile(r"\[rank (\d+) host (\S+)\] btl_tcp peer (\d+) \(([\d.]+):\d+\): "
                     r"sent (\d+) frags \d+ bytes, received (\d+) frags")
stats_re = re.compile(r"\[rank (\d+) host (\S+)\] btl_tcp stats: ([^\n]*)")
host_of, routes, errors = {}, [], []
text = open(out, errors="replace").read()
for m in stats_re.finditer(text):
    host_of[int(m.group(1))] = m.group(2)
    if not re.search(r"(^|, )0 peer failures(,|$)", m.group(3)) or not re.search(
            r"(^|, )0 refused(,|$)", m.group(3)):
        errors.append(f"rank {m.group(1)}: {m.group(3)}")
for m in peer_re.finditer(text):
    routes.append((int(m.group(1)), m.group(2), int(m.group(3)), m.group(4),
                   int(m.group(5)), int(m.group(6))))
if sorted(host_of) != list(range(size)):
    errors.append(f"stats lines from ranks {sorted(host_of)}, expected 0..{size - 1}")
for (r, h, p, ip, sent, recv) in routes:
    ph = host_of.get(p, "?")
    print(f"  tcp: rank {r}@{h} <-> rank {p}@{ph} ({ip}): {sent} frags sent, {recv} received")
    if mode == "local":
        if ph != h:
            errors.append(f"rank {r}: peer {p} on {ph}, expected one host")
    elif ph == h:
        errors.append(f"rank {r}@{h}: tcp carried traffic to same-host rank {p} (sm expected)")
if not routes:
    errors.append("no tcp traffic at all")
if mode.startswith("hosts="):
    k = int(mode.split("=")[1])
    per_host = {}
    for r, h in host_of.items():
        per_host.setdefault(h, []).append(r)
    if len(per_host) != k or any(len(v) != size // k for v in per_host.values()):
        errors.append(f"ranks per host {per_host}, expected {k} hosts x {size // k}")
    print(f"  ranks per host: {dict(sorted(per_host.items()))}")
# The pml's own route table (pml_peers lines): which BTL carried each peer.
peers_re = re.compile(r"^(?:\[[^\]]*\] )?pml_peers rank=(\d+) (.*)$", re.M)
pml_route = {}
for m in peers_re.finditer(text):
    fields = dict(f.split("=", 1) for f in m.group(2).split())
    pml_route[int(m.group(1))] = {
        k: sorted(int(x) for x in v.strip("[]").split(",") if x) for k, v in fields.items()
    }
if sorted(pml_route) != list(range(size)):
    errors.append(f"pml_peers lines from ranks {sorted(pml_route)}, expected 0..{size - 1}")
for r, t in sorted(pml_route.items()):
    others = [p for p in range(size) if p != r]
    if mode == "local":
        want_tcp, want_sm = others, []
    else:
        want_sm = [p for p in others if host_of.get(p) == host_of.get(r)]
        want_tcp = [p for p in others if host_of.get(p) != host_of.get(r)]
    got = (t.get("self"), t.get("sm", []), t.get("tcp", []))
    print(f"  pml: rank {r}: self={got[0]} sm={got[1]} tcp={got[2]}")
    if got != ([r], want_sm, want_tcp):
        errors.append(f"rank {r}: pml route self={got[0]} sm={got[1]} tcp={got[2]}, "
                      f"expected self=[{r}] sm={want_sm} tcp={want_tcp}")
if errors:
    print("route check FAILED:\n  " + "\n  ".join(errors))
    sys.exit(1)
print(f"  route check OK ({mode}, {len(routes)} tcp peer pairs with traffic)")
