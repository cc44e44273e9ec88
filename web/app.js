// lares serve's page: a chat over /v1/chat/completions (streamed, with a stop
// button), the model and sampling settings, and the ring's state from
// /v1/ring when the server serves a ring (the panel stays hidden otherwise).
// No external assets; the key, if any, is kept in this browser only.
'use strict';

const $ = (id) => document.getElementById(id);
const history = []; // {role, content} of the conversation so far
let running = null; // the AbortController of the answer being streamed

const SETTINGS = ['key', 'system', 'temperature', 'top_p', 'top_k', 'max_tokens', 'seed'];

function headers() {
  const h = { 'Content-Type': 'application/json' };
  const key = $('key').value.trim();
  if (key) h.Authorization = `Bearer ${key}`;
  return h;
}

function setStatus(text) {
  $('status').textContent = text;
}

function saveSettings() {
  const s = {};
  for (const id of SETTINGS) s[id] = $(id).value;
  try { localStorage.setItem('lares-settings', JSON.stringify(s)); } catch (e) { /* private mode */ }
}

function loadSettings() {
  let s = null;
  try { s = JSON.parse(localStorage.getItem('lares-settings') || 'null'); } catch (e) { s = null; }
  if (!s) return;
  for (const id of SETTINGS) if (typeof s[id] === 'string') $(id).value = s[id];
}

async function loadModels() {
  try {
    const r = await fetch('/v1/models', { headers: headers() });
    if (r.status === 401) {
      setStatus('this server needs an API key (settings)');
      return;
    }
    if (!r.ok) throw new Error(`HTTP ${r.status}`);
    const list = (await r.json()).data || [];
    const sel = $('model');
    const keep = sel.value;
    sel.replaceChildren(...list.map((m) => new Option(m.id, m.id)));
    if (list.some((m) => m.id === keep)) sel.value = keep;
    setStatus(list.length ? `ready: ${list.map((m) => m.id).join(', ')}` : 'no model');
  } catch (e) {
    setStatus(`cannot reach the server (${e.message})`);
  }
}

// the ring panel: any JSON the server gives, devices as a table when listed
function renderRing(state) {
  const box = $('ring-state');
  const devices = Array.isArray(state.devices) ? state.devices : null;
  if (devices && devices.length && typeof devices[0] === 'object') {
    const cols = [...new Set(devices.flatMap((d) => Object.keys(d)))].filter((k) => typeof devices[0][k] !== 'object');
    const table = document.createElement('table');
    const head = table.createTHead().insertRow();
    for (const c of cols) head.appendChild(Object.assign(document.createElement('th'), { textContent: c }));
    const body = table.createTBody();
    for (const d of devices) {
      const row = body.insertRow();
      for (const c of cols) row.insertCell().textContent = d[c] === undefined ? '' : String(d[c]);
    }
    const rest = Object.fromEntries(Object.entries(state).filter(([k]) => k !== 'devices'));
    const pre = Object.assign(document.createElement('pre'), { textContent: JSON.stringify(rest, null, 1) });
    box.replaceChildren(table, pre);
  } else {
    box.replaceChildren(Object.assign(document.createElement('pre'), { textContent: JSON.stringify(state, null, 1) }));
  }
}

async function pollRing() {
  try {
    const r = await fetch('/v1/ring', { headers: headers() });
    if (!r.ok) throw new Error('no ring');
    renderRing(await r.json());
    $('ring').hidden = false;
  } catch (e) {
    $('ring').hidden = true;
  }
}

function addMessage(role, text) {
  const div = document.createElement('div');
  div.className = `msg ${role}`;
  const who = Object.assign(document.createElement('span'), { className: 'who', textContent: role });
  const body = Object.assign(document.createElement('span'), { className: 'text', textContent: text });
  div.append(who, body);
  $('log').appendChild(div);
  div.scrollIntoView({ block: 'end' });
  return div;
}

function number(id) {
  const v = $(id).value.trim();
  return v === '' ? undefined : Number(v);
}

function busy(on) {
  $('send').disabled = on;
  $('stop').disabled = !on;
}

// reads server-sent events from a fetch body: calls onData with each data line's JSON
async function readEvents(body, onData) {
  const reader = body.getReader();
  const dec = new TextDecoder();
  let buf = '';
  for (;;) {
    const { value, done } = await reader.read();
    if (done) return;
    buf += dec.decode(value, { stream: true });
    let at;
    while ((at = buf.indexOf('\n\n')) >= 0) {
      const event = buf.slice(0, at);
      buf = buf.slice(at + 2);
      for (const line of event.split('\n')) {
        if (!line.startsWith('data: ')) continue;
        const data = line.slice(6);
        if (data === '[DONE]') return;
        onData(JSON.parse(data));
      }
    }
  }
}

async function send(ev) {
  ev.preventDefault();
  if (running) return;
  const text = $('prompt').value;
  if (!text.trim()) return;
  $('prompt').value = '';
  addMessage('user', text);
  history.push({ role: 'user', content: text });
  const div = addMessage('assistant', '');
  const out = div.querySelector('.text');
  const messages = [];
  if ($('system').value.trim()) messages.push({ role: 'system', content: $('system').value });
  messages.push(...history);
  const req = {
    model: $('model').value || 'lares', messages, stream: true,
    stream_options: { include_usage: true },
    temperature: number('temperature'), top_p: number('top_p'), top_k: number('top_k'),
    max_tokens: number('max_tokens'), seed: number('seed'),
  };
  running = new AbortController();
  busy(true);
  setStatus('generating…');
  let finish = null;
  let usage = null;
  const t0 = performance.now();
  try {
    const r = await fetch('/v1/chat/completions', {
      method: 'POST', headers: headers(), body: JSON.stringify(req), signal: running.signal,
    });
    if (!r.ok) {
      const err = await r.json().catch(() => ({}));
      throw new Error((err.error && err.error.message) || `HTTP ${r.status}`);
    }
    await readEvents(r.body, (chunk) => {
      if (chunk.error) throw new Error(chunk.error.message);
      if (chunk.usage) usage = chunk.usage;
      const c = chunk.choices && chunk.choices[0];
      if (!c) return;
      if (c.delta && c.delta.content) {
        out.textContent += c.delta.content;
        div.scrollIntoView({ block: 'end' });
      }
      if (c.finish_reason) finish = c.finish_reason;
    });
    setStatus('ready');
  } catch (e) {
    if (e.name === 'AbortError') {
      finish = 'stopped';
      setStatus('stopped');
    } else {
      div.classList.add('error');
      out.textContent += (out.textContent ? '\n' : '') + `error: ${e.message}`;
      finish = 'error';
      setStatus('error');
    }
  } finally {
    running = null;
    busy(false);
  }
  div.dataset.finish = finish || 'stop';
  div.dataset.done = 'true';
  if (finish !== 'error') history.push({ role: 'assistant', content: out.textContent });
  if (usage) {
    const s = (performance.now() - t0) / 1000;
    $('figures').textContent = `${usage.prompt_tokens} prompt tokens (${usage.prompt_tokens_details ? usage.prompt_tokens_details.cached_tokens : 0} cached), ` +
      `${usage.completion_tokens} generated in ${s.toFixed(1)} s`;
  }
}

function clearChat() {
  if (running) running.abort();
  history.length = 0;
  $('log').replaceChildren();
}

$('ask').addEventListener('submit', send);
$('stop').addEventListener('click', () => running && running.abort());
$('clear').addEventListener('click', clearChat);
$('prompt').addEventListener('keydown', (e) => {
  if (e.key === 'Enter' && !e.shiftKey) {
    e.preventDefault();
    $('ask').requestSubmit();
  }
});
for (const id of SETTINGS) $(id).addEventListener('change', saveSettings);
$('key').addEventListener('change', () => { loadModels(); pollRing(); });
loadSettings();
loadModels();
pollRing();
setInterval(pollRing, 5000);
