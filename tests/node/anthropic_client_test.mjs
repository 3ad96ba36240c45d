// Drives a running prefixd with the official `@anthropic-ai/sdk` npm client
// (installed in tests/node/anthropic by tests/scripts/test_anthropic_client.sh):
// a plain and a streamed message, count_tokens, an error in Anthropic's shape,
// and three turns with cache breakpoints on the system prompt and on the last
// user turn, asserting the cache fields of the usage turn by turn. The daemon
// runs with --min-cache-tokens 32 (the suite's system prompt is longer).
// Usage: node anthropic_client_test.mjs PORT API_KEY MODEL_ID
import assert from 'node:assert/strict';
import { createRequire } from 'node:module';
import { fileURLToPath } from 'node:url';
import path from 'node:path';

const here = path.dirname(fileURLToPath(import.meta.url));
const require = createRequire(path.join(here, 'anthropic', 'package.json'));
const AnthropicModule = require('@anthropic-ai/sdk');
const Anthropic = AnthropicModule.Anthropic ?? AnthropicModule.default ?? AnthropicModule;

const [port, apiKey, model] = process.argv.slice(2);
// The SDK sends the key as x-api-key and adds anthropic-version.
const client = new Anthropic({ baseURL: `http://127.0.0.1:${port}`, apiKey, maxRetries: 0, timeout: 120000 });
const kBlock = 16;  // the daemon's --block-size

let failures = 0;
async function check(name, fn) {
  try {
    await fn();
    console.log(`ok   ${name}`);
  } catch (e) {
    failures++;
    console.log(`FAIL ${name}: ${e && e.stack ? e.stack : e}`);
  }
}

const total = (u) => u.input_tokens + u.cache_read_input_tokens + u.cache_creation_input_tokens;
const question = [{ role: 'user', content: 'Tell me something about the ocean and the waves on the shore.' }];

let plain = null;
await check('messages.create returns a message with text, stop_reason and usage', async () => {
  plain = await client.messages.create({ model, max_tokens: 8, temperature: 0, messages: question });
  assert.equal(plain.type, 'message');
  assert.equal(plain.role, 'assistant');
  assert.equal(plain.content[0].type, 'text');
  assert.ok(['end_turn', 'max_tokens'].includes(plain.stop_reason));
  if (plain.stop_reason === 'max_tokens') assert.equal(plain.usage.output_tokens, 8);
  const counted = await client.messages.countTokens({ model, messages: question });
  assert.equal(total(plain.usage), counted.input_tokens);
});

await check('messages.stream delivers the same text and the final usage', async () => {
  const stream = client.messages.stream({ model, max_tokens: 8, temperature: 0, messages: question });
  const order = [];
  let text = '';
  stream.on('streamEvent', (e) => order.push(e.type));
  stream.on('text', (t) => { text += t; });
  const final = await stream.finalMessage();
  assert.equal(text, plain.content[0].text);
  assert.equal(final.content[0].text, plain.content[0].text);
  assert.equal(final.stop_reason, plain.stop_reason);
  assert.equal(final.usage.output_tokens, plain.usage.output_tokens);
  assert.equal(total(final.usage), total(plain.usage));
  assert.deepEqual(order.slice(0, 2), ['message_start', 'content_block_start']);
  assert.deepEqual(order.slice(-3), ['content_block_stop', 'message_delta', 'message_stop']);
});

await check('a bad cache_control is an APIError 400 naming the field', async () => {
  await assert.rejects(
    client.messages.create({
      model, max_tokens: 4,
      messages: [{ role: 'user', content: [{ type: 'text', text: 'hi', cache_control: { type: 'ephemeral', ttl: '2h' } }] }],
    }),
    (e) => {
      assert.equal(e.status, 400);
      assert.equal(e.error.type, 'error');
      assert.equal(e.error.error.type, 'invalid_request_error');
      assert.match(e.error.error.message, /^messages\.0\.content\.0\.cache_control\.ttl: /);
      return true;
    });
});

const system = [{
  type: 'text',
  text: 'You are a patient guide to the sea. You answer questions about tides, waves, currents, reefs, ' +
        'harbours and the animals of the open ocean in plain words, one short paragraph at a time.',
  cache_control: { type: 'ephemeral', ttl: '1h' },
}];
const questions = [
  'What makes the tide rise twice a day near the coast?',
  'And why are some waves taller than others out at sea?',
  'Which animals live on a coral reef in warm water?',
];
await check('three turns: turn 1 writes the cache, turns 2 and 3 read the previous prefix', async () => {
  const history = [];
  let previousPinned = 0;
  for (let turn = 0; turn < questions.length; turn++) {
    // The breakpoint sits on the newest user turn only.
    const messages = history.map((m) => ({ role: m.role, content: m.content }));
    messages.push({ role: 'user', content: [{ type: 'text', text: questions[turn], cache_control: { type: 'ephemeral' } }] });
    const r = await client.messages.create({ model, max_tokens: 8, temperature: 0, system, messages });
    const u = r.usage;
    const counted = await client.messages.countTokens({ model, system, messages });
    assert.equal(total(u), counted.input_tokens, `turn ${turn + 1}: usage adds up to the prompt`);
    const [sys, last] = u.cache_breakpoints;
    const sysBlocks = Math.floor(sys.position_tokens / kBlock) * kBlock;
    const lastBlocks = Math.floor(last.position_tokens / kBlock) * kBlock;
    if (turn === 0) {
      assert.equal(u.cache_read_input_tokens, 0);
      assert.equal(u.cache_creation_input_tokens, lastBlocks);
      assert.equal(u.cache_creation.ephemeral_1h_input_tokens, sysBlocks);
      assert.equal(u.cache_creation.ephemeral_5m_input_tokens, lastBlocks - sysBlocks);
    } else {
      assert.ok(u.cache_read_input_tokens >= previousPinned,
        `turn ${turn + 1}: read ${u.cache_read_input_tokens} < previous prefix ${previousPinned}`);
      assert.equal(u.cache_creation.ephemeral_1h_input_tokens, 0);
      assert.equal(u.cache_creation_input_tokens, Math.max(0, lastBlocks - u.cache_read_input_tokens));
      assert.equal(sys.status, 'refreshed');
    }
    assert.equal(last.status, 'pinned');
    previousPinned = lastBlocks;
    history.push({ role: 'user', content: questions[turn] });
    history.push({ role: 'assistant', content: r.content[0].text });
    console.log(`     turn ${turn + 1}: input ${u.input_tokens}, cache_read ${u.cache_read_input_tokens}, ` +
                `cache_creation ${u.cache_creation_input_tokens} (5m ${u.cache_creation.ephemeral_5m_input_tokens}, ` +
                `1h ${u.cache_creation.ephemeral_1h_input_tokens})`);
  }
});

if (failures > 0) {
  console.log(`${failures} check(s) failed`);
  process.exit(1);
}
console.log('all checks passed');
