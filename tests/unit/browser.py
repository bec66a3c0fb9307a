"""Headless Chromium for tests, driven over the DevTools protocol with the standard library.

``--dump-dom`` shows a page once; the live view's tests need to read the same page twice,
seconds apart (a link's colour before and after the load changes), so this starts
``chromium --headless --remote-debugging-port=0`` on the page and talks to it over the
DevTools WebSocket: a minimal client (text frames, client-masked, as RFC 6455 requires).
Shared by the unit test (fake backend) and the integration test (a real fabric).
"""

from __future__ import annotations

import base64
import contextlib
import json
import os
import shutil
import signal
import socket
import struct
import subprocess
import tempfile
import time
import urllib.error
import urllib.parse
import urllib.request
from typing import Any

CANDIDATES = ("chromium", "chromium-browser", "google-chrome")


def chromium_path() -> str | None:
    """The browser binary on PATH (Debian's package is ``chromium``), or None."""
    for name in CANDIDATES:
        path = shutil.which(name)
        if path:
            return path
    return None


class _WebSocket:
    def __init__(self, url: str, timeout: float = 30.0) -> None:
        u = urllib.parse.urlsplit(url)
        self.sock = socket.create_connection((u.hostname, u.port), timeout=timeout)
        key = base64.b64encode(os.urandom(16)).decode()
        self.sock.sendall((f"GET {u.path} HTTP/1.1\r\nHost: {u.hostname}:{u.port}\r\n"
                           "Upgrade: websocket\r\nConnection: Upgrade\r\n"
                           f"Sec-WebSocket-Key: {key}\r\nSec-WebSocket-Version: 13\r\n\r\n")
                          .encode())
        head = b""
        while b"\r\n\r\n" not in head:
            chunk = self.sock.recv(4096)
            if not chunk:
                raise ConnectionError("DevTools closed the connection during the handshake")
            head += chunk
        if b" 101 " not in head.split(b"\r\n", 1)[0]:
            raise ConnectionError(f"DevTools refused the WebSocket: {head[:200]!r}")
        self.buf = head.split(b"\r\n\r\n", 1)[1]

    def send(self, text: str) -> None:
        data = text.encode()
        mask = os.urandom(4)
        n = len(data)
        if n < 126:
            header = struct.pack("!BB", 0x81, 0x80 | n)
        elif n < 1 << 16:
            header = struct.pack("!BBH", 0x81, 0x80 | 126, n)
        else:
            header = struct.pack("!BBQ", 0x81, 0x80 | 127, n)
        masked = bytes(b ^ mask[i % 4] for i, b in enumerate(data))
        self.sock.sendall(header + mask + masked)

    def _read(self, n: int) -> bytes:
        while len(self.buf) < n:
            chunk = self.sock.recv(65536)
            if not chunk:
                raise ConnectionError("DevTools closed the connection")
            self.buf += chunk
        out, self.buf = self.buf[:n], self.buf[n:]
        return out

    def recv(self) -> str:
        parts = []
        while True:
            b0, b1 = self._read(2)
            n = b1 & 0x7F
            if n == 126:
                n = struct.unpack("!H", self._read(2))[0]
            elif n == 127:
                n = struct.unpack("!Q", self._read(8))[0]
            payload = self._read(n)
            opcode = b0 & 0x0F
            if opcode == 0x8:
                raise ConnectionError("DevTools closed the WebSocket")
            if opcode in (0x1, 0x0, 0x2):
                parts.append(payload)
                if b0 & 0x80:
                    return b"".join(parts).decode()
            # ping/pong frames are ignored (DevTools does not ping)

    def close(self) -> None:
        self.sock.close()


class Browser:
    """One headless Chromium showing ``url``; ``evaluate(js)`` returns the value."""

    def __init__(self, url: str, width: int = 1400, height: int = 900,
                 timeout: float = 60.0) -> None:
        path = chromium_path()
        if path is None:
            raise FileNotFoundError("chromium is not installed")
        self.profile = tempfile.mkdtemp(prefix="astral-browser-")
        self.log_path = os.path.join(self.profile, "chromium.log")
        log = open(self.log_path, "wb")  # noqa: SIM115 (handed to the child, closed below)
        self.proc = subprocess.Popen(
            [path, "--headless", "--no-sandbox", "--disable-gpu", "--no-first-run",
             "--hide-scrollbars", f"--window-size={width},{height}",
             "--remote-debugging-port=0", "--remote-debugging-address=127.0.0.1",
             f"--user-data-dir={self.profile}", url],
            # its singleton lock and socket go in TMPDIR: inside the profile, removed with it
            env={**os.environ, "TMPDIR": self.profile},
            stdout=subprocess.DEVNULL, stderr=log, stdin=subprocess.DEVNULL,
            start_new_session=True)  # its helpers in one group: close() stops them all
        log.close()
        self._id = 0
        try:
            port = self._devtools_port(timeout)
            self.ws = _WebSocket(self._page_socket(port, timeout), timeout)
        except BaseException:
            self.close()
            raise

    def _devtools_port(self, timeout: float) -> int:
        """From ``DevToolsActivePort``, which Chromium writes into its profile folder once
        its DevTools server listens (first line: the port)."""
        path = os.path.join(self.profile, "DevToolsActivePort")
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            try:
                with open(path, encoding="ascii") as f:
                    first = f.readline().strip()
                if first.isdigit():
                    return int(first)
            except OSError:
                pass
            if self.proc.poll() is not None:
                break
            time.sleep(0.05)
        raise RuntimeError(f"chromium did not open its DevTools port: {self._log_tail()}")

    def _log_tail(self) -> str:
        try:
            with open(self.log_path, encoding="utf-8", errors="replace") as f:
                return "".join(f.readlines()[-5:])
        except OSError:
            return "(no log)"

    def _page_socket(self, port: int, timeout: float) -> str:
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            try:  # a slow machine (an emulated VM) answers late: wait for it, up to the deadline
                with urllib.request.urlopen(f"http://127.0.0.1:{port}/json/list",
                                            timeout=max(1.0, deadline - time.monotonic())) as r:
                    pages = [t for t in json.load(r) if t.get("type") == "page"]
            except (TimeoutError, urllib.error.URLError):
                pages = []
            if pages:
                return str(pages[0]["webSocketDebuggerUrl"])
            time.sleep(0.1)
        raise RuntimeError("chromium opened no page")

    def call(self, method: str, **params: Any) -> dict[str, Any]:
        self._id += 1
        self.ws.send(json.dumps({"id": self._id, "method": method, "params": params}))
        while True:
            msg = json.loads(self.ws.recv())
            if msg.get("id") == self._id:
                if "error" in msg:
                    raise RuntimeError(f"{method}: {msg['error']}")
                return dict(msg.get("result", {}))

    def evaluate(self, expression: str) -> Any:
        """The JSON value of a JavaScript expression in the page."""
        res = self.call("Runtime.evaluate", expression=expression, returnByValue=True)
        if "exceptionDetails" in res:
            raise RuntimeError(f"page raised: {res['exceptionDetails']}")
        return res.get("result", {}).get("value")

    def wait_for(self, expression: str, timeout: float = 15.0, interval: float = 0.1) -> Any:
        """Poll ``expression`` until it is truthy; its value, or ``TimeoutError``. While the
        page is still loading the expression may raise (no body yet): that counts as falsy."""
        deadline = time.monotonic() + timeout
        last: Any = None
        while True:
            try:
                value = self.evaluate(expression)
            except RuntimeError as exc:
                value, last = None, exc
            if value:
                return value
            if time.monotonic() > deadline:
                raise TimeoutError(f"{expression!r} stayed falsy for {timeout:g} s"
                                   + (f" (last error: {last})" if last else ""))
            time.sleep(interval)

    def links(self) -> dict[str, dict[str, str]]:
        """Every drawn link: ``{data-link: {color, util, state}}``."""
        return self.evaluate(
            "Object.fromEntries([...document.querySelectorAll('[data-link]')].map(e => "
            "[e.dataset.link, {color: e.dataset.color, stroke: e.getAttribute('stroke'), "
            "util: e.dataset.util, state: e.dataset.state}]))")

    def screenshot(self, path: str) -> str:
        data = self.call("Page.captureScreenshot", format="png")["data"]
        with open(path, "wb") as f:
            f.write(base64.b64decode(data))
        return path

    def close(self) -> None:
        ws = getattr(self, "ws", None)
        if ws is not None:
            ws.close()
        if self.proc.poll() is None:
            self.proc.terminate()
            try:
                self.proc.wait(timeout=10)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait()
        # Chromium's helper processes outlive the browser for a moment and keep writing
        # into the profile: stop the whole group, wait until it is gone, then remove it
        with contextlib.suppress(ProcessLookupError):
            os.killpg(self.proc.pid, signal.SIGKILL)
        deadline = time.monotonic() + 10
        while _group_alive(self.proc.pid) and time.monotonic() < deadline:
            time.sleep(0.05)
        shutil.rmtree(self.profile, ignore_errors=True)

    def __enter__(self) -> Browser:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()


def _group_alive(pgid: int) -> bool:
    """Whether a process of group ``pgid`` still runs (zombies waiting to be reaped do not)."""
    for entry in os.listdir("/proc"):
        if not entry.isdigit():
            continue
        try:
            with open(f"/proc/{entry}/stat") as fh:
                fields = fh.read().rsplit(")", 1)[1].split()
        except OSError:
            continue
        if fields[0] != "Z" and int(fields[2]) == pgid:
            return True
    return False
