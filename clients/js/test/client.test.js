// The client against a scripted node: a fake WebSocket whose frames the test reads and answers,
// and a fake clock, so that reconnects, backoff and resume are checked exactly.
import { test } from "node:test";
import assert from "node:assert/strict";
import { connect, PubSubError } from "../src/index.js";

class FakeSocket {
  static all = [];
  constructor(url) {
    this.url = url;
    this.sent = [];
    this.closedWith = null;
    FakeSocket.all.push(this);
  }
  send(text) {
    this.sent.push(JSON.parse(text));
  }
  close(code) {
    this.closedWith = code;
  }
  // The node's side.
  accept() {
    this.onopen?.({});
  }
  frame(obj) {
    this.onmessage?.({ data: JSON.stringify(obj) });
  }
  drop(code = 1006, reason = "") {
    this.onclose?.({ code, reason });
  }
  take() {
    const out = this.sent;
    this.sent = [];
    return out;
  }
}

function harness(urls = ["ws://a/", "ws://b/"], options = {}) {
  FakeSocket.all = [];
  const timers = [];
  let timerIds = 0;
  let now = 0;
  const client = connect(urls, {
    WebSocket: FakeSocket,
    setTimeout: (fn, ms) => {
      const id = ++timerIds;
      timers.push({ fn, ms, id });
      return id;
    },
    clearTimeout: (id) => {
      const at = timers.findIndex((t) => t.id === id);
      if (at >= 0) timers.splice(at, 1);
    },
    random: () => 1, // the longest wait of each jitter range
    now: () => now,
    ...options,
  });
  const events = [];
  for (const e of ["connected", "disconnected", "rejected", "subscribed", "gap", "error", "refused", "dropped", "gaveup"]) {
    client.on(e, (detail) => events.push([e, detail]));
  }
  return {
    client,
    events,
    timers,
    latest: () => FakeSocket.all.at(-1),
    advance(ms) {
      now += ms;
    },
    // Runs the one pending reconnect timer and lets the token promise settle.
    async fire() {
      const t = timers.shift();
      assert.ok(t, "a reconnect is scheduled");
      t.fn();
      await new Promise((r) => setImmediate(r));
      return t.ms;
    },
  };
}

const tick = () => new Promise((r) => setImmediate(r));

test("subscribes every topic, delivers in order, and resolves a publish with its position", async () => {
  const h = harness();
  await tick();
  const got = [];
  h.client.subscribe("user/1", (data, meta) => got.push([data, meta.offset]));
  h.client.subscribe("global", (data) => got.push([data, "g"]));
  const sock = h.latest();
  assert.equal(sock.url, "ws://a/");
  sock.accept();
  assert.deepEqual(sock.take(), [
    { type: "subscribe", topic: "user/1", id: 1 },
    { type: "subscribe", topic: "global", id: 2 },
  ]);
  sock.frame({ type: "subscribed", topic: "user/1", recovery: "live", recovered: 0, id: 1 });
  sock.frame({ type: "message", topic: "user/1", offset: 1, epoch: "E", data: { n: 1 } });
  sock.frame({ type: "message", topic: "global", offset: 7, epoch: "E", data: "hi" });
  sock.frame({ type: "message", topic: "user/1", offset: 2, epoch: "E", data: { n: 2 } });
  assert.deepEqual(got, [[{ n: 1 }, 1], ["hi", "g"], [{ n: 2 }, 2]]);
  const published = h.client.publish("global", [1, 2]);
  assert.deepEqual(sock.take(), [{ type: "publish", topic: "global", data: [1, 2], id: 3 }]);
  sock.frame({ type: "published", topic: "global", offset: 8, epoch: "E", id: 3 });
  assert.deepEqual(await published, { offset: 8, epoch: "E" });
  assert.deepEqual(h.client.positions(), { "user/1": { offset: 2, epoch: "E" }, global: { offset: 7, epoch: "E" } });
});

test("reconnects to the next node with backoff and resumes each topic from its last position, dropping duplicates", async () => {
  const h = harness();
  await tick();
  const got = [];
  h.client.subscribe("t", (data) => got.push(data));
  h.client.subscribe("quiet", () => {});
  let sock = h.latest();
  sock.accept();
  sock.take();
  sock.frame({ type: "message", topic: "t", offset: 5, epoch: "E", data: "m5" });
  h.advance(5000);
  sock.drop();
  assert.deepEqual(h.events.at(-1), ["disconnected", { url: "ws://a/", code: 1006, reason: "", willRetry: true }]);
  // A connection that lived over a second resets the backoff: [125, 250] ms, random()=1 → 250.
  assert.equal(await h.fire(), 250);
  sock = h.latest();
  assert.equal(sock.url, "ws://b/");
  sock.accept();
  assert.deepEqual(sock.take(), [
    { type: "subscribe", topic: "t", id: 3, since: { offset: 5, epoch: "E" } },
    { type: "subscribe", topic: "quiet", id: 4 },
  ]);
  sock.frame({ type: "subscribed", topic: "t", recovery: "recovered", recovered: 1, id: 3 });
  sock.frame({ type: "message", topic: "t", offset: 5, epoch: "E", data: "m5 again" });
  sock.frame({ type: "message", topic: "t", offset: 6, epoch: "E", data: "m6" });
  assert.deepEqual(got, ["m5", "m6"]);
});

test("the backoff doubles on failures in a row, within equal jitter, up to the cap", async () => {
  const h = harness(["ws://a/"], { initialDelayMs: 100, maxDelayMs: 1000, random: () => 0 });
  await tick();
  const waits = [];
  for (let i = 0; i < 6; i++) {
    h.latest().drop();
    waits.push(await h.fire());
  }
  // random()=0: the shortest wait of each range, d/2, for d = 100, 200, 400, 800, 1000 (the cap).
  assert.deepEqual(waits, [50, 100, 200, 400, 500, 500]);
  const c = h.client;
  for (let f = 1; f < 40; f++) {
    for (const r of [0, 0.5, 0.999]) {
      c.random = () => r;
      const d = Math.min(1000, 100 * 2 ** (f - 1));
      const wait = c.nextDelay(f);
      assert.ok(wait >= d / 2 && wait <= d, `failure ${f}: ${wait} outside [${d / 2}, ${d}]`);
    }
  }
});

test("a gap's resume becomes the position resumed from", async () => {
  const h = harness(["ws://a/"]);
  await tick();
  h.client.subscribe("t", () => {});
  let sock = h.latest();
  sock.accept();
  sock.take();
  sock.frame({ type: "message", topic: "t", offset: 150, epoch: "E1", data: 1 });
  sock.frame({ type: "gap", topic: "t", resume: { offset: 0, epoch: "E2" } });
  assert.deepEqual(h.events.at(-1), ["gap", { topic: "t", resume: { offset: 0, epoch: "E2" } }]);
  // A gap without a resume keeps the position held before.
  sock.frame({ type: "gap", topic: "t", resume: null });
  sock.drop();
  await h.fire();
  sock = h.latest();
  sock.accept();
  assert.deepEqual(sock.take(), [{ type: "subscribe", topic: "t", id: 2, since: { offset: 0, epoch: "E2" } }]);
});

test("publishes wait for a connection, bounded, and follow the resubscribes", async () => {
  const h = harness(["ws://a/"], { maxQueuedPublishes: 2 });
  await tick();
  h.client.subscribe("t", () => {});
  const first = h.client.publish("t", "one");
  const second = h.client.publish("t", "two");
  await assert.rejects(h.client.publish("t", "three"), (e) => e instanceof PubSubError && e.code === "queue_full");
  const sock = h.latest();
  sock.accept();
  assert.deepEqual(
    sock.take().map((f) => [f.type, f.data]),
    [["subscribe", undefined], ["publish", "one"], ["publish", "two"]],
  );
  sock.frame({ type: "published", topic: "t", offset: 1, epoch: "E", id: 2 });
  sock.frame({ type: "error", code: "not_allowed", message: "no", id: 3 });
  assert.deepEqual(await first, { offset: 1, epoch: "E" });
  await assert.rejects(second, (e) => e.code === "not_allowed" && e.topic === "t");
});

test("a publish sent but unanswered when the connection drops has an unknown outcome", async () => {
  const h = harness(["ws://a/"]);
  await tick();
  const sock = h.latest();
  sock.accept();
  const p = h.client.publish("t", 1);
  sock.drop();
  await assert.rejects(p, (e) => e.code === "outcome_unknown");
});

test("gives up after maxAttempts failures in a row and fails what waits", async () => {
  const h = harness(["ws://a/"], { maxAttempts: 2 });
  await tick();
  const p = h.client.publish("t", 1);
  h.latest().drop();
  await h.fire();
  h.latest().drop();
  assert.equal(h.timers.length, 0);
  assert.equal(h.events.at(-1)[0], "gaveup");
  await assert.rejects(p, (e) => e.code === "gave_up");
  await assert.rejects(h.client.publish("t", 2), (e) => e.code === "closed");
});

test("a refused subscription rejects its ready promise and is not asked for again", async () => {
  const h = harness(["ws://a/"]);
  await tick();
  const sub = h.client.subscribe("secret", () => {});
  let sock = h.latest();
  sock.accept();
  sock.take();
  sock.frame({ type: "error", code: "not_allowed", message: "not yours", id: 1 });
  await assert.rejects(sub.ready, (e) => e.code === "not_allowed");
  assert.deepEqual(h.events.at(-1), ["error", { code: "not_allowed", message: "not yours", topic: "secret", id: 1 }]);
  sock.drop();
  await h.fire();
  sock = h.latest();
  sock.accept();
  assert.deepEqual(sock.take(), []);
});

test("the token goes in the query string, asked for again on each connection", async () => {
  let n = 0;
  const h = harness(["ws://a/path?x=1"], { token: async () => `t${++n}` });
  await tick();
  assert.equal(h.latest().url, "ws://a/path?x=1&token=t1");
  h.latest().drop();
  await h.fire();
  assert.equal(h.latest().url, "ws://a/path?x=1&token=t2");
});

test("binary payloads arrive as bytes; unsubscribe stops deliveries; close stops reconnecting", async () => {
  const h = harness(["ws://a/"]);
  await tick();
  const got = [];
  const sub = h.client.subscribe("t", (data) => got.push(data));
  const sock = h.latest();
  sock.accept();
  sock.take();
  sock.frame({ type: "message", topic: "t", offset: 1, epoch: "E", data_base64: "/wB7" });
  assert.deepEqual(got, [new Uint8Array([0xff, 0x00, 0x7b])]);
  sub.unsubscribe();
  assert.deepEqual(sock.take(), [{ type: "unsubscribe", topic: "t", id: 2 }]);
  sock.frame({ type: "message", topic: "t", offset: 2, epoch: "E", data: 2 });
  assert.equal(got.length, 1);
  h.client.close();
  assert.equal(sock.closedWith, 1000);
  sock.drop(1000);
  assert.equal(h.timers.length, 0);
});

test("a listener that throws does not break the client", async () => {
  const thrown = [];
  const h = harness(["ws://a/"], { onListenerError: (e) => thrown.push(e.message) });
  await tick();
  const got = [];
  h.client.subscribe("t", () => {
    throw new Error("handler bug");
  });
  h.client.subscribe("t", (d) => got.push(d));
  const sock = h.latest();
  sock.accept();
  sock.frame({ type: "message", topic: "t", offset: 1, epoch: "E", data: 1 });
  sock.frame({ type: "message", topic: "t", offset: 2, epoch: "E", data: 2 });
  assert.deepEqual(got, [1, 2]);
  assert.deepEqual(thrown, ["handler bug", "handler bug"]);
});

test("a retryable refusal keeps the topic and its position and asks again with backoff", async () => {
  // Issue 39 (b): the node's backplane was down when the page (re)subscribed; "unavailable"
  // used to delete the topic, and every later publication was missed with no gap.
  const h = harness(["ws://a/"]);
  await tick();
  const got = [];
  const sub = h.client.subscribe("t", (data) => got.push(data), { since: { offset: 4, epoch: "E" } });
  const sock = h.latest();
  sock.accept();
  assert.deepEqual(sock.take(), [{ type: "subscribe", topic: "t", id: 1, since: { offset: 4, epoch: "E" } }]);
  sock.frame({ type: "error", code: "unavailable", message: "backplane down", id: 1 });
  assert.equal(h.client.state("t"), "retrying");
  assert.deepEqual(sub.position, { offset: 4, epoch: "E" });
  assert.equal(h.timers.length, 1, "a resubscribe is scheduled");
  await h.fire();
  assert.deepEqual(sock.take(), [{ type: "subscribe", topic: "t", id: 2, since: { offset: 4, epoch: "E" } }]);
  sock.frame({ type: "error", code: "node_full", message: "too many topics", id: 2 });
  assert.equal(h.client.state("t"), "retrying");
  await h.fire();
  assert.deepEqual(sock.take(), [{ type: "subscribe", topic: "t", id: 3, since: { offset: 4, epoch: "E" } }]);
  sock.frame({ type: "subscribed", topic: "t", recovery: "recovered", recovered: 1, id: 3 });
  sock.frame({ type: "message", topic: "t", offset: 5, epoch: "E", data: "m5" });
  assert.equal(h.client.state("t"), "subscribed");
  assert.deepEqual(await sub.ready, { recovery: "recovered", recovered: 1 });
  assert.deepEqual(got, ["m5"]);
});

test("a permanent refusal reaches the application naming the topic, and the topic's state says so", async () => {
  const h = harness(["ws://a/"]);
  await tick();
  h.client.subscribe("secret", () => {});
  const sock = h.latest();
  sock.accept();
  sock.take();
  sock.frame({ type: "error", code: "not_allowed", message: "not yours", id: 1 });
  assert.ok(h.events.some(([e, d]) => e === "refused" && d.topic === "secret" && d.code === "not_allowed"));
  assert.equal(h.client.state("secret"), "refused");
  assert.equal(h.timers.length, 0);
});

test("the client's retryable codes are the protocol document's table", async () => {
  const { readFileSync } = await import("node:fs");
  const { RETRYABLE_CODES } = await import("../src/index.js");
  const doc = readFileSync(new URL("../../../docs/pubsub-protocol.md", import.meta.url), "utf8");
  const errors = doc.slice(doc.indexOf("## Errors"), doc.indexOf("## A session"));
  const rows = [...errors.matchAll(/^\| `([a-z_]+)` \| (yes|no) \|/gm)];
  assert.ok(rows.length >= 9, "the Errors table has a retryable column");
  const retryable = rows.filter((r) => r[2] === "yes").map((r) => r[1]).sort();
  assert.deepEqual([...RETRYABLE_CODES].sort(), retryable);
});

test("its own publications do not come back when it resumes after a reconnect", async () => {
  // Issue 39 (i): the node leaves out a connection's own publications, but a new connection is
  // a new subscriber: resuming recovered them from history.
  const h = harness(["ws://a/", "ws://b/"]);
  await tick();
  const got = [];
  h.client.subscribe("t", (data) => got.push(data));
  let sock = h.latest();
  sock.accept();
  sock.take();
  sock.frame({ type: "message", topic: "t", offset: 5, epoch: "E", data: "m5" });
  const mine = h.client.publish("t", "mine");
  sock.frame({ type: "published", topic: "t", offset: 6, epoch: "E", id: 2 });
  assert.deepEqual(await mine, { offset: 6, epoch: "E" });
  h.advance(5000);
  sock.drop();
  await h.fire();
  sock = h.latest();
  sock.accept();
  assert.deepEqual(sock.take(), [{ type: "subscribe", topic: "t", id: 3, since: { offset: 5, epoch: "E" } }]);
  sock.frame({ type: "subscribed", topic: "t", recovery: "recovered", recovered: 2, id: 3 });
  sock.frame({ type: "message", topic: "t", offset: 6, epoch: "E", data: "mine" });
  sock.frame({ type: "message", topic: "t", offset: 7, epoch: "E", data: "m7" });
  assert.deepEqual(got, ["m5", "m7"]);
  assert.deepEqual(h.client.positions(), { t: { offset: 7, epoch: "E" } });
});

test("a bad token: one 'rejected' event naming the kind, and no reconnect storm", async () => {
  const h = harness(["ws://a/"], { token: "wrong" });
  await tick();
  const queued = h.client.publish("t", 1);
  h.latest().accept();
  h.latest().drop(4001, "unauthorized: the token was refused: InvalidSignature");
  const rejected = h.events.filter(([e]) => e === "rejected");
  assert.deepEqual(rejected, [
    [
      "rejected",
      {
        url: "ws://a/",
        kind: "unauthorized",
        code: 4001,
        reason: "unauthorized: the token was refused: InvalidSignature",
        willRetry: false,
      },
    ],
  ]);
  assert.equal(h.timers.length, 0, "a fixed token refused once is refused again: no retry");
  assert.equal(h.events.at(-1)[0], "gaveup");
  assert.equal(h.events.at(-1)[1].code, "unauthorized");
  assert.equal(FakeSocket.all.length, 1);
  await assert.rejects(h.client.publish("t", 2), (e) => e.code === "closed");
  void queued.catch(() => {});
});

test("with a token function, a refused token is asked for again once, then the client stops", async () => {
  let n = 0;
  const h = harness(["ws://a/"], { token: async () => `t${++n}` });
  await tick();
  h.latest().accept();
  h.latest().drop(4001, "unauthorized: expired");
  assert.equal(h.events.filter(([e]) => e === "rejected").at(-1)[1].willRetry, true);
  await h.fire();
  assert.equal(h.latest().url, "ws://a/?token=t2");
  h.latest().accept();
  h.latest().drop(4001, "unauthorized: expired");
  assert.equal(h.timers.length, 0);
  assert.equal(h.events.filter(([e]) => e === "rejected").at(-1)[1].willRetry, false);
  assert.equal(h.events.at(-1)[0], "gaveup");
  assert.equal(FakeSocket.all.length, 2);
});

test("an expired token on a live connection: a fresh token and a reconnect that resumes", async () => {
  let n = 0;
  const h = harness(["ws://a/"], { token: async () => `t${++n}` });
  await tick();
  h.client.subscribe("news", () => {});
  let sock = h.latest();
  sock.accept();
  sock.take();
  sock.frame({ type: "subscribed", topic: "news", recovery: "live", recovered: 0, id: 1 });
  sock.frame({ type: "message", topic: "news", offset: 5, epoch: "e", data: "x" });
  h.advance(60_000);
  sock.drop(4002, "token_expired: the token expired at 1700000000");
  await h.fire();
  sock = h.latest();
  assert.equal(sock.url, "ws://a/?token=t2");
  sock.accept();
  assert.deepEqual(sock.take(), [{ type: "subscribe", topic: "news", id: 2, since: { offset: 5, epoch: "e" } }]);
  // Without a token function an expired token cannot be renewed: the client stops.
  const fixed = harness(["ws://a/"], { token: "t" });
  await tick();
  fixed.latest().accept();
  fixed.latest().drop(4002, "token_expired: …");
  assert.equal(fixed.timers.length, 0);
  assert.equal(fixed.events.at(-1)[1].code, "token_expired");
});

test("refusals that pass (over a limit, node full) back off; not allowed and another origin stop", async () => {
  for (const [code, kind] of [[4029, "too_many_connections"], [1013, "node_full"]]) {
    const h = harness(["ws://a/"]);
    await tick();
    h.latest().accept();
    h.latest().drop(code, `${kind}: later`);
    assert.equal(h.events.find(([e]) => e === "rejected")[1].willRetry, true);
    assert.equal(h.timers.length, 1);
    assert.ok(h.timers[0].ms >= 250, "with backoff");
  }
  for (const [code, kind] of [[4003, "not_allowed"], [4004, "origin_not_allowed"]]) {
    const h = harness(["ws://a/"], { token: async () => "t" });
    await tick();
    h.latest().accept();
    h.latest().drop(code, `${kind}: no`);
    assert.equal(h.timers.length, 0, kind);
    assert.equal(h.events.at(-1)[1].code, kind);
  }
});

test("every topic's outcome reaches the application after each reconnect", async () => {
  const h = harness(["ws://a/"]);
  await tick();
  const sub = h.client.subscribe("news", () => {});
  let sock = h.latest();
  sock.accept();
  sock.frame({ type: "subscribed", topic: "news", recovery: "live", recovered: 0, id: 1 });
  assert.deepEqual(await sub.ready, { recovery: "live", recovered: 0 });
  sock.drop();
  await h.fire();
  sock = h.latest();
  sock.accept();
  sock.frame({ type: "subscribed", topic: "news", recovery: "recovered", recovered: 3, id: 2 });
  const outcomes = h.events.filter(([e]) => e === "subscribed").map(([, d]) => d);
  assert.deepEqual(outcomes, [
    { topic: "news", recovery: "live", recovered: 0, resubscribed: false },
    { topic: "news", recovery: "recovered", recovered: 3, resubscribed: true },
  ]);
});

test("the client's refusal close codes are the protocol document's table", async () => {
  const { readFileSync } = await import("node:fs");
  const { REFUSALS } = await import("../src/index.js");
  const doc = readFileSync(new URL("../../../docs/pubsub-protocol.md", import.meta.url), "utf8");
  const section = doc.slice(doc.indexOf("## Refusals"));
  const rows = [...section.matchAll(/^\| (\d{4}) \| `([a-z_]+)` \| \d{3} \| (retry|token|stop) \|/gm)];
  assert.equal(rows.length, 6, "the Refusals table has six rows");
  const table = Object.fromEntries(rows.map((r) => [r[1], { kind: r[2], then: r[3] }]));
  assert.deepEqual(JSON.parse(JSON.stringify(REFUSALS)), table);
});

/** A JWT-shaped token (unsigned: the client never verifies) expiring `secondsLeft` from now. */
function jwtExpiring(secondsLeft, sub = "alice") {
  const b64 = (o) => Buffer.from(JSON.stringify(o)).toString("base64url");
  return `${b64({ alg: "HS256" })}.${b64({ sub, exp: Math.floor(Date.now() / 1000) + secondsLeft })}.sig`;
}

test("with a token function, a JWT is refreshed on the open socket before it expires, nothing lost", async () => {
  let n = 0;
  const h = harness(["ws://a/"], { token: async () => (++n, jwtExpiring(100)) });
  h.client.on("refreshed", (d) => h.events.push(["refreshed", d]));
  await tick();
  const got = [];
  h.client.subscribe("news", (d) => got.push(d));
  const sock = h.latest();
  sock.accept();
  sock.take();
  sock.frame({ type: "subscribed", topic: "news", recovery: "live", recovered: 0, id: 1 });
  // One timer: the refresh, 10 % of the lifetime (10 s) before the token's exp.
  assert.equal(h.timers.length, 1);
  assert.ok(Math.abs(h.timers[0].ms - 90_000) < 1_500, `${h.timers[0].ms}`);
  h.advance(90_000);
  await h.fire();
  const [refresh] = sock.take();
  assert.equal(refresh.type, "refresh");
  assert.equal(refresh.token.split(".").length, 3);
  assert.equal(n, 2, "the application was asked for a fresh token");
  sock.frame({ type: "refreshed", expires: Math.floor(Date.now() / 1000) + 100, id: refresh.id });
  assert.ok(h.events.some(([e]) => e === "refreshed"));
  // The same socket, still subscribed; the next refresh is scheduled from the node's expiry.
  sock.frame({ type: "message", topic: "news", offset: 1, epoch: "e", data: "after" });
  assert.deepEqual(got, ["after"]);
  assert.equal(FakeSocket.all.length, 1, "no reconnect");
  assert.equal(h.timers.length, 1);
  assert.ok(Math.abs(h.timers[0].ms - 90_000) < 1_500, `${h.timers[0].ms}`);
  // A node that says the socket no longer expires: no more refreshes.
  h.advance(90_000);
  await h.fire();
  const [again] = sock.take();
  sock.frame({ type: "refreshed", expires: null, id: again.id });
  assert.equal(h.timers.length, 0);
});

test("a short token is refreshed at least 5 s and at most halfway before it expires; a string token never", async () => {
  const short = harness(["ws://a/"], { token: () => jwtExpiring(8) });
  await tick();
  short.latest().accept();
  assert.ok(Math.abs(short.timers[0].ms - 4_000) < 1_500, `${short.timers[0].ms}`);
  const long = harness(["ws://a/"], { token: () => jwtExpiring(3600) });
  await tick();
  long.latest().accept();
  assert.ok(Math.abs(long.timers[0].ms - 3_540_000) < 1_500, `${long.timers[0].ms}`);
  const fixed = harness(["ws://a/"], { token: jwtExpiring(100) });
  await tick();
  fixed.latest().accept();
  assert.equal(fixed.timers.length, 0, "a string cannot be renewed");
  const opaque = harness(["ws://a/"], { token: () => "not-a-jwt" });
  await tick();
  opaque.latest().accept();
  assert.equal(opaque.timers.length, 0, "no exp to go by");
});

test("a refused refresh is tried once more; then the socket expires (4002) and reconnects with a fresh token", async () => {
  let n = 0;
  const h = harness(["ws://a/"], { token: async () => (++n, jwtExpiring(100)) });
  await tick();
  h.client.subscribe("news", () => {});
  let sock = h.latest();
  sock.accept();
  sock.take();
  sock.frame({ type: "subscribed", topic: "news", recovery: "live", recovered: 0, id: 1 });
  sock.frame({ type: "message", topic: "news", offset: 3, epoch: "e", data: "x" });
  h.advance(90_000);
  await h.fire();
  let [refresh] = sock.take();
  sock.frame({ type: "error", code: "unauthorized", message: "no", id: refresh.id });
  assert.ok(h.events.some(([e, d]) => e === "error" && d.refresh && d.code === "unauthorized"));
  assert.equal(h.timers.length, 1, "once more");
  assert.ok(Math.abs(h.timers[0].ms - 5_000) < 1_500, `${h.timers[0].ms}`);
  h.advance(5_000);
  await h.fire();
  [refresh] = sock.take();
  sock.frame({ type: "error", code: "unauthorized", message: "no", id: refresh.id });
  assert.equal(h.timers.length, 0, "no third try");
  sock.drop(4002, "token_expired: …");
  await h.fire();
  sock = h.latest();
  assert.match(sock.url, /token=/);
  sock.accept();
  assert.deepEqual(sock.take(), [{ type: "subscribe", topic: "news", id: 4, since: { offset: 3, epoch: "e" } }]);
});

test("a connection that fails with an error and no close event, or never opens, is given up and the next node tried", async () => {
  const h = harness(["ws://a/", "ws://b/", "ws://c/"], { connectTimeoutMs: 5000 });
  await tick();
  h.client.subscribe("t", () => {});
  // Node 20's WebSocket after a refused upgrade: an error, then no close event, ever.
  let sock = h.latest();
  sock.onerror?.({});
  assert.deepEqual(h.events.at(-1), [
    "disconnected",
    { url: "ws://a/", code: 1006, reason: "the connection failed", willRetry: true },
  ]);
  // Its attempt's deadline went with it: the one timer left is the reconnect.
  assert.equal(h.timers.length, 1);
  await h.fire();
  // A node that accepts the connection and never answers: given up at the deadline.
  sock = h.latest();
  assert.equal(sock.url, "ws://b/");
  assert.deepEqual(h.timers.map((t) => t.ms), [5000]);
  await h.fire();
  assert.equal(sock.closedWith, undefined, "closed (no code: it never opened)");
  assert.deepEqual(h.events.at(-1), [
    "disconnected",
    { url: "ws://b/", code: 1006, reason: "no answer within 5000 ms", willRetry: true },
  ]);
  // A close event arriving late for it changes nothing.
  const before = h.events.length;
  sock.drop();
  assert.equal(h.events.length, before);
  await h.fire();
  sock = h.latest();
  assert.equal(sock.url, "ws://c/");
  sock.accept();
  assert.deepEqual(sock.take(), [{ type: "subscribe", topic: "t", id: 1 }]);
  // Open: no deadline left, and an error is followed by its close event, handled once.
  assert.equal(h.timers.length, 0);
  sock.onerror?.({});
  assert.equal(h.events.at(-1)[0], "connected");
  sock.drop();
  assert.deepEqual(h.events.at(-1), ["disconnected", { url: "ws://c/", code: 1006, reason: "", willRetry: true }]);
});
