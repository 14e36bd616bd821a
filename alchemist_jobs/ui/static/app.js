// The Alchemist dashboard: one page over the JSON API under /api/v1. No framework, no
// network access beyond this server; charts are plain SVG.
"use strict";

const API = "/api/v1";
const STATES = ["pending", "queued", "admitted", "preempted", "running", "restarting", "succeeded", "failed", "cancelled", "lost"];
const FINAL = new Set(["succeeded", "failed", "cancelled", "lost"]);
const POLL_MS = 1500;
let timers = [];          // the current view's pollers, cleared when the view changes
let runsSort = { key: "created", order: "desc" };

// --- signing in: the URL `alchemist ui` printed carries a one-time token in its fragment. ---
// The page trades it for an HttpOnly session cookie (the server's, never readable here) and
// forgets it: every tab of this browser, and any link to a run, is then signed in. The token
// is spent by that first browser; another one asks for the scripts' token.
let signingIn = null;
(function takeToken() {
  const m = location.hash.match(/token=([A-Za-z0-9_-]+)/);
  if (m) {
    history.replaceState(null, "", location.pathname + "#/runs");
    signingIn = signIn(m[1]).catch((e) => askToken(e.message));
  }
})();

class ApiError extends Error {
  constructor(status, detail) { super(detail); this.status = status; }
}

async function signIn(token) {
  const resp = await fetch(API + "/session", {
    method: "POST", credentials: "same-origin",
    headers: { "Accept": "application/json", "Content-Type": "application/json", "X-Alchemist-Request": "1" },
    body: JSON.stringify({ token }),
  });
  if (!resp.ok) {
    let body = null;
    try { body = await resp.json(); } catch (e) { body = null; }
    throw new ApiError(resp.status, (body && body.detail) || resp.statusText);
  }
  document.getElementById("token-form").hidden = true;
}

async function api(path, options = {}) {
  if (signingIn) await signingIn;
  const headers = { "Accept": "application/json" };
  if (options.method && options.method !== "GET") {
    headers["X-Alchemist-Request"] = "1";   // the server refuses changes without it
    headers["Content-Type"] = "application/json";
  }
  const resp = await fetch(API + path, { ...options, headers, credentials: "same-origin" });
  let body = null;
  try { body = await resp.json(); } catch (e) { body = null; }
  if (!resp.ok) {
    if (resp.status === 401) askToken();
    throw new ApiError(resp.status, (body && body.detail) || resp.statusText);
  }
  document.getElementById("token-form").hidden = true;
  return body;
}

function askToken(why) {
  const form = document.getElementById("token-form");
  form.hidden = false;
  if (why) document.getElementById("token-why").textContent = why;
  form.onsubmit = async (ev) => {
    ev.preventDefault();
    const input = document.getElementById("token-input");
    try {
      await signIn(input.value.trim());
    } catch (e) {
      document.getElementById("token-why").textContent = e.message;
      return;
    } finally {
      input.value = "";
    }
    document.getElementById("token-why").textContent = "";
    route();
  };
}

function banner(text) {
  const b = document.getElementById("banner");
  b.textContent = text || "";
  b.hidden = !text;
}

// --- small helpers -------------------------------------------------------------------------
function el(tag, attrs = {}, ...children) {
  const e = document.createElement(tag);
  for (const [k, v] of Object.entries(attrs)) {
    if (k === "class") e.className = v; else if (k === "text") e.textContent = v;
    else e.setAttribute(k, v);
  }
  for (const c of children) e.append(c);
  return e;
}
const fmt = (x, d = 4) => (x === null || x === undefined ? "-" : Number(x).toFixed(d));
const fmtInt = (x) => (x === null || x === undefined ? "-" : Math.round(x).toLocaleString());
function age(ts) {
  if (!ts) return "-";
  const s = Math.max(0, Date.now() / 1000 - ts);
  if (s < 60) return Math.floor(s) + "s";
  if (s < 3600) return Math.floor(s / 60) + "m";
  if (s < 86400) return Math.floor(s / 3600) + "h";
  return Math.floor(s / 86400) + "d";
}
function bytes(n) {
  const u = ["B", "KiB", "MiB", "GiB"]; let i = 0;
  while (n >= 1024 && i < u.length - 1) { n /= 1024; i++; }
  return n.toFixed(i ? 1 : 0) + " " + u[i];
}
// A duration in words a glance reads: 42s, 3m 07s, 2h 05m.
function duration(sec) {
  if (sec === null || sec === undefined) return "-";
  const s = Math.round(sec);
  if (s < 60) return s + "s";
  if (s < 3600) return `${Math.floor(s / 60)}m ${String(s % 60).padStart(2, "0")}s`;
  return `${Math.floor(s / 3600)}h ${String(Math.floor((s % 3600) / 60)).padStart(2, "0")}m`;
}
function stateBadge(state) { return el("span", { class: "state " + state, text: state }); }
function every(ms, fn) { fn(); timers.push(setInterval(fn, ms)); }
const runPath = (r) => `/stacks/${encodeURIComponent(r.stack)}/runs/${encodeURIComponent(r.run_id)}`;

// --- routing -------------------------------------------------------------------------------
function route() {
  timers.forEach(clearInterval); timers = [];
  banner("");
  const parts = location.hash.replace(/^#\/?/, "").split("/").map(decodeURIComponent);
  for (const a of document.querySelectorAll("header nav a")) {
    a.classList.toggle("active", a.id === "nav-" + (parts[0] === "run" ? "runs" : parts[0] || "runs"));
  }
  const view = document.getElementById("view");
  const page = { run: "run", submit: "submit", stacks: "stacks" }[parts[0]] || "runs";
  view.replaceChildren(document.getElementById("tpl-" + page).content.cloneNode(true));
  if (page === "run") showRun(parts[1], parts[2]);
  else if (page === "submit") showSubmit();
  else if (page === "stacks") showStacks();
  else showRuns();
}
window.addEventListener("hashchange", route);
window.addEventListener("DOMContentLoaded", route);

// --- runs ----------------------------------------------------------------------------------
async function showRuns() {
  const stateSel = document.getElementById("filter-state");
  STATES.forEach((s) => stateSel.append(el("option", { value: s, text: s })));
  try {
    const stacks = await api("/stacks");
    const stackSel = document.getElementById("filter-stack");
    stacks.forEach((s) => stackSel.append(el("option", { value: s.name, text: s.name })));
  } catch (e) { banner(e.message); }
  for (const th of document.querySelectorAll("#runs-table th[data-sort]")) {
    th.onclick = () => {
      const key = th.dataset.sort;
      runsSort = { key, order: runsSort.key === key && runsSort.order === "desc" ? "asc" : "desc" };
      loadRuns();
    };
  }
  for (const id of ["filter", "filter-state", "filter-stack"]) {
    document.getElementById(id).addEventListener("input", loadRuns);
  }
  every(POLL_MS, loadRuns);
}

async function loadRuns() {
  const params = new URLSearchParams({ sort: runsSort.key, order: runsSort.order, limit: "1000" });
  const q = document.getElementById("filter");
  if (!q) return;
  if (q.value) params.set("q", q.value.toLowerCase());
  const st = document.getElementById("filter-state").value;
  if (st) params.set("state", st);
  const sk = document.getElementById("filter-stack").value;
  if (sk) params.set("stack", sk);
  let data;
  try { data = await api("/runs?" + params); } catch (e) { banner(e.message); return; }
  const tbody = document.querySelector("#runs-table tbody");
  if (!tbody) return;
  for (const th of document.querySelectorAll("#runs-table th[data-sort]")) {
    th.classList.toggle("sorted", th.dataset.sort === runsSort.key);
    th.classList.toggle("asc", th.dataset.sort === runsSort.key && runsSort.order === "asc");
  }
  const rows = data.runs.map((r) => {
    const bar = el("span", { class: "bar" }, el("span"));
    bar.firstChild.style.width = ((r.progress || 0) * 100).toFixed(1) + "%";
    // Each cell names its column (data-col): the runs of different algorithms, results and
    // failures tell apart at a glance.
    const td = (col, attrs, ...children) => el("td", { "data-col": col, ...attrs }, ...children);
    const tr = el("tr", { class: "link", "data-run": r.run_id, "data-stack": r.stack, "data-state": r.state },
      td("run", {}, el("a", { href: "#/run/" + encodeURIComponent(r.stack) + "/" + encodeURIComponent(r.run_id), text: r.run_id })),
      td("stack", { text: r.stack }),
      td("state", {}, stateBadge(r.state)),
      td("progress", {}, bar, " ", r.step === null ? "" : `${r.step}/${r.total_steps ?? "?"}`),
      td("algorithm", { text: r.algorithm || "-" }),
      td("loss", { text: fmt(r.loss) }),
      td("accuracy", { text: fmt(r.accuracy) }),
      td("samples_per_s", { text: fmtInt(r.samples_per_s) }),
      td("duration", { text: duration(r.duration_s), title: r.ended ? "ended " + new Date(r.ended * 1000).toLocaleString() : "" }),
      td("age", { text: age(r.created), title: r.created ? new Date(r.created * 1000).toLocaleString() : "" }),
      td("owner", { text: r.owner || "-" }),
      td("restarts", { text: String(r.restarts) }),
      td("reason", { class: "reason", text: r.reason || "", title: r.reason || "" }));
    tr.onclick = (ev) => { if (ev.target.tagName !== "A") location.hash = "#/run/" + encodeURIComponent(r.stack) + "/" + encodeURIComponent(r.run_id); };
    return tr;
  });
  tbody.replaceChildren(...rows);
  document.getElementById("runs-count").textContent =
    data.total > data.runs.length ? `${data.runs.length} of ${data.total} runs`
      : `${data.total} run${data.total === 1 ? "" : "s"}`;
  document.getElementById("runs-problems").replaceChildren(
    ...data.problems.map((p) => el("p", { class: "error", text: p.detail })));
  document.getElementById("live").textContent = "updated " + new Date().toLocaleTimeString();
  // For bench/ui_dashboard.py: when the first table of this page load was on screen.
  if (!performance.getEntriesByName("runs-rendered").length) performance.mark("runs-rendered");
}

// --- one run -------------------------------------------------------------------------------
function showRun(stack, runId) {
  const r = { stack, run_id: runId };
  document.getElementById("run-title").textContent = runId;
  const log = { rank: 0, offset: 0, chosen: false };
  let finished = false;
  document.getElementById("cancel").onclick = async () => {
    if (!confirm(`Cancel ${runId}? Every process of the run is stopped.`)) return;
    const btn = document.getElementById("cancel");
    btn.disabled = true; btn.textContent = "Cancelling...";
    try { await api(runPath(r) + "/cancel", { method: "POST" }); }
    catch (e) { banner(e.message); btn.disabled = false; btn.textContent = "Cancel run"; }
    loadDetail();
  };
  document.getElementById("remove").onclick = async () => {
    if (!confirm(`Remove ${runId}? Its logs, checkpoints and metrics are deleted.`)) return;
    try { await api(runPath(r), { method: "DELETE" }); location.hash = "#/runs"; }
    catch (e) { banner(e.message); }
  };
  document.getElementById("log-rank").onchange = (ev) => {
    log.rank = Number(ev.target.value); log.offset = 0; log.chosen = true;
    document.getElementById("log").textContent = ""; loadLog(true);
  };
  let gone = false;
  async function loadDetail() {
    let d;
    try { d = await api(runPath(r)); } catch (e) {
      banner(e.message);
      if (e.status === 404) {  // no such run (or removed): nothing will change, stop asking
        gone = true; timers.forEach(clearInterval); timers = [];
        document.getElementById("run-title").textContent = `${runId}: no such run on stack ${stack}`;
      }
      return;
    }
    finished = FINAL.has(d.state);
    const stateEl = document.getElementById("run-state");
    if (!stateEl) return;
    stateEl.replaceWith(Object.assign(stateBadge(d.state), { id: "run-state" }));
    document.getElementById("run-reason").textContent = d.reason || "";
    const btn = document.getElementById("cancel");
    btn.hidden = finished;
    document.getElementById("remove").hidden = !finished || d.stack !== "local";
    // Every other metric the script reported, as it reported it last (accuracy has its own).
    const reported = Object.keys(d.metrics || {}).filter((k) => k !== "accuracy" && k !== "loss").sort()
      .map((k) => [k, fmt(d.metrics[k])]);
    const facts = [["stack", d.stack], ["job", d.name], ["algorithm", d.algorithm || "-"], ["workers", d.workers],
      ["restarts", d.restarts], ["step", d.step === null ? "-" : `${d.step}/${d.total_steps}`], ["loss", fmt(d.loss)],
      ["samples/s", fmtInt(d.samples_per_s)], ["accuracy", fmt(d.accuracy)], ...reported,
      ...(d.requirements ? [["packages", `${d.requirements.packages.join(" ")} (lock ${d.requirements.sha256.slice(0, 16)})`]] : []),
      ["duration", duration(d.duration_s)], ["owner", d.owner || "-"],
      ["started", d.created ? new Date(d.created * 1000).toLocaleString() : "-"]];
    document.getElementById("run-facts").replaceChildren(
      ...facts.map(([k, v]) => el("div", {}, el("b", { text: k }), String(v))));
    const links = [];
    for (const [k, v] of Object.entries(d.links)) {
      if (v && /^https?:\/\//.test(v)) links.push(el("a", { href: v, target: "_blank", rel: "noopener noreferrer", text: k }));
    }
    document.getElementById("run-links").replaceChildren(...links);
    // The workers, then the parameter servers of an async run (the run's processes).
    document.querySelector("#ranks tbody").replaceChildren(...d.ranks.map((k) =>
      el("tr", { "data-role": "worker" }, el("td", { text: String(k.rank) }), el("td", {}, stateBadge(k.state)),
        el("td", { text: String(k.restarts) }), el("td", { text: k.node }), el("td", { text: k.pid ?? "-" }))),
      ...(d.servers || []).map((k) =>
      el("tr", { "data-role": "server" }, el("td", { text: `server ${k.shard}`, title: k.updates === null ? "" : `${k.updates} updates` }),
        el("td", {}, stateBadge(k.state)), el("td", { text: String(k.restarts) }), el("td", { text: k.node }),
        el("td", { text: k.pid ?? "-" }))));
    const rankSel = document.getElementById("log-rank");
    const n = Math.max(d.workers, 1);
    if (rankSel.options.length !== n) {
      rankSel.replaceChildren(...Array.from({ length: n }, (_, i) => el("option", { value: String(i), text: String(i) })));
      rankSel.value = String(log.rank);
    }
    if (d.failed_rank != null && !log.chosen && log.rank !== d.failed_rank) {
      // A failed run opens the log of the rank that failed, not rank 0's "connection closed".
      log.rank = d.failed_rank; log.offset = 0; rankSel.value = String(log.rank);
      document.getElementById("log").textContent = ""; loadLog(true);
    }
    document.querySelector("#checkpoints tbody").replaceChildren(...d.checkpoints.map((c) =>
      el("tr", {}, el("td", { text: c.name }), el("td", { text: c.holder }), el("td", { text: c.step ?? "-" }), el("td", { text: bytes(c.bytes) }),
        el("td", { text: new Date(c.modified * 1000).toLocaleTimeString() }))));
    document.getElementById("run-spec").textContent = toYaml(d.spec);
  }
  let series = null;
  // A chart for each metric the script reported (accuracy is the accuracy chart's), made the
  // first time its name comes and kept, so a chart never flickers between refreshes.
  function metricChart(name) {
    const box = document.getElementById("metric-charts");
    if (!box) return null;
    for (const svg of box.querySelectorAll("svg[data-metric]")) if (svg.dataset.metric === name) return svg;
    const svg = document.createElementNS("http://www.w3.org/2000/svg", "svg");
    svg.setAttribute("class", "chart");
    svg.dataset.metric = name;
    const figs = [...box.children, null];
    const before = figs.find((f) => f === null || f.dataset.metric > name);
    box.insertBefore(el("figure", { "data-metric": name }, el("figcaption", { text: name }), svg), before);
    return svg;
  }
  function drawAll() {
    if (!series) return;
    const keys = ["loss", "accuracy", "throughput", "communication"];
    const reported = Object.entries(series.metrics || {}).filter(([k]) => k !== "accuracy");
    // One x range for every chart, so that the same step sits at the same place in each.
    const steps = keys.flatMap((k) => series[k].map((p) => p[0]))
      .concat(reported.flatMap(([, pts]) => pts.map((p) => p[0])));
    const range = steps.length ? [Math.min(...steps), Math.max(...steps)] : null;
    const logLoss = document.getElementById("loss-log").checked;
    for (const k of keys) {
      const svg = document.getElementById("chart-" + k);
      if (svg) drawChart(svg, series[k], { range, log: k === "loss" && logLoss });
    }
    for (const [name, points] of reported) {
      const svg = metricChart(name);
      if (svg) drawChart(svg, points, { range });
    }
  }
  document.getElementById("loss-log").onchange = drawAll;
  async function loadMetrics() {
    try { series = await api(runPath(r) + "/metrics"); } catch (e) { return; }
    drawAll();
  }
  async function loadLog(force) {
    if (!force && !document.getElementById("log-follow").checked) return;
    let c;
    try { c = await api(runPath(r) + `/logs?rank=${log.rank}&offset=${log.offset}`); } catch (e) { return; }
    const pre = document.getElementById("log");
    if (!pre) return;
    if (c.offset === 0 && log.offset !== 0) pre.textContent = "";
    const atEnd = pre.scrollTop + pre.clientHeight >= pre.scrollHeight - 4;
    pre.append(c.text);
    log.offset = c.next_offset;
    if (atEnd) pre.scrollTop = pre.scrollHeight;
  }
  // Poll until the run is over, then once more for the final numbers.
  let last = false;
  every(POLL_MS, async () => {
    if (last || gone) return;
    if (finished) last = true;
    await loadDetail();
    if (gone) return;
    await Promise.all([loadMetrics(), loadLog(false)]);
  });
}

// A plain SVG line chart of [step, value] points.
function drawChart(svg, points, opts = {}) {
  const W = 400, H = 160, L = 48, R = 8, T = 8, B = 20;
  svg.setAttribute("viewBox", `0 0 ${W} ${H}`);
  svg.setAttribute("data-points", String(points.length));
  svg.setAttribute("data-last", points.length ? String(points[points.length - 1][1]) : "");
  // the newest point's step: it moves on when the count, thinned at the server's cap, stays
  svg.setAttribute("data-last-step", points.length ? String(points[points.length - 1][0]) : "");
  const ns = "http://www.w3.org/2000/svg";
  const mk = (tag, attrs, text) => {
    const e = document.createElementNS(ns, tag);
    for (const [k, v] of Object.entries(attrs)) e.setAttribute(k, v);
    if (text !== undefined) e.textContent = text;
    return e;
  };
  if (!points.length) {
    svg.replaceChildren(mk("text", { x: W / 2, y: H / 2, "text-anchor": "middle" }, "no data yet"));
    return;
  }
  // Log scale: log10 of the values (a loss spans decades); points <= 0 cannot be drawn.
  if (opts.log) points = points.filter((p) => p[1] > 0).map((p) => [p[0], Math.log10(p[1])]);
  svg.setAttribute("data-scale", opts.log ? "log" : "linear");
  if (!points.length) {
    svg.replaceChildren(mk("text", { x: W / 2, y: H / 2, "text-anchor": "middle" }, "no data yet"));
    return;
  }
  const xs = points.map((p) => p[0]), ys = points.map((p) => p[1]);
  let [x0, x1, y0, y1] = [Math.min(...xs), Math.max(...xs), Math.min(...ys), Math.max(...ys)];
  if (opts.range) [x0, x1] = opts.range;
  if (x1 === x0) x1 = x0 + 1;
  if (y1 === y0) { y1 += Math.abs(y1) * 0.05 || 1; y0 -= Math.abs(y0) * 0.05 || 1; }
  const px = (x) => L + ((x - x0) / (x1 - x0)) * (W - L - R);
  const py = (y) => T + (1 - (y - y0) / (y1 - y0)) * (H - T - B);
  const plain = (v) => (Math.abs(v) >= 1000 ? v.toFixed(0) : Number(v.toPrecision(3)).toString());
  const label = (v) => plain(opts.log ? 10 ** v : v);
  svg.replaceChildren(
    mk("line", { x1: L, y1: H - B, x2: W - R, y2: H - B }),
    mk("line", { x1: L, y1: T, x2: L, y2: H - B }),
    mk("text", { x: L - 4, y: T + 8, "text-anchor": "end" }, label(y1)),
    mk("text", { x: L - 4, y: H - B, "text-anchor": "end" }, label(y0)),
    mk("text", { x: L, y: H - 4 }, "step " + x0),
    mk("text", { x: W - R, y: H - 4, "text-anchor": "end" }, "step " + x1),
    mk("polyline", { points: points.map((p) => `${px(p[0]).toFixed(1)},${py(p[1]).toFixed(1)}`).join(" ") }),
    // The latest point, drawn: a chart of one point (an ended run's final figure) shows it.
    mk("circle", { cx: px(xs[xs.length - 1]).toFixed(1), cy: py(ys[ys.length - 1]).toFixed(1), r: 2.5 }));
}

// The spec as YAML-like text (the API gives JSON; this is for reading only).
function toYaml(v, indent = "") {
  if (v === null || typeof v !== "object") return JSON.stringify(v);
  const lines = [];
  for (const [k, x] of Array.isArray(v) ? v.map((x, i) => ["-", x]) : Object.entries(v)) {
    const key = Array.isArray(v) ? "-" : k + ":";
    if (x !== null && typeof x === "object" && Object.keys(x).length) lines.push(indent + key + "\n" + toYaml(x, indent + "  "));
    else lines.push(indent + key + " " + (x !== null && typeof x === "object" ? (Array.isArray(x) ? "[]" : "{}") : JSON.stringify(x)));
  }
  return lines.join("\n");
}

// --- submit --------------------------------------------------------------------------------
async function showSubmit() {
  const sel = document.getElementById("submit-stack");
  try {
    (await api("/stacks")).forEach((s) => sel.append(el("option", { value: s.name, text: s.name })));
  } catch (e) { banner(e.message); }
  let filename = null;
  const text = document.getElementById("spec-text");
  text.oninput = () => { filename = null; };
  document.getElementById("spec-file").onchange = async (ev) => {
    const f = ev.target.files[0];
    if (!f) return;
    text.value = await f.text(); filename = f.name;
  };
  const errorEl = document.getElementById("submit-error"), plan = document.getElementById("submit-plan");
  async function send(path) {
    errorEl.hidden = true; plan.hidden = true;
    try {
      return await api(path, { method: "POST", body: JSON.stringify({ stack: sel.value, spec: text.value, filename }) });
    } catch (e) {
      errorEl.textContent = e.message; errorEl.hidden = false;
      return null;
    }
  }
  document.getElementById("check").onclick = async () => {
    const c = await send("/check");
    if (c) { plan.textContent = `${c.name}: ${c.workers} worker(s) on stack ${c.stack}\n\n${c.plan}`; plan.hidden = false; }
  };
  document.getElementById("start").onclick = async () => {
    const s = await send("/runs");
    if (s) location.hash = "#/run/" + encodeURIComponent(s.stack) + "/" + encodeURIComponent(s.run_id);
  };
}

// --- stacks --------------------------------------------------------------------------------
async function showStacks() {
  let stacks;
  try { stacks = await api("/stacks"); } catch (e) { banner(e.message); return; }
  document.getElementById("stacks").replaceChildren(...stacks.map((s) => {
    const rows = [["provider", s.provider], ["namespace", s.namespace], ["queue", s.queue],
      ["GPUs per node", s.gpus_per_node + (s.gpu_resource ? ` (${s.gpu_resource})` : "")],
      [(s.fabric || "fabric") + " per node", s.fabric_per_node || null],
      ["shared FS", Object.entries(s.shared_fs).map(([k, v]) => `${k}=${v}`).join(", ")],
      [s.cluster_label || "cluster", s.cluster ? `${s.cluster}` + (s.region ? ` (${s.region})` : "") : null],
      ...Object.entries(s.images).map(([k, v]) => ["image " + k, v]),
      ...Object.entries(s.monitoring).filter(([, v]) => v).map(([k, v]) => [k, v])];
    const dl = el("dl");
    for (const [k, v] of rows) if (v !== null && v !== undefined && v !== "") dl.append(el("dt", { text: k }), el("dd", { text: String(v) }));
    return el("div", { class: "card", "data-stack": s.name }, el("h2", { text: s.name }), dl);
  }));
}
