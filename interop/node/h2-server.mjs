// An RFC 8441 WebSocket echo server on Node's own `http2` (no WebSocket library: ws-frame.mjs is
// the frame codec) — the reference that Sockeye's client is checked against over HTTP/2, and that
// h2-client.mjs and h2-hostile.mjs are checked against before they judge Sockeye's server.
// h2c with prior knowledge, or h2 over TLS (ALPN, no HTTP/1.1 fallback) with --tls.
// SETTINGS_ENABLE_CONNECT_PROTOCOL=1, SETTINGS_MAX_CONCURRENT_STREAMS=128.
// Usage: node h2-server.mjs PORT [--tls CERT KEY]
import { readFileSync } from "node:fs";
import http2 from "node:http2";
import { FrameDecoder, OP, ProtocolError, closePayload, encodeFrame } from "./ws-frame.mjs";

const [port, ...flags] = process.argv.slice(2);
const tls = flags.indexOf("--tls");
const options = {
  settings: { enableConnectProtocol: true, maxConcurrentStreams: 128 },
  // Node closes a session after 100 refused streams by default; the hostile flood expects only
  // the excess streams refused, as RFC 9113 §5.1.2 describes.
  maxSessionRejectedStreams: 100000,
};
const server =
  tls >= 0
    ? http2.createSecureServer({
        ...options,
        cert: readFileSync(flags[tls + 1]),
        key: readFileSync(flags[tls + 2]),
        allowHTTP1: false,
      })
    : http2.createServer(options);

server.on("stream", (stream, headers) => {
  stream.on("error", () => {});
  if (headers[":method"] !== "CONNECT" || headers[":protocol"] !== "websocket") {
    stream.respond({ ":status": 400 }, { endStream: true });
    return;
  }
  if (headers["sec-websocket-version"] !== "13") {
    stream.respond({ ":status": 426, "sec-websocket-version": "13" }, { endStream: true });
    return;
  }
  stream.respond({ ":status": 200 }); // no extension offered is accepted: the codec has none
  const decoder = new FrameDecoder({ masked: true });
  let closing = false;
  let waiting = false;
  const send = (opcode, payload) => {
    // Backpressure: stop reading (so no WINDOW_UPDATE goes out) while the peer does not read.
    if (!stream.write(encodeFrame(opcode, payload)) && !waiting) {
      waiting = true;
      stream.pause();
      stream.once("drain", () => {
        waiting = false;
        stream.resume();
      });
    }
  };
  const finish = (code, reason) => {
    if (closing) return;
    closing = true;
    send(OP.CLOSE, closePayload(code, reason));
    stream.end(); // END_STREAM after our close frame
  };
  stream.on("data", (chunk) => {
    if (closing) return;
    let events;
    try {
      events = decoder.push(chunk);
    } catch (e) {
      finish(e instanceof ProtocolError ? e.code : 1011, e.message.slice(0, 100));
      return;
    }
    for (const event of events) {
      if (event.type === "text") send(OP.TEXT, event.data);
      else if (event.type === "binary") send(OP.BINARY, event.data);
      else if (event.type === "ping") send(OP.PONG, event.data);
      else if (event.type === "close") finish(event.code, event.code === undefined ? "" : event.reason);
    }
  });
  stream.on("end", () => {
    if (!closing) {
      closing = true;
      stream.end(); // the peer ended without a close frame: end ours too
    }
  });
});
server.on("sessionError", () => {});
server.listen(Number(port), "127.0.0.1", () =>
  console.log(`node http2 RFC 8441 echo server on ${port} (${tls >= 0 ? "h2, TLS" : "h2c"})`),
);
