// The official openai npm client against the Drover gateway
// (gateway_harness: static keys and routes to drover-test-engine).
import { test, before, after } from 'node:test';
import assert from 'node:assert/strict';
import { spawn } from 'node:child_process';
import OpenAI from 'openai';

const HARNESS = process.env.GATEWAY_HARNESS;
const ENGINE = process.env.TEST_ENGINE;
let proc;
let baseURL;

before(async () => {
  proc = spawn(HARNESS, ['--engine', ENGINE], { stdio: ['pipe', 'pipe', 'inherit'] });
  const port = await new Promise((resolve, reject) => {
    let out = '';
    proc.stdout.on('data', (d) => {
      out += d;
      const m = out.match(/listening on (\d+)/);
      if (m) resolve(Number(m[1]));
    });
    proc.on('exit', (code) => reject(new Error(`gateway_harness exited with ${code}`)));
  });
  baseURL = `http://127.0.0.1:${port}/v1`;
});

after(() => {
  proc.stdin.end();
});

const client = (apiKey = 'sk-a') => new OpenAI({ apiKey, baseURL, maxRetries: 0 });

test('models lists what the key may use', async () => {
  const ids = [];
  for await (const m of client().models.list()) ids.push(m.id);
  assert.deepEqual(ids.sort(), ['slow-model', 'test-model']);
});

test('chat completion', async () => {
  const r = await client().chat.completions.create({
    model: 'test-model',
    max_tokens: 4,
    messages: [{ role: 'user', content: 'say four words' }],
  });
  assert.equal(r.object, 'chat.completion');
  assert.equal(r.choices[0].message.role, 'assistant');
  assert.equal(r.choices[0].message.content.split(' ').length, 4);
  assert.deepEqual(r.usage, { prompt_tokens: 3, completion_tokens: 4, total_tokens: 7 });
});

test('completion', async () => {
  const r = await client().completions.create({ model: 'test-model', prompt: 'one two three', max_tokens: 2 });
  assert.equal(r.choices[0].text.split(' ').length, 2);
  assert.equal(r.usage.prompt_tokens, 3);
});

test('streaming chat, with and without usage', async () => {
  const stream = await client().chat.completions.create({
    model: 'slow-model',
    max_tokens: 6,
    stream: true,
    messages: [{ role: 'user', content: 'stream please' }],
  });
  let text = '';
  let chunks = 0;
  for await (const chunk of stream) {
    chunks++;
    assert.equal(chunk.usage, undefined, 'no usage chunk unless asked');
    text += chunk.choices[0]?.delta?.content ?? '';
  }
  assert.equal(chunks, 7);
  assert.equal(text.trim().split(' ').length, 6);

  const withUsage = await client().chat.completions.create({
    model: 'test-model',
    max_tokens: 3,
    stream: true,
    stream_options: { include_usage: true },
    messages: [{ role: 'user', content: 'a b' }],
  });
  let usage;
  for await (const chunk of withUsage) if (chunk.usage) usage = chunk.usage;
  assert.deepEqual(usage, { prompt_tokens: 2, completion_tokens: 3, total_tokens: 5 });
});

test('a stream the client aborts', async () => {
  const stream = await client().chat.completions.create({
    model: 'slow-model',
    max_tokens: 10000,
    stream: true,
    messages: [{ role: 'user', content: 'a long answer' }],
  });
  let n = 0;
  for await (const chunk of stream) {
    if (++n === 3) {
      stream.controller.abort();
      break;
    }
  }
  assert.equal(n, 3);
});

test('embeddings', async () => {
  const r = await client().embeddings.create({ model: 'test-model', input: ['hello world', 'x'] });
  assert.equal(r.data.length, 2);
  assert.equal(r.data[1].index, 1);
  assert.equal(r.data[0].embedding.length, 8);
  assert.equal(r.usage.prompt_tokens, 3);
});

test('errors: bad key, unknown model, another tenant\'s model, bad request', async () => {
  await assert.rejects(client('sk-wrong').models.list(), (e) => {
    assert.ok(e instanceof OpenAI.AuthenticationError);
    assert.equal(e.status, 401);
    assert.equal(e.code, 'invalid_api_key');
    return true;
  });
  for (const model of ['no-such-model', 'private-b']) {
    await assert.rejects(
      client().chat.completions.create({ model, messages: [{ role: 'user', content: 'x' }] }),
      (e) => {
        assert.ok(e instanceof OpenAI.NotFoundError);
        assert.equal(e.code, 'model_not_found');
        assert.equal(e.param, 'model');
        return true;
      },
    );
  }
  await assert.rejects(
    client().chat.completions.create({ model: 'test-model', stream: 'sometimes', messages: [] }),
    (e) => {
      assert.ok(e instanceof OpenAI.BadRequestError);
      assert.equal(e.type, 'invalid_request_error');
      return true;
    },
  );
});

test('a key over its request limit gets 429 with retry-after', async () => {
  const c = client('sk-rpm');
  const ask = () => c.chat.completions.create({ model: 'test-model', max_tokens: 1, messages: [{ role: 'user', content: 'x' }] });
  await ask();
  await ask();
  await assert.rejects(ask(), (e) => {
    assert.ok(e instanceof OpenAI.RateLimitError);
    assert.equal(e.status, 429);
    assert.equal(e.code, 'rate_limit_exceeded');
    assert.ok(Number(e.headers.get('retry-after')) >= 1);
    return true;
  });
});

test('a tenant over its token limit gets 429', async () => {
  const c = client('sk-tpm');
  await c.chat.completions.create({ model: 'test-model', max_tokens: 100, messages: [{ role: 'user', content: 'x' }] });
  await assert.rejects(
    c.chat.completions.create({ model: 'test-model', max_tokens: 1, messages: [{ role: 'user', content: 'x' }] }),
    (e) => e instanceof OpenAI.RateLimitError && /tokens per minute/.test(e.message),
  );
});
