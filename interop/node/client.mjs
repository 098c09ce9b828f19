// Node `ws` as a client of a Sockeye echo server: text and binary messages around every frame
// length boundary must come back unchanged. Usage: node client.mjs URL [--no-deflate] [--ca PEM]
import { readFileSync } from "node:fs";
import WebSocket from "ws";

const [url, ...flags] = process.argv.slice(2);
const deflate = !flags.includes("--no-deflate");
const caIndex = flags.indexOf("--ca");
const options = { perMessageDeflate: deflate, maxPayload: 16 << 20 };
if (caIndex >= 0) options.ca = readFileSync(flags[caIndex + 1]);

const sizes = [0, 1, 125, 126, 65535, 65536, 1 << 20];
const expected = [];
for (const size of sizes) {
  expected.push({ text: true, data: "x".repeat(size).replace(/x/g, (_, i) => String.fromCharCode(97 + (i % 26))) });
  expected.push({ text: false, data: Buffer.from(Array.from({ length: size }, (_, i) => (i * 7) % 256)) });
}
const ws = new WebSocket(url, options);
const timer = setTimeout(() => { console.error("FAIL: timed out"); process.exit(1); }, 20000);
let checked = 0;
ws.on("open", () => {
  const negotiated = ws.extensions || "none";
  if (deflate !== negotiated.includes("permessage-deflate")) {
    console.error(`FAIL: extensions ${negotiated} with deflate=${deflate}`);
    process.exit(1);
  }
  for (const m of expected) ws.send(m.data, { binary: !m.text });
});
ws.on("message", (data, isBinary) => {
  const want = expected[checked];
  const same = want.text ? !isBinary && data.toString() === want.data : isBinary && Buffer.compare(data, want.data) === 0;
  if (!same) { console.error(`FAIL: message ${checked} differs`); process.exit(1); }
  checked += 1;
  if (checked === expected.length) ws.close(1000, "done");
});
ws.on("close", (code) => {
  clearTimeout(timer);
  if (checked !== expected.length) { console.error(`FAIL: closed with ${code} after ${checked}`); process.exit(1); }
  console.log(`PASS ${checked} echoes (extensions: ${ws.extensions || "none"}), close ${code}`);
});
ws.on("error", (e) => { console.error(`FAIL: ${e.message}`); process.exit(1); });
