// The official openai npm client against the Drover gateway over HTTPS
// (gateway_harness --tls-cert/--tls-key). run.sh makes the certificate and
// has Node trust it (NODE_EXTRA_CA_CERTS); without openssl these skip.
import { test, before, after } from 'node:test';
import assert from 'node:assert/strict';
import { spawn } from 'node:child_process';
import OpenAI from 'openai';

const HARNESS = process.env.GATEWAY_HARNESS;
const ENGINE = process.env.TEST_ENGINE;
const CERT = process.env.GATEWAY_TLS_CERT;
const KEY = process.env.GATEWAY_TLS_KEY;
const skip = !CERT || !KEY ? 'no test certificate (openssl missing?)' : false;
let proc;
let port;

before(async () => {
  if (skip) return;
  proc = spawn(HARNESS, ['--engine', ENGINE, '--tls-cert', CERT, '--tls-key', KEY], {
    stdio: ['pipe', 'pipe', 'inherit'],
  });
  port = await new Promise((resolve, reject) => {
    let out = '';
    proc.stdout.on('data', (d) => {
      out += d;
      const m = out.match(/listening on (\d+)/);
      if (m) resolve(Number(m[1]));
    });
    proc.on('exit', (code) => reject(new Error(`gateway_harness exited with ${code}`)));
  });
});

after(() => {
  proc?.stdin.end();
});

const client = (scheme = 'https') =>
  new OpenAI({ apiKey: 'sk-a', baseURL: `${scheme}://127.0.0.1:${port}/v1`, maxRetries: 0, timeout: 30000 });

test('chat completion over https', { skip }, async () => {
  const r = await client().chat.completions.create({
    model: 'test-model',
    max_tokens: 4,
    messages: [{ role: 'user', content: 'say four words' }],
  });
  assert.equal(r.object, 'chat.completion');
  assert.equal(r.choices[0].message.content.split(' ').length, 4);
  assert.deepEqual(r.usage, { prompt_tokens: 3, completion_tokens: 4, total_tokens: 7 });
});

test('streaming chat over https, and a stream the client aborts', { skip }, async () => {
  const stream = await client().chat.completions.create({
    model: 'slow-model',
    max_tokens: 6,
    stream: true,
    stream_options: { include_usage: true },
    messages: [{ role: 'user', content: 'stream please' }],
  });
  let text = '';
  let usage;
  for await (const chunk of stream) {
    text += chunk.choices[0]?.delta?.content ?? '';
    if (chunk.usage) usage = chunk.usage;
  }
  assert.equal(text.trim().split(' ').length, 6);
  assert.equal(usage.completion_tokens, 6);

  const long = await client().chat.completions.create({
    model: 'slow-model',
    max_tokens: 10000,
    stream: true,
    messages: [{ role: 'user', content: 'a long answer' }],
  });
  let n = 0;
  for await (const chunk of long) {
    if (++n === 3) {
      long.controller.abort();
      break;
    }
  }
  assert.equal(n, 3);
  // The gateway goes on serving.
  const again = await client().models.list();
  assert.ok(again.data.length > 0);
});

test('plain http to the TLS port fails without an answer', { skip }, async () => {
  await assert.rejects(client('http').models.list(), (e) => {
    assert.ok(e instanceof OpenAI.APIConnectionError, `${e}`);
    return true;
  });
});
