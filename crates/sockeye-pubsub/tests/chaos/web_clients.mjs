// A subscriber of the chaos checker's web variant (tests/chaos/web.rs), in Node:
//   node web_clients.mjs js|raw URL,URL,URL TOPIC,TOPIC
// `js`: the project's client (clients/js/src/index.js) over Node's own WebSocket (the `ws`
// package's where Node has none), failing over with its own reconnect logic from the positions
// it keeps. `raw`: a client that is not ours, the `ws` package's WebSocket with the JSON
// protocol spoken by hand (docs/pubsub-protocol.md): it keeps its last position per topic (a
// message's, or a gap's resume) and resumes with `since`, on the next node after a drop.
// Prints one JSON line per event on stdout, for the checker's history:
//   {"e":"subscribe","t":TOPIC,"since":{offset,epoch}|null}   a subscribe frame sent
//   {"e":"subscribed","t":TOPIC,"recovery":"live"|"recovered"|"lost","recovered":N}
//   {"e":"failed","t":TOPIC,"why":TEXT}                          a subscribe refused or timed out
//   {"e":"message","t":TOPIC,"data":DATA,"offset":N|null,"epoch":E|null}
//   {"e":"gap","t":TOPIC,"resume":{offset,epoch}|null}
//   {"e":"log",...}                                              anything else (connections, errors)
// A `drop` line on stdin drops the connection (the nemesis's Reconnect); stdin's end stops it.
import { createRequire } from "node:module";
import { createInterface } from "node:readline";
import { connect } from "../../../../clients/js/src/index.js";

const [kind, urlList, topicList] = process.argv.slice(2);
const urls = urlList.split(",");
const topics = topicList.split(",");
const out = (event) => process.stdout.write(`${JSON.stringify(event)}\n`);
const log = (what, detail = {}) => out({ e: "log", what, ...detail });

// The `ws` package, from interop/node's node_modules (bash interop/install-node.sh).
function wsPackage() {
  const require = createRequire(new URL("../../../../interop/node/package.json", import.meta.url));
  return require("ws");
}

let onDrop = () => {};
createInterface({ input: process.stdin })
  .on("line", (line) => {
    if (line.trim() === "drop") onDrop();
  })
  .on("close", () => process.exit(0));

if (kind === "js") {
  const Base = globalThis.WebSocket ?? wsPackage();
  // Every subscribe frame the client sends, with the position it resumes from.
  class Tap extends Base {
    send(data) {
      try {
        const frame = JSON.parse(String(data));
        if (frame.type === "subscribe") out({ e: "subscribe", t: frame.topic, since: frame.since ?? null });
      } catch {
        // not JSON: not ours to record
      }
      return super.send(data);
    }
  }
  const client = connect(urls, {
    WebSocket: Tap,
    initialDelayMs: 100,
    maxDelayMs: 1000,
    onListenerError: (e) => log("listener error", { message: String(e?.stack ?? e) }),
  });
  client.on("subscribed", (d) =>
    out({ e: "subscribed", t: d.topic, recovery: d.recovery, recovered: d.recovered }),
  );
  client.on("gap", (d) => out({ e: "gap", t: d.topic, resume: d.resume ?? null }));
  client.on("error", (d) => {
    if (d.topic !== undefined) out({ e: "failed", t: d.topic, why: `${d.code}: ${d.message}` });
    else log("error", d);
  });
  for (const event of ["connected", "disconnected", "rejected", "refused", "dropped", "gaveup"]) {
    client.on(event, (d) => log(event, d));
  }
  for (const topic of topics) {
    client.subscribe(topic, (data, meta) =>
      out({ e: "message", t: meta.topic, data, offset: meta.offset ?? null, epoch: meta.epoch ?? null }),
    );
  }
  onDrop = () => {
    log("drop");
    client.socket?.close(1000);
  };
} else if (kind === "raw") {
  const WebSocket = wsPackage();
  const positions = new Map();
  let node = 0;
  let current = null;
  let nextId = 1;
  const open = () => {
    const url = urls[node % urls.length];
    const ws = new WebSocket(url);
    current = ws;
    const asked = new Map(); // request id -> topic, until answered
    const reconnect = (next) => {
      if (current !== ws) return;
      current = null;
      ws.terminate();
      if (next) node += 1;
      setTimeout(open, next ? 200 : 0);
    };
    ws.on("open", () => {
      if (current !== ws) return;
      log("connected", { url });
      for (const topic of topics) {
        const id = nextId++;
        asked.set(id, topic);
        const since = positions.get(topic) ?? null;
        out({ e: "subscribe", t: topic, since });
        ws.send(JSON.stringify(since ? { type: "subscribe", topic, since, id } : { type: "subscribe", topic, id }));
      }
      setTimeout(() => {
        if (current !== ws || asked.size === 0) return;
        for (const topic of asked.values()) out({ e: "failed", t: topic, why: "timed out" });
        reconnect(true);
      }, 3000);
    });
    ws.on("message", (raw) => {
      if (current !== ws) return;
      const f = JSON.parse(String(raw));
      switch (f.type) {
        case "subscribed":
          asked.delete(f.id);
          return out({ e: "subscribed", t: f.topic, recovery: f.recovery, recovered: f.recovered });
        case "message":
          if (f.offset != null) positions.set(f.topic, { offset: f.offset, epoch: f.epoch });
          return out({ e: "message", t: f.topic, data: f.data, offset: f.offset ?? null, epoch: f.epoch ?? null });
        case "gap":
          if (f.resume) positions.set(f.topic, { offset: f.resume.offset, epoch: f.resume.epoch });
          return out({ e: "gap", t: f.topic, resume: f.resume ?? null });
        case "error":
          if (asked.has(f.id)) {
            const topic = asked.get(f.id);
            asked.delete(f.id);
            out({ e: "failed", t: topic, why: `${f.code}: ${f.message}` });
            return reconnect(true);
          }
          return log("error", f);
        default:
          return log("frame", f);
      }
    });
    ws.on("close", (code) => {
      if (current !== ws) return;
      log("disconnected", { url, code });
      reconnect(true);
    });
    ws.on("error", (e) => log("socket error", { url, message: String(e?.message ?? e) }));
  };
  onDrop = () => {
    log("drop");
    const ws = current;
    if (!ws) return;
    current = null;
    ws.terminate();
    setTimeout(open, 0); // at once, on the same node
  };
  open();
} else {
  console.error(`kind: js or raw, not ${kind}`);
  process.exit(2);
}
