// gptd dashboard: polls gptd's read-only JSON documents under /api/ once a
// second and draws them. Every string from gptd (job names, overrides,
// config values, messages, paths, node names: all user- or peer-controlled)
// goes into the page as text (textContent / createTextNode), never as
// markup; the server's Content-Security-Policy allows no inline script
// either way. The charts are dygraphs (Debian's libjs-dygraphs, embedded
// in gptd as /lib/dygraph.min.js); its series labels are only "#ID kind"
// (ids are digits) and its own legend is off, so no job name reaches the
// library's HTML: the readouts above each chart are built here as text.
'use strict';

const POLL_MS = 1000;
const MAX_JOBS = 12; // jobs overlaid at once (the colours below)
const COLORS = ['#2563eb', '#dc2626', '#059669', '#d97706', '#7c3aed', '#db2777',
  '#0891b2', '#65a30d', '#9333ea', '#ea580c', '#0d9488', '#4f46e5'];

// The panels: what each draws from a metric record and how its values read.
const PANELS = [
  { id: 'loss', keys: ['loss', 'val_loss'], fmt: (v) => v.toPrecision(4) },
  { id: 'lr', keys: ['lr'], fmt: (v) => v.toExponential(2) },
  { id: 'tokens_per_s', keys: ['tokens_per_s'], fmt: (v) => fmtRate(v) },
  { id: 'grad_norm', keys: ['grad_norm'], fmt: (v) => v.toPrecision(4) },
  { id: 'mfu', keys: ['mfu'], fmt: (v) => (v * 100).toFixed(1) + '%', pct: true },
  { id: 'mem_bytes', keys: ['mem_bytes'], fmt: (v) => fmtBytes(v), bytes: true },
];

const state = {
  token: sessionStorage.getItem('gptd-token') || '',
  sel: [], // the selected job ids (strings), from #jobs=ID,ID or #job=ID
  runs: new Map(), // id -> {series, last, config}
  jobs: [], // the last /api/jobs list
  charts: {}, // panel id -> Dygraph
  timer: null,
};
window.gptdCharts = state.charts; // for the browser test: the drawn data

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

// #jobs=1,2,3 (several) or #job=1 (one; the old form).
function selectedFromHash() {
  const m = /^#jobs?=([1-9][0-9]{0,17}(,[1-9][0-9]{0,17})*)$/.exec(location.hash);
  if (!m) return [];
  return [...new Set(m[1].split(','))].slice(0, MAX_JOBS);
}

function setSelection(ids) {
  location.hash = ids.length ? 'jobs=' + ids.join(',') : '';
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

function jobById(id) {
  return state.jobs.find((j) => String(j.id) === id);
}

// "#5 name lr=1e-3": how a selected job reads in legends and readouts.
function jobLabel(id) {
  const j = jobById(id);
  return '#' + id + (j ? ' ' + j.name + overridesLabel(j.overrides) : '');
}

function colorOf(id) {
  const i = state.sel.indexOf(id);
  return COLORS[(i < 0 ? 0 : i) % COLORS.length];
}

function renderJobs(doc) {
  $('node').textContent = (doc.node || '') + (doc.role ? ' (' + doc.role + ')' : '');
  state.jobs = doc.jobs || [];
  const rows = [];
  for (const j of state.jobs) {
    const id = String(j.id);
    const tr = el('tr');
    tr.dataset.job = id;
    if (state.sel.includes(id)) tr.className = 'selected';
    const idCell = el('td');
    const box = el('input');
    box.type = 'checkbox';
    box.className = 'pick';
    box.checked = state.sel.includes(id);
    box.title = 'overlay this job';
    box.addEventListener('click', (ev) => {
      ev.stopPropagation();
      const ids = state.sel.filter((x) => x !== id);
      if (box.checked) ids.push(id);
      setSelection(ids.slice(0, MAX_JOBS));
    });
    idCell.appendChild(box);
    idCell.appendChild(document.createTextNode(' ' + id));
    tr.appendChild(idCell);
    tr.appendChild(el('td', j.name + overridesLabel(j.overrides), 'name'));
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
    const sw = el('td');
    if (j.sweep) {
      const b = el('button', 'select sweep ' + j.sweep, 'sweep');
      b.addEventListener('click', (ev) => {
        ev.stopPropagation();
        setSelection(state.jobs.filter((x) => x.sweep === j.sweep).map((x) => String(x.id))
          .slice(0, MAX_JOBS));
      });
      sw.appendChild(b);
    }
    tr.appendChild(sw);
    tr.addEventListener('click', () => setSelection([id]));
    rows.push(tr);
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

// --- the comparison charts

function xOf(run, m) {
  const mode = $('xaxis').value;
  if (mode === 'tokens') return typeof m.tokens === 'number' ? m.tokens : null;
  if (mode === 'time') {
    const t0 = run.series.length ? run.series[0].time : null;
    return typeof m.time === 'number' && typeof t0 === 'number' ? m.time - t0 : null;
  }
  return m.step;
}

// TensorBoard's smoothing: an exponential moving average with weight w,
// debiased so the first points do not start at zero.
function smooth(points, w) {
  if (!(w > 0)) return points;
  let acc = 0, n = 0;
  return points.map(([x, y]) => {
    acc = acc * w + (1 - w) * y;
    n++;
    return [x, acc / (1 - Math.pow(w, n))];
  });
}

// One panel's table for dygraphs: [x, series...] rows merged on x, null
// where a series has no point there, and the labels "#ID key".
function panelData(panel) {
  const w = Number($('smooth').value);
  const labels = ['x'];
  const cols = [];
  for (const id of state.sel) {
    const run = state.runs.get(id);
    for (const key of panel.keys) {
      labels.push('#' + id + ' ' + key);
      const pts = [];
      for (const m of run ? run.series : []) {
        const x = xOf(run, m), y = m[key];
        if (typeof x === 'number' && typeof y === 'number' && isFinite(y)) pts.push([x, y]);
      }
      // Val loss is evaluated now and then: drawn as it is, not smoothed.
      cols.push(key === 'val_loss' ? pts : smooth(pts, w));
    }
  }
  const byX = new Map();
  cols.forEach((pts, c) => {
    for (const [x, y] of pts) {
      let row = byX.get(x);
      if (!row) {
        row = new Array(cols.length + 1).fill(null);
        row[0] = x;
        byX.set(x, row);
      }
      row[c + 1] = y;
    }
  });
  const rows = [...byX.values()].sort((a, b) => a[0] - b[0]);
  return { labels, rows, counts: cols.map((p) => p.length) };
}

function xFormatter(v) {
  const mode = $('xaxis').value;
  if (mode === 'time') return fmtDuration(v);
  if (mode === 'tokens') return fmtRate(v);
  return String(Math.round(v));
}

function readout(panel, div, x, points) {
  while (div.firstChild) div.removeChild(div.firstChild);
  div.appendChild(el('span', $('xaxis').selectedOptions[0].textContent + ' ' + xFormatter(x), 'rx'));
  for (const p of points) {
    if (typeof p.yval !== 'number' || !isFinite(p.yval)) continue;
    const [tag, key] = p.name.split(' ');
    const id = tag.slice(1);
    const s = el('span', jobLabel(id) + (key === 'val_loss' ? ' val' : '') + ': ' + panel.fmt(p.yval));
    s.style.color = colorOf(id);
    div.appendChild(s);
  }
}

function syncZoom(from, lo, hi) {
  for (const id in state.charts) {
    const g = state.charts[id];
    if (g !== from) g.updateOptions({ dateWindow: [lo, hi] });
  }
}

function drawPanel(panel, node) {
  const data = panelData(panel);
  const plot = node.querySelector('.plot');
  const counts = {};
  data.labels.slice(1).forEach((l, i) => { counts[l] = data.counts[i]; });
  node.dataset.counts = JSON.stringify(counts);
  const series = {};
  for (const l of data.labels.slice(1)) {
    const id = l.split(' ')[0].slice(1);
    const val = l.endsWith('val_loss');
    series[l] = { color: colorOf(id), strokePattern: val ? [6, 3] : null, drawPoints: val,
      pointSize: val ? 2.5 : 1 };
  }
  const opts = {
    labels: data.labels,
    series,
    legend: 'never',
    connectSeparatedPoints: true,
    logscale: $('logy').checked,
    strokeWidth: 1.5,
    gridLineColor: '#eceff3',
    axisLabelFontSize: 11,
    xRangePad: 4,
    axes: {
      x: { axisLabelFormatter: xFormatter, valueFormatter: xFormatter },
      // Byte ticks at powers of two (Ki, Mi), others 1k/1M.
      y: { axisLabelWidth: 60, labelsKMB: !panel.bytes && !panel.pct, labelsKMG2: !!panel.bytes },
    },
    highlightCallback: (ev, x, points) => readout(panel, node.querySelector('.readout'), x, points),
    unhighlightCallback: () => {
      const r = node.querySelector('.readout');
      while (r.firstChild) r.removeChild(r.firstChild);
    },
    zoomCallback: (lo, hi) => syncZoom(state.charts[panel.id], lo, hi),
  };
  if (panel.pct) opts.axes.y.axisLabelFormatter = (v) => (v * 100).toFixed(0) + '%';
  if (!data.rows.length) {
    if (state.charts[panel.id]) { state.charts[panel.id].destroy(); delete state.charts[panel.id]; }
    plot.textContent = 'no ' + panel.id + ' records yet';
    return;
  }
  const g = state.charts[panel.id];
  if (g && g.getLabels().join('|') === data.labels.join('|')) {
    g.updateOptions(Object.assign({ file: data.rows }, opts));
    return;
  }
  if (g) g.destroy();
  plot.textContent = '';
  state.charts[panel.id] = new Dygraph(plot, data.rows, opts);
}

function drawCharts() {
  let n = 0;
  for (const id of state.sel) n += (state.runs.get(id) || { series: [] }).series.length;
  $('d-points').textContent = n + ' points';
  if (typeof Dygraph === 'undefined') {
    $('nolib').hidden = false;
    return;
  }
  for (const panel of PANELS)
    drawPanel(panel, document.querySelector('.panel[data-panel="' + panel.id + '"]'));
}

function renderLegend() {
  const div = $('legend');
  while (div.firstChild) div.removeChild(div.firstChild);
  for (const id of state.sel) {
    const s = el('span', jobLabel(id), 'key');
    s.dataset.job = id;
    const sw = el('span', null, 'swatch');
    sw.style.background = colorOf(id);
    s.insertBefore(sw, s.firstChild);
    div.appendChild(s);
  }
  $('d-count').textContent = state.sel.length === 1 ? 'job ' + state.sel[0]
    : state.sel.length + ' jobs';
}

// --- the configuration: one column per selected job

function flatten(obj, prefix, out) {
  for (const k of Object.keys(obj || {})) {
    const v = obj[k], key = prefix ? prefix + '.' + k : k;
    if (v && typeof v === 'object' && !Array.isArray(v)) flatten(v, key, out);
    else out[key] = JSON.stringify(v);
  }
  return out;
}

function renderConfig() {
  const table = $('config');
  const head = el('tr');
  head.appendChild(el('th', 'key'));
  const flat = state.sel.map((id) => {
    const cfg = (state.runs.get(id) || {}).config;
    const th = el('th', jobLabel(id));
    th.style.color = colorOf(id);
    head.appendChild(th);
    return cfg ? flatten(cfg.spec, '', {}) : {};
  });
  table.tHead.replaceChild(head, table.tHead.rows[0]);
  const rows = [];
  const over = el('tr', null, 'over');
  over.appendChild(el('td', 'overrides'));
  for (const id of state.sel) {
    const cfg = (state.runs.get(id) || {}).config;
    const o = cfg && cfg.overrides ? Object.keys(cfg.overrides)
      .map((k) => k + '=' + String(cfg.overrides[k])).join(' ') : '';
    over.appendChild(el('td', o || '-', 'msg'));
  }
  rows.push(over);
  // The keys whose values differ between the jobs first, then the rest.
  const keys = [...new Set(flat.flatMap((f) => Object.keys(f)))].sort();
  const same = [];
  for (const k of keys) {
    const vals = flat.map((f) => (k in f ? f[k] : '-'));
    const differs = vals.some((v) => v !== vals[0]);
    const tr = el('tr', null, differs ? 'differs' : '');
    tr.appendChild(el('td', k));
    for (const v of vals) tr.appendChild(el('td', v, 'msg'));
    (differs ? rows : same).push(tr);
  }
  rows.push(...same);
  fillBody(table, rows);
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

// One kept sample: what it came from and its settings, then the prompt and
// what the model wrote, each a <pre> filled as text.
function sampleNode(s) {
  const div = el('div', null, 'sample');
  div.dataset.sample = String(s.id);
  const snap = s.snapshot_id ? 'snapshot ' + s.snapshot_id + ', ' : '';
  div.appendChild(el('div', fmtTime(s.time) + ': ' + snap + 'step ' + s.step + ', tokens ' + s.tokens +
    ', temperature ' + s.temperature + ', top-k ' + s.top_k + ', seed ' + s.seed + ', uid ' + s.uid +
    (s.truncated ? ' (text cut at 16 KiB)' : ''), 'meta muted'));
  const prompt = s.prompt_ids ? 'token ids ' + s.prompt_ids : s.prompt;
  div.appendChild(el('pre', prompt, 'prompt'));
  div.appendChild(el('pre', s.completion, 'completion'));
  return div;
}

function renderSamples(doc) {
  const div = $('samples');
  while (div.firstChild) div.removeChild(div.firstChild);
  for (const s of doc.samples || []) div.appendChild(sampleNode(s));
  $('samples-empty').hidden = div.childNodes.length > 0;
}

// Reads a job's metrics since the last step read, page by page.
async function pollMetrics(id, run) {
  for (let pages = 0; pages < 20; pages++) {
    const doc = await api('/api/jobs/' + id + '/metrics?since=' + (run.last + 1));
    for (const m of doc.metrics || []) {
      // A step read again (an eval record replaces its step's record).
      if (run.series.length && run.series[run.series.length - 1].step === m.step)
        run.series[run.series.length - 1] = m;
      else
        run.series.push(m);
    }
    run.last = Math.max(run.last, doc.last);
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
  const sel = selectedFromHash();
  state.sel = sel;
  for (const id of [...state.runs.keys()]) if (!sel.includes(id)) state.runs.delete(id);
  for (const id of sel) if (!state.runs.has(id)) state.runs.set(id, { series: [], last: -1 });
  try {
    const [jobs, nodes] = await Promise.all([api('/api/jobs'), api('/api/nodes')]);
    renderJobs(jobs);
    renderNodes(nodes);
    $('detail').hidden = !sel.length;
    if (sel.length) {
      await Promise.all(sel.map(async (id) => {
        const run = state.runs.get(id);
        await pollMetrics(id, run);
        // The spec changes only on a resume: read again while it runs.
        const j = jobById(id);
        if (!run.config || (j && j.state !== run.configState)) {
          run.config = await api('/api/jobs/' + id + '/config');
          run.configState = j ? j.state : null;
        }
      }));
      if (sel.join(',') !== selectedFromHash().join(',')) return; // changed meanwhile
      renderLegend();
      drawCharts();
      renderConfig();
      const first = sel[0], fj = jobById(first);
      $('d-id').textContent = first;
      $('d-name').textContent = fj ? fj.name : '';
      const [ev, sn, sa] = await Promise.all([api('/api/jobs/' + first + '/events'),
        api('/api/jobs/' + first + '/snapshots'), api('/api/jobs/' + first + '/samples')]);
      renderEvents(ev);
      renderSnapshots(sn);
      renderSamples(sa);
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
for (const c of ['xaxis', 'smooth', 'logy']) {
  $(c).addEventListener('input', () => {
    $('smooth-v').textContent = $('smooth').value;
    // A new x quantity: the old zoom window means nothing there.
    if (c === 'xaxis') for (const id in state.charts) state.charts[id].updateOptions({ dateWindow: null });
    drawCharts();
  });
}
window.addEventListener('hashchange', () => poll());
poll();
