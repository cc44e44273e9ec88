// The page at / in headless Chromium (driven by serve_web.sh): settings,
// a streamed exchange, the stop button, the ring panel, a screenshot.
'use strict';
const path = require('path');
const fs = require('fs');
const { chromium } = require(path.join(process.env.NODE_DIR, 'node_modules', 'playwright-core'));

const url = process.env.SERVER_URL;
const wantChat = fs.readFileSync(process.env.WANT_CHAT, 'utf8');
let passed = 0;
let failed = 0;
function check(cond, what, detail) {
  if (cond) passed++;
  else {
    failed++;
    console.error(`serve_web: FAIL: ${what}${detail === undefined ? '' : ': ' + JSON.stringify(detail)}`);
  }
}

async function metric(name) {
  const r = await fetch(`${url}/metrics`, { headers: { Authorization: `Bearer ${process.env.API_KEY}` } });
  const m = (await r.text()).match(new RegExp(`^${name} (\\S+)$`, 'm'));
  return m ? Number(m[1]) : NaN;
}

async function main() {
  const browser = await chromium.launch({
    executablePath: process.env.CHROMIUM, headless: true,
    args: ['--no-sandbox', '--disable-gpu', '--disable-dev-shm-usage'],
  });
  const page = await browser.newPage({ viewport: { width: 1100, height: 750 } });
  const errors = [];
  page.on('pageerror', (e) => errors.push(e.message));
  page.setDefaultTimeout(120000);
  await page.goto(url + '/');
  await page.waitForFunction(() => /API key/.test(document.getElementById('status').textContent));
  check(true, 'without the key the page says it needs one');
  await page.fill('#key', process.env.API_KEY);
  await page.dispatchEvent('#key', 'change');
  await page.waitForFunction(() => document.querySelector('#model option') !== null);
  check(await page.inputValue('#model') === 'stories260K', 'the model from /v1/models', await page.inputValue('#model'));
  check(await page.isHidden('#ring'), 'no ring: the ring panel is hidden');

  // a real exchange: greedy, 20 tokens, streamed into the page
  await page.fill('#temperature', '0');
  await page.fill('#max_tokens', '20');
  await page.fill('#prompt', 'Hi');
  await page.click('#send');
  await page.waitForSelector('.msg.assistant[data-done]');
  const answer = await page.textContent('.msg.assistant .text');
  check(answer === wantChat, 'the answer is the greedy continuation', [answer, wantChat]);
  check(await page.getAttribute('.msg.assistant', 'data-finish') === 'length', 'finish reason length');
  check(await page.textContent('.msg.user .text') === 'Hi', 'the question in the log');
  check(/20 generated/.test(await page.textContent('#figures')), 'usage shown', await page.textContent('#figures'));
  check(await page.isEnabled('#send') && await page.isDisabled('#stop'), 'buttons back after the answer');
  await page.screenshot({ path: process.env.SHOT, fullPage: true });

  // the stop button: two long answers (a JSON list of 700 numbers each: no early end) hold
  // the one worker, so the page's question waits in the queue when Stop is pressed; the fetch
  // is aborted and the server drops the question (counted as cancelled)
  const before = await metric('lares_requests_canceled_total');
  const blocker = () => fetch(`${url}/v1/chat/completions`, {
    method: 'POST', headers: { Authorization: `Bearer ${process.env.API_KEY}`, 'Content-Type': 'application/json' },
    body: JSON.stringify({ model: 'lares', messages: [{ role: 'user', content: 'Count' }], max_tokens: 1500, seed: 1,
      response_format: { type: 'json_schema', json_schema: { name: 'n', schema: { type: 'array', items: { type: 'integer' }, minItems: 700 } } } }),
  }).then((r) => r.json());
  const blockers = [blocker(), blocker()];
  await page.fill('#max_tokens', '50');
  await page.fill('#prompt', 'Tell me a story');
  await page.click('#send');
  await page.waitForFunction(() => document.getElementById('status').textContent.startsWith('generating'));
  check(await page.isEnabled('#stop') && await page.isDisabled('#send'), 'stop enabled while the answer is pending');
  await page.click('#stop');
  await page.waitForSelector('.msg.assistant:nth-of-type(4)[data-done]');
  check(await page.getAttribute('.msg.assistant:nth-of-type(4)', 'data-finish') === 'stopped', 'stopped');
  check(await page.isEnabled('#send'), 'send enabled again');
  const done = await Promise.all(blockers);
  check(done.every((d) => d.choices && JSON.parse(d.choices[0].message.content).length >= 700), 'the long answers complete');
  let after = before;
  for (let i = 0; i < 300 && after === before; i++) {
    await new Promise((r) => setTimeout(r, 100));
    after = await metric('lares_requests_canceled_total');
  }
  check(after === before + 1, 'the server drops the stopped question', [before, after]);
  // the ring panel shows what /v1/ring answers (here a made-up ring, served by the browser)
  await page.route('**/v1/ring', (route) => route.fulfill({ json: {
    state: 'serving', devices: [{ name: 'laptop', status: 'serving', layers: '0-2' }, { name: 'phone', status: 'lost', layers: '3-4' }] } }));
  await page.dispatchEvent('#key', 'change');
  await page.waitForSelector('#ring:not([hidden])');
  const cells = await page.$$eval('#ring-state td', (tds) => tds.map((t) => t.textContent));
  check(cells.join() === 'laptop,serving,0-2,phone,lost,3-4', 'ring panel: the devices', cells);
  await page.screenshot({ path: process.env.SHOT.replace(/\.png$/, '_ring.png'), fullPage: true });
  await page.unroute('**/v1/ring');
  await page.dispatchEvent('#key', 'change');
  await page.waitForSelector('#ring[hidden]', { state: 'attached' });
  check(true, 'ring panel hidden again when /v1/ring does not answer');
  check(errors.length === 0, 'no errors in the page', errors);
  await browser.close();
  console.log(`serve_web: ${passed} passed, ${failed} failed`);
  process.exit(failed === 0 ? 0 : 1);
}

main().catch((e) => {
  console.error('serve_web: FAIL:', e);
  process.exit(1);
});
