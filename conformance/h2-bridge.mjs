#!/usr/bin/env node
// conformance/h2-bridge.mjs server|client --listen HOST:PORT --target URL
//
// A byte-transparent bridge between WebSockets over HTTP/1.1 (RFC 6455 upgrade) and WebSockets
// over HTTP/2 (RFC 8441 extended CONNECT, h2c with prior knowledge), so that Autobahn|Testsuite's
// wstest, which speaks only HTTP/1.1, can judge Sockeye over HTTP/2. Only the handshake is
// translated; WebSocket frames pass unchanged (client frames stay masked), and the end of a
// connection is mapped faithfully: TCP FIN <-> END_STREAM, TCP error/reset -> RST_STREAM(CANCEL),
// RST_STREAM or a stream error -> the TCP socket destroyed.
//
//   server --listen 127.0.0.1:P --target http://127.0.0.1:Q
//       wstest fuzzingclient -> HTTP/1.1 upgrade on P -> extended CONNECT on one h2c session to Q
//   client --listen 127.0.0.1:P --target ws://127.0.0.1:Q
//       a Sockeye client -> extended CONNECT on P -> HTTP/1.1 upgrade to wstest fuzzingserver on Q
//
// Node's built-in modules only. Prints "listening" on stderr when ready; H2_BRIDGE_DEBUG=1 logs one
// line per connection. Exits on SIGTERM/SIGINT.
import http from 'node:http';
import http2 from 'node:http2';
import net from 'node:net';
import { createHash, randomBytes } from 'node:crypto';

const { NGHTTP2_CANCEL, NGHTTP2_NO_ERROR } = http2.constants;
const WS_GUID = '258EAFA5-E914-47DA-95CA-C5AB0DC85B11';
// Generous flow-control windows: Autobahn's section 9 sends messages of up to 16 MiB, which
// 64 KiB windows would turn into thousands of WINDOW_UPDATE round trips.
const STREAM_WINDOW = 16 << 20;
const SESSION_WINDOW = 64 << 20;
const H2_SETTINGS = { initialWindowSize: STREAM_WINDOW, maxFrameSize: 1 << 20, enablePush: false };
const H2_OPTIONS = { maxSessionMemory: 1024 /* MB: a 16 MiB message may sit in buffers */ };
const MAX_HEAD = 64 * 1024;
const DEBUG = process.env.H2_BRIDGE_DEBUG === '1';
const log = (...a) => process.stderr.write(`h2-bridge: ${a.join(' ')}\n`);
const debug = DEBUG ? log : () => {};

function usage(msg) {
  if (msg) log(msg);
  process.stderr.write('usage: node conformance/h2-bridge.mjs server|client --listen HOST:PORT --target URL\n');
  process.exit(2);
}

function parseArgs(argv) {
  const [mode, ...rest] = argv;
  if (mode !== 'server' && mode !== 'client') usage();
  let listen, target;
  for (let i = 0; i < rest.length; i += 2) {
    if (i + 1 >= rest.length) usage(`${rest[i]} needs a value`);
    if (rest[i] === '--listen') listen = rest[i + 1];
    else if (rest[i] === '--target') target = rest[i + 1];
    else usage(`unknown option ${rest[i]}`);
  }
  if (!listen || !target) usage();
  const m = /^(.*):(\d+)$/.exec(listen);
  if (!m) usage(`--listen wants HOST:PORT, not ${listen}`);
  let url;
  try { url = new URL(target); } catch { usage(`bad --target ${target}`); }
  const want = mode === 'server' ? 'http:' : 'ws:';
  if (url.protocol !== want) usage(`--target must be a ${want}// URL in ${mode} mode`);
  return { mode, host: m[1].replace(/^\[|\]$/g, ''), port: Number(m[2]), target: url };
}

const acceptKey = (key) => createHash('sha1').update(key + WS_GUID).digest('base64');

/** Joins an HTTP/2 stream and a TCP socket both ways, mapping the end of each faithfully. `label`
 *  names the connection in the debug line written when both are gone. */
function splice(stream, socket, label) {
  let streamEnded = false; // END_STREAM received
  let socketEnded = false; // TCP FIN received
  const why = [];
  let logged = false;
  const done = () => {
    if (!logged && stream.closed && socket.destroyed) {
      logged = true;
      debug(`${label}, closed (${why.join(', ') || 'clean'})`);
    }
  };

  // TCP -> stream, with back-pressure both ways (a paused HTTP/2 stream stops granting window).
  socket.on('data', (chunk) => {
    if (stream.closed || stream.destroyed || !stream.writable) return; // discard after the stream ended
    if (!stream.write(chunk)) socket.pause();
  });
  stream.on('drain', () => socket.resume());
  socket.on('end', () => {
    socketEnded = true;
    why.push('tcp fin');
    if (!stream.closed && !stream.destroyed && stream.writable) stream.end();
  });
  socket.on('error', (e) => {
    why.push(`tcp ${e.code || e.message}`);
    if (!stream.closed && !stream.destroyed) stream.close(NGHTTP2_CANCEL);
  });
  socket.on('close', (hadError) => {
    // A socket gone before both directions ended normally is a reset for the stream.
    if (!stream.closed && !stream.destroyed && (hadError || !socketEnded)) stream.close(NGHTTP2_CANCEL);
    done();
  });

  // stream -> TCP.
  stream.on('data', (chunk) => {
    if (socket.destroyed || !socket.writable) return;
    if (!socket.write(chunk)) stream.pause();
  });
  socket.on('drain', () => stream.resume());
  stream.on('end', () => {
    streamEnded = true;
    why.push('end_stream');
    if (!socket.destroyed) socket.end();
  });
  stream.on('error', (e) => {
    why.push(`stream ${e.code || e.message}`);
  });
  stream.on('close', () => {
    const rst = stream.rstCode;
    if (rst !== undefined && rst !== NGHTTP2_NO_ERROR) why.push(`rst ${rst}`);
    if (!streamEnded || (rst !== undefined && rst !== NGHTTP2_NO_ERROR)) {
      socket.destroy(); // RST_STREAM or a stream/session error: drop the TCP connection
    } else if (!socket.destroyed) {
      socket.resume(); // closed cleanly: whatever TCP still sends has nowhere to go
    }
    done();
  });
}

// ---------------------------------------------------------------------------------------------
// server mode: HTTP/1.1 upgrade in, extended CONNECT over one h2c session out.

function serverMode({ host, port, target }) {
  const authority = `http://${target.host}`;
  let session = null; // the current h2c session; reopened when it has closed
  let ready = null; // a promise of that session once its SETTINGS allow extended CONNECT

  function getSession() {
    if (session && !session.closed && !session.destroyed && ready) return ready;
    const s = http2.connect(authority, {
      settings: H2_SETTINGS,
      ...H2_OPTIONS,
      createConnection: () => net.connect({ host: target.hostname.replace(/^\[|\]$/g, ''), port: Number(target.port || 80), noDelay: true }),
    });
    session = s;
    ready = new Promise((resolve, reject) => {
      const timer = setTimeout(() => reject(new Error('no SETTINGS with ENABLE_CONNECT_PROTOCOL within 10 s')), 10_000);
      const check = () => {
        if (s.remoteSettings && s.remoteSettings.enableConnectProtocol) {
          clearTimeout(timer);
          resolve(s);
        }
      };
      s.on('connect', () => {
        try { s.setLocalWindowSize(SESSION_WINDOW); } catch (e) { debug(`setLocalWindowSize: ${e.message}`); }
        check();
      });
      s.on('remoteSettings', check);
      s.on('error', (e) => { clearTimeout(timer); debug(`h2 session error: ${e.message}`); reject(e); });
      s.on('close', () => {
        clearTimeout(timer);
        reject(new Error('h2 session closed'));
        if (session === s) { session = null; ready = null; }
      });
      s.on('goaway', () => { if (session === s) { session = null; ready = null; } });
    });
    ready.catch(() => { if (session === s) { session = null; ready = null; } });
    return ready;
  }

  const refuse = (socket, status, reason) => {
    if (socket.destroyed) return;
    socket.end(`HTTP/1.1 ${status} ${reason || http.STATUS_CODES[status] || ''}\r\nConnection: close\r\nContent-Length: 0\r\n\r\n`);
  };

  const server = http.createServer({ requestTimeout: 0, noDelay: true });
  server.on('request', (req, res) => {
    res.writeHead(426, { Connection: 'close', Upgrade: 'websocket', 'Content-Length': 0 });
    res.end();
  });
  server.on('clientError', (e, socket) => {
    debug(`http/1.1 client error: ${e.code || e.message}`);
    if (socket.writable) refuse(socket, 400); else socket.destroy();
  });
  server.on('upgrade', async (req, socket, head) => {
    socket.setNoDelay(true);
    socket.pause();
    const label = `${socket.remoteAddress}:${socket.remotePort} ${req.method} ${req.url}`;
    let failed = null;
    socket.on('error', (e) => { failed = e; });
    const key = req.headers['sec-websocket-key'];
    if (req.method !== 'GET' || String(req.headers.upgrade).toLowerCase() !== 'websocket' || !key) {
      debug(`${label}: not a WebSocket upgrade, 400`);
      return refuse(socket, 400);
    }
    let s;
    try {
      s = await getSession();
    } catch (e) {
      debug(`${label}: ${e.message}, 502`);
      return refuse(socket, 502);
    }
    if (failed || socket.destroyed) return;
    const headers = {
      ':method': 'CONNECT',
      ':protocol': 'websocket',
      ':scheme': 'http',
      ':path': req.url,
      ':authority': req.headers.host || target.host,
      'sec-websocket-version': '13',
    };
    for (const h of ['sec-websocket-protocol', 'sec-websocket-extensions', 'origin']) {
      if (req.headers[h] !== undefined) headers[h] = req.headers[h];
    }
    let stream;
    try {
      stream = s.request(headers, { endStream: false });
    } catch (e) {
      debug(`${label}: request failed: ${e.message}, 502`);
      return refuse(socket, 502);
    }
    let responded = false;
    stream.on('error', (e) => { if (!responded) debug(`${label}: stream error before the response: ${e.message}`); });
    stream.on('close', () => {
      if (!responded) { debug(`${label}: stream closed before a response (rst ${stream.rstCode}), 502`); refuse(socket, 502); }
    });
    socket.on('close', () => { if (!responded && !stream.closed) stream.close(NGHTTP2_CANCEL); });
    stream.on('response', (rh) => {
      responded = true;
      const status = Number(rh[':status']);
      if (status !== 200) {
        debug(`${label}: ${status}`);
        refuse(socket, status);
        if (!stream.closed) stream.close(NGHTTP2_CANCEL);
        return;
      }
      if (socket.destroyed) { stream.close(NGHTTP2_CANCEL); return; }
      let reply = `HTTP/1.1 101 Switching Protocols\r\nUpgrade: websocket\r\nConnection: Upgrade\r\nSec-WebSocket-Accept: ${acceptKey(key)}\r\n`;
      for (const [h, name] of [['sec-websocket-protocol', 'Sec-WebSocket-Protocol'], ['sec-websocket-extensions', 'Sec-WebSocket-Extensions']]) {
        if (rh[h] !== undefined) reply += `${name}: ${rh[h]}\r\n`;
      }
      socket.write(reply + '\r\n');
      if (head && head.length) stream.write(head);
      splice(stream, socket, `${label}: h2 stream ${stream.id} 200 -> 101`);
      socket.resume();
    });
  });
  server.on('error', (e) => { log(`listen error: ${e.message}`); process.exit(1); });
  server.listen(port, host, () => {
    log(`listening on ${host}:${port} (server mode: HTTP/1.1 -> h2c ${authority})`);
    getSession().catch((e) => debug(`first h2 session: ${e.message}`)); // connect early; failures retry per upgrade
  });
  return () => {
    server.close();
    if (session) session.destroy();
  };
}

// ---------------------------------------------------------------------------------------------
// client mode: extended CONNECT in (h2c, prior knowledge), HTTP/1.1 upgrade out.

/** Reads an HTTP/1.1 response head from `socket`: resolves {status, headers, rest}. */
function readResponseHead(socket) {
  return new Promise((resolve, reject) => {
    let buf = Buffer.alloc(0);
    const cleanup = () => {
      socket.off('data', onData);
      socket.off('end', onEnd);
      socket.off('error', onError);
      socket.off('close', onEnd);
    };
    const onData = (chunk) => {
      buf = buf.length ? Buffer.concat([buf, chunk]) : chunk;
      const end = buf.indexOf('\r\n\r\n');
      if (end < 0) {
        if (buf.length > MAX_HEAD) { cleanup(); reject(new Error('response head too large')); }
        return;
      }
      cleanup();
      socket.pause();
      const lines = buf.subarray(0, end).toString('latin1').split('\r\n');
      const m = /^HTTP\/1\.[01] (\d{3})/.exec(lines[0]);
      if (!m) return reject(new Error(`bad status line: ${JSON.stringify(lines[0])}`));
      const headers = {};
      for (const line of lines.slice(1)) {
        const i = line.indexOf(':');
        if (i <= 0) continue;
        const name = line.slice(0, i).trim().toLowerCase();
        const value = line.slice(i + 1).trim();
        headers[name] = name in headers ? `${headers[name]}, ${value}` : value;
      }
      resolve({ status: Number(m[1]), headers, rest: buf.subarray(end + 4) });
    };
    const onEnd = () => { cleanup(); reject(new Error('connection closed before a response')); };
    const onError = (e) => { cleanup(); reject(e); };
    socket.on('data', onData);
    socket.on('end', onEnd);
    socket.on('close', onEnd);
    socket.on('error', onError);
  });
}

function clientMode({ host, port, target }) {
  const tHost = target.hostname.replace(/^\[|\]$/g, '');
  const tPort = Number(target.port || 80);
  const sessions = new Set();
  const server = http2.createServer({ settings: { ...H2_SETTINGS, enableConnectProtocol: true }, ...H2_OPTIONS });
  server.on('session', (session) => {
    sessions.add(session);
    session.on('close', () => sessions.delete(session));
    session.on('error', (e) => debug(`h2 session error: ${e.message}`));
    try { session.setLocalWindowSize(SESSION_WINDOW); } catch (e) { debug(`setLocalWindowSize: ${e.message}`); }
  });
  server.on('connection', (socket) => socket.setNoDelay(true)); // the raw socket, before HTTP/2 takes it
  server.on('sessionError', (e) => debug(`h2 session error: ${e.message}`));
  server.on('unknownProtocol', (socket) => socket.destroy());
  server.on('error', (e) => { log(`server error: ${e.message}`); process.exit(1); });
  server.on('stream', (stream, headers) => {
    const label = `${stream.session?.socket?.remotePort ?? '?'}#${stream.id} ${headers[':method']} ${headers[':path']}`;
    let upgraded = false;
    stream.on('error', (e) => { if (!upgraded) debug(`${label}: stream error: ${e.message}`); });
    const answer = (status) => {
      if (stream.closed || stream.destroyed) return;
      try { stream.respond({ ':status': status }, { endStream: true }); } catch (e) { debug(`${label}: respond: ${e.message}`); }
    };
    if (headers[':method'] !== 'CONNECT') { debug(`${label}: 404`); return answer(404); }
    if (headers[':protocol'] !== 'websocket') { debug(`${label}: not extended CONNECT websocket, 400`); return answer(400); }
    stream.pause();
    const path = headers[':path'] || '/';
    const socket = net.connect({ host: tHost, port: tPort, allowHalfOpen: true });
    socket.setNoDelay(true);
    const key = randomBytes(16).toString('base64');
    let req = `GET ${path} HTTP/1.1\r\nHost: ${target.host}\r\nUpgrade: websocket\r\nConnection: Upgrade\r\n`
      + `Sec-WebSocket-Key: ${key}\r\nSec-WebSocket-Version: 13\r\n`;
    for (const [h, name] of [['sec-websocket-protocol', 'Sec-WebSocket-Protocol'], ['sec-websocket-extensions', 'Sec-WebSocket-Extensions'], ['origin', 'Origin']]) {
      if (headers[h] !== undefined) req += `${name}: ${headers[h]}\r\n`;
    }
    socket.write(req + '\r\n');
    // Before the 101: the stream going away drops the TCP attempt.
    const early = () => { if (!upgraded) socket.destroy(); };
    stream.on('close', early);
    socket.on('error', () => {}); // reported through readResponseHead / splice
    readResponseHead(socket).then(({ status, headers: rh, rest }) => {
      if (stream.closed || stream.destroyed) { socket.destroy(); return; }
      if (status !== 101) {
        debug(`${label}: ${status}`);
        answer(status >= 200 && status <= 599 ? status : 502);
        socket.destroy();
        return;
      }
      const out = { ':status': 200 };
      for (const h of ['sec-websocket-protocol', 'sec-websocket-extensions']) if (rh[h] !== undefined) out[h] = rh[h];
      upgraded = true;
      stream.off('close', early);
      try {
        stream.respond(out);
      } catch (e) {
        debug(`${label}: respond: ${e.message}`);
        socket.destroy();
        return;
      }
      if (rest.length) stream.write(rest);
      splice(stream, socket, `${label}: 101 -> 200`);
      socket.resume();
      stream.resume();
    }, (e) => {
      debug(`${label}: upstream: ${e.message}, 502`);
      socket.destroy();
      answer(502);
    });
  });
  server.listen(port, host, () => log(`listening on ${host}:${port} (client mode: h2c -> HTTP/1.1 ${tHost}:${tPort})`));
  return () => {
    server.close();
    for (const s of sessions) s.destroy();
  };
}

const args = parseArgs(process.argv.slice(2));
const stop = args.mode === 'server' ? serverMode(args) : clientMode(args);
for (const sig of ['SIGTERM', 'SIGINT']) {
  process.on(sig, () => {
    try { stop(); } finally { process.exit(0); }
  });
}
