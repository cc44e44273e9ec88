// The official `ollama` client for Node.js against lares serve's Ollama API
// (driven by serve_ollama_node.sh, which installs the package and starts the
// server). Expected texts come from outside the server: WANT_CHAT is `lares
// run`'s greedy continuation of the chat prompt, WANT_COMPLETION the
// reference continuation in ../shared/models/expected.
'use strict';
const path = require('path');
const fs = require('fs');
const { Ollama } = require(path.join(process.env.OLLAMA_DIR, 'node_modules', 'ollama'));

const url = process.env.SERVER_URL;
const wantChat = fs.readFileSync(process.env.WANT_CHAT, 'utf8');
const wantCompletion = process.env.WANT_COMPLETION;
let passed = 0;
let failed = 0;

function check(cond, what, detail) {
  if (cond) {
    passed++;
  } else {
    failed++;
    console.error(`serve_ollama: FAIL: ${what}${detail === undefined ? '' : ': ' + JSON.stringify(detail)}`);
  }
}

async function expectError(what, fn, status, text) {
  try {
    await fn();
    check(false, `${what}: no error`);
  } catch (e) {
    check(e.status_code === status && (text === undefined || e.message.includes(text)),
      `${what}: ${status}`, { status: e.status_code, message: e.message });
  }
}

async function metric(name) {
  const r = await fetch(`${url}/metrics`);
  const m = (await r.text()).match(new RegExp(`^${name} (\\S+)$`, 'm'));
  return m ? Number(m[1]) : NaN;
}

async function main() {
  const ollama = new Ollama({ host: url });
  // greedy and no repeat penalty (Ollama's default is 1.1): the texts lares run gives
  const greedy = { temperature: 0, repeat_penalty: 1 };

  const list = await ollama.list();
  check(list.models.length === 1 && list.models[0].name === 'stories260K:latest' &&
        list.models[0].details.format === 'gguf' && list.models[0].details.family === 'llama' &&
        list.models[0].size > 0, 'list', list);
  const show = await ollama.show({ model: 'stories260K:latest' });
  check(show.model_info['general.architecture'] === 'llama' && show.model_info['llama.embedding_length'] === 64 &&
        show.capabilities.includes('completion'), 'show', show);

  // generate, raw: the prompt as it is; the reference continuation
  const g = await ollama.generate({ model: 'stories260K', prompt: 'Once upon a time', raw: true, options: { ...greedy, num_predict: 48 } });
  check(g.response === wantCompletion && g.done === true && g.done_reason === 'length' && g.eval_count === 48,
    'generate raw', g);
  let text = '';
  let parts = 0;
  let last = null;
  for await (const p of await ollama.generate({ model: 'stories260K', prompt: 'Once upon a time', raw: true, stream: true, options: { ...greedy, num_predict: 48 } })) {
    text += p.response;
    parts++;
    last = p;
  }
  check(text === wantCompletion && parts > 5 && last.done === true && last.done_reason === 'length' &&
        last.eval_count === 48 && last.total_duration > 0, 'generate raw streamed', [text, parts, last]);
  // generate without raw: the prompt as a user turn of the template, as chat
  const gt = await ollama.generate({ model: 'stories260K', prompt: 'Hi', options: { ...greedy, num_predict: 20 } });
  check(gt.response === wantChat, 'generate through the template', [gt.response, wantChat]);

  const c = await ollama.chat({ model: 'stories260K', messages: [{ role: 'user', content: 'Hi' }], options: { ...greedy, num_predict: 20 } });
  check(c.message.role === 'assistant' && c.message.content === wantChat && c.done === true, 'chat', c);
  text = '';
  parts = 0;
  for await (const p of await ollama.chat({ model: 'stories260K:latest', messages: [{ role: 'user', content: 'Hi' }], stream: true, options: { ...greedy, num_predict: 20 } })) {
    text += p.message.content;
    parts++;
    last = p;
  }
  check(text === wantChat && parts > 5 && last.done === true && last.eval_count === 20, 'chat streamed', [text, parts, last]);

  const seeded = { model: 'stories260K', messages: [{ role: 'user', content: 'Tell me a story' }] };
  const a = await ollama.chat({ ...seeded, options: { seed: 11, temperature: 1, num_predict: 30 } });
  const b = await ollama.chat({ ...seeded, options: { seed: 11, temperature: 1, num_predict: 30 } });
  check(a.message.content === b.message.content && a.message.content.length > 0, 'same seed, same text');

  await expectError('unknown model', () => ollama.chat({ model: 'llama3.2', messages: [{ role: 'user', content: 'Hi' }] }), 404, 'llama3.2');
  await expectError('show unknown model', () => ollama.show({ model: 'llama3.2' }), 404, 'llama3.2');
  // format: "json" and a schema constrain the output
  const fj = await ollama.chat({ ...seeded, format: 'json', options: { seed: 5, num_predict: 40 } });
  let fo = null;
  try { fo = JSON.parse(fj.message.content); } catch (e) { /* checked below */ }
  check(fo !== null && typeof fo === 'object' && !Array.isArray(fo), 'format json parses', fj.message.content);
  const fs2 = await ollama.generate({ model: 'lares', prompt: 'Count', stream: false, options: { seed: 5, num_predict: 40 },
    format: { type: 'array', items: { type: 'integer' }, minItems: 2, maxItems: 5 } });
  let fa = null;
  try { fa = JSON.parse(fs2.response); } catch (e) { /* checked below */ }
  check(Array.isArray(fa) && fa.length >= 2 && fa.length <= 5 && fa.every(Number.isInteger), 'format schema validates', fs2.response);
  await expectError('format', () => ollama.chat({ ...seeded, format: 'yaml' }), 400, 'format');
  // tools: accepted with a call and its result in the conversation; the answer is text or parsed calls
  const otools = [{ type: 'function', function: { name: 'get_weather', parameters: { type: 'object', properties: { city: { type: 'string' } }, required: ['city'] } } }];
  const oc = await ollama.chat({ model: 'lares', tools: otools, options: { seed: 3, num_predict: 10 }, messages: [
    { role: 'user', content: 'Weather?' },
    { role: 'assistant', content: '', tool_calls: [{ function: { name: 'get_weather', arguments: { city: 'Oslo' } } }] },
    { role: 'tool', content: '12 degrees' }] });
  check(oc.done === true && typeof oc.message.content === 'string' &&
        (oc.message.tool_calls === undefined || oc.message.tool_calls.every((c) => c.function.name === 'get_weather')),
  'tools and a tool message accepted', oc.message);
  await expectError('tools on generate', () => ollama.generate({ model: 'lares', prompt: 'x', tools: otools }), 400, 'tools');
  await expectError('format schema', () => ollama.chat({ ...seeded, format: { type: 'string', format: 'email' } }), 400, 'not supported');
  await expectError('images', () => ollama.chat({ model: 'lares', messages: [{ role: 'user', content: 'What is it?', images: ['aGVsbG8='] }] }), 400, 'images');
  await expectError('bad option', () => ollama.generate({ model: 'lares', prompt: 'x', options: { temperature: 'hot' } }), 400, 'temperature');

  // aborting a stream cancels the generation
  const before = await metric('lares_requests_canceled_total');
  const long = await ollama.generate({ model: 'lares', prompt: 'Once upon a time', raw: true, stream: true, options: { ...greedy, num_predict: 1900 } });
  let got = 0;
  try {
    for await (const p of long) {
      if (++got === 3) long.abort();
    }
  } catch (e) {
    check(e.name === 'AbortError', 'abort error', e.message);
  }
  let after = before;
  for (let i = 0; i < 100 && after === before; i++) {
    await new Promise((r) => setTimeout(r, 100));
    after = await metric('lares_requests_canceled_total');
  }
  check(after === before + 1, 'abort cancels the generation', [before, after]);

  console.log(`serve_ollama: ${passed} passed, ${failed} failed`);
  process.exit(failed === 0 ? 0 : 1);
}

main().catch((e) => {
  console.error('serve_ollama: FAIL:', e);
  process.exit(1);
});
