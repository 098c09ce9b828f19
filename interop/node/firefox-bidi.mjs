// Headless Firefox ESR (Debian's `firefox-esr`) driven over WebDriver BiDi
// (https://w3c.github.io/webdriver-bidi/), with Node's `ws` as the protocol's WebSocket: a
// handful of commands (session.new, browsingContext.getTree/navigate/captureScreenshot,
// script.evaluate, session.end) are all the tests need. playwright-core 1.57's own BiDi Firefox
// (`firefox.launch({channel: "moz-firefox"})`) does not work against Firefox ESR 140: its launch
// sends `network.addDataCollector`, which 140 answers "unknown command".
//
// A fresh profile (interop/firefox-profile.sh) and HOME in a temporary directory; run as root,
// Firefox needs its sandboxes off. `close()` ends the session, stops Firefox by its PID and
// removes the directory.
import { spawn, execFileSync } from "node:child_process";
import { mkdtempSync, rmSync, writeFileSync } from "node:fs";
import { tmpdir } from "node:os";
import { dirname, join } from "node:path";
import { fileURLToPath } from "node:url";
import WebSocket from "ws";

const here = dirname(fileURLToPath(import.meta.url));

/** Starts Firefox (at most `timeoutMs` until its BiDi endpoint answers) and opens a session. */
export async function launchFirefox({ executable = process.env.FIREFOX || "firefox-esr", timeoutMs = 30000 } = {}) {
  const dir = mkdtempSync(join(tmpdir(), "sockeye-firefox-"));
  const profile = join(dir, "profile");
  execFileSync("bash", [join(here, "..", "firefox-profile.sh"), profile]);
  const env = {
    ...process.env,
    HOME: dir,
    MOZ_DISABLE_CONTENT_SANDBOX: "1",
    MOZ_DISABLE_GMP_SANDBOX: "1",
    MOZ_DISABLE_RDD_SANDBOX: "1",
    MOZ_DISABLE_SOCKET_PROCESS_SANDBOX: "1",
  };
  // Port 0: Firefox picks a free one and prints it ("WebDriver BiDi listening on ws://…").
  const child = spawn(executable, ["--headless", "--no-remote", "--profile", profile, "--remote-debugging-port", "0", "about:blank"], {
    env,
    stdio: ["ignore", "ignore", "pipe"],
  });
  let stderr = "";
  const stop = () => {
    try {
      child.kill("SIGKILL");
    } catch {}
    rmSync(dir, { recursive: true, force: true });
  };
  try {
    const endpoint = await new Promise((resolve, reject) => {
      const timer = setTimeout(() => reject(new Error(`no BiDi endpoint within ${timeoutMs} ms: ${stderr.slice(-300)}`)), timeoutMs);
      child.stderr.on("data", (chunk) => {
        stderr += chunk;
        const m = /WebDriver BiDi listening on (ws:\/\/\S+)/.exec(stderr);
        if (m) {
          clearTimeout(timer);
          resolve(m[1]);
        }
      });
      child.on("exit", (code, signal) => {
        clearTimeout(timer);
        reject(new Error(`firefox exited (${code ?? signal}) before its BiDi endpoint: ${stderr.slice(-300)}`));
      });
      child.on("error", (e) => {
        clearTimeout(timer);
        reject(e);
      });
    });
    const session = await Session.open(`${endpoint}/session`, timeoutMs);
    const { capabilities } = await session.send("session.new", { capabilities: {} });
    const { contexts } = await session.send("browsingContext.getTree", {});
    return new Firefox(session, contexts[0].context, capabilities.browserVersion, child, stop);
  } catch (e) {
    stop();
    throw e;
  }
}

/** One BiDi connection: commands by id, each answered by a result or an error. */
class Session {
  static open(url, timeoutMs) {
    return new Promise((resolve, reject) => {
      const ws = new WebSocket(url, { handshakeTimeout: timeoutMs });
      ws.once("open", () => resolve(new Session(ws, timeoutMs)));
      ws.once("error", reject);
    });
  }

  constructor(ws, timeoutMs) {
    this.ws = ws;
    this.timeoutMs = timeoutMs;
    this.nextId = 1;
    this.pending = new Map();
    ws.on("message", (text) => {
      const msg = JSON.parse(text);
      const request = msg.id !== undefined && this.pending.get(msg.id);
      if (!request) return; // events: none subscribed to
      this.pending.delete(msg.id);
      clearTimeout(request.timer);
      if (msg.type === "error") request.reject(new Error(`${request.method}: ${msg.error}: ${msg.message}`));
      else request.resolve(msg.result);
    });
    ws.on("close", () => {
      for (const [, request] of this.pending) request.reject(new Error(`${request.method}: the BiDi connection closed`));
      this.pending.clear();
    });
  }

  send(method, params) {
    return new Promise((resolve, reject) => {
      const id = this.nextId++;
      const timer = setTimeout(() => {
        this.pending.delete(id);
        reject(new Error(`${method}: no answer within ${this.timeoutMs} ms`));
      }, this.timeoutMs);
      this.pending.set(id, { method, resolve, reject, timer });
      this.ws.send(JSON.stringify({ id, method, params }));
    });
  }
}

class Firefox {
  constructor(session, context, version, child, stop) {
    Object.assign(this, { session, context, version, child, stop });
  }

  /** Loads `url` in the tab and waits for its load event. */
  async navigate(url) {
    await this.session.send("browsingContext.navigate", { context: this.context, url, wait: "complete" });
  }

  /** Evaluates `expression` in the page (awaiting a promise) and returns its value through JSON. */
  async evaluate(expression) {
    const r = await this.session.send("script.evaluate", {
      expression: `(async () => JSON.stringify(await (${expression})))()`,
      target: { context: this.context },
      awaitPromise: true,
      resultOwnership: "none",
    });
    if (r.type === "exception") throw new Error(`script.evaluate: ${r.exceptionDetails.text}`);
    return r.result.type === "string" ? JSON.parse(r.result.value) : undefined;
  }

  /** Writes a PNG of the whole document (not only the viewport) to `path`. */
  async screenshot(path) {
    const { data } = await this.session.send("browsingContext.captureScreenshot", { context: this.context, origin: "document" });
    writeFileSync(path, Buffer.from(data, "base64"));
  }

  /** Ends the session, stops Firefox (by its PID) and removes its profile. */
  async close() {
    try {
      await Promise.race([this.session.send("session.end", {}), new Promise((r) => setTimeout(r, 2000))]);
    } catch {}
    this.session.ws.terminate();
    const exited = new Promise((r) => this.child.once("exit", r));
    if (this.child.exitCode === null && this.child.signalCode === null) {
      this.child.kill("SIGTERM");
      await Promise.race([exited, new Promise((r) => setTimeout(r, 5000))]);
    }
    this.stop();
  }
}
