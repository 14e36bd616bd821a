"""moto's S3 server on 127.0.0.1 (a real HTTP endpoint), with every request recorded and PUTs gateable.

This is `moto.server.ThreadedMotoServer` (moto/moto_server/threaded_moto_server.py, moto
5.2.5) with one WSGI layer around moto's own app: it records each request's method and path
so tests can count what a client fetched, and can hold PUT requests at a gate so a test can
interrupt an upload at a known point without timing anything.
"""

from __future__ import annotations

import threading
from dataclasses import dataclass, field
from urllib.parse import unquote

from moto.moto_server.werkzeug_app import DomainDispatcherApplication, MotoRequestHandler, create_backend_app
from werkzeug.serving import make_server


@dataclass
class Request:
    method: str
    path: str
    query: str

    @property
    def is_object(self) -> bool:
        """A request on an object (/bucket/key), not on a bucket (/bucket?list-type=2)."""
        return "/" in self.path.strip("/")


@dataclass
class S3Server:
    requests: list[Request] = field(default_factory=list)
    put_gate: threading.Event | None = None  # when set: PUTs beyond `puts_allowed` wait on it
    puts_allowed: int = 0
    puts_seen: int = 0
    puts_blocked: threading.Condition = field(default_factory=threading.Condition)
    gets_wait_for_heads: int = 0  # object GETs wait until this many object HEADs have arrived
    heads_seen: int = 0

    def start(self) -> "S3Server":
        app = DomainDispatcherApplication(create_backend_app)

        def counting(environ, start_response):
            req = Request(environ["REQUEST_METHOD"], unquote(environ.get("PATH_INFO", "")),
                          environ.get("QUERY_STRING", ""))
            if req.method == "PUT" and req.is_object and self.put_gate is not None:
                with self.puts_blocked:
                    self.puts_seen += 1
                    over = self.puts_seen > self.puts_allowed
                    self.puts_blocked.notify_all()
                if over:
                    self.put_gate.wait()
                    # Its client was killed meanwhile: S3 stores no object from a cut request.
                    start_response("503 Service Unavailable", [("Content-Length", "0")])
                    return [b""]
            if req.method == "HEAD" and req.is_object:
                with self.puts_blocked:
                    self.heads_seen += 1
                    self.puts_blocked.notify_all()
            elif req.method == "GET" and req.is_object and self.gets_wait_for_heads:
                with self.puts_blocked:
                    self.puts_blocked.wait_for(lambda: self.heads_seen >= self.gets_wait_for_heads)
            self.requests.append(req)
            return app(environ, start_response)

        self._server = make_server("127.0.0.1", 0, counting, threaded=True,
                                   request_handler=MotoRequestHandler)
        self.url = f"http://127.0.0.1:{self._server.server_address[1]}"
        self._thread = threading.Thread(target=self._server.serve_forever, daemon=True)
        self._thread.start()
        return self

    def stop(self) -> None:
        if self.put_gate is not None:
            self.put_gate.set()
        self._server.shutdown()
        self._thread.join()

    def object_gets(self, bucket: str) -> list[Request]:
        """GETs of object data in `bucket` (not listings, not HEADs)."""
        return [r for r in self.requests if r.method == "GET" and r.is_object
                and r.path.strip("/").split("/", 1)[0] == bucket]

    def object_puts(self, bucket: str) -> list[Request]:
        return [r for r in self.requests if r.method == "PUT" and r.is_object
                and r.path.strip("/").split("/", 1)[0] == bucket]

    def wait_for_puts(self, n: int) -> None:
        """Block until `n` object PUTs have arrived (the ones past the gate are held there)."""
        with self.puts_blocked:
            self.puts_blocked.wait_for(lambda: self.puts_seen >= n)

    def clear(self) -> None:
        self.requests.clear()
