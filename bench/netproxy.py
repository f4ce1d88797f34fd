"""A network between a client and a server on loopback: delay, jitter and a rate limit, as a TCP proxy.

    python bench/netproxy.py --to 127.0.0.1:PORT --rtt-ms 2 [--jitter-ms 0.2] [--rate-mbit 1000]
        [--port-file F] [--stats-file F] [--max-seconds 3600]

It listens on 127.0.0.1 (a free port, written to --port-file) and relays every connection
to --to byte for byte, so gRPC over HTTP/2 passes through unchanged. Each direction is one
link shared by every connection, as one network path is: a chunk read from one side leaves
the link once the chunks before it have (its bytes at --rate-mbit), and is delivered half
the round trip later, plus a jitter drawn uniformly from [0, --jitter-ms] that never reorders
a connection's bytes. Reads are not held back (the link's buffer is unbounded, as a TCP
window large enough for the bandwidth-delay product would be).

Limits: asyncio sleeps in whole milliseconds at best (epoll's timeout, rounded up), so a
delay is asked for 0.5 ms short and lands within about ±0.5 ms of its aim; the relay
itself adds about 0.2 ms (bench/cluster.py measures the round trip each case got); the proxy
is one Python process, which bench/cluster.py runs beside the client on the same cores.
It exits after --max-seconds whatever happens, and on SIGTERM, writing what it relayed
(bytes each way, connections) to --stats-file.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import random
import signal
import socket
import sys
import time
from pathlib import Path

CHUNK = 64 << 10
ROUNDING = 0.0005


class Link:
    """One direction of the network path: serialisation at `rate` bytes/s, then `delay` s plus jitter."""

    def __init__(self, rate: float, delay: float, jitter: float, rng: random.Random) -> None:
        self.rate, self.delay, self.jitter, self.rng = rate, delay, jitter, rng
        self.busy_until = 0.0
        self.bytes = 0

    def deliver_at(self, now: float, size: int) -> float:
        sent = max(now, self.busy_until) + (size / self.rate if self.rate else 0.0)
        self.busy_until = sent
        self.bytes += size
        return sent + self.delay + (self.rng.uniform(0, self.jitter) if self.jitter else 0.0)


async def pump(reader: asyncio.StreamReader, writer: asyncio.StreamWriter, link: Link) -> None:
    """Relay reader -> writer through link, in order."""
    loop = asyncio.get_running_loop()
    queue: asyncio.Queue[tuple[float, bytes]] = asyncio.Queue()

    async def deliver() -> None:
        while True:
            at, data = await queue.get()
            if not data:
                break
            # epoll waits whole milliseconds, rounded up: ask for half a millisecond less.
            wait = at - loop.time() - ROUNDING
            if wait > 0:
                await asyncio.sleep(wait)
            writer.write(data)
            await writer.drain()
        if writer.can_write_eof():
            writer.write_eof()

    delivering = asyncio.create_task(deliver())
    last = 0.0
    try:
        while True:
            data = await reader.read(CHUNK)
            at = last if not data else max(last, link.deliver_at(loop.time(), len(data)))
            last = at
            queue.put_nowait((at, data))
            if not data:
                break
        await delivering
    except (ConnectionError, OSError):
        pass
    finally:
        if not delivering.done():
            delivering.cancel()
            try:
                await delivering
            except (asyncio.CancelledError, ConnectionError, OSError):
                pass


class Proxy:
    def __init__(self, target: tuple[str, int], up: Link, down: Link) -> None:
        self.target, self.up, self.down = target, up, down
        self.connections = 0

    async def handle(self, client_r: asyncio.StreamReader, client_w: asyncio.StreamWriter) -> None:
        self.connections += 1
        try:
            server_r, server_w = await asyncio.open_connection(*self.target)
        except OSError:
            client_w.close()
            return
        for w in (client_w, server_w):
            sock = w.get_extra_info("socket")
            if sock is not None:
                sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        try:
            await asyncio.gather(pump(client_r, server_w, self.up), pump(server_r, client_w, self.down))
        except (asyncio.CancelledError, ConnectionError, OSError):
            pass
        finally:
            for w in (client_w, server_w):
                w.close()

    def stats(self) -> dict:
        return {"bytes_up": self.up.bytes, "bytes_down": self.down.bytes, "connections": self.connections}


async def serve(a: argparse.Namespace) -> Proxy:
    host, port = a.to.rsplit(":", 1)
    rng = random.Random(a.seed)
    rate = a.rate_mbit * 1e6 / 8 if a.rate_mbit else 0.0
    delay, jitter = a.rtt_ms / 2000, a.jitter_ms / 1000
    proxy = Proxy((host, int(port)), Link(rate, delay, jitter, rng), Link(rate, delay, jitter, rng))
    server = await asyncio.start_server(proxy.handle, "127.0.0.1", a.port)
    listening = server.sockets[0].getsockname()[1]
    if a.port_file:
        tmp = Path(f"{a.port_file}.tmp")
        tmp.write_text(str(listening))
        tmp.rename(a.port_file)
    stop = asyncio.Event()
    loop = asyncio.get_running_loop()
    for sig in (signal.SIGTERM, signal.SIGINT):
        loop.add_signal_handler(sig, stop.set)
    try:
        await asyncio.wait_for(stop.wait(), a.max_seconds)
    except asyncio.TimeoutError:
        print(f"netproxy: stopping after --max-seconds {a.max_seconds}", file=sys.stderr)
    server.close()
    return proxy


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--to", required=True, help="HOST:PORT of the server (loopback)")
    p.add_argument("--port", type=int, default=0, help="port to listen on, on 127.0.0.1 (default: a free one)")
    p.add_argument("--rtt-ms", type=float, default=0.0, help="round trip added, half each way")
    p.add_argument("--jitter-ms", type=float, default=0.0, help="up to this added to each chunk's delay")
    p.add_argument("--rate-mbit", type=float, default=0.0, help="each direction's rate, Mbit/s (0: unlimited)")
    p.add_argument("--port-file", type=Path)
    p.add_argument("--stats-file", type=Path)
    p.add_argument("--max-seconds", type=float, default=3600.0)
    p.add_argument("--seed", type=int, default=1)
    a = p.parse_args(argv)
    if not a.to.startswith(("127.", "localhost:")):
        p.error("--to must be a loopback address")
    started = time.time()
    proxy = asyncio.run(serve(a))
    if a.stats_file:
        a.stats_file.write_text(json.dumps({**proxy.stats(), "seconds": round(time.time() - started, 3),
                                            "pid": os.getpid()}))
    return 0


if __name__ == "__main__":
    sys.exit(main())
