// The swarmrl dashboard: one run's summary from GET /v1/runs/{run}/summary, then live from its
// Server-Sent Events stream. Every value is written with textContent (check names and reasons come from
// validators: never parsed as HTML). Plain SVG for the chart: nothing is loaded from anywhere else.
"use strict";

const SVG = "http://www.w3.org/2000/svg";
const POLL_MS = 5000; // how often the page polls the summary when the server has no stream to spare
const STREAM_RETRY_MS = 60000; // how long it polls before asking for a stream again
const PACKS_MS = 5000; // how often the community task packs are read
let updates = 0;
let lastUpdate = 0;
let mode = "live"; // "live": pushed by the event stream · "polling": the server's stream budget was full

function $(id) { return document.getElementById(id); }
function short(key) { return key.slice(0, 12); }
function fmt(n) { return n === null || n === undefined ? "–" : Number(n).toLocaleString("en-US"); }
function ago(ts, now) {
  if (ts === null || ts === undefined) return "–";
  const s = Math.max(0, now - ts);
  if (s < 90) return `${s.toFixed(0)}s ago`;
  if (s < 5400) return `${(s / 60).toFixed(0)}m ago`;
  return `${(s / 3600).toFixed(1)}h ago`;
}

function cell(row, text, cls) {
  const td = document.createElement("td");
  td.textContent = text;
  if (cls) td.className = cls;
  row.appendChild(td);
  return td;
}

function fillTable(id, items, render) {
  const body = $(id).tBodies[0];
  const rows = items.map((item) => { const tr = document.createElement("tr"); render(tr, item); return tr; });
  body.replaceChildren(...rows);
}

function svg(tag, attrs, text) {
  const el = document.createElementNS(SVG, tag);
  for (const [k, v] of Object.entries(attrs)) el.setAttribute(k, String(v));
  if (text !== undefined) el.textContent = text;
  return el;
}

const COLORS = ["#2563eb", "#db2777", "#059669", "#d97706", "#7c3aed", "#0891b2"];

function emptyNote(container, text) {
  const empty = document.createElement("p");
  empty.className = "empty";
  empty.textContent = text;
  container.replaceChildren(empty);
}

// A line chart of series [{name, points: [{x, y}]}] (y may be missing for some x), the axes' extremes labelled.
function lineChart(container, series, xLabel, emptyText) {
  const drawn = series
    .map((s, i) => ({ ...s, color: COLORS[i % COLORS.length],
      shown: s.points.filter((p) => p.y !== null && p.y !== undefined) }))
    .filter((s) => s.shown.length);
  if (!drawn.length) { emptyNote(container, emptyText); return; }
  // Drawn at the container's own pixel width so that text keeps its size on a phone and on a wide screen.
  const W = Math.max(280, container.clientWidth - 16), H = 220, L = 48, R = 12, T = 12, B = 28;
  const all = drawn.flatMap((s) => s.shown);
  const xs = all.map((p) => p.x), ys = all.map((p) => p.y);
  let [x0, x1] = [Math.min(...xs), Math.max(...xs)];
  let [y0, y1] = [Math.min(...ys), Math.max(...ys)];
  if (x0 === x1) { x0 -= 1; x1 += 1; }
  if (y0 === y1) { y0 -= 0.5; y1 += 0.5; }
  const px = (x) => L + ((x - x0) / (x1 - x0)) * (W - L - R);
  const py = (y) => H - B - ((y - y0) / (y1 - y0)) * (H - T - B);
  const root = svg("svg", { viewBox: `0 0 ${W} ${H}`, width: W, height: H });
  root.appendChild(svg("line", { x1: L, y1: H - B, x2: W - R, y2: H - B, stroke: "#c4c9d2" }));
  root.appendChild(svg("line", { x1: L, y1: T, x2: L, y2: H - B, stroke: "#c4c9d2" }));
  for (const y of [y0, y1]) {
    root.appendChild(svg("text", { x: L - 4, y: py(y) + 4, "text-anchor": "end", "font-size": 11, fill: "#6b7280" },
      y.toFixed(3)));
  }
  const [xMin, xMax] = [Math.min(...xs), Math.max(...xs)];
  const xEnds = xMin === xMax ? [[xMin, "middle"]] : [[xMin, "start"], [xMax, "end"]];
  for (const [x, anchor] of xEnds) {
    root.appendChild(svg("text", { x: px(x), y: H - 8, "text-anchor": anchor, "font-size": 11, fill: "#6b7280" },
      `${xLabel} ${Math.round(x)}`));
  }
  for (const s of drawn) {
    const path = s.shown.map((p, i) => `${i ? "L" : "M"}${px(p.x).toFixed(1)},${py(p.y).toFixed(1)}`).join(" ");
    root.appendChild(svg("path", { d: path, fill: "none", stroke: s.color, "stroke-width": 2 }));
    for (const p of s.shown) {
      const dot = svg("circle", { cx: px(p.x), cy: py(p.y), r: 3, fill: s.color, "data-series": s.name });
      dot.appendChild(svg("title", {}, `${xLabel} ${p.x}: ${s.name} ${p.y.toFixed(4)}`));
      root.appendChild(dot);
    }
  }
  container.replaceChildren(root);
  return drawn;
}

function legend(id, drawn) {
  const items = (drawn || []).map((s) => {
    const li = document.createElement("li");
    const swatch = document.createElement("span");
    swatch.className = "swatch";
    swatch.style.background = s.color;
    li.append(swatch, document.createTextNode(s.name));
    li.dataset.series = s.name;
    return li;
  });
  $(id).replaceChildren(...items);
}

function drawCharts(summary) {
  const rewards = summary.steps.map((s) => ({ x: s.step, y: s.mean_reward }));
  lineChart($("reward-chart"), [{ name: "reward", points: rewards }], "step", "no judged files yet");
  // One line per eval figure the trainer reports (eval/avg@k, eval/pass@k, ...), whichever it sends.
  const names = [...new Set(summary.evals.flatMap((p) => Object.keys(p.metrics)))].sort();
  const series = names.map((name) => ({
    name, points: summary.evals.filter((p) => name in p.metrics).map((p) => ({ x: p.step, y: p.metrics[name] })),
  }));
  legend("eval-legend", lineChart($("eval-chart"), series, "step", "the trainer has reported no eval yet"));
  drawFunctions(summary.reward_functions || []);
}

// One line per reward function of the run (rewards/<name>/mean); the section shows once the trainer reports one.
function drawFunctions(points) {
  const names = [...new Set(points.flatMap((p) => Object.keys(p.metrics)))].filter((n) => n.endsWith("/mean")).sort();
  $("reward-functions").hidden = !names.length;
  const series = names.map((name) => ({
    name: name.slice("rewards/".length, -"/mean".length),
    points: points.filter((p) => name in p.metrics).map((p) => ({ x: p.step, y: p.metrics[name] })),
  }));
  legend("function-legend", lineChart($("function-chart"), series, "step", "no reward function reported yet"));
}

// The relay tree as the coordinator placed it: each relay once, under the upstream its breadth-first walk from
// the origins reached first (`parent`, `depth`), parents before children; relays reachable only through a cycle
// of claims come last with no parent. One pass, one element per relay: what relays claim cannot make it slower.
// What a ranked list left out, by tier: "and 9,500 never-proven nodes not shown" ("" when nothing was).
function leftOut(counts, noun, lead = "") {
  const parts = Object.entries(counts || {}).map(([tier, n]) => `${fmt(n)} ${tier} ${noun}`);
  return parts.length ? `${lead}and ${parts.join(", ")} not shown` : "";
}

function relayTree(relays, now, left = {}) {
  const lists = new Map(); // URL → the list its mirrors hang from
  const origins = [];
  const unplaced = [];
  function item(label, cls, depth) {
    const li = document.createElement("li");
    const text = document.createElement("span");
    text.className = cls;
    text.textContent = label;
    li.appendChild(text);
    li.dataset.depth = String(depth);
    return li;
  }
  function listUnder(li, url) {
    const ul = document.createElement("ul");
    li.appendChild(ul);
    lists.set(url, ul);
  }
  for (const r of relays) {
    const held = r.versions.filter((v) => v.complete).map((v) => v.version);
    const latest = held.length ? `v${Math.max(...held)}` : "no complete version";
    const label = `${r.operator ? "operator's relay" : "relay"} ${short(r.node_id)} · ${r.url} · ${r.health} · ${latest} · `
      + `${mb(r.served_bytes)} served · reported ${ago(r.reported_at, now)}`;
    const li = item(label, `state-${r.health}`, r.depth);
    li.dataset.nodeId = r.node_id;
    if (r.parent === null) {
      unplaced.push(li);
      continue;
    }
    if (!lists.has(r.parent)) { // an origin: an upstream no reporting relay serves
      const origin = item(`origin ${r.parent}`, "origin", 0);
      listUnder(origin, r.parent);
      origins.push(origin);
    }
    lists.get(r.parent).appendChild(li);
    if (!lists.has(r.url)) listUnder(li, r.url);
  }
  if (!origins.length && !unplaced.length) {
    const li = document.createElement("li");
    li.className = "empty";
    li.textContent = "no relay reports to this coordinator";
    origins.push(li);
  }
  const more = leftOut(left, "relays");
  if (more) {
    const li = document.createElement("li");
    li.className = "empty";
    li.textContent = more;
    unplaced.push(li);
  }
  $("relay-tree").replaceChildren(...origins, ...unplaced);
}

function mb(bytes) { return `${(bytes / 1e6).toFixed(1)} MB`; }

// Each version's spread over the relays and the relays' mirror throughput (bytes over seconds, summed).
function relaySpread(relays, version) {
  const held = relays.flatMap((r) => r.versions.filter((v) => v.version === version && v.complete));
  const timed = held.filter((v) => v.seconds);
  const seconds = timed.reduce((a, v) => a + v.seconds, 0);
  return {
    complete: held.length,
    rate: seconds > 0 ? timed.reduce((a, v) => a + v.bytes, 0) / seconds / 1e6 : null,
  };
}

function renderIslands(points) {
  $("islands").hidden = !points.length;
  if (!points.length) return;
  const get = (p, name) => p.metrics[`islands/${name}`];
  const last = points[points.length - 1];
  $("island-of").textContent = `${fmt(get(last, "island"))} of ${fmt(get(last, "islands"))}`;
  $("island-rounds").textContent = fmt(get(last, "round"));
  $("island-quorum").textContent = `${fmt(get(last, "contributors"))} / ${fmt(get(last, "participants"))}`;
  $("island-bytes").textContent = get(last, "wire_bytes") === undefined ? "–" : mb(get(last, "wire_bytes"));
  fillTable("island-merges", points.slice(-12).reverse(), (tr, p) => {
    cell(tr, String(p.step));
    for (const name of ["round", "participants", "contributors"]) cell(tr, fmt(get(p, name)));
    cell(tr, get(p, "wire_bytes") === undefined ? "–" : mb(get(p, "wire_bytes")));
    cell(tr, get(p, "seconds") === undefined ? "–" : get(p, "seconds").toFixed(2));
    cell(tr, get(p, "committed") ? "yes" : "no");
    cell(tr, get(p, "healed") ? "yes" : "no");
  });
}

let latest = null;  // the last summary, redrawn when the window changes size

function render(summary) {
  latest = summary;
  const now = summary.generated_at;
  const run = summary.run;
  $("run-id").textContent = run.run_id;
  const step = $("step");
  step.textContent = fmt(run.current_step);
  step.dataset.step = String(run.current_step);
  $("run-status").textContent = run.status;
  $("rate").textContent = summary.steps_per_minute === null ? "–" : summary.steps_per_minute.toFixed(2);
  const files = summary.submissions;
  $("accepted").textContent = fmt(files.accepted);
  $("files").textContent =
    `accepted · ${fmt(files.rejected)} rejected · ${fmt(files.pending)} pending · ${fmt(files.voided)} voided`;
  $("backlog").textContent = fmt(summary.backlog.pending);
  $("judging").textContent = `${fmt(summary.backlog.judging)} being judged`;
  const open = summary.open_step;
  $("units").textContent = `${fmt(open.accepted)} / ${fmt(open.demand)}`;
  $("units-detail").textContent =
    `accepted of demand · ${fmt(open.leased)} leased · ${fmt(open.submitted)} submitted · ${fmt(open.open_units)} open`;

  drawCharts(summary);

  $("nodes-total").textContent = `(${summary.nodes.length} of ${summary.nodes_total}`
    + `${leftOut(summary.nodes_left_out, "nodes", " · ")})`;
  fillTable("nodes", summary.nodes, (tr, n) => {
    tr.dataset.nodeId = n.node_id;
    tr.dataset.banned = String(n.banned);
    if (n.banned) tr.className = "banned";
    cell(tr, short(n.node_id)).title = n.node_id;
    cell(tr, n.role);
    cell(tr, n.status === "active" ? n.health : n.status, `state-${n.health}`);
    cell(tr, n.policy_step === null ? "–" : String(n.policy_step));
    for (const key of ["held", "accepted", "rejected", "pending", "trained", "credit_tokens", "wiped_tokens"]) {
      cell(tr, fmt(n[key]));
    }
    cell(tr, n.banned ? "BANNED" : "no", n.banned ? "ban" : "").dataset.col = "banned";
    cell(tr, Object.entries(n.rejections).map(([c, k]) => `${c}×${k}`).join(", ") || "–");
    cell(tr, n.device || "–");
  });

  const checks = Object.entries(summary.rejections).sort((a, b) => b[1] - a[1]);
  fillTable("rejections", checks, (tr, [check, count]) => { cell(tr, check); cell(tr, fmt(count)); });
  fillTable("validators", summary.backlog.validators, (tr, v) => {
    cell(tr, short(v.node_id)).title = v.node_id;
    cell(tr, fmt(v.verdicts));
    cell(tr, fmt(v.rejected));
    cell(tr, fmt(v.judging));
    cell(tr, ago(v.last_verdict_at, now));
    cell(tr, v.device || "–");
  });
  const versions = summary.steps.slice(-12).reverse();
  // A trainer that names no SHARDCAST manifest when it opens a step: no column of dashes.
  $("versions").classList.toggle("no-manifest", !versions.some((s) => s.manifest_sha256));
  // A version's spread: the active nodes whose last heartbeat says they generate with it.
  const holding = {};
  for (const n of summary.nodes) {
    if (n.status === "active" && n.policy_step !== null) holding[n.policy_step] = (holding[n.policy_step] || 0) + 1;
  }
  const relays = summary.relays;
  fillTable("versions", versions, (tr, s) => {
    cell(tr, String(s.step));
    cell(tr, s.manifest_sha256 ? short(s.manifest_sha256) : "–").title = s.manifest_sha256 || "";
    cell(tr, ago(s.published_at, now));
    cell(tr, fmt(holding[s.step] || 0));
    cell(tr, s.mean_reward === null ? "–" : `${s.mean_reward.toFixed(3)} (${s.rows} rows)`);
    const spread = relaySpread(relays, s.step);
    cell(tr, `${spread.complete} / ${relays.length}`);
    cell(tr, spread.rate === null ? "–" : spread.rate.toFixed(1));
  });
  relayTree(relays, now, summary.relays_left_out);
  renderIslands(summary.islands);

  updates += 1;
  lastUpdate = Date.now();
  const counter = $("updates");
  counter.dataset.count = String(updates);
  counter.textContent = `· ${updates} update${updates === 1 ? "" : "s"}`;
  setLive(true, mode);
}

// The run's community task packs: their own read (GET /v1/runs/{run}/packs), every few seconds, not with each
// summary; the section shows once a pack was submitted.
async function refreshPacks(run) {
  try {
    const response = await fetch(`/v1/runs/${encodeURIComponent(run)}/packs`);
    if (!response.ok) return;
    const packs = await response.json();
    $("packs").hidden = packs.length === 0;
    fillTable("pack-table", packs, (tr, p) => {
      tr.dataset.packId = String(p.id);
      cell(tr, p.label).title = p.digest;
      cell(tr, short(p.author)).title = p.author;
      cell(tr, p.refused_by ? `refused by ${p.refused_by}` : p.status, `pack-${p.status}`);
      cell(tr, Object.entries(p.checks).map(([name, status]) => `${name}:${status}`).join(" ") || "–");
      cell(tr, p.admission_seconds.toFixed(1));
      cell(tr, `${fmt(p.groups_kept)} / ${fmt(p.groups_seen)}`);
      cell(tr, fmt(p.rows_trained));
      cell(tr, fmt(p.credit.pending_rows + p.credit.unlocked_rows));
      cell(tr, fmt(p.credit.wiped_rows));
      cell(tr, p.reason || "");
    });
  } catch (err) {
    // the next refresh tries again; the summary's own liveness says when the coordinator is gone
  }
}

function setLive(on, text) {
  $("live-dot").className = on ? "dot on" : "dot off";
  $("live").textContent = text;
}

async function pickRun() {
  const asked = new URLSearchParams(location.search).get("run");
  if (asked) return asked;
  const response = await fetch("/v1/runs");
  if (!response.ok) throw new Error(`GET /v1/runs: HTTP ${response.status}`);
  const runs = await response.json();
  if (!runs.length) throw new Error("this coordinator has no run yet");
  return (runs.find((r) => r.status === "open") || runs[0]).run_id;
}

// Live by the event stream; when the server refuses one (its budget of long-lived streams is spent, so node
// traffic keeps its connections) or the stream fails for good, poll the summary and ask again later.
function follow(base) {
  mode = "live";
  const source = new EventSource(`${base}/stream`);
  source.addEventListener("summary", (event) => render(JSON.parse(event.data)));
  source.onerror = () => {
    if (source.readyState !== EventSource.CLOSED) {
      setLive(false, "disconnected: reconnecting…");
      return;
    }
    source.close();
    mode = "polling";
    poll(base, Date.now() + STREAM_RETRY_MS);
  };
}

async function poll(base, until) {
  if (Date.now() >= until) {
    follow(base);
    return;
  }
  try {
    const response = await fetch(base);
    if (response.ok) render(await response.json());
    else setLive(false, `GET ${base}: HTTP ${response.status}`);
  } catch (err) {
    setLive(false, String(err.message || err));
  }
  setTimeout(() => poll(base, until), POLL_MS);
}

async function start() {
  let run;
  try {
    run = await pickRun();
  } catch (err) {
    setLive(false, String(err.message || err));
    setTimeout(start, 3000);
    return;
  }
  const base = `/v1/runs/${encodeURIComponent(run)}/summary`;
  $("summary-link").href = base;
  const response = await fetch(base);
  if (response.ok) render(await response.json());
  else setLive(false, `GET ${base}: HTTP ${response.status}`);
  follow(base);
  refreshPacks(run);
  setInterval(() => refreshPacks(run), PACKS_MS);
  setInterval(() => {
    if (lastUpdate && Date.now() - lastUpdate > 15000) {
      setLive(false, `no update for ${((Date.now() - lastUpdate) / 1000).toFixed(0)}s`);
    }
  }, 5000);
}

document.addEventListener("DOMContentLoaded", start);
window.addEventListener("resize", () => { if (latest) drawCharts(latest); });
