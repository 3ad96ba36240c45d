// Browser test of prefixd's /dashboard: headless Debian chromium driven by
// playwright-core. Logs in with the API key, runs a workload of 4 shared
// system prompts while the page polls, checks that the charts have data and
// that the prefix table lists the warmed system prompt, pins it with the
// page's button and checks /v1/cache/stats, then saves a screenshot.
// Usage: node dashboard_test.mjs BASE_URL API_KEY SCREENSHOT_PATH
import { chromium } from 'playwright-core';

const [baseUrl, apiKey, screenshotPath] = process.argv.slice(2);
if (!baseUrl || !apiKey || !screenshotPath) {
  console.error('usage: node dashboard_test.mjs BASE_URL API_KEY SCREENSHOT_PATH');
  process.exit(2);
}

const SYSTEMS = [
  'You are the support assistant of the Acme Rocket Company. Answer questions about rocket skates, anvils and giant magnets politely, briefly and accurately.',
  'You are a legal research helper. Cite the statute, the section and the year for every claim, and say clearly when the law is unsettled or varies by state.',
  'You are a cooking coach for beginners. Explain each step of a recipe in plain words, give metric and imperial amounts, and warn about common mistakes.',
  'You are a travel planner for rail journeys across Europe. Suggest routes with train numbers, changes and seat reservations, and mention night trains.',
];
const QUESTIONS = ['What should I know first?', 'Give me three tips.', 'What is the most common mistake?',
  'How do I start?', 'Can you summarise that?', 'What would you avoid?'];
const auth = { Authorization: 'Bearer ' + apiKey };

function fail(message) {
  throw new Error(message);
}

async function api(path, init = {}) {
  const res = await fetch(baseUrl + path, { ...init, headers: { ...(init.headers || {}), ...auth } });
  const body = await res.json();
  if (!res.ok) fail(`${init.method || 'GET'} ${path} -> ${res.status} ${JSON.stringify(body)}`);
  return body;
}

async function chat(system, question) {
  return api('/v1/chat/completions', {
    method: 'POST',
    headers: { 'Content-Type': 'application/json' },
    body: JSON.stringify({ messages: [{ role: 'system', content: system }, { role: 'user', content: question }],
                           max_tokens: 4, temperature: 0 }),
  });
}

// Two clients sending requests round-robin over the system prompts until stopped.
function startWorkload() {
  let stop = false;
  let sent = 0;
  const client = async (offset) => {
    for (let i = offset; !stop; i += 2) {
      await chat(SYSTEMS[i % SYSTEMS.length], QUESTIONS[Math.floor(i / SYSTEMS.length) % QUESTIONS.length]);
      sent++;
      await new Promise((r) => setTimeout(r, 100));
    }
  };
  const done = Promise.all([client(0), client(1)]);
  return { stop: async () => { stop = true; await done; return sent; }, sent: () => sent };
}

async function waitFor(page, what, fn, arg, timeoutMs = 30000) {
  try {
    await page.waitForFunction(fn, arg, { timeout: timeoutMs, polling: 200 });
  } catch (e) {
    fail(`timed out waiting for ${what}`);
  }
}

const browser = await chromium.launch({
  executablePath: '/usr/bin/chromium',
  headless: true,
  args: ['--headless', '--no-sandbox', '--disable-gpu', '--disable-background-networking',
         '--disable-component-update', '--disable-sync', '--no-first-run'],
});
let exitCode = 0;
let workload = null;
try {
  const page = await browser.newPage({ viewport: { width: 1500, height: 1100 } });
  const pageErrors = [];
  const foreignRequests = [];
  page.on('pageerror', (e) => pageErrors.push(String(e)));
  page.on('console', (m) => { if (m.type() === 'error') pageErrors.push('console: ' + m.text()); });
  page.on('request', (r) => { if (!r.url().startsWith(baseUrl)) foreignRequests.push(r.url()); });

  // Warm the first system prompt, then keep traffic flowing while the page runs.
  await chat(SYSTEMS[0], QUESTIONS[0]);
  await chat(SYSTEMS[0], QUESTIONS[1]);
  workload = startWorkload();

  // Without the key the page is the 401 key form; with it, the dashboard.
  const first = await page.goto(baseUrl + '/dashboard');
  if (first.status() !== 401) fail(`GET /dashboard without a key: expected 401, got ${first.status()}`);
  await page.fill('#key', apiKey);
  await page.click('button[type=submit]');
  await waitFor(page, 'the dashboard to load', () => !!window.prefixdDashboard);
  // The 401 of the first navigation is expected; count errors from here on.
  pageErrors.length = 0;
  const chartsBundled = await page.evaluate(() => document.body.dataset.chartsBundled === 'true');
  console.log(`dashboard loaded (charts bundled: ${chartsBundled})`);

  // Every chart shown has data points (the state snapshot chart is hidden for
  // a model without them); the hit-ratio series shows device hits.
  await waitFor(page, 'data in every chart', () =>
    [...document.querySelectorAll('.chart:not([hidden])')].every((c) => Number(c.dataset.points || 0) > 0));
  if (await page.evaluate(() => !document.querySelector('#chart-snapshots').hidden ||
                                !document.querySelector('#tile-snapshots-box').hidden)) {
    fail('the state snapshot chart or tile is shown for a model without snapshots');
  }
  await waitFor(page, 'a device hit in the history', () =>
    window.prefixdDashboard.state.samples.some((s) => s.cached_tokens.device > 0));
  await waitFor(page, 'TTFT of hits', () =>
    window.prefixdDashboard.state.samples.some((s) => s.ttft_ms.hit_p50 != null));
  if (chartsBundled) {
    const canvases = await page.evaluate(() =>
      [...document.querySelectorAll('.chart:not([hidden])')].map((c) => c.querySelectorAll('canvas').length));
    if (canvases.some((n) => n === 0)) fail(`a chart has no canvas: ${canvases}`);
    const banner = await page.isVisible('#no-charts');
    if (banner) fail('the no-charts banner shows although uPlot was bundled');
  } else {
    if (!(await page.isVisible('#no-charts'))) fail('tables-only build without the banner that says so');
  }

  // The prefix table lists the warmed system prompt, with hits.
  const warmed = SYSTEMS[0].slice(0, 40);
  await waitFor(page, 'the warmed system prompt in the prefix table', (text) =>
    [...document.querySelectorAll('#prefix-table tbody tr[data-prefix-id]')].some((tr) =>
      tr.querySelector('td.preview').textContent.includes(text) &&
      Number(tr.children[3].textContent.split('/')[0]) >= 1), warmed);
  const row = page.locator('#prefix-table tbody tr[data-prefix-id]', { hasText: warmed }).first();
  const prefixId = await row.getAttribute('data-prefix-id');
  const tokens = Number(await row.getAttribute('data-tokens'));
  console.log(`prefix ${prefixId}: ${tokens} tokens, row: ${(await row.innerText()).replace(/\s+/g, ' ')}`);
  if (!(tokens >= 16)) fail(`the warmed prefix should span at least one block, has ${tokens} tokens`);

  // Pin it with the page's button; the engine reports pinned blocks.
  const before = await api('/v1/cache/stats');
  if (before.tiers.device.blocks_pinned !== 0) fail('blocks are pinned before the test pinned any');
  await row.locator('button[data-action=pin]').click();
  await waitFor(page, 'the row to show pinned', (id) => {
    const tr = document.querySelector(`#prefix-table tr[data-prefix-id="${id}"]`);
    return tr && tr.dataset.pinned === 'true';
  }, prefixId);
  const after = await api('/v1/cache/stats');
  console.log(`pinned blocks: ${before.tiers.device.blocks_pinned} -> ${after.tiers.device.blocks_pinned}`);
  if (!(after.tiers.device.blocks_pinned > 0)) fail('pin did not pin any block');
  if (after.tiers.device.blocks_pinned !== tokens / (after.block_size)) {
    fail(`expected ${tokens / after.block_size} pinned blocks, got ${after.tiers.device.blocks_pinned}`);
  }
  await waitFor(page, 'the pinned-blocks tile', (n) =>
    document.getElementById('tile-pinned').textContent.trim() === String(n), after.tiers.device.blocks_pinned);

  // A cache breakpoint (Anthropic's /v1/messages) pins its prefix for 1h: the TTL table lists it.
  const message = await api('/v1/messages', {
    method: 'POST',
    headers: { 'Content-Type': 'application/json' },
    body: JSON.stringify({ model: 'demo', max_tokens: 2, temperature: 0,
                           system: [{ type: 'text', text: SYSTEMS[1], cache_control: { type: 'ephemeral', ttl: '1h' } }],
                           messages: [{ role: 'user', content: 'Hi' }] }),
  });
  const breakpoint = message.usage.cache_breakpoints[0];
  if (breakpoint.status !== 'pinned') fail(`the breakpoint was not pinned: ${JSON.stringify(breakpoint)}`);
  await waitFor(page, 'the 1h TTL pin in the TTL table', (n) =>
    [...document.querySelectorAll('#ttl-pin-table tbody tr[data-ttl="1h"]')].some((tr) =>
      Number(tr.children[1].textContent) === n && /\d+ min$/.test(tr.children[3].textContent.trim())),
    breakpoint.pinned_tokens);
  console.log('ttl pin row: ' + (await page.locator('#ttl-pin-table tbody tr').first().innerText()).replace(/\s+/g, ' '));

  const sent = await workload.stop();
  workload = null;
  await page.waitForTimeout(1500);  // one more refresh with the final figures
  await page.screenshot({ path: screenshotPath, fullPage: true });
  console.log(`workload: ${sent} requests; screenshot: ${screenshotPath}`);
  const summary = await page.evaluate(() => ({
    tiles: [...document.querySelectorAll('.tile')].map((t) => t.innerText.replace(/\s+/g, ' ')),
    prefixes: [...document.querySelectorAll('#prefix-table tbody tr')].map((tr) => tr.innerText.replace(/\s+/g, ' ')),
    ttl_pins: [...document.querySelectorAll('#ttl-pin-table tbody tr')].map((tr) => tr.innerText.replace(/\s+/g, ' ')),
  }));
  console.log(JSON.stringify(summary, null, 1));
  if (pageErrors.length) fail('errors in the page: ' + pageErrors.join('; '));
  if (foreignRequests.length) fail('the page fetched from elsewhere: ' + foreignRequests.join(', '));
  console.log('ok');
} catch (e) {
  console.error('FAIL: ' + e.message);
  exitCode = 1;
} finally {
  if (workload) await workload.stop().catch(() => {});
  await browser.close();
}
process.exit(exitCode);
