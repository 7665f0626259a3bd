"""The edge emulator's small JSON endpoints on 127.0.0.1 (the outlook feed, the demo's fault buttons):
one server for both, so each endpoint module only says what a request answers."""

from __future__ import annotations

import json
import logging
import threading
from collections.abc import Callable
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

log = logging.getLogger(__name__)

Answer = Callable[[str, str, bytes], tuple[int, dict[str, Any]]]
"""(method, path with query, body) -> (status, JSON body)."""


class LocalJsonServer:
    """``answer`` served on 127.0.0.1:``port`` (0: any free port; see :attr:`url`) in a daemon thread.
    An answer that raises is a 500 with its message: no request can take the simulator down."""

    def __init__(self, answer: Answer, name: str, port: int = 0, max_body: int = 4096) -> None:
        def reply(handler: BaseHTTPRequestHandler, method: str) -> None:
            length = int(handler.headers.get("Content-Length") or 0)
            if length > max_body:
                status, body = 413, {"error": f"body over {max_body} bytes"}
            else:
                try:
                    status, body = answer(method, handler.path, handler.rfile.read(length) if length else b"")
                except Exception as exc:  # noqa: BLE001 - answer 500, never take the simulator down
                    log.exception("%s request %s failed", name, handler.path)
                    status, body = 500, {"error": str(exc)}
            out = json.dumps(body).encode()
            handler.send_response(status)
            handler.send_header("Content-Type", "application/json")
            handler.send_header("Content-Length", str(len(out)))
            handler.end_headers()
            handler.wfile.write(out)

        class Handler(BaseHTTPRequestHandler):
            def do_GET(self) -> None:  # noqa: N802 - http.server's name
                reply(self, "GET")

            def do_POST(self) -> None:  # noqa: N802 - http.server's name
                reply(self, "POST")

            def log_message(self, format: str, *args: Any) -> None:
                log.debug("%s %s", name, format % args)

        self.httpd = ThreadingHTTPServer(("127.0.0.1", port), Handler)
        self.httpd.daemon_threads = True
        self.url = f"http://127.0.0.1:{self.httpd.server_address[1]}"
        self._thread = threading.Thread(target=self.httpd.serve_forever, name=name, daemon=True)

    def start(self) -> LocalJsonServer:
        self._thread.start()
        return self

    def close(self) -> None:
        self.httpd.shutdown()
        self.httpd.server_close()
        self._thread.join(5)
