"""The LLM backend against a local stub HTTP server (no model, no network beyond loopback)."""

from __future__ import annotations

import json
import random
import threading
from collections.abc import Iterator
from http.server import BaseHTTPRequestHandler, HTTPServer
from typing import Any

import pytest

from ops import llm
from ops.agent import Tools
from ops.detectors import Engine
from ops.telemetry import History
from testbed.topologies import build
from tests.unit.test_ops_detectors import clean_poll

LANE = "lf0r0~spine2#0"


class Stub:
    """Answers /v1/chat/completions from a script; records every request body."""

    def __init__(self, script: list[dict[str, Any]]) -> None:
        self.script, self.requests = list(script), []
        stub = self

        class Handler(BaseHTTPRequestHandler):
            def do_POST(self) -> None:  # noqa: N802
                body = json.loads(self.rfile.read(int(self.headers["Content-Length"])))
                stub.requests.append({"path": self.path, "body": body,
                                      "auth": self.headers.get("Authorization")})
                msg = stub.script.pop(0) if stub.script else {"content": "I give up"}
                data = json.dumps({"choices": [{"message": {"role": "assistant", **msg}}]})
                self.send_response(200)
                self.send_header("Content-Type", "application/json")
                self.end_headers()
                self.wfile.write(data.encode())

            def log_message(self, *a: Any) -> None:
                pass

        self.server = HTTPServer(("127.0.0.1", 0), Handler)
        self.url = f"http://127.0.0.1:{self.server.server_port}/v1"
        threading.Thread(target=self.server.serve_forever, daemon=True).start()

    def close(self) -> None:
        self.server.shutdown()
        self.server.server_close()


def call(name: str, args: dict[str, Any], i: int = 0) -> dict[str, Any]:
    return {"content": None, "tool_calls": [{"id": f"c{i}", "type": "function", "function": {
        "name": name, "arguments": json.dumps(args)}}]}


def final(*components: str) -> dict[str, Any]:
    return {"content": "```json\n" + json.dumps(
        {"suspects": [{"component": c, "action": "drain it"} for c in components]}) + "\n```"}


@pytest.fixture(scope="module")
def tools_factory():  # noqa: ANN201
    plan = build("astral3", servers=2, gpus=2)
    rng = random.Random(5)
    hist, eng = History(), Engine(plan)
    for i in range(60):
        v = clean_poll(plan, rng)
        if i >= 40:
            v[(LANE, "mbps_ab")] = 5.0
            v[(LANE, "backlog_ab")] = 375_000.0 * (i - 39)
        hist.add(1000.0 + i, v)
        eng.step(hist)
    return lambda: Tools(plan, history=hist, engine=eng)


@pytest.fixture
def stub() -> Iterator[Any]:
    made: list[Stub] = []

    def make(script: list[dict[str, Any]]) -> Stub:
        made.append(Stub(script))
        return made[-1]

    yield make
    for s in made:
        s.close()


def test_model_drives_tools_and_unsupported_suspects_are_dropped(stub, tools_factory) -> None:  # noqa: ANN001
    s = stub([call("alerts", {}), call("path_counters", {"src": "s0g0", "dst": "s1g1"}, 1),
              final("spine9", "s1g0", "spine2~lf0r0")])
    tools = tools_factory()
    client = llm.ChatClient(s.url, model="m", key="k")
    d = llm.llm_diagnose(tools, "why is s0g0 -> s1g1 slow?", client)
    assert d.planner == "llm"
    assert d.components() == [LANE]
    assert "25%" in d.suspects[0].evidence[0]  # the tools' evidence, not the model's words
    assert any("spine9" in n and "not a component" in n for n in d.notes)
    assert any("s1g0" in n and "no tool result" in n for n in d.notes)
    first = s.requests[0]
    assert first["path"] == "/v1/chat/completions" and first["auth"] == "Bearer k"
    assert {t["function"]["name"] for t in first["body"]["tools"]} == set(Tools.SPECS)
    # the tool's result went back to the model as a tool message
    second = s.requests[1]["body"]["messages"]
    assert second[-1]["role"] == "tool" and LANE in second[-1]["content"]


def test_answer_without_evidence_falls_back_to_deterministic(stub, tools_factory) -> None:  # noqa: ANN001
    s = stub([final("spine3")])  # no tool called: nothing supports anything
    d = llm.llm_diagnose(tools_factory(), "what is wrong?", llm.ChatClient(s.url))
    assert d.planner == "deterministic" and d.components()[0] == LANE
    assert any("evidence check" in n for n in d.notes)


def test_unreachable_or_garbage_endpoint_falls_back(stub, tools_factory) -> None:  # noqa: ANN001
    s = stub([{"content": "no json here"}])
    d = llm.llm_diagnose(tools_factory(), "what is wrong?", llm.ChatClient(s.url))
    assert d.planner == "deterministic" and any("no JSON" in n for n in d.notes)
    dead = llm.ChatClient("http://127.0.0.1:9/v1", timeout=2)
    d = llm.llm_diagnose(tools_factory(), "what is wrong?", dead)
    assert d.components()[0] == LANE and any("LLM backend failed" in n for n in d.notes)


def test_config_from_env() -> None:
    assert llm.config_from_env({}) is None
    assert llm.config_from_env({llm.ENV_URL: "http://x:1/v1/"}) == {
        "url": "http://x:1/v1", "model": "default", "key": ""}
    with pytest.raises(ValueError, match=llm.ENV_URL):
        llm.config_from_env({llm.ENV_URL: "ftp://x"})
