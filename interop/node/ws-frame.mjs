// A minimal RFC 6455 frame codec for the HTTP/2 (RFC 8441) interop scripts, written here so that no
// WebSocket library is involved: frames are encoded masked (client) or unmasked (server), and a
// decoder turns a byte stream into messages, reassembling fragments. No extensions are negotiated,
// so RSV bits must be zero.
import { randomBytes } from "node:crypto";

export const OP = { CONTINUATION: 0, TEXT: 1, BINARY: 2, CLOSE: 8, PING: 9, PONG: 10 };

export class ProtocolError extends Error {
  constructor(code, message) {
    super(message);
    this.code = code; // the close code to fail the connection with
  }
}

export function encodeFrame(opcode, payload = Buffer.alloc(0), { mask = false, fin = true } = {}) {
  const data = Buffer.isBuffer(payload) ? payload : Buffer.from(payload);
  const len = data.length;
  const extra = len < 126 ? 0 : len < 65536 ? 2 : 8;
  const head = Buffer.alloc(2 + extra + (mask ? 4 : 0));
  head[0] = (fin ? 0x80 : 0) | opcode;
  head[1] = (mask ? 0x80 : 0) | (len < 126 ? len : len < 65536 ? 126 : 127);
  if (extra === 2) head.writeUInt16BE(len, 2);
  if (extra === 8) head.writeBigUInt64BE(BigInt(len), 2);
  if (!mask) return Buffer.concat([head, data]);
  const key = randomBytes(4);
  key.copy(head, 2 + extra);
  const body = Buffer.allocUnsafe(len);
  for (let i = 0; i < len; i++) body[i] = data[i] ^ key[i & 3];
  return Buffer.concat([head, body]);
}

export function closePayload(code, reason = "") {
  if (code === undefined) return Buffer.alloc(0);
  const b = Buffer.alloc(2 + Buffer.byteLength(reason));
  b.writeUInt16BE(code, 0);
  b.write(reason, 2);
  return b;
}

const validCloseCode = (c) => (c >= 1000 && c <= 1003) || (c >= 1007 && c <= 1014) || (c >= 3000 && c <= 4999);
const utf8 = new TextDecoder("utf-8", { fatal: true });

// Feed bytes with push(); it returns the events completed so far:
//   { type: "text", data: string } | { type: "binary", data: Buffer } | { type: "ping"|"pong", data }
//   | { type: "close", code, reason }  (code undefined for an empty close payload)
// and throws ProtocolError on anything RFC 6455 forbids. `masked`: whether frames must be masked
// (true on a server, false on a client).
export class FrameDecoder {
  constructor({ masked, maxMessage = 64 << 20 }) {
    this.masked = masked;
    this.maxMessage = maxMessage;
    this.chunks = [];
    this.buffered = 0;
    this.fragments = null; // { opcode, parts, size } while a fragmented message is open
    this.closed = false;
  }

  push(chunk) {
    if (chunk.length) {
      this.chunks.push(chunk);
      this.buffered += chunk.length;
    }
    const events = [];
    for (;;) {
      const frame = this.#frame();
      if (!frame) return events;
      const event = this.#handle(frame);
      if (event) events.push(event);
    }
  }

  #take(n) {
    if (this.chunks[0].length < n) this.chunks = [Buffer.concat(this.chunks)];
    const head = this.chunks[0];
    const out = head.subarray(0, n);
    if (head.length === n) this.chunks.shift();
    else this.chunks[0] = head.subarray(n);
    this.buffered -= n;
    return out;
  }

  #peek(n) {
    if (this.buffered < n) return null;
    if (this.chunks[0].length < n) this.chunks = [Buffer.concat(this.chunks)];
    return this.chunks[0].subarray(0, n);
  }

  #frame() {
    const start = this.#peek(2);
    if (!start) return null;
    const fin = (start[0] & 0x80) !== 0;
    if (start[0] & 0x70) throw new ProtocolError(1002, "RSV bits set without an extension");
    const opcode = start[0] & 0x0f;
    const masked = (start[1] & 0x80) !== 0;
    if (masked !== this.masked) throw new ProtocolError(1002, masked ? "masked frame from a server" : "unmasked frame from a client");
    const len7 = start[1] & 0x7f;
    const extra = len7 === 126 ? 2 : len7 === 127 ? 8 : 0;
    const headLen = 2 + extra + (masked ? 4 : 0);
    const head = this.#peek(headLen);
    if (!head) return null;
    let len = len7;
    if (extra === 2) {
      len = head.readUInt16BE(2);
      if (len < 126) throw new ProtocolError(1002, "length not minimally encoded");
    } else if (extra === 8) {
      const big = head.readBigUInt64BE(2);
      if (big >> 63n) throw new ProtocolError(1002, "64-bit length with the top bit set");
      if (big < 65536n) throw new ProtocolError(1002, "length not minimally encoded");
      if (big > BigInt(this.maxMessage)) throw new ProtocolError(1009, "frame too big");
      len = Number(big);
    }
    if (this.buffered < headLen + len) return null;
    const key = masked ? Buffer.from(head.subarray(2 + extra, headLen)) : null;
    this.#take(headLen);
    const payload = Buffer.from(len ? this.#take(len) : Buffer.alloc(0));
    if (key) for (let i = 0; i < len; i++) payload[i] ^= key[i & 3];
    return { fin, opcode, payload };
  }

  #handle({ fin, opcode, payload }) {
    if (this.closed) throw new ProtocolError(1002, "frame after close");
    if (opcode >= 8) {
      if (!fin || payload.length > 125) throw new ProtocolError(1002, "fragmented or long control frame");
      if (opcode === OP.PING) return { type: "ping", data: payload };
      if (opcode === OP.PONG) return { type: "pong", data: payload };
      if (opcode !== OP.CLOSE) throw new ProtocolError(1002, `reserved opcode ${opcode}`);
      this.closed = true;
      if (payload.length === 0) return { type: "close", code: undefined, reason: "" };
      if (payload.length === 1) throw new ProtocolError(1002, "one-byte close payload");
      const code = payload.readUInt16BE(0);
      if (!validCloseCode(code)) throw new ProtocolError(1002, `invalid close code ${code}`);
      let reason;
      try {
        reason = utf8.decode(payload.subarray(2));
      } catch {
        throw new ProtocolError(1007, "invalid UTF-8 in the close reason");
      }
      return { type: "close", code, reason };
    }
    if (opcode === OP.CONTINUATION) {
      if (!this.fragments) throw new ProtocolError(1002, "continuation without a message");
    } else if (opcode === OP.TEXT || opcode === OP.BINARY) {
      if (this.fragments) throw new ProtocolError(1002, "new message inside a fragmented one");
      this.fragments = { opcode, parts: [], size: 0 };
    } else {
      throw new ProtocolError(1002, `reserved opcode ${opcode}`);
    }
    const f = this.fragments;
    f.parts.push(payload);
    f.size += payload.length;
    if (f.size > this.maxMessage) throw new ProtocolError(1009, "message too big");
    if (!fin) return null;
    this.fragments = null;
    const data = f.parts.length === 1 ? f.parts[0] : Buffer.concat(f.parts);
    if (f.opcode === OP.BINARY) return { type: "binary", data };
    try {
      return { type: "text", data: utf8.decode(data) };
    } catch {
      throw new ProtocolError(1007, "invalid UTF-8 in a text message");
    }
  }
}
