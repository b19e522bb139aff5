// Drives headless chromium over the DevTools protocol (--remote-debugging-pipe:
// NUL-separated JSON on fds 3 and 4, no WebSocket needed) for
// http_dashboard.sh: loads gptd's dashboard with a job selected while the
// job trains, reads the page's DOM twice, checks what the issue asks
// against `gptctl --json status`, cancels the job, checks the row again,
// and saves a screenshot.
//
//   node dashboard_cdp.js CHROMIUM URL JOB GPTCTL NAME PGID_FILE SCREENSHOT PROFILE
//
// Exits 0 when every check held; prints what failed otherwise. Chromium
// runs in a process group of its own whose id goes to PGID_FILE, so the
// test's trap can kill it even if this script is killed.
'use strict';
const { spawn, execFileSync } = require('child_process');
const fs = require('fs');

const [chromium, url, job, gptctl, name, pgidFile, shot, profile] = process.argv.slice(2);
const deadline = Date.now() + 25000;

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

// What the page shows: the job row (step, state, name) and the chart.
const READ = `(() => {
  const row = document.querySelector('#jobs tr[data-job="${job}"]');
  const chart = document.getElementById('chart');
  const cells = row ? row.querySelectorAll('td') : [];
  return {
    row: !!row,
    step: row && row.querySelector('td.step').dataset.step !== undefined
      ? Number(row.querySelector('td.step').dataset.step) : null,
    name: cells.length ? cells[1].textContent : null,
    state: cells.length ? cells[2].textContent : null,
    loss: Number(chart.dataset.loss || 0),
    val: Number(chart.dataset.val || 0),
    lr: Number(chart.dataset.lr || 0),
    lastStep: chart.dataset.lastStep ? Number(chart.dataset.lastStep) : null,
    polyline: document.querySelectorAll('#series-loss').length,
    imgs: document.querySelectorAll('img, script:not([src])').length,
    pwned: !!window.pwned,
    detailHidden: document.getElementById('detail').hidden,
    events: document.querySelectorAll('#events tbody tr').length,
    nodes: document.querySelectorAll('#nodes tbody tr').length,
  };
})()`;

async function read(session) {
  // While the page loads the evaluation may find no document yet.
  const r = await send('Runtime.evaluate', { expression: READ, returnByValue: true }, session)
    .catch(() => null);
  const v = r && r.result && r.result.value;
  return v || { row: false, loss: 0, step: null };
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
  await send('Page.navigate', { url: url + '#job=' + job }, s);

  const a = await until(s, 'the job row and a chart', (v) => v.row && v.loss > 0 && v.step !== null);
  const before = gptctlStatus();
  // Two publish periods (the loop's 1 s tick) and two page polls later, the
  // page shows at least the step gptctl reported now.
  await sleep(3000);
  const b = await read(s);
  const after = gptctlStatus();
  console.log('first read ' + JSON.stringify(a));
  console.log('second read ' + JSON.stringify(b) + '; gptctl steps ' + before.step + '..' + after.step);
  if (!(b.loss > a.loss)) fail('the loss series did not grow: ' + a.loss + ' -> ' + b.loss);
  if (!(b.lr > a.lr)) fail('the learning-rate series did not grow: ' + a.lr + ' -> ' + b.lr);
  if (!(b.lastStep > a.lastStep)) fail('the chart did not advance: ' + a.lastStep + ' -> ' + b.lastStep);
  if (b.val < 1) fail('no val loss point on the chart');
  if (b.polyline !== 1) fail('no loss polyline');
  if (!(b.step >= before.step && b.step <= after.step))
    fail('the job row shows step ' + b.step + ', gptctl status said ' + before.step + ' then ' + after.step);
  if (b.name !== name) fail('the name cell reads ' + JSON.stringify(b.name));
  if (b.imgs !== 0 || b.pwned) fail('the job name was rendered as markup');
  if (b.detailHidden || b.events < 1 || b.nodes < 1) fail('no detail, events or nodes');

  const png = await send('Page.captureScreenshot', { format: 'png' }, s);
  fs.writeFileSync(shot, Buffer.from(png.data, 'base64'));

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
  await send('Browser.close').catch(() => {});
  finish(0);
})().catch((e) => fail(String(e && e.stack || e)));
