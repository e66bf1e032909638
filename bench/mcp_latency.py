"""Median latency of `tools/call` of a trivial tool, straight to the MCP
server and through the gateway (bench/mcp.sh starts both). Sequential calls
on one keep-alive connection each, interleaved in rounds so drift hits both.

    python bench/mcp_latency.py UPSTREAM_URL GATEWAY_URL API_KEY [CALLS]
"""

import http.client
import json
import statistics
import sys
import time
from urllib.parse import urlsplit


class Conn:
    def __init__(self, url, key=None):
        u = urlsplit(url)
        self.path = u.path
        self.c = http.client.HTTPConnection(u.hostname, u.port)
        self.h = {"Content-Type": "application/json", "Accept": "application/json, text/event-stream"}
        if key:
            self.h["Authorization"] = f"Bearer {key}"
        self.n = 0

    def post(self, msg):
        self.c.request("POST", self.path, json.dumps(msg), self.h)
        r = self.c.getresponse()
        body = r.read()
        return r, body

    def initialize(self):
        r, _ = self.post({"jsonrpc": "2.0", "id": 0, "method": "initialize", "params": {
            "protocolVersion": "2025-06-18", "capabilities": {}, "clientInfo": {"name": "bench", "version": "1"}}})
        sid = r.getheader("mcp-session-id")
        if sid:
            self.h["Mcp-Session-Id"] = sid
            self.h["MCP-Protocol-Version"] = "2025-06-18"
        self.post({"jsonrpc": "2.0", "method": "notifications/initialized"})

    def call(self, name):
        self.n += 1
        t = time.perf_counter()
        r, body = self.post({"jsonrpc": "2.0", "id": self.n, "method": "tools/call",
                             "params": {"name": name, "arguments": {"a": 1, "b": 2}}})
        dt = time.perf_counter() - t
        assert r.status == 200 and b'"3"' in body, body[:200]
        return dt


def main():
    up, gw, key = sys.argv[1:4]
    calls = int(sys.argv[4]) if len(sys.argv) > 4 else 2000
    direct, through = Conn(up), Conn(gw, key)
    direct.initialize()
    through.initialize()
    for _ in range(100):  # warm-up: connections, caches
        direct.call("add")
        through.call("alpha__add")
    d, g = [], []
    for _ in range(calls // 100):
        d += [direct.call("add") for _ in range(100)]
        g += [through.call("alpha__add") for _ in range(100)]
    md, mg = statistics.median(d) * 1000, statistics.median(g) * 1000
    print(json.dumps({"calls": len(d), "direct_median_ms": round(md, 3),
                      "gateway_median_ms": round(mg, 3), "added_median_ms": round(mg - md, 3)}))


if __name__ == "__main__":
    main()
