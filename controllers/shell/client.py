"""Python client of the controller's JSON API (``controllers.shell.rest``), on the standard library.

The lab, the traffic orchestration and the ops agent all talk to the controller through this
class, so every failure arrives as one exception type, ``ControllerError``, carrying the HTTP
status (None when there was no answer at all) and the controller's own ``{"error": ...}``
message, instead of urllib's mix of ``HTTPError``/``URLError``/socket errors::

    c = ControllerClient(port=8080)
    c.wait_converged(timeout=30)
    c.post_traffic(flows)                     # list of vocab.flows.Flow or dicts
    c.paths("s0g0", "s3g0", sport=49153)
"""

from __future__ import annotations

import http.client
import json
import time
import urllib.error
import urllib.parse
import urllib.request
from collections.abc import Iterable, Mapping
from typing import Any

from controllers.shell.rest import DEFAULT_REST_PORT, MAX_BODY_BYTES, dump_json
from vocab.flows import Flow

DEFAULT_HOST = "127.0.0.1"


class ControllerError(Exception):
    """The controller refused a request (``status`` set) or could not be reached (``None``).

    ``message`` is the controller's ``error`` field when it sent one, ``body`` the decoded
    JSON answer (or the raw text when it was not JSON, None when there was no answer).
    """

    def __init__(self, message: str, status: int | None = None, body: Any = None,
                 request: str = "") -> None:
        super().__init__(message)
        self.message = message
        self.status = status
        self.body = body
        self.request = request  # "GET /paths", for the message

    def __str__(self) -> str:
        where = f"{self.request}: " if self.request else ""
        code = f"HTTP {self.status}: " if self.status is not None else ""
        return f"{where}{code}{self.message}"


class NotConvergedError(TimeoutError):
    """``wait_converged`` ran out of time; ``health`` is the last answer seen (None if none),
    ``error`` the last ``ControllerError`` when the controller was not answering."""

    def __init__(self, message: str, health: dict[str, Any] | None,
                 error: ControllerError | None) -> None:
        super().__init__(message)
        self.health = health
        self.error = error


class ControllerClient:
    """Blocking client of one controller's JSON API; cheap to create, safe to share.

    ``timeout`` bounds a read (GET), which a live controller answers at once.
    ``change_timeout`` bounds a change (PUT, POST, DELETE): the controller answers it only
    after planning the job's paths and pushing the switches' new tables, work that grows
    with the job and with a slow machine, and that it finishes whether or not the caller is
    still waiting.
    """

    def __init__(self, host: str = DEFAULT_HOST, port: int = DEFAULT_REST_PORT,
                 timeout: float = 10.0, change_timeout: float = 120.0) -> None:
        self.host = host
        self.port = int(port)
        self.timeout = timeout
        self.change_timeout = change_timeout
        host_part = f"[{host}]" if ":" in host else host  # IPv6 literal
        self.base_url = f"http://{host_part}:{self.port}"
        # No proxies: an http_proxy in the environment must not capture 127.0.0.1 calls.
        self._opener = urllib.request.build_opener(urllib.request.ProxyHandler({}))

    def __repr__(self) -> str:
        return f"ControllerClient({self.host!r}, {self.port}, timeout={self.timeout})"

    # -- generic requests ------------------------------------------------------------------

    def request(self, method: str, path: str, params: Mapping[str, Any] | None = None,
                body: Any = None, *, has_body: bool = False,
                timeout: float | None = None) -> Any:
        """One request; returns the decoded JSON answer or raises ``ControllerError``.

        ``params`` with value None are left out, so optional arguments pass straight through.
        ``has_body`` sends ``body`` as JSON even when it is None (``null``).
        """
        if not path.startswith("/"):
            path = "/" + path
        what = f"{method} {path}"
        query = {k: _param(v) for k, v in (params or {}).items() if v is not None}
        url = self.base_url + path
        if query:
            url += ("&" if "?" in path else "?") + urllib.parse.urlencode(query)
        data = None
        headers = {"Accept": "application/json"}
        if has_body or body is not None:
            try:
                data = dump_json(body)
            except (TypeError, ValueError) as exc:
                raise ControllerError(f"body is not JSON: {exc}", request=what) from exc
            if len(data) > MAX_BODY_BYTES:
                # The server would refuse it unread and reset the connection mid-upload;
                # saying so here is clearer than a "connection reset".
                raise ControllerError(f"body of {len(data)} bytes exceeds the controller's "
                                      f"limit of {MAX_BODY_BYTES} bytes", 413, request=what)
            headers["Content-Type"] = "application/json"
        req = urllib.request.Request(url, data=data, headers=headers, method=method)
        if timeout is None:
            timeout = self.timeout if method == "GET" else self.change_timeout
        try:
            with self._opener.open(req, timeout=timeout) as r:
                status, raw = r.status, r.read()
        except urllib.error.HTTPError as exc:
            try:
                raw = exc.read()
            except (OSError, http.client.HTTPException):
                raw = b""
            finally:
                exc.close()
            answer, _ = _decode(raw)
            message = answer.get("error") if isinstance(answer, dict) else None
            if not isinstance(message, str):
                message = str(exc.reason)
            raise ControllerError(message, exc.code, answer, what) from None
        except urllib.error.URLError as exc:
            raise self._unreachable(what, exc.reason, timeout) from None
        except (OSError, http.client.HTTPException) as exc:  # timeouts, resets mid-answer
            raise self._unreachable(what, exc, timeout) from None
        answer, ok = _decode(raw)
        if not ok:
            raise ControllerError(f"answer is not JSON: {raw[:200]!r}", status, answer, what)
        return answer

    def _unreachable(self, what: str, reason: Any, waited: float) -> ControllerError:
        where = f"{self.host}:{self.port}"
        if isinstance(reason, ConnectionRefusedError):
            msg = (f"cannot connect to the controller at {where}: connection refused "
                   "(the controller is not running, or not on that port)")
        elif isinstance(reason, TimeoutError):
            msg = f"no answer from the controller at {where} within {waited:.3g} s ({reason})"
        else:
            msg = f"cannot talk to the controller at {where}: {reason}"
        return ControllerError(msg, None, None, what)

    def get(self, path: str, **params: Any) -> Any:
        """``GET path?params`` (None-valued params are omitted)."""
        return self.request("GET", path, params)

    def put(self, path: str, body: Any) -> Any:
        """``PUT path`` with ``body`` as JSON."""
        return self.request("PUT", path, body=body, has_body=True)

    def post(self, path: str, body: Any) -> Any:
        """``POST path`` with ``body`` as JSON."""
        return self.request("POST", path, body=body, has_body=True)

    def delete(self, path: str) -> Any:
        """``DELETE path``."""
        return self.request("DELETE", path)

    # -- typed helpers ---------------------------------------------------------------------

    def health(self) -> dict[str, Any]:
        """``GET /health``: raises ``ControllerError`` with status 503 while starting."""
        return self.get("/health")

    def topology(self) -> dict[str, Any]:
        """``GET /topology``: the wiring plan the controller runs."""
        return self.get("/topology")

    def links(self) -> Any:
        """``GET /links``."""
        return self.get("/links")

    def port_stats(self, switch: str | None = None) -> dict[str, Any]:
        """``GET /ports/stats``, of one switch or of all."""
        return self.get("/ports/stats", switch=switch)

    def group_stats(self, switch: str | None = None) -> dict[str, Any]:
        """``GET /groups/stats``, of one switch or of all."""
        return self.get("/groups/stats", switch=switch)

    def flows(self, switch: str | None = None) -> dict[str, Any]:
        """``GET /flows``: flow-table entries, of one switch or of all."""
        return self.get("/flows", switch=switch)

    def paths(self, src: str, dst: str, sport: int | None = None, dport: int | None = None,
              proto: str = "udp") -> dict[str, Any]:
        """``GET /paths``: the path(s) from host ``src`` to ``dst`` (names or IPs)."""
        return self.get("/paths", src=src, dst=dst, sport=sport, dport=dport, proto=proto)

    def check_wiring(self) -> dict[str, Any]:
        """``POST /wiring/check``: where each switch link end's probe frame arrived."""
        return self.request("POST", "/wiring/check")

    def lb(self) -> dict[str, Any]:
        """``GET /lb``: the load-balancing mode."""
        return self.get("/lb")

    def set_lb(self, mode: str, **options: Any) -> dict[str, Any]:
        """``PUT /lb {"mode": mode, **options}``; returns the controller's new LB state."""
        return self.put("/lb", {"mode": mode, **options})

    def post_traffic(self, flows: Iterable[Flow | Mapping[str, Any]],
                     replace: bool = True) -> dict[str, Any]:
        """``POST /traffic``: announce the job's flows (``Flow`` objects or flow dicts).

        ``replace=False`` adds to the flows the controller already knows.
        """
        items: list[Any] = []
        for i, flow in enumerate(flows):
            if isinstance(flow, Mapping):
                items.append(dict(flow))
            elif callable(getattr(flow, "to_dict", None)):
                items.append(flow.to_dict())
            else:
                raise TypeError(f"flows[{i}] must be a Flow or a dict, not "
                                f"{type(flow).__name__}")
        return self.post("/traffic", {"flows": items, "replace": bool(replace)})

    def traffic(self) -> dict[str, Any]:
        """``GET /traffic``: the flows the controller knows."""
        return self.get("/traffic")

    def clear_traffic(self) -> dict[str, Any]:
        """``DELETE /traffic``: forget all flows."""
        return self.delete("/traffic")

    def wait_converged(self, timeout: float = 60, interval: float = 0.1) -> dict[str, Any]:
        """Poll ``/health`` until ``converged`` is true and return that health.

        A controller still starting (503) or not yet listening (connection refused) is
        waited for; any other error status is raised at once, since polling will not fix it.
        Raises ``NotConvergedError`` (a ``TimeoutError``) with the last health seen.
        """
        deadline = time.monotonic() + timeout
        last: dict[str, Any] | None = None
        error: ControllerError | None = None
        while True:
            remaining = deadline - time.monotonic()
            try:
                health = self.request("GET", "/health",
                                      timeout=max(0.05, min(self.timeout, remaining)))
            except ControllerError as exc:
                if exc.status not in (None, 503):
                    raise
                error = exc
                if isinstance(exc.body, dict):
                    last = exc.body
            else:
                error = None
                last = health if isinstance(health, dict) else {"health": health}
                if last.get("converged") is True:
                    return last
            remaining = deadline - time.monotonic()
            if remaining <= 0:
                seen = f"last error: {error}" if error is not None else \
                    f"last health: {json.dumps(last)}"
                raise NotConvergedError(
                    f"controller at {self.host}:{self.port} not converged after {timeout}s; "
                    f"{seen}", last, error)
            time.sleep(min(interval, remaining))


def _param(value: Any) -> str:
    if isinstance(value, bool):  # str(True) would be "True"
        return "true" if value else "false"
    return str(value)


def _decode(raw: bytes) -> tuple[Any, bool]:
    """``(value, True)`` for a JSON answer (None when empty), ``(text, False)`` otherwise."""
    if not raw:
        return None, True
    try:
        return json.loads(raw), True
    except ValueError:
        return raw.decode("utf-8", "replace"), False
