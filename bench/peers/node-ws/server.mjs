// Node `ws` as a benchmark server: node server.mjs echo|push|deflate PORT [N]
import { WebSocketServer } from "ws";

const [mode, port, n = "1000000"] = process.argv.slice(2);
const wss = new WebSocketServer({
  port: Number(port),
  host: "127.0.0.1",
  perMessageDeflate: mode === "deflate",
  maxPayload: 64 << 20,
});
wss.on("connection", (ws) => {
  if (mode === "push") {
    const total = Number(n);
    let sent = 0;
    // Send until the socket buffers, then continue when it drains (ws has no other backpressure).
    const pump = () => {
      while (sent < total) {
        ws.send("yo");
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
wss.on("listening", () => console.log("ready"));
