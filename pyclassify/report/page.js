"use strict";
// The report's page: everything it shows is in the two script elements above (no request is
// made). Cells are deflated typed arrays, one verdict and two decision indices per group pair.
const R = JSON.parse(document.getElementById("report-data").textContent);
const G = R.groups.length;
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
      }
      td.title = title;
      td.addEventListener("click", () => openPair(S, a, b, td));
    }
  }
  $("heatmap").replaceChildren(table);
}

function groupName(g) {
  const labels = Object.entries(R.groups[g].labels).map(([k, v]) => `${k}=${v}`).join(",");
  return {short: `${labels || "(no label a policy selects)"} ×${R.groups[g].pods.length}`, title: R.groups[g].text};
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

function drawPair(S) {
  const [a, b] = current;
  const byPod = $("by-pod").checked;
  const rows = [], cols = [];
  for (const [list, ns] of [[rows, a], [cols, b]]) {
    for (let g = R.ns_start[ns]; g < R.ns_start[ns + 1]; g++) {
      if (byPod) {
        R.groups[g].pods.forEach((name, p) => list.push({g, p, short: name, title: `${podRef(g, p)} (${R.groups[g].text})`}));
      } else {
        list.push({g, p: null, ...groupName(g)});
      }
    }
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
      const cell = row.g * G + col.g;
      const td = tr.insertCell();
      td.dataset.verdict = VERDICT[S[last].verdict[cell]];
      td.dataset.groupFrom = row.g;
      td.dataset.groupTo = col.g;
      if (byPod) {
        td.dataset.from = podRef(row.g, row.p);
        td.dataset.to = podRef(col.g, col.p);
      }
      if (S.length === 2) {
        td.dataset.was = VERDICT[S[0].verdict[cell]];
        const change = S[1].change[cell];
        td.dataset.change = ["", "opened", "closed", "opened closed"][change];
        changeClass(td, change & 1, change & 2);
      }
      if (S[last].verdict[cell] !== 2) {
        td.addEventListener("click", () => explain(S, row, col, td));
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

cells().then((S) => {
  summary();
  heatmap(S);
  $("by-pod").addEventListener("change", () => current && drawPair(S));
  document.body.dataset.ready = String(performance.now());
}).catch((e) => {
  $("summary").textContent = `This report could not be read: ${e}`;
  throw e;
});
