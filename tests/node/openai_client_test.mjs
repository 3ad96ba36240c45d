// Drives a running prefixd with the official `openai` npm client (installed in
// tests/node/openai by tests/scripts/test_openai_client.sh): completions, chat,
// streaming with usage, cached tokens on a repeated prefix, logprobs, and errors.
// Usage: node openai_client_test.mjs PORT API_KEY MODEL_ID
import assert from 'node:assert/strict';
import { createRequire } from 'node:module';
import { fileURLToPath } from 'node:url';
import path from 'node:path';

const here = path.dirname(fileURLToPath(import.meta.url));
const require = createRequire(path.join(here, 'openai', 'package.json'));
const { OpenAI } = require('openai');

const [port, apiKey, model] = process.argv.slice(2);
const baseURL = `http://127.0.0.1:${port}/v1`;
const client = new OpenAI({ baseURL, apiKey, maxRetries: 0, timeout: 120000 });

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

function checkUsage(usage, completionTokens) {
  assert.ok(usage, 'usage present');
  assert.equal(usage.completion_tokens, completionTokens);
  assert.ok(Number.isInteger(usage.prompt_tokens) && usage.prompt_tokens > 0);
  assert.equal(usage.total_tokens, usage.prompt_tokens + usage.completion_tokens);
  assert.ok(Number.isInteger(usage.prompt_tokens_details.cached_tokens));
}

const messages = [
  { role: 'system', content: 'You are a helpful assistant who answers in one short sentence about the sea.' },
  { role: 'user', content: 'Tell me something about the ocean and the waves on the shore.' },
];
// ignore_eos (a prefixd extension) makes the output length exact.
const sampling = { max_tokens: 8, temperature: 0, ignore_eos: true };

await check('models.list returns the served model', async () => {
  const list = await client.models.list();
  assert.equal(list.data.length, 1);
  assert.equal(list.data[0].id, model);
  assert.equal(list.data[0].owned_by, 'prefixd');
});

let plainText = null;
await check('completions.create returns text, finish_reason and usage', async () => {
  const r = await client.completions.create({ model, prompt: 'Once upon a time', ...sampling });
  assert.equal(r.object, 'text_completion');
  assert.equal(r.choices.length, 1);
  assert.equal(typeof r.choices[0].text, 'string');
  assert.equal(r.choices[0].finish_reason, 'length');
  checkUsage(r.usage, 8);
  plainText = r.choices[0].text;
});

await check('streamed completion concatenates to the plain text and carries usage', async () => {
  const stream = await client.completions.create({
    model, prompt: 'Once upon a time', ...sampling, stream: true, stream_options: { include_usage: true },
  });
  let text = '';
  let usage = null;
  let finish = null;
  for await (const chunk of stream) {
    if (chunk.usage) usage = chunk.usage;
    for (const c of chunk.choices) {
      text += c.text;
      if (c.finish_reason) finish = c.finish_reason;
    }
  }
  assert.equal(text, plainText);
  assert.equal(finish, 'length');
  checkUsage(usage, 8);
});

let chatContent = null;
let chatPromptTokens = 0;
await check('chat.completions.create returns an assistant message and usage', async () => {
  const r = await client.chat.completions.create({ model, messages, ...sampling });
  assert.equal(r.object, 'chat.completion');
  assert.equal(r.choices[0].message.role, 'assistant');
  assert.equal(typeof r.choices[0].message.content, 'string');
  assert.equal(r.choices[0].finish_reason, 'length');
  checkUsage(r.usage, 8);
  chatContent = r.choices[0].message.content;
  chatPromptTokens = r.usage.prompt_tokens;
});

await check('a repeated chat prefix reports cached tokens', async () => {
  const r = await client.chat.completions.create({ model, messages, ...sampling });
  assert.ok(chatPromptTokens > 16, `prompt of ${chatPromptTokens} tokens spans a full block`);
  assert.equal(r.usage.prompt_tokens_details.cached_tokens, Math.floor((chatPromptTokens - 1) / 16) * 16);
  assert.equal(r.choices[0].message.content, chatContent);
});

await check('streamed chat concatenates to the plain content and ends with usage', async () => {
  const stream = await client.chat.completions.create({
    model, messages, ...sampling, stream: true, stream_options: { include_usage: true },
  });
  let content = '';
  let role = null;
  let usage = null;
  for await (const chunk of stream) {
    assert.equal(chunk.object, 'chat.completion.chunk');
    if (chunk.usage) usage = chunk.usage;
    for (const c of chunk.choices) {
      if (c.delta.role) role = c.delta.role;
      if (c.delta.content) content += c.delta.content;
    }
  }
  assert.equal(role, 'assistant');
  assert.equal(content, chatContent);
  checkUsage(usage, 8);
});

await check('completions with logprobs and echo return OpenAI\'s logprobs object', async () => {
  const r = await client.completions.create({
    model, prompt: 'Once upon a time', ...sampling, logprobs: 2, echo: true,
  });
  const lp = r.choices[0].logprobs;
  const n = r.usage.prompt_tokens + r.usage.completion_tokens;
  assert.equal(lp.tokens.length, n);
  assert.equal(lp.token_logprobs.length, n);
  assert.equal(lp.text_offset.length, n);
  assert.equal(lp.token_logprobs[0], null);
  assert.equal(lp.top_logprobs[0], null);
  for (let i = 1; i < n; i++) {
    assert.ok(lp.token_logprobs[i] <= 0);
    const k = Object.keys(lp.top_logprobs[i]).length;
    assert.ok(k === 2 || k === 3, `top_logprobs[${i}] has ${k} entries`);
  }
  assert.ok(r.choices[0].text.startsWith('Once upon a time'));
});

await check('chat with logprobs and top_logprobs returns logprobs.content', async () => {
  const r = await client.chat.completions.create({ model, messages, ...sampling, logprobs: true, top_logprobs: 2 });
  const content = r.choices[0].logprobs.content;
  assert.equal(content.length, 8);
  for (const e of content) {
    assert.equal(typeof e.token, 'string');
    assert.ok(e.logprob <= 0);
    assert.equal(e.top_logprobs.length, 2);
    assert.equal(e.top_logprobs[0].logprob, e.logprob);  // greedy: the chosen token is the best
  }
  assert.equal(r.choices[0].message.content, chatContent);
});

await check('logprobs above 20 is a 400 BadRequestError naming the field', async () => {
  await assert.rejects(
    client.completions.create({ model, prompt: 'Once upon a time', max_tokens: 2, logprobs: 21 }),
    (e) => e instanceof OpenAI.BadRequestError && e.status === 400 && e.param === 'logprobs');
});

await check('an unknown model is a 404 APIError', async () => {
  await assert.rejects(
    client.completions.create({ model: 'no-such-model', prompt: 'x', max_tokens: 2 }),
    (e) => e instanceof OpenAI.NotFoundError && e.status === 404 && /no-such-model/.test(e.message));
});

await check('prompt + max_tokens beyond the context is a 400 BadRequestError', async () => {
  await assert.rejects(
    client.completions.create({ model, prompt: 'Once upon a time', max_tokens: 100000000 }),
    (e) => e instanceof OpenAI.BadRequestError && e.status === 400 && e.code === 'context_length_exceeded');
});

await check('a wrong API key is a 401 AuthenticationError', async () => {
  const bad = new OpenAI({ baseURL, apiKey: 'wrong-key', maxRetries: 0 });
  await assert.rejects(bad.models.list(), (e) => e instanceof OpenAI.AuthenticationError && e.status === 401);
});

if (failures > 0) {
  console.log(`${failures} check(s) failed`);
  process.exit(1);
}
console.log('all openai client checks passed');
