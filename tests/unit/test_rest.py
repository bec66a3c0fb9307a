"""The controller's JSON API (``controllers.shell.rest``) and its client, against a fake controller.

A real server on an ephemeral port, a ``FakeAPI`` that records calls and raises on demand:
that covers the whole HTTP mapping (routes, parameters, bodies, statuses) without os-ken or
switches. Error cases go through raw ``http.client``/sockets so the client cannot hide them.
"""

from __future__ import annotations

import dataclasses
import http.client
import inspect
import json
import logging
import socket
import threading
from collections.abc import Iterator
from typing import Any

import pytest

from controllers.fabric import FabricLogic
from controllers.shell import client as client_module
from controllers.shell.api import AppAPI
from controllers.shell.client import ControllerClient, ControllerError
from controllers.shell.rest import (
    ENDPOINTS,
    MAX_BODY_BYTES,
    MAX_JSON_DEPTH,
    ROUTES,
    ControllerAPI,
    make_server,
)
from testbed.topologies import build
from vocab.flows import Flow


class FakeAPI:
    """Answers every call with what it was called with; ``raises[name]`` makes it raise."""

    def __init__(self, converge_after: int | None = 0) -> None:
        self.calls: list[tuple[str, tuple[Any, ...]]] = []
        self.raises: dict[str, BaseException] = {}
        self.answers: dict[str, Any] = {}
        self.converge_after = converge_after  # health() calls before converged; None: never
        self.lock = threading.Lock()
        self.gates: dict[str, threading.Event] = {}  # a call answers once its gate is set

    def _call(self, name: str, *args: Any) -> Any:
        with self.lock:
            self.calls.append((name, args))
        if name in self.gates:
            self.gates[name].wait(60)
        if name in self.raises:
            raise self.raises[name]
        if name in self.answers:
            return self.answers[name]
        return {"called": name, "args": list(args)}

    def count(self, name: str) -> int:
        with self.lock:
            return sum(1 for n, _ in self.calls if n == name)

    def health(self) -> dict[str, Any]:
        self._call("health")
        n = self.count("health")
        converged = self.converge_after is not None and n > self.converge_after
        return {"status": "ok", "converged": converged, "polls": n}

    def topology(self) -> Any:
        return self._call("topology")

    def links(self) -> Any:
        return self._call("links")

    def port_stats(self, switch: str | None) -> Any:
        return self._call("port_stats", switch)

    def group_stats(self, switch: str | None) -> Any:
        return self._call("group_stats", switch)

    def flows(self, switch: str | None) -> Any:
        return self._call("flows", switch)

    def paths(self, src: str, dst: str, sport: int | None, dport: int | None,
              proto: str) -> Any:
        return self._call("paths", src, dst, sport, dport, proto)

    def check_wiring(self) -> Any:
        return self._call("check_wiring")

    def get_lb(self) -> Any:
        return self._call("get_lb")

    def set_lb(self, body: dict[str, Any]) -> Any:
        return self._call("set_lb", body)

    def post_traffic(self, body: Any) -> Any:
        return self._call("post_traffic", body)

    def get_traffic(self) -> Any:
        return self._call("get_traffic")

    def clear_traffic(self) -> Any:
        return self._call("clear_traffic")


def _serve(api_ref: dict[str, Any]) -> Iterator[Any]:
    server = make_server(api_ref, port=0)
    thread = threading.Thread(target=server.serve_forever, kwargs={"poll_interval": 0.05},
                              daemon=True)
    thread.start()
    try:
        yield server
    finally:
        server.shutdown()
        server.server_close()
        thread.join(5)


@pytest.fixture
def api() -> FakeAPI:
    return FakeAPI()


@pytest.fixture
def server(api: FakeAPI) -> Iterator[Any]:
    yield from _serve({"api": api})


@pytest.fixture
def starting_server() -> Iterator[Any]:
    """A server whose controller app does not exist yet (``api_ref`` empty)."""
    yield from _serve({})


@pytest.fixture
def client(server: Any) -> ControllerClient:
    return ControllerClient(port=server.server_address[1], timeout=5)


def raw(server: Any, method: str, path: str, body: bytes | None = None,
        headers: dict[str, str] | None = None) -> tuple[int, http.client.HTTPMessage, Any]:
    """One request through http.client: (status, headers, decoded JSON body or None)."""
    conn = http.client.HTTPConnection("127.0.0.1", server.server_address[1], timeout=5)
    try:
        conn.request(method, path, body=body, headers=headers or {})
        resp = conn.getresponse()
        data = resp.read()
        assert resp.getheader("Content-Type") == "application/json"
        if method != "HEAD":
            assert int(resp.getheader("Content-Length")) == len(data)
        return resp.status, resp.headers, json.loads(data) if data else None
    finally:
        conn.close()


def raw_headers_only(server: Any, method: str, path: str,
                     headers: dict[str, str]) -> tuple[int, Any]:
    """Send only a request head (http.client.request would add Content-Length: 0)."""
    conn = http.client.HTTPConnection("127.0.0.1", server.server_address[1], timeout=5)
    try:
        conn.putrequest(method, path)
        for name, value in headers.items():
            conn.putheader(name, value)
        conn.endheaders()
        resp = conn.getresponse()  # a server that waited for the body would time out here
        return resp.status, json.loads(resp.read())
    finally:
        conn.close()


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


# ---------------------------------------------------------------------------------------------
# Routes through the client


FLOW = Flow("s0g0", "s3g0", 49153, bytes=4096)

ROUTE_CASES = [
    (lambda c: c.health(), "health", ()),
    (lambda c: c.topology(), "topology", ()),
    (lambda c: c.links(), "links", ()),
    (lambda c: c.port_stats(), "port_stats", (None,)),
    (lambda c: c.port_stats("s0"), "port_stats", ("s0",)),
    (lambda c: c.group_stats(), "group_stats", (None,)),
    (lambda c: c.group_stats("s1"), "group_stats", ("s1",)),
    (lambda c: c.flows(), "flows", (None,)),
    (lambda c: c.flows(switch="s2"), "flows", ("s2",)),
    (lambda c: c.paths("s0g0", "s3g0"), "paths", ("s0g0", "s3g0", None, None, "udp")),
    (lambda c: c.paths("10.0.0.1", "s3g0", sport=49153, dport=4791, proto="tcp"), "paths",
     ("10.0.0.1", "s3g0", 49153, 4791, "tcp")),
    (lambda c: c.check_wiring(), "check_wiring", ()),
    (lambda c: c.lb(), "get_lb", ()),
    (lambda c: c.set_lb("planned"), "set_lb", ({"mode": "planned"},)),
    (lambda c: c.set_lb("ecmp", alpha=0.5, pinned=["a"]), "set_lb",
     ({"mode": "ecmp", "alpha": 0.5, "pinned": ["a"]},)),
    (lambda c: c.post_traffic([FLOW, {"src": "s0g1", "dst": "s1g1", "qp": 7}]), "post_traffic",
     ({"flows": [{"src": "s0g0", "dst": "s3g0", "sport": 49153, "dport": 4791,
                  "proto": "udp", "bytes": 4096},
                 {"src": "s0g1", "dst": "s1g1", "qp": 7}], "replace": True},)),
    (lambda c: c.post_traffic(iter([FLOW]), replace=False), "post_traffic",
     ({"flows": [FLOW.to_dict()], "replace": False},)),
    (lambda c: c.traffic(), "get_traffic", ()),
    (lambda c: c.clear_traffic(), "clear_traffic", ()),
]


@pytest.mark.parametrize(("call", "name", "args"), ROUTE_CASES)
def test_route_calls_api(client: ControllerClient, api: FakeAPI, call: Any, name: str,
                         args: tuple[Any, ...]) -> None:
    answer = call(client)
    assert api.calls == [(name, args)]
    if name != "health":
        assert answer == {"called": name, "args": json.loads(json.dumps(list(args)))}
    else:
        assert answer["status"] == "ok"


def test_every_api_method_has_a_route_and_a_case() -> None:
    protocol = {n for n, _ in inspect.getmembers(ControllerAPI, inspect.isfunction)
                if not n.startswith("_")}
    assert {ep.api_method for ep in ENDPOINTS} == protocol
    assert {name for _, name, _ in ROUTE_CASES} == protocol


def test_generic_methods_and_trailing_slash(server: Any, client: ControllerClient,
                                            api: FakeAPI) -> None:
    assert client.get("/ports/stats/", switch="s0")["args"] == ["s0"]
    assert client.get("flows", switch=None)["args"] == [None]
    assert client.get("/paths?src=a", dst="b")["args"] == ["a", "b", None, None, "udp"]
    assert client.put("/lb/", {"mode": "planned"})["args"] == [{"mode": "planned"}]
    assert client.post("/traffic", [])["args"] == [[]]  # a bare list is the api's business
    assert client.delete("/traffic/")["called"] == "clear_traffic"
    status, _, body = raw(server, "GET", "/health/")
    assert status == 200 and body["status"] == "ok"


def test_index_lists_endpoints(server: Any) -> None:
    status, _, body = raw(server, "GET", "/")
    assert status == 200
    listed = " ".join(body["endpoints"])
    for ep in ENDPOINTS:
        assert f"{ep.method} {ep.path}" in listed


def test_answers_convert_sets_and_objects(client: ControllerClient, api: FakeAPI) -> None:
    api.answers["links"] = {"up": {3, 1, 2}, "flow": FLOW, "pair": ("a", "b")}
    assert client.links() == {"up": [1, 2, 3], "flow": FLOW.to_dict(), "pair": ["a", "b"]}


def test_blank_query_value_means_absent(server: Any, api: FakeAPI) -> None:
    status, _, _ = raw(server, "GET", "/flows?switch=")
    assert status == 200 and api.calls == [("flows", (None,))]


# ---------------------------------------------------------------------------------------------
# Errors, raw


def test_unknown_path_404_lists_endpoints(server: Any) -> None:
    status, _, body = raw(server, "GET", "/nope")
    assert status == 404
    assert "/nope" in body["error"]
    assert "GET /health" in body["endpoints"]


@pytest.mark.parametrize(("method", "path", "allow"), [
    ("POST", "/health", "GET"),
    ("DELETE", "/lb", "GET, PUT"),
    ("PUT", "/traffic/", "DELETE, GET, POST"),
    ("PATCH", "/flows", "GET"),
    ("OPTIONS", "/", "GET"),
])
def test_wrong_method_405_with_allow(server: Any, api: FakeAPI, method: str, path: str,
                                     allow: str) -> None:
    status, headers, body = raw(server, method, path, body=b"{}")
    assert status == 405
    assert headers["Allow"] == allow
    assert method in body["error"]
    assert api.calls == []


def test_head_is_405_without_body(server: Any) -> None:
    status, headers, body = raw(server, "HEAD", "/health")
    assert status == 405 and headers["Allow"] == "GET" and body is None


@pytest.mark.parametrize(("data", "needle"), [
    (b'{"mode": ', "invalid JSON: Expecting value"),
    (b"{'mode': 1}", "invalid JSON: Expecting property name"),
    (b'\xff\xfe{"mode": 1}', "not UTF-8"),
    (b'{"mode": NaN}', "NaN"),
    (b"", "empty"),
    (b'["planned"]', "JSON object"),
])
def test_bad_body_400(server: Any, api: FakeAPI, data: bytes, needle: str) -> None:
    status, _, body = raw(server, "PUT", "/lb", body=data)
    assert status == 400
    assert needle in body["error"]
    assert api.calls == []


@pytest.mark.parametrize("data", [
    b"[" * 100_000,                                      # unterminated: the parser's limit
    b"[" * 5_000 + b"]" * 5_000,                         # well-formed, still far too deep
    b'{"flows": ' + b"[" * 40 + b"]" * 40 + b"}",        # just past MAX_JSON_DEPTH
])
@pytest.mark.parametrize("method_path", [("POST", "/traffic"), ("PUT", "/lb")])
def test_deeply_nested_body_400_not_500(server: Any, api: FakeAPI, client: ControllerClient,
                                        data: bytes, method_path: tuple[str, str]) -> None:
    """A RecursionError in the parser used to surface as a 500 "internal error"."""
    status, _, body = raw(server, *method_path, body=data)
    assert status == 400
    assert body["error"] == f"invalid JSON: nested more than {MAX_JSON_DEPTH} levels deep"
    assert api.calls == []
    assert client.health()["status"] == "ok"  # and the server keeps serving


def test_nesting_up_to_the_limit_is_accepted(server: Any, api: FakeAPI) -> None:
    data = b"[" * MAX_JSON_DEPTH + b"]" * MAX_JSON_DEPTH
    status, _, body = raw(server, "POST", "/traffic", body=data)
    assert status == 200 and api.calls[0][0] == "post_traffic"


@pytest.mark.parametrize(("query", "param"), [
    ("src=a&dst=b&sport=x", "sport"),
    ("src=a&dst=b&dport=70000", "dport"),
    ("src=a&dst=b&sport=1_0", "sport"),
    ("src=a&dst=b&sport=-5", "sport"),
    ("dst=b", "src"),
    ("src=a", "dst"),
    ("src=a&dst=b&prot=udp", "prot"),
    ("src=a&src=b&dst=c", "src"),
])
def test_bad_query_400_names_parameter(server: Any, api: FakeAPI, query: str,
                                       param: str) -> None:
    status, _, body = raw(server, "GET", "/paths?" + query)
    assert status == 400
    assert repr(param) in body["error"]
    assert api.calls == []


def test_parameter_on_endpoint_without_parameters_400(server: Any) -> None:
    status, _, body = raw(server, "GET", "/links?switch=s0")
    assert status == 400 and "'switch'" in body["error"]


@pytest.mark.parametrize(("exc", "status", "message"), [
    (ValueError("flows[3].sport must be an integer"), 400, "flows[3].sport must be an integer"),
    (KeyError("no switch s9"), 404, "no switch s9"),
    (LookupError("no host x"), 404, "no host x"),
    (TimeoutError("s3 did not answer within 2s"), 504, "s3 did not answer within 2s"),
])
def test_api_exceptions_map_to_status(server: Any, api: FakeAPI, exc: BaseException,
                                      status: int, message: str) -> None:
    api.raises["port_stats"] = exc
    got, _, body = raw(server, "GET", "/ports/stats?switch=s9")
    assert (got, body) == (status, {"error": message})


def test_api_bug_500_without_traceback(server: Any, api: FakeAPI,
                                       caplog: pytest.LogCaptureFixture) -> None:
    api.raises["get_traffic"] = RuntimeError("boom")
    with caplog.at_level(logging.ERROR, logger="astral.rest"):
        status, _, body = raw(server, "GET", "/traffic")
    assert status == 500
    assert body == {"error": "internal error: RuntimeError: boom"}
    assert "Traceback" not in json.dumps(body)
    logged = [r for r in caplog.records if r.name == "astral.rest" and r.exc_info]
    assert logged and logged[0].levelno == logging.ERROR


def test_unencodable_answer_500(server: Any, api: FakeAPI) -> None:
    api.answers["links"] = {"load": float("nan")}
    status, _, body = raw(server, "GET", "/links")
    assert status == 500 and body["error"].startswith("internal error")


def test_rest_layer_bug_still_answers_500(server: Any, api: FakeAPI,
                                          monkeypatch: pytest.MonkeyPatch) -> None:
    def broken(*_args: Any) -> Any:
        raise AttributeError("oops")

    # an endpoint whose argument parsing has a bug, put in the public route table
    links = ROUTES["/links"]["GET"]
    monkeypatch.setitem(ROUTES["/links"], "GET", dataclasses.replace(links, args=broken))
    status, _, body = raw(server, "GET", "/links")
    assert status == 500 and body == {"error": "internal error: AttributeError: oops"}
    monkeypatch.undo()
    assert raw(server, "GET", "/links")[0] == 200


@pytest.mark.parametrize("method_path", [("PUT", "/lb"), ("POST", "/traffic")])
def test_missing_content_length_411(server: Any, api: FakeAPI,
                                    method_path: tuple[str, str]) -> None:
    status, body = raw_headers_only(server, *method_path, {})
    assert status == 411 and "Content-Length" in body["error"]
    assert api.calls == []


def test_chunked_body_411(server: Any) -> None:
    status, body = raw_headers_only(server, "POST", "/traffic",
                                    {"Transfer-Encoding": "chunked"})
    assert status == 411


def test_oversized_body_413_unread(server: Any, api: FakeAPI) -> None:
    # No body follows the head: a server that tried to read it would never answer in time.
    status, body = raw_headers_only(server, "POST", "/traffic",
                                    {"Content-Length": str(MAX_BODY_BYTES + 1)})
    assert status == 413 and str(MAX_BODY_BYTES) in body["error"]
    assert api.calls == []


def test_invalid_content_length_400(server: Any) -> None:
    status, body = raw_headers_only(server, "PUT", "/lb", {"Content-Length": "ten"})
    assert status == 400 and "Content-Length" in body["error"]


def test_starting_503_then_ready(starting_server: Any) -> None:
    status, _, body = raw(starting_server, "GET", "/health")
    assert (status, body) == (503, {"status": "starting", "converged": False})
    for method, path, data in [("GET", "/topology", None), ("GET", "/flows?switch=s0", None),
                               ("PUT", "/lb", b'{"mode": "planned"}'),
                               ("DELETE", "/traffic", None)]:
        status, _, body = raw(starting_server, method, path, body=data)
        assert (status, body) == (503, {"error": "controller starting", "status": "starting"})
    assert raw(starting_server, "GET", "/")[0] == 200  # the index needs no controller

    starting_server.api_ref["api"] = FakeAPI()
    assert raw(starting_server, "GET", "/health")[0] == 200
    assert raw(starting_server, "GET", "/topology")[2] == {"called": "topology", "args": []}


def test_starting_still_rejects_bad_requests_first(starting_server: Any) -> None:
    assert raw(starting_server, "GET", "/paths?src=a")[0] == 400
    assert raw(starting_server, "GET", "/nope")[0] == 404


def test_garbage_does_not_kill_the_server(server: Any, client: ControllerClient) -> None:
    port = server.server_address[1]
    garbage = [
        b"\x16\x03\x01\x02\x00\x01\x00\x01\xfc\x03\x03garbage\r\n\r\n",  # a TLS hello
        b"GET /health HTTP/9.9\r\n\r\n",
        b"GET /health HTTP/1.1\r\nX-Long: " + b"a" * 70000 + b"\r\n\r\n",
        b"PUT /lb HTTP/1.1\r\nContent-Length: 50\r\n\r\n{\"mo",  # body cut short
        b"",  # connect and hang up
    ]
    for data in garbage:
        with socket.create_connection(("127.0.0.1", port), timeout=5) as s:
            if data:
                s.sendall(data)
            s.shutdown(socket.SHUT_WR)
            answer = b""
            while chunk := s.recv(65536):
                answer += chunk
        if data:
            head, _, body = answer.partition(b"\r\n\r\n")
            assert head.startswith(b"HTTP/1.0 4") or head.startswith(b"HTTP/1.0 5"), answer
            assert "error" in json.loads(body)
    assert client.health()["status"] == "ok"


def test_requests_logged_at_debug_only(client: ControllerClient,
                                       caplog: pytest.LogCaptureFixture) -> None:
    with caplog.at_level(logging.DEBUG, logger="astral.rest"):
        client.health()
    records = [r for r in caplog.records if r.name == "astral.rest"]
    assert any("/health" in r.getMessage() for r in records)
    assert all(r.levelno == logging.DEBUG for r in records)


# ---------------------------------------------------------------------------------------------
# Client errors and wait_converged


def test_client_error_carries_status_message_body(client: ControllerClient,
                                                  api: FakeAPI) -> None:
    api.raises["paths"] = ValueError("no host zz in the plan")
    with pytest.raises(ControllerError) as info:
        client.paths("zz", "s0g0")
    err = info.value
    assert err.status == 400
    assert err.message == "no host zz in the plan"
    assert err.body == {"error": "no host zz in the plan"}
    assert "GET /paths" in str(err) and "400" in str(err)


def test_client_503_while_starting(starting_server: Any) -> None:
    c = ControllerClient(port=starting_server.server_address[1], timeout=5)
    with pytest.raises(ControllerError) as info:
        c.health()
    assert info.value.status == 503
    assert info.value.body == {"status": "starting", "converged": False}


def test_client_closed_port() -> None:
    port = free_port()
    with pytest.raises(ControllerError) as info:
        ControllerClient(port=port, timeout=5).health()
    assert info.value.status is None and info.value.body is None
    assert f"127.0.0.1:{port}" in info.value.message
    assert "not running" in info.value.message


def test_client_refuses_oversized_body(client: ControllerClient, api: FakeAPI,
                                       monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(client_module, "MAX_BODY_BYTES", 64)
    with pytest.raises(ControllerError) as info:
        client.post_traffic([FLOW, FLOW])
    assert info.value.status == 413
    assert api.calls == []


def test_a_change_may_take_longer_than_a_read(server: Any, api: FakeAPI) -> None:
    """The controller answers a change (POST /traffic) only once it has planned and pushed
    the job's tables, which took longer than a read's timeout in an emulated VM: the change
    waits for its answer, a read still gives up at its own timeout and says after how long."""
    c = ControllerClient(port=server.server_address[1], timeout=0.2, change_timeout=60)
    gate = threading.Event()
    api.gates.update(get_traffic=gate, post_traffic=gate)
    try:
        with pytest.raises(ControllerError) as info:
            c.traffic()
        assert info.value.status is None
        assert "GET /traffic: no answer from the controller" in str(info.value)
        assert "within 0.2 s" in str(info.value)
        opened = threading.Timer(0.6, gate.set)  # three read timeouts after the POST
        opened.start()
        assert c.post_traffic([FLOW])["called"] == "post_traffic"
        assert gate.is_set()  # answered only after the gate opened
    finally:
        gate.set()


def test_client_rejects_non_flows(client: ControllerClient) -> None:
    with pytest.raises(TypeError, match=r"flows\[1\]"):
        client.post_traffic([FLOW, 42])  # type: ignore[list-item]


def test_wait_converged_polls_until_converged(client: ControllerClient, api: FakeAPI) -> None:
    api.converge_after = 3
    health = client.wait_converged(timeout=30, interval=0.01)
    assert health["converged"] is True
    assert api.count("health") == 4


def test_wait_converged_waits_through_starting(starting_server: Any) -> None:
    c = ControllerClient(port=starting_server.server_address[1], timeout=5)
    api = FakeAPI(converge_after=1)
    timer = threading.Timer(0.2, starting_server.api_ref.__setitem__, ("api", api))
    timer.start()
    try:
        assert c.wait_converged(timeout=30, interval=0.02)["converged"] is True
    finally:
        timer.cancel()
    assert api.count("health") == 2


def test_wait_converged_timeout_reports_last_health(client: ControllerClient,
                                                    api: FakeAPI) -> None:
    api.converge_after = None
    with pytest.raises(TimeoutError) as info:
        client.wait_converged(timeout=0.3, interval=0.05)
    assert "not converged" in str(info.value)
    assert info.value.health["converged"] is False  # type: ignore[attr-defined]
    assert '"converged": false' in str(info.value)
    assert api.count("health") >= 1


def test_wait_converged_timeout_when_not_running() -> None:
    c = ControllerClient(port=free_port(), timeout=5)
    with pytest.raises(TimeoutError) as info:
        c.wait_converged(timeout=0.2, interval=0.05)
    assert "not running" in str(info.value)
    assert info.value.error.status is None  # type: ignore[attr-defined]


def test_wait_converged_raises_other_errors_at_once(client: ControllerClient,
                                                    api: FakeAPI) -> None:
    api.raises["health"] = RuntimeError("health broke")
    with pytest.raises(ControllerError) as info:
        client.wait_converged(timeout=30, interval=0.01)
    assert info.value.status == 500
    assert api.count("health") == 1


# ---------------------------------------------------------------------------------------------
# The real API's validation (controllers.shell.api over controllers.fabric), through HTTP


class LogicApp:
    """What ``AppAPI`` uses of the os-ken app for ``/lb`` and ``/traffic``, over the real
    ``FabricLogic`` (the decisions; no switches): so a body's field types are checked by
    the code the controller runs."""

    def __init__(self) -> None:
        self.plan = build("astral3", servers=4, gpus=2)
        self.logic = FabricLogic(self.plan)
        self.lock = threading.RLock()
        self.poll_interval = 1.0
        self.flow_samples: dict[Any, Any] = {}

    def set_lb(self, mode: str, **params: Any) -> None:
        with self.lock:
            self.logic.set_mode(mode, **params)

    def set_traffic(self, flows: list[Flow], replace: bool = True) -> None:
        with self.lock:
            self.logic.set_flows(flows, replace=replace)


@pytest.fixture
def real_server() -> Iterator[Any]:
    yield from _serve({"api": AppAPI(LogicApp())})


@pytest.mark.parametrize(("options", "needle"), [
    ({"hold": 1.5}, "hold must be an integer (got 1.5)"),
    ({"hold": "3"}, "hold must be an integer (got '3')"),
    ({"hold": True}, "hold must be an integer (got True)"),
    ({"hold": 3.0}, "hold must be an integer (got 3.0)"),
    ({"hold": None}, "hold must be an integer (got None)"),
    ({"hold": -1}, "hold must be an integer >= 0"),
    ({"threshold": True}, "threshold must be a number (got True)"),
    ({"threshold": "0.7"}, "threshold must be a number"),
    ({"hysteresis": [0.1]}, "hysteresis must be a number"),
    ({"threshold": 2}, "threshold must be in (0, 1]"),
])
def test_put_lb_refuses_mistyped_options_and_changes_nothing(real_server: Any,
                                                             options: dict[str, Any],
                                                             needle: str) -> None:
    body = json.dumps({"mode": "adaptive", **options}).encode()
    status, _, answer = raw(real_server, "PUT", "/lb", body=body)
    assert status == 400 and needle in answer["error"], answer
    status, _, lb = raw(real_server, "GET", "/lb")
    assert lb["mode"] == "ecmp" and lb["adaptive"] == {"threshold": 0.8, "hysteresis": 0.1,
                                                       "hold": 3}


def test_put_lb_takes_well_typed_options(real_server: Any) -> None:
    body = b'{"mode": "adaptive", "hold": 5, "threshold": 1, "hysteresis": 0.25}'
    status, _, lb = raw(real_server, "PUT", "/lb", body=body)
    assert status == 200, lb
    assert lb["mode"] == "adaptive"
    assert lb["adaptive"] == {"threshold": 1, "hysteresis": 0.25, "hold": 5}


@pytest.mark.parametrize("field", ["sport", "dport", "qp", "bytes"])
@pytest.mark.parametrize("value", [1.5, "49153", True, None, [1], 2.0])
def test_post_traffic_refuses_non_integer_fields(real_server: Any, field: str,
                                                 value: Any) -> None:
    flow = {"src": "s0g0", "dst": "s3g1", "sport": 49153, "dport": 4791, "bytes": 1024,
            field: value}
    body = json.dumps({"flows": [flow]}).encode()
    status, _, answer = raw(real_server, "POST", "/traffic", body=body)
    assert status == 400, answer
    assert f"flows[0].{field} must be an integer" in answer["error"]
    assert raw(real_server, "GET", "/traffic")[2]["flows"] == []


@pytest.mark.parametrize("value", [1, "true", None])
def test_post_traffic_replace_must_be_a_bool(real_server: Any, value: Any) -> None:
    body = json.dumps({"flows": [], "replace": value}).encode()
    status, _, answer = raw(real_server, "POST", "/traffic", body=body)
    assert status == 400 and "replace must be true or false" in answer["error"]


def test_post_traffic_well_typed_flow_is_taken(real_server: Any) -> None:
    body = b'{"flows": [{"src": "s0g0", "dst": "s3g1", "qp": 7, "bytes": 1024}]}'
    status, _, answer = raw(real_server, "POST", "/traffic", body=body)
    assert status == 200 and answer["flows"][0]["sport"] == 49152 + 7
