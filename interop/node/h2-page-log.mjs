// Reads the axum example's request log (stderr: `request: HTTP/2.0 CONNECT /ws protocol=websocket
// peer=127.0.0.1:40000`, peer = the TCP connection) after a browser loaded its page with
// `?sockets=N`, and checks that the page's `GET /` and all N sockets were HTTP/2 on ONE connection:
// each socket an extended CONNECT stream (RFC 8441, `:protocol websocket`), no HTTP/1.1 upgrade.
// Usage: node h2-page-log.mjs LOG N
import { readFileSync } from "node:fs";

const [log, n] = [process.argv[2], Number(process.argv[3])];
const requests = readFileSync(log, "utf8").split("\n").flatMap((line) => {
  const m = /^request: (\S+) (\S+) (\S+)(?: protocol=(\S+))? peer=(\S+)$/.exec(line);
  return m ? [{ version: m[1], method: m[2], path: m[3], protocol: m[4], peer: m[5], line }] : [];
});
const fail = (why) => {
  console.log(`FAIL ${why}`);
  process.exit(1);
};
const page = requests.find((r) => r.method === "GET" && r.path === "/");
if (!page) fail(`no GET / in ${log}`);
if (page.version !== "HTTP/2.0") fail(`the page came over ${page.version}, not HTTP/2`);
const sockets = requests.filter((r) => r.path === "/ws");
for (const r of sockets) {
  if (r.version !== "HTTP/2.0" || r.method !== "CONNECT" || r.protocol !== "websocket") {
    fail(`a socket was not an RFC 8441 CONNECT: ${r.line}`);
  }
  if (r.peer !== page.peer) fail(`a socket came on ${r.peer}, the page on ${page.peer}`);
}
if (sockets.length !== n) fail(`${sockets.length} socket requests, expected ${n}`);
const http1 = requests.filter((r) => r.version !== "HTTP/2.0").length;
const peers = new Set(requests.map((r) => r.peer)).size;
if (http1 > 0) fail(`${http1} HTTP/1.x requests besides`);
console.log(`${n} sockets as RFC 8441 streams on the page's h2 connection (${requests.length} requests, ${peers} conn)`);
