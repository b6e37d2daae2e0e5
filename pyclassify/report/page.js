"use strict";
// The report's page: everything it shows is in the two script elements above (no request is
// made). Cells are deflated typed arrays, one verdict and two decision indices per group pair.
const R = JSON.parse(document.getElementById("report-data").textContent);
const G = R.groups ? R.groups.length : 0;
const VERDICT = ["deny", "allow", "none"];
const $ = (id) => document.getElementById(id);
const esc = (s) => String(s).replace(/[&<>"]/g, (c) => ({"&": "&amp;", "<": "&lt;", ">": "&gt;", '"': "&quot;"}[c]));

async function cells() {
  const text = document.getElementById("report-cells").textContent.trim();
  const raw = Uint8Array.from(atob(text), (c) => c.charCodeAt(0));
  const stream = new Blob([raw]).stream().pipeThrough(new DecompressionStream("deflate"));
  const buf = await new Response(stream).arrayBuffer();
  const types = {u8: Uint8Array, u16: Uint16Array, u32: Uint32Array};
  const sides = R.sides.map(() => ({}));
  for (const a of R.layout) {
    sides[a.side][a.name] = new types[a.type](buf, a.offset, G * G);
  }
  return sides;
}

// Observed flows a change closes (diff --traffic), summed per grid cell and namespace pair.
const OBSERVED_CLOSED = {cells: new Map(), ns: new Map()};
for (const c of (R.observed ? R.observed.changes : [])) {
  if (!c.closed) continue;
  for (const [key, list] of [["cells", c.cells], ["ns", c.ns]]) {
    for (const x of list) OBSERVED_CLOSED[key].set(x, (OBSERVED_CLOSED[key].get(x) || 0) + c.flows);
  }
}

function markObserved(td, key, x) {
  const flows = OBSERVED_CLOSED[key].get(x);
  if (flows === undefined) return "";
  td.classList.add("observed-closed");
  td.dataset.observedClosed = flows;
  return `; observed flows it closes: ${flows}`;
}

function nsOf(g) {
  let lo = 0, hi = R.namespaces.length - 1;
  while (lo < hi) {
    const mid = (lo + hi + 1) >> 1;
    if (R.ns_start[mid] <= g) lo = mid; else hi = mid - 1;
  }
  return lo;
}

function shade(fraction) {
  // red (none allowed) to green (all allowed), through amber
  const hue = Math.round(fraction * 140);
  return `hsl(${hue}, 60%, 42%)`;
}

function changeClass(td, opened, closed) {
  if (opened) td.classList.add("opened");
  if (closed) td.classList.add("closed");
}

function header(rows, cols, corner) {
  const table = document.createElement("table");
  table.className = "grid";
  const head = table.createTHead().insertRow();
  const c = document.createElement("th");
  c.className = "corner";
  c.textContent = corner;
  head.appendChild(c);
  for (const col of cols) {
    const th = document.createElement("th");
    th.textContent = col.short;
    th.title = col.title;
    head.appendChild(th);
  }
  const body = table.createTBody();
  return [table, body];
}

function heatmap(S) {
  const N = R.namespaces.length;
  const names = R.namespaces.map((n, k) => ({short: n || "(none)", title: `${n}: ${R.ns_pods[k]} pods`}));
  const [table, body] = header(names, names, "from \\ to");
  const last = R.sides.length - 1;
  for (let a = 0; a < N; a++) {
    const tr = body.insertRow();
    const th = document.createElement("th");
    th.textContent = names[a].short;
    th.title = names[a].title;
    tr.appendChild(th);
    for (let b = 0; b < N; b++) {
      const td = tr.insertCell();
      const pairs = R.ns_pods[a] * R.ns_pods[b];
      const allowed = R.ns_allowed[last][a * N + b];
      td.dataset.from = R.namespaces[a];
      td.dataset.to = R.namespaces[b];
      td.dataset.allowed = allowed;
      td.dataset.pairs = pairs;
      td.dataset.verdict = allowed === 0 ? "deny" : allowed === pairs ? "allow" : "some";
      td.style.background = shade(pairs ? allowed / pairs : 0);
      let title = `${names[a].short} → ${names[b].short}: ${allowed} of ${pairs} pod pairs allowed`;
      if (R.sides.length === 2) {
        const opened = R.ns_opened[a * N + b], closed = R.ns_closed[a * N + b];
        td.dataset.opened = opened;
        td.dataset.closed = closed;
        changeClass(td, opened, closed);
        title += ` (was ${R.ns_allowed[0][a * N + b]}; ${opened} opened, ${closed} closed)`;
        title += markObserved(td, "ns", a * N + b);
      }
      td.title = title;
      td.addEventListener("click", () => openPair(S, a, b, td));
    }
  }
  $("heatmap").replaceChildren(table);
}

function groupName(g) {
  const labels = Object.entries(R.groups[g].labels).map(([k, v]) => `${k}=${v}`).join(",");
  const family = R.dual && R.groups[g].family ? ` IPv${R.groups[g].family}` : "";
  return {short: `${labels || "(no label a policy selects)"} ×${R.groups[g].pods.length}${family}`,
          title: R.groups[g].text};
}

function podRef(g, p) {
  return `${R.namespaces[nsOf(g)]}/${R.groups[g].pods[p]}`;
}

let current = null;

function openPair(S, a, b, td) {
  document.querySelectorAll("#heatmap td.selected").forEach((x) => x.classList.remove("selected"));
  td.classList.add("selected");
  current = [a, b];
  $("groups").hidden = false;
  $("groups-title").textContent = `${R.namespaces[a]} → ${R.namespaces[b]}`;
  drawPair(S);
}

function podsOf(ns) {
  // Each pod of namespace ns once, with its group and place in it per family (4, 6; 0: judged
  // by name): a dual-stack pod is in one group per family.
  const byName = new Map();
  for (let g = R.ns_start[ns]; g < R.ns_start[ns + 1]; g++) {
    const f = R.groups[g].family || 0;
    R.groups[g].pods.forEach((name, p) => {
      if (!byName.has(name)) byName.set(name, {name, at: {}});
      const pod = byName.get(name);
      if (pod.at[f] === undefined) pod.at[f] = [g, p];
    });
  }
  return [...byName.values()].map((pod) => {
    const [g, p] = pod.at[4] || pod.at[6] || pod.at[0];
    const families = [4, 6].filter((f) => pod.at[f]).map((f) => `IPv${f}`).join(", ") || "no address";
    return {g, p, at: pod.at, short: pod.name, title: `${podRef(g, p)} (${families})`};
  });
}

function podEnds(row, col) {
  // The group pairs a pod pair is judged by, as matrix judges it: each family either pod has
  // an address of (a pod judged by name takes part in the other's), by name when neither has
  // one; none when they share no family (no flow).
  const ends = [];
  for (const f of [4, 6]) {
    const a = row.at[f] || row.at[0], b = col.at[f] || col.at[0];
    if (a && b && (row.at[f] || col.at[f])) ends.push([a, b]);
  }
  if (!ends.length && row.at[0] && col.at[0]) ends.push([row.at[0], col.at[0]]);
  return ends;
}

function drawPair(S) {
  const [a, b] = current;
  const byPod = $("by-pod").checked;
  const rows = [], cols = [];
  for (const [list, ns] of [[rows, a], [cols, b]]) {
    if (byPod) {
      list.push(...podsOf(ns));
      continue;
    }
    for (let g = R.ns_start[ns]; g < R.ns_start[ns + 1]; g++) list.push({g, p: null, ...groupName(g)});
  }
  const [table, body] = header(rows, cols, byPod ? "pods" : "identity groups");
  table.id = byPod ? "pod-table" : "group-table";
  const last = S.length - 1;
  for (const row of rows) {
    const tr = body.insertRow();
    const th = document.createElement("th");
    th.textContent = row.short;
    th.title = row.title;
    tr.appendChild(th);
    for (const col of cols) {
      // A pod pair: allowed when every family it is judged in allows; its first family (of a
      // change: its first whose cell changed) speaks for it.
      const ends = byPod ? podEnds(row, col) : [[[row.g, row.p], [col.g, col.p]]];
      const list = ends.map(([x, y]) => x[0] * G + y[0]);
      const td = tr.insertCell();
      const verdictOf = (s) => !list.length ? 2 : list.length === 1 ? S[s].verdict[list[0]]
        : list.every((c) => S[s].verdict[c] === 1) ? 1 : 0;
      td.dataset.verdict = VERDICT[verdictOf(last)];
      let k = 0;
      if (S.length === 2) {
        k = Math.max(0, list.findIndex((c) => S[1].change[c]));
        td.dataset.was = VERDICT[verdictOf(0)];
        const change = list.reduce((x, c) => x | S[1].change[c], 0);
        td.dataset.change = ["", "opened", "closed", "opened closed"][change];
        changeClass(td, change & 1, change & 2);
        const observed = list.find((c) => OBSERVED_CLOSED.cells.has(c));
        td.title = observed === undefined ? "" : markObserved(td, "cells", observed).replace(/^; /, "");
      }
      if (byPod) {
        td.dataset.from = podRef(row.g, row.p);
        td.dataset.to = podRef(col.g, col.p);
      }
      if (!list.length) continue;
      const [[rg, rp], [cg, cp]] = ends[k];
      td.dataset.groupFrom = rg;
      td.dataset.groupTo = cg;
      if (S[last].verdict[list[k]] !== 2) {
        td.addEventListener("click", () => explain(S, {g: rg, p: rp}, {g: cg, p: cp}, td));
      }
    }
  }
  $("group-grid").replaceChildren(table);
}

function decision(id) {
  const d = R.decisions[id];
  if (!d) return "<dd>no policy of that end (allow)</dd>";
  const rule = d.rule === null ? "" : ` rule <code>${esc(d.rule)}</code>`;
  const policy = d.policy ? `<code>${esc(d.policy)}</code>${rule}` : "";
  return `<dd><b>${esc(d.verdict)}</b> by ${esc(d.text)}<br><small>tier ${esc(d.tier ?? "—")}; ` +
         `${policy ? "policy " + policy + "; " : ""}reason ${esc(d.reason)}</small></dd>`;
}

function explain(S, row, col, td) {
  document.querySelectorAll("#group-grid td.selected").forEach((x) => x.classList.remove("selected"));
  td.classList.add("selected");
  const cell = row.g * G + col.g;
  const from = row.p === null ? podRef(row.g, 0) : podRef(row.g, row.p);
  const to = col.p === null ? podRef(col.g, 0) : podRef(col.g, col.p);
  let html = `<p><b>${esc(R.groups[row.g].text)}</b> → <b>${esc(R.groups[col.g].text)}</b></p>`;
  const names = S.length === 2 ? ["was", "now"] : [""];
  for (let s = 0; s < S.length; s++) {
    const k = S[s].klass ? S[s].klass[cell] : 0;
    const flow = R.classes[k];
    // The flow's own verdict: both ends allow it (an end without policy allows).
    const allows = (id) => !R.decisions[id] || R.decisions[id].verdict === "allow";
    const verdict = allows(S[s].egress[cell]) && allows(S[s].ingress[cell]) ? "allow" : "deny";
    const json = (id) => esc(JSON.stringify(R.decisions[id] || null));
    html += `<dl data-side="${s}" data-verdict="${verdict}" data-egress="${json(S[s].egress[cell])}" ` +
            `data-ingress="${json(S[s].ingress[cell])}"><dt>${names[s] || "verdict"}</dt>` +
            `<dd><b>${verdict}</b>: ${esc(flow.text)}</dd>` +
            `<dt>egress of the source</dt>${decision(S[s].egress[cell])}` +
            `<dt>ingress of the destination</dt>${decision(S[s].ingress[cell])}</dl>`;
  }
  const k = S[S.length - 1].klass ? S[S.length - 1].klass[cell] : 0;
  $("explanation").dataset.args = R.classes[k].args;
  html += `<p>One flow speaks for every pod of both groups. The same, one flow at a time:<br>` +
          `<code>pyclassify explain ${esc(R.paths)} --from ${esc(from)} --to ${esc(to)} ${esc(R.classes[k].args)}</code></p>`;
  $("explanation").innerHTML = html;
  $("explanation").dataset.from = from;
  $("explanation").dataset.to = to;
  $("explain").hidden = false;
}

function summary() {
  const last = R.sides.length - 1;
  const total = R.ns_pods.reduce((x, y) => x + y, 0);
  const allowed = R.ns_allowed[last].reduce((x, y) => x + y, 0);
  let text = `${total} pods in ${R.namespaces.length} namespaces, ${G} identity groups; ${R.flow}: ` +
             `${allowed} of ${total * total} pod pairs allowed.`;
  if (R.sides.length === 2) {
    const was = R.ns_allowed[0].reduce((x, y) => x + y, 0);
    text += ` Before the change: ${was}. Policies changed: ${R.policies_changed.join(", ") || "none"}.`;
  }
  $("summary").textContent = text;
  const sw = (colour, label, style) => `<span class="swatch" style="background:${colour};${style || ""}"></span>${label}`;
  let legend = sw(shade(1), "allowed") + sw(shade(0.5), "some pod pairs") + sw(shade(0), "denied") + sw("#ddd", "no flow");
  if (R.sides.length === 2) {
    legend += sw("#fff", "opened", "outline:3px solid #1e6fd9") + sw("#fff", "closed", "outline:3px solid #111");
  }
  if (R.observed) {
    legend += `<span class="swatch" style="color:#ffd400;text-shadow:0 0 2px #000">●</span>observed flows it closes`;
  }
  $("legend").innerHTML = legend;
  if (R.changes) {
    $("changes").hidden = false;
    const ul = $("change-list");
    for (const c of R.changes) {
      const li = document.createElement("li");
      li.className = c.opened ? "opened" : "closed";
      li.textContent = c.text;
      ul.appendChild(li);
    }
  }
}

function count(n) {
  return n === null || n === undefined ? "" : Number(n).toLocaleString("en");
}

function usagePanel() {
  const U = R.usage;
  $("usage").hidden = false;
  const t = U.traffic;
  $("usage-summary").textContent = t
    ? `What each rule decided in ${count(t.records)} records (${count(t.flows)} flows, ${count(t.packets)} packets, ` +
      `${count(t.bytes)} bytes) of ${t.files.map((f) => f.file).join(", ")}, as pyclassify usage counts them` +
      (R.sides && R.sides.length === 2 ? " (under the policy before the change: the one the traffic met)." : ".")
    : "No traffic given: nothing counted. Shadowed rules and redundant policies are found from the policy alone.";
  // One string for every row: thousands of rules at cluster size, drawn in one go.
  const attr = (v) => esc(v === null || v === undefined ? "" : String(v));
  const html = [];
  for (const r of U.rules) {
    const notes = [];
    if (r.never_hit) notes.push(r.action === "Log" ? "logged nothing" : "decided nothing");
    if (r.shadowed_by !== null) notes.push(`never matches: rule ${r.shadowed_by} before it covers it`);
    if (r.policy_redundant) notes.push("its policy changes no verdict");
    const cls = [r.never_hit ? "never-hit" : "", r.shadowed_by !== null ? "shadowed" : ""].join(" ").trim();
    html.push(`<tr class="${cls}" data-policy="${attr(r.policy)}" data-direction="${attr(r.direction)}" ` +
      `data-rule="${attr(r.rule)}" data-action="${attr(r.action)}" data-records="${attr(r.records)}" ` +
      `data-flows="${attr(r.flows)}" data-packets="${attr(r.packets)}" data-bytes="${attr(r.bytes)}" ` +
      `data-shadowed-by="${attr(r.shadowed_by)}" data-never-hit="${attr(r.never_hit)}" ` +
      `data-redundant="${attr(r.policy_redundant)}"><td>${attr(r.tier)}</td><td>${attr(r.policy)}</td>` +
      `<td>${attr(r.direction)}</td><td>${attr(r.rule)}</td><td>${attr(r.action)}</td>` +
      ["records", "flows", "packets", "bytes"].map((k) => `<td class="n">${count(r[k])}</td>`).join("") +
      `<td>${esc(notes.join("; "))}</td></tr>`);
  }
  $("usage-table").tBodies[0].innerHTML = html.join("");
  const other = $("other-decisions");
  for (const r of U.other_decisions || []) {
    const li = document.createElement("li");
    const where = r.reason === "end-of-tier" ? `end of tier ${r.tier}` : (r.policy || r.reason);
    li.dataset.direction = r.direction;
    li.dataset.flows = r.flows;
    li.textContent = `${r.direction} ${where} ${r.verdict}: ${count(r.flows)} flows, ${count(r.packets)} packets, ` +
                     `${count(r.bytes)} bytes`;
    other.appendChild(li);
  }
  if (!U.other_decisions) other.innerHTML = "<li>(no traffic given)</li>";
  const red = $("redundant-list");
  for (const r of U.redundant || []) {
    const li = document.createElement("li");
    li.dataset.policy = r.policy;
    li.textContent = `${r.policy}: removing it changes no verdict` +
                     (r.decided_instead_by.length ? `; decided instead by ${r.decided_instead_by.join(", ")}` : "");
    red.appendChild(li);
  }
  if (U.redundant === null) red.innerHTML = "<li>(not looked for: --no-redundant)</li>";
  else if (!U.redundant.length) red.innerHTML = "<li>none</li>";
}

function observedPanel() {
  $("observed").hidden = false;
  const ul = $("observed-list");
  for (const c of R.observed.changes) {
    const li = document.createElement("li");
    li.className = c.closed ? "closed" : "opened";
    for (const k of ["records", "flows", "packets", "bytes"]) li.dataset[k] = c[k];
    li.dataset.closed = String(c.closed);
    li.textContent = c.text;
    ul.appendChild(li);
  }
  const s = R.observed.summary;
  const p = document.createElement("p");
  p.className = "hint";
  p.textContent = `${s.closed} closing ${count(s.closed_flows)} observed flows, ${s.opened} opening ` +
                  `${count(s.opened_flows)}, over ${count(s.observed.records)} records` +
                  (s.not_judged.records ? `; ${count(s.not_judged.records)} records not judged (an end the inventory cannot place)` : "");
  ul.after(p);
}

if (!R.groups) {
  // The rule usage page alone (usage --output html).
  $("namespaces").hidden = true;
  $("summary").textContent = `Rule usage of ${R.paths}`;
  usagePanel();
  document.body.dataset.ready = String(performance.now());
} else cells().then((S) => {
  summary();
  if (R.usage) usagePanel();
  if (R.observed) observedPanel();
  heatmap(S);
  $("by-pod").addEventListener("change", () => current && drawPair(S));
  document.body.dataset.ready = String(performance.now());
}).catch((e) => {
  $("summary").textContent = `This report could not be read: ${e}`;
  throw e;
});
