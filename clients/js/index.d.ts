// Types of the Sockeye pub/sub client (src/index.js). The protocol: docs/pubsub-protocol.md.

/** Where a message stands in its topic: save it to resume from after a reconnect. */
export interface Position {
  offset: number;
  epoch: string;
}

export interface Options {
  /** A WebSocket constructor; default `globalThis.WebSocket` (browsers, Node ≥ 22). */
  WebSocket?: new (url: string) => WebSocket;
  /** A token for the node's auth check, sent as a query parameter; a function is called before each connection. */
  token?: string | (() => string | Promise<string>);
  /** The query parameter's name. Default "token". */
  tokenParam?: string;
  /** The first reconnect's wait, doubled after each failure, with equal jitter. Default 250 ms. */
  initialDelayMs?: number;
  /** The longest wait between reconnects. Default 30,000 ms. */
  maxDelayMs?: number;
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

export const DEFAULTS: Readonly<Required<Pick<Options, "initialDelayMs" | "maxDelayMs" | "maxAttempts" | "maxQueuedPublishes" | "tokenParam">>>;

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
  | "too_many_subscriptions" | "unavailable" | "node_full"
  | "queue_full" | "closed" | "gave_up" | "outcome_unknown" | "token" | "connect";

/** Where a topic stands: asked (or waiting for a connection), answered, refused for a condition that passes (asked again with backoff), refused for good. */
export type TopicState = "subscribing" | "subscribed" | "retrying" | "refused";

/** The refusal codes retried with backoff (docs/pubsub-protocol.md, "Errors"). */
export const RETRYABLE_CODES: ReadonlySet<string>;

export class PubSubError extends Error {
  constructor(code: ErrorCode | string, message: string, extra?: { topic?: string; id?: number });
  readonly code: ErrorCode | string;
  readonly topic?: string;
  readonly id?: number;
}

export interface Events {
  connected: { url: string };
  disconnected: { url?: string; code?: number; reason?: string; willRetry: boolean };
  gap: { topic: string; resume: Position | null };
  /** `retrying`: a retryable refusal of a subscription, asked again with backoff. */
  error: { code: ErrorCode | string; message: string; topic?: string; id?: number; retrying?: boolean };
  /** A subscription refused for good (a permanent code): not asked for again. */
  refused: { topic: string; code: ErrorCode | string; message: string };
  dropped: { count: number };
  gaveup: { attempts: number; message: string };
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
