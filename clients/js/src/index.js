// A client of Sockeye's pub/sub protocol (docs/pubsub-protocol.md) for browsers and Node:
// one WebSocket, many topics, reconnecting with jittered backoff across a list of nodes and
// resuming every topic from its last position, so that nothing is missed or delivered twice
// across a reconnect. No dependencies; an ES module.

/** Defaults of every option; see index.d.ts for what each means. */
export const DEFAULTS = Object.freeze({
  initialDelayMs: 250,
  maxDelayMs: 30_000,
  maxAttempts: Infinity,
  maxQueuedPublishes: 1000,
  tokenParam: "token",
  connectTimeoutMs: 10_000,
});

/**
 * The refusal codes a node answers for a condition that passes (its backplane down, the node
 * full): the request is asked again with backoff, the topic and its position kept. Every other
 * code is permanent. The same table as docs/pubsub-protocol.md's "Errors" (a test checks).
 */
export const RETRYABLE_CODES = Object.freeze(new Set(["unavailable", "node_full", "rate_limited"]));

/**
 * The close codes a node refuses a socket with, right after its upgrade (docs/pubsub-protocol.md,
 * "Refusals"): what each means and what the client does. `retry`: reconnect with backoff, as
 * after any drop; `token`: only with a fresh token, so only when `options.token` is a function
 * (asked again before the next attempt), else stop; `stop`: the same request gets the same
 * answer, so the client closes for good. The reason is `"<kind>: <why>"`.
 */
export const REFUSALS = Object.freeze({
  4001: Object.freeze({ kind: "unauthorized", then: "token" }),
  4002: Object.freeze({ kind: "token_expired", then: "token" }),
  4003: Object.freeze({ kind: "not_allowed", then: "stop" }),
  4004: Object.freeze({ kind: "origin_not_allowed", then: "stop" }),
  4029: Object.freeze({ kind: "too_many_connections", then: "retry" }),
  1013: Object.freeze({ kind: "node_full", then: "retry" }),
});

/**
 * When a token given as a function is refreshed on the open socket (docs/pubsub-protocol.md,
 * "Token expiry and refresh"): this share of its lifetime before it expires, at least
 * `REFRESH_MIN_MS` and at most `REFRESH_MAX_MS` before, and never before half its lifetime.
 */
export const REFRESH = Object.freeze({ share: 0.1, minMs: 5_000, maxMs: 60_000 });

/** Own publications remembered per topic to leave out of a resume (the latest ones). */
const OWN_KEPT = 1000;

/** An error of the client, with a `code` to match on. */
export class PubSubError extends Error {
  constructor(code, message, extra = {}) {
    super(message);
    this.name = "PubSubError";
    this.code = code;
    Object.assign(this, extra);
  }
}

/**
 * Connects to one node, or to the first of several (a string or an array of ws:// or wss://
 * URLs), and returns the client at once: it connects in the background and reconnects by
 * itself until `close()` or until it gives up (`maxAttempts` in a row failed).
 */
export function connect(urls, options = {}) {
  return new PubSubClient(urls, options);
}

export class PubSubClient {
  constructor(urls, options = {}) {
    this.urls = (Array.isArray(urls) ? urls : [urls]).map(String);
    if (this.urls.length === 0) throw new TypeError("connect() needs at least one URL");
    this.options = { ...DEFAULTS, ...options };
    this.WebSocket = options.WebSocket ?? globalThis.WebSocket;
    if (typeof this.WebSocket !== "function") {
      throw new TypeError(
        "no WebSocket implementation: pass options.WebSocket (in Node before 22: the `ws` package's WebSocket)",
      );
    }
    this.timers = {
      set: options.setTimeout ?? ((fn, ms) => setTimeout(fn, ms)),
      clear: options.clearTimeout ?? ((id) => clearTimeout(id)),
    };
    this.random = options.random ?? Math.random;
    this.now = options.now ?? (() => Date.now());
    // A listener's or handler's exception must not break the client's state: it is reported
    // asynchronously (as an uncaught error, where the page or process reports those).
    this.reportError =
      options.onListenerError ??
      ((e) =>
        queueMicrotask(() => {
          throw e;
        }));
    this.listeners = new Map();
    // topic -> { handlers, position, ready, settle, state, error, retries, retryTimer }; state is
    // "subscribing", "subscribed", "retrying" (a retryable refusal) or "refused" (a permanent one).
    this.topics = new Map();
    this.pending = new Map(); // request id -> { kind, topic, resolve, reject }
    this.queued = []; // publishes waiting for a connection: { topic, data, resolve, reject }
    this.nextId = 1;
    this.urlIndex = 0;
    this.failures = 0; // connection attempts failed in a row
    this.refusedTokens = 0; // token refusals in a row (see REFUSALS)
    this.socket = null;
    this.open = false;
    this.closed = false;
    this.retryTimer = null;
    this.refreshTimer = null;
    this.expiresAt = null; // when the socket's token expires (ms, on this.now()'s clock), if known
    this.refreshRetried = false; // a refused refresh is tried once more per token
    this.#connect();
  }

  /**
   * Adds a listener: "connected", "disconnected", "rejected" (the node refused the socket:
   * {kind, code, reason, willRetry}), "subscribed" (each topic's outcome after every
   * (re)subscribe: {topic, recovery, recovered, resubscribed}), "gap", "error", "refused" (a
   * topic refused for good), "dropped", "gaveup", "refreshed" (the token was renewed on the open
   * socket: {expires}, Unix seconds or null).
   */
  on(event, listener) {
    if (!this.listeners.has(event)) this.listeners.set(event, new Set());
    this.listeners.get(event).add(listener);
    return () => this.off(event, listener);
  }

  /** Removes a listener. */
  off(event, listener) {
    this.listeners.get(event)?.delete(listener);
  }

  /**
   * Subscribes to `topic`; `onMessage(data, meta)` is called for each message, in order, once.
   * `options.since` resumes after a position saved earlier ({offset, epoch}).
   */
  subscribe(topic, onMessage, options = {}) {
    topic = String(topic);
    let entry = this.topics.get(topic);
    if (entry?.state === "refused") {
      // Asked again by the application after a permanent refusal: a fresh try.
      const { handlers, position } = entry;
      entry = this.#newEntry(topic, position);
      for (const handler of handlers) entry.handlers.add(handler);
    } else if (!entry) {
      entry = this.#newEntry(topic, options.since ?? null);
    }
    entry.handlers.add(onMessage);
    const client = this;
    return {
      topic,
      ready: entry.ready,
      get position() {
        return client.topics.get(topic)?.position ?? null;
      },
      get state() {
        return client.state(topic);
      },
      unsubscribe() {
        client.#unsubscribe(topic, onMessage);
      },
    };
  }

  /**
   * Publishes `data` (any JSON value) on `topic`. Resolves with the position it got
   * ({offset, epoch}; {} on a node without history). While disconnected it waits in a bounded
   * queue and is sent after the next connection; it rejects with a PubSubError whose code is
   * "queue_full", "closed", "gave_up", a node's refusal code ("not_allowed", …), or
   * "outcome_unknown" when the connection dropped after sending it and before the node's answer
   * (it may or may not have been published: retry only if a duplicate is harmless).
   */
  publish(topic, data) {
    return new Promise((resolve, reject) => {
      const item = { topic: String(topic), data, resolve, reject };
      if (this.closed) return reject(new PubSubError("closed", "the client was closed"));
      if (this.open) return this.#sendPublish(item);
      if (this.queued.length >= this.options.maxQueuedPublishes) {
        return reject(
          new PubSubError(
            "queue_full",
            `${this.queued.length} publications already wait for a connection (maxQueuedPublishes)`,
          ),
        );
      }
      this.queued.push(item);
    });
  }

  /**
   * Where `topic` stands: "subscribing" (asked, not answered yet, or waiting for a connection),
   * "subscribed", "retrying" (refused for a condition that passes: asked again with backoff from
   * the kept position), "refused" (refused for good: not asked again; the "refused" event said
   * why), or null when not subscribed.
   */
  state(topic) {
    return this.topics.get(String(topic))?.state ?? null;
  }

  #newEntry(topic, position) {
    const entry = {
      handlers: new Set(),
      position,
      settle: null,
      ready: null,
      state: "subscribing",
      error: null,
      retries: 0,
      retryTimer: null,
      subscribedBefore: false,
      // Positions of this client's own publications on the topic not yet passed: a node leaves
      // a connection's own publications out, but after a reconnect the new connection is
      // another subscriber, and a resume would recover them.
      own: [],
    };
    entry.ready = new Promise((resolve, reject) => (entry.settle = { resolve, reject }));
    entry.ready.catch(() => {}); // a refusal is also a "refused" event; no unhandled rejection
    this.topics.set(topic, entry);
    if (this.open) this.#sendSubscribe(topic, entry);
    return entry;
  }

  /** The positions to save for a later `subscribe(topic, fn, {since})`, per topic. */
  positions() {
    const out = {};
    for (const [topic, entry] of this.topics) if (entry.position) out[topic] = { ...entry.position };
    return out;
  }

  /** Closes for good: no reconnect; queued publishes reject with code "closed". */
  close() {
    if (this.closed) return;
    this.closed = true;
    if (this.retryTimer !== null) this.timers.clear(this.retryTimer);
    this.retryTimer = null;
    for (const entry of this.topics.values()) this.#cancelRetry(entry);
    this.#failQueued("closed", "the client was closed");
    const socket = this.socket;
    this.#dropSocket(new PubSubError("closed", "the client was closed"));
    if (socket) {
      socket.close(1000);
      this.#emit("disconnected", { code: 1000, reason: "closed by the client", willRetry: false });
    }
  }

  #emit(event, detail) {
    for (const listener of this.listeners.get(event) ?? []) {
      try {
        listener(detail);
      } catch (e) {
        this.reportError(e);
      }
    }
  }

  async #connect() {
    if (this.closed) return;
    const base = this.urls[this.urlIndex % this.urls.length];
    let url = base;
    try {
      const token = typeof this.options.token === "function" ? await this.options.token() : this.options.token;
      // On this.now()'s clock (the token's exp is on Date.now()'s).
      const exp = typeof this.options.token === "function" ? tokenExpiry(token) : null;
      this.expiresAt = exp == null ? null : this.now() + (exp - Date.now());
      if (token != null) {
        const u = new URL(base);
        u.searchParams.set(this.options.tokenParam, String(token));
        url = u.toString();
      }
    } catch (e) {
      this.#emit("error", { code: "token", message: `options.token failed: ${e?.message ?? e}` });
      return this.#retry();
    }
    if (this.closed) return;
    let socket;
    try {
      socket = new this.WebSocket(url);
    } catch (e) {
      this.#emit("error", { code: "connect", message: `${base}: ${e?.message ?? e}` });
      return this.#retry();
    }
    this.socket = socket;
    // An attempt that never resolves is a failed one: a node that accepts the connection and
    // never answers the upgrade, or a WebSocket that reports a failed handshake with an error
    // and no close event (Node 20's: "Received network error or non-101 status code", then
    // nothing), would otherwise hold the client here for good.
    const attempt = this.timers.set(() => {
      if (socket !== this.socket || this.open) return;
      try {
        socket.close();
      } catch {
        // closing a socket that never opened may throw; it is given up either way
      }
      ended({ code: 1006, reason: `no answer within ${this.options.connectTimeoutMs} ms` });
    }, this.options.connectTimeoutMs);
    socket.onopen = () => {
      if (socket !== this.socket) return;
      this.timers.clear(attempt);
      this.open = true;
      this.openedAt = this.now();
      this.refreshRetried = false;
      this.#scheduleRefresh();
      this.#emit("connected", { url: base });
      // Every topic again, from its last position, then what waited to be published: a
      // publication queued after a subscribe comes after it, as the caller ordered them.
      for (const [topic, entry] of this.topics) {
        if (entry.state !== "refused") this.#sendSubscribe(topic, entry);
      }
      const queued = this.queued;
      this.queued = [];
      for (const item of queued) this.#sendPublish(item);
    };
    socket.onmessage = (event) => {
      if (socket === this.socket) this.#receive(event.data);
    };
    // The end of this socket, once: its close event, or an error before it opened, or the
    // attempt's deadline (whichever comes first; the others then find another socket current).
    const ended = (event) => {
      if (socket !== this.socket) return;
      this.timers.clear(attempt);
      const wasOpen = this.open;
      this.#dropSocket(
        new PubSubError("outcome_unknown", "the connection dropped before the node answered"),
      );
      const refusal = REFUSALS[event?.code];
      // A refusal that only a new token can cure, twice in a row (a fresh token refused too):
      // no token the application can give will do, so stop rather than storm the node.
      const tokenCurable = typeof this.options.token === "function" && this.refusedTokens < 1;
      const stop = refusal && (refusal.then === "stop" || (refusal.then === "token" && !tokenCurable));
      this.#emit("disconnected", {
        url: base,
        code: event?.code,
        reason: event?.reason,
        willRetry: !this.closed && !stop,
      });
      if (refusal) {
        this.#emit("rejected", {
          url: base,
          kind: refusal.kind,
          code: event.code,
          reason: event.reason,
          willRetry: !this.closed && !stop,
        });
        if (stop) return this.#stop(refusal.kind, `the node refused the connection: ${event.reason || refusal.kind}`);
        if (refusal.then === "token") {
          // A new token, at once for an expired one (the connection lived), else after backoff.
          this.refusedTokens = refusal.kind === "token_expired" ? 0 : this.refusedTokens + 1;
          if (refusal.kind === "token_expired") {
            this.failures = 0;
            return this.#retry();
          }
        }
      } else if (wasOpen) {
        this.refusedTokens = 0;
      }
      // A connection that did not open, or closed within a second (a node that accepts and
      // then refuses), counts as a failure: the backoff grows instead of hammering the node.
      if (wasOpen && this.now() - this.openedAt >= 1000) this.failures = 0;
      else this.failures += 1;
      this.urlIndex += 1; // the next node; the same one again after a round
      this.#retry();
    };
    socket.onclose = ended;
    // After an open socket's error a close event follows; before it opened, some
    // implementations send none (see `attempt`).
    socket.onerror = () => {
      if (!this.open) ended({ code: 1006, reason: "the connection failed" });
    };
  }

  #dropSocket(error) {
    this.socket = null;
    this.open = false;
    this.#cancelRefresh();
    // Every topic is asked for again on the next connection: no retry of the old one.
    for (const entry of this.topics.values()) {
      this.#cancelRetry(entry);
      if (entry.state !== "refused") entry.state = "subscribing";
    }
    for (const [, request] of this.pending) {
      // Subscribes are sent again on the next connection; a publish's fate is unknown.
      if (request.kind === "publish") request.reject(error);
    }
    this.pending.clear();
  }

  /** Closes for good after a refusal no retry can cure; queued publishes reject with `code`. */
  #stop(code, message) {
    this.closed = true;
    for (const entry of this.topics.values()) this.#cancelRetry(entry);
    this.#failQueued(code, message);
    this.#emit("gaveup", { attempts: this.failures + 1, code, message });
  }

  #retry() {
    if (this.closed) return;
    if (this.failures >= this.options.maxAttempts) {
      this.closed = true;
      const message = `gave up after ${this.failures} failed connection attempts`;
      this.#failQueued("gave_up", message);
      this.#emit("gaveup", { attempts: this.failures, message });
      return;
    }
    const delay = this.nextDelay(this.failures);
    this.retryTimer = this.timers.set(() => {
      this.retryTimer = null;
      this.#connect();
    }, delay);
  }

  /**
   * The wait after `failures` failed attempts in a row (0: after a connection that lived):
   * d = initialDelayMs × 2^(failures − 1), at most maxDelayMs, drawn uniformly in [d/2, d]
   * ("equal jitter": clients that lost the same node do not all come back at once).
   */
  nextDelay(failures) {
    const { initialDelayMs, maxDelayMs } = this.options;
    const d = Math.min(maxDelayMs, initialDelayMs * 2 ** Math.min(Math.max(failures - 1, 0), 30));
    return d / 2 + this.random() * (d / 2);
  }

  #cancelRefresh() {
    if (this.refreshTimer !== null) this.timers.clear(this.refreshTimer);
    this.refreshTimer = null;
  }

  /**
   * With a token function and a known expiry, asks the application for a fresh token before it
   * expires and sends it on the open socket (see REFRESH): the node keeps the socket, its
   * subscriptions and their positions. Without a refresh it would close it with 4002.
   */
  #scheduleRefresh(delayMs) {
    this.#cancelRefresh();
    if (typeof this.options.token !== "function" || this.expiresAt == null || !this.open) return;
    const left = this.expiresAt - this.now();
    const margin = Math.min(left / 2, Math.min(REFRESH.maxMs, Math.max(REFRESH.minMs, left * REFRESH.share)));
    const socket = this.socket;
    this.refreshTimer = this.timers.set(
      () => {
        this.refreshTimer = null;
        if (socket === this.socket && this.open) this.#refresh(socket);
      },
      delayMs ?? Math.max(0, left - margin),
    );
  }

  async #refresh(socket) {
    let token;
    try {
      token = await this.options.token();
    } catch (e) {
      this.#emit("error", { code: "token", message: `options.token failed: ${e?.message ?? e}` });
      return this.#refreshRefused();
    }
    if (socket !== this.socket || !this.open || token == null) return;
    const id = this.nextId++;
    this.pending.set(id, { kind: "refresh" });
    this.#send({ type: "refresh", token: String(token), id });
  }

  /** A refresh refused (or no token): once more at half the time left, then let it expire. */
  #refreshRefused() {
    if (this.refreshRetried || this.expiresAt == null) return;
    this.refreshRetried = true;
    this.#scheduleRefresh(Math.max(0, (this.expiresAt - this.now()) / 2));
  }

  #failQueued(code, message) {
    const queued = this.queued;
    this.queued = [];
    for (const item of queued) item.reject(new PubSubError(code, message));
  }

  #send(frame) {
    this.socket.send(JSON.stringify(frame));
  }

  #cancelRetry(entry) {
    if (entry.retryTimer !== null) this.timers.clear(entry.retryTimer);
    entry.retryTimer = null;
  }

  #sendSubscribe(topic, entry) {
    this.#cancelRetry(entry);
    entry.state = "subscribing";
    const id = this.nextId++;
    this.pending.set(id, { kind: "subscribe", topic });
    const frame = { type: "subscribe", topic, id };
    if (entry.position) frame.since = { offset: entry.position.offset, epoch: entry.position.epoch };
    this.#send(frame);
  }

  #sendPublish(item) {
    const id = this.nextId++;
    this.pending.set(id, { kind: "publish", topic: item.topic, resolve: item.resolve, reject: item.reject });
    let frame;
    try {
      frame = JSON.stringify({ type: "publish", topic: item.topic, data: item.data, id });
    } catch (e) {
      this.pending.delete(id);
      return item.reject(new PubSubError("bad_request", `data is not JSON: ${e.message}`));
    }
    if (frame === undefined || item.data === undefined) {
      this.pending.delete(id);
      return item.reject(new PubSubError("bad_request", "data is not JSON (undefined)"));
    }
    this.socket.send(frame);
  }

  #unsubscribe(topic, handler) {
    const entry = this.topics.get(topic);
    if (!entry) return;
    entry.handlers.delete(handler);
    if (entry.handlers.size > 0) return;
    this.#cancelRetry(entry);
    this.topics.delete(topic);
    if (this.open) this.#send({ type: "unsubscribe", topic, id: this.nextId++ });
  }

  #receive(text) {
    let frame;
    try {
      frame = JSON.parse(text);
    } catch {
      return this.#emit("error", { code: "bad_json", message: "the node sent a frame that is not JSON" });
    }
    const request = frame.id !== undefined ? this.pending.get(frame.id) : undefined;
    if (request) this.pending.delete(frame.id);
    switch (frame.type) {
      case "message":
        return this.#deliver(frame);
      case "gap": {
        const entry = this.topics.get(frame.topic);
        if (entry && frame.resume) entry.position = { offset: frame.resume.offset, epoch: frame.resume.epoch };
        return this.#emit("gap", { topic: frame.topic, resume: frame.resume ?? null });
      }
      case "subscribed": {
        const entry = this.topics.get(frame.topic);
        if (!entry) return;
        entry.state = "subscribed";
        entry.retries = 0;
        entry.error = null;
        // `ready` settles once, with the first outcome; every later one (after each reconnect)
        // reaches the application as this event, so it can tell each topic's fate.
        entry.settle?.resolve({ recovery: frame.recovery, recovered: frame.recovered });
        this.#emit("subscribed", {
          topic: frame.topic,
          recovery: frame.recovery,
          recovered: frame.recovered,
          resubscribed: entry.subscribedBefore,
        });
        entry.subscribedBefore = true;
        return;
      }
      case "published": {
        const entry = request ? this.topics.get(request.topic) : undefined;
        if (entry && frame.offset !== undefined) {
          entry.own.push({ offset: frame.offset, epoch: frame.epoch });
          if (entry.own.length > OWN_KEPT) entry.own.shift();
        }
        return request?.resolve?.(frame.offset !== undefined ? { offset: frame.offset, epoch: frame.epoch } : {});
      }
      case "dropped":
        return this.#emit("dropped", { count: frame.count });
      case "refreshed": {
        // The node's own word on the new expiry (Unix seconds, on its clock): kept relative to
        // ours, so that clocks that differ do not matter.
        this.expiresAt = frame.expires == null ? null : this.now() + (frame.expires * 1000 - Date.now());
        this.refreshRetried = false;
        this.#scheduleRefresh();
        return this.#emit("refreshed", { expires: frame.expires ?? null });
      }
      case "error": {
        const error = new PubSubError(frame.code, frame.message, { topic: request?.topic, id: frame.id });
        if (request?.kind === "publish") request.reject(error);
        if (request?.kind === "refresh") {
          this.#refreshRefused();
          return this.#emit("error", { code: frame.code, message: frame.message, id: frame.id, refresh: true });
        }
        const entry = request?.kind === "subscribe" ? this.topics.get(request.topic) : undefined;
        const retryable = RETRYABLE_CODES.has(frame.code);
        const detail = { code: frame.code, message: frame.message, topic: request?.topic, id: frame.id };
        if (entry && retryable) {
          // A condition that passes (the backplane down, the node full): the topic and its
          // position are kept, and asked for again with backoff.
          entry.state = "retrying";
          entry.error = error;
          const delay = this.nextDelay(++entry.retries);
          entry.retryTimer = this.timers.set(() => {
            entry.retryTimer = null;
            if (this.open && this.topics.get(request.topic) === entry) this.#sendSubscribe(request.topic, entry);
          }, delay);
          return this.#emit("error", { ...detail, retrying: true });
        }
        if (entry) {
          // Refused for good (not allowed, invalid, too many): not asked again on a reconnect,
          // and the application is told which topic.
          entry.state = "refused";
          entry.error = error;
          entry.settle?.reject(error);
          this.#emit("refused", { topic: request.topic, code: frame.code, message: frame.message });
        }
        return this.#emit("error", detail);
      }
      default:
        return; // unsubscribed, and frame types a later node may add
    }
  }

  #deliver(frame) {
    const entry = this.topics.get(frame.topic);
    if (!entry || entry.state === "refused") return; // unsubscribed meanwhile
    if (frame.offset !== undefined) {
      const last = entry.position;
      // Never twice: a position at or before the last one of the same epoch was delivered.
      if (last && last.epoch === frame.epoch && frame.offset <= last.offset) return;
      entry.position = { offset: frame.offset, epoch: frame.epoch };
      if (entry.own.length > 0) {
        const mine = entry.own.some((p) => p.epoch === frame.epoch && p.offset === frame.offset);
        // What is passed cannot come again: only positions after this one are kept.
        entry.own = entry.own.filter((p) => p.epoch === frame.epoch && p.offset > frame.offset);
        if (mine) return; // its own publication, recovered after a reconnect: resume past it
      }
    }
    const data = "data_base64" in frame ? base64Bytes(frame.data_base64) : frame.data;
    const meta = { topic: frame.topic, offset: frame.offset, epoch: frame.epoch };
    for (const handler of [...entry.handlers]) {
      try {
        handler(data, meta);
      } catch (e) {
        this.reportError(e);
      }
    }
  }
}

/**
 * A JWT's `exp` as a time on `Date.now()`'s clock (ms), read without verifying (the node
 * verifies); null for anything else (a shared token, a token without `exp`).
 */
export function tokenExpiry(token) {
  if (typeof token !== "string") return null;
  const payload = token.split(".")[1];
  if (!payload) return null;
  try {
    const json = atob(payload.replace(/-/g, "+").replace(/_/g, "/").padEnd(Math.ceil(payload.length / 4) * 4, "="));
    const exp = JSON.parse(json)?.exp;
    return Number.isFinite(exp) ? exp * 1000 : null;
  } catch {
    return null;
  }
}

function base64Bytes(text) {
  const binary = atob(text);
  const bytes = new Uint8Array(binary.length);
  for (let i = 0; i < binary.length; i++) bytes[i] = binary.charCodeAt(i);
  return bytes;
}
