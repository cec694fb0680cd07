// Run by `npm ci` here (the postinstall script of package.json): inflates
// the headless Chromium that @sparticuz/chromium carries brotli-compressed
// into ./chromium, where the passkey tests look for it when there is no
// chromium on PATH. Its one library outside glibc, libnss3, the README's
// test command installs with apt.
import fs from "node:fs";
import path from "node:path";
import { pipeline } from "node:stream/promises";
import { fileURLToPath } from "node:url";
import zlib from "node:zlib";

const here = path.dirname(fileURLToPath(import.meta.url));
const src = path.join(here, "node_modules/@sparticuz/chromium/bin/chromium.br");
const dst = path.join(here, "chromium");

// The package's Chromium is built for x86-64 Linux alone.
if (process.platform !== "linux" || process.arch !== "x64") {
  console.error(`@sparticuz/chromium has a Chromium for x86-64 Linux only, not ${process.platform}/${process.arch}: install your distribution's chromium, so that it is on PATH`);
  process.exit(1);
}
// Written aside and renamed: a test never finds half a browser.
const tmp = dst + ".part";
await pipeline(fs.createReadStream(src), zlib.createBrotliDecompress(), fs.createWriteStream(tmp, { mode: 0o755 }));
fs.renameSync(tmp, dst);
console.log(`headless Chromium for the passkey tests: ${dst}`);
