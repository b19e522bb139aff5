// gptd dashboard: polls gptd's read-only JSON documents under /api/ once a
// second and draws them. Every string from gptd (job names, messages,
// paths, node names: all user- or peer-controlled) goes into the page as
// text (textContent / createTextNode), never as markup; the server's
// Content-Security-Policy allows no inline script either way.
'use strict';

const POLL_MS = 1000;
const SVG = 'http://www.w3.org/2000/svg';

const state = {
  token: sessionStorage.getItem('gptd-token') || '',
  job: null, // the selected job id (from #job=ID)
  series: [], // the selected job's metric records, by step
  last: -1, // the last step read
  timer: null,
};

function $(id) { return document.getElementById(id); }

function el(tag, text, cls) {
  const e = document.createElement(tag);
  if (text !== undefined && text !== null) e.textContent = String(text);
  if (cls) e.className = cls;
  return e;
}

function fmtNum(v, digits) {
  return typeof v === 'number' && isFinite(v) ? v.toFixed(digits) : '-';
}

function fmtRate(v) {
  if (typeof v !== 'number' || !(v >= 0)) return '-';
  if (v >= 1e6) return (v / 1e6).toFixed(1) + 'M';
  if (v >= 1e3) return (v / 1e3).toFixed(1) + 'k';
  return v.toFixed(0);
}

function fmtDuration(s) {
  if (typeof s !== 'number' || !(s >= 0) || s > 1e9) return '-';
  const t = Math.round(s);
  const h = Math.floor(t / 3600), m = Math.floor(t / 60) % 60, sec = t % 60;
  const two = (x) => String(x).padStart(2, '0');
  return h ? h + ':' + two(m) + ':' + two(sec) : m + ':' + two(sec);
}

function fmtTime(unix) {
  if (typeof unix !== 'number') return '-';
  return new Date(unix * 1000).toLocaleTimeString();
}

function fmtBytes(n) {
  if (typeof n !== 'number') return '-';
  const u = ['B', 'KiB', 'MiB', 'GiB', 'TiB'];
  let i = 0;
  while (n >= 1024 && i < u.length - 1) { n /= 1024; i++; }
  return (i ? n.toFixed(1) : String(n)) + ' ' + u[i];
}

class AuthError extends Error {}

async function api(path) {
  const headers = {};
  if (state.token) headers['Authorization'] = 'Bearer ' + state.token;
  const r = await fetch(path, { headers, cache: 'no-store' });
  if (r.status === 401) throw new AuthError('a bearer token is required');
  if (!r.ok) throw new Error(path + ': HTTP ' + r.status);
  return r.json();
}

function selectedFromHash() {
  const m = /^#job=([1-9][0-9]{0,17})$/.exec(location.hash);
  return m ? m[1] : null;
}

function fillBody(table, rows) {
  const body = table.tBodies[0];
  const fresh = document.createElement('tbody');
  for (const r of rows) fresh.appendChild(r);
  table.replaceChild(fresh, body);
}

// A sweep's job is told apart by its overrides: " lr=1e-3 n_embd=48"
// (each key's last part); "" for a job without.
function overridesLabel(over) {
  if (!over || typeof over !== 'object') return '';
  return Object.keys(over).map((k) => ' ' + k.split('.').pop() + '=' + String(over[k])).join('');
}

function renderJobs(doc) {
  $('node').textContent = (doc.node || '') + (doc.role ? ' (' + doc.role + ')' : '');
  const rows = [];
  for (const j of doc.jobs || []) {
    const tr = el('tr');
    tr.dataset.job = String(j.id);
    if (String(j.id) === state.job) tr.className = 'selected';
    tr.appendChild(el('td', j.id));
    tr.appendChild(el('td', j.name + overridesLabel(j.overrides)));
    tr.appendChild(el('td', j.state, 'state-' + String(j.state).replace(/[^a-z]/g, '')));
    const step = el('td', null, 'num step');
    if (typeof j.step === 'number') {
      step.dataset.step = String(j.step);
      step.textContent = j.step + (j.max_steps ? '/' + j.max_steps : '');
    } else {
      step.textContent = '-';
    }
    tr.appendChild(step);
    tr.appendChild(el('td', fmtNum(j.loss, 4), 'num loss'));
    tr.appendChild(el('td', fmtNum(j.val_loss, 4), 'num'));
    tr.appendChild(el('td', fmtRate(j.tokens_per_s), 'num'));
    tr.appendChild(el('td', j.state === 'running' ? fmtDuration(j.eta_s) : '-', 'num eta'));
    tr.appendChild(el('td', j.restarts, 'num'));
    tr.addEventListener('click', () => { location.hash = 'job=' + j.id; });
    rows.push(tr);
    if (String(j.id) === state.job) {
      $('d-name').textContent = j.name;
    }
  }
  fillBody($('jobs'), rows);
  $('jobs-empty').hidden = rows.length > 0;
}

function gpuText(gpus) {
  if (!Array.isArray(gpus) || !gpus.length) return '-';
  return gpus.map((g) => {
    const util = typeof g.util_ratio === 'number' ? Math.round(g.util_ratio * 100) + '%' : '-';
    const mem = typeof g.mem_used_bytes === 'number' && typeof g.mem_total_bytes === 'number'
      ? fmtBytes(g.mem_used_bytes) + '/' + fmtBytes(g.mem_total_bytes) : '-';
    return (g.index !== undefined ? g.index : '?') + ': ' + util + ' ' + mem;
  }).join(', ');
}

function renderNodes(doc) {
  const rows = [];
  for (const n of doc.nodes || []) {
    const tr = el('tr');
    tr.appendChild(el('td', n.node + (n.role === 'coordinator' ? ' *' : '')));
    tr.appendChild(el('td', n.state, 'state-' + String(n.state).replace(/[^a-z]/g, '')));
    tr.appendChild(el('td', typeof n.heartbeat_age_s === 'number'
      ? n.heartbeat_age_s.toFixed(1) + 's ago' : '-', 'num'));
    tr.appendChild(el('td', n.workers, 'num'));
    tr.appendChild(el('td', n.ranks || '-'));
    tr.appendChild(el('td', n.devices));
    tr.appendChild(el('td', gpuText(n.gpus)));
    tr.appendChild(el('td', n.version));
    rows.push(tr);
  }
  fillBody($('nodes'), rows);
}

function svg(tag, attrs) {
  const e = document.createElementNS(SVG, tag);
  for (const k in attrs) e.setAttribute(k, String(attrs[k]));
  return e;
}

// Draws loss and val loss on the left axis, the learning rate on the
// right one, steps along x.
function drawChart() {
  const c = $('chart');
  while (c.firstChild) c.removeChild(c.firstChild);
  const W = 800, H = 300, L = 50, R = 60, T = 10, B = 25;
  const pts = state.series;
  const loss = pts.filter((p) => typeof p.loss === 'number');
  const val = pts.filter((p) => typeof p.val_loss === 'number');
  const lr = pts.filter((p) => typeof p.lr === 'number');
  c.dataset.loss = String(loss.length);
  c.dataset.val = String(val.length);
  c.dataset.lr = String(lr.length);
  c.dataset.lastStep = pts.length ? String(pts[pts.length - 1].step) : '';
  $('d-points').textContent = pts.length + ' points';
  if (!pts.length) return;
  const x0 = pts[0].step, x1 = Math.max(pts[pts.length - 1].step, x0 + 1);
  const ys = loss.map((p) => p.loss).concat(val.map((p) => p.val_loss));
  let y0 = Math.min(...ys), y1 = Math.max(...ys);
  if (!(y1 > y0)) { y0 -= 0.5; y1 += 0.5; }
  const lrMax = Math.max(1e-12, ...lr.map((p) => p.lr));
  const X = (s) => L + (s - x0) / (x1 - x0) * (W - L - R);
  const Y = (v) => T + (1 - (v - y0) / (y1 - y0)) * (H - T - B);
  const YR = (v) => T + (1 - v / lrMax) * (H - T - B);
  for (let i = 0; i <= 4; i++) {
    const v = y0 + (y1 - y0) * i / 4, y = Y(v);
    c.appendChild(svg('line', { x1: L, x2: W - R, y1: y, y2: y, class: 'grid' }));
    const t = svg('text', { x: L - 4, y: y + 4, 'text-anchor': 'end' });
    t.textContent = v.toFixed(2);
    c.appendChild(t);
    const tr = svg('text', { x: W - R + 4, y: YR(lrMax * i / 4) + 4 });
    tr.textContent = (lrMax * i / 4).toExponential(1);
    c.appendChild(tr);
  }
  c.appendChild(svg('line', { x1: L, x2: L, y1: T, y2: H - B, class: 'axis' }));
  c.appendChild(svg('line', { x1: L, x2: W - R, y1: H - B, y2: H - B, class: 'axis' }));
  for (const s of [x0, Math.round((x0 + x1) / 2), x1]) {
    const t = svg('text', { x: X(s), y: H - 8, 'text-anchor': 'middle' });
    t.textContent = 'step ' + s;
    c.appendChild(t);
  }
  const line = (arr, key, yf, cls, id) => {
    const p = svg('polyline', {
      id, class: cls,
      points: arr.map((q) => X(q.step).toFixed(1) + ',' + yf(q[key]).toFixed(1)).join(' '),
    });
    p.dataset.n = String(arr.length);
    c.appendChild(p);
  };
  line(lr, 'lr', YR, 'lr', 'series-lr');
  line(loss, 'loss', Y, 'loss', 'series-loss');
  line(val, 'val_loss', Y, 'val', 'series-val_loss');
  if (val.length <= 60) {
    for (const q of val) c.appendChild(svg('circle', { cx: X(q.step), cy: Y(q.val_loss), r: 3, class: 'val' }));
  }
}

function renderEvents(doc) {
  const rows = [];
  for (const e of (doc.events || []).slice().reverse()) {
    const tr = el('tr');
    tr.appendChild(el('td', fmtTime(e.time)));
    tr.appendChild(el('td', e.step, 'num'));
    tr.appendChild(el('td', e.kind));
    tr.appendChild(el('td', e.message, 'msg'));
    rows.push(tr);
  }
  fillBody($('events'), rows);
}

function renderSnapshots(doc) {
  const rows = [];
  for (const s of doc.snapshots || []) {
    const tr = el('tr');
    tr.appendChild(el('td', s.step, 'num'));
    tr.appendChild(el('td', s.node));
    tr.appendChild(el('td', fmtBytes(s.size), 'num'));
    tr.appendChild(el('td', fmtTime(s.created)));
    tr.appendChild(el('td', s.path, 'msg'));
    rows.push(tr);
  }
  fillBody($('snapshots'), rows);
}

// Reads the selected job's metrics since the last step read, page by page.
async function pollMetrics(job) {
  for (let pages = 0; pages < 20; pages++) {
    const doc = await api('/api/jobs/' + job + '/metrics?since=' + (state.last + 1));
    if (job !== state.job) return;
    for (const m of doc.metrics || []) {
      // A step read again (an eval record replaces its step's record).
      if (state.series.length && state.series[state.series.length - 1].step === m.step)
        state.series[state.series.length - 1] = m;
      else
        state.series.push(m);
    }
    state.last = Math.max(state.last, doc.last);
    if (!doc.more) break;
  }
}

let polling = false, pollAgain = false;

// One poll at a time: a hash change or a token during a poll asks for
// another right after it.
async function poll() {
  if (polling) { pollAgain = true; return; }
  polling = true;
  clearTimeout(state.timer);
  try {
    await pollOnce();
  } finally {
    polling = false;
    state.timer = setTimeout(poll, pollAgain ? 0 : POLL_MS);
    pollAgain = false;
  }
}

async function pollOnce() {
  const job = selectedFromHash();
  if (job !== state.job) {
    state.job = job;
    state.series = [];
    state.last = -1;
  }
  try {
    const [jobs, nodes] = await Promise.all([api('/api/jobs'), api('/api/nodes')]);
    renderJobs(jobs);
    renderNodes(nodes);
    $('detail').hidden = !job;
    if (job) {
      $('d-id').textContent = job;
      await pollMetrics(job);
      drawChart();
      const [ev, sn] = await Promise.all([api('/api/jobs/' + job + '/events'),
        api('/api/jobs/' + job + '/snapshots')]);
      renderEvents(ev);
      renderSnapshots(sn);
    }
    $('login').hidden = true;
    $('status').textContent = 'updated ' + new Date().toLocaleTimeString();
  } catch (e) {
    if (e instanceof AuthError) $('login').hidden = false;
    $('status').textContent = String(e.message || e);
  }
}

$('login').addEventListener('submit', (ev) => {
  ev.preventDefault();
  state.token = $('token').value.trim();
  sessionStorage.setItem('gptd-token', state.token);
  poll();
});
window.addEventListener('hashchange', () => poll());
poll();
