"""The controller's JSON API over HTTP, kept apart from os-ken so it can be tested without switches.

This module only maps HTTP to the methods of a ``ControllerAPI`` object (the os-ken app, or a
fake in the unit tests): it parses paths, query parameters and JSON bodies, and turns the API's
exceptions into statuses. It knows nothing of OpenFlow. The server is the standard library's
``ThreadingHTTPServer`` because os-ken 4.x ships no WSGI layer and the lab needs nothing more.

The contract, for clients (``controllers.shell.client``) and for a curious ``curl``:

* every answer is JSON with a ``Content-Length``; errors are ``{"error": message}`` with the right
  status and never a stack trace (the traceback goes to the ``astral.rest`` logger instead);
* until ``api_ref["api"]`` is set, every endpoint answers 503 (``GET /health`` with
  ``{"status": "starting", "converged": false}``), so the lab can poll from the first moment;
* ``ValueError`` from the API is 400, ``LookupError`` 404, ``TimeoutError`` 504, anything else 500;
* requests are logged at DEBUG only, because the lab polls ``/health`` many times a second.
"""

from __future__ import annotations

import dataclasses
import json
import logging
import re
from collections.abc import Callable
from dataclasses import dataclass
from http import HTTPStatus
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any, Protocol
from urllib.parse import parse_qsl

LOG = logging.getLogger("astral.rest")
#: the JSON API's port when nothing says otherwise (the controller's and its clients')
DEFAULT_REST_PORT = 8080

#: Largest request body read. A 130K-flow ``POST /traffic`` (256-GPU all-to-all, 2 QPs per pair)
#: is about 12 MiB of compact JSON (the client sends it compact); much larger is a mistake.
MAX_BODY_BYTES = 64 * 1024 * 1024  # a 256-GPU all-to-all with 2 QPs per pair is ~12 MiB
#: Seconds a connection may stall (reading the request or writing the answer) before it is dropped,
#: so a half-open client cannot pin a thread forever.
REQUEST_TIMEOUT = 30.0
#: Range accepted for the integer port parameters of ``/paths``.
PORT_RANGE = (1, 65535)
#: Deepest nesting accepted in a JSON body. The API's bodies are three levels deep at most
#: (``{"flows": [{...}]}``); a body nested far deeper is a mistake or an attack, and left to
#: the parser it ends in a RecursionError (a 500) or in code that walks it recursively.
MAX_JSON_DEPTH = 32


class ControllerAPI(Protocol):
    """What the REST layer needs from the controller; the os-ken app implements it.

    Methods are called from the HTTP server's threads, so implementations must lock their
    state. They signal bad input with ``ValueError`` (answered 400), unknown names with
    ``LookupError``/``KeyError`` (404) and switches that did not answer in time with
    ``TimeoutError`` (504). Return values must be JSON-serialisable (sets and objects with
    ``to_dict()`` are converted; NaN and infinities are refused).
    """

    def health(self) -> dict[str, Any]:
        """Liveness and convergence: must contain ``"converged": bool``."""
        ...

    def topology(self) -> dict[str, Any]:
        """The wiring plan the controller runs (``WiringPlan.to_dict()``)."""
        ...

    def links(self) -> list[Any] | dict[str, Any]:
        """Fabric links and their state/load."""
        ...

    def port_stats(self, switch: str | None) -> dict[str, Any]:
        """Port counters of one switch (by name), or of all when ``switch`` is None."""
        ...

    def group_stats(self, switch: str | None) -> dict[str, Any]:
        """Select-group bucket counters of one switch, or of all when ``switch`` is None."""
        ...

    def flows(self, switch: str | None) -> dict[str, Any]:
        """Flow-table entries of one switch, or of all when ``switch`` is None."""
        ...

    def check_wiring(self) -> dict[str, Any]:
        """Probe every switch link end now: ``{"check", "settle_s", "probes": [{"from":
        [switch, port], "sent": bool, "seen": [[switch, port], ...]}]}``."""
        ...

    def paths(self, src: str, dst: str, sport: int | None, dport: int | None,
              proto: str) -> dict[str, Any]:
        """The path(s) from host ``src`` to ``dst``; ports and protocol narrow it to one flow."""
        ...

    def get_lb(self) -> dict[str, Any]:
        """The load-balancing mode and its options."""
        ...

    def set_lb(self, body: dict[str, Any]) -> dict[str, Any]:
        """Change the load-balancing mode, e.g. ``{"mode": "planned"}``; returns the new state."""
        ...

    def post_traffic(self, body: Any) -> dict[str, Any]:
        """Announce the job's flows (see ``vocab.flows.parse_flows`` for the body)."""
        ...

    def get_traffic(self) -> dict[str, Any]:
        """The flows the controller currently knows."""
        ...

    def clear_traffic(self) -> dict[str, Any]:
        """Forget all announced flows."""
        ...


class RequestError(Exception):
    """A request the REST layer refuses before reaching the API (answered with ``status``)."""

    def __init__(self, status: int, message: str, **extra: Any) -> None:
        super().__init__(message)
        self.status = status
        self.message = message
        self.extra = extra


def json_default(obj: Any) -> Any:
    """``json.dumps`` fallback: sets become (sorted when possible) lists, objects their dict.

    The controller's state is full of sets and small dataclasses; converting them here spares
    every API method a hand-written conversion.
    """
    if isinstance(obj, (set, frozenset)):
        try:
            return sorted(obj)
        except TypeError:
            return list(obj)
    if isinstance(obj, tuple):  # only reached for tuple subclasses json does not know
        return list(obj)
    to_dict = getattr(obj, "to_dict", None)
    if callable(to_dict):
        return to_dict()
    if dataclasses.is_dataclass(obj) and not isinstance(obj, type):
        return dataclasses.asdict(obj)
    raise TypeError(f"Object of type {type(obj).__name__} is not JSON serializable")


def dump_json(body: Any) -> bytes:
    """Strict JSON encoding shared by server and client: no NaN/Infinity, which JSON lacks."""
    return json.dumps(body, allow_nan=False, default=json_default,
                      separators=(",", ":")).encode()


def _reject_constant(name: str) -> Any:
    raise ValueError(f"{name} is not valid JSON")


def json_depth_exceeds(value: Any, limit: int) -> bool:
    """True when ``value`` nests lists/objects more than ``limit`` levels deep.

    Level by level rather than recursively, so any depth the parser returned can be
    checked; only containers are carried to the next level, which keeps a 100K-flow
    ``POST /traffic`` body cheap (three levels).
    """
    level, depth = [value], 1
    while level:
        if depth > limit:
            return True
        below: list[Any] = []
        for item in level:
            below += [c for c in (item.values() if isinstance(item, dict) else item)
                      if isinstance(c, (dict, list))]
        level, depth = below, depth + 1
    return False


def parse_json(data: bytes) -> Any:
    """Decode a UTF-8 JSON body; ``ValueError`` with the parser's message when it is not, or
    when it nests deeper than ``MAX_JSON_DEPTH``."""
    try:
        text = data.decode("utf-8")
    except UnicodeDecodeError as exc:
        raise ValueError(f"body is not UTF-8: {exc}") from None
    if not text.strip():
        raise ValueError("body is empty; expected JSON")
    too_deep = f"invalid JSON: nested more than {MAX_JSON_DEPTH} levels deep"
    try:
        value = json.loads(text, parse_constant=_reject_constant)
    except RecursionError:  # the C parser's own depth limit (~ the interpreter's)
        raise ValueError(too_deep) from None
    except ValueError as exc:  # json.JSONDecodeError, or NaN/Infinity from parse_constant
        raise ValueError(f"invalid JSON: {exc}") from None
    if isinstance(value, (dict, list)) and json_depth_exceeds(value, MAX_JSON_DEPTH):
        raise ValueError(too_deep)
    return value


# ---------------------------------------------------------------------------------------------
# Routes

Query = dict[str, str]


def _no_args(_q: Query, _body: Any) -> tuple[Any, ...]:
    return ()


def _switch_arg(q: Query, _body: Any) -> tuple[Any, ...]:
    return (q.get("switch"),)


def _body_arg(_q: Query, body: Any) -> tuple[Any, ...]:
    return (body,)


_INT_RE = re.compile(r"[0-9]{1,10}")  # ASCII digits only: int() would take "٣" and "1_0"
_LENGTH_RE = re.compile(r"[0-9]{1,20}")


def _int_param(query: Query, name: str) -> int | None:
    value = query.get(name)
    if value is None:
        return None
    lo, hi = PORT_RANGE
    if not _INT_RE.fullmatch(value) or not lo <= int(value) <= hi:
        raise RequestError(400, f"parameter {name!r} must be an integer in [{lo}, {hi}] "
                                f"(got {value!r})")
    return int(value)


def _required(query: Query, name: str) -> str:
    value = query.get(name)
    if value is None:
        raise RequestError(400, f"parameter {name!r} is required")
    return value


def _paths_args(q: Query, _body: Any) -> tuple[Any, ...]:
    return (_required(q, "src"), _required(q, "dst"), _int_param(q, "sport"),
            _int_param(q, "dport"), q.get("proto", "udp"))


@dataclass(frozen=True)
class Endpoint:
    """One method on one path, and the ``ControllerAPI`` method it calls.

    ``args`` turns the query and body into the call's arguments and raises ``RequestError``
    for bad ones, so a malformed request is refused (400) before the API is even looked up.
    """

    method: str
    path: str
    api_method: str
    args: Callable[[Query, Any], tuple[Any, ...]] = _no_args
    params: tuple[str, ...] = ()
    body: str | None = None  # None: ignored; "object": a JSON object; "any": any JSON value
    usage: str = ""

    @property
    def describe(self) -> str:
        return f"{self.method} {self.path}{self.usage}"


_SWITCH: dict[str, Any] = {"args": _switch_arg, "params": ("switch",), "usage": "[?switch=NAME]"}

ENDPOINTS: tuple[Endpoint, ...] = (
    Endpoint("GET", "/health", "health"),
    Endpoint("GET", "/topology", "topology"),
    Endpoint("GET", "/links", "links"),
    Endpoint("GET", "/ports/stats", "port_stats", **_SWITCH),
    Endpoint("GET", "/groups/stats", "group_stats", **_SWITCH),
    Endpoint("GET", "/flows", "flows", **_SWITCH),
    Endpoint("GET", "/paths", "paths", _paths_args,
             params=("src", "dst", "sport", "dport", "proto"),
             usage="?src=HOST&dst=HOST[&sport=N&dport=N&proto=udp]"),
    Endpoint("POST", "/wiring/check", "check_wiring"),
    Endpoint("GET", "/lb", "get_lb"),
    Endpoint("PUT", "/lb", "set_lb", _body_arg, body="object", usage=' {"mode": ...}'),
    Endpoint("POST", "/traffic", "post_traffic", _body_arg, body="any",
             usage=' {"flows": [...], "replace": true}'),
    Endpoint("GET", "/traffic", "get_traffic"),
    Endpoint("DELETE", "/traffic", "clear_traffic"),
)
#: ``GET /`` lists the endpoints and is answered without the API, even while starting.
INDEX = Endpoint("GET", "/", "")

ROUTES: dict[str, dict[str, Endpoint]] = {"/": {"GET": INDEX}}
for _ep in ENDPOINTS:
    ROUTES.setdefault(_ep.path, {})[_ep.method] = _ep


def endpoint_list() -> list[str]:
    """Human-readable endpoint lines, for ``GET /`` and for 404 answers."""
    return ["GET /", *(ep.describe for ep in ENDPOINTS)]


def _parse_query(query: str, ep: Endpoint) -> Query:
    """Query string to a dict; unknown, repeated or (silently) blank parameters are handled
    here so a typo like ``?swich=s0`` is a 400 instead of a quietly unfiltered answer."""
    out: Query = {}
    for name, value in parse_qsl(query, keep_blank_values=True):
        if name not in ep.params:
            allowed = ", ".join(ep.params) if ep.params else "none"
            raise RequestError(400, f"unknown parameter {name!r} for {ep.path} "
                                    f"(accepted: {allowed})")
        if name in out:
            raise RequestError(400, f"parameter {name!r} given more than once")
        if value != "":  # blank means absent (``?switch=`` is all switches)
            out[name] = value
    return out


def _error_message(exc: BaseException) -> str:
    """The exception's message without ``KeyError``'s repr quotes; the type name if empty."""
    keyerror = isinstance(exc, KeyError) and len(exc.args) == 1
    msg = str(exc.args[0]) if keyerror else str(exc)
    return msg or type(exc).__name__


# ---------------------------------------------------------------------------------------------
# Server

class RestServer(ThreadingHTTPServer):
    """``ThreadingHTTPServer`` that carries ``api_ref`` and logs handler crashes instead of
    printing them to stderr (the controller's stderr is its log file)."""

    daemon_threads = True

    def __init__(self, address: tuple[str, int], api_ref: dict[str, Any]) -> None:
        self.api_ref = api_ref
        super().__init__(address, RestHandler)

    def handle_error(self, request: Any, client_address: Any) -> None:
        # Reached only for errors outside a request's own handling (dropped connections mostly).
        LOG.debug("connection from %s failed", client_address, exc_info=True)


class RestHandler(BaseHTTPRequestHandler):
    """Maps one HTTP request to one ``ControllerAPI`` call (see module docstring)."""

    server: RestServer
    server_version = "astral-lab"
    sys_version = ""
    timeout = REQUEST_TIMEOUT
    # Headers and body go out in separate writes; without TCP_NODELAY the body can wait for
    # the client's delayed ACK (~40 ms), which adds up when the lab polls /health.
    disable_nagle_algorithm = True

    def log_message(self, format: str, *args: Any) -> None:
        LOG.debug("%s " + format, self.client_address[0], *args)

    # -- answers ---------------------------------------------------------------------------

    def _send(self, status: int, body: Any, headers: dict[str, str] | None = None) -> None:
        try:
            data = dump_json(body)
        except (TypeError, ValueError) as exc:
            LOG.exception("%s: answer is not JSON-serialisable", self.requestline)
            status, data = 500, dump_json({"error": f"internal error: cannot encode answer: "
                                                    f"{type(exc).__name__}: {exc}"})
        try:
            self.send_response(status)
            for name, value in (headers or {}).items():
                self.send_header(name, value)
            self.send_header("Content-Type", "application/json")
            self.send_header("Content-Length", str(len(data)))
            if self.close_connection:
                self.send_header("Connection", "close")
            self.end_headers()
            if self.command != "HEAD":
                self.wfile.write(data)
            self.wfile.flush()
        except OSError:  # client went away (or stalled past the timeout): nothing to tell it
            LOG.debug("%s: could not send the answer", self.requestline, exc_info=True)
            self.close_connection = True

    def send_error(self, code: int, message: str | None = None,
                   explain: str | None = None) -> None:
        """http.server's own errors (bad request line, oversized headers...) as JSON too."""
        self.close_connection = True
        # An unparsable request line leaves the version at "HTTP/0.9", which would make
        # http.server send a bare body with no status line; garbage deserves a real status.
        if getattr(self, "request_version", "HTTP/0.9") == "HTTP/0.9":
            self.request_version = "HTTP/1.0"
        if message is None:
            try:
                message = HTTPStatus(code).phrase
            except ValueError:
                message = "error"
        self.log_error("code %d, message %s", code, message)
        self._send(code, {"error": message})

    # -- request handling ------------------------------------------------------------------

    def _read_body(self) -> bytes | None:
        """The raw body per Content-Length (None when absent). Oversized bodies are refused
        unread; everything else is read before any routing decision so the connection is
        never closed with unread data (which would reset it and lose our answer)."""
        if self.headers.get("Transfer-Encoding"):
            self.close_connection = True
            raise RequestError(411, "chunked bodies are not supported; send Content-Length")
        raw = self.headers.get("Content-Length")
        if raw is None:
            return None
        if not _LENGTH_RE.fullmatch(raw.strip()):
            self.close_connection = True
            raise RequestError(400, f"invalid Content-Length {raw!r}")
        length = int(raw)
        if length > MAX_BODY_BYTES:
            self.close_connection = True
            raise RequestError(413, f"body of {length} bytes exceeds the limit of "
                                    f"{MAX_BODY_BYTES} bytes")
        try:
            data = self.rfile.read(length)
        except OSError as exc:  # includes the socket timeout
            self.close_connection = True
            raise RequestError(408, f"could not read the body: {exc}") from None
        if len(data) < length:
            self.close_connection = True
            raise RequestError(400, f"body ended after {len(data)} of {length} bytes")
        return data

    def _route(self, path: str) -> Endpoint:
        methods = ROUTES.get(path)
        if methods is None:
            raise RequestError(404, f"no such endpoint {path}", endpoints=endpoint_list())
        ep = methods.get(self.command)
        if ep is None:
            allow = ", ".join(sorted(methods))
            raise RequestError(405, f"{self.command} not allowed on {path} (allowed: {allow})",
                               headers={"Allow": allow})
        return ep

    def _handle(self) -> None:
        try:
            self._handle_request()
        except Exception as exc:  # a bug of this module: still answer, and keep serving
            LOG.exception("%s: REST layer failed", self.requestline)
            self.close_connection = True
            self._send(500, {"error": f"internal error: {type(exc).__name__}: {exc}"})

    def _handle_request(self) -> None:
        target, _, query = self.path.partition("?")
        path = target.rstrip("/") or "/"
        try:
            data = self._read_body()
            ep = self._route(path)
            q = _parse_query(query, ep)
            body: Any = None
            if ep.body is not None:
                if data is None:
                    raise RequestError(411, f"{ep.method} {ep.path} needs a JSON body "
                                            "with Content-Length")
                try:
                    body = parse_json(data)
                except ValueError as exc:
                    raise RequestError(400, str(exc)) from None
                if ep.body == "object" and not isinstance(body, dict):
                    raise RequestError(400, f"{ep.method} {ep.path} body must be a JSON object")
            args = ep.args(q, body)
        except RequestError as err:
            headers = err.extra.pop("headers", None)
            self._send(err.status, {"error": err.message, **err.extra}, headers)
            return

        if ep is INDEX:
            self._send(200, {"service": "astral-lab controller", "endpoints": endpoint_list()})
            return
        api = self.server.api_ref.get("api")
        if api is None:
            if path == "/health":
                self._send(503, {"status": "starting", "converged": False})
            else:
                self._send(503, {"error": "controller starting", "status": "starting"})
            return
        self._call(api, ep.api_method, args)

    def _call(self, api: ControllerAPI, name: str, args: tuple[Any, ...]) -> None:
        try:
            result = getattr(api, name)(*args)
        except TimeoutError as exc:  # a switch that did not answer: not a bug, so not a 500
            self._send(504, {"error": _error_message(exc)})
        except ValueError as exc:
            self._send(400, {"error": _error_message(exc)})
        except LookupError as exc:
            self._send(404, {"error": _error_message(exc)})
        except Exception as exc:  # a bug in the api must not kill the server or leak a trace
            LOG.exception("%s failed", self.requestline)
            self._send(500, {"error": f"internal error: {type(exc).__name__}: {exc}"})
        else:
            self._send(200, result)

    # http.server dispatches on ``do_<METHOD>``. Methods no endpoint takes are routed too, so
    # they get a JSON 405 with Allow rather than http.server's HTML 501.
    do_GET = do_PUT = do_POST = do_DELETE = do_HEAD = do_PATCH = do_OPTIONS = _handle


def make_server(api_ref: dict[str, Any], host: str = "127.0.0.1",
                port: int = DEFAULT_REST_PORT) -> ThreadingHTTPServer:
    """Bind the JSON API (``port=0`` picks a free port; see ``server.server_address``).

    ``api_ref`` is read on every request, so the server can start before the os-ken app
    exists and answer 503 until the caller sets ``api_ref["api"]``. The caller runs
    ``serve_forever`` in a thread of its choice and calls ``shutdown``/``server_close``.
    """
    return RestServer((host, port), api_ref)
