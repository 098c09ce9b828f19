// Hostile HTTP/2 input against an RFC 8441 WebSocket server. Every case opens a healthy WebSocket
// stream first, on the same connection, and proves that the refusal stays on the offending stream:
// the healthy stream still echoes afterwards and no GOAWAY arrives.
//   a  CONNECT without :protocol (Node's client)              → a 4xx or RST_STREAM on that stream
//   b  :protocol chat (Node's client)                         → 4xx
//   f  sec-websocket-version 8 (Node's client)                → 426 + sec-websocket-version: 13
//   c  DATA after END_STREAM (raw frames)                     → RST_STREAM on that stream
//   d  300 streams at once, over SETTINGS_MAX_CONCURRENT_STREAMS (raw) → the excess refused
//   e  a stream whose reader never grants window while it asks for MiBs of echo (raw)
//      → the healthy stream keeps echoing, each message well under a second
// (c–e write HTTP/2 frames by hand over a socket — HPACK literals without indexing, no Huffman —
// and decode the server's header blocks with a small HPACK decoder, Huffman included.)
// Prints one line per case and a summary; exit 0 if every case behaved.
// Usage: node h2-hostile.mjs http://127.0.0.1:PORT/ | https://localhost:PORT/ [--ca PEM] [CASES, e.g. cde]
import { EventEmitter } from "node:events";
import { readFileSync } from "node:fs";
import http2 from "node:http2";
import net from "node:net";
import tls from "node:tls";
import { FrameDecoder, OP, closePayload, encodeFrame } from "./ws-frame.mjs";

const args = process.argv.slice(2);
const u = new URL(args[0]);
const caIndex = args.indexOf("--ca");
const ca = caIndex >= 0 ? readFileSync(args[caIndex + 1]) : undefined;
const only = args.slice(1).find((a, i) => /^[a-f]+$/.test(a) && args[i] !== "--ca");
const secure = u.protocol === "https:";
const port = Number(u.port || (secure ? 443 : 80));
setTimeout(() => {
  console.error("FAIL: timed out after 55 s");
  process.exit(1);
}, 55000).unref();

const TRACE = process.env.H2_TRACE === "1"; // H2_TRACE=1: every frame received, on stderr
const sleep = (ms) => new Promise((r) => setTimeout(r, ms));
const ERRORS = ["NO_ERROR", "PROTOCOL_ERROR", "INTERNAL_ERROR", "FLOW_CONTROL_ERROR", "SETTINGS_TIMEOUT", "STREAM_CLOSED",
  "FRAME_SIZE_ERROR", "REFUSED_STREAM", "CANCEL", "COMPRESSION_ERROR", "CONNECT_ERROR", "ENHANCE_YOUR_CALM",
  "INADEQUATE_SECURITY", "HTTP_1_1_REQUIRED"];
const errName = (code) => (code === null ? "none" : code < 0 ? "(none: connection dropped)" : ERRORS[code] ?? `0x${code.toString(16)}`);
class CaseFailure extends Error {}
const check = (ok, why) => {
  if (!ok) throw new CaseFailure(why);
};

// ---------------------------------------------------------------------------------------------
// HPACK (RFC 7541): the encoder writes only literals without indexing and without Huffman; the
// decoder handles everything a server may send (static and dynamic table, Huffman strings).
const STATIC = [
  null, [":authority", ""], [":method", "GET"], [":method", "POST"], [":path", "/"], [":path", "/index.html"],
  [":scheme", "http"], [":scheme", "https"], [":status", "200"], [":status", "204"], [":status", "206"],
  [":status", "304"], [":status", "400"], [":status", "404"], [":status", "500"], ["accept-charset", ""],
  ["accept-encoding", "gzip, deflate"], ["accept-language", ""], ["accept-ranges", ""], ["accept", ""],
  ["access-control-allow-origin", ""], ["age", ""], ["allow", ""], ["authorization", ""], ["cache-control", ""],
  ["content-disposition", ""], ["content-encoding", ""], ["content-language", ""], ["content-length", ""],
  ["content-location", ""], ["content-range", ""], ["content-type", ""], ["cookie", ""], ["date", ""], ["etag", ""],
  ["expect", ""], ["expires", ""], ["from", ""], ["host", ""], ["if-match", ""], ["if-modified-since", ""],
  ["if-none-match", ""], ["if-range", ""], ["if-unmodified-since", ""], ["last-modified", ""], ["link", ""],
  ["location", ""], ["max-forwards", ""], ["proxy-authenticate", ""], ["proxy-authorization", ""], ["range", ""],
  ["referer", ""], ["refresh", ""], ["retry-after", ""], ["server", ""], ["set-cookie", ""],
  ["strict-transport-security", ""], ["transfer-encoding", ""], ["user-agent", ""], ["vary", ""], ["via", ""],
  ["www-authenticate", ""],
];
// Code lengths of the canonical Huffman code of RFC 7541 Appendix B, symbols 0..256 (256 = EOS).
const HUFFMAN_LENGTHS = [
  13, 23, 28, 28, 28, 28, 28, 28, 28, 24, 30, 28, 28, 30, 28, 28, 28, 28, 28, 28, 28, 28, 30, 28, 28, 28, 28, 28, 28, 28,
  28, 28, 6, 10, 10, 12, 13, 6, 8, 11, 10, 10, 8, 11, 8, 6, 6, 6, 5, 5, 5, 6, 6, 6, 6, 6, 6, 6, 7, 8, 15, 6, 12, 10, 13,
  6, 7, 7, 7, 7, 7, 7, 7, 7, 7, 7, 7, 7, 7, 7, 7, 7, 7, 7, 7, 7, 7, 7, 8, 7, 8, 13, 19, 13, 14, 6, 15, 5, 6, 5, 6, 5, 6,
  6, 6, 5, 7, 7, 6, 6, 6, 5, 6, 7, 6, 5, 5, 6, 7, 7, 7, 7, 7, 15, 11, 14, 13, 28, 20, 22, 20, 20, 22, 22, 22, 23, 22, 23,
  23, 23, 23, 23, 24, 23, 24, 24, 22, 23, 24, 23, 23, 23, 23, 21, 22, 23, 22, 23, 23, 24, 22, 21, 20, 22, 22, 23, 23, 21,
  23, 22, 22, 24, 21, 22, 23, 23, 21, 21, 22, 21, 23, 22, 23, 23, 20, 22, 22, 22, 23, 22, 22, 23, 26, 26, 20, 19, 22, 23,
  22, 25, 26, 26, 26, 27, 27, 26, 24, 25, 19, 21, 26, 27, 27, 26, 27, 24, 21, 21, 26, 26, 28, 27, 27, 27, 20, 24, 20, 21,
  22, 21, 21, 23, 22, 22, 25, 25, 24, 24, 26, 23, 26, 27, 26, 26, 27, 27, 27, 27, 27, 28, 27, 27, 27, 27, 27, 26, 30,
];
const HUFFMAN_TREE = (() => {
  const root = {};
  const order = HUFFMAN_LENGTHS.map((len, sym) => [len, sym]).sort((a, b) => a[0] - b[0] || a[1] - b[1]);
  let code = 0;
  let prev = order[0][0];
  for (const [i, [len, sym]] of order.entries()) {
    if (i) code = (code + 1) * 2 ** (len - prev);
    prev = len;
    let node = root;
    for (let bit = len - 1; bit >= 0; bit--) {
      const b = Math.floor(code / 2 ** bit) & 1;
      if (bit === 0) node[b] = { sym };
      else node = node[b] ??= {};
    }
  }
  return root;
})();

function huffmanDecode(bytes) {
  const out = [];
  let node = HUFFMAN_TREE;
  let depth = 0;
  let ones = true;
  for (const byte of bytes) {
    for (let bit = 7; bit >= 0; bit--) {
      const b = (byte >> bit) & 1;
      node = node[b];
      depth += 1;
      ones &&= b === 1;
      if (!node) throw new Error("HPACK: bad Huffman code");
      if (node.sym !== undefined) {
        if (node.sym === 256) throw new Error("HPACK: EOS in a string");
        out.push(node.sym);
        node = HUFFMAN_TREE;
        depth = 0;
        ones = true;
      }
    }
  }
  if (depth > 7 || !ones) throw new Error("HPACK: bad Huffman padding");
  return Buffer.from(out).toString("latin1");
}
if (huffmanDecode(Buffer.from("f1e3c2e5f23a6ba0ab90f4ff", "hex")) !== "www.example.com") throw new Error("Huffman self-test");

function hpackInt(value, prefixBits, firstByteFlags) {
  const max = (1 << prefixBits) - 1;
  if (value < max) return [firstByteFlags | value];
  const out = [firstByteFlags | max];
  value -= max;
  while (value >= 128) {
    out.push((value % 128) | 128);
    value = Math.floor(value / 128);
  }
  out.push(value);
  return out;
}

function hpackEncode(headers) {
  const out = [];
  for (const [name, value] of headers) {
    const n = Buffer.from(name, "latin1");
    const v = Buffer.from(value, "latin1");
    out.push(Buffer.from([0x00]), Buffer.from(hpackInt(n.length, 7, 0)), n, Buffer.from(hpackInt(v.length, 7, 0)), v);
  }
  return Buffer.concat(out);
}

class HpackDecoder {
  constructor() {
    this.dynamic = []; // newest first
    this.size = 0;
    this.max = 4096;
  }
  #evict() {
    while (this.size > this.max) {
      const [n, v] = this.dynamic.pop();
      this.size -= n.length + v.length + 32;
    }
  }
  #entry(index) {
    if (index > 0 && index < STATIC.length) return STATIC[index];
    const e = this.dynamic[index - STATIC.length];
    if (!e) throw new Error(`HPACK: index ${index} out of range`);
    return e;
  }
  decode(block) {
    let i = 0;
    const int = (prefixBits) => {
      const max = (1 << prefixBits) - 1;
      let value = block[i++] & max;
      if (value < max) return value;
      let shift = 0;
      let b;
      do {
        b = block[i++];
        value += (b & 127) * 2 ** shift;
        shift += 7;
      } while (b & 128);
      return value;
    };
    const str = () => {
      const huffman = (block[i] & 0x80) !== 0;
      const len = int(7);
      const raw = block.subarray(i, i + len);
      i += len;
      return huffman ? huffmanDecode(raw) : raw.toString("latin1");
    };
    const headers = [];
    while (i < block.length) {
      const b = block[i];
      if (b & 0x80) {
        headers.push([...this.#entry(int(7))]);
      } else if (b & 0x40) {
        const index = int(6);
        const name = index ? this.#entry(index)[0] : str();
        const entry = [name, str()];
        headers.push(entry);
        this.dynamic.unshift(entry);
        this.size += entry[0].length + entry[1].length + 32;
        this.#evict();
      } else if (b & 0x20) {
        this.max = int(5);
        this.#evict();
      } else {
        const index = int(4);
        const name = index ? this.#entry(index)[0] : str();
        headers.push([name, str()]);
      }
    }
    return headers;
  }
}

// ---------------------------------------------------------------------------------------------
// A raw HTTP/2 client connection: frame writer and reader, flow control on what it sends, window
// updates for what it receives (unless a stream is `stuck`), and WebSocket streams on top.
const FRAME = { DATA: 0, HEADERS: 1, PRIORITY: 2, RST_STREAM: 3, SETTINGS: 4, PUSH_PROMISE: 5, PING: 6, GOAWAY: 7, WINDOW_UPDATE: 8, CONTINUATION: 9 };
const FLAG = { END_STREAM: 1, ACK: 1, END_HEADERS: 4, PADDED: 8, PRIORITY: 0x20 };
const SETTING = { HEADER_TABLE_SIZE: 1, ENABLE_PUSH: 2, MAX_CONCURRENT_STREAMS: 3, INITIAL_WINDOW_SIZE: 4, MAX_FRAME_SIZE: 5, ENABLE_CONNECT_PROTOCOL: 8 };

class RawConnection extends EventEmitter {
  constructor() {
    super();
    this.setMaxListeners(1000);
    this.streams = new Map();
    this.nextId = 1;
    this.remote = { [SETTING.INITIAL_WINDOW_SIZE]: 65535, [SETTING.MAX_FRAME_SIZE]: 16384 };
    this.gotSettings = false;
    this.sendWindow = 65535;
    this.goaway = null;
    this.closed = false;
    this.hpack = new HpackDecoder();
    this.buffer = Buffer.alloc(0);
    this.headerBlock = null; // { id, flags, parts } while CONTINUATION frames are expected
  }

  async open() {
    this.socket = secure
      ? tls.connect({ host: u.hostname, port, servername: net.isIP(u.hostname) ? undefined : u.hostname, ca, ALPNProtocols: ["h2"] })
      : net.connect({ host: u.hostname, port });
    this.socket.setNoDelay(true);
    this.socket.on("data", (chunk) => this.#read(chunk));
    this.socket.on("error", (e) => {
      this.error = e;
    });
    this.socket.on("close", () => {
      this.closed = true;
      this.emit("update");
    });
    await new Promise((resolve, reject) => {
      this.socket.once(secure ? "secureConnect" : "connect", resolve);
      this.socket.once("error", reject);
    });
    if (secure && this.socket.alpnProtocol !== "h2") throw new CaseFailure(`ALPN chose ${this.socket.alpnProtocol}`);
    this.socket.write("PRI * HTTP/2.0\r\n\r\nSM\r\n\r\n");
    this.frame(FRAME.SETTINGS, 0, 0, this.#settings({ [SETTING.ENABLE_PUSH]: 0 }));
    await this.until(() => this.gotSettings, 3000, "the server's SETTINGS");
    check(this.remote[SETTING.ENABLE_CONNECT_PROTOCOL] === 1, "no SETTINGS_ENABLE_CONNECT_PROTOCOL=1");
  }

  #settings(values) {
    const b = Buffer.alloc(6 * Object.keys(values).length);
    Object.entries(values).forEach(([id, v], i) => {
      b.writeUInt16BE(Number(id), 6 * i);
      b.writeUInt32BE(v, 6 * i + 2);
    });
    return b;
  }

  frame(type, flags, id, payload = Buffer.alloc(0)) {
    this.socket.write(this.encodeFrame(type, flags, id, payload));
  }

  encodeFrame(type, flags, id, payload = Buffer.alloc(0)) {
    const head = Buffer.alloc(9);
    head.writeUIntBE(payload.length, 0, 3);
    head[3] = type;
    head[4] = flags;
    head.writeUInt32BE(id, 5);
    return Buffer.concat([head, payload]);
  }

  // Resolves once pred() holds (checked after every frame received), or throws after `ms`.
  until(pred, ms, what) {
    return new Promise((resolve, reject) => {
      const done = () => {
        if (pred()) {
          clearTimeout(timer);
          this.off("update", done);
          resolve();
        } else if (this.closed) {
          clearTimeout(timer);
          this.off("update", done);
          reject(new CaseFailure(`connection closed waiting for ${what}${this.goawayText()}`));
        }
      };
      const timer = setTimeout(() => {
        this.off("update", done);
        reject(new CaseFailure(`no ${what} within ${ms} ms${this.goawayText()}`));
      }, ms);
      this.on("update", done);
      done();
    });
  }

  goawayText() {
    return this.goaway ? ` (GOAWAY ${errName(this.goaway.code)}${this.goaway.debug ? ` "${this.goaway.debug}"` : ""})` : "";
  }

  stream(id) {
    let s = this.streams.get(id);
    if (!s) {
      s = {
        id, status: null, headers: null, rst: null, remoteEnded: false, localEnded: false, stuck: false,
        sendWindow: this.remote[SETTING.INITIAL_WINDOW_SIZE], queue: [], queued: 0, sent: 0, received: 0,
        decoder: new FrameDecoder({ masked: false }), events: [], wsError: null,
      };
      this.streams.set(id, s);
    }
    return s;
  }

  headersFrame(id, headers, endStream = false) {
    this.stream(id);
    return this.encodeFrame(FRAME.HEADERS, FLAG.END_HEADERS | (endStream ? FLAG.END_STREAM : 0), id, hpackEncode(headers));
  }

  connectHeaders(protocol = "websocket", version = "13") {
    const h = [[":method", "CONNECT"]];
    if (protocol !== null) h.push([":protocol", protocol]);
    h.push([":scheme", secure ? "https" : "http"], [":path", u.pathname], [":authority", u.host]);
    if (version !== null) h.push(["sec-websocket-version", version]);
    return h;
  }

  // Opens an extended-CONNECT WebSocket stream and waits for its :status 200.
  async openWebSocket() {
    const id = this.nextId;
    this.nextId += 2;
    this.socket.write(this.headersFrame(id, this.connectHeaders()));
    const s = this.stream(id);
    await this.until(() => s.status !== null || s.rst !== null, 3000, `a response on stream ${id}`);
    check(s.status === "200", `stream ${id}: ${s.rst !== null ? `RST_STREAM ${errName(s.rst)}` : `:status ${s.status}`}`);
    return s;
  }

  // Queues DATA for a stream, sent as the server's windows allow.
  send(s, bytes, endStream = false) {
    s.queue.push({ bytes, endStream });
    s.queued += bytes.length;
    this.#flush();
  }

  sendWs(s, opcode, payload) {
    this.send(s, encodeFrame(opcode, payload, { mask: true }));
  }

  #flush() {
    const maxFrame = this.remote[SETTING.MAX_FRAME_SIZE];
    for (const s of [...this.streams.values()].sort((a, b) => a.id - b.id)) {
      while (s.queue.length && s.rst === null) {
        const item = s.queue[0];
        const n = Math.min(item.bytes.length, maxFrame, this.sendWindow, s.sendWindow);
        if (n === 0 && item.bytes.length) break;
        const last = n === item.bytes.length;
        this.frame(FRAME.DATA, last && item.endStream ? FLAG.END_STREAM : 0, s.id, item.bytes.subarray(0, n));
        this.sendWindow -= n;
        s.sendWindow -= n;
        s.sent += n;
        s.queued -= n;
        if (last) {
          s.queue.shift();
          if (item.endStream) s.localEnded = true;
        } else item.bytes = item.bytes.subarray(n);
      }
    }
  }

  // Sends a text message on a WebSocket stream and times its echo.
  async echo(s, text, ms = 3000) {
    const start = performance.now();
    const before = s.events.length;
    this.sendWs(s, OP.TEXT, text);
    await this.until(() => s.events.length > before || s.wsError || s.rst !== null, ms, `echo on stream ${s.id}`);
    check(!s.wsError, `stream ${s.id}: ${s.wsError?.message}`);
    check(s.rst === null, `stream ${s.id}: RST_STREAM ${errName(s.rst)}`);
    const e = s.events[before];
    check(e.type === "text" && e.data === text, `stream ${s.id}: echo of "${text}" differs (${e.type})`);
    return performance.now() - start;
  }

  // The closing handshake: close 1000 out, close 1000 and END_STREAM back, END_STREAM out.
  async closeWebSocket(s) {
    this.sendWs(s, OP.CLOSE, closePayload(1000, "bye"));
    await this.until(() => s.events.some((e) => e.type === "close") && s.remoteEnded, 3000, `close + END_STREAM on stream ${s.id}`);
    const close = s.events.find((e) => e.type === "close");
    check(close.code === 1000, `stream ${s.id}: close reply ${close.code}`);
    this.send(s, Buffer.alloc(0), true);
  }

  // The connection must still be up and without GOAWAY; then it is closed politely.
  finish() {
    check(!this.closed && !this.goaway, `the connection did not survive${this.goawayText()}`);
    this.frame(FRAME.GOAWAY, 0, 0, Buffer.alloc(8)); // last stream 0, NO_ERROR
    this.socket.end();
  }

  destroy() {
    this.socket?.destroy();
  }

  #read(chunk) {
    this.buffer = this.buffer.length ? Buffer.concat([this.buffer, chunk]) : chunk;
    while (this.buffer.length >= 9) {
      const len = this.buffer.readUIntBE(0, 3);
      if (this.buffer.length < 9 + len) break;
      const type = this.buffer[3];
      const flags = this.buffer[4];
      const id = this.buffer.readUInt32BE(5) & 0x7fffffff;
      const payload = this.buffer.subarray(9, 9 + len);
      this.buffer = this.buffer.subarray(9 + len);
      try {
        this.#frameIn(type, flags, id, payload);
      } catch (e) {
        this.goaway ??= { code: -1, debug: `unreadable input from the server: ${e.message}` };
        this.socket.destroy();
        break;
      }
    }
    this.emit("update");
  }

  #frameIn(type, flags, id, payload) {
    if (TRACE) console.error(`<- ${Object.keys(FRAME).find((k) => FRAME[k] === type) ?? type} flags=0x${flags.toString(16)} stream=${id} len=${payload.length}${type === FRAME.RST_STREAM || type === FRAME.GOAWAY ? ` ${payload.toString("hex")}` : ""}`);
    if (this.headerBlock && type !== FRAME.CONTINUATION) throw new Error("HEADERS without their CONTINUATION");
    switch (type) {
      case FRAME.SETTINGS: {
        if (flags & FLAG.ACK) return;
        for (let i = 0; i + 6 <= payload.length; i += 6) {
          const key = payload.readUInt16BE(i);
          const value = payload.readUInt32BE(i + 2);
          if (key === SETTING.INITIAL_WINDOW_SIZE) {
            const delta = value - this.remote[key];
            for (const s of this.streams.values()) s.sendWindow += delta;
          }
          this.remote[key] = value;
        }
        this.gotSettings = true;
        this.frame(FRAME.SETTINGS, FLAG.ACK, 0);
        this.#flush();
        return;
      }
      case FRAME.PING:
        if (!(flags & FLAG.ACK)) this.frame(FRAME.PING, FLAG.ACK, 0, payload);
        return;
      case FRAME.GOAWAY:
        this.goaway = { last: payload.readUInt32BE(0) & 0x7fffffff, code: payload.readUInt32BE(4), debug: payload.subarray(8).toString() };
        return;
      case FRAME.WINDOW_UPDATE: {
        const inc = payload.readUInt32BE(0) & 0x7fffffff;
        if (id === 0) this.sendWindow += inc;
        else this.stream(id).sendWindow += inc;
        this.#flush();
        return;
      }
      case FRAME.RST_STREAM:
        this.stream(id).rst = payload.readUInt32BE(0);
        return;
      case FRAME.HEADERS:
      case FRAME.CONTINUATION: {
        let block = payload;
        if (type === FRAME.HEADERS) {
          let start = 0;
          let end = block.length;
          if (flags & FLAG.PADDED) {
            start = 1;
            end -= block[0];
          }
          if (flags & FLAG.PRIORITY) start += 5;
          block = block.subarray(start, end);
          this.headerBlock = { id, endStream: (flags & FLAG.END_STREAM) !== 0, parts: [] };
        }
        this.headerBlock.parts.push(Buffer.from(block));
        if (flags & FLAG.END_HEADERS) {
          const { endStream, parts } = this.headerBlock;
          this.headerBlock = null;
          const headers = this.hpack.decode(Buffer.concat(parts));
          const s = this.stream(id);
          if (s.headers === null) {
            s.headers = headers;
            s.status = headers.find(([n]) => n === ":status")?.[1] ?? null;
          }
          if (endStream) s.remoteEnded = true;
        }
        return;
      }
      case FRAME.DATA: {
        const s = this.stream(id);
        let data = payload;
        if (flags & FLAG.PADDED) data = data.subarray(1, data.length - data[0]);
        s.received += data.length;
        if (payload.length) {
          const inc = Buffer.alloc(4);
          inc.writeUInt32BE(payload.length);
          this.frame(FRAME.WINDOW_UPDATE, 0, 0, inc); // the connection window always
          if (!s.stuck && !(flags & FLAG.END_STREAM)) this.frame(FRAME.WINDOW_UPDATE, 0, id, inc);
        }
        if (flags & FLAG.END_STREAM) s.remoteEnded = true;
        if (!s.stuck && !s.wsError) {
          try {
            s.events.push(...s.decoder.push(Buffer.from(data)));
          } catch (e) {
            s.wsError = e;
          }
        }
        return;
      }
      default:
        return; // PRIORITY, unknown types: ignored
    }
  }
}

// ---------------------------------------------------------------------------------------------
// The cases.

async function withRaw(body) {
  const c = new RawConnection();
  try {
    await c.open();
    return await body(c);
  } finally {
    c.destroy();
  }
}

// a, b, f: Node's own client. A healthy WebSocket stream, then the bad request, then an echo.
async function nodeCase(badHeaders, judge) {
  const session = http2.connect(u.origin, { ca, settings: { enablePush: false } });
  let goaway = null;
  session.on("goaway", (code) => {
    goaway = code;
  });
  session.on("error", () => {});
  try {
    await new Promise((resolve, reject) => {
      const t = setTimeout(() => reject(new CaseFailure("no SETTINGS_ENABLE_CONNECT_PROTOCOL=1 within 3 s")), 3000);
      const ok = () => session.remoteSettings?.enableConnectProtocol && (clearTimeout(t), resolve());
      session.on("remoteSettings", ok);
      session.once("connect", ok);
    });
    const healthy = session.request({
      ":method": "CONNECT", ":protocol": "websocket", ":scheme": secure ? "https" : "http", ":path": u.pathname,
      ":authority": u.host, "sec-websocket-version": "13",
    });
    healthy.on("error", () => {});
    const decoder = new FrameDecoder({ masked: false });
    const events = [];
    let wake = () => {};
    healthy.on("data", (chunk) => {
      try {
        events.push(...decoder.push(chunk));
      } catch (e) {
        events.push({ type: `WebSocket error (${e.message})` });
      }
      wake();
    });
    healthy.on("end", () => {
      events.push({ type: "end" });
      wake();
    });
    const next = (ms, what) =>
      new Promise((resolve, reject) => {
        if (events.length) return resolve(events.shift());
        const t = setTimeout(() => reject(new CaseFailure(`no ${what} within ${ms} ms${goaway !== null ? ` (GOAWAY ${goaway})` : ""}`)), ms);
        wake = () => {
          clearTimeout(t);
          wake = () => {};
          resolve(events.shift());
        };
      });
    const echo = async (text) => {
      healthy.write(encodeFrame(OP.TEXT, text, { mask: true }));
      const e = await next(3000, `echo of "${text}"`);
      check(e.type === "text" && e.data === text, `healthy stream: echo of "${text}" differs`);
    };
    const status = await new Promise((resolve, reject) => {
      healthy.once("response", (h) => resolve(h[":status"]));
      healthy.once("close", () => reject(new CaseFailure(`healthy stream reset: ${healthy.rstCode}`)));
    });
    check(status === 200, `healthy stream: :status ${status}`);
    await echo("before");

    const bad = session.request(badHeaders, { endStream: false });
    bad.on("error", () => {});
    const outcome = await new Promise((resolve) => {
      const t = setTimeout(() => resolve({ timeout: true }), 3000);
      bad.once("response", (h) => {
        clearTimeout(t);
        resolve({ headers: h });
      });
      bad.once("close", () => {
        clearTimeout(t);
        resolve({ rst: bad.rstCode });
      });
    });
    if (!bad.closed) bad.close(http2.constants.NGHTTP2_CANCEL);
    const verdict = judge(outcome);

    await echo("after");
    healthy.write(encodeFrame(OP.CLOSE, closePayload(1000, "bye"), { mask: true }));
    const close = await next(3000, "close reply");
    check(close.type === "close" && close.code === 1000, `healthy stream: close reply ${close.type} ${close.code}`);
    const end = await next(3000, "END_STREAM after the close reply");
    check(end.type === "end", "healthy stream: data after the close reply");
    healthy.end();
    check(goaway === null && !session.closed && !session.destroyed, `the connection did not survive (GOAWAY ${goaway})`);
    return `${verdict}; healthy stream echoed after it, closed 1000, no GOAWAY`;
  } finally {
    session.destroy();
  }
}

const describe = (o) =>
  o.timeout ? "no response within 3 s" : o.headers ? `:status ${o.headers[":status"]}` : `RST_STREAM ${errName(o.rst)}`;

const CASES = {
  a: [
    "CONNECT without :protocol",
    () =>
      nodeCase({ ":method": "CONNECT", ":authority": u.host }, (o) => {
        check((o.headers && o.headers[":status"] >= 400 && o.headers[":status"] < 500) || (o.rst !== undefined && o.rst !== 0), describe(o));
        return describe(o);
      }),
  ],
  b: [
    ":protocol chat",
    () =>
      nodeCase(
        { ":method": "CONNECT", ":protocol": "chat", ":scheme": secure ? "https" : "http", ":path": u.pathname, ":authority": u.host, "sec-websocket-version": "13" },
        (o) => {
          check(o.headers && o.headers[":status"] >= 400 && o.headers[":status"] < 500, describe(o));
          return describe(o);
        },
      ),
  ],
  f: [
    "sec-websocket-version 8",
    () =>
      nodeCase(
        { ":method": "CONNECT", ":protocol": "websocket", ":scheme": secure ? "https" : "http", ":path": u.pathname, ":authority": u.host, "sec-websocket-version": "8" },
        (o) => {
          check(o.headers && o.headers[":status"] === 426, describe(o));
          check(o.headers["sec-websocket-version"] === "13", `426 with sec-websocket-version ${o.headers["sec-websocket-version"]}`);
          return "426 + sec-websocket-version: 13";
        },
      ),
  ],
  c: [
    "DATA after END_STREAM",
    () =>
      withRaw(async (c) => {
        const healthy = await c.openWebSocket();
        await c.echo(healthy, "before");
        const id = c.nextId;
        c.nextId += 2;
        // HEADERS, DATA (a text message) with END_STREAM, then more DATA: one write.
        const s = c.stream(id);
        c.socket.write(
          Buffer.concat([
            c.headersFrame(id, c.connectHeaders()),
            c.encodeFrame(FRAME.DATA, FLAG.END_STREAM, id, encodeFrame(OP.TEXT, "last", { mask: true })),
            c.encodeFrame(FRAME.DATA, 0, id, encodeFrame(OP.TEXT, "after END_STREAM", { mask: true })),
          ]),
        );
        await c.until(() => s.rst !== null || c.goaway || c.closed, 3000, `RST_STREAM on stream ${id}`);
        const what = `stream ${id}: ${s.status ? `:status ${s.status}, ` : ""}RST_STREAM ${errName(s.rst)}${c.goawayText()}`;
        check(s.rst !== null, what);
        await c.echo(healthy, "after");
        await c.closeWebSocket(healthy);
        c.finish();
        return `${what}; healthy stream echoed after it, closed 1000, no GOAWAY`;
      }),
  ],
  d: [
    "300 streams at once",
    () =>
      withRaw(async (c) => {
        const healthy = await c.openWebSocket();
        await c.echo(healthy, "before");
        const limit = c.remote[SETTING.MAX_CONCURRENT_STREAMS];
        const flood = [];
        const frames = [];
        for (let k = 0; k < 300; k++) {
          flood.push(c.stream(c.nextId));
          frames.push(c.headersFrame(c.nextId, c.connectHeaders()));
          c.nextId += 2;
        }
        c.socket.write(Buffer.concat(frames));
        await c.until(() => flood.every((s) => s.status !== null || s.rst !== null) || c.goaway, 5000, "an answer on every flood stream");
        const accepted = flood.filter((s) => s.status === "200" && s.rst === null).length;
        const refused = {};
        for (const s of flood) if (s.rst !== null) refused[errName(s.rst)] = (refused[errName(s.rst)] ?? 0) + 1;
        const other = {};
        for (const s of flood) if (s.rst === null && s.status !== "200") other[s.status ?? "unanswered"] = (other[s.status ?? "unanswered"] ?? 0) + 1;
        const what = `max ${limit}: ${accepted} accepted, reset ${JSON.stringify(refused)}${Object.keys(other).length ? `, other ${JSON.stringify(other)}` : ""}${c.goawayText()}`;
        check(limit !== undefined && accepted + 1 <= limit, `${what} (more than the advertised limit)`);
        check(Object.keys(other).length === 0 && !c.goaway, what);
        check(Object.keys(refused).every((k) => k === "REFUSED_STREAM" || k === "PROTOCOL_ERROR"), what);
        await c.echo(healthy, "after");
        // The accepted ones are cancelled; the healthy stream still echoes and closes.
        c.socket.write(Buffer.concat(flood.filter((s) => s.rst === null).map((s) => c.encodeFrame(FRAME.RST_STREAM, 0, s.id, Buffer.from([0, 0, 0, 8])))));
        await c.echo(healthy, "after cancelling");
        // The cancelled streams gave their slots back: a new WebSocket stream opens and echoes.
        const fresh = await c.openWebSocket();
        await c.echo(fresh, "a fresh stream");
        await c.closeWebSocket(fresh);
        await c.closeWebSocket(healthy);
        c.finish();
        return `${what}; healthy stream echoed after it, a new stream opened after cancelling, no GOAWAY`;
      }),
  ],
  e: [
    "a stream that never reads",
    () =>
      withRaw(async (c) => {
        const healthy = await c.openWebSocket();
        await c.echo(healthy, "before");
        const stuck = await c.openWebSocket();
        stuck.stuck = true; // no WINDOW_UPDATE for it from here on
        const chunk = Buffer.alloc(64 << 10, 0x5a);
        const ASK = 8 << 20;
        for (let n = 0; n < ASK; n += chunk.length) c.sendWs(stuck, OP.BINARY, chunk);
        const times = [];
        // Echoes while the server still takes in the flood, then once it has stalled.
        for (let k = 0; k < 10; k++) times.push(await c.echo(healthy, `during ${k}`, 2000));
        let last = -1;
        for (let k = 0; k < 20 && stuck.sent !== last; k++) {
          last = stuck.sent;
          await sleep(100);
        }
        for (let k = 0; k < 10; k++) times.push(await c.echo(healthy, `stalled ${k}`, 2000));
        const took = (stuck.sent / 1048576).toFixed(2);
        const back = (stuck.received / 1024).toFixed(0);
        const worst = Math.max(...times);
        const what = `server took ${took} of 8 MiB and sent back ${back} KiB on the stuck stream; healthy echoes max ${worst.toFixed(1)} ms`;
        check(worst < 500, what);
        c.frame(FRAME.RST_STREAM, 0, stuck.id, Buffer.from([0, 0, 0, 8])); // CANCEL
        stuck.queue = [];
        await c.echo(healthy, "after cancelling");
        await c.closeWebSocket(healthy);
        c.finish();
        return `${what}, and after RST_STREAM CANCEL; closed 1000, no GOAWAY`;
      }),
  ],
};

const failed = [];
const ran = [];
for (const [key, [name, run]] of Object.entries(CASES)) {
  if (only && !only.includes(key)) continue;
  try {
    console.log(`ok   ${key} ${name}: ${await run()}`);
    ran.push(key);
  } catch (e) {
    const why = e instanceof CaseFailure ? e.message : e.stack;
    failed.push(`${key}: ${why.split("\n")[0]}`);
    console.log(`FAIL ${key} ${name}: ${why}`);
  }
}
const total = ran.length + failed.length;
console.log(
  failed.length
    ? `FAIL ${failed.length} of ${total} hostile cases; ${failed.join("; ")}`
    : `PASS ${total} hostile HTTP/2 cases (${ran.join("")}): refused per stream, the healthy stream unharmed`,
);
process.exit(failed.length ? 1 : 0);
