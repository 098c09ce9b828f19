// Node `ws` as a pub/sub fan-out server, the plain way: whatever a client sends goes to every
// other client, in a loop over `wss.clients` with `client.send(data)`.
// node pubsub.mjs PORT
import http from "node:http";
import { WebSocketServer, WebSocket } from "ws";

const [port] = process.argv.slice(2);
const server = http.createServer({ noDelay: true });
const wss = new WebSocketServer({ server, perMessageDeflate: false, maxPayload: 64 << 20 });
wss.on("connection", (ws) => {
  ws.on("message", (data, isBinary) => {
    for (const client of wss.clients) {
      if (client !== ws && client.readyState === WebSocket.OPEN) client.send(data, { binary: isBinary });
    }
  });
});
server.listen(Number(port), "127.0.0.1", () => console.log("ready"));
