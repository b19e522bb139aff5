// Compares gptd's token ids with js-tiktoken's "gpt2" encoding and with
// gpt-3-encoder, file by file: each FILE is read as UTF-8 and encoded by
// both references; OUTDIR/BASENAME.ids holds gptd's ids (a JSON array).
// Exits 1 at the first file whose ids differ, printing the first differing
// position, the ids around it and the text of the tokens there.
// usage: node compare.js NPM_DIR OUTDIR [--special] FILE...
'use strict';
const fs = require('fs');
const path = require('path');
const [npmArg, outdir, ...rest] = process.argv.slice(2);
const npm = path.resolve(npmArg);
const special = rest[0] === '--special';
const files = special ? rest.slice(1) : rest;
const { getEncoding } = require(path.join(npm, 'node_modules', 'js-tiktoken'));
const g3 = require(path.join(npm, 'node_modules', 'gpt-3-encoder'));
const tik = getEncoding('gpt2');

function firstDiff(a, b) {
  const n = Math.min(a.length, b.length);
  for (let i = 0; i < n; i++) if (a[i] !== b[i]) return i;
  return a.length === b.length ? -1 : n;
}

let failed = 0;
for (const f of files) {
  const text = fs.readFileSync(f, 'utf8');
  const ours = JSON.parse(fs.readFileSync(path.join(outdir, path.basename(f) + '.ids'), 'utf8'));
  const refs = [['js-tiktoken gpt2', special ? tik.encode(text, 'all') : tik.encode(text)]];
  if (!special) refs.push(['gpt-3-encoder', g3.encode(text)]);
  for (const [name, ids] of refs) {
    const at = firstDiff(ours, ids);
    if (at < 0) {
      console.log(`ok ${path.basename(f)}: ${ids.length} tokens equal to ${name}'s`);
      continue;
    }
    failed = 1;
    const lo = Math.max(0, at - 3);
    const show = (v) => JSON.stringify(v.slice(lo, at + 4));
    const txt = (v) => JSON.stringify(v.slice(at, at + 4).map((t) => tik.decode([t])));
    console.log(`FAIL ${path.basename(f)}: first difference with ${name} at token ${at} ` +
                `(gptd ${ours.length} tokens, ${name} ${ids.length})`);
    console.log(`  gptd   [${lo}..]: ${show(ours)} ${txt(ours)}`);
    console.log(`  ${name} [${lo}..]: ${show(ids)} ${txt(ids)}`);
  }
}
process.exit(failed);
