// Node `ws` as a benchmark server: node server.mjs echo|push|deflate|deflate-push PORT [N]
// BENCH_TLS=DIR serves wss:// with DIR/cert.pem and DIR/key.pem; BENCH_NODELAY=0 leaves Nagle on.
import { readFileSync } from "node:fs";
import http from "node:http";
import https from "node:https";
import { WebSocketServer } from "ws";

const [mode, port, n = "1000000"] = process.argv.slice(2);
const tls = process.env.BENCH_TLS;
const noDelay = process.env.BENCH_NODELAY !== "0";
const server = tls
  ? https.createServer({ key: readFileSync(`${tls}/key.pem`), cert: readFileSync(`${tls}/cert.pem`), noDelay })
  : http.createServer({ noDelay });
const wss = new WebSocketServer({
  server,
  perMessageDeflate: mode.startsWith("deflate"),
  maxPayload: 64 << 20,
});
// The same ~1.2 KiB document as sockeye_bench::json_document.
const json = Array.from({ length: 24 }, (_, i) =>
  `{"id":${i},"name":"sensor-${i}","value":${i * 3}.25,"ok":true},`).join("");
wss.on("connection", (ws) => {
  if (mode === "push" || mode === "deflate-push") {
    const message = mode === "push" ? "yo" : json;
    const total = Number(n);
    let sent = 0;
    // Send until the socket buffers, then continue when it drains (ws has no other backpressure).
    const pump = () => {
      while (sent < total) {
        ws.send(message);
        sent += 1;
        if (ws.bufferedAmount > 1 << 20) return setTimeout(pump, 1);
      }
      ws.close(1000);
    };
    pump();
    return;
  }
  ws.on("message", (data, isBinary) => ws.send(data, { binary: isBinary }));
});
server.listen(Number(port), "127.0.0.1", () => console.log("ready"));
