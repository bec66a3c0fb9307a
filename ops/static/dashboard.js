// astral-lab live view. Plain JavaScript and inline SVG, no library: the page must work
// offline and be readable in one sitting (ops/shell/dashboard.py says why).
// Draws /api/layout once, then every second fetches /api/state and recolours each link.
// Every link is an SVG element with data-link (its telemetry name, a~b#lane), data-util
// (the busier direction's utilisation), data-state (up/down/unknown) and data-color.
"use strict";

const SVG_NS = "http://www.w3.org/2000/svg";
const REFRESH_MS = 1000;
const LABEL_MAX = 64; // rows with more nodes than this get no name labels
// utilisation 0 .. 1 -> blue, green, yellow, orange, red (as the legend shows)
const STOPS = [[0.0, [59, 111, 182]], [0.25, [143, 193, 169]], [0.5, [244, 228, 107]],
               [0.75, [240, 138, 60]], [1.0, [215, 25, 28]]];
const IDLE = "#c8c8c8";   // no sample yet
const DOWN = "#111111";   // link down
const WIDTH = {nic: 2, nvlink: 2, lane: 2.5, uplink: 3};

const linkEls = new Map(); // link id -> SVG element
let busy = false;

function el(name, attrs, parent) {
  const e = document.createElementNS(SVG_NS, name);
  for (const [k, v] of Object.entries(attrs || {})) e.setAttribute(k, v);
  if (parent) parent.appendChild(e);
  return e;
}

function hex(rgb) {
  return "#" + rgb.map((c) => Math.round(c).toString(16).padStart(2, "0")).join("");
}

function utilColor(u) {
  if (u === null || u === undefined) return IDLE;
  const x = Math.max(0, Math.min(1, u));
  for (let i = 1; i < STOPS.length; i++) {
    const [x1, c1] = STOPS[i];
    const [x0, c0] = STOPS[i - 1];
    if (x <= x1) {
      const f = (x - x0) / (x1 - x0);
      return hex(c0.map((c, j) => c + f * (c1[j] - c)));
    }
  }
  return hex(STOPS[STOPS.length - 1][1]);
}

function human(bytes) {
  const units = ["B", "kB", "MB", "GB", "TB"];
  let v = bytes || 0;
  let i = 0;
  while (v >= 1000 && i < units.length - 1) { v /= 1000; i++; }
  return (i ? v.toFixed(1) : v.toFixed(0)) + " " + units[i];
}

function drawLayout(lay) {
  const svg = document.getElementById("fabric");
  svg.setAttribute("viewBox", `0 0 ${lay.width} ${lay.height}`);
  svg.dataset.topology = lay.topology;
  document.getElementById("topology").textContent =
    `${lay.topology}: ${lay.nodes.filter((n) => n.kind === "host").length} GPUs, ` +
    `${lay.links.length} links`;
  const rows = el("g", {class: "rows"}, svg);
  for (const r of lay.rows) {
    const t = el("text", {class: "row-label", x: 4, y: r.y - 30}, rows);
    t.textContent = r.label;
  }
  const boxes = el("g", {class: "boxes"}, svg);
  for (const b of lay.boxes) {
    const g = el("g", {class: "box", "data-box": b.name}, boxes);
    el("rect", {x: b.x - b.w / 2, y: b.y - b.h / 2, width: b.w, height: b.h, rx: 4}, g);
  }
  const links = el("g", {class: "links"}, svg);
  for (const ln of lay.links) {
    const pts = ln.points.map((p) => p.join(",")).join(" ");
    const e = el("polyline", {
      class: "link", points: pts, "data-link": ln.id, "data-kind": ln.kind,
      "data-util": "", "data-state": "unknown", "data-color": IDLE,
      stroke: IDLE, "stroke-width": WIDTH[ln.kind] || 2,
    }, links);
    el("title", {}, e).textContent = `${ln.id} (${ln.kind}, ${ln.mbps} Mb/s emulated)`;
    linkEls.set(ln.id, e);
  }
  const perRow = new Map();
  for (const n of lay.nodes) perRow.set(n.y, (perRow.get(n.y) || 0) + 1);
  const nodes = el("g", {class: "nodes"}, svg);
  for (const n of lay.nodes) {
    const g = el("g", {class: `node ${n.kind}`, "data-node": n.name, "data-tier": n.tier},
                 nodes);
    el("rect", {x: n.x - n.w / 2, y: n.y - n.h / 2, width: n.w, height: n.h, rx: 3}, g);
    el("title", {}, g).textContent = n.name;
    if (perRow.get(n.y) <= LABEL_MAX) {
      const t = el("text", {x: n.x, y: n.y + 4, "text-anchor": "middle"}, g);
      t.textContent = n.name;
    }
  }
  document.getElementById("legend").innerHTML =
    '<span>utilisation 0%</span><span class="scale"></span><span>100%</span>' +
    '<span>· dashed black: down · grey: no sample yet</span>';
}

function updateLinks(links) {
  for (const [id, row] of Object.entries(links)) {
    const e = linkEls.get(id);
    if (!e) continue;
    const down = row.state === "down";
    const color = down ? DOWN : utilColor(row.util);
    e.setAttribute("stroke", color);
    e.dataset.color = color;
    e.dataset.util = row.util === null ? "" : String(row.util);
    e.dataset.state = row.state;
    e.classList.toggle("down", down);
    const pct = (u) => (u === null ? "–" : (100 * u).toFixed(0) + "%");
    e.firstChild.textContent = `${id}: ${row.state}, up ${pct(row.util_ab)}, ` +
      `down ${pct(row.util_ba)} of ${row.mbps_capacity} Mb/s`;
  }
}

function updateSpines(spines) {
  const body = document.querySelector("#spines tbody");
  const max = Math.max(1, ...Object.values(spines).map((s) => s.bytes));
  body.innerHTML = "";
  for (const [name, s] of Object.entries(spines)) {
    const tr = document.createElement("tr");
    tr.dataset.spine = name;
    tr.dataset.bytes = String(s.bytes);
    tr.innerHTML = `<td>${name}</td><td class="bar"><div style="width:` +
      `${(100 * s.bytes / max).toFixed(1)}%"></div></td><td>${human(s.bytes)}</td>` +
      `<td>${s.mbps.toFixed(1)} Mb/s</td>`;
    body.appendChild(tr);
  }
}

function updateAlerts(alerts) {
  const ul = document.getElementById("alerts");
  ul.innerHTML = "";
  if (!alerts.length) {
    ul.innerHTML = '<li class="none">none</li>';
    return;
  }
  for (const a of alerts) {
    const li = document.createElement("li");
    li.className = `${a.severity}${a.cleared ? " cleared" : ""}`;
    li.dataset.detector = a.detector;
    li.dataset.component = a.component;
    li.textContent = `${a.cleared ? "cleared: " : ""}${a.detector} ${a.component}: ${a.summary}`;
    ul.appendChild(li);
  }
}

// Faults an evaluation run (ops-eval) injected: listed above the alerts, and the component
// marked in the drawing, so what was done and what the detectors say can be read together.
// A run that injects nothing has no "faults" in its progress: the panel stays hidden.
function updateFaults(faults, now) {
  document.getElementById("faults-panel").hidden = !Array.isArray(faults);
  for (const e of document.querySelectorAll(".faulty")) e.classList.remove("faulty");
  if (!Array.isArray(faults)) return;
  const ul = document.getElementById("faults");
  ul.innerHTML = faults.length ? "" : '<li class="none">none right now</li>';
  for (const f of faults) {
    const li = document.createElement("li");
    li.dataset.kind = f.kind;
    li.dataset.component = f.component;
    const age = now && f.since ? ` for ${Math.max(0, Math.round(now - f.since))} s` : "";
    li.textContent = `${f.kind} on ${f.component}${age}`;
    ul.appendChild(li);
    for (const e of document.querySelectorAll(
        `[data-link="${CSS.escape(f.component)}"], [data-node="${CSS.escape(f.component)}"]`)) {
      e.classList.add("faulty");
    }
  }
}

function updateLb(lb) {
  const sel = document.getElementById("lb-mode");
  if (!lb || !lb.mode || document.activeElement === sel) return;
  const modes = lb.modes && lb.modes.length ? lb.modes : [lb.mode];
  if ([...sel.options].map((o) => o.value).join() !== modes.join()) {
    sel.innerHTML = "";
    for (const m of modes) sel.appendChild(new Option(m, m));
  }
  sel.value = lb.mode;
  sel.disabled = false;
}

function updateProgress(p) {
  const div = document.getElementById("progress");
  if (!p) {
    div.textContent = "no scenario running";
    return;
  }
  const frac = p.total ? Math.min(1, p.done / p.total) : null;
  div.innerHTML = "";
  const head = document.createElement("div");
  head.textContent = `${p.scenario || "run"}: ${p.stage || "starting"}` +
    (p.elapsed_s !== undefined ? ` (${Math.round(p.elapsed_s)} s)` : "");
  div.appendChild(head);
  if (frac !== null) {
    const bar = document.createElement("div");
    bar.className = "bar";
    bar.innerHTML = `<div style="width:${(100 * frac).toFixed(0)}%"></div>`;
    div.appendChild(bar);
  }
}

function updateStatus(s) {
  const st = document.getElementById("status");
  const c = s.controller || {};
  st.className = "status " + (c.up === false ? "bad" : "ok");
  st.textContent = `poll ${s.polls} · ` + (s.t ? new Date(s.t * 1000).toLocaleTimeString() : "");
  document.getElementById("controller").textContent =
    c.up === null || c.up === undefined ? "not watched" :
    `${c.up ? "up" : "DOWN"}, ${c.converged ? "converged" : "not converged"}, ` +
    `${c.down_ports || 0} port(s) down`;
}

async function refresh() {
  if (busy) return;
  busy = true;
  try {
    const r = await fetch("/api/state", {cache: "no-store"});
    if (!r.ok) throw new Error(`HTTP ${r.status}`);
    const s = await r.json();
    updateLinks(s.links || {});
    updateSpines(s.spines || {});
    updateAlerts(s.alerts || []);
    updateLb(s.lb);
    updateProgress(s.progress);
    updateFaults(s.progress ? s.progress.faults : undefined, s.t);
    updateStatus(s);
    document.body.dataset.refreshes = String(Number(document.body.dataset.refreshes) + 1);
  } catch (err) {
    const st = document.getElementById("status");
    st.className = "status bad";
    st.textContent = `no data: ${err.message}`;
  } finally {
    busy = false;
  }
}

async function switchLb(ev) {
  const msg = document.getElementById("lb-message");
  msg.textContent = `switching to ${ev.target.value}…`;
  try {
    const r = await fetch("/api/lb", {method: "PUT", headers: {"Content-Type": "application/json"},
                                      body: JSON.stringify({mode: ev.target.value})});
    const ans = await r.json();
    msg.textContent = r.ok ? `now ${ans.mode}` : `refused: ${ans.error}`;
  } catch (err) {
    msg.textContent = `failed: ${err.message}`;
  }
  ev.target.blur();
}

async function main() {
  // the layout is drawn once; a page opened while the server is busy or restarting waits
  // for it instead of staying blank
  for (;;) {
    try {
      const r = await fetch("/api/layout", {cache: "no-store"});
      if (!r.ok) throw new Error(`HTTP ${r.status}`);
      drawLayout(await r.json());
      break;
    } catch (err) {
      const st = document.getElementById("status");
      st.className = "status bad";
      st.textContent = `no layout yet: ${err.message}; retrying`;
      await new Promise((done) => setTimeout(done, 1000));
    }
  }
  document.getElementById("lb-mode").addEventListener("change", switchLb);
  await refresh();
  document.body.dataset.ready = "1";
  setInterval(refresh, REFRESH_MS);
}

main();
