// agentrl view: browse a run's episodes beside its curves. Every value from the run is put in
// the page as text (textContent), never as HTML: tool results can hold anything.
"use strict";

const FILTERS = ["source", "termination", "env", "level", "step", "layer"];

function el(tag, attrs = {}, ...children) {
  const node = document.createElement(tag);
  for (const [k, v] of Object.entries(attrs)) {
    if (k === "text") node.textContent = v;
    else if (k === "cls") node.className = v;
    else node.setAttribute(k, v);
  }
  for (const child of children) node.append(child);
  return node;
}

async function getJSON(url) {
  const response = await fetch(url);
  if (!response.ok) throw new Error(`${url}: ${response.status} ${await response.text()}`);
  return response.json();
}

function fmt(x) {
  return typeof x === "number" ? (Number.isInteger(x) ? String(x) : x.toFixed(3)) : String(x);
}

// -- the run --------------------------------------------------------------------------------
async function loadRun() {
  const run = await getJSON("/api/run");
  document.getElementById("run-dir").textContent = run.run_dir;
  const summary = run.summary || {};
  const after = summary.success_after !== undefined ? `, success ${fmt(summary.success_before)}`
    + ` -> ${fmt(summary.success_after)}` : "";
  document.getElementById("run-state").textContent =
    `${run.state}, ${run.steps_logged} steps logged${after}`;
  const list = document.getElementById("findings");
  list.replaceChildren(...run.findings.map((f) => el("li", {},
    el("b", {cls: f.severity, text: `${f.severity} ${f.code}`}), `: ${f.title}`,
    f.fix.length ? el("code", {text: `  fix: ${f.fix.join("  ")}`}) : "")));
}

// -- curves (small SVG line charts) ---------------------------------------------------------
function chart(title, lines) {
  const W = 260, H = 120, P = 26;
  const svg = document.createElementNS("http://www.w3.org/2000/svg", "svg");
  svg.setAttribute("width", W); svg.setAttribute("height", H); svg.setAttribute("class", "chart");
  const pts = lines.flatMap((l) => l.points);
  if (!pts.length) return svg;
  const xs = pts.map((p) => p[0]), ys = pts.map((p) => p[1]);
  const [x0, x1] = [Math.min(...xs), Math.max(...xs, Math.min(...xs) + 1)];
  let [y0, y1] = [Math.min(...ys), Math.max(...ys)];
  if (y1 - y0 < 1e-9) { y0 -= 0.5; y1 += 0.5; }
  const sx = (x) => P + (x - x0) / (x1 - x0) * (W - P - 6);
  const sy = (y) => H - 16 - (y - y0) / (y1 - y0) * (H - 32);
  const add = (tag, attrs, text) => {
    const n = document.createElementNS("http://www.w3.org/2000/svg", tag);
    for (const [k, v] of Object.entries(attrs)) n.setAttribute(k, v);
    if (text !== undefined) n.textContent = text;
    svg.append(n);
  };
  add("text", {x: P, y: 11}, title);
  add("text", {x: 2, y: sy(y1) + 4}, fmt(y1));
  add("text", {x: 2, y: sy(y0) + 4}, fmt(y0));
  add("text", {x: W - 40, y: H - 3}, `step ${x1}`);
  for (const line of lines) {
    const d = line.points.map((p, i) => `${i ? "L" : "M"}${sx(p[0])},${sy(p[1])}`).join(" ");
    add("path", {d, fill: "none", stroke: line.colour, "stroke-width": 1.5,
                 "stroke-dasharray": line.dashed ? "4 3" : ""});
  }
  return svg;
}

async function loadCurves() {
  const data = await getJSON("/api/curves");
  const box = document.getElementById("curves");
  const charts = Object.entries(data.series).map(([key, points]) => {
    const lines = [{points, colour: "#2563eb"}];
    if (key === "rollout/success_rate" && data.evals.length) {
      lines.push({points: data.evals, colour: "#d97706", dashed: true});
    }
    return chart(key === "rollout/success_rate" ? "success (dashed: held-out)" : key, lines);
  });
  box.replaceChildren(...charts);
  box.dataset.charts = String(charts.length);
}

// -- the episode list -----------------------------------------------------------------------
async function loadFacets() {
  const facets = await getJSON("/api/facets");
  for (const name of FILTERS) {
    const select = document.getElementById(`f-${name}`);
    const first = select.options[0];
    select.replaceChildren(first, ...facets[name].map((v) => el("option", {value: v, text: v})));
  }
}

function query() {
  const params = new URLSearchParams();
  for (const name of FILTERS) {
    const v = document.getElementById(`f-${name}`).value;
    if (v !== "") params.set(name, v);
  }
  for (const [id, key] of [["f-layer-min", "layer_min"], ["f-layer-max", "layer_max"]]) {
    const v = document.getElementById(id).value;
    if (v !== "") params.set(key, v);
  }
  return params.toString();
}

async function loadEpisodes() {
  const data = await getJSON(`/api/episodes?${query()}`);
  const body = document.querySelector("#episodes tbody");
  body.replaceChildren(...data.episodes.map((e) => {
    const row = el("tr", {"data-id": e.id},
      el("td", {text: e.id}), el("td", {text: e.step ?? ""}), el("td", {text: e.task_id}),
      el("td", {text: e.level ?? ""}), el("td", {cls: e.termination, text: e.termination}),
      el("td", {text: fmt(e.reward)}), el("td", {text: e.turns}), el("td", {text: e.calls}));
    row.addEventListener("click", () => openEpisode(e.id));
    return row;
  }));
  const shown = data.episodes.length < data.total ? ` (first ${data.episodes.length})` : "";
  document.getElementById("episode-count").textContent = `${data.total}${shown}`;
}

// -- one episode ----------------------------------------------------------------------------
function rewardTable(reward) {
  const layers = Object.keys(reward.layers || {});
  const head = el("tr", {}, el("th", {text: "layer"}), el("th", {text: "score"}),
                  el("th", {text: "weight"}), el("th", {text: "weighted"}));
  const rows = layers.map((k) => {
    const w = (reward.weights || {})[k] ?? 0;
    return el("tr", {}, el("td", {text: k}), el("td", {text: fmt(reward.layers[k])}),
              el("td", {text: fmt(w)}), el("td", {text: fmt(w * reward.layers[k])}));
  });
  const total = el("tr", {}, el("th", {text: "total"}), el("td"), el("td"),
                   el("th", {text: fmt(reward.total)}));
  return [head, ...rows, total];
}

function perTurnTable(perTurn) {
  const keys = [...new Set(perTurn.flatMap((t) => Object.keys(t)))];
  if (!keys.length) return [];
  return [el("tr", {}, el("th", {text: "turn"}), ...keys.map((k) => el("th", {text: k}))),
    ...perTurn.map((t, i) => el("tr", {}, el("td", {text: i}),
      ...keys.map((k) => el("td", {text: k in t ? fmt(t[k]) : ""}))))];
}

function turnNodes(ep) {
  const results = ep.tool_calls || [];
  let call = 0;
  const nodes = (ep.messages || []).map((m) => {
    const box = el("div", {cls: `turn ${m.role}`}, el("b", {text: `${m.role}: `}),
                   m.content ?? "");
    for (const c of m.tool_calls || []) {
      const fn = c.function || c;
      const rec = results[call++] || {};
      const status = rec.ok === false ? `  -> ${rec.error_code}` : "";
      box.append(el("span", {cls: rec.ok === false ? "call failed" : "call",
        text: `${fn.name}(${typeof fn.arguments === "string" ? fn.arguments
          : JSON.stringify(fn.arguments)})${status}`}));
    }
    return box;
  });
  const sampled = (ep.spans || []).filter((s) => s.mask === 1);
  if (ep.termination === "length" && sampled.length) {  // the cut turn never became a message
    nodes.push(el("div", {cls: "turn assistant cut"},
      el("b", {text: "assistant (cut at the token budget, not parsed): "}),
      sampled[sampled.length - 1].text));
  }
  return nodes;
}

async function openEpisode(id) {
  const ep = await getJSON(`/api/episodes/${encodeURIComponent(id)}`);
  for (const row of document.querySelectorAll("#episodes tbody tr")) {
    row.classList.toggle("open", row.dataset.id === id);
  }
  const box = document.getElementById("episode");
  box.hidden = false;
  box.dataset.id = id;
  document.getElementById("episode-title").textContent =
    `${id}: ${ep.task_id} (level ${ep.level ?? "?"}, step ${ep.step ?? "eval"}) ` +
    `${ep.termination}, reward ${fmt(ep.reward.total)}`;
  document.getElementById("reward").replaceChildren(...rewardTable(ep.reward));
  document.getElementById("per-turn").replaceChildren(...perTurnTable(ep.reward.per_turn || []));
  document.getElementById("turns").replaceChildren(...turnNodes(ep));
  const spans = ep.spans || [];
  document.getElementById("mask").replaceChildren(...(spans.length ? spans.map((s) =>
    el("span", {cls: `m${s.mask}`, title: `${s.tokens} tokens, mask ${s.mask}`, text: s.text}))
    : [el("i", {text: "this episode was logged without its tokens (an evaluation, or an " +
                      "older run)"})]));
}

async function main() {
  for (const name of FILTERS) {
    document.getElementById(`f-${name}`).addEventListener("change", loadEpisodes);
  }
  for (const id of ["f-layer-min", "f-layer-max"]) {
    document.getElementById(id).addEventListener("change", loadEpisodes);
  }
  await Promise.all([loadRun(), loadCurves(), loadFacets()]);
  await loadEpisodes();
  document.body.dataset.ready = "1";
}

main().catch((err) => {
  document.body.dataset.error = String(err);
  document.getElementById("run-state").textContent = `error: ${err}`;
});
