// The package as a user gets it: `npm pack` of this folder, installed into a fresh project from
// the tarball, imported by its name from an ES module, its TypeScript types where `exports`
// sends a type checker. Offline: a local tarball without dependencies needs no registry, and
// npm's cache is a temporary folder, removed with the rest.
import { test } from "node:test";
import assert from "node:assert/strict";
import { execFileSync } from "node:child_process";
import { existsSync, mkdirSync, mkdtempSync, readFileSync, rmSync, writeFileSync } from "node:fs";
import { tmpdir } from "node:os";
import { dirname, join } from "node:path";
import { fileURLToPath } from "node:url";

const here = dirname(fileURLToPath(import.meta.url));
const packageDir = dirname(here);
const manifest = JSON.parse(readFileSync(join(packageDir, "package.json"), "utf8"));

test("npm pack yields a package a fresh project installs and imports by its name", async (t) => {
  const tmp = mkdtempSync(join(tmpdir(), "sockeye-npm-"));
  t.after(() => rmSync(tmp, { recursive: true, force: true }));
  const env = {
    ...process.env,
    npm_config_cache: join(tmp, "npm-cache"),
    npm_config_update_notifier: "false",
    npm_config_audit: "false",
    npm_config_fund: "false",
    npm_config_loglevel: "error",
  };
  const npm = (args, cwd) => execFileSync("npm", args, { cwd, env, encoding: "utf8" });

  // The tarball holds the module, its types, the README and the licences; nothing else.
  const [packed] = JSON.parse(npm(["pack", packageDir, "--json", "--offline", "--pack-destination", tmp], tmp));
  assert.equal(packed.name, "@sockeye/pubsub-client");
  const files = packed.files.map((f) => f.path).sort();
  assert.deepEqual(files, ["LICENSE-APACHE", "LICENSE-MIT", "README.md", "index.d.ts", "package.json", "src/index.js"]);
  const tarball = join(tmp, packed.filename);
  assert.ok(existsSync(tarball), `${tarball} was written`);

  // A fresh project, as `npm init -y` makes it, installs the tarball without the network.
  const app = join(tmp, "app");
  mkdirSync(app);
  npm(["init", "-y"], app);
  npm(["install", "--offline", tarball], app);
  const appManifest = JSON.parse(readFileSync(join(app, "package.json"), "utf8"));
  assert.match(appManifest.dependencies["@sockeye/pubsub-client"], /^file:/);

  // Imported by its name from an ES module: every export the source has, and a working client.
  writeFileSync(
    join(app, "main.mjs"),
    `import * as pkg from "@sockeye/pubsub-client";
import { connect, PubSubClient, PubSubError, DEFAULTS } from "@sockeye/pubsub-client";
class Silent { constructor() {} send() {} close() {} }
const client = connect(["ws://127.0.0.1:9/"], { WebSocket: Silent, maxAttempts: 1 });
console.log(JSON.stringify({
  exports: Object.keys(pkg).sort(),
  client: client instanceof PubSubClient,
  error: new PubSubError("closed", "x") instanceof Error,
  defaults: typeof DEFAULTS.maxDelayMs,
}));
client.close();
`,
  );
  const out = JSON.parse(execFileSync(process.execPath, ["main.mjs"], { cwd: app, env, encoding: "utf8" }));
  // Every export of the source, whatever it grows to (the installed package must not lose one).
  const source = Object.keys(await import("../src/index.js")).sort();
  assert.ok(source.includes("connect") && source.includes("PubSubClient"), source.join());
  assert.deepEqual(out, {
    exports: source,
    client: true,
    error: true,
    defaults: "number",
  });

  // The types: where `exports` sends a type checker (the `types` condition, first), a file that
  // is in the installed package and declares every runtime export.
  const installed = join(app, "node_modules", "@sockeye", "pubsub-client");
  const installedManifest = JSON.parse(readFileSync(join(installed, "package.json"), "utf8"));
  assert.deepEqual(installedManifest, manifest);
  const root = installedManifest.exports["."];
  assert.equal(Object.keys(root)[0], "types", "`types` comes first in the conditions");
  const types = readFileSync(join(installed, root.types), "utf8");
  assert.equal(installedManifest.types, root.types);
  for (const name of out.exports) {
    assert.match(types, new RegExp(`export (declare )?(function|class|const|interface|type) ${name}\\b`), name);
  }

  // Only the entry point is importable: `exports` keeps the package's files private.
  writeFileSync(join(app, "deep.mjs"), `await import("@sockeye/pubsub-client/src/index.js");\n`);
  assert.throws(
    () => execFileSync(process.execPath, ["deep.mjs"], { cwd: app, env, stdio: "pipe" }),
    /ERR_PACKAGE_PATH_NOT_EXPORTED/,
  );
});
