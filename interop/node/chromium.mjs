// Headless Chromium (Debian's, driven by playwright-core) loads a page served by Sockeye's axum
// integration; the page echoes messages through a WebSocket to the same server and writes PASS or
// FAIL into #result. Usage: node chromium.mjs URL [--ignore-certificate-errors]
// (the flag is passed to Chromium: for an https:// page with the run's own test certificate).
import { chromium } from "playwright-core";

const url = process.argv[2];
const extra = process.argv.slice(3).filter((a) => a === "--ignore-certificate-errors");
const browser = await chromium.launch({
  executablePath: process.env.CHROMIUM || "/usr/bin/chromium",
  args: ["--no-sandbox", "--disable-gpu", "--no-first-run", "--disable-background-networking",
    "--disable-component-update", "--disable-sync", "--disable-quic", ...extra],
});
let exitCode = 1;
try {
  const page = await browser.newPage();
  await page.goto(url);
  await page.waitForFunction(() => document.getElementById("result")?.textContent !== "RUNNING", null, { timeout: 30000 });
  const result = await page.textContent("#result");
  console.log(`chromium ${browser.version()}: ${result}`);
  exitCode = result.startsWith("PASS") ? 0 : 1;
} catch (e) {
  console.error(`FAIL: ${e.message}`);
} finally {
  await browser.close();
}
process.exit(exitCode);
