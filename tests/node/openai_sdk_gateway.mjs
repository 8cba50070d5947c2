// The official OpenAI SDK against kvgov's gateway: completions, chat and
// Responses, streamed and not, the model list and the gateway's errors. Run by
// tests/e2e/openai_sdk_e2e_test.cc with the gateway's base URL and an infer
// token; prints one JSON line of what it saw and exits 0, or names the
// first check that failed and exits 1.
import assert from 'node:assert/strict';
import OpenAI from 'openai';

const [baseURL, apiKey] = process.argv.slice(2);
const client = new OpenAI({ baseURL, apiKey, maxRetries: 0, timeout: 20000 });
const words = (n, tag) => Array.from({ length: n }, (_, i) => `${tag}${i}`).join(' ');
const seen = {};

const models = await client.models.list();
assert.deepEqual(models.data.map((m) => m.id), ['llama']);

const completion = await client.completions.create({
  model: 'llama', prompt: words(40, 'c'), max_tokens: 3,
});
assert.equal(completion.choices[0].text, ' tok0 tok1 tok2');
assert.equal(completion.usage.prompt_tokens, 40);

const chat = await client.chat.completions.create({
  model: 'llama',
  messages: [{ role: 'system', content: words(30, 's') }, { role: 'user', content: 'hi' }],
  max_tokens: 2,
});
assert.equal(chat.choices[0].message.content, ' tok0 tok1');
assert.equal(chat.usage.prompt_tokens, 34);  // 2 role markers, 31 words, the generation prompt

// A stream, token by token; the usage the gateway asked for is not ours.
const stream = await client.chat.completions.create({
  model: 'llama',
  messages: [{ role: 'system', content: words(30, 's') }, { role: 'user', content: 'again' }],
  max_tokens: 5,
  stream: true,
});
let text = '';
seen.chat_chunks = 0;
for await (const chunk of stream) {
  seen.chat_chunks += 1;
  assert.equal(chunk.usage ?? null, null, 'a usage chunk reached a client that asked for none');
  text += chunk.choices[0]?.delta?.content ?? '';
}
assert.equal(text, ' tok0 tok1 tok2 tok3 tok4');
assert.ok(seen.chat_chunks >= 6, `only ${seen.chat_chunks} chunks`);

// Asked for, the usage arrives, with the engine's cached tokens.
const counted = await client.completions.create({
  model: 'llama', prompt: words(40, 'c'), max_tokens: 1, stream: true,
  stream_options: { include_usage: true },
});
for await (const chunk of counted) {
  if (chunk.usage) seen.cached_tokens = chunk.usage.prompt_tokens_details?.cached_tokens;
}
assert.ok(seen.cached_tokens >= 32, `cached_tokens ${seen.cached_tokens}`);

// Responses: whole, chained by previous_response_id (the gateway sends the
// follow-up to the engine that holds the conversation), and streamed. Left
// out with --no-responses (a disaggregated fleet: chat and completions only).
if (!process.argv.includes('--no-responses')) {
  const first = await client.responses.create({
    model: 'llama', instructions: words(30, 'i'), input: 'hello', max_output_tokens: 2,
  });
  assert.equal(first.object, 'response');
  assert.equal(first.output_text, ' tok0 tok1');
  assert.equal(first.usage.input_tokens, 34);
  const followUp = await client.responses.create({
    model: 'llama', previous_response_id: first.id, input: 'and then?', max_output_tokens: 1,
  });
  assert.equal(followUp.output_text, ' tok0');
  // The engine prepended the conversation (the earlier instructions do not
  // carry over): hello, the answer, the new input, each with its role marker,
  // and the generation prompt.
  assert.equal(followUp.usage.input_tokens, 9, 'the conversation was not prepended');
  seen.responses_cached_tokens = followUp.usage.input_tokens_details.cached_tokens;
  const streamed = await client.responses.create({
    model: 'llama', input: words(20, 'r'), max_output_tokens: 3, stream: true,
  });
  let streamedText = '';
  seen.response_events = 0;
  for await (const event of streamed) {
    seen.response_events += 1;
    if (event.type === 'response.output_text.delta') streamedText += event.delta;
    if (event.type === 'response.completed') seen.response_completed_tokens = event.response.usage.output_tokens;
  }
  assert.equal(streamedText, ' tok0 tok1 tok2');
  assert.equal(seen.response_completed_tokens, 3);
}

// The gateway's errors, as the SDK types them.
await assert.rejects(
  client.completions.create({ model: 'gpt-9', prompt: 'x' }),
  (error) => error instanceof OpenAI.NotFoundError && error.code === 'model_not_found',
);
await assert.rejects(
  client.completions.create({ model: 'llama', prompt: 'x', cache_salt: 'mine' }),
  (error) => error instanceof OpenAI.BadRequestError && error.param === 'cache_salt',
);
await assert.rejects(
  new OpenAI({ baseURL, apiKey: 'kvgov_wrong', maxRetries: 0 }).models.list(),
  (error) => error instanceof OpenAI.AuthenticationError,
);

console.log(JSON.stringify({ ok: true, ...seen }));
