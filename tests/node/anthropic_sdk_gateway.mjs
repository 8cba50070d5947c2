// The official Anthropic SDK against kvgov's gateway: Messages, streamed
// and not, a system prompt as a string and as blocks with a cache_control
// breakpoint, tool use in the history, and the gateway's errors. Run by
// tests/e2e/gateway_e2e_test.cc with the gateway's base URL and an infer
// token (sent as x-api-key, as the SDK does); prints one JSON line of what
// it saw and exits 0, or names the first check that failed and exits 1.
import assert from 'node:assert/strict';
import Anthropic from '@anthropic-ai/sdk';

const [baseURL, apiKey] = process.argv.slice(2);
const client = new Anthropic({ baseURL, apiKey, maxRetries: 0, timeout: 20000 });
const words = (n, tag) => Array.from({ length: n }, (_, i) => `${tag}${i}`).join(' ');
const seen = {};
const system = words(40, 's');
const prompt = (usage) => usage.input_tokens + (usage.cache_read_input_tokens ?? 0) +
  (usage.cache_creation_input_tokens ?? 0);

const first = await client.messages.create({
  model: 'llama', max_tokens: 3, system, messages: [{ role: 'user', content: 'hi' }],
});
assert.equal(first.type, 'message', JSON.stringify(first));
assert.equal(first.role, 'assistant');
assert.equal(first.content[0].text, ' tok0 tok1 tok2');
assert.equal(first.stop_reason, 'max_tokens');
seen.first_prompt_tokens = prompt(first.usage);
assert.equal(seen.first_prompt_tokens, 44);  // 2 role markers, 41 words, the generation prompt

// The same system prompt as blocks with a breakpoint: the engine's cache
// serves the prefix kvgov routed to it.
const second = await client.messages.create({
  model: 'llama', max_tokens: 2,
  system: [{ type: 'text', text: system, cache_control: { type: 'ephemeral' } }],
  messages: [{ role: 'user', content: 'hi again' }],
});
seen.cache_read_input_tokens = second.usage.cache_read_input_tokens;
assert.ok(seen.cache_read_input_tokens >= 32, `cache_read_input_tokens ${seen.cache_read_input_tokens}`);

// A stream whose history holds a tool call and its result.
const stream = client.messages.stream({
  model: 'llama', max_tokens: 4, system,
  tools: [{ name: 'get_weather', description: 'the weather',
            input_schema: { type: 'object', properties: { city: { type: 'string' } } } }],
  messages: [
    { role: 'user', content: 'weather in Paris?' },
    { role: 'assistant', content: [{ type: 'tool_use', id: 'toolu_1', name: 'get_weather', input: { city: 'Paris' } }] },
    { role: 'user', content: [{ type: 'tool_result', tool_use_id: 'toolu_1', content: 'sunny' }] },
  ],
});
let text = '';
seen.events = {};
for await (const event of stream) {
  seen.events[event.type] = (seen.events[event.type] ?? 0) + 1;
  if (event.type === 'content_block_delta') text += event.delta.text;
}
const final = await stream.finalMessage();
assert.equal(text, ' tok0 tok1 tok2 tok3');
assert.equal(final.content[0].text, text);
assert.equal(final.usage.output_tokens, 4);
for (const type of ['message_start', 'content_block_start', 'content_block_delta',
                    'content_block_stop', 'message_delta', 'message_stop']) {
  assert.ok(seen.events[type] >= 1, `no ${type} event`);
}

// The gateway's errors, as the SDK types them.
const ask = { max_tokens: 1, messages: [{ role: 'user', content: 'x' }] };
await assert.rejects(
  client.messages.create({ model: 'gpt-9', ...ask }),
  (error) => error instanceof Anthropic.NotFoundError && error.error?.error?.type === 'not_found_error',
);
await assert.rejects(
  client.messages.create({ model: 'llama', cache_salt: 'mine', ...ask }),
  (error) => error instanceof Anthropic.BadRequestError && /cache_salt/.test(error.message),
);
await assert.rejects(
  new Anthropic({ baseURL, apiKey: 'kvgov_wrong', maxRetries: 0 }).messages.create({ model: 'llama', ...ask }),
  (error) => error instanceof Anthropic.AuthenticationError,
);

console.log(JSON.stringify({ ok: true, ...seen }));
