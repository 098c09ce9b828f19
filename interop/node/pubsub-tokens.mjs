// Issue 41 "Tokens", in a real browser: one `ws pubsub_server` whose clients need short-lived
// JWTs (HS256, the secret from a file), and headless Chromium (playwright-core) running the
// client the node serves at /client.js on a page of the node's own origin.
//
// What is expected, exactly:
// - A page whose token is bad (a string, and a function that keeps giving bad ones) is told
//   why: a `rejected` event of kind `unauthorized` (close 4001), then `gaveup`; and it makes no
//   reconnect storm: one attempt with the string, two with the function (a fresh token is tried
//   once), and none more over the next 5 s.
// - A page whose tokens live 8 s, with `token` as a function minting fresh ones, keeps one socket
//   for 20 s while a backend publishes on its topic every 150 ms through the HTTP API: the
//   client refreshes the token on the open socket before each expiry (`refreshed` events, no
//   disconnect, no 4002), and the page receives every publication the API accepted, once, in
//   order.
//
// Everything is bounded in time (HARD_LIMIT_MS); only the processes started here are stopped, by
// their PIDs, also on failure or SIGTERM. The node's log goes to OUT_DIR/pubsub-tokens-node.log,
// the pages' event logs to OUT_DIR/pubsub-tokens.json.
//
// Usage: node pubsub-tokens.mjs WS_BINARY OUT_DIR PORT
import { spawn } from "node:child_process";
import { createHmac } from "node:crypto";
import { openSync, writeFileSync } from "node:fs";
import { connect as tcpConnect } from "node:net";
import { join } from "node:path";
import { chromium } from "playwright-core";

const [WS, OUT, PORT] = process.argv.slice(2);
if (!PORT) {
  console.error("usage: node pubsub-tokens.mjs WS_BINARY OUT_DIR PORT");
  process.exit(2);
}
const HARD_LIMIT_MS = 80_000;
const SECRET = "interop-jwt-secret-from-a-file";
const API = "interop-api-token";
const LIFETIME_S = 8;
const RUN_MS = 20_000;
const ORIGIN = `http://127.0.0.1:${PORT}`;
const sleep = (ms) => new Promise((r) => setTimeout(r, ms));
const t0 = Date.now();
const note = (text) => console.log(`[${((Date.now() - t0) / 1000).toFixed(1)}s] ${text}`);

const children = new Set();
const closers = [];
let cleaning = null;
function cleanup() {
  cleaning ??= (async () => {
    for (const close of closers.reverse()) await Promise.race([close().catch(() => {}), sleep(8000)]);
    for (const child of children) child.kill("SIGKILL");
  })();
  return cleaning;
}
for (const signal of ["SIGTERM", "SIGINT"]) process.on(signal, () => cleanup().then(() => process.exit(1)));
const limit = setTimeout(() => {
  console.error(`FAIL: over ${HARD_LIMIT_MS} ms`);
  cleanup().then(() => process.exit(1));
}, HARD_LIMIT_MS);

function jwt(claims) {
  const b64 = (o) => Buffer.from(JSON.stringify(o)).toString("base64url");
  const head = `${b64({ alg: "HS256", typ: "JWT" })}.${b64(claims)}`;
  return `${head}.${createHmac("sha256", SECRET).update(head).digest("base64url")}`;
}
const mint = (sub) => jwt({ sub, exp: Math.floor(Date.now() / 1000) + LIFETIME_S });

async function waitPort(port) {
  for (let i = 0; i < 100; i++) {
    const up = await new Promise((r) => {
      const s = tcpConnect(port, "127.0.0.1", () => (s.end(), r(true)));
      s.on("error", () => r(false));
    });
    if (up) return;
    await sleep(100);
  }
  throw new Error(`nothing listens on port ${port}`);
}

const failures = [];
const expect = (ok, what) => {
  if (!ok) failures.push(what);
  note(`${ok ? "ok  " : "FAIL"} ${what}`);
};

try {
  const secretFile = join(OUT, "pubsub-tokens-secret");
  writeFileSync(secretFile, `${SECRET}\n`, { mode: 0o600 });
  const log = openSync(join(OUT, "pubsub-tokens-node.log"), "w");
  const node = spawn(WS, ["pubsub_server", "-q", "--port", PORT, "--api-token", API, "--jwt-secret-file", secretFile], {
    stdio: ["ignore", log, log],
  });
  children.add(node);
  node.once("exit", () => children.delete(node));
  await waitPort(Number(PORT));

  const browser = await chromium.launch({
    executablePath: process.env.CHROMIUM || "/usr/bin/chromium",
    args: ["--no-sandbox", "--disable-gpu", "--no-first-run", "--disable-background-networking",
      "--disable-component-update", "--disable-sync", "--disable-quic"],
    timeout: 30000,
  });
  closers.push(() => browser.close());
  note(`chromium ${browser.version()}`);

  // A page of the node's own origin (the Origin check), with the client the node serves.
  async function page(tokenKind) {
    const p = await browser.newPage();
    await p.exposeFunction("mintToken", (sub) => mint(sub));
    await p.goto(`${ORIGIN}/client.js`, { timeout: 20000 });
    await p.evaluate(
      async ([url, tokenKind]) => {
        const { connect } = await import("/client.js");
        const log = [];
        const token =
          tokenKind === "string" ? "not-a-token"
          : tokenKind === "bad-function" ? async () => "still-not-a-token"
          : async () => window.mintToken("alice");
        const client = connect(url, { token });
        for (const e of ["connected", "disconnected", "rejected", "refreshed", "gaveup", "error"]) {
          client.on(e, (d) => log.push({ e, d, t: Date.now() }));
        }
        client.subscribe("user/alice", (data, meta) => log.push({ e: "message", data, offset: meta.offset }));
        window.pubsub = { client, log };
      },
      [`ws://127.0.0.1:${PORT}/`, tokenKind],
    );
    return { log: () => p.evaluate("window.pubsub.log") };
  }

  // 1. Bad tokens: told why, and no storm.
  const asString = await page("string");
  const asFunction = await page("bad-function");
  await sleep(5000);
  const pages = {};
  for (const [name, p, attempts] of [["string", asString, 1], ["bad-function", asFunction, 2]]) {
    const events = await p.log();
    pages[name] = events;
    const rejected = events.filter((x) => x.e === "rejected");
    expect(rejected.length === attempts && rejected.every((x) => x.d.kind === "unauthorized" && x.d.code === 4001),
      `${name} token: ${attempts} 'rejected' event(s) of kind unauthorized (4001): ${JSON.stringify(rejected.map((x) => [x.d.kind, x.d.code]))}`);
    expect(events.some((x) => x.e === "gaveup" && x.d.code === "unauthorized"), `${name} token: 'gaveup' with code unauthorized`);
    // A browser's refused socket is upgraded and then closed with the code (so it opens first):
    // as many openings as attempts, no more.
    const opened = events.filter((x) => x.e === "connected").length;
    expect(opened <= attempts, `${name} token: ${opened} socket(s) opened, at most ${attempts}`);
  }

  // 2. Short-lived tokens refreshed on the open socket while a backend publishes.
  const live = await page("refresh");
  for (let i = 0; i < 100 && !(await live.log()).some((x) => x.e === "connected"); i++) await sleep(100);
  await sleep(300); // the subscribe answered
  const accepted = [];
  const end = Date.now() + RUN_MS;
  let n = 0;
  while (Date.now() < end) {
    const r = await fetch(`${ORIGIN}/publish/user/alice`, {
      method: "POST",
      headers: { authorization: `Bearer ${API}`, "content-type": "application/json" },
      body: JSON.stringify({ n: ++n }),
    });
    if (r.ok) accepted.push({ n, offset: (await r.json()).offset });
    await sleep(150);
  }
  await sleep(1000);
  const events = await live.log();
  pages.refresh = events;
  const got = events.filter((x) => x.e === "message").map((x) => x.data.n);
  const refreshed = events.filter((x) => x.e === "refreshed");
  note(`${accepted.length} accepted, ${got.length} received, ${refreshed.length} refreshes`);
  expect(accepted.length > 50, `the API accepted the publications (${accepted.length})`);
  expect(JSON.stringify(got) === JSON.stringify(accepted.map((a) => a.n)), "every accepted publication received once, in order");
  expect(refreshed.length >= Math.floor(RUN_MS / 1000 / LIFETIME_S), `the token was refreshed on the open socket (${refreshed.length} times)`);
  expect(events.filter((x) => x.e === "connected").length === 1, "one connection all along");
  expect(!events.some((x) => x.e === "disconnected" || x.e === "rejected"), "no disconnect, no 4002");
  writeFileSync(join(OUT, "pubsub-tokens.json"), JSON.stringify(pages, null, 1));
} catch (e) {
  failures.push(`error: ${e?.stack ?? e}`);
  console.error(e);
} finally {
  clearTimeout(limit);
  await cleanup();
}
if (failures.length) {
  console.error(`FAIL: ${failures.length} expectation(s) not met: ${failures.join("; ")}`);
  process.exit(1);
}
console.log("PASS: bad tokens told 'unauthorized' without a reconnect storm; short-lived tokens refreshed, nothing lost");
