/*
 * dispatcher/ui/app.js - the /ui/ run viewer: a runs list and a live run view
 * on top of the public API (GET /v1/runs, GET /v1/runs/{id}, its SSE events,
 * cancel and replies).  Plain JS, no build step, no outside resources.
 *
 * Safety: every piece of agent or run text reaches the page through
 * textContent or createTextNode, never innerHTML; the markdown renderer builds
 * DOM nodes and only keeps http, https and mailto links.  The API token lives
 * in sessionStorage and travels only in the Authorization header (fetch is
 * used for SSE because EventSource cannot send headers).
 */
'use strict';

const TOKEN_KEY = 'runnel.token';
const TERMINAL = new Set(['succeeded', 'failed', 'cancelled', 'lost']);
const LEVELS = ['debug', 'info', 'warn', 'error'];
const MAX_LOG_ROWS = 5000;   // a chatty run keeps the page responsive

const app = {
  config: { auth: false, dev_stub: null },
  view: null,       // the current view's stop function
};

/* ---------- small DOM helpers ---------- */

function el(tag, attrs, ...kids) {
  const n = document.createElement(tag);
  if (attrs) {
    for (const [k, v] of Object.entries(attrs)) {
      if (v === undefined || v === null || v === false) continue;
      if (k === 'class') n.className = v;
      else if (k === 'text') n.textContent = v;
      else if (k.startsWith('on')) n.addEventListener(k.slice(2), v);
      else n.setAttribute(k, v === true ? '' : String(v));
    }
  }
  for (const kid of kids) {
    if (kid === null || kid === undefined || kid === false) continue;
    n.append(typeof kid === 'string' ? document.createTextNode(kid) : kid);
  }
  return n;
}

function clear(n) {
  while (n.firstChild) n.removeChild(n.firstChild);
  return n;
}

function setConn(text) {
  document.getElementById('conn').textContent = text;
}

function fmtTime(ms) {
  if (!ms) return '—';
  return new Date(Number(ms)).toLocaleTimeString();
}

function fmtDur(ms) {
  if (ms === null || ms === undefined || ms < 0 || Number.isNaN(ms)) return '—';
  if (ms < 1000) return `${Math.round(ms)} ms`;
  const s = ms / 1000;
  if (s < 60) return `${s.toFixed(1)} s`;
  const m = Math.floor(s / 60);
  if (m < 60) return `${m} min ${Math.floor(s % 60)} s`;
  return `${Math.floor(m / 60)} h ${m % 60} min`;
}

function fmtAge(ms) {
  if (!ms) return '—';
  const s = Math.max(0, (Date.now() - Number(ms)) / 1000);
  if (s < 60) return `${Math.floor(s)} s ago`;
  if (s < 3600) return `${Math.floor(s / 60)} min ago`;
  if (s < 86400) return `${Math.floor(s / 3600)} h ago`;
  return `${Math.floor(s / 86400)} d ago`;
}

function runDuration(st) {
  if (!st || !st.started_at) return null;
  return (st.ended_at ? Number(st.ended_at) : Date.now()) - Number(st.started_at);
}

function badge(status) {
  return el('span', { class: `badge ${status || ''}`, text: status || 'unknown' });
}

function pretty(v) {
  try { return JSON.stringify(v, null, 2); } catch (e) { return String(v); }
}

/* ---------- API ---------- */

class AuthError extends Error {}

/* Where sessionStorage is refused, the token lives in this page only. */
let memToken = '';

function token() {
  try { return sessionStorage.getItem(TOKEN_KEY) || memToken; } catch (e) { return memToken; }
}

function headers(extra) {
  const h = Object.assign({}, extra || {});
  const t = token();
  if (t) h.Authorization = `Bearer ${t}`;
  return h;
}

async function api(path, opts) {
  const o = Object.assign({ cache: 'no-store' }, opts || {});
  o.headers = headers(o.headers);
  const r = await fetch(path, o);
  if (r.status === 401) throw new AuthError('unauthorized');
  let body = null;
  const text = await r.text();
  if (text) {
    try { body = JSON.parse(text); } catch (e) { body = null; }
  }
  if (!r.ok) {
    const msg = body && body.error ? `${body.error.code}: ${body.error.message}` : `HTTP ${r.status}`;
    const err = new Error(msg);
    err.status = r.status;
    throw err;
  }
  return body;
}

function runPath(id, rest) {
  return `/v1/runs/${encodeURIComponent(id)}${rest || ''}`;
}

/* ---------- safe markdown ---------- */

function safeHref(url) {
  const u = url.trim();
  if (/^(https?:\/\/|mailto:)/i.test(u)) {
    try {
      const p = new URL(u);
      if (p.protocol === 'http:' || p.protocol === 'https:' || p.protocol === 'mailto:') return p.href;
    } catch (e) { return null; }
  }
  return null;
}

/* Inline spans: `code`, **bold**, *em* / _em_, [text](url).  Anything else is text. */
function inline(text, into) {
  const re = /(`+)([\s\S]*?)\1|\*\*([^*]+)\*\*|\*([^*\s][^*]*)\*|\[([^\]]*)\]\(([^)\s]*)\)/g;
  let last = 0;
  let m;
  while ((m = re.exec(text)) !== null) {
    if (m.index > last) into.append(document.createTextNode(text.slice(last, m.index)));
    if (m[1]) {
      into.append(el('code', { text: m[2] }));
    } else if (m[3] !== undefined) {
      inline(m[3], into.appendChild(el('strong')));
    } else if (m[4] !== undefined) {
      inline(m[4], into.appendChild(el('em')));
    } else {
      const href = safeHref(m[6]);
      if (href) {
        const a = el('a', { href, rel: 'noopener noreferrer nofollow', target: '_blank' });
        inline(m[5], a);
        into.append(a);
      } else {
        into.append(document.createTextNode(m[0]));
      }
    }
    last = re.lastIndex;
  }
  if (last < text.length) into.append(document.createTextNode(text.slice(last)));
}

function markdown(src) {
  const root = el('div', { class: 'result' });
  const lines = String(src).replace(/\r\n?/g, '\n').split('\n');
  let i = 0;
  while (i < lines.length) {
    const line = lines[i];
    if (/^\s*```/.test(line)) {
      const body = [];
      i++;
      while (i < lines.length && !/^\s*```/.test(lines[i])) body.push(lines[i++]);
      i++;
      root.append(el('pre', null, el('code', { text: body.join('\n') })));
      continue;
    }
    const h = /^(#{1,6})\s+(.*)$/.exec(line);
    if (h) {
      const n = el(`h${Math.min(6, h[1].length + 2)}`);
      inline(h[2], n);
      root.append(n);
      i++;
      continue;
    }
    if (/^\s*([-*+]|\d+[.)])\s+/.test(line)) {
      const ordered = /^\s*\d/.test(line);
      const list = el(ordered ? 'ol' : 'ul');
      while (i < lines.length && /^\s*([-*+]|\d+[.)])\s+/.test(lines[i])) {
        const li = el('li');
        inline(lines[i].replace(/^\s*([-*+]|\d+[.)])\s+/, ''), li);
        list.append(li);
        i++;
      }
      root.append(list);
      continue;
    }
    if (/^\s*$/.test(line)) { i++; continue; }
    const para = [];
    while (i < lines.length && !/^\s*$/.test(lines[i]) && !/^\s*```/.test(lines[i]) &&
           !/^#{1,6}\s/.test(lines[i]) && !/^\s*([-*+]|\d+[.)])\s+/.test(lines[i])) {
      para.push(lines[i++]);
    }
    const p = el('p');
    para.forEach((t, k) => {
      if (k > 0) p.append(el('br'));
      inline(t, p);
    });
    root.append(p);
  }
  return root;
}

/* ---------- SSE over fetch ---------- */

function sidCmp(a, b) {
  const [am, as] = a.split('-').map(Number);
  const [bm, bs] = b.split('-').map(Number);
  return am !== bm ? am - bm : as - bs;
}

/*
 * Follows a run's events from lastId on.  onEvent(id, line) gets each entry
 * once; after a dropped connection it reconnects with Last-Event-ID.  Ends
 * (onEnd) after the terminal line.  Returns a stop function.
 */
function follow(runId, onEvent, onEnd, onState) {
  let lastId = '';
  let stopped = false;
  let ctl = null;
  let delay = 250;
  let done = false;

  async function once() {
    ctl = new AbortController();
    const h = headers({ Accept: 'text/event-stream' });
    if (lastId) h['Last-Event-ID'] = lastId;
    const r = await fetch(runPath(runId, '/events'), { headers: h, signal: ctl.signal, cache: 'no-store' });
    if (r.status === 401) throw new AuthError('unauthorized');
    if (!r.ok || !r.body) {
      const err = new Error(`events: HTTP ${r.status}`);
      err.status = r.status;
      throw err;
    }
    onState('live');
    delay = 250;
    const reader = r.body.getReader();
    const dec = new TextDecoder();
    let buf = '';
    let ev = { id: '', data: [] };
    for (;;) {
      const { value, done: eof } = await reader.read();
      if (eof) break;
      buf += dec.decode(value, { stream: true });
      let nl;
      while ((nl = buf.search(/\r\n|\r|\n/)) >= 0) {
        const line = buf.slice(0, nl);
        buf = buf.slice(nl + (buf[nl] === '\r' && buf[nl + 1] === '\n' ? 2 : 1));
        if (line === '') {
          if (ev.data.length) dispatch(ev);
          ev = { id: '', data: [] };
          continue;
        }
        if (line[0] === ':') continue;
        const c = line.indexOf(':');
        const field = c < 0 ? line : line.slice(0, c);
        let val = c < 0 ? '' : line.slice(c + 1);
        if (val[0] === ' ') val = val.slice(1);
        if (field === 'id') ev.id = val;
        else if (field === 'data') ev.data.push(val);
      }
    }
  }

  function dispatch(ev) {
    /* A replay after a reconnect never shows an entry twice. */
    if (ev.id && lastId && sidCmp(ev.id, lastId) <= 0) return;
    let line;
    try { line = JSON.parse(ev.data.join('\n')); } catch (e) { return; }
    if (ev.id) lastId = ev.id;
    onEvent(ev.id, line);
    if (line && (line.type === 'result' || line.type === 'error')) done = true;
  }

  (async () => {
    while (!stopped && !done) {
      try {
        await once();
      } catch (e) {
        if (stopped) return;
        if (e instanceof AuthError) { onState('auth'); needToken(); return; }
        if (e.status === 404) { onState('gone'); return; }
      }
      if (stopped || done) break;
      onState('reconnecting');
      await new Promise((res) => setTimeout(res, delay));
      delay = Math.min(delay * 2, 4000);
    }
    if (done && !stopped) onEnd();
  })();

  return () => { stopped = true; if (ctl) ctl.abort(); };
}

/* ---------- token ---------- */

function needToken(message) {
  memToken = '';
  try { sessionStorage.removeItem(TOKEN_KEY); } catch (e) { /* private mode */ }
  if (app.view) { app.view(); app.view = null; }
  const main = clear(document.getElementById('app'));
  const input = el('input', { type: 'password', id: 'token', autocomplete: 'off', placeholder: 'API token',
                              'aria-label': 'API token' });
  const msg = el('p', { class: 'muted', id: 'token-msg', text: message || '' });
  const form = el('form', { class: 'inline', id: 'token-form' }, input,
                  el('button', { class: 'primary', type: 'submit', text: 'Continue' }));
  form.addEventListener('submit', async (e) => {
    e.preventDefault();
    const t = input.value.trim();
    if (!t) return;
    try { sessionStorage.setItem(TOKEN_KEY, t); } catch (err) { memToken = t; }
    input.value = '';
    try {
      await api('/v1/runs?limit=1');
      route();
    } catch (err) {
      needToken(err instanceof AuthError ? 'That token was refused.' : `Cannot reach the API: ${err.message}`);
    }
  });
  main.append(el('div', { class: 'card' },
    el('h1', { text: 'Sign in' }),
    el('p', { text: 'This dispatcher requires its API token (RUNNEL_API_TOKEN). It is kept for this tab only and sent as a bearer header.' }),
    form, msg));
  setConn('token required');
  input.focus();
}

/* ---------- runs list ---------- */

function viewRuns() {
  const main = clear(document.getElementById('app'));
  const list = el('div', { id: 'runs' }, el('p', { class: 'muted', text: 'Loading runs…' }));
  main.append(el('h1', { text: 'Runs' }));
  if (app.config.dev_stub) main.append(devForm());
  main.append(list);
  let stopped = false;
  let timer = null;
  let runs = [];

  function render() {
    clear(list);
    if (!runs.length) {
      list.append(el('p', { class: 'muted', text: 'No recent runs yet.' }));
      return;
    }
    const hasTenant = runs.some((r) => r.tenant);
    const head = el('tr', null, el('th', { text: 'Run' }), el('th', { text: 'Status' }),
                    hasTenant ? el('th', { text: 'Tenant' }) : null, el('th', { text: 'Age' }),
                    el('th', { text: 'Duration' }), el('th', { text: 'Code' }));
    const body = el('tbody');
    for (const r of runs) {
      body.append(el('tr', { 'data-run': r.run_id },
        el('td', { class: 'mono' }, el('a', { href: `#/runs/${encodeURIComponent(r.run_id)}`, text: r.run_id })),
        el('td', null, badge(r.status)),
        hasTenant ? el('td', { text: r.tenant || '' }) : null,
        el('td', { text: fmtAge(r.enqueued_at) }),
        el('td', { text: fmtDur(runDuration(r)) }),
        el('td', { class: 'mono', text: r.code || '' })));
    }
    list.append(el('table', { class: 'runs' }, el('thead', null, head), body));
  }

  async function poll() {
    try {
      const a = await api('/v1/runs?limit=50');
      runs = (a && a.runs) || [];
      setConn('live');
      render();
    } catch (e) {
      if (e instanceof AuthError) { needToken(); return; }
      setConn(`API unreachable (${e.message}); retrying`);
    }
    if (!stopped) timer = setTimeout(poll, 2000);
  }
  poll();
  return () => { stopped = true; clearTimeout(timer); };
}

function devForm() {
  const agent = el('select', { id: 'dev-agent', 'aria-label': 'Agent' });
  const prompt = el('input', { type: 'text', id: 'dev-prompt', value: 'Add an inference node', 'aria-label': 'Prompt' });
  const perm = el('select', { id: 'dev-perm', 'aria-label': 'Permission mode', title: 'permission_mode of the job (the agent definition\'s own wins)' },
    el('option', { value: '', text: 'permission: default' }),
    ...['bypass', 'ask', 'deny'].map((m) => el('option', { value: m, text: `permission: ${m}` })));
  const msg = el('span', { class: 'muted', id: 'dev-msg' });
  const go = el('button', { class: 'primary', type: 'submit', id: 'dev-start', text: 'Start run' });
  const stub = app.config.dev_stub;
  fetch(`${stub}/agents`, { cache: 'no-store' }).then((r) => r.json()).then((a) => {
    for (const name of (a && a.agents) || []) agent.append(el('option', { value: name, text: name }));
    if ([...agent.options].some((o) => o.value === 'demo')) agent.value = 'demo';
  }).catch(() => { msg.textContent = 'cannot list the stub\'s agents'; });
  const form = el('form', { class: 'inline', id: 'dev-form' }, agent, prompt, perm, go, msg);
  form.addEventListener('submit', async (e) => {
    e.preventDefault();
    go.disabled = true;
    msg.textContent = 'starting…';
    try {
      const r = await fetch(`${stub}/mint?agent=${encodeURIComponent(agent.value)}`, { method: 'POST', cache: 'no-store' });
      if (!r.ok) throw new Error(`the stub refused (${r.status})`);
      const o = await r.json();
      const job = { agent_url: o.agent_url, otp_setup: o.otp_setup, otp_run: o.otp_run,
                    otp_upload: o.otp_upload, prompt: prompt.value, caller: 'runnel-ui' };
      if (perm.value) job.permission_mode = perm.value;
      const a = await api('/v1/runs', {
        method: 'POST',
        headers: { 'Content-Type': 'application/json' },
        body: JSON.stringify(job),
      });
      location.hash = `#/runs/${encodeURIComponent(a.run_id)}`;
    } catch (err) {
      if (err instanceof AuthError) { needToken(); return; }
      msg.textContent = `cannot start: ${err.message}`;
      go.disabled = false;
    }
  });
  return el('div', { class: 'card' }, el('h2', { text: 'Start a run (runnel dev)' }), form);
}

/* ---------- run view ---------- */

function viewRun(runId) {
  const main = clear(document.getElementById('app'));
  const state = {};
  const steps = new Map();   // step id -> {row, line}
  const asks = new Map();    // ask id -> {card, line}
  let ended = false;
  let logCount = 0;

  const cancelBtn = el('button', { class: 'danger', id: 'cancel', text: 'Cancel run' });
  const head = el('div', { class: 'card', id: 'state' });
  const errBox = el('div', { id: 'error' });
  const askBox = el('div', { id: 'asks' });
  const noSteps = el('tr', { class: 'empty' }, el('td', { colspan: 3, class: 'muted', text: 'No steps yet.' }));
  const stepBody = el('tbody', null, noSteps);
  const stepTable = el('table', { class: 'steps', id: 'steps' },
    el('thead', null, el('tr', null, el('th', { text: '' }), el('th', { text: 'Step' }), el('th', { text: 'Duration' }))),
    stepBody);
  const resultBox = el('div', { id: 'result' });
  const levelSel = el('select', { id: 'log-level', 'aria-label': 'Minimum log level' },
    ...LEVELS.map((l) => el('option', { value: l, text: `${l} and above`, selected: l === 'debug' })));
  const logList = el('div', { class: 'logs-list' });
  const logSummary = el('summary', { text: 'Logs (0)' });
  const logs = el('details', { class: 'logs card', id: 'logs' }, logSummary,
    el('div', { class: 'toolbar' }, el('label', { for: 'log-level', text: 'Level' }), levelSel), logList);

  main.append(
    el('div', { class: 'row-head' }, el('h1', { class: 'grow mono', text: runId }), cancelBtn),
    head, errBox, askBox,
    el('h2', { text: 'Steps' }), stepTable,
    el('h2', { text: 'Result' }), resultBox,
    logs);
  resultBox.append(el('p', { class: 'muted', text: 'No result yet.' }));

  // The webhook's delivery state, never its URL (it may hold a token).
  function webhookText(st) {
    let t = st.webhook_state || 'waiting for the run to end';
    if (st.webhook_attempts) t += ' (' + st.webhook_attempts + ' attempt' + (st.webhook_attempts == 1 ? '' : 's') + ')';
    if (st.webhook_error) t += ': ' + st.webhook_error;
    return t;
  }

  /* The run's model usage (the state's `usage` object), or null. */
  function fmtUsage(u) {
    if (typeof u === 'string') {
      try { u = JSON.parse(u); } catch (e) { return null; }
    }
    if (!u || typeof u !== 'object') return null;
    return `${u.requests} calls · ${u.input_tokens} in · ${u.output_tokens} out` +
      (u.cache_read_input_tokens ? ` · ${u.cache_read_input_tokens} cached` : '');
  }

  function renderState() {
    clear(head);
    const dur = runDuration(state);
    head.append(el('div', { class: 'kv' },
      el('div', null, el('span', { text: 'Status' }), badge(state.status)),
      el('div', null, el('span', { text: 'Worker' }), el('b', { class: 'mono', text: state.worker || '—' })),
      state.tenant ? el('div', null, el('span', { text: 'Tenant' }), el('b', { text: state.tenant })) : null,
      el('div', null, el('span', { text: 'Queued' }), el('b', { text: fmtTime(state.enqueued_at) })),
      el('div', null, el('span', { text: 'Started' }), el('b', { text: fmtTime(state.started_at) })),
      el('div', null, el('span', { text: 'Ended' }), el('b', { text: fmtTime(state.ended_at) })),
      el('div', null, el('span', { text: 'Duration' }), el('b', { text: fmtDur(dur) })),
      el('div', null, el('span', { text: 'Code' }), el('b', { class: 'mono', text: state.code || '—' })),
      el('div', null, el('span', { text: 'Priority' }), el('b', { text: state.priority != null ? String(state.priority) : '5' })),
      state.traceparent ? el('div', null, el('span', { text: 'Trace id' }),
        el('b', { class: 'mono', text: String(state.traceparent).slice(3, 35) })) : null,
      state.webhook ? el('div', null, el('span', { text: 'Webhook' }), el('b', { text: webhookText(state) })) : null,
      fmtUsage(state.usage) ? el('div', null, el('span', { text: 'Model usage' }),
                                 el('b', { class: 'mono', text: fmtUsage(state.usage) })) : null));
    cancelBtn.disabled = ended || TERMINAL.has(state.status);
  }

  async function refresh() {
    try {
      Object.assign(state, await api(runPath(runId)));
      renderState();
    } catch (e) {
      if (e instanceof AuthError) { needToken(); return; }
      if (e.status === 404) {
        head.textContent = 'No such run (it may have expired).';
        cancelBtn.disabled = true;
      }
    }
  }

  cancelBtn.addEventListener('click', async () => {
    cancelBtn.disabled = true;
    try {
      await api(runPath(runId, '/cancel'), { method: 'POST', headers: { 'Content-Type': 'application/json' },
                                             body: JSON.stringify({ reason: 'ui' }) });
    } catch (e) {
      if (e instanceof AuthError) { needToken(); return; }
      cancelBtn.disabled = false;
      errBox.append(el('div', { class: 'banner error', text: `Cancel failed: ${e.message}` }));
    }
  });

  function onStep(line) {
    let s = steps.get(line.id);
    if (!s) {
      const icon = el('td', { class: 'icon' });
      const name = el('td');
      const dur = el('td', { class: 'dur' });
      const row = el('tr', { class: 'step', 'data-step': line.id }, icon, name, dur);
      noSteps.remove();
      stepBody.append(row);
      s = { row, icon, name, dur, line: {}, started: line.ts };
      steps.set(line.id, s);
    }
    const merged = Object.assign({}, s.line, line);
    if (line.args === undefined && s.line.args !== undefined) merged.args = s.line.args;
    s.line = merged;
    s.row.dataset.status = merged.status;
    clear(s.icon).append(merged.status === 'running' ? el('span', { class: 'spinner', title: 'running' }) :
      merged.status === 'succeeded' ? el('span', { class: 'ok', title: 'succeeded', text: '✓' }) :
        el('span', { class: 'bad', title: merged.status || 'failed', text: '✗' }));
    const det = el('details', null, el('summary', { text: merged.name || merged.id }));
    if (merged.args !== undefined) det.append(el('div', { class: 'muted', text: 'args' }), el('pre', { text: pretty(merged.args) }));
    if (merged.result !== undefined) det.append(el('div', { class: 'muted', text: 'result' }), el('pre', { text: pretty(merged.result) }));
    if (merged.error !== undefined) det.append(el('div', { class: 'muted', text: 'error' }), el('pre', { text: pretty(merged.error) }));
    const wasOpen = s.name.querySelector('details') && s.name.querySelector('details').open;
    det.open = !!wasOpen;
    clear(s.name).append(det);
    const ms = merged.durationMs !== undefined ? merged.durationMs :
      (merged.status !== 'running' && merged.ts && s.started ? merged.ts - s.started : null);
    s.dur.textContent = merged.status === 'running' ? '…' : fmtDur(ms);
  }

  function onLog(line) {
    logCount++;
    logSummary.textContent = `Logs (${logCount})`;
    const lvl = LEVELS.includes(line.level) ? line.level : 'info';
    const row = el('div', { class: 'line', 'data-level': lvl },
      el('span', { class: `lvl ${lvl}`, text: lvl }), `${fmtTime(line.ts)}  `, String(line.message ?? ''));
    row.hidden = LEVELS.indexOf(lvl) < LEVELS.indexOf(levelSel.value);
    logList.append(row);
    if (logList.children.length > MAX_LOG_ROWS) {
      logList.firstElementChild.remove();
      logSummary.textContent = `Logs (${logCount}, the last ${MAX_LOG_ROWS} shown)`;
    }
  }
  levelSel.addEventListener('change', () => {
    const min = LEVELS.indexOf(levelSel.value);
    for (const row of logList.children) row.hidden = LEVELS.indexOf(row.dataset.level) < min;
  });

  function onAsk(update) {
    let a = asks.get(update.id);
    if (!a) {
      a = { card: el('div', { class: 'card ask', 'data-ask': update.id }), line: {} };
      asks.set(update.id, a);
      askBox.append(a.card);
    }
    /* A settlement line may carry only id, status and the answer. */
    const line = Object.assign({}, a.line, update);
    a.line = line;
    const card = clear(a.card);
    const open = line.status === 'open';
    card.classList.toggle('settled', !open);
    card.dataset.status = line.status || '';
    const kindLabel = line.kind === 'question' ? 'Question' : 'Permission';
    card.append(el('div', { class: 'row-head' },
      el('b', { class: 'grow', text: `${kindLabel}: ${line.title || line.question || line.id}` }),
      open ? null : badge(line.status)));
    if (line.question && line.title) card.append(el('p', { text: line.question }));
    if (line.tool) card.append(el('div', { class: 'muted', text: `tool: ${line.tool}` }));
    if (line.args !== undefined) card.append(el('pre', { text: pretty(line.args) }));
    if (!open) {
      const how = line.option ? `option ${line.option}` : line.text !== undefined ? `"${line.text}"` : '';
      if (how) card.append(el('div', { class: 'muted', text: `answer: ${how}` }));
      return;
    }
    const actions = el('div', { class: 'actions' });
    const note = el('span', { class: 'muted' });
    async function reply(body) {
      for (const b of actions.querySelectorAll('button, textarea')) b.disabled = true;
      note.textContent = 'sending…';
      try {
        await api(runPath(runId, `/replies/${encodeURIComponent(line.id)}`), {
          method: 'POST', headers: { 'Content-Type': 'application/json' }, body: JSON.stringify(body) });
        note.textContent = 'sent; waiting for the run';
      } catch (e) {
        if (e instanceof AuthError) { needToken(); return; }
        note.textContent = e.status === 409 ? 'already settled' : `reply failed: ${e.message}`;
        if (e.status !== 409) for (const b of actions.querySelectorAll('button, textarea')) b.disabled = false;
      }
    }
    const options = Array.isArray(line.options) ? line.options : [];
    for (const o of options) {
      if (!o || typeof o.id !== 'string') continue;
      actions.append(el('button', { class: /^allow/.test(o.id) ? 'primary' : '', 'data-option': o.id,
                                    text: o.label || o.id, onclick: () => reply({ option: o.id }) }));
    }
    if (!options.length) {
      const ta = el('textarea', { 'aria-label': 'Answer' });
      actions.append(ta, el('button', { class: 'primary', text: 'Send', onclick: () => reply({ text: ta.value }) }),
        el('button', { text: 'Reject', onclick: () => reply({ reject: true }) }));
    }
    actions.append(note);
    card.append(actions);
  }

  function onResult(line) {
    clear(resultBox).append(markdown(line.message ?? ''));
  }

  function onError(line) {
    clear(errBox).append(el('div', { class: 'banner error', role: 'alert' },
      el('b', { class: 'mono', text: line.code || 'error' }), ': ', String(line.message ?? '')));
  }

  /* A line means the run moved (claimed, running): show it soon rather
   * than at the next poll, at most twice a second. */
  let refreshTimer = null;
  function refreshSoon() {
    if (refreshTimer || TERMINAL.has(state.status) || state.status === 'running') return;
    refreshTimer = setTimeout(() => { refreshTimer = null; refresh(); }, 300);
  }

  function onEvent(id, line) {
    refreshSoon();
    switch (line && line.type) {
      case 'step': onStep(line); break;
      case 'log': onLog(line); break;
      case 'ask': onAsk(line); break;
      case 'result': ended = true; onResult(line); refresh(); break;
      case 'error': ended = true; onError(line); refresh(); break;
      default: break;
    }
  }

  refresh();
  const stopFollow = follow(runId, onEvent, () => { setConn('run ended'); refresh(); },
    (s) => setConn(s === 'live' ? 'live' : s === 'reconnecting' ? 'reconnecting…' : s === 'gone' ? 'no such run' : s));
  /* Status changes without a line (claimed, running) show by polling. */
  const timer = setInterval(() => { if (!TERMINAL.has(state.status)) refresh(); else renderState(); }, 1500);
  return () => { stopFollow(); clearInterval(timer); };
}

/* ---------- routing ---------- */

function route() {
  if (app.view) { app.view(); app.view = null; }
  if (app.config.auth && !token()) { needToken(); return; }
  const m = /^#\/runs\/([A-Za-z0-9_-]{1,64})$/.exec(location.hash);
  app.view = m ? viewRun(m[1]) : viewRuns();
}

async function start() {
  try {
    const r = await fetch('config.json', { cache: 'no-store' });
    if (r.ok) app.config = Object.assign(app.config, await r.json());
  } catch (e) { /* defaults: no auth, no dev form */ }
  window.addEventListener('hashchange', route);
  route();
}

document.addEventListener('DOMContentLoaded', start);
