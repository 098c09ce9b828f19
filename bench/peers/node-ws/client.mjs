// Node `ws` as a push client: node client.mjs ADDR N — receives N text messages "yo", prints one
// JSON line (msgs/s from the first message).
import WebSocket from "ws";

const [addr, n] = process.argv.slice(2);
const total = Number(n);
const ws = new WebSocket(`ws://${addr}/`, { perMessageDeflate: false });
let count = 0;
let started;
ws.on("message", (data, isBinary) => {
  if (isBinary || data.length !== 2 || data[0] !== 0x79 || data[1] !== 0x6f) throw new Error("unexpected message");
  started ??= process.hrtime.bigint();
  count += 1;
  if (count === total) {
    const secs = Number(process.hrtime.bigint() - started) / 1e9;
    console.log(JSON.stringify({ msgs_per_s: Math.round(count / secs), messages: count, seconds: secs }));
    ws.terminate();
  }
});
ws.on("close", () => { if (count !== total) { console.error(`received ${count} of ${total}`); process.exit(1); } });
ws.on("error", (e) => { console.error(e.message); process.exit(1); });
