// Types of the Sockeye pub/sub client (src/index.js). The protocol: docs/pubsub-protocol.md.

/** Where a message stands in its topic: save it to resume from after a reconnect. */
export interface Position {
  offset: number;
  epoch: string;
}

export interface Options {
  /** A WebSocket constructor; default `globalThis.WebSocket` (browsers, Node ≥ 22). */
  WebSocket?: new (url: string) => WebSocket;
  /**
   * A token for the node's auth check, sent as a query parameter; a function is called before
   * each connection, and also before the token expires: when the token is a JWT with `exp`
   * (read without verifying) or the node answered a refresh with `expires`, the client asks the
   * function for a fresh token at `REFRESH.share` (10 %) of its lifetime before it expires (at
   * least 5 s, at most 60 s before, never earlier than halfway) and sends it on the open socket
   * (`{"type":"refresh"}`): the socket, its subscriptions and positions stay. A refused refresh
   * is tried once more at half the time left; then the node closes with 4002 and the client
   * reconnects with a fresh token, resuming every topic. A string is never refreshed.
   */
  token?: string | (() => string | Promise<string>);
  /** The query parameter's name. Default "token". */
  tokenParam?: string;
  /** The first reconnect's wait, doubled after each failure, with equal jitter. Default 250 ms. */
  initialDelayMs?: number;
  /** The longest wait between reconnects. Default 30,000 ms. */
  maxDelayMs?: number;
  /** How long a connection attempt may take to open before it is given up and the next node
   * tried (a node that accepts and never answers; a WebSocket that reports a failed handshake
   * with an error and no close event). Default 10,000 ms. */
  connectTimeoutMs?: number;
  /** Failed connection attempts in a row before giving up ("gaveup"). Default Infinity. */
  maxAttempts?: number;
  /** Publications waiting for a connection at most; more reject with "queue_full". Default 1,000. */
  maxQueuedPublishes?: number;
  /** For tests: the timer and randomness the backoff uses. */
  setTimeout?: (fn: () => void, ms: number) => unknown;
  clearTimeout?: (id: unknown) => void;
  random?: () => number;
  now?: () => number;
  /** Where an exception thrown by a listener or message handler goes. Default: rethrown asynchronously (an uncaught error), never into the client's state. */
  onListenerError?: (error: unknown) => void;
}

export const DEFAULTS: Readonly<Required<Pick<Options, "initialDelayMs" | "maxDelayMs" | "maxAttempts" | "maxQueuedPublishes" | "tokenParam" | "connectTimeoutMs">>>;

export interface MessageMeta {
  topic: string;
  /** Absent on a node without history. */
  offset?: number;
  epoch?: string;
}

export interface Subscribed {
  recovery: "live" | "recovered" | "lost";
  recovered: number;
}

export interface Subscription {
  readonly topic: string;
  /** Settles with the node's first answer; rejects with a PubSubError if the node refused the topic. */
  readonly ready: Promise<Subscribed>;
  /** The last position received on the topic, or the resume of the last gap. */
  readonly position: Position | null;
  /** See PubSubClient.state. */
  readonly state: TopicState | null;
  unsubscribe(): void;
}

export type ErrorCode =
  | "bad_json" | "unknown_type" | "bad_request" | "invalid_topic" | "too_large" | "not_allowed"
  | "too_many_subscriptions" | "unavailable" | "node_full" | "rate_limited"
  | "queue_full" | "closed" | "gave_up" | "outcome_unknown" | "token" | "connect" | RefusalKind;

/** Where a topic stands: asked (or waiting for a connection), answered, refused for a condition that passes (asked again with backoff), refused for good. */
export type TopicState = "subscribing" | "subscribed" | "retrying" | "refused";

/** When a token given as a function is refreshed before it expires (see `Options.token`). */
export const REFRESH: Readonly<{ share: number; minMs: number; maxMs: number }>;

/** A JWT's `exp` in ms (on `Date.now()`'s clock), read without verifying; null for a token that is not a JWT with `exp`. */
export function tokenExpiry(token: unknown): number | null;

/** The refusal codes retried with backoff (docs/pubsub-protocol.md, "Errors"). */
export const RETRYABLE_CODES: ReadonlySet<string>;

/** Why a node refused the socket itself, as its close code says (docs/pubsub-protocol.md, "Refusals"). */
export type RefusalKind =
  | "unauthorized" | "token_expired" | "not_allowed" | "origin_not_allowed" | "too_many_connections" | "node_full";

/**
 * The close codes of a refused socket: its kind, and what the client does: "retry" with backoff,
 * "token" only with a fresh one from `options.token` as a function (else it stops), "stop".
 */
export const REFUSALS: Readonly<Record<number, Readonly<{ kind: RefusalKind; then: "retry" | "token" | "stop" }>>>;

export class PubSubError extends Error {
  constructor(code: ErrorCode | string, message: string, extra?: { topic?: string; id?: number });
  readonly code: ErrorCode | string;
  readonly topic?: string;
  readonly id?: number;
}

export interface Events {
  connected: { url: string };
  disconnected: { url?: string; code?: number; reason?: string; willRetry: boolean };
  /** The node refused the socket (a bad or expired token, not allowed, another origin, over a limit): why, and whether the client tries again. */
  rejected: { url: string; kind: RefusalKind; code: number; reason: string; willRetry: boolean };
  /** A topic's outcome, after its first subscribe and after every reconnect (`resubscribed`). */
  subscribed: { topic: string; recovery: Subscribed["recovery"]; recovered: number; resubscribed: boolean };
  gap: { topic: string; resume: Position | null };
  /** `retrying`: a retryable refusal of a subscription, asked again with backoff; `refresh`: a refused token refresh. */
  error: { code: ErrorCode | string; message: string; topic?: string; id?: number; retrying?: boolean; refresh?: boolean };
  /** The token was renewed on the open socket: when it now expires (Unix seconds; null: never). */
  refreshed: { expires: number | null };
  /** A subscription refused for good (a permanent code): not asked for again. */
  refused: { topic: string; code: ErrorCode | string; message: string };
  dropped: { count: number };
  /** The client stopped: too many failed attempts (`maxAttempts`), or a refusal no retry can cure (`code`: its kind). */
  gaveup: { attempts: number; message: string; code?: RefusalKind };
}

export class PubSubClient {
  constructor(urls: string | string[], options?: Options);
  on<E extends keyof Events>(event: E, listener: (detail: Events[E]) => void): () => void;
  off<E extends keyof Events>(event: E, listener: (detail: Events[E]) => void): void;
  subscribe(
    topic: string,
    onMessage: (data: unknown, meta: MessageMeta) => void,
    options?: { since?: Position },
  ): Subscription;
  publish(topic: string, data: unknown): Promise<Position | Record<string, never>>;
  /** Where a topic stands, or null when not subscribed. */
  state(topic: string): TopicState | null;
  positions(): Record<string, Position>;
  close(): void;
  nextDelay(failures: number): number;
}

export function connect(urls: string | string[], options?: Options): PubSubClient;
