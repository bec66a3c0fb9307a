"""Optional LLM backend for the diagnosis agent: an OpenAI-compatible chat endpoint drives
the same tools as the deterministic planner, and its answer is checked before it is shown.

Off by default. Turned on by ``astral-lab ops diagnose --llm`` with the endpoint given by
environment variables (nothing is sent anywhere unless ``ASTRAL_LAB_LLM_URL`` is set):

``ASTRAL_LAB_LLM_URL``    base URL of an OpenAI-compatible API, e.g. ``http://127.0.0.1:8000/v1``
                          (``/chat/completions`` is appended)
``ASTRAL_LAB_LLM_MODEL``  model name sent in each request (default ``default``)
``ASTRAL_LAB_LLM_KEY``    bearer token, if the endpoint wants one

The model may call the agent's tools (``ops.agent.Tools``; function calling in the
OpenAI ``tools``/``tool_calls`` format) for at most ``MAX_TURNS`` rounds and must end
with a JSON object ``{"suspects": [{"component": ..., "action": ...}, ...]}``.

**Evidence check**: a model can name a component no measurement points at. Every
suspect it names is kept only if it is a component of the wiring plan *and* the tools'
own results support it (an alert on it, or a counter anomaly the tools reported); its
evidence shown to the user is the tools' evidence, never the model's prose. Dropped
suspects are listed in the notes. If nothing survives (or the endpoint fails), the
deterministic planner's answer is shown instead, and the notes say so. Standard library
only (``urllib``).
"""

from __future__ import annotations

import json
import os
import urllib.error
import urllib.request
from typing import Any

from ops.agent import Diagnosis, Suspect, Tools, diagnose, next_action
from ops.telemetry import canonical

ENV_URL, ENV_MODEL, ENV_KEY = "ASTRAL_LAB_LLM_URL", "ASTRAL_LAB_LLM_MODEL", "ASTRAL_LAB_LLM_KEY"
MAX_TURNS = 8
TIMEOUT_S = 60.0

SYSTEM = (
    "You diagnose faults in an emulated GPU cluster network (leaf/spine rail fabric). "
    "Components are named: links 'a~b#lane' (e.g. lf0r1~spine2#0), switches by name "
    "(lf0r1, spine2), NICs by host name (s1g3), and 'controller'. Use the tools to gather "
    "evidence; do not guess. Finish with only a JSON object: "
    '{"suspects": [{"component": "<name>", "action": "<next step>"}]} ranked most likely '
    "first.")


class LLMError(Exception):
    """The endpoint could not be used (not configured, unreachable, bad answer)."""


def config_from_env(env: dict[str, str] | None = None) -> dict[str, str] | None:
    """``{"url", "model", "key"}`` from the environment, or None when no URL is set."""
    env = dict(os.environ if env is None else env)
    url = env.get(ENV_URL, "").strip()
    if not url:
        return None
    if not url.startswith(("http://", "https://")):
        raise ValueError(f"{ENV_URL} must be an http(s) URL (got {url!r})")
    return {"url": url.rstrip("/"), "model": env.get(ENV_MODEL, "default"),
            "key": env.get(ENV_KEY, "")}


def tool_schemas() -> list[dict[str, Any]]:
    """The agent's tools in the OpenAI function-calling format."""
    types = {"string": "string", "number": "number", "integer": "integer"}
    out = []
    for name, spec in Tools.SPECS.items():
        props = {k: {"type": types[v]} for k, v in spec["parameters"].items()}
        required = [k for k in props if k not in ("seconds", "count")]
        out.append({"type": "function", "function": {
            "name": name, "description": spec["description"],
            "parameters": {"type": "object", "properties": props, "required": required}}})
    return out


class ChatClient:
    """Minimal client of ``POST {url}/chat/completions`` (urllib, no proxies)."""

    def __init__(self, url: str, model: str = "default", key: str = "",
                 timeout: float = TIMEOUT_S) -> None:
        self.url, self.model, self.key, self.timeout = url.rstrip("/"), model, key, timeout
        self._opener = urllib.request.build_opener(urllib.request.ProxyHandler({}))

    def complete(self, messages: list[dict[str, Any]],
                 tools: list[dict[str, Any]]) -> dict[str, Any]:
        """One chat completion; returns the first choice's ``message``."""
        body = json.dumps({"model": self.model, "messages": messages, "tools": tools,
                           "temperature": 0}).encode()
        headers = {"Content-Type": "application/json"}
        if self.key:
            headers["Authorization"] = f"Bearer {self.key}"
        req = urllib.request.Request(self.url + "/chat/completions", data=body,
                                     headers=headers, method="POST")
        try:
            with self._opener.open(req, timeout=self.timeout) as r:
                answer = json.load(r)
        except (urllib.error.URLError, OSError, ValueError) as exc:
            raise LLMError(f"chat endpoint {self.url}: {exc}") from None
        try:
            return answer["choices"][0]["message"]
        except (KeyError, IndexError, TypeError):
            raise LLMError(f"chat endpoint {self.url}: answer has no choices[0].message") from None


def _final_json(text: str) -> dict[str, Any]:
    """The JSON object in the model's last message (tolerates a ``` fence around it)."""
    start, end = text.find("{"), text.rfind("}")
    if start < 0 or end < start:
        raise LLMError("the model's answer contains no JSON object")
    try:
        data = json.loads(text[start:end + 1])
    except ValueError as exc:
        raise LLMError(f"the model's answer is not JSON: {exc}") from None
    if not isinstance(data, dict) or not isinstance(data.get("suspects"), list):
        raise LLMError('the model\'s answer has no "suspects" list')
    return data


def evidence_index(tools: Tools) -> dict[str, tuple[str, list[str]]]:
    """Component -> (detector, evidence) for everything the tool calls so far support."""
    index: dict[str, tuple[str, list[str]]] = {}
    for step in tools.log:
        res = step["result"]
        if step["tool"] == "alerts" and isinstance(res, list):
            for a in res:
                comp = canonical(a["component"], tools.plan)
                index.setdefault(comp, (a["detector"], []))[1].append(a["summary"])
        if step["tool"] == "path_counters" and isinstance(res, dict):
            for comp, row in res.get("links", {}).items():
                if "anomaly" in row:
                    c = canonical(comp, tools.plan)
                    index.setdefault(c, ("counters", []))[1].append(row["anomaly"])
        if step["tool"] == "probe" and isinstance(res, dict) and (res.get("loss_pct") or 0) > 0:
            index.setdefault(res["dst"], ("probe", []))[1].append(
                f"probe {res['src']}->{res['dst']}: {res['loss_pct']:.0f}% loss")
    return index


def check_answer(tools: Tools, data: dict[str, Any]) -> tuple[list[Suspect], list[str]]:
    """Keep the model's suspects that are plan components backed by tool evidence."""
    known = set(tools.links) | set(tools.hosts) | set(tools.topo.switch_links) | {"controller"}
    support = evidence_index(tools)
    kept, notes = [], []
    for i, s in enumerate(data["suspects"]):
        raw = str(s.get("component", "")) if isinstance(s, dict) else ""
        comp = canonical(raw, tools.plan) if raw else ""
        if comp not in known and comp not in {canonical(c, tools.plan) for c in known}:
            notes.append(f"dropped {raw!r}: not a component of the wiring plan")
            continue
        if comp not in support:
            notes.append(f"dropped {comp}: no tool result supports it")
            continue
        detector, ev = support[comp]
        action = str(s.get("action") or "") or next_action(detector, comp, ev[0])
        kept.append(Suspect(comp, float(100 - i), detector, list(dict.fromkeys(ev)), action))
    return kept, notes


def llm_diagnose(tools: Tools, question: str, client: ChatClient, *,
                 job_hosts: list[str] | None = None, fallback: bool = True) -> Diagnosis:
    """Let the model drive ``tools``; return its checked answer or the deterministic one.

    ``fallback``: a backend that fails (unreachable, no answer, not JSON) is answered by the
    deterministic planner with a note; without it the ``LLMError`` is raised, since an
    answer the user asked the model for should not silently come from elsewhere."""
    messages: list[dict[str, Any]] = [{"role": "system", "content": SYSTEM},
                                      {"role": "user", "content": question}]
    schemas = tool_schemas()
    try:
        for _turn in range(MAX_TURNS):
            msg = client.complete(messages, schemas)
            calls = msg.get("tool_calls") or []
            messages.append({"role": "assistant", "content": msg.get("content"),
                             **({"tool_calls": calls} if calls else {})})
            if not calls:
                data = _final_json(msg.get("content") or "")
                break
            for call in calls:
                fn = call.get("function", {})
                try:
                    args = json.loads(fn.get("arguments") or "{}")
                    result = tools.call(fn.get("name", ""), args)
                except (ValueError, TypeError) as exc:
                    result = {"error": str(exc)}
                messages.append({"role": "tool", "tool_call_id": call.get("id", ""),
                                 "content": json.dumps(result, default=str)[:20000]})
        else:
            raise LLMError(f"no final answer after {MAX_TURNS} rounds of tool calls")
    except LLMError as exc:
        if not fallback:
            raise
        d = diagnose(tools, question, job_hosts=job_hosts)
        d.notes.append(f"LLM backend failed ({exc}); showing the deterministic planner's answer")
        return d
    kept, notes = check_answer(tools, data)
    if not kept:
        d = diagnose(tools, question, job_hosts=job_hosts)
        d.notes.extend(notes)
        d.notes.append("no suspect of the LLM survived the evidence check; showing the "
                       "deterministic planner's answer")
        return d
    return Diagnosis(question, kept, steps=list(tools.log), planner="llm", notes=notes)
