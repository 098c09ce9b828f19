// Node's own `http2` client as an RFC 8441 WebSocket client (no WebSocket library: ws-frame.mjs is
// the frame codec). One session — h2c with prior knowledge for http://, h2 by ALPN for https:// —
// waits for SETTINGS_ENABLE_CONNECT_PROTOCOL, then opens 10 concurrent extended-CONNECT streams;
// each sends text and binary messages of 0 B to 70000 B and a ping, checks every echo byte for
// byte, sends close 1000, and expects close 1000 back and then the server's END_STREAM.
// Usage: node h2-client.mjs http://127.0.0.1:PORT/ | https://localhost:PORT/ [--ca PEM]
import { readFileSync } from "node:fs";
import http2 from "node:http2";
import net from "node:net";
import tls from "node:tls";
import { FrameDecoder, OP, closePayload, encodeFrame } from "./ws-frame.mjs";

const STREAMS = 10;
const SIZES = [0, 1, 125, 126, 65535, 65536, 70000];

const [url, ...flags] = process.argv.slice(2);
const caIndex = flags.indexOf("--ca");
const ca = caIndex >= 0 ? readFileSync(flags[caIndex + 1]) : undefined;
const u = new URL(url);
const secure = u.protocol === "https:";
const port = Number(u.port || (secure ? 443 : 80));
const fail = (why) => {
  console.error(`FAIL: ${why}`);
  process.exit(1);
};
setTimeout(() => fail("timed out after 30 s"), 30000).unref();

let sockets = 0;
let socket;
const session = http2.connect(u.origin, {
  settings: { enablePush: false },
  createConnection: () => {
    sockets += 1; // every TCP connection the session makes goes through here
    socket = secure
      ? tls.connect({ host: u.hostname, port, servername: net.isIP(u.hostname) ? undefined : u.hostname, ca, ALPNProtocols: ["h2"] })
      : net.connect({ host: u.hostname, port });
    return socket;
  },
});
session.on("error", (e) => fail(`session: ${e.message}`));
session.on("goaway", (code) => fail(`GOAWAY ${code} from the server`));

await new Promise((resolve) => {
  session.once("remoteSettings", (s) => (s.enableConnectProtocol ? resolve() : fail("no SETTINGS_ENABLE_CONNECT_PROTOCOL=1")));
});
if (secure && socket.alpnProtocol !== "h2") fail(`ALPN chose ${socket.alpnProtocol}`);
const settings = session.remoteSettings;

function message(stream, size, text) {
  if (text) return Array.from({ length: size }, (_, i) => String.fromCharCode(97 + ((i + stream) % 26))).join("");
  return Buffer.from(Array.from({ length: size }, (_, i) => (i * 7 + stream) % 256));
}

function run(k) {
  return new Promise((resolve, reject) => {
    const req = session.request({
      ":method": "CONNECT",
      ":protocol": "websocket",
      ":scheme": secure ? "https" : "http",
      ":path": u.pathname + u.search,
      ":authority": u.host,
      "sec-websocket-version": "13",
    });
    const onSession = req.session === session;
    const expected = [];
    for (const size of SIZES) for (const text of [true, false]) expected.push({ text, data: message(k, size, text) });
    const pingData = Buffer.from(`ping ${k}`);
    const decoder = new FrameDecoder({ masked: false });
    let echoed = 0;
    let ponged = false;
    let closeCode = null;
    let ended = false;
    const bad = (why) => {
      req.close(http2.constants.NGHTTP2_CANCEL);
      reject(new Error(`stream ${req.id}: ${why}`));
    };
    req.on("error", (e) => bad(e.message));
    req.on("response", (headers) => {
      if (headers[":status"] !== 200) return bad(`:status ${headers[":status"]}`);
      if (headers["sec-websocket-extensions"]) return bad(`extensions ${headers["sec-websocket-extensions"]} never offered`);
      for (const [i, m] of expected.entries()) {
        req.write(encodeFrame(m.text ? OP.TEXT : OP.BINARY, m.data, { mask: true }));
        if (i === 5) req.write(encodeFrame(OP.PING, pingData, { mask: true }));
      }
    });
    req.on("data", (chunk) => {
      let events;
      try {
        events = decoder.push(chunk);
      } catch (e) {
        return bad(e.message);
      }
      for (const event of events) {
        if (event.type === "pong") {
          if (!event.data.equals(pingData)) return bad("pong payload differs");
          ponged = true;
        } else if (event.type === "close") {
          if (echoed !== expected.length) return bad(`close ${event.code} after ${echoed} echoes`);
          closeCode = event.code;
        } else if (event.type === "ping") {
          req.write(encodeFrame(OP.PONG, event.data, { mask: true }));
        } else {
          const want = expected[echoed];
          const same = want.text
            ? event.type === "text" && event.data === want.data
            : event.type === "binary" && event.data.equals(want.data);
          if (!same) return bad(`echo ${echoed} (${want.data.length} B ${want.text ? "text" : "binary"}) differs`);
          echoed += 1;
          if (echoed === expected.length) req.write(encodeFrame(OP.CLOSE, closePayload(1000, "done"), { mask: true }));
        }
      }
    });
    req.on("end", () => {
      ended = true;
      if (closeCode === null) return bad("END_STREAM before the close frame");
      req.end(); // our END_STREAM, after the server's
    });
    req.on("close", () => {
      if (!ended || closeCode === null) return bad(`stream closed (RST_STREAM ${req.rstCode}) before the closing handshake`);
      if (req.rstCode !== 0) return bad(`RST_STREAM ${req.rstCode}`);
      if (closeCode !== 1000) return bad(`close code ${closeCode}`);
      if (!ponged) return bad("no pong");
      resolve({ id: req.id, onSession, echoed });
    });
  });
}

const results = await Promise.all(Array.from({ length: STREAMS }, (_, k) => run(k))).catch((e) => fail(e.message));
const ids = new Set(results.map((r) => r.id));
if (ids.size !== STREAMS || results.some((r) => !r.onSession) || sockets !== 1)
  fail(`streams ${[...ids]} over ${sockets} connection(s)`);
const echoes = results.reduce((n, r) => n + r.echoed, 0);
session.close(() => {
  console.log(`server SETTINGS: ENABLE_CONNECT_PROTOCOL=1, MAX_CONCURRENT_STREAMS=${settings.maxConcurrentStreams}`);
  console.log(
    `PASS ${STREAMS} streams (ids ${Math.min(...ids)}..${Math.max(...ids)}) on 1 ${secure ? "h2 (ALPN)" : "h2c"} connection: ` +
      `${echoes} echoes 0..70000 B, pongs, close 1000 + END_STREAM`,
  );
});
