#!/usr/bin/env python3
"""A tiny HTTP API rate limited through a ratelimiter router (standard library only).

Every request is checked as (SERVICE, user): the user is the X-User header, else the
client's address. ALLOWED/NO_RULE/FAIL_OPEN answer 200; QUEUED holds the request the time
the reply says, then answers 200 (a wait over --max-queue-delay comes back from the client
as LIMITED: nothing is held that long); LIMITED answers 429 and FAIL_CLOSED (or an unreachable
router with --failure closed) 503, with the headers of docs/INTEGRATION.md.

    python3 http_api.py --router 127.0.0.1:7400 --service search --port 8080
    curl -i -H 'X-User: alice' http://127.0.0.1:8080/hello
"""

from __future__ import annotations

import argparse
import json
import time
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import List, Optional, Tuple

import ratelimiter


def make_handler(pool: ratelimiter.ClientPool, service: str,
                 window_s: Optional[int]) -> type:
    class Handler(BaseHTTPRequestHandler):
        protocol_version = "HTTP/1.1"

        def do_GET(self) -> None:
            user = self.headers.get("X-User") or self.client_address[0]
            reply = pool.check(service, user)
            status, hdrs = ratelimiter.headers(reply, window_s=window_s)
            if status == ratelimiter.PASS:
                time.sleep(reply.delay_s)  # QUEUED: hold it, then go ahead
                self.answer(200, hdrs, {"hello": user, "code": reply.code.name})
            else:
                self.answer(status, hdrs, {"error": reply.code.name})

        do_POST = do_GET

        def answer(self, status: int, hdrs: List[Tuple[str, str]], body: dict) -> None:
            data = json.dumps(body).encode() + b"\n"
            self.send_response(status)
            for k, v in hdrs:
                self.send_header(k, v)
            self.send_header("Content-Type", "application/json")
            self.send_header("Content-Length", str(len(data)))
            self.end_headers()
            self.wfile.write(data)

        def log_message(self, fmt: str, *args: object) -> None:
            pass

    return Handler


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--router", default="127.0.0.1:7400", help="HOST:PORT of a router")
    ap.add_argument("--service", default="search")
    ap.add_argument("--window", type=int, default=None, help="the rule's window in s (w=)")
    ap.add_argument("--port", type=int, default=8080)
    ap.add_argument("--token-file", default=None)
    ap.add_argument("--failure", choices=["open", "closed"], default="open",
                    help="answer when the router cannot be reached (default open)")
    ap.add_argument("--timeout", type=float, default=0.25, help="per check, seconds")
    ap.add_argument("--max-queue-delay", type=float,
                    default=ratelimiter.DEFAULT_MAX_QUEUE_DELAY,
                    help="longest QUEUED wait held, seconds; longer ones answer 429 (default 10)")
    a = ap.parse_args()
    host, _, port = a.router.rpartition(":")
    pool = ratelimiter.ClientPool(host, int(port), size=16, timeout=a.timeout,
                                  token_file=a.token_file, failure_default=a.failure,
                                  max_queue_delay=a.max_queue_delay)
    server = ThreadingHTTPServer(("127.0.0.1", a.port), make_handler(pool, a.service, a.window))
    print(f"listening on 127.0.0.1:{server.server_address[1]}", flush=True)
    try:
        server.serve_forever()
    except KeyboardInterrupt:
        pass
    finally:
        server.server_close()
        pool.close()


if __name__ == "__main__":
    main()
