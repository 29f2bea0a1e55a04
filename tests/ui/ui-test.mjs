// tests/ui/ui-test.mjs - one viewer scenario per run (ctest ui_<case>):
// starts a real `runnel dev` stack on free ports with the agents below,
// drives Debian's chromium headless through playwright-core (no browser
// download, offline flags) and checks what the page shows.
//
//   node tests/ui/ui-test.mjs steps|ask|cancel|reload|restart|xss|token
//
// Environment (set by tests/ui/CMakeLists.txt): RUNNEL_UI_NODE (where
// setup.sh installed playwright-core), RUNNEL_UI_ARTIFACTS (screenshots),
// RUNNEL_CLI, RUNNEL_DISPATCHER_BIN, RUNNEL_WORKER_BIN.
// Exit status: 0 pass, 1 fail, 77 skipped (the tree cannot do it yet).

import { spawn } from 'node:child_process';
import { createRequire } from 'node:module';
import fs from 'node:fs';
import net from 'node:net';
import os from 'node:os';
import path from 'node:path';

const require = createRequire(path.join(process.env.RUNNEL_UI_NODE || '.', 'package.json'));
const { chromium } = require('playwright-core');

const CASE = process.argv[2];
const ARTIFACTS = process.env.RUNNEL_UI_ARTIFACTS || path.join(os.tmpdir(), 'runnel-ui-artifacts');
const SKIP = 77;
const cleanups = [];
// Sanitizer reports from the programs (an ASan build writes them to their
// logs, which nothing else reads).
const SANITIZER = /ERROR: (AddressSanitizer|LeakSanitizer)|runtime error:/;
const findings = [];
let lastPage = null;

function log(...a) { console.log(`[ui_${CASE}]`, ...a); }
function fail(msg) { throw new Error(msg); }
function check(cond, msg) { if (!cond) fail(msg); }

async function waitFor(what, fn, timeoutMs = 30000, everyMs = 100) {
  const until = Date.now() + timeoutMs;
  let last;
  for (;;) {
    try {
      last = await fn();
      if (last) return last;
    } catch (e) { last = e; }
    if (Date.now() > until) fail(`timed out waiting for ${what} (last: ${last instanceof Error ? last.message : JSON.stringify(last)})`);
    await new Promise((r) => setTimeout(r, everyMs));
  }
}

/* ---------- agents (command agents speaking the envelope) ---------- */

const EMIT = `emit() { printf '%s\\n' "$1"; }\n`;

function commandAgent(script, config = {}) {
  return {
    env: { variables: {}, setup_script: null },
    config: Object.assign({
      system_prompt: 'ui test', model: 'none', skills: [], mcp_servers: [],
      agent: { kind: 'command', argv: ['/bin/sh', '-c', `read -r turn\n${EMIT}${script}`] },
      max_runtime_sec: 120,
    }, config),
  };
}

const AGENTS = {
  // Three steps, each visibly running for a moment, then a markdown result.
  steps: commandAgent(`
emit '{"type":"log","level":"info","message":"starting three steps"}'
for i in 1 2 3; do
  emit '{"type":"step","id":"step_'$i'","name":"recipes/step-'$i'.sh","status":"running","args":{"n":'$i'}}'
  sleep 0.7
  emit '{"type":"log","level":"debug","message":"step '$i' done"}'
  emit '{"type":"step","id":"step_'$i'","name":"recipes/step-'$i'.sh","status":"succeeded","result":{"node":"node_'$i'"},"durationMs":700}'
done
emit '{"type":"log","level":"warn","message":"one warning for the filter"}'
emit '{"type":"result","message":"## Done\\n\\nAdded **three** inference nodes:\\n\\n- node_1\\n- node_2\\n- node_3\\n\\nSee [the docs](https://example.com/docs) and \`runnel tail\`."}'
`),
  // Numbered ticks and three steps over ~7 s: gaps and duplicates show.
  counted: commandAgent(`
i=1
while [ $i -le 70 ]; do
  emit '{"type":"log","level":"info","message":"tick '$i'"}'
  case $i in
    10) emit '{"type":"step","id":"step_a","name":"first","status":"running"}' ;;
    20) emit '{"type":"step","id":"step_a","name":"first","status":"succeeded"}' ;;
    30) emit '{"type":"step","id":"step_b","name":"second","status":"running"}' ;;
    40) emit '{"type":"step","id":"step_b","name":"second","status":"succeeded"}' ;;
    50) emit '{"type":"step","id":"step_c","name":"third","status":"running"}' ;;
    60) emit '{"type":"step","id":"step_c","name":"third","status":"succeeded"}' ;;
  esac
  sleep 0.1
  i=$((i+1))
done
emit '{"type":"result","message":"counted to 70"}'
`),
  // A step that never ends on its own.
  slow: commandAgent(`
emit '{"type":"step","id":"step_wait","name":"waiting","status":"running"}'
i=0
while [ $i -lt 600 ]; do sleep 0.1; i=$((i+1)); done
emit '{"type":"result","message":"nobody cancelled me"}'
`),
  // Asks for permission, then goes on only when allowed.
  ask: commandAgent(`
emit '{"type":"ask","id":"ask_1","kind":"permission","title":"Run: mkdir -p assets","tool":"Bash","args":{"command":"mkdir -p assets"},"options":[{"id":"allow_once","label":"Allow"},{"id":"reject_once","label":"Reject"}],"status":"open"}'
while read -r line; do
  case "$line" in
    *'"reply"'*allow_once*)
      emit '{"type":"step","id":"step_mkdir","name":"Bash","status":"running","args":{"command":"mkdir -p assets"}}'
      mkdir -p assets
      emit '{"type":"step","id":"step_mkdir","name":"Bash","status":"succeeded"}'
      emit '{"type":"result","message":"Allowed and done."}'
      exit 0 ;;
    *'"reply"'*)
      emit '{"type":"error","code":"agent_refused","message":"permission refused"}'
      exit 0 ;;
    *'"cancel"'*) exit 0 ;;
  esac
done
`, { permission_mode: 'ask' }),
  // The mock agent's ask script: asks only when the job says permission_mode ask.
  mockask: {
    env: { variables: {}, setup_script: null },
    config: { system_prompt: 'ui test', model: 'mock', skills: [], mcp_servers: [],
              agent: { kind: 'mock', script: 'ask' }, max_runtime_sec: 120 },
  },
  // Hostile output: markup everywhere and links of every scheme.
  xss: commandAgent(`
emit '{"type":"log","level":"info","message":"<script>window.__pwned=1</script>"}'
emit '{"type":"step","id":"step_x","name":"<img src=x onerror=window.__pwned=2>","status":"running","args":{"html":"<script>window.__pwned=3</script>"}}'
emit '{"type":"step","id":"step_x","name":"<img src=x onerror=window.__pwned=2>","status":"succeeded","result":"<b>bold?</b>"}'
emit '{"type":"result","message":"Hello <script>window.__pwned=4</script> <img src=x onerror=window.__pwned=5>\\n\\n[safe](https://example.com/ok) [evil](javascript:window.__pwned=6) [mail](mailto:ops@example.com) [data](data:text/html,hi)"}'
`),
};

/* ---------- processes ---------- */

function freePort() {
  return new Promise((resolve, reject) => {
    const s = net.createServer();
    s.once('error', reject);
    s.listen(0, '127.0.0.1', () => { const { port } = s.address(); s.close(() => resolve(port)); });
  });
}

function spawnLogged(name, cmd, args, env) {
  const p = spawn(cmd, args, { env: Object.assign({}, process.env, env), stdio: ['ignore', 'pipe', 'pipe'], detached: true });
  p.out = '';
  p.stdout.on('data', (d) => { p.out += d; });
  p.stderr.on('data', (d) => { p.out += d; });
  p.exited = new Promise((res) => p.on('exit', (code, sig) => res({ code, sig })));
  p.alive = true;
  p.on('exit', () => { p.alive = false; });
  cleanups.push(async () => {
    if (!p.alive) return;
    try { process.kill(-p.pid, 'SIGTERM'); } catch (e) { /* gone */ }
    const t = setTimeout(() => { try { process.kill(-p.pid, 'SIGKILL'); } catch (e) { /* gone */ } }, 10000);
    await p.exited;
    clearTimeout(t);
  });
  cleanups.push(async () => { if (SANITIZER.test(p.out)) findings.push(`${name}:\n${p.out}`); });
  log(`started ${name} pid ${p.pid}`);
  return p;
}

async function startDev(env = {}) {
  const dir = fs.mkdtempSync(path.join(os.tmpdir(), 'runnel-ui-'));
  cleanups.push(async () => fs.rmSync(dir, { recursive: true, force: true }));
  const agents = path.join(dir, 'agents');
  fs.mkdirSync(agents);
  for (const [name, def] of Object.entries(AGENTS)) fs.writeFileSync(path.join(agents, `${name}.json`), JSON.stringify(def));
  // Runs after the stack stopped (cleanups run last first), before the rm.
  cleanups.push(async () => {
    for (const logs of fs.readdirSync(dir).map((d) => path.join(dir, d, 'logs')).filter((d) => fs.existsSync(d))) {
      for (const f of fs.readdirSync(logs)) {
        const text = fs.readFileSync(path.join(logs, f), 'utf8');
        if (SANITIZER.test(text)) findings.push(`${f}:\n${text.slice(-4000)}`);
      }
    }
  });
  const p = spawnLogged('runnel dev', process.env.RUNNEL_CLI, ['dev', '--port', '0', '--sandbox', 'process', '--agents', agents, '--keep'],
    Object.assign({ TMPDIR: dir, RUNNEL_DRAIN_SEC: '1' }, env));
  const banner = await waitFor('the runnel dev banner', () => {
    if (!p.alive) fail(`runnel dev exited:\n${p.out}`);
    return /viewer\s+(http:\S+)/.test(p.out) && /scratch\s+(\S+)/.test(p.out) ? p.out : null;
  }, 60000);
  const dev = {
    proc: p,
    viewer: /viewer\s+(http:\S+)/.exec(banner)[1],
    base: /dispatcher\s+(http:\S+)/.exec(banner)[1],
    stub: /workspace\s+(http:\S+)/.exec(banner)[1],
    redis: /redis\s+(redis:\S+)/.exec(banner)[1],
    kafka: /kafka\s+(\S+)/.exec(banner)[1],
    scratch: /scratch\s+(\S+)/.exec(banner)[1],
  };
  log(`viewer ${dev.viewer}`);
  return dev;
}

/* Starts a run through the API (not the page): mint at the stub, enqueue. */
async function apiRun(base, stub, agent, token) {
  const o = await (await fetch(`${stub}/mint?agent=${agent}`, { method: 'POST' })).json();
  const h = { 'Content-Type': 'application/json' };
  if (token) h.Authorization = `Bearer ${token}`;
  const r = await fetch(`${base}/v1/runs`, { method: 'POST', headers: h, body: JSON.stringify({
    agent_url: o.agent_url, otp_setup: o.otp_setup, otp_run: o.otp_run, otp_upload: o.otp_upload, prompt: 'ui test' }) });
  check(r.status === 202, `enqueue answered ${r.status}`);
  return (await r.json()).run_id;
}

/* ---------- browser ---------- */

async function browser() {
  const b = await chromium.launch({
    executablePath: '/usr/bin/chromium',
    headless: true,
    args: ['--headless', '--no-sandbox', '--disable-gpu', '--disable-dev-shm-usage',
           '--disable-background-networking', '--disable-component-update', '--disable-default-apps',
           '--disable-extensions', '--disable-sync', '--no-first-run', '--metrics-recording-only',
           '--disable-features=Translate,OptimizationHints,MediaRouter'],
  });
  cleanups.push(async () => b.close().catch(() => {}));
  const ctx = await b.newContext({ viewport: { width: 1100, height: 860 } });
  // Records every data-status a step row or ask card had, in order.
  await ctx.addInitScript(() => {
    window.__seen = {};
    const note = (n, v) => {
      const key = n.dataset.step ? `step:${n.dataset.step}` : n.dataset.ask ? `ask:${n.dataset.ask}` : null;
      if (!key) return;
      const a = (window.__seen[key] = window.__seen[key] || []);
      if (v && a[a.length - 1] !== v) a.push(v);
    };
    new MutationObserver((muts) => {
      for (const m of muts) {
        if (m.type !== 'attributes') continue;
        if (m.oldValue) note(m.target, m.oldValue);
        note(m.target, m.target.getAttribute('data-status'));
      }
    }).observe(document, { subtree: true, attributes: true, attributeOldValue: true, attributeFilter: ['data-status'] });
  });
  const page = await ctx.newPage();
  lastPage = page;
  page.errors = [];
  page.on('pageerror', (e) => page.errors.push(String(e)));
  page.on('dialog', (d) => { page.errors.push(`dialog: ${d.message()}`); d.dismiss().catch(() => {}); });
  page.on('console', (m) => { if (m.type() === 'error') log(`console: ${m.text()}`); });
  return page;
}

async function startFromForm(page, dev, agent, perm) {
  await page.goto(dev.viewer);
  await page.waitForSelector(`#dev-agent option[value="${agent}"]`, { state: 'attached' });
  await page.selectOption('#dev-agent', agent);
  if (perm) await page.selectOption('#dev-perm', perm);
  await page.click('#dev-start');
  await page.waitForURL(/#\/runs\/run_/);
  return decodeURIComponent(/#\/runs\/(.+)$/.exec(page.url())[1]);
}

// A fresh stack and browser page with a run of agent started from the form.
async function openRun(agent, perm) {
  const dev = await startDev();
  const page = await browser();
  const runId = await startFromForm(page, dev, agent, perm);
  return { dev, page, runId };
}

async function waitStatus(page, status, timeoutMs = 30000) {
  await waitFor(`status ${status}`, async () => (await page.textContent('#state .badge')) === status, timeoutMs);
}

async function rows(page) {
  return page.$$eval('#steps tr.step', (rs) => rs.map((r) => ({ id: r.dataset.step, status: r.dataset.status })));
}

async function logLines(page) {
  return page.$$eval('#logs .line', (ls) => ls.map((l) => l.textContent));
}

function checkTicks(lines, n) {
  const ticks = lines.map((l) => /tick (\d+)$/.exec(l)).filter(Boolean).map((m) => Number(m[1]));
  check(ticks.length === n, `${ticks.length} tick lines, expected ${n}`);
  ticks.forEach((t, i) => check(t === i + 1, `tick ${i + 1} is ${t} (gap or duplicate)`));
}

/* ---------- cases ---------- */

const cases = {
  async steps() {
    const { dev, page, runId } = await openRun('steps');
    await page.waitForSelector('#result .result h4');
    await waitStatus(page, 'succeeded');
    const rs = await rows(page);
    check(rs.length === 3, `${rs.length} step rows, expected 3`);
    const seen = await page.evaluate(() => window.__seen);
    for (const r of rs) {
      check(r.status === 'succeeded', `${r.id} ends ${r.status}`);
      const hist = seen[`step:${r.id}`] || [];
      check(hist.join('>') === 'running>succeeded', `${r.id} went ${hist.join('>')}`);
    }
    check((await page.$$('#steps .ok')).length === 3, 'three ✓ icons');
    const result = await page.textContent('#result');
    check(result.includes('Added three inference nodes'), `result text: ${result}`);
    check(await page.getAttribute('#result a', 'href') === 'https://example.com/docs', 'result link');
    check((await page.textContent('#state')).includes('Worker'), 'state header');
    // Logs are folded, and the level filter hides lower levels.
    check(!(await page.$eval('#logs', (d) => d.open)), 'logs folded by default');
    await page.click('#logs summary');
    await page.selectOption('#log-level', 'warn');
    const visible = await page.$$eval('#logs .line', (ls) => ls.filter((l) => !l.hidden).map((l) => l.dataset.level));
    check(visible.length === 1 && visible[0] === 'warn', `visible at warn: ${visible}`);
    await page.selectOption('#log-level', 'debug');
    // Expand one step's args and result.
    await page.click('#steps tr.step summary');
    check((await page.textContent('#steps tr.step pre')).includes('"n": 1'), 'args shown');
    fs.mkdirSync(ARTIFACTS, { recursive: true });
    await page.screenshot({ path: path.join(ARTIFACTS, 'finished-run.png'), fullPage: true });
    // The runs list knows it.
    await page.goto(`${dev.viewer}#/`);
    await page.waitForSelector(`#runs tr[data-run="${runId}"] .badge.succeeded`);
    await page.screenshot({ path: path.join(ARTIFACTS, 'runs-list.png') });
    check(!page.errors.length, `page errors: ${page.errors}`);
  },

  async ask() {
    const dev = await startDev();
    // The reply route comes with asks; without it there is nothing to test.
    const probe = await fetch(`${dev.base}/v1/runs/run_x/replies/ask_1`, { method: 'POST', body: '{"option":"x"}',
      headers: { 'Content-Type': 'application/json' } });
    const pj = await probe.json().catch(() => ({}));
    if (probe.status === 404 && /route/.test(pj.error?.message || '')) {
      log('SKIP: this dispatcher has no reply route yet');
      return SKIP;
    }
    const page = await browser();
    await startFromForm(page, dev, 'ask');
    await page.waitForSelector('#asks [data-ask="ask_1"] button[data-option="allow_once"]', { timeout: 30000 });
    check((await page.textContent('#asks [data-ask="ask_1"] [data-option="allow_once"]')) === 'Allow', 'Allow label');
    fs.mkdirSync(ARTIFACTS, { recursive: true });
    await page.screenshot({ path: path.join(ARTIFACTS, 'ask-card.png') });
    await page.click('#asks [data-ask="ask_1"] button[data-option="allow_once"]');
    await waitStatus(page, 'succeeded');
    check((await page.textContent('#result')).includes('Allowed and done.'), 'result after allow');
    await waitFor('the ask settled', async () => (await page.getAttribute('#asks [data-ask="ask_1"]', 'data-status')) === 'answered');
    check((await rows(page)).length === 1, 'one step after allow');
    check((await page.$$('#asks [data-ask]')).length === 1, 'one ask card');
    // A second run: cancel while the ask is open.
    await startFromForm(page, dev, 'ask');
    await page.waitForSelector('#asks [data-ask="ask_1"] button[data-option="allow_once"]');
    await page.click('#cancel');
    await waitStatus(page, 'cancelled');
    await page.waitForSelector('#error .banner');
    check((await page.textContent('#error')).includes('cancelled'), 'cancelled banner');
    await waitFor('the ask rejected', async () => (await page.getAttribute('#asks [data-ask="ask_1"]', 'data-status')) === 'rejected');
    // The form's permission mode reaches the job: the mock asks, Reject
    // fails its step and the run still ends with a result.
    await startFromForm(page, dev, 'mockask', 'ask');
    await page.waitForSelector('#asks [data-ask="ask_1"] button[data-option="reject_once"]');
    await page.click('#asks [data-ask="ask_1"] button[data-option="reject_once"]');
    await waitStatus(page, 'succeeded');
    await page.waitForSelector('#steps tr.step[data-status="failed"] .bad');
    check((await page.textContent('#result')).includes('Finished without running the tool'), 'result after reject');
    await waitFor('the ask answered', async () => (await page.getAttribute('#asks [data-ask="ask_1"]', 'data-status')) !== 'open');
    check(!page.errors.length, `page errors: ${page.errors}`);
  },

  async cancel() {
    const { page } = await openRun('slow');
    await page.waitForSelector('#steps tr.step[data-status="running"]');
    await waitStatus(page, 'running');
    await page.click('#cancel');
    await waitStatus(page, 'cancelled');
    await page.waitForSelector('#error .banner');
    const banner = await page.textContent('#error .banner');
    check(banner.startsWith('cancelled:'), `banner: ${banner}`);
    // The runner closes the step left running as failed.
    await page.waitForSelector('#steps tr.step[data-status="failed"] .bad');
    check(await page.isDisabled('#cancel'), 'cancel disabled once ended');
    check((await page.textContent('#state')).includes('cancelled'), 'code cancelled in the header');
    check(!page.errors.length, `page errors: ${page.errors}`);
  },

  async reload() {
    const { page } = await openRun('counted');
    await page.waitForSelector('#steps tr.step[data-step="step_a"]');
    await waitFor('tick 25', async () => (await logLines(page)).some((l) => l.endsWith('tick 25')));
    await page.reload();
    await page.waitForSelector('#steps tr.step[data-step="step_a"]');
    await waitStatus(page, 'succeeded');
    await page.waitForSelector('#result .result');
    const rs = await rows(page);
    check(rs.map((r) => r.id).join(',') === 'step_a,step_b,step_c', `rows after reload: ${JSON.stringify(rs)}`);
    checkTicks(await logLines(page), 70);
    check(!page.errors.length, `page errors: ${page.errors}`);
  },

  async restart() {
    const dev = await startDev();
    // A dispatcher of our own on the same Redis and Kafka, so that it can be
    // killed and started again without taking the dev stack down.
    const port = await freePort();
    const base = `http://127.0.0.1:${port}`;
    const denv = { RUNNEL_LISTEN: `127.0.0.1:${port}`, RUNNEL_REDIS_URL: dev.redis, RUNNEL_KAFKA_BROKERS: dev.kafka };
    const startD = async () => {
      const d = spawnLogged('dispatcher', process.env.RUNNEL_DISPATCHER_BIN, [], denv);
      await waitFor('our dispatcher', async () => {
        if (!d.alive) fail(`dispatcher exited:\n${d.out}`);
        return (await fetch(`${base}/readyz`)).status === 200;
      }, 30000);
      return d;
    };
    let d = await startD();
    const runId = await apiRun(base, dev.stub, 'counted');
    const page = await browser();
    const events = [];
    page.on('request', (r) => { if (r.url().endsWith('/events')) events.push(r.headers()['last-event-id'] || ''); });
    await page.goto(`${base}/ui/#/runs/${runId}`);
    await waitFor('tick 20', async () => (await logLines(page)).some((l) => l.endsWith('tick 20')));
    process.kill(d.pid, 'SIGKILL');
    await d.exited;
    await waitFor('the page noticing', async () => (await page.textContent('#conn')).startsWith('reconnecting'), 10000);
    d = await startD();
    await waitStatus(page, 'succeeded');
    await page.waitForSelector('#result .result');
    const rs = await rows(page);
    check(rs.map((r) => r.id).join(',') === 'step_a,step_b,step_c', `rows after restart: ${JSON.stringify(rs)}`);
    checkTicks(await logLines(page), 70);
    check(events.length >= 2, `${events.length} event requests`);
    check(events.slice(1).some((id) => /^\d+-\d+$/.test(id)), `reconnects sent Last-Event-ID: ${JSON.stringify(events)}`);
    check(!page.errors.length, `page errors: ${page.errors}`);
  },

  async xss() {
    const { page } = await openRun('xss');
    await waitStatus(page, 'succeeded');
    await page.waitForSelector('#result .result');
    await page.click('#logs summary');
    await page.click('#steps tr.step summary');
    const r = await page.evaluate(() => ({
      pwned: window.__pwned,
      scripts: document.querySelectorAll('#app script').length,
      imgs: document.querySelectorAll('#app img').length,
      bold: document.querySelectorAll('#app b:not(.mono):not([class])').length,
      result: document.querySelector('#result').textContent,
      links: [...document.querySelectorAll('#result a')].map((a) => ({ href: a.getAttribute('href'), rel: a.rel, text: a.textContent })),
      step: document.querySelector('#steps tr.step summary').textContent,
      log: [...document.querySelectorAll('#logs .line')].map((l) => l.textContent).join('\n'),
    }));
    check(r.pwned === undefined, `agent output ran: ${r.pwned}`);
    check(r.scripts === 0 && r.imgs === 0, `elements from agent output: ${r.scripts} script, ${r.imgs} img`);
    check(r.result.includes('<script>window.__pwned=4</script>'), `result shown as text: ${r.result}`);
    check(r.step === '<img src=x onerror=window.__pwned=2>', `step name as text: ${r.step}`);
    check(r.log.includes('<script>window.__pwned=1</script>'), 'log shown as text');
    const hrefs = r.links.map((l) => l.href);
    check(JSON.stringify(hrefs) === JSON.stringify(['https://example.com/ok', 'mailto:ops@example.com']), `links: ${JSON.stringify(r.links)}`);
    check(r.links.every((l) => l.rel.includes('noopener')), 'rel=noopener');
    check(r.result.includes('[evil](javascript:window.__pwned=6)') && r.result.includes('[data](data:text/html,hi)'), 'unsafe links stay text');
    check(!page.errors.length, `page errors: ${page.errors}`);
  },

  async token() {
    const token = `tok-${Math.random().toString(36).slice(2)}-${Date.now()}`;
    const dev = await startDev({ RUNNEL_API_TOKEN: token });
    const page = await browser();
    const urls = [];
    page.on('request', (r) => urls.push(r.url()));
    // The static files need no token; the API refuses without it.
    const res = await page.goto(dev.viewer);
    check(res.status() === 200, `page ${res.status()}`);
    check((await fetch(`${dev.base}/v1/runs`)).status === 401, 'API without token');
    await page.waitForSelector('#token-form');
    check(!(await page.$('#runs')), 'no runs list before the token');
    await page.fill('#token', 'wrong-token');
    await page.click('#token-form button');
    await waitFor('the refusal', async () => (await page.textContent('#token-msg')).includes('refused'));
    await page.fill('#token', token);
    await page.click('#token-form button');
    await page.waitForSelector('#runs');
    await startFromForm(page, dev, 'steps');
    await waitStatus(page, 'succeeded');
    // Reloading keeps the tab's token: asked once.
    await page.reload();
    await waitStatus(page, 'succeeded');
    check(!(await page.$('#token-form')), 'token asked again after reload');
    check(!urls.some((u) => u.includes(token)), 'token in a URL');
    const dlog = fs.readFileSync(path.join(dev.scratch, 'logs', 'dispatcher.log'), 'utf8');
    check(dlog.length > 0 && !dlog.includes(token), 'token in the dispatcher log');
    check(!page.errors.length, `page errors: ${page.errors}`);
  },
};

/* The ask card alone, from lines written straight into a run's stream
 * (this works without a worker that knows asks). */
cases.askcard = async function askcard() {
  const dev = await startDev();
  const run = `run_askcard_${Date.now()}`;
  const redis = (...a) => runCapture('redis-cli', ['-u', dev.redis, ...a]);
  const xadd = (line) => redis('XADD', `runnel:{${run}}:out`, '*', 'line', JSON.stringify(line));
  await redis('HSET', `runnel:{${run}}:state`, 'status', 'running', 'worker', 'w-test', 'enqueued_at', String(Date.now()),
              'started_at', String(Date.now()), 'tenant', 'acme');
  await redis('ZADD', 'runnel:{runs}:recent', String(Date.now()), run);
  cleanups.push(async () => { await redis('DEL', `runnel:{${run}}:state`, `runnel:{${run}}:out`); });
  await xadd({ type: 'ask', id: 'ask_q', kind: 'question', title: 'Which table?', question: 'Pick the <b>table</b> to use',
               status: 'open', ts: Date.now() });
  await xadd({ type: 'ask', id: 'ask_p', kind: 'permission', title: 'Run: rm -rf build', tool: 'Bash', args: { command: 'rm -rf build' },
               options: [{ id: 'allow_once', label: 'Allow' }, { id: 'reject_once', label: 'Reject' }], status: 'open', ts: Date.now() });
  const page = await browser();
  await page.goto(`${dev.viewer}#/runs/${run}`);
  await page.waitForSelector('#asks [data-ask="ask_p"] button[data-option="allow_once"]');
  check((await page.$$eval('#asks [data-ask="ask_p"] button', (b) => b.map((x) => x.textContent))).join(',') === 'Allow,Reject', 'option buttons');
  check(await page.$('#asks [data-ask="ask_q"] textarea') !== null, 'question text box');
  check((await page.textContent('#asks [data-ask="ask_q"]')).includes('Pick the <b>table</b> to use'), 'question as text');
  await xadd({ type: 'ask', id: 'ask_p', status: 'answered', option: 'allow_once', ts: Date.now() });
  await waitFor('the settled card', async () => (await page.getAttribute('#asks [data-ask="ask_p"]', 'data-status')) === 'answered');
  const settled = await page.textContent('#asks [data-ask="ask_p"]');
  check(settled.includes('Run: rm -rf build') && settled.includes('allow_once'), `settled card: ${settled}`);
  check(!(await page.$('#asks [data-ask="ask_p"] button')), 'no buttons once settled');
  check((await page.$$('#asks [data-ask]')).length === 2, 'two cards');
  await xadd({ type: 'ask', id: 'ask_q', status: 'expired', ts: Date.now() });
  await xadd({ type: 'error', code: 'cancelled', message: 'The run was cancelled.', ts: Date.now() });
  await page.waitForSelector('#error .banner');
  await waitFor('the expired card', async () => (await page.getAttribute('#asks [data-ask="ask_q"]', 'data-status')) === 'expired');
  check((await page.textContent('#state')).includes('acme'), 'tenant in the header');
  // The runs list shows a tenant column once a run has one.
  await page.goto(`${dev.viewer}#/`);
  await page.waitForSelector(`#runs tr[data-run="${run}"]`);
  check((await page.$$eval('#runs th', (t) => t.map((x) => x.textContent))).includes('Tenant'), 'tenant column');
  check((await page.textContent(`#runs tr[data-run="${run}"]`)).includes('acme'), 'tenant in the row');
  check(!page.errors.length, `page errors: ${page.errors}`);
};

/* ---------- the HTTP side, no browser ---------- */

function runCapture(cmd, args, env) {
  return new Promise((resolve) => {
    const p = spawn(cmd, args, { env: Object.assign({}, process.env, env), stdio: ['ignore', 'pipe', 'pipe'] });
    let out = '';
    p.stdout.on('data', (d) => { out += d; });
    p.stderr.on('data', (d) => { out += d; });
    p.on('exit', (code) => resolve({ code, out }));
  });
}

async function expectError(url, status, message, opts) {
  const r = await fetch(url, opts);
  const body = await r.json().catch(() => null);
  check(r.status === status && body && body.error && body.error.message === message,
    `${url}: ${r.status} ${JSON.stringify(body)}, expected ${status} "${message}"`);
}

cases.http = async function http() {
  const dev = await startDev();
  const D = dev.base;
  // Files, types and headers.
  const idx = await fetch(`${D}/ui/`);
  check(idx.status === 200, `/ui/ ${idx.status}`);
  check(idx.headers.get('content-type') === 'text/html; charset=utf-8', `type ${idx.headers.get('content-type')}`);
  const csp = idx.headers.get('content-security-policy') || '';
  check(csp.includes("default-src 'none'") && csp.includes("script-src 'self'") && csp.includes("frame-ancestors 'none'") &&
        csp.endsWith(`connect-src 'self' ${dev.stub}`), `csp: ${csp}`);
  check(!/unsafe-inline|unsafe-eval/.test(csp), 'no unsafe- sources');
  check(idx.headers.get('x-content-type-options') === 'nosniff', 'nosniff');
  check(idx.headers.get('cache-control') === 'no-cache', `cache-control ${idx.headers.get('cache-control')}`);
  const etag = idx.headers.get('etag');
  check(/^"[0-9a-f]{32}"$/.test(etag || ''), `etag ${etag}`);
  check((await fetch(`${D}/ui/`, { headers: { 'If-None-Match': etag } })).status === 304, '304 on If-None-Match');
  const html = await idx.text();
  check(!/<script>|\sstyle=|\son[a-z]+=/.test(html), 'index.html has no inline script, style or handler');
  for (const [f, t] of [['app.js', 'text/javascript; charset=utf-8'], ['app.css', 'text/css; charset=utf-8']]) {
    const r = await fetch(`${D}/ui/${f}`);
    check(r.status === 200 && r.headers.get('content-type') === t, `${f}: ${r.status} ${r.headers.get('content-type')}`);
    check((await r.text()).length > 1000, `${f} body`);
  }
  const head = await fetch(`${D}/ui/`, { method: 'HEAD' });
  check(head.status === 200 && (await head.text()) === '', 'HEAD /ui/');
  const redir = await fetch(`${D}/ui`, { redirect: 'manual' });
  check(redir.status === 301 && redir.headers.get('location') === '/ui/', `/ui: ${redir.status}`);
  const cfg = await (await fetch(`${D}/ui/config.json`)).json();
  check(cfg.auth === false && cfg.dev_stub === dev.stub, `config ${JSON.stringify(cfg)}`);
  await expectError(`${D}/ui/nope.js`, 404, 'ui: no such file');
  await expectError(`${D}/ui/..%2fv1%2fruns`, 404, 'ui: no such file');
  await expectError(`${D}/ui/`, 405, 'method: GET, HEAD, OPTIONS only', { method: 'POST' });
  // The stub lets only the dispatcher's page (127.0.0.1 or localhost) mint.
  const origin = new URL(D).origin;
  const port = new URL(D).port;
  for (const [o, ok] of [[origin, true], [`http://localhost:${port}`, true], ['http://evil.example', false],
                         [`http://127.0.0.1:${Number(port) + 1}`, false]]) {
    const r = await fetch(`${dev.stub}/agents`, { headers: { Origin: o } });
    const acao = r.headers.get('access-control-allow-origin');
    check(ok ? acao === o : acao === null, `stub CORS for ${o}: ${acao}`);
  }
  // Bad limits.
  for (const l of ['0', 'abc', '501', '-1', '1x', '']) {
    await expectError(`${D}/v1/runs?limit=${l}`, 400, 'limit: must be an integer 1..500');
  }
  // Bad dev stub URLs refuse to start.
  for (const u of ['http://evil.example:80', 'http://127.0.0.1:8080/x', 'https://127.0.0.1:1', 'http://127.0.0.1:',
                   "http://127.0.0.1:1 'unsafe-inline'", 'http://127.0.0.1:123456']) {
    const r = await runCapture(process.env.RUNNEL_DISPATCHER_BIN, [], { RUNNEL_UI_DEV_STUB: u });
    check(r.code === 2 && r.out.includes('runnel-dispatcher: --ui-dev-stub/RUNNEL_UI_DEV_STUB: expected http://127.0.0.1:PORT (a loopback host and a port, no path)'),
      `RUNNEL_UI_DEV_STUB=${u}: ${r.code} ${r.out}`);
  }
  // The index keeps RUNNEL_RECENT_RUNS entries, newest first, and expires.
  const port2 = await freePort();
  const base = `http://127.0.0.1:${port2}`;
  spawnLogged('dispatcher', process.env.RUNNEL_DISPATCHER_BIN, [], {
    RUNNEL_LISTEN: `127.0.0.1:${port2}`, RUNNEL_REDIS_URL: dev.redis, RUNNEL_KAFKA_BROKERS: dev.kafka,
    RUNNEL_RECENT_RUNS: '2', RUNNEL_RETENTION_SEC: '600', RUNNEL_MAX_RUNTIME_SEC: '300' });
  await waitFor('our dispatcher', async () => (await fetch(`${base}/readyz`)).status === 200, 30000);
  const ids = [];
  for (let i = 0; i < 3; i++) ids.push(await apiRun(base, dev.stub, 'steps'));
  const list = await (await fetch(`${base}/v1/runs`)).json();
  check(JSON.stringify(list.runs.map((r) => r.run_id)) === JSON.stringify([ids[2], ids[1]]), `list ${JSON.stringify(list)}`);
  check(list.runs.every((r) => typeof r.status === 'string' && typeof r.enqueued_at === 'number'), 'state in the list');
  await expectError(`${base}/v1/runs?limit=3`, 400, 'limit: must be an integer 1..2');
  const card = await runCapture('redis-cli', ['-u', dev.redis, 'ZCARD', 'runnel:{runs}:recent']);
  check(card.out.trim() === '2', `ZCARD ${card.out}`);
  const ttl = await runCapture('redis-cli', ['-u', dev.redis, 'TTL', 'runnel:{runs}:recent']);
  check(Number(ttl.out) > 800 && Number(ttl.out) <= 900, `TTL ${ttl.out}`);
  // An entry whose state is gone leaves the index when read.
  await runCapture('redis-cli', ['-u', dev.redis, 'DEL', `runnel:{${ids[2]}}:state`, `runnel:{${ids[2]}}:out`]);
  const after = await (await fetch(`${base}/v1/runs`)).json();
  check(JSON.stringify(after.runs.map((r) => r.run_id)) === JSON.stringify([ids[1]]), `after expiry ${JSON.stringify(after)}`);
  await waitFor('the ZREM', async () => (await runCapture('redis-cli', ['-u', dev.redis, 'ZCARD', 'runnel:{runs}:recent'])).out.trim() === '1', 5000);
};

/* ---------- main ---------- */

async function main() {
  if (!cases[CASE]) {
    console.error(`usage: ui-test.mjs ${Object.keys(cases).join('|')}`);
    return 2;
  }
  const t0 = Date.now();
  try {
    const rc = await cases[CASE]();
    log(rc === SKIP ? 'skipped' : `passed in ${((Date.now() - t0) / 1000).toFixed(1)} s`);
    return rc === SKIP ? SKIP : 0;
  } catch (e) {
    log(`FAILED: ${e.stack || e}`);
    if (lastPage) {
      fs.mkdirSync(ARTIFACTS, { recursive: true });
      await lastPage.screenshot({ path: path.join(ARTIFACTS, `failed-${CASE}.png`), fullPage: true }).catch(() => {});
      log(`page: ${lastPage.url()}\n${await lastPage.textContent('body').catch(() => '?')}`);
    }
    return 1;
  } finally {
    for (const c of cleanups.reverse()) await c().catch(() => {});
  }
}

let rc = await main();
if (findings.length) {
  log(`FAILED: sanitizer reports:\n${findings.join('\n')}`);
  rc = 1;
}
process.exitCode = rc;
