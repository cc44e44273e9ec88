// The official `@anthropic-ai/sdk` client for Node.js against lares serve's
// Messages API (driven by serve_anthropic_node.sh, which installs the package
// and starts the server). WANT_CHAT is `lares run`'s greedy continuation of
// the chat prompt (from outside the server).
'use strict';
const path = require('path');
const fs = require('fs');
const { Anthropic } = require(path.join(process.env.ANTHROPIC_DIR, 'node_modules', '@anthropic-ai', 'sdk'));

const url = process.env.SERVER_URL;
const key = process.env.API_KEY;
const wantChat = fs.readFileSync(process.env.WANT_CHAT, 'utf8');
let passed = 0;
let failed = 0;

function check(cond, what, detail) {
  if (cond) {
    passed++;
  } else {
    failed++;
    console.error(`serve_anthropic: FAIL: ${what}${detail === undefined ? '' : ': ' + JSON.stringify(detail)}`);
  }
}

async function expectError(what, fn, status, type) {
  try {
    await fn();
    check(false, `${what}: no error`);
  } catch (e) {
    check(e instanceof Anthropic.APIError && e.status === status && (type === undefined || e.error?.error?.type === type),
      `${what}: ${status} ${type || ''}`, { status: e.status, error: e.error, message: e.message });
  }
}

async function main() {
  const client = new Anthropic({ baseURL: url, apiKey: key, maxRetries: 0, timeout: 600000 });
  const hi = { model: 'stories260K', max_tokens: 20, temperature: 0, messages: [{ role: 'user', content: 'Hi' }] };

  const m = await client.messages.create(hi);
  check(m.type === 'message' && m.role === 'assistant' && m.content.length === 1 && m.content[0].type === 'text' &&
        m.content[0].text === wantChat, 'create: text', [m.content, wantChat]);
  check(m.stop_reason === 'max_tokens' && m.stop_sequence === null && m.usage.output_tokens === 20 &&
        m.usage.input_tokens > 0 && m.id.startsWith('msg_'), 'create: stop and usage', m);

  // content as text blocks, and a system prompt (more input tokens, an answer still)
  const blocks = await client.messages.create({ ...hi, messages: [{ role: 'user', content: [{ type: 'text', text: 'Hi' }] }] });
  check(blocks.content[0].text === wantChat, 'create: text blocks', blocks.content);
  const sys = await client.messages.create({ ...hi, system: 'You tell stories.' });
  check(sys.usage.input_tokens > m.usage.input_tokens && sys.content[0].text.length > 0, 'create: system', sys.usage);

  // streaming through the SDK's helper: text events and the final message
  let streamed = '';
  const stream = client.messages.stream(hi);
  stream.on('text', (t) => { streamed += t; });
  const fin = await stream.finalMessage();
  check(streamed === wantChat && fin.content[0].text === wantChat && fin.stop_reason === 'max_tokens' &&
        fin.usage.output_tokens === 20, 'stream: text and final message', [streamed, fin]);
  // the raw events, in order
  const types = [];
  for await (const ev of await client.messages.create({ ...hi, max_tokens: 5, stream: true })) {
    types.push(ev.type);
  }
  check(types[0] === 'message_start' && types[1] === 'content_block_start' &&
        types.slice(2, -3).every((t) => t === 'content_block_delta') && types.length > 5 &&
        types.slice(-3).join() === 'content_block_stop,message_delta,message_stop', 'stream: events', types);

  // a stop sequence: the text ends before it, and the reply names it
  const word = wantChat.trim().split(/\s+/)[2];
  const st = await client.messages.create({ ...hi, stop_sequences: ['zzz', word] });
  check(st.content[0].text === wantChat.slice(0, wantChat.indexOf(word)) && st.stop_reason === 'stop_sequence' &&
        st.stop_sequence === word, 'stop sequence', [word, st]);

  await expectError('unknown model', () => client.messages.create({ ...hi, model: 'claude-sonnet-4' }), 404, 'not_found_error');
  await expectError('no max_tokens', () => client.messages.create({ model: 'lares', messages: hi.messages }), 400, 'invalid_request_error');
  // tools: tool_choice any or a named tool gives a tool_use block whose input validates
  const tools = [{ name: 'get_weather', description: 'The weather in a city',
    input_schema: { type: 'object', properties: { city: { type: 'string', maxLength: 12 } }, required: ['city'], additionalProperties: false } }];
  const ask = { model: 'lares', max_tokens: 60, tools, messages: [{ role: 'user', content: 'Weather in Oslo?' }] };
  const inputOk = (u) => u && u.type === 'tool_use' && u.name === 'get_weather' && typeof u.id === 'string' &&
    typeof u.input.city === 'string' && [...u.input.city].length <= 12 && Object.keys(u.input).length === 1;
  const tu = await client.messages.create({ ...ask, tool_choice: { type: 'any' } });
  check(tu.stop_reason === 'tool_use' && inputOk(tu.content.find((b) => b.type === 'tool_use')), 'tool_use', tu);
  const ts = client.messages.stream({ ...ask, tool_choice: { type: 'tool', name: 'get_weather' } });
  const tfin = await ts.finalMessage();
  check(tfin.stop_reason === 'tool_use' && inputOk(tfin.content.find((b) => b.type === 'tool_use')),
    'tool_use streamed (input_json_delta)', tfin);
  const use = tu.content.find((b) => b.type === 'tool_use');
  const after = await client.messages.create({ ...hi, tools, messages: [...ask.messages, { role: 'assistant', content: tu.content },
    { role: 'user', content: [{ type: 'tool_result', tool_use_id: use.id, content: '12 degrees' }, { type: 'text', text: 'Thanks' }] }] });
  check(after.content.length > 0 && after.usage.input_tokens > tu.usage.input_tokens, 'tool_result accepted', after);
  await expectError('server tools', () => client.messages.create({ ...hi, tools: [{ type: 'web_search_20250305', name: 'web_search' }] }), 400);
  await expectError('image block', () => client.messages.create({ ...hi, messages: [{ role: 'user', content: [{ type: 'image', source: { type: 'base64', media_type: 'image/png', data: 'aGk=' } }] }] }), 400);
  await expectError('bad temperature', () => client.messages.create({ ...hi, temperature: 'hot' }), 400);
  const wrong = new Anthropic({ baseURL: url, apiKey: 'sk-wrong', maxRetries: 0 });
  await expectError('wrong key', () => wrong.messages.create(hi), 401, 'authentication_error');

  console.log(`serve_anthropic: ${passed} passed, ${failed} failed`);
  process.exit(failed === 0 ? 0 : 1);
}

main().catch((e) => {
  console.error('serve_anthropic: FAIL:', e);
  process.exit(1);
});
