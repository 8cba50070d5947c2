// kvgov's operator console: plain JavaScript, no build step, no network
// beyond kvgov's own API (docs/formats/console.md). Every call carries the
// token the operator entered, kept in this tab's sessionStorage only; what a
// view shows is what that token may read.
"use strict";

const REFRESH_MS = 3000;
const TOKEN_KEY = "kvgov.token";
const TIERS = ["hbm", "dram", "disk", "remote", "unknown"];
const SOURCES = ["provider", "ride_engine", "native", "tool_result"];
const DIRECTIVE_PATH = ["planned", "dispatched", "acknowledged", "witnessed", "certified"];
const SVG_NS = "http://www.w3.org/2000/svg";

// ---------------------------------------------------------------------------
// Small helpers.

function el(tag, attributes = {}, ...children) {
  const node = document.createElement(tag);
  for (const [key, value] of Object.entries(attributes)) {
    if (key === "class") node.className = value;
    else if (key === "text") node.textContent = value;
    // Through the CSSOM: the page's CSP allows no inline style attribute.
    else if (key === "style") Object.assign(node.style, value);
    else if (key.startsWith("on")) node.addEventListener(key.slice(2), value);
    else node.setAttribute(key, value);
  }
  for (const child of children) {
    if (child !== null && child !== undefined) {
      node.append(child instanceof Node ? child : String(child));
    }
  }
  return node;
}

function svg(tag, attributes = {}) {
  const node = document.createElementNS(SVG_NS, tag);
  for (const [key, value] of Object.entries(attributes)) node.setAttribute(key, value);
  return node;
}

function short(id, length = 12) {
  return id && id.length > length ? id.slice(0, length) + "\u2026" : id || "";
}

function isoTime(ms) {
  return ms > 0 ? new Date(ms).toISOString().replace("T", " ").replace(/\.\d+Z$/, "") : "";
}

function seconds(ms) {
  return ms >= 60000 ? (ms / 60000).toFixed(1) + " min" : (ms / 1000).toFixed(1) + " s";
}

class ApiError extends Error {
  constructor(status, code, message) {
    super(message);
    this.status = status;
    this.code = code;
  }
}

async function api(path, options = {}) {
  const headers = { Accept: "application/json" };
  const token = sessionStorage.getItem(TOKEN_KEY);
  if (token) headers.Authorization = "Bearer " + token;
  if (options.body !== undefined) headers["Content-Type"] = "application/json";
  const response = await fetch(path, {
    method: options.method || "GET",
    headers,
    body: options.body === undefined ? undefined : JSON.stringify(options.body),
    cache: "no-store",
    credentials: "omit",
  });
  const text = await response.text();
  let json = null;
  try {
    json = text ? JSON.parse(text) : null;
  } catch {
    json = null;
  }
  if (!response.ok && !(options.accept || []).includes(response.status)) {
    const error = json && json.error ? json.error : { code: String(response.status), message: text };
    throw new ApiError(response.status, error.code, error.message);
  }
  return { status: response.status, json, text };
}

function describeError(error) {
  if (error instanceof ApiError) {
    if (error.status === 401) return "This kvgov needs a token: enter one above. (" + error.message + ")";
    if (error.status === 403) return "This token may not read this view: " + error.message;
    return "HTTP " + error.status + " " + error.code + ": " + error.message;
  }
  return String(error && error.message ? error.message : error);
}

function showError(message) {
  const box = document.getElementById("error");
  box.textContent = message || "";
  box.hidden = !message;
}

function fill(tbody, rows, empty) {
  tbody.replaceChildren(...rows);
  if (rows.length === 0) {
    const columns = tbody.closest("table").querySelectorAll("thead th").length;
    tbody.append(el("tr", {}, el("td", { colspan: columns, class: "empty", text: empty })));
  }
}

// ---------------------------------------------------------------------------
// Fleet.

function blockTotal(blocks) {
  return TIERS.reduce((sum, tier) => sum + (blocks[tier] || 0), 0);
}

// Every worker's bar is drawn to one scale, `scale` blocks for the full
// track (the fleet's largest worker), so 5 blocks draw short beside 4,096.
function tierBar(blocks, scale) {
  const bar = el("div", { class: "bar", role: "img" });
  const parts = [];
  for (const tier of TIERS) {
    const count = blocks[tier] || 0;
    if (count === 0) continue;
    parts.push(tier + " " + count);
    const width = (100 * count / scale).toFixed(3) + "%";
    bar.append(el("span", { class: "tier-" + tier, style: { width }, title: tier + ": " + count }));
  }
  bar.setAttribute("aria-label", parts.length ? parts.join(", ") : "no blocks");
  return el("div", { class: "tiers" }, bar, el("span", { class: "count", text: blockTotal(blocks) + " blocks" }));
}

function workerState(worker) {
  const parts = [worker.state];
  // idle, silent or stream_failed: no batch yet, for this long.
  if (worker.waiting_for_events_ms !== undefined) parts[0] += " (" + seconds(worker.waiting_for_events_ms) + ")";
  if (worker.stream_error) parts.push(worker.stream_error);
  const stale = worker.diagnostics && worker.diagnostics.stale;
  if (stale) parts.push(stale.reason + ": " + stale.detail);
  if (worker.health) {
    if (worker.health.draining) parts.push("draining");
    if (worker.health.probed && !worker.health.healthy) {
      parts.push("unhealthy: " + (worker.health.last_probe_error || "probe failed"));
    }
  }
  return parts.join("; ");
}

function workerRow(worker, scale) {
  const load = worker.load || {};
  const scraped = load.scraped ? ", engine " + load.scraped.running + " running / " + load.scraped.waiting + " waiting" : "";
  const predictions = worker.predictions
    ? Math.round(worker.predictions.accuracy * 100) + "% of " + worker.predictions.scored
    : "";
  const d = worker.diagnostics || {};
  const diagnostics = [];
  if (d.silent_while_busy) diagnostics.push("silent while busy");
  if (d.orphan_blocks) diagnostics.push(d.orphan_blocks + " orphan");
  if (d.hash_drift_blocks) diagnostics.push(d.hash_drift_blocks + " hash drift");
  if (d.salt_blind_blocks) diagnostics.push(d.salt_blind_blocks + " salt-blind");
  const state = workerState(worker);
  return el("tr", { "data-worker": worker.id },
    el("th", { scope: "row", text: worker.id }),
    el("td", { text: worker.model }),
    el("td", { class: "state state-" + worker.state, text: state }),
    el("td", { text: worker.salts || "" }),
    el("td", {}, worker.blocks ? tierBar(worker.blocks, scale) : "(fleet view only)"),
    el("td", { text: worker.load ? load.in_flight_requests + " in flight" + scraped : "" }),
    el("td", { text: predictions }),
    el("td", { text: diagnostics.join(", ") || (worker.diagnostics ? "none" : "") }));
}

function breakerRow(finding) {
  return el("tr", { "data-family": finding.family, "data-kind": finding.kind },
    el("th", { scope: "row", text: finding.kind }),
    el("td", { text: finding.model }),
    el("td", { text: finding.tenant || "(none)" }),
    el("td", { text: finding.position_tokens + (finding.length_tokens ? " (+" + finding.length_tokens + ")" : "") }),
    el("td", { "data-avoidable": finding.avoidable_tokens_per_request,
      text: finding.avoidable_tokens_per_request + " of " + finding.prompt_tokens + " tokens" }),
    el("td", { text: finding.occurrences + (finding.occurrences === 1 ? " request" : " requests") }),
    el("td", { text: finding.advice }));
}

async function refreshBreakers() {
  // 404: detection is off (serve --prefix-diagnostics=false).
  const { status, json } = await api("/v1/diagnostics/prefix", { accept: [404] });
  const findings = status === 200 ? json.findings : [];
  fill(document.querySelector("#breakers tbody"), findings.map(breakerRow),
    status === 200 ? "No cache breakers found in the traffic so far." : "Detection is off.");
}

async function refreshFleet() {
  await refreshBreakers();
  const { json } = await api("/v1/workers");
  const workers = json.workers || [];
  const scale = Math.max(1, ...workers.map((worker) => (worker.blocks ? blockTotal(worker.blocks) : 0)));
  fill(document.querySelector("#workers tbody"), workers.map((worker) => workerRow(worker, scale)),
    "No workers registered.");
  const models = [...new Set(workers.map((worker) => worker.model))];
  document.getElementById("models").replaceChildren(...models.map((model) => el("option", { value: model })));
  const input = document.getElementById("explain-model");
  if (!input.value && models.length) input.value = models[0];
}

// ---------------------------------------------------------------------------
// Traffic: line charts drawn as SVG, one polyline a series.

function lineChart(node, series, { max, format }) {
  const width = 480;
  const height = 160;
  const pad = 30;
  node.setAttribute("viewBox", `0 0 ${width} ${height}`);
  node.replaceChildren();
  const points = Math.max(...series.map((s) => s.values.length), 2);
  const top = max !== undefined ? max : Math.max(1e-9, ...series.flatMap((s) => s.values));
  node.append(svg("line", { x1: pad, y1: height - pad, x2: width, y2: height - pad, class: "axis" }));
  node.append(svg("line", { x1: pad, y1: 0, x2: pad, y2: height - pad, class: "axis" }));
  const label = svg("text", { x: 2, y: 12, class: "tick" });
  label.textContent = format(top);
  node.append(label);
  for (const s of series) {
    const coordinates = s.values.map((value, i) => {
      const x = pad + ((width - pad) * i) / (points - 1);
      const y = height - pad - ((height - pad - 4) * value) / top;
      return x.toFixed(1) + "," + y.toFixed(1);
    });
    node.append(svg("polyline", { points: coordinates.join(" "), class: "series " + s.class }));
  }
}

async function refreshTraffic() {
  const { json } = await api("/v1/traffic");
  const points = json.points || [];
  const perSecond = (value) => value / (json.interval_ms / 1000);
  lineChart(document.getElementById("chart-routes"),
    [{ class: "s-routes", values: points.map((p) => perSecond(p.routes)) }],
    { format: (v) => v.toFixed(1) + "/s" });
  lineChart(document.getElementById("chart-hits"),
    [{ class: "s-hits", values: points.map((p) => (p.prompt_blocks ? p.credited_blocks / p.prompt_blocks : 0)) }],
    { max: 1, format: () => "100%" });
  lineChart(document.getElementById("chart-savings"),
    SOURCES.map((source) => ({ class: "s-" + source, values: points.map((p) => perSecond(p.saved_tokens[source] || 0)) })),
    { format: (v) => Math.round(v) + "/s" });
  document.getElementById("savings-legend").replaceChildren(
    ...SOURCES.map((source) => el("span", {}, el("span", { class: "swatch s-" + source }), source + " ")));
  const totals = points.reduce((sum, p) => ({
    routes: sum.routes + p.routes,
    asked: sum.asked + p.prompt_blocks,
    credited: sum.credited + p.credited_blocks,
  }), { routes: 0, asked: 0, credited: 0 });
  document.getElementById("traffic-summary").textContent =
    totals.routes + " routes in the window; " + totals.credited + " of " + totals.asked + " blocks credited" +
    (totals.asked ? " (" + Math.round((100 * totals.credited) / totals.asked) + "%)" : "");
}

// ---------------------------------------------------------------------------
// Route explorer.

function parseTokens(text) {
  const parts = text.split(/[\s,]+/).filter(Boolean);
  const tokens = parts.map(Number);
  const bad = parts.find((part, i) => !Number.isInteger(tokens[i]) || tokens[i] < 0);
  if (bad !== undefined) throw new Error("'" + bad + "' is not a token id (a non-negative integer)");
  return tokens;
}

function candidateRow(candidate, chosen) {
  const byTier = TIERS.filter((tier) => candidate.tier_overlap && candidate.tier_overlap[tier])
    .map((tier) => tier + " " + candidate.tier_overlap[tier]).join(", ");
  return el("tr", { class: candidate.worker === chosen ? "chosen" : "", "data-worker": candidate.worker },
    el("th", { scope: "row", text: candidate.worker + (candidate.worker === chosen ? " (chosen)" : "") }),
    el("td", { text: candidate.eligible ? "yes" : "no: " + candidate.reason }),
    el("td", { text: candidate.resident_blocks }),
    el("td", { text: candidate.overlap_blocks }),
    el("td", { text: byTier }),
    el("td", { text: candidate.load ? candidate.load.blocks : "" }),
    el("td", { text: Number(candidate.cost).toFixed(2) }));
}

async function explain(event) {
  event.preventDefault();
  const summary = document.getElementById("explain-summary");
  const body = { model: document.getElementById("explain-model").value.trim() };
  const tenant = document.getElementById("explain-tenant").value.trim();
  if (tenant) body.tenant = tenant;
  try {
    const tokens = document.getElementById("explain-tokens").value;
    const prompt = document.getElementById("explain-prompt").value;
    if (tokens.trim()) body.token_ids = parseTokens(tokens);
    else if (prompt) body.prompt = prompt;
    else throw new Error("give token ids or a prompt");
    const { status, json } = await api("/v1/route/explain", { method: "POST", body, accept: [503] });
    summary.textContent = status === 503
      ? "No eligible worker; each candidate says why."
      : "Chosen: " + json.worker + ", " + json.overlap_blocks + " of " + json.prompt_blocks +
        " blocks credited (" + json.verdict.kind + (json.verdict.reason ? ", " + json.verdict.reason : "") + ").";
    summary.dataset.worker = json.worker || "";
    fill(document.querySelector("#candidates tbody"),
      (json.candidates || []).map((c) => candidateRow(c, json.worker)), "No candidates.");
  } catch (error) {
    summary.textContent = describeError(error);
    summary.dataset.worker = "";
  }
}

// ---------------------------------------------------------------------------
// Governance.

function leaseRow(lease, now) {
  const life = Math.max(1, lease.expires_at_ms - lease.granted_at_ms);
  const elapsed = Math.min(1, Math.max(0, (now - lease.granted_at_ms) / life));
  const remaining = Math.max(0, lease.expires_at_ms - now);
  const timeline = el("div", { class: "timeline", role: "img",
    "aria-label": "granted " + isoTime(lease.granted_at_ms) + ", expires " + isoTime(lease.expires_at_ms) });
  timeline.append(el("span", { class: "elapsed state-" + lease.state, style: { width: (elapsed * 100).toFixed(1) + "%" } }));
  return el("tr", { "data-lease": lease.lease_id },
    el("th", { scope: "row", text: lease.lease_id }),
    el("td", { class: "state state-" + lease.state, text: lease.state }),
    el("td", { text: lease.remote_engine }),
    el("td", { text: lease.tokens ? lease.tokens + " tokens" : "" }),
    el("td", { text: lease.state === "active" ? seconds(remaining) : "" }),
    el("td", {}, timeline));
}

function quarantineRow(quarantine) {
  return el("tr", { "data-quarantine": quarantine.id },
    el("th", { scope: "row", text: short(quarantine.id) }),
    el("td", { text: quarantine.model }),
    el("td", { text: quarantine.tenant || "(fleet)" }),
    el("td", { text: quarantine.blocks }),
    el("td", { "data-diverted": quarantine.diverted_requests, text: quarantine.diverted_requests }),
    el("td", { text: quarantine.reason }),
    el("td", { text: isoTime(quarantine.created_ms) }));
}

function directivePath(directive) {
  const path = el("ol", { class: "path", "aria-label": "state " + directive.state });
  const reached = DIRECTIVE_PATH.indexOf(directive.state);
  DIRECTIVE_PATH.forEach((state, i) => {
    const done = directive.state !== "failed" && i <= reached;
    path.append(el("li", { class: done ? "done" : "", "aria-current": state === directive.state ? "step" : "false", text: state }));
  });
  if (directive.state === "failed") {
    path.append(el("li", { class: "failed", "aria-current": "step", text: "failed: " + (directive.failure || "") }));
  }
  return path;
}

async function checkCertificate(id) {
  const out = document.getElementById("certificate-check");
  out.replaceChildren("Verifying certificate " + short(id) + "\u2026");
  try {
    const { json } = await api("/v1/certificates/" + id + "/verify");
    out.replaceChildren(
      el("h3", { text: "Certificate " + short(id, 16) + (json.ok ? ": verified" : ": NOT verified") }),
      el("ul", {}, ...json.checks.map((check) =>
        el("li", { class: check.ok ? "ok" : "bad", "data-check": check.name },
          (check.ok ? "ok " : "FAIL ") + check.name + ": " + check.detail))));
    out.dataset.verified = String(json.ok);
  } catch (error) {
    out.replaceChildren(describeError(error));
    out.dataset.verified = "false";
  }
}

async function downloadCertificate(id) {
  try {
    const { text } = await api("/v1/certificates/" + id);
    const link = el("a", { href: "data:application/json;charset=utf-8," + encodeURIComponent(text),
      download: "certificate-" + id + ".json" });
    document.body.append(link);
    link.click();
    link.remove();
  } catch (error) {
    showError(describeError(error));
  }
}

function directiveRow(directive) {
  const certificate = directive.certificate_id
    ? el("span", {},
      el("button", { type: "button", class: "verify", onclick: () => checkCertificate(directive.certificate_id), text: "Verify" }),
      " ",
      el("button", { type: "button", onclick: () => downloadCertificate(directive.certificate_id), text: "Download" }))
    : "";
  // A revocation's owners wait for their residue (blocks of the revoked
  // salts, and blocks whose salt cannot be told) to be evicted.
  const residue = (owner) => directive.revocation && owner.state !== "witnessed"
    ? " residue " + (owner.residue + owner.unattributed) : "";
  const owners = (directive.owners || []).map((owner) => owner.worker + " " + owner.state +
    (owner.attempts ? " (" + owner.attempts + (owner.attempts === 1 ? " call)" : " calls)") : "") +
    residue(owner)).join(", ");
  const reason = directive.revocation
    ? "revokes tenant " + directive.tenant + (directive.model ? " on " + directive.model : "") +
      ": " + directive.reason
    : directive.reason;
  return el("tr", { "data-directive": directive.id, "data-state": directive.state },
    el("th", { scope: "row", text: short(directive.id) }),
    el("td", {}, directivePath(directive)),
    el("td", { text: owners }),
    el("td", { "data-revocation": directive.revocation ? directive.tenant : "", text: reason }),
    el("td", {}, certificate));
}

async function refreshGovernance() {
  const now = Date.now();
  const [leases, quarantines, directives] = await Promise.all([
    api("/v1/leases"), api("/v1/quarantines"), api("/v1/invalidations")]);
  fill(document.querySelector("#leases tbody"), leases.json.leases.map((l) => leaseRow(l, now)), "No leases.");
  fill(document.querySelector("#quarantines tbody"), quarantines.json.quarantines.map(quarantineRow), "No quarantines in force.");
  fill(document.querySelector("#directives tbody"), directives.json.invalidations.map(directiveRow), "No invalidations.");
}

// ---------------------------------------------------------------------------
// Journal.

async function refreshJournal() {
  const head = await api("/v1/journal?limit=1");
  const since = Math.max(1, head.json.head_seq - 49);
  const { json } = await api("/v1/journal?since=" + since + "&limit=50");
  const rows = json.rows.slice().reverse().map((row) => el("tr", { "data-seq": row.seq },
    el("th", { scope: "row", text: row.seq }),
    el("td", { text: isoTime(row.time_ms) }),
    el("td", { text: row.kind }),
    el("td", { text: short(row.subject, 20) }),
    el("td", { text: row.actor || "" }),
    el("td", { class: "hash", text: short(row.hash, 16) })));
  fill(document.querySelector("#journal tbody"), rows, "The journal is empty.");
}

async function verifyJournal() {
  const out = document.getElementById("journal-verify");
  out.textContent = "Verifying\u2026";
  try {
    const { json } = await api("/v1/journal/verify");
    out.textContent = json.ok
      ? "Intact: " + json.rows + " rows, head " + json.head_hash
      : "BROKEN at seq " + json.first_broken_seq + " (" + json.problem + "); " + json.rows + " rows verify before it";
    out.dataset.ok = String(json.ok);
  } catch (error) {
    out.textContent = describeError(error);
    out.dataset.ok = "false";
  }
}

// ---------------------------------------------------------------------------
// Tabs, login and the refresh loop.

const VIEWS = {
  fleet: refreshFleet,
  traffic: refreshTraffic,
  route: refreshFleet,  // the model list
  governance: refreshGovernance,
  journal: refreshJournal,
};
let current = "fleet";
let timer = null;

// Empties what a view shows, so nothing read with one token stays on screen
// after another token (or none) may not read it.
function clearView(name) {
  const section = document.getElementById("view-" + name);
  section.querySelectorAll("tbody, svg, #savings-legend").forEach((node) => node.replaceChildren());
  section.querySelectorAll('[role="status"]').forEach((node) => {
    node.replaceChildren();
    for (const key of Object.keys(node.dataset)) delete node.dataset[key];
  });
}

async function refresh() {
  clearTimeout(timer);
  try {
    await VIEWS[current]();
    showError("");
  } catch (error) {
    clearView(current);
    showError(describeError(error));
  }
  timer = setTimeout(refresh, REFRESH_MS);
}

function tokenChanged() {
  for (const name of Object.keys(VIEWS)) clearView(name);
  showWho();
  refresh();
}

function select(name, focus) {
  current = name;
  for (const tab of document.querySelectorAll('[role="tab"]')) {
    const selected = tab.id === "tab-" + name;
    tab.setAttribute("aria-selected", String(selected));
    tab.tabIndex = selected ? 0 : -1;
    if (selected && focus) tab.focus();
    document.getElementById(tab.getAttribute("aria-controls")).hidden = !selected;
  }
  location.hash = name;
  refresh();
}

function setupTabs() {
  const tabs = [...document.querySelectorAll('[role="tab"]')];
  tabs.forEach((tab, i) => {
    tab.addEventListener("click", () => select(tab.id.slice(4), false));
    tab.addEventListener("keydown", (event) => {
      const step = { ArrowRight: 1, ArrowLeft: -1 }[event.key];
      if (step) select(tabs[(i + step + tabs.length) % tabs.length].id.slice(4), true);
      if (event.key === "Home") select(tabs[0].id.slice(4), true);
      if (event.key === "End") select(tabs[tabs.length - 1].id.slice(4), true);
    });
  });
}

function showWho() {
  document.getElementById("who").textContent = sessionStorage.getItem(TOKEN_KEY)
    ? "Using the token entered in this tab." : "No token: only an open loopback kvgov answers.";
}

document.addEventListener("DOMContentLoaded", () => {
  setupTabs();
  document.getElementById("login").addEventListener("submit", (event) => {
    event.preventDefault();
    const input = document.getElementById("token");
    const token = input.value.trim();
    if (token) sessionStorage.setItem(TOKEN_KEY, token);
    input.value = "";
    tokenChanged();
  });
  document.getElementById("forget").addEventListener("click", () => {
    sessionStorage.removeItem(TOKEN_KEY);
    tokenChanged();
  });
  document.getElementById("explain").addEventListener("submit", explain);
  document.getElementById("verify-journal").addEventListener("click", verifyJournal);
  showWho();
  const wanted = location.hash.slice(1);
  select(VIEWS[wanted] ? wanted : "fleet", false);
});
