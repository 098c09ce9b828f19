// Issue 30 §4, in real browsers: two `ws pubsub_server` nodes A and B over one Redis; headless
// Chromium (playwright-core) loads the demo page from A with the client's node list [A, B],
// headless Firefox ESR (WebDriver BiDi, firefox-bidi.mjs) loads it from B with [B, A]; each page
// subscribes, with the client the node serves at /client.js, to its own topic (user/chromium,
// user/firefox) and to `global`. This script is the backend: it publishes through the HTTP API
// (POST /publish/<topic>) on all three topics throughout, recording what the API answered, and
// retries what was refused. During the traffic node A hangs (SIGSTOP) while publications are made
// through B, then dies (SIGKILL, by its PID): the Chromium page must move to B by itself and get
// what A never sent it from B's history. Then Redis restarts once.
//
// What is expected, exactly:
// - Every page ends with every publication the API accepted on its two topics once, in order,
//   at the position the API answered; nothing the API refused; an attempt whose outcome the API
//   could not know (the node died or Redis went away mid-request) at most once, in order.
// - No gap notice for the move from A to B: B's history (Redis is up) covers what the page
//   missed, and its client resumes from its last position.
// - Exactly one gap notice per page and topic, at the Redis restart, between the last message of
//   the old epoch and the first of the new. Redis runs without persistence (`--save ''
//   --appendonly no`): the restarted server has lost every Stream, so the history really cannot
//   cover the restart. (With persistence the notice would be due all the same: Sockeye's Redis
//   backplane starts a new epoch whenever the server's `run_id` changes and drops the old
//   Stream, since it cannot tell what a restarted server lost; see backplane/redis.rs.)
// - The pages show it: each message as a list item, the gap notice as one where it came.
//
// Screenshots of both pages (the whole document) and the pages' state go to OUT_DIR:
// pubsub-browsers-{chromium,firefox}.png, pubsub-browsers.json; the servers' logs next to them.
// Everything is bounded in time (HARD_LIMIT_MS); only the processes started here are stopped, by
// their PIDs, also on failure or SIGTERM.
//
// Usage: node pubsub-browsers.mjs WS_BINARY OUT_DIR REDIS_PORT NODE_A_PORT NODE_B_PORT
import { spawn } from "node:child_process";
import { openSync, writeFileSync } from "node:fs";
import { connect as tcpConnect } from "node:net";
import { join } from "node:path";
import { chromium } from "playwright-core";
import { launchFirefox } from "./firefox-bidi.mjs";

const [WS, OUT, REDIS_PORT, A_PORT, B_PORT] = process.argv.slice(2);
if (!B_PORT) {
  console.error("usage: node pubsub-browsers.mjs WS_BINARY OUT_DIR REDIS_PORT NODE_A_PORT NODE_B_PORT");
  process.exit(2);
}
const HARD_LIMIT_MS = 140_000;
const TOKEN = "interop-api-token";
const PUBLISH_EVERY_MS = 60;
const A = `ws://127.0.0.1:${A_PORT}/`;
const B = `ws://127.0.0.1:${B_PORT}/`;
const sleep = (ms) => new Promise((r) => setTimeout(r, ms));
const t0 = Date.now();
const note = (text) => console.log(`[${((Date.now() - t0) / 1000).toFixed(1)}s] ${text}`);

// --- processes started here, stopped by PID ---------------------------------------------------
const children = new Set();
const closers = [];
function start(name, command, args) {
  const log = openSync(join(OUT, `pubsub-browsers-${name}.log`), "w");
  const child = spawn(command, args, { stdio: ["ignore", log, log] });
  children.add(child);
  child.exited = new Promise((r) => child.once("exit", r));
  child.exited.then(() => children.delete(child));
  return child;
}
async function stop(child, signal = "SIGTERM") {
  if (child.exitCode !== null || child.signalCode !== null) return;
  child.kill(signal);
  if ((await Promise.race([child.exited.then(() => true), sleep(5000)])) !== true) {
    child.kill("SIGKILL");
    await child.exited;
  }
}
let cleaning = null;
function cleanup() {
  cleaning ??= (async () => {
    for (const close of closers.reverse()) await Promise.race([close().catch(() => {}), sleep(8000)]);
    for (const child of children) child.kill("SIGKILL");
  })();
  return cleaning;
}
for (const signal of ["SIGTERM", "SIGINT"]) {
  process.on(signal, () => cleanup().then(() => process.exit(1)));
}
const hardLimit = setTimeout(() => {
  console.error(`FAIL: not done within ${HARD_LIMIT_MS / 1000} s`);
  cleanup().then(() => process.exit(1));
}, HARD_LIMIT_MS);

async function waitPort(port, ms = 10000) {
  const until = Date.now() + ms;
  while (Date.now() < until) {
    const up = await new Promise((r) => {
      const s = tcpConnect(Number(port), "127.0.0.1", () => (s.destroy(), r(true)));
      s.on("error", () => r(false));
    });
    if (up) return;
    await sleep(100);
  }
  throw new Error(`nothing listens on port ${port} after ${ms} ms`);
}
async function until(what, ms, fn) {
  const deadline = Date.now() + ms;
  for (;;) {
    const v = await fn();
    if (v) return v;
    if (Date.now() > deadline) throw new Error(`${what}: not within ${ms / 1000} s`);
    await sleep(150);
  }
}

// --- the backend: publishes through the HTTP API, records what it answered ---------------------
const TOPICS = ["user/chromium", "user/firefox", "global"];
const attempts = []; // { n, topic, text, outcome: accepted|refused|uncertain, position?, port, why? }
let n = 0;
let running = true;
let published = 0; // publications accepted, one per topic in turn
let turn = Promise.resolve(); // publishing is one caller at a time: see `exclusive`
const nodePorts = [A_PORT, B_PORT]; // A's are refused once it is dead: retried on B

async function publishAttempt(topic, port) {
  const text = `${topic} #${++n}`;
  const attempt = { n, topic, text, port };
  attempts.push(attempt);
  try {
    const res = await fetch(`http://127.0.0.1:${port}/publish/${topic}`, {
      method: "POST",
      headers: { authorization: `Bearer ${TOKEN}`, "content-type": "application/json" },
      body: JSON.stringify(text),
      signal: AbortSignal.timeout(5000),
    });
    const body = await res.json();
    if (res.status === 200) {
      attempt.outcome = "accepted";
      attempt.position = { offset: body.offset, epoch: body.epoch };
    } else if (res.status === 503) {
      // The backplane is down: nothing published, unless the node says it cannot know.
      attempt.outcome = body.uncertain > 0 ? "uncertain" : "refused";
      attempt.why = body.error?.message;
    } else {
      throw new Error(`POST /publish/${topic} on :${port} answered ${res.status} ${JSON.stringify(body)}`);
    }
  } catch (e) {
    if (attempt.outcome) throw e;
    // Connection refused: the node is gone and nothing was sent. Anything else (reset, timeout)
    // after the request went out: the node may have published it.
    const refused = e.cause?.code === "ECONNREFUSED";
    attempt.outcome = refused ? "refused" : "uncertain";
    attempt.why = e.cause?.code ?? e.message;
  }
  return attempt;
}

// The next topic's publication, through `ports` in turn: a refused or unknown publish is retried
// (as a new publication, with its own number) on the next node, until one is accepted. Called by
// one caller at a time, so that each topic's publications are made in the order of their numbers.
async function publishNext(ports) {
  const i = published++;
  const topic = TOPICS[i % TOPICS.length];
  for (let tries = 0; running; tries++) {
    const port = ports[(i + tries) % ports.length];
    const attempt = await publishAttempt(topic, port);
    if (attempt.outcome === "accepted") return;
    // A node that is gone: the other one at once; a backplane that is down: after a pause.
    if (attempt.why !== "ECONNREFUSED") await sleep(100);
  }
}
function exclusive(fn) {
  const run = turn.then(fn);
  turn = run.catch(() => {});
  return run;
}
async function backend() {
  while (running) {
    await exclusive(() => publishNext(nodePorts));
    await sleep(PUBLISH_EVERY_MS);
  }
}
const accepted = (topic) => attempts.filter((a) => a.topic === topic && a.outcome === "accepted");

// --- the pages -------------------------------------------------------------------------------
const demo = (port, user, nodes) => `http://127.0.0.1:${port}/demo?user=${user}&nodes=${nodes.join(",")}`;
const STATE = `({
  received: window.received, gaps: window.gaps, log: window.log,
  shown: Object.fromEntries(["mine", "global"].map((id) =>
    [id, [...document.querySelectorAll("#" + id + " li")].map((li) => (li.className === "gap" ? "GAP: " : "") + li.textContent)])),
  status: document.getElementById("status").textContent,
})`;

async function openChromium(url) {
  const browser = await chromium.launch({
    executablePath: process.env.CHROMIUM || "/usr/bin/chromium",
    args: ["--no-sandbox", "--disable-gpu", "--no-first-run", "--disable-background-networking",
      "--disable-component-update", "--disable-sync", "--disable-quic"],
    timeout: 30000,
  });
  closers.push(() => browser.close());
  const page = await browser.newPage();
  await page.goto(url, { timeout: 20000 });
  return {
    name: "chromium",
    version: browser.version(),
    evaluate: async (expr) => JSON.parse(await page.evaluate(`(async () => JSON.stringify(await (${expr})))()`)),
    screenshot: (path) => page.screenshot({ path, fullPage: true }),
  };
}

async function openFirefox(url) {
  const ff = await launchFirefox({ timeoutMs: 30000 });
  closers.push(() => ff.close());
  await ff.navigate(url);
  return { name: "firefox", version: ff.version, evaluate: (expr) => ff.evaluate(expr), screenshot: (p) => ff.screenshot(p) };
}

const subscribedBoth = (page, own) => async () => {
  const log = await page.evaluate("window.log");
  return log && [own, "global"].every((t) => log.some((e) => e.kind === "subscribed" && e.topic === t));
};

// --- the checks ------------------------------------------------------------------------------
// Everything wrong with one page and topic, as sentences naming the page, the topic and the
// publication.
function judge(page, topic, state) {
  const problems = [];
  const say = (text) => problems.push(`${page}: ${topic}: ${text}`);
  const byN = new Map(attempts.filter((a) => a.topic === topic).map((a) => [a.n, a]));
  const received = state.received[topic] ?? [];
  const messages = state.log.filter((e) => e.kind === "message" && e.topic === topic);
  const seen = new Map();
  let previous = 0;
  received.forEach((text, i) => {
    const m = typeof text === "string" && text.startsWith(`${topic} #`) ? Number(text.slice(topic.length + 2)) : NaN;
    const attempt = byN.get(m);
    if (!attempt) return say(`shows ${JSON.stringify(text)}, which the backend never published on this topic`);
    if (seen.has(m)) say(`shows #${m} twice (messages ${seen.get(m) + 1} and ${i + 1})`);
    else if (m < previous) say(`shows #${m} after #${previous}: out of order`);
    seen.set(m, i);
    previous = Math.max(previous, m);
    if (attempt.outcome === "refused") say(`shows #${m}, which the API refused (${attempt.why})`);
    const meta = messages[i];
    if (attempt.position && (meta?.offset !== attempt.position.offset || meta?.epoch !== attempt.position.epoch)) {
      say(`shows #${m} at ${meta?.offset}@${meta?.epoch}; the API answered ${attempt.position.offset}@${attempt.position.epoch}`);
    }
  });
  for (const a of accepted(topic)) {
    if (!seen.has(a.n)) say(`misses #${a.n} (accepted by :${a.port} at ${a.position.offset}@${a.position.epoch})`);
  }
  // One gap notice, at the Redis restart: after every message of the first epoch.
  const epochs = [...new Set(accepted(topic).map((a) => a.position.epoch))];
  const gaps = state.gaps.filter((g) => g.topic === topic);
  const seam = messages.filter((e) => e.epoch === epochs[0]).length;
  if (gaps.length !== 1 || gaps[0].after !== seam) {
    say(`gap notices after message(s) [${gaps.map((g) => g.after).join(", ")}]; expected exactly one, after message ${seam} (the last before the Redis restart)`);
  }
  // What the page shows is what it received, with the notice where it came.
  const expected = received.map((d) => (typeof d === "string" ? d : JSON.stringify(d)));
  for (const g of [...gaps].reverse()) expected.splice(g.after, 0, "GAP: some messages could not be recovered");
  const shown = state.shown[topic === "global" ? "global" : "mine"];
  if (JSON.stringify(shown) !== JSON.stringify(expected)) {
    say(`the page shows ${shown.length} list items, not the ${expected.length} expected (messages and gap notices)`);
  }
  return problems;
}

// --- the run ---------------------------------------------------------------------------------
let exitCode = 1;
try {
  const redisArgs = ["--port", REDIS_PORT, "--bind", "127.0.0.1", "--save", "", "--appendonly", "no"];
  let redis = start("redis", "redis-server", redisArgs);
  await waitPort(REDIS_PORT);
  // A page of either node may open its socket on the other (a page from A moves to B when A is
  // killed): each allows the other's origin (by default only its own host's pages may).
  const origins = [A_PORT, B_PORT].flatMap((p) => ["--allowed-origin", `http://127.0.0.1:${p}`]);
  const node = (port) =>
    start(`node-${port}`, WS, ["pubsub_server", "-v", "--port", port, "--backplane", `redis://127.0.0.1:${REDIS_PORT}`, "--api-token", TOKEN, ...origins]);
  const nodeA = node(A_PORT);
  node(B_PORT);
  await waitPort(A_PORT);
  await waitPort(B_PORT);
  note(`redis :${REDIS_PORT} (no persistence), node A :${A_PORT} (pid ${nodeA.pid}), node B :${B_PORT}`);

  const [cr, ff] = await Promise.all([
    openChromium(demo(A_PORT, "chromium", [A, B])),
    openFirefox(demo(B_PORT, "firefox", [B, A])),
  ]);
  const pages = [
    { page: cr, own: "user/chromium" },
    { page: ff, own: "user/firefox" },
  ];
  for (const { page, own } of pages) await until(`${page.name}: subscribed to ${own} and global`, 20000, subscribedBoth(page, own));
  note(`chromium ${cr.version} on A, firefox ${ff.version} on B: subscribed`);

  const traffic = backend();
  await sleep(2500);

  // Node A hangs (SIGSTOP), publications are made through B meanwhile (which the Chromium page
  // therefore cannot get live: it may get them only from B's history, by the client's resume
  // from its last position), then A dies (SIGKILL); the page must move to B by itself.
  let killedAt;
  const missed = await exclusive(async () => {
    nodeA.kill("SIGSTOP");
    const from = attempts.length;
    for (let k = 0; k < 6; k++) await publishNext([B_PORT]);
    killedAt = Date.now();
    nodeA.kill("SIGKILL");
    return attempts.slice(from).filter((a) => a.outcome === "accepted" && a.topic !== "user/firefox");
  });
  await nodeA.exited;
  note(`node A hung (SIGSTOP), ${missed.map((a) => a.text).join(", ")} published through B, node A killed (SIGKILL, pid ${nodeA.pid})`);
  await until("chromium: connected to B after node A was killed", 20000, async () =>
    (await cr.evaluate("window.log")).some((e) => e.kind === "connected" && e.url === B && e.at >= killedAt),
  );
  note("chromium page reconnected to B");
  await sleep(2500);

  // Redis restarts once, without persistence: the history is gone, a new epoch begins.
  const firstEpoch = Object.fromEntries(TOPICS.map((t) => [t, accepted(t).at(-1)?.position.epoch]));
  await stop(redis);
  note("redis stopped");
  await sleep(1500);
  redis = start("redis-restarted", "redis-server", redisArgs);
  await waitPort(REDIS_PORT);
  note("redis started again");
  await until("publications accepted in a new epoch on every topic", 30000, async () =>
    TOPICS.every((t) => accepted(t).filter((a) => a.position.epoch !== firstEpoch[t]).length >= 5),
  );
  await sleep(1500);
  running = false;
  await traffic;
  note(`backend stopped: ${attempts.length} attempts, ${attempts.filter((a) => a.outcome === "accepted").length} accepted, ` +
    `${attempts.filter((a) => a.outcome === "refused").length} refused, ${attempts.filter((a) => a.outcome === "uncertain").length} uncertain`);

  // Let the last publications arrive, then judge.
  for (const { page, own } of pages) {
    const last = (t) => accepted(t).at(-1).text;
    await until(`${page.name}: the last accepted publications`, 15000, async () => {
      const r = await page.evaluate("window.received");
      return [own, "global"].every((t) => r[t].includes(last(t)));
    }).catch((e) => note(e.message));
  }
  await sleep(500); // a duplicate or a stray gap after the last one would show by now
  const problems = [];
  const states = {};
  for (const { page, own } of pages) {
    const state = await page.evaluate(STATE);
    states[page.name] = state;
    await page.screenshot(join(OUT, `pubsub-browsers-${page.name}.png`));
    for (const topic of [own, "global"]) problems.push(...judge(page.name, topic, state));
  }
  const moved = states.chromium.log.filter((e) => e.kind === "connected");
  if (moved.length !== 2 || moved[0].url !== A || moved[1].url !== B) {
    problems.push(`chromium: connected to ${moved.map((e) => e.url).join(" then ")}; expected A then B`);
  }
  // Firefox's node stayed up: a backplane outage is no reason to drop its clients.
  const ffConnections = states.firefox.log.filter((e) => e.kind === "connected" || e.kind === "disconnected");
  if (ffConnections.length !== 1 || ffConnections[0].url !== B) {
    problems.push(`firefox: ${ffConnections.map((e) => `${e.kind} ${e.url}`).join(", ")}; expected one connection, to B, kept`);
  }
  // Each topic has its own epoch; the restart gives each a new one, once.
  for (const t of TOPICS) {
    const epochs = new Set(accepted(t).map((a) => a.position.epoch));
    if (epochs.size !== 2) problems.push(`${t}: the API answered ${epochs.size} epoch(s); expected 2 (before and after the Redis restart)`);
  }
  writeFileSync(join(OUT, "pubsub-browsers.json"), JSON.stringify({ attempts, states, problems }, null, 1));

  for (const { page, own } of pages) {
    const s = states[page.name];
    note(`${page.name}: ${own} ${s.received[own].length} and global ${s.received.global.length} messages, ` +
      `gap notices after [${s.gaps.map((g) => `${g.topic}:${g.after}`).join(", ")}], connections: ` +
      s.log.filter((e) => e.kind === "connected").map((e) => (e.url === A ? "A" : "B")).join("→") +
      `; of the ${attempts.filter((a) => a.outcome === "uncertain" && [own, "global"].includes(a.topic)).length} uncertain, shown: ` +
      `[${attempts.filter((a) => a.outcome === "uncertain" && s.received[a.topic]?.includes(a.text)).map((a) => a.text).join(", ")}]`);
  }
  if (problems.length) {
    console.error(`FAIL: ${problems.length} problem(s); screenshots and state in ${OUT}/pubsub-browsers*:`);
    for (const p of problems) console.error(`FAIL ${p}`);
  } else {
    const total = TOPICS.map((t) => accepted(t).length).reduce((x, y) => x + y);
    console.log(`PASS chromium ${cr.version}, firefox ${ff.version}: ${total} publications once, in order, 1 gap/topic`);
    exitCode = 0;
  }
} catch (e) {
  console.error(`FAIL: ${e.stack ?? e}`);
} finally {
  running = false;
  clearTimeout(hardLimit);
  await cleanup();
}
process.exit(exitCode);
