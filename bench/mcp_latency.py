"""Median latency of `tools/call` of a trivial tool, straight to the MCP
server and through the gateway (bench/mcp.sh starts both). Sequential calls
on one keep-alive connection each, interleaved in rounds so drift hits both.

    python bench/mcp_latency.py UPSTREAM_URL GATEWAY_URL API_KEY [CALLS]
"""

import http.client
import json
import os
import socket
import statistics
import sys
import time
from urllib.parse import urlsplit


class Conn:
    def __init__(self, url, key=None):
        u = urlsplit(url)
        self.path = u.path
        self.host, self.port = u.hostname, u.port
        self.c = self.connect()
        self.h = {"Content-Type": "application/json", "Accept": "application/json, text/event-stream"}
        if key:
            self.h["Authorization"] = f"Bearer {key}"
        self.n = 0

    def connect(self):
        # TCP_NODELAY, and each request goes out in one write (below): nothing
        # we send waits for the server's delayed ACK (~40 ms a call).
        c = socket.create_connection((self.host, self.port))
        c.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        return c

    def exchange(self, body):
        # http.client (3.11) writes the head and the body apart; one write
        # is what an HTTP client that buffers its request sends.
        head = f"POST {self.path} HTTP/1.1\r\nHost: {self.host}:{self.port}\r\n"
        head += "".join(f"{k}: {v}\r\n" for k, v in self.h.items())
        head += f"Content-Length: {len(body)}\r\n\r\n"
        self.c.sendall(head.encode() + body)
        r = http.client.HTTPResponse(self.c)
        r.begin()
        return r, r.read()

    def post(self, msg):
        body = json.dumps(msg).encode()
        try:
            return self.exchange(body)
        except (BrokenPipeError, ConnectionResetError, http.client.RemoteDisconnected):
            # The server closed an idle keep-alive connection: reconnect once.
            self.c.close()
            self.c = self.connect()
            return self.exchange(body)

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
                      "gateway_median_ms": round(mg, 3), "added_median_ms": round(mg - md, 3),
                      "load1": round(os.getloadavg()[0], 2)}))


if __name__ == "__main__":
    main()
