// The Herald admin console: reads the admin API of the node that serves it, every two seconds.
const REFRESH_MS = 2000;
const TAIL_ROWS = 200; // rows kept in the tail table

const $ = (id) => document.getElementById(id);
let previous; // { at, counters, counts }

/** Parses the Prometheus text exposition into [{ name, labels, value }]. */
function parseMetrics(text) {
  const out = [];
  for (const line of text.split("\n")) {
    if (!line || line.startsWith("#")) continue;
    const m = /^([a-zA-Z_:][a-zA-Z0-9_:]*)(\{([^}]*)\})?\s+(\S+)/.exec(line);
    if (!m) continue;
    const labels = {};
    for (const l of (m[3] || "").matchAll(/([a-zA-Z_][a-zA-Z0-9_]*)="((?:[^"\\]|\\.)*)"/g)) labels[l[1]] = l[2];
    out.push({ name: m[1], labels, value: Number(m[4]) });
  }
  return out;
}

function sum(metrics, name, filter = () => true) {
  return metrics.filter((m) => m.name === name && filter(m.labels)).reduce((a, m) => a + m.value, 0);
}

function fmt(n) {
  if (!Number.isFinite(n)) return "–";
  if (Math.abs(n) >= 1e6) return `${(n / 1e6).toFixed(1)}M`;
  if (Math.abs(n) >= 1e4) return `${(n / 1e3).toFixed(1)}k`;
  return Number.isInteger(n) ? String(n) : n.toFixed(1);
}

function cell(tr, text, cls) {
  const td = document.createElement("td");
  td.textContent = text;
  if (cls) td.className = cls;
  tr.appendChild(td);
  return td;
}

function fill(tbody, rows) {
  tbody.replaceChildren(...rows.map((cells) => {
    const tr = document.createElement("tr");
    for (const c of cells) cell(tr, c);
    return tr;
  }));
}

async function getJson(url) {
  const res = await fetch(url, { cache: "no-store" });
  const body = await res.json().catch(() => ({}));
  return { status: res.status, body };
}

async function refresh() {
  const at = performance.now();
  const [metricsText, nodes, topics] = await Promise.all([
    fetch("/metrics", { cache: "no-store" }).then((r) => {
      if (!r.ok) throw new Error(`/metrics answered ${r.status}`);
      return r.text();
    }),
    getJson("/v1/cluster/nodes"),
    getJson("/v1/topics?limit=50"),
  ]);
  const metrics = parseMetrics(metricsText);
  const byTransport = (t) => sum(metrics, "herald_connections", (l) => l.transport === t);
  const ws = byTransport("ws"), sse = byTransport("sse"), poll = byTransport("poll");
  $("conn-ws").textContent = fmt(ws);
  $("conn-sse").textContent = fmt(sse);
  $("conn-poll").textContent = fmt(poll);
  $("conn-total").textContent = fmt(ws + sse + poll);
  $("topic-count").textContent = fmt(topics.body.count ?? sum(metrics, "herald_topics"));

  const counters = {
    published: sum(metrics, "herald_messages_published_total"),
    delivered: sum(metrics, "herald_messages_delivered_total"),
    bytes: sum(metrics, "herald_bytes_sent_total"),
    opened: sum(metrics, "herald_connections_opened_total"),
    errors: sum(metrics, "herald_client_errors_total"),
    slow: sum(metrics, "herald_slow_consumer_events_total"),
  };
  const counts = new Map((topics.body.topics || []).map((t) => [t.topic, t.messages]));
  if (previous) {
    const dt = (at - previous.at) / 1000;
    for (const [k, v] of Object.entries(counters)) {
      $(`rate-${k}`).textContent = fmt(Math.max(0, v - previous.counters[k]) / dt);
    }
  }

  const tbody = $("nodes").tBodies[0];
  if (nodes.status === 200) {
    // Partitions read per log (interest routing): "redis 12 / 4096" (`groups` in the API).
    const partitions = (g) =>
      Object.entries(g || {})
        .map(([log, [followed, total]]) => `${log} ${fmt(followed)} / ${fmt(total)}`)
        .join(", ") || "—";
    fill(tbody, nodes.body.nodes.map((n) => [n.node, fmt(n.connections), partitions(n.groups)]));
    $("nodes-note").textContent = `${nodes.body.nodes.length} live node(s), from Redis`;
  } else if (nodes.body.code === "no_cluster") {
    fill(tbody, [["this node", fmt(ws + sse + poll)]]);
    $("nodes-note").textContent = "this node runs alone (no Redis configured)";
  } else {
    fill(tbody, []);
    $("nodes-note").textContent = `nodes: ${nodes.body.reason || nodes.status}`;
  }

  const rate = (t) => {
    const before = previous?.counts.get(t.topic);
    if (before === undefined || t.messages < before) return "–";
    return fmt((t.messages - before) / ((at - previous.at) / 1000));
  };
  fill($("topics").tBodies[0], (topics.body.topics || []).map((t) => [t.topic, fmt(t.subscribers), rate(t), t.head, fmt(t.history)]));
  previous = { at, counters, counts };
  $("status").textContent = `refreshed ${new Date().toLocaleTimeString()}`;
  $("status").className = "muted";
}

async function loop() {
  try {
    await refresh();
  } catch (e) {
    $("status").textContent = `refresh failed: ${e.message}`;
    $("status").className = "error";
  }
  setTimeout(loop, REFRESH_MS);
}

$("presence-form").addEventListener("submit", async (ev) => {
  ev.preventDefault();
  const topic = $("presence-topic").value.trim();
  const { status, body } = await getJson(`/v1/presence/${encodeURIComponent(topic)}`);
  const out = $("presence");
  if (status !== 200) {
    out.textContent = `${body.code || status}: ${body.reason || ""}`;
    out.className = "error";
    return;
  }
  out.className = "";
  const nodes = Object.entries(body.nodes || {}).map(([n, c]) => `${n}: ${c}`).join(", ");
  out.textContent = `${body.subscribers} subscriber(s)${nodes ? ` — ${nodes}` : " on this node"}`;
});

$("pub-form").addEventListener("submit", async (ev) => {
  ev.preventDefault();
  const out = $("pub-result");
  let data;
  try {
    data = JSON.parse($("pub-data").value);
  } catch (e) {
    out.textContent = `data is not JSON: ${e.message}`;
    out.className = "error";
    return;
  }
  const body = { topic: $("pub-topic").value.trim(), data };
  const event = $("pub-event").value.trim();
  if (event) body.event = event;
  const res = await fetch("/v1/publish", {
    method: "POST",
    headers: { "content-type": "application/json" },
    body: JSON.stringify(body),
  });
  const reply = await res.json().catch(() => ({}));
  if (res.ok) {
    out.textContent = `published ${reply.topic} ${reply.id}`;
    out.className = "muted";
  } else {
    out.textContent = `${reply.code || res.status}: ${reply.reason || ""}`;
    out.className = "error";
  }
});

let tail;
function stopTail() {
  tail?.close();
  tail = undefined;
  $("tail-stop").disabled = true;
  $("tail-status").textContent = "not tailing";
}

$("tail-form").addEventListener("submit", (ev) => {
  ev.preventDefault();
  stopTail();
  const topic = $("tail-topic").value.trim();
  const rows = $("tail").tBodies[0];
  rows.replaceChildren();
  const es = new EventSource(`/v1/tail/${encodeURIComponent(topic)}`);
  tail = es;
  $("tail-stop").disabled = false;
  $("tail-status").textContent = `connecting to ${topic}…`;
  es.onopen = () => { $("tail-status").textContent = `tailing ${topic}`; };
  es.onerror = () => { $("tail-status").textContent = `tail of ${topic}: reconnecting…`; };
  const add = (cells) => {
    const tr = document.createElement("tr");
    cell(tr, new Date().toLocaleTimeString());
    cell(tr, cells[0]);
    cell(tr, cells[1]);
    cell(tr, cells[2], "data");
    rows.prepend(tr);
    while (rows.rows.length > TAIL_ROWS) rows.deleteRow(-1);
  };
  es.onmessage = (e) => {
    const m = JSON.parse(e.data);
    add([m.id, m.event ?? "", JSON.stringify(m.data)]);
  };
  es.addEventListener("herald.lost", (e) => add(["—", "herald.lost", e.data]));
});
$("tail-stop").addEventListener("click", stopTail);

loop();
