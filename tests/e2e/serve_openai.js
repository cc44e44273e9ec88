// The official `openai` client for Node.js against lares serve (driven by
// serve_openai_node.sh, which installs the package and starts the server).
// Expected texts come from outside the server: WANT_CHAT is `lares run`'s
// greedy continuation of the chat prompt, WANT_COMPLETION the reference
// continuation in ../shared/models/expected.
'use strict';
const path = require('path');
const fs = require('fs');
const { OpenAI } = require(path.join(process.env.OPENAI_DIR, 'node_modules', 'openai'));

const url = process.env.SERVER_URL;
const key = process.env.API_KEY;
const wantChat = fs.readFileSync(process.env.WANT_CHAT, 'utf8');
const wantCompletion = process.env.WANT_COMPLETION;
let passed = 0;
let failed = 0;

function check(cond, what, detail) {
  if (cond) {
    passed++;
  } else {
    failed++;
    console.error(`serve_openai: FAIL: ${what}${detail === undefined ? '' : ': ' + JSON.stringify(detail)}`);
  }
}

async function expectError(what, fn, status, code) {
  try {
    await fn();
    check(false, `${what}: no error`);
  } catch (e) {
    check(e instanceof OpenAI.APIError && e.status === status && (code === undefined || e.code === code),
      `${what}: ${status} ${code || ''}`, { status: e.status, code: e.code, message: e.message });
  }
}

async function metric(name) {
  const r = await fetch(`${url}/metrics`, { headers: { Authorization: `Bearer ${key}` } });
  const m = (await r.text()).match(new RegExp(`^${name} (\\S+)$`, 'm'));
  return m ? Number(m[1]) : NaN;
}

async function main() {
  const client = new OpenAI({ baseURL: `${url}/v1`, apiKey: key, maxRetries: 0, timeout: 600000 });
  const chat = { model: 'stories260K', messages: [{ role: 'user', content: 'Hi' }], max_tokens: 20, temperature: 0 };

  const models = await client.models.list();
  check(models.data.length === 1 && models.data[0].id === 'stories260K', 'models.list', models.data);

  const c = await client.chat.completions.create(chat);
  check(c.choices[0].message.content === wantChat, 'chat text', [c.choices[0].message.content, wantChat]);
  check(c.choices[0].finish_reason === 'length' && c.usage.completion_tokens === 20, 'chat usage', c.usage);

  let streamed = '';
  let usage = null;
  let chunks = 0;
  const stream = await client.chat.completions.create({ ...chat, stream: true, stream_options: { include_usage: true } });
  for await (const ch of stream) {
    chunks++;
    if (ch.choices.length > 0 && ch.choices[0].delta.content) streamed += ch.choices[0].delta.content;
    if (ch.usage) usage = ch.usage;
  }
  check(streamed === wantChat && chunks > 5, 'streamed chat', [streamed, chunks]);
  check(usage && usage.completion_tokens === 20 && usage.prompt_tokens === c.usage.prompt_tokens &&
        usage.prompt_tokens_details.cached_tokens === c.usage.prompt_tokens - 1, 'streamed usage', usage);

  const t = await client.completions.create({ model: 'lares', prompt: 'Once upon a time', max_tokens: 48, temperature: 0 });
  check(t.choices[0].text === wantCompletion, 'completion text', t.choices[0].text);
  const s = await client.completions.create({ model: 'lares', prompt: 'Once upon a time', max_tokens: 48, temperature: 0, stop: ['Lily. She'] });
  check(s.choices[0].text === wantCompletion.split('Lily. She')[0] && s.choices[0].finish_reason === 'stop', 'stop string', s.choices[0]);

  const seeded = { model: 'lares', messages: [{ role: 'user', content: 'Tell me a story' }], max_tokens: 30, temperature: 1 };
  const a = await client.chat.completions.create({ ...seeded, seed: 11 });
  const b = await client.chat.completions.create({ ...seeded, seed: 11 });
  const d = await client.chat.completions.create({ ...seeded, seed: 12 });
  check(a.choices[0].message.content === b.choices[0].message.content, 'same seed, same text');
  check(a.choices[0].message.content !== d.choices[0].message.content, 'other seed, other text');

  // n > 1: choices one after the other, choice i seeded with seed + i
  const many = await client.chat.completions.create({ ...seeded, max_tokens: 10, seed: 11, n: 3 });
  check(many.choices.length === 3 && many.choices.every((ch, i) => ch.index === i &&
        ['length', 'stop'].includes(ch.finish_reason) && typeof ch.message.content === 'string'),
    'n = 3: three choices', many.choices);
  const one = await client.chat.completions.create({ ...seeded, max_tokens: 10, seed: 11 });
  check(many.choices[0].message.content === one.choices[0].message.content, 'n = 3: choice 0 is the n = 1 answer',
    [many.choices[0].message.content, one.choices[0].message.content]);
  check(new Set(many.choices.map((ch) => ch.message.content)).size > 1, 'n = 3: the choices differ');
  check(many.usage.completion_tokens >= 3 && many.usage.completion_tokens <= 30 &&
        many.usage.prompt_tokens === one.usage.prompt_tokens, 'n = 3: usage', many.usage);
  const parts = ['', ''];
  const finished = [null, null];
  const nstream = await client.completions.create({ model: 'lares', prompt: 'Once upon a time', max_tokens: 12, temperature: 1, seed: 3, n: 2, stream: true });
  for await (const ch of nstream) {
    for (const c of ch.choices) {
      parts[c.index] += c.text;
      if (c.finish_reason) finished[c.index] = c.finish_reason;
    }
  }
  const nplain = await client.completions.create({ model: 'lares', prompt: 'Once upon a time', max_tokens: 12, temperature: 1, seed: 3, n: 2 });
  check(nplain.choices.length === 2 && parts[0] === nplain.choices[0].text && parts[1] === nplain.choices[1].text &&
        finished.every((f) => f === 'length' || f === 'stop'), 'n = 2 streamed by index', [parts, nplain.choices]);
  await expectError('n = 17', () => client.chat.completions.create({ ...chat, n: 17 }), 400);

  // embeddings: the client asks for base64 by default and decodes it; float gives the same numbers
  const texts = ['Once upon a time', 'Once upon a time', 'The dog ran to the park.'];
  const emb = await client.embeddings.create({ model: 'lares', input: texts });
  const norm = (v) => Math.sqrt(v.reduce((s, x) => s + x * x, 0));
  const dot = (a, b) => a.reduce((s, x, i) => s + x * b[i], 0);
  check(emb.object === 'list' && emb.data.length === 3 && emb.data.every((d, i) => d.index === i &&
        d.object === 'embedding' && d.embedding.length === Number(process.env.N_EMBD)),
    'embeddings: shape', emb.data.map((d) => [d.index, d.embedding.length]));
  check(emb.data.every((d) => Math.abs(norm(d.embedding) - 1) < 1e-5), 'embeddings: unit length',
    emb.data.map((d) => norm(d.embedding)));
  check(emb.data[0].embedding.every((x, i) => x === emb.data[1].embedding[i]), 'embeddings: same text, same vector');
  check(dot(emb.data[0].embedding, emb.data[2].embedding) < 0.9999, 'embeddings: other text, other vector');
  check(emb.usage.prompt_tokens === Number(process.env.EMBED_TOKENS) && emb.usage.total_tokens === emb.usage.prompt_tokens,
    'embeddings: usage', emb.usage);
  const flt = await client.embeddings.create({ model: 'lares', input: texts[2], encoding_format: 'float' });
  // 9 significant digits in JSON name one float32 exactly: Math.fround gives it back
  check(flt.data.length === 1 && flt.data[0].embedding.every((x, i) => Math.fround(x) === emb.data[2].embedding[i]),
    'embeddings: float equals base64');
  const ids = JSON.parse(process.env.STORY_IDS);
  const byIds = await client.embeddings.create({ model: 'lares', input: [ids], encoding_format: 'float' });
  check(byIds.data[0].embedding.every((x, i) => Math.fround(x) === emb.data[0].embedding[i]), 'embeddings: token ids equal the text');
  // a generation after embeddings is unchanged (the context was re-evaluated)
  const again = await client.completions.create({ model: 'lares', prompt: 'Once upon a time', max_tokens: 48, temperature: 0 });
  check(again.choices[0].text === wantCompletion, 'completion after embeddings', again.choices[0].text);
  await expectError('embeddings: empty', () => client.embeddings.create({ model: 'lares', input: '' }), 400);
  await expectError('embeddings: dimensions', () => client.embeddings.create({ model: 'lares', input: 'x', dimensions: 5 }), 400);
  await expectError('embeddings: too long', () => client.embeddings.create({ model: 'lares', input: [new Array(3000).fill(1)] }),
    400, 'context_length_exceeded');
  await expectError('embeddings: model', () => client.embeddings.create({ model: 'text-embedding-3-small', input: 'x' }),
    404, 'model_not_found');

  const lp = await client.chat.completions.create({ ...chat, max_tokens: 8, logprobs: true, top_logprobs: 3 });
  const content = lp.choices[0].logprobs.content;
  check(content.length === 8 && content.every((x) => x.logprob <= 0 && x.top_logprobs.length === 3),
    'logprobs', content);

  await expectError('unknown model', () => client.chat.completions.create({ ...chat, model: 'gpt-4o' }), 404, 'model_not_found');
  await expectError('context', () => client.completions.create({ model: 'lares', prompt: 'x', max_tokens: 100000 }), 400, 'context_length_exceeded');
  await expectError('bad type', () => client.chat.completions.create({ ...chat, temperature: 'hot' }), 400);
  const wrong = new OpenAI({ baseURL: `${url}/v1`, apiKey: 'sk-wrong', maxRetries: 0 });
  await expectError('wrong key', () => wrong.models.list(), 401, 'invalid_api_key');

  // cancellation: abort a long stream after a few chunks; the server stops generating
  const before = await metric('lares_requests_canceled_total');
  const ac = new AbortController();
  let got = 0;
  try {
    const long = await client.completions.create(
      { model: 'lares', prompt: 'Once upon a time', max_tokens: 1900, temperature: 0, stream: true },
      { signal: ac.signal });
    for await (const ch of long) {
      if (++got === 3) ac.abort();
    }
  } catch (e) {
    check(e instanceof OpenAI.APIUserAbortError, 'abort error', e.message);
  }
  let after = before;
  for (let i = 0; i < 100 && after === before; i++) {
    await new Promise((r) => setTimeout(r, 100));
    after = await metric('lares_requests_canceled_total');
  }
  check(after === before + 1, 'abort cancels the generation', [before, after]);
  const next = await client.completions.create({ model: 'lares', prompt: 'Hi', max_tokens: 3 });
  check(next.choices.length === 1, 'request after an abort');

  // structured output: whatever the tiny model writes parses and validates
  const schema = {
    type: 'object',
    properties: {
      name: { type: 'string', minLength: 1, maxLength: 12 },
      age: { type: 'integer' },
      mood: { enum: ['happy', 'sad', 42] },
      pets: { type: 'array', items: { type: 'object', properties: { kind: { type: 'string' }, legs: { type: 'number' } }, required: ['kind', 'legs'] }, maxItems: 2 },
      nick: { type: ['string', 'null'] },
    },
    required: ['name', 'age', 'mood', 'pets', 'nick'],
    additionalProperties: false,
  };
  const valid = (v) => v !== null && typeof v === 'object' && !Array.isArray(v) &&
    Object.keys(v).every((k) => k in schema.properties) &&
    typeof v.name === 'string' && [...v.name].length >= 1 && [...v.name].length <= 12 &&
    Number.isInteger(v.age) && ['happy', 'sad', 42].includes(v.mood) &&
    Array.isArray(v.pets) && v.pets.length <= 2 &&
    v.pets.every((p) => typeof p.kind === 'string' && typeof p.legs === 'number' && Object.keys(p).length === 2) &&
    (v.nick === null || typeof v.nick === 'string');
  for (const seed of [1, 2, 3]) {
    const r = await client.chat.completions.create({
      model: 'lares', messages: [{ role: 'user', content: 'Describe a person as JSON' }], seed, max_tokens: 80,
      response_format: { type: 'json_schema', json_schema: { name: 'person', strict: true, schema } },
    });
    let v = null;
    try { v = JSON.parse(r.choices[0].message.content); } catch (e) { /* checked below */ }
    check(valid(v), `json_schema seed ${seed} parses and validates`, r.choices[0].message.content);
  }
  let jsonText = '';
  const js = await client.chat.completions.create({
    model: 'lares', messages: [{ role: 'user', content: 'Hi' }], seed: 7, max_tokens: 40, stream: true,
    response_format: { type: 'json_object' },
  });
  for await (const ch of js) if (ch.choices.length > 0 && ch.choices[0].delta.content) jsonText += ch.choices[0].delta.content;
  let jo = null;
  try { jo = JSON.parse(jsonText); } catch (e) { /* checked below */ }
  check(jo !== null && typeof jo === 'object' && !Array.isArray(jo), 'json_object streamed, closed within max_tokens', jsonText);
  await expectError('json_schema with pattern', () => client.chat.completions.create({
    model: 'lares', messages: [{ role: 'user', content: 'Hi' }],
    response_format: { type: 'json_schema', json_schema: { name: 'x', schema: { type: 'string', pattern: '^a' } } },
  }), 400);

  // tools: a forced call is generated under the call's schema and comes back parsed
  const tools = [
    { type: 'function', function: { name: 'get_weather', description: 'The weather in a city',
      parameters: { type: 'object', properties: { city: { type: 'string', maxLength: 12 }, unit: { enum: ['C', 'F'] } },
        required: ['city', 'unit'], additionalProperties: false } } },
    { type: 'function', function: { name: 'get_time', parameters: { type: 'object', properties: { zone: { type: 'integer' } }, required: ['zone'] } } },
  ];
  const ask = { model: 'lares', messages: [{ role: 'user', content: 'What is the weather in Oslo?' }], tools, max_tokens: 60 };
  const tc = await client.chat.completions.create({ ...ask, tool_choice: 'required', seed: 4 });
  const call = tc.choices[0].message.tool_calls && tc.choices[0].message.tool_calls[0];
  let args = null;
  try { args = JSON.parse(call.function.arguments); } catch (e) { /* checked below */ }
  const argsOk = (name, a) => a !== null && typeof a === 'object' && (name === 'get_weather'
    ? typeof a.city === 'string' && [...a.city].length <= 12 && ['C', 'F'].includes(a.unit) && Object.keys(a).length === 2
    : Number.isInteger(a.zone) && Object.keys(a).length === 1);
  check(tc.choices[0].finish_reason === 'tool_calls' && call && call.type === 'function' && typeof call.id === 'string' &&
        ['get_weather', 'get_time'].includes(call.function.name) && argsOk(call.function.name, args),
  'tool_choice required: a parsed, valid call', tc.choices[0]);
  // streamed, a named function: deltas with an index, assembled as the client does
  const calls = {};
  let finish = null;
  const ts = await client.chat.completions.create({ ...ask, tool_choice: { type: 'function', function: { name: 'get_time' } }, seed: 5, stream: true });
  for await (const ch of ts) {
    if (ch.choices.length === 0) continue;
    for (const d of ch.choices[0].delta.tool_calls || []) {
      const p = calls[d.index] || (calls[d.index] = { name: '', args: '' });
      if (d.function && d.function.name) p.name += d.function.name;
      if (d.function && d.function.arguments) p.args += d.function.arguments;
    }
    if (ch.choices[0].finish_reason) finish = ch.choices[0].finish_reason;
  }
  let targs = null;
  try { targs = JSON.parse(calls[0].args); } catch (e) { /* checked below */ }
  check(finish === 'tool_calls' && calls[0] && calls[0].name === 'get_time' && argsOk('get_time', targs),
    'named tool streamed with an index', [calls, finish]);
  // the call and its result go back in the conversation; tool_choice none gives text
  const back = await client.chat.completions.create({
    ...ask, seed: 6, max_tokens: 8, tool_choice: 'none',
    messages: [...ask.messages, tc.choices[0].message, { role: 'tool', tool_call_id: call.id, content: '12 degrees' }],
  });
  check(typeof back.choices[0].message.content === 'string' && !back.choices[0].message.tool_calls,
    'tool result accepted, text answer', back.choices[0]);
  await expectError('tool_choice names an unknown tool', () => client.chat.completions.create({
    ...ask, tool_choice: { type: 'function', function: { name: 'nope' } } }), 400);
  await expectError('tool parameters with a pattern', () => client.chat.completions.create({
    ...ask, tools: [{ type: 'function', function: { name: 'f', parameters: { type: 'string', pattern: 'x' } } }] }), 400);

  // the queue holds one: a burst gets clean 503s next to 200s
  let ok200 = 0;
  let busy = 0;
  for (let burst = 0; burst < 5 && busy === 0; burst++) {
    const rs = await Promise.allSettled(Array.from({ length: 8 }, () =>
      client.completions.create({ model: 'lares', prompt: 'Once upon a time', max_tokens: 400, temperature: 0 })));
    for (const r of rs) {
      if (r.status === 'fulfilled') ok200++;
      else if (r.reason instanceof OpenAI.APIError && r.reason.status === 503 && r.reason.code === 'queue_full') busy++;
      else check(false, 'burst: unexpected', r.reason && r.reason.message);
    }
  }
  check(busy > 0 && ok200 > 0, 'queue full gives 503 next to 200', [ok200, busy]);

  console.log(`serve_openai: ${passed} passed, ${failed} failed`);
  process.exit(failed === 0 ? 0 : 1);
}

main().catch((e) => {
  console.error('serve_openai: FAIL:', e);
  process.exit(1);
});
