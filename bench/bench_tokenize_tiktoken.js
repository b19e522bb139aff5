// js-tiktoken's "gpt2" encoding speed on one text file, for bench_tokenize:
// the best of `rounds` encodes of the whole text (after one warm-up) as one
// JSON line. usage: node bench_tokenize_tiktoken.js NPM_DIR TEXT [ROUNDS]
'use strict';
const fs = require('fs');
const path = require('path');
const [npm, file, roundsArg] = process.argv.slice(2);
const { getEncoding } = require(path.join(path.resolve(npm), 'node_modules', 'js-tiktoken'));
const enc = getEncoding('gpt2');
const text = fs.readFileSync(file, 'utf8');
const bytes = Buffer.byteLength(text, 'utf8');
let n = enc.encode(text).length; // warm-up (JIT)
let best = Infinity;
for (let r = 0; r < Number(roundsArg || 3); r++) {
  const t0 = process.hrtime.bigint();
  n = enc.encode(text).length;
  const s = Number(process.hrtime.bigint() - t0) / 1e9;
  best = Math.min(best, s);
}
console.log(JSON.stringify({ bench: 'tokenize_js_tiktoken', bytes, tokens: n, seconds: best,
                             mb_s: bytes / 1e6 / best }));
