// Node `ws` as an echo server for Sockeye's client. Usage: node server.mjs PORT [--no-deflate]
// [--tls CERT KEY]
import { readFileSync } from "node:fs";
import { createServer } from "node:https";
import { WebSocketServer } from "ws";

const [port, ...flags] = process.argv.slice(2);
const perMessageDeflate = !flags.includes("--no-deflate");
const tls = flags.indexOf("--tls");
const options = { perMessageDeflate, maxPayload: 16 << 20 };
let wss;
if (tls >= 0) {
  const server = createServer({ cert: readFileSync(flags[tls + 1]), key: readFileSync(flags[tls + 2]) });
  wss = new WebSocketServer({ server, ...options });
  server.listen(Number(port), "127.0.0.1");
} else {
  wss = new WebSocketServer({ port: Number(port), host: "127.0.0.1", ...options });
}
wss.on("connection", (ws) => {
  ws.on("message", (data, isBinary) => ws.send(data, { binary: isBinary }));
});
console.log(`node ws echo server on ${port}`);
