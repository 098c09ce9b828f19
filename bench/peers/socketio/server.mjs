// Socket.IO as a pub/sub fan-out server: node server.mjs PORT [REDIS_URL]
// WebSocket transport only. A client's "pub" event goes to every other client as "msg"
// (`socket.broadcast.emit`); with REDIS_URL, to every client on every node through
// @socket.io/redis-adapter (the `redis` client, one connection to publish and one to subscribe).
import http from "node:http";
import { Server } from "socket.io";

const [port, redisUrl] = process.argv.slice(2);
const httpServer = http.createServer({ noDelay: true });
const io = new Server(httpServer, { transports: ["websocket"], serveClient: false });
if (redisUrl) {
  const { createClient } = await import("redis");
  const { createAdapter } = await import("@socket.io/redis-adapter");
  const pub = createClient({ url: redisUrl });
  const sub = pub.duplicate();
  await Promise.all([pub.connect(), sub.connect()]);
  io.adapter(createAdapter(pub, sub));
}
io.on("connection", (socket) => {
  socket.on("pub", (data) => socket.broadcast.emit("msg", data));
});
httpServer.listen(Number(port), "127.0.0.1", () => console.log("ready"));
