// Drives headless chromium over the DevTools protocol (--remote-debugging-pipe:
// NUL-separated JSON on fds 3 and 4, no WebSocket needed) for
// http_dashboard.sh: loads gptd's dashboard comparing two jobs (JOB, which
// trains, and OTHER, an ended job of the sweep SWEEP_IDS) while JOB trains, reads the page's
// DOM and its charts' data twice, checks what the issue asks against
// `gptctl --json status` (both jobs' series drawn in every panel, their
// pixels on the loss canvas, the config differing where the specs differ),
// saves a screenshot, works the controls (hover, zoom, smoothing, log y, x
// as tokens), cancels JOB, checks its row again, and selects OTHER's sweep
// with its button. OTHER_LABEL is OTHER's name and overrides as shown.
// Last it shows job SAMPLED alone, whose samples panel must hold exactly
// what `gptctl --json samples SAMPLED` reads (hostile markup), as text.
//
//   node dashboard_cdp.js CHROMIUM URL JOB OTHER SWEEP_IDS GPTCTL NAME OTHER_LABEL PGID_FILE \
//     SCREENSHOT PROFILE SAMPLED
//
// Exits 0 when every check held; prints what failed otherwise. Chromium
// runs in a process group of its own whose id goes to PGID_FILE, so the
// test's trap can kill it even if this script is killed.
'use strict';
const { spawn, execFileSync } = require('child_process');
const fs = require('fs');

const [chromium, url, job, other, sweepIds, gptctl, name, otherLabel, pgidFile, shot, profile,
  sampled] = process.argv.slice(2);
const deadline = Date.now() + 40000;

function fail(msg) {
  console.error('dashboard_cdp: ' + msg);
  finish(1);
}

const chrome = spawn(chromium, [
  '--headless', '--no-sandbox', '--disable-gpu', '--remote-debugging-pipe',
  '--no-first-run', '--no-default-browser-check', '--disable-extensions',
  '--user-data-dir=' + profile, '--window-size=1280,1100', 'about:blank',
], { stdio: ['ignore', 'ignore', 'ignore', 'pipe', 'pipe'], detached: true });
fs.writeFileSync(pgidFile, String(chrome.pid));
const toChrome = chrome.stdio[3], fromChrome = chrome.stdio[4];

let finished = false;
function finish(rc) {
  if (finished) return;
  finished = true;
  try { process.kill(-chrome.pid, 'SIGKILL'); } catch (e) { /* gone already */ }
  process.exit(rc);
}
setTimeout(() => fail('timed out'), deadline - Date.now());
chrome.on('exit', (code, sig) => { if (!finished) fail('chromium exited (' + (code ?? sig) + ')'); });

let nextId = 1, buf = Buffer.alloc(0);
const pending = new Map();
fromChrome.on('data', (chunk) => {
  buf = Buffer.concat([buf, chunk]);
  let i;
  while ((i = buf.indexOf(0)) >= 0) {
    const msg = JSON.parse(buf.subarray(0, i).toString('utf8'));
    buf = buf.subarray(i + 1);
    if (msg.id && pending.has(msg.id)) {
      const { resolve, reject } = pending.get(msg.id);
      pending.delete(msg.id);
      if (msg.error) reject(new Error(JSON.stringify(msg.error)));
      else resolve(msg.result);
    }
  }
});

function send(method, params, sessionId) {
  const id = nextId++;
  const msg = { id, method, params: params || {} };
  if (sessionId) msg.sessionId = sessionId;
  toChrome.write(JSON.stringify(msg) + '\0');
  return new Promise((resolve, reject) => pending.set(id, { resolve, reject }));
}

const sleep = (ms) => new Promise((r) => setTimeout(r, ms));

function gptctlStatus() {
  const o = JSON.parse(execFileSync(gptctl, ['--json', 'status', job]).toString());
  return o.job;
}

// What the page shows: the job row (step, state, name), the legend, the
// config table and, for each panel, the non-null values of each series in
// the chart's data (dygraphs' table) plus, on the loss panel, the pixels
// drawn in each job's colour.
const READ = `(() => {
  const row = document.querySelector('#jobs tr[data-job="${job}"]');
  const cells = row ? row.querySelectorAll('td') : [];
  const charts = window.gptdCharts || {};
  const series = {};
  for (const p in charts) {
    const g = charts[p], labels = g.getLabels();
    for (let c = 1; c < labels.length; c++) {
      let n = 0;
      for (let r = 0; r < g.numRows(); r++) if (g.getValue(r, c) !== null) n++;
      series[p + ' ' + labels[c]] = n;
    }
  }
  const pixels = {};
  const g = charts.loss;
  if (g) {
    const cv = g.hidden_, ctx = cv.getContext('2d');
    const d = ctx.getImageData(0, 0, cv.width, cv.height).data;
    for (const l of g.getLabels().filter((x) => x.endsWith(' loss'))) {
      const id = l.split(' ')[0].slice(1), col = g.getOption('color', l);
      const want = [1, 3, 5].map((i) => parseInt(col.slice(i, i + 2), 16));
      let n = 0;
      for (let i = 0; i < d.length; i += 4)
        if (d[i + 3] > 200 && Math.abs(d[i] - want[0]) + Math.abs(d[i + 1] - want[1]) +
            Math.abs(d[i + 2] - want[2]) < 60) n++;
      pixels[id] = n;
    }
  }
  const differs = [...document.querySelectorAll('#config tr.differs td:first-child')]
    .map((t) => t.textContent);
  return {
    row: !!row,
    step: row && row.querySelector('td.step').dataset.step !== undefined
      ? Number(row.querySelector('td.step').dataset.step) : null,
    name: cells.length ? cells[1].textContent : null,
    state: cells.length ? cells[2].textContent : null,
    series,
    pixels,
    legend: [...document.querySelectorAll('#legend .key')].map((k) => k.textContent),
    configHead: [...document.querySelectorAll('#config thead th')].map((t) => t.textContent),
    differs,
    samples: [...document.querySelectorAll('#samples .sample')].map((d) =>
      [d.querySelector('pre.prompt').textContent, d.querySelector('pre.completion').textContent]),
    samplesEmpty: document.getElementById('samples-empty').hidden === false,
    imgs: document.querySelectorAll('img, script:not([src])').length,
    pwned: !!window.pwned,
    detailHidden: document.getElementById('detail').hidden,
    events: document.querySelectorAll('#events tbody tr').length,
    nodes: document.querySelectorAll('#nodes tbody tr').length,
    status: document.getElementById('status').textContent,
  };
})()`;

async function read(session) {
  // While the page loads the evaluation may find no document yet.
  const r = await send('Runtime.evaluate', { expression: READ, returnByValue: true }, session)
    .catch(() => null);
  const v = r && r.result && r.result.value;
  return v || { row: false, series: {}, step: null, legend: [] };
}

async function until(session, what, pred) {
  for (;;) {
    const v = await read(session);
    if (pred(v)) return v;
    if (Date.now() > deadline - 2000) fail('waited for ' + what + '; page: ' + JSON.stringify(v));
    await sleep(200);
  }
}

(async () => {
  const { targetId } = await send('Target.createTarget', { url: 'about:blank' });
  const { sessionId: s } = await send('Target.attachToTarget', { targetId, flatten: true });
  await send('Page.enable', {}, s);
  await send('Runtime.enable', {}, s);
  await send('Page.navigate', { url: url + '#jobs=' + job + ',' + other }, s);

  const n = (v, key) => v.series[key] || 0;
  const a = await until(s, 'the job row and both jobs\' loss series', (v) => v.row &&
    v.step !== null && n(v, 'loss #' + job + ' loss') > 0 && n(v, 'loss #' + other + ' loss') > 0);
  const before = gptctlStatus();
  // Two publish periods (the loop's 1 s tick) and two page polls later, the
  // page shows at least the step gptctl reported now.
  await sleep(3000);
  const b = await read(s);
  const after = gptctlStatus();
  console.log('first read ' + JSON.stringify(a));
  console.log('second read ' + JSON.stringify(b) + '; gptctl steps ' + before.step + '..' + after.step);
  // Every panel draws both jobs; the running one's series grow.
  for (const key of ['loss', 'lr', 'tokens_per_s', 'grad_norm', 'mfu', 'mem_bytes']) {
    for (const id of [job, other])
      if (!(n(b, key + ' #' + id + ' ' + key) > 0)) fail('panel ' + key + ' has no series of job ' + id);
  }
  for (const key of ['loss', 'lr']) {
    const k = key + ' #' + job + ' ' + key;
    if (!(n(b, k) > n(a, k))) fail('the ' + key + ' series of job ' + job + ' did not grow: ' +
      n(a, k) + ' -> ' + n(b, k));
  }
  if (n(b, 'loss #' + other + ' loss') !== n(a, 'loss #' + other + ' loss'))
    fail('the ended job\'s loss series changed');
  for (const id of [job, other])
    if (n(b, 'loss #' + id + ' val_loss') < 1) fail('no val loss point of job ' + id);
  for (const id of [job, other])
    if (!(b.pixels[id] > 20)) fail('job ' + id + '\'s loss curve is not drawn: ' + b.pixels[id] + ' pixels');
  if (!(b.step >= before.step && b.step <= after.step))
    fail('the job row shows step ' + b.step + ', gptctl status said ' + before.step + ' then ' + after.step);
  if (b.name !== name) fail('the name cell reads ' + JSON.stringify(b.name));
  // Names and overrides are text everywhere: the legend, the config's head.
  if (b.legend.join('\n') !== ['#' + job + ' ' + name, '#' + other + ' ' + otherLabel].join('\n'))
    fail('the legend reads ' + JSON.stringify(b.legend));
  if (b.configHead.join('\n') !== ['key', '#' + job + ' ' + name, '#' + other + ' ' + otherLabel].join('\n'))
    fail('the config table\'s head reads ' + JSON.stringify(b.configHead));
  for (const key of ['name', 'optimizer.lr', 'trainer.max_steps'])
    if (!b.differs.includes(key)) fail(key + ' is not marked as differing: ' + JSON.stringify(b.differs));
  if (b.differs.includes('model.n_embd')) fail('model.n_embd marked as differing');
  if (b.imgs !== 0 || b.pwned) fail('a job name was rendered as markup');
  if (b.detailHidden || b.events < 1 || b.nodes < 1) fail('no detail, events or nodes');

  // The whole page (the panels and the config run past the window).
  const lm = await send('Page.getLayoutMetrics', {}, s);
  const cs = lm.cssContentSize || lm.contentSize;
  const png = await send('Page.captureScreenshot', { format: 'png', captureBeyondViewport: true,
    clip: { x: 0, y: 0, width: cs.width, height: Math.min(cs.height, 5000), scale: 1 } }, s);
  fs.writeFileSync(shot, Buffer.from(png.data, 'base64'));

  // The controls, as a user works them: hover, drag to zoom, x as tokens,
  // smoothing, log y.
  const evalv = async (expr) => (await send('Runtime.evaluate',
    { expression: expr, returnByValue: true }, s)).result.value;
  const box = await evalv(`(() => { const p = document.querySelector('.panel[data-panel="loss"] .plot');
    p.scrollIntoView(); const r = p.getBoundingClientRect();
    return { x: r.left, y: r.top, w: r.width, h: r.height }; })()`);
  const mouse = (type, x, extra) => send('Input.dispatchMouseEvent', Object.assign(
    { type, x: box.x + x * box.w, y: box.y + box.h / 2 }, extra || {}), s);
  await mouse('mouseMoved', 0.5);
  await sleep(300);
  const hover = await evalv(`[...document.querySelectorAll('.panel[data-panel="loss"] .readout span')]
    .map((e) => e.textContent)`);
  console.log('hover readout ' + JSON.stringify(hover));
  if (!hover.some((t) => t.startsWith('#' + job + ' ' + name + ': ')))
    fail('hovering the loss chart shows no value of job ' + job + ': ' + JSON.stringify(hover));
  const range = 'gptdCharts[K].xAxisRange()';
  const full = await evalv(range.replace('K', "'loss'"));
  await mouse('mousePressed', 0.3, { button: 'left', clickCount: 1 });
  await mouse('mouseMoved', 0.45, { button: 'left', buttons: 1 });
  await mouse('mouseMoved', 0.6, { button: 'left', buttons: 1 });
  await mouse('mouseReleased', 0.6, { button: 'left', clickCount: 1 });
  await sleep(300);
  const zoomed = await evalv(`['loss', 'lr', 'mem_bytes'].map((k) => ${range.replace('K', 'k')})`);
  console.log('x range ' + JSON.stringify(full) + ', zoomed ' + JSON.stringify(zoomed));
  if (!(zoomed[0][1] - zoomed[0][0] < (full[1] - full[0]) / 2))
    fail('dragging did not zoom the loss chart');
  if (JSON.stringify(zoomed[1]) !== JSON.stringify(zoomed[0]) ||
      JSON.stringify(zoomed[2]) !== JSON.stringify(zoomed[0]))
    fail('the other panels did not follow the zoom');
  const set = (id, prop, v) => evalv(`(() => { const e = document.getElementById('${id}');
    e.${prop} = ${JSON.stringify(v)}; e.dispatchEvent(new Event('input')); })()`);
  // Total variation of job JOB's loss curve: smoothing lowers it.
  const tv = `(() => { const g = gptdCharts.loss, c = g.getLabels().indexOf('#${job} loss');
    let t = 0, p = null;
    for (let r = 0; r < g.numRows(); r++) { const v = g.getValue(r, c);
      if (v !== null) { if (p !== null) t += Math.abs(v - p); p = v; } }
    return t; })()`;
  const tv0 = await evalv(tv);
  await set('smooth', 'value', '0.9');
  const tv1 = await evalv(tv);
  await set('logy', 'checked', true);
  await set('xaxis', 'value', 'tokens');
  const tok = await evalv(`[gptdCharts.loss.xAxisExtremes()[1], gptdCharts.loss.getOption('logscale')]`);
  console.log('smoothing: variation ' + tv0 + ' -> ' + tv1 + '; x as tokens, log y: ' + JSON.stringify(tok));
  if (!(tv1 < tv0 / 2)) fail('smoothing 0.9 did not smooth the loss curve');
  // 96 tokens a step (micro_batch 16 x block_size 6).
  if (!(tok[0] > full[1] * 50)) fail('x as tokens still shows steps: ' + tok[0]);
  if (tok[1] !== true) fail('log y is not set on the loss chart');

  // Once the job has ended the row holds exactly gptctl's final step.
  execFileSync(gptctl, ['cancel', job]);
  let st;
  for (;;) {
    st = gptctlStatus();
    if (st.state === 'cancelled') break;
    if (Date.now() > deadline - 4000) fail('the job did not end: ' + st.state);
    await sleep(200);
  }
  const c = await until(s, 'the cancelled row', (v) => v.state === 'cancelled' && v.step === st.step);
  console.log('after cancel ' + JSON.stringify(c) + '; gptctl step ' + st.step);

  // The sweep's button in OTHER's row selects the whole sweep.
  await evalv(`document.querySelector('#jobs tr[data-job="${other}"] button.sweep').click()`);
  const want = sweepIds.split(',');
  const sw = await until(s, 'the sweep ' + sweepIds + ' selected', (v) =>
    v.legend.map((t) => t.split(' ')[0]).sort().join(',') === want.map((i) => '#' + i).sort().join(',') &&
    want.every((i) => n(v, 'loss #' + i + ' loss') > 0));
  console.log('sweep selected: legend ' + JSON.stringify(sw.legend));
  if (sw.imgs !== 0 || sw.pwned) fail('a job name was rendered as markup');

  // Job SAMPLED's kept sample: its prompt and text are markup, shown as
  // text; JOB (never sampled) said it had none.
  if (b.samples.length !== 0 || !b.samplesEmpty)
    fail('job ' + job + ' has no samples, the panel shows ' + JSON.stringify(b.samples));
  const kept = JSON.parse(execFileSync(gptctl, ['--json', 'samples', sampled]).toString()).samples;
  const wantS = kept.map((k) => [k.prompt, k.completion]);
  if (wantS.length !== 1 || !wantS[0][0].includes('<img')) fail('gptctl samples: ' + JSON.stringify(kept));
  await send('Page.navigate', { url: url + '#jobs=' + sampled }, s);
  const sa = await until(s, 'job ' + sampled + '\'s sample', (v) =>
    JSON.stringify(v.samples) === JSON.stringify(wantS));
  console.log('samples of job ' + sampled + ': ' + JSON.stringify(sa.samples));
  if (sa.imgs !== 0 || sa.pwned || sa.samplesEmpty) fail('a sample was rendered as markup');
  await send('Browser.close').catch(() => {});
  finish(0);
})().catch((e) => fail(String(e && e.stack || e)));
