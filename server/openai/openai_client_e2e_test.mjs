// The OpenAI-compatible API of a real moeserve, through the official
// `openai` npm client (openai_client_e2e_test.sh starts the server and
// installs the client).
//
//   node openai_client_e2e_test.mjs NPM_DIR BASE_URL METRICS_URL
//
// BASE_URL is http://127.0.0.1:PORT/v1. The server runs models/demo with
// --max_num_seqs=1 --max_waiting=2 (so a fourth concurrent request finds
// the queue full) and an emulated slow link (so long generations last).
import { createRequire } from "node:module";
import { join } from "node:path";
import assert from "node:assert/strict";

const [npmDir, baseURL, metricsURL] = process.argv.slice(2);
const require = createRequire(join(npmDir, "package.json"));
const openaiModule = require("openai");
const OpenAI = openaiModule.OpenAI ?? openaiModule.default ?? openaiModule;

// No retries: a 429 or 503 must reach the test as it is.
const client = new OpenAI({ baseURL, apiKey: "unused", maxRetries: 0 });
const MODEL = "lru";
const PROMPT = "The LORD";

let passed = 0;
async function check(name, body) {
  try {
    await body();
    passed++;
    console.log(`ok   ${name}`);
  } catch (e) {
    console.log(`FAIL ${name}`);
    throw e;
  }
}

// The status and error of a refused call.
async function refusal(promise) {
  try {
    await promise;
  } catch (e) {
    assert.ok(e instanceof OpenAI.APIError, `not an APIError: ${e}`);
    return e;
  }
  assert.fail("the call was not refused");
}

async function complete(params, options) {
  return client.completions.create({ model: MODEL, prompt: PROMPT, ...params },
                                   options);
}

async function streamText(stream) {
  let text = "";
  let finish = null;
  const objects = new Set();
  for await (const chunk of stream) {
    objects.add(chunk.object);
    for (const choice of chunk.choices) {
      text += choice.text ?? choice.delta?.content ?? "";
      if (choice.finish_reason) finish = choice.finish_reason;
    }
  }
  return { text, finish, objects };
}

async function metric(name) {
  const text = await (await fetch(metricsURL)).text();
  const line = text.split("\n").find((l) => l.startsWith(name));
  assert.ok(line, `no ${name} on /metrics`);
  return Number(line.split(" ").pop());
}

// Waits (up to 10 s) until nothing runs or waits in the engine: a request
// that has been answered may hold its sequence until the engine's next
// step, and this server runs one sequence and queues two.
async function idle() {
  for (let i = 0; i < 200; i++) {
    if (await metric("moeserve_num_requests_running") === 0 &&
        await metric("moeserve_num_requests_waiting") === 0) return;
    await new Promise((r) => setTimeout(r, 50));
  }
  assert.fail("the engine did not become idle");
}

let greedy; // the greedy completion of PROMPT, 8 tokens

await check("GET /v1/models lists the engine", async () => {
  const models = [];
  for await (const m of client.models.list()) models.push(m.id);
  assert.deepEqual(models, [MODEL]);
});

await check("GET /health", async () => {
  const reply = await fetch(baseURL.replace(/\/v1$/, "/health"));
  assert.equal(reply.status, 200);
});

await check("completions, not streamed", async () => {
  const r = await complete({ max_tokens: 8, temperature: 0 });
  assert.equal(r.object, "text_completion");
  assert.match(r.id, /^cmpl-[0-9a-f]+$/);
  assert.equal(r.model, MODEL);
  assert.equal(r.choices.length, 1);
  assert.equal(typeof r.choices[0].text, "string");
  assert.ok(r.choices[0].text.length > 0);
  assert.ok(["stop", "length"].includes(r.choices[0].finish_reason));
  assert.ok(r.usage.prompt_tokens > 0);
  assert.ok(r.usage.completion_tokens > 0 && r.usage.completion_tokens <= 8);
  assert.equal(r.usage.total_tokens,
               r.usage.prompt_tokens + r.usage.completion_tokens);
  greedy = r.choices[0].text;
});

await check("completions, streamed: the same greedy text", async () => {
  const s = await complete({ max_tokens: 8, temperature: 0, stream: true });
  const { text, finish, objects } = await streamText(s);
  assert.deepEqual([...objects], ["text_completion"]);
  assert.equal(text, greedy);
  assert.ok(["stop", "length"].includes(finish));
});

await check("max_tokens ends with finish_reason length", async () => {
  const r = await complete({ max_tokens: 5, temperature: 0, ignore_eos: true });
  assert.equal(r.choices[0].finish_reason, "length");
  assert.equal(r.usage.completion_tokens, 5);
});

await check("stop strings end before the stop, finish_reason stop", async () => {
  const long = await complete({ max_tokens: 24, temperature: 0,
                                ignore_eos: true });
  const t = long.choices[0].text;
  const k = Math.floor(t.length / 2);
  const stop = t.slice(k, k + 3);
  assert.ok(stop.length === 3, `text too short: ${JSON.stringify(t)}`);
  const r = await complete({ max_tokens: 24, temperature: 0,
                             ignore_eos: true, stop: [stop, "@@never@@"] });
  assert.equal(r.choices[0].text, t.slice(0, t.indexOf(stop)));
  assert.equal(r.choices[0].finish_reason, "stop");
  const one = await complete({ max_tokens: 24, temperature: 0,
                               ignore_eos: true, stop });
  assert.equal(one.choices[0].text, r.choices[0].text);
});

await check("seed: the same sample at temperature 1", async () => {
  const params = { max_tokens: 16, temperature: 1.0, seed: 1234,
                   ignore_eos: true };
  const a = await complete(params);
  const b = await complete(params);
  assert.equal(a.choices[0].text, b.choices[0].text);
  const others = new Set();
  for (const seed of [1, 2, 3]) {
    others.add((await complete({ ...params, seed })).choices[0].text);
  }
  assert.ok(others.size > 1, "three seeds gave one text");
});

await check("n choices: each sampled on its own, streamed or not",
            async () => {
  const r = await complete({ max_tokens: 2, temperature: 0, n: 1 });
  assert.equal(r.choices.length, 1);
  // Greedy: every choice is the greedy text.
  await idle();
  const g = await complete({ max_tokens: 8, temperature: 0, n: 2 });
  assert.deepEqual(g.choices.map((c) => c.index), [0, 1]);
  assert.deepEqual(g.choices.map((c) => c.text), [greedy, greedy]);
  assert.equal(g.usage.completion_tokens, 16);
  // Sampled with a seed: choice i uses seed + i, so the n=2 request's
  // choices are the n=1 requests with seeds 5 and 6; streamed the same.
  // (n=2: this server runs one sequence and queues two; each choice takes
  // a place in the queue.)
  const params = { max_tokens: 12, temperature: 1, seed: 5 };
  await idle();
  const two = await complete({ ...params, n: 2 });
  const alone = [];
  for (const seed of [5, 6]) {
    alone.push((await complete({ ...params, seed })).choices[0].text);
  }
  assert.deepEqual(two.choices.map((c) => c.text), alone);
  assert.notEqual(alone[0], alone[1]);
  assert.equal(two.usage.prompt_tokens, r.usage.prompt_tokens);
  const texts = ["", ""];
  const finished = new Set();
  let usage = null;
  await idle();
  for await (const chunk of await complete({
    ...params, n: 2, stream: true, stream_options: { include_usage: true } })) {
    for (const c of chunk.choices) {
      texts[c.index] += c.text;
      if (c.finish_reason) finished.add(c.index);
    }
    if (chunk.usage) usage = chunk.usage;
  }
  assert.deepEqual(texts, alone);
  assert.equal(finished.size, 2);
  assert.equal(usage.completion_tokens, two.usage.completion_tokens);
  const e = await refusal(complete({ max_tokens: 2, n: 17 }));
  assert.equal(e.status, 400);
  assert.equal(e.param, "n");
});

// Tokens a logprobs list spells out, less a final EOS (its piece, not text).
function spelled(tokens, finish) {
  return (finish === "stop" ? tokens.slice(0, -1) : tokens).join("");
}

await check("completion logprobs: tokens spell the text, greedy is top-1",
            async () => {
  const r = await complete({ max_tokens: 8, temperature: 0, logprobs: 2 });
  const choice = r.choices[0];
  const lp = choice.logprobs;
  assert.equal(choice.text, greedy);
  assert.equal(lp.tokens.length, r.usage.completion_tokens);
  assert.equal(spelled(lp.tokens, choice.finish_reason), choice.text);
  let offset = 0;
  lp.tokens.forEach((token, i) => {
    assert.equal(lp.text_offset[i], offset);
    offset += [...token].length;
    const top = Object.values(lp.top_logprobs[i]);
    assert.ok(top.length >= 1 && top.length <= 3, JSON.stringify(top));
    assert.ok(lp.token_logprobs[i] <= 0);
    assert.equal(Math.max(...top), lp.token_logprobs[i]);  // greedy
  });
  // Streamed: the same tokens, chunk by chunk.
  const tokens = [];
  for await (const chunk of await complete({ max_tokens: 8, temperature: 0,
                                             logprobs: 0, stream: true })) {
    for (const c of chunk.choices) tokens.push(...(c.logprobs?.tokens ?? []));
  }
  assert.deepEqual(tokens, lp.tokens);
});

await check("chat logprobs: top_logprobs alternatives with bytes",
            async () => {
  const params = { model: MODEL, max_tokens: 8, temperature: 0,
                   messages: [{ role: "user", content: "Who made the heaven?" }],
                   logprobs: true, top_logprobs: 3 };
  const r = await client.chat.completions.create(params);
  const content = r.choices[0].logprobs.content;
  assert.equal(content.length, r.usage.completion_tokens);
  assert.equal(spelled(content.map((t) => t.token), r.choices[0].finish_reason),
               r.choices[0].message.content);
  for (const t of content) {
    assert.equal(t.top_logprobs.length, 3);
    assert.equal(t.top_logprobs[0].token, t.token);  // greedy
    assert.equal(Buffer.from(t.bytes).toString("utf8"), t.token);
  }
  const streamed = [];
  for await (const chunk of await client.chat.completions.create({
    ...params, stream: true })) {
    for (const c of chunk.choices) {
      streamed.push(...(c.logprobs?.content ?? []).map((t) => t.token));
    }
  }
  assert.deepEqual(streamed, content.map((t) => t.token));
  const e = await refusal(client.chat.completions.create({
    ...params, logprobs: false }));
  assert.equal(e.status, 400);
  assert.equal(e.param, "top_logprobs");
});

await check("an invalid field is 400 naming it", async () => {
  let e = await refusal(complete({ max_tokens: 2, temperature: -1 }));
  assert.equal(e.status, 400);
  assert.equal(e.param, "temperature");
  assert.equal(e.type, "invalid_request_error");
  e = await refusal(complete({ max_tokens: 2, top_p: 2 }));
  assert.equal(e.param, "top_p");
  e = await refusal(complete({ max_tokens: 100000 }));
  assert.equal(e.param, "max_tokens");
  e = await refusal(complete({ max_tokens: 2, logprobs: 21 }));
  assert.equal(e.param, "logprobs");
  e = await refusal(client.completions.create({ model: MODEL,
                                                prompt: ["a", "b"] }));
  assert.equal(e.param, "prompt");
});

await check("an unknown model is 404 model_not_found", async () => {
  const e = await refusal(client.completions.create({
    model: "gpt-4", prompt: PROMPT, max_tokens: 2 }));
  assert.equal(e.status, 404);
  assert.equal(e.code, "model_not_found");
  assert.equal(e.param, "model");
  // The served model's own name picks the default engine.
  const r = await client.completions.create({ model: "demo", prompt: PROMPT,
                                             max_tokens: 2 });
  assert.equal(r.choices.length, 1);
});

let chatText;
const MESSAGES = [{ role: "system", content: "Speak as the King James Bible." },
                  { role: "user", content: "Who made the heaven?" }];

await check("chat completions, not streamed", async () => {
  const r = await client.chat.completions.create({
    model: MODEL, messages: MESSAGES, max_tokens: 8, temperature: 0 });
  assert.equal(r.object, "chat.completion");
  assert.match(r.id, /^chatcmpl-/);
  assert.equal(r.choices[0].message.role, "assistant");
  assert.equal(typeof r.choices[0].message.content, "string");
  assert.ok(["stop", "length"].includes(r.choices[0].finish_reason));
  assert.ok(r.usage.completion_tokens > 0);
  chatText = r.choices[0].message.content;
});

await check("chat completions, streamed: role first, same text", async () => {
  const s = await client.chat.completions.create({
    model: MODEL, messages: MESSAGES, max_tokens: 8, temperature: 0,
    stream: true, stream_options: { include_usage: true } });
  let first = true;
  let text = "";
  let finish = null;
  let usage = null;
  for await (const chunk of s) {
    assert.equal(chunk.object, "chat.completion.chunk");
    if (first) {
      assert.equal(chunk.choices[0].delta.role, "assistant");
      first = false;
    }
    for (const c of chunk.choices) {
      text += c.delta.content ?? "";
      if (c.finish_reason) finish = c.finish_reason;
    }
    if (chunk.usage) usage = chunk.usage;
  }
  assert.equal(text, chatText);
  assert.ok(["stop", "length"].includes(finish));
  assert.ok(usage && usage.completion_tokens > 0, "no usage chunk");
});

// The count of a labelled series on /metrics (0 when absent).
async function series(name, ...labels) {
  const text = await (await fetch(metricsURL)).text();
  const line = text.split("\n").find(
    (l) => l.startsWith(name + "{") && labels.every((x) => l.includes(x)));
  return line ? Number(line.split(" ").pop()) : 0;
}

await check("a non-streamed client that hangs up frees the engine",
            async () => {
  const cancelled = ['method="/v1/completions"', 'code="CANCELLED"'];
  const before = await series("moeserve_grpc_requests_total", ...cancelled);
  const c = new AbortController();
  const done = complete({ max_tokens: 512, temperature: 0, ignore_eos: true },
                        { signal: c.signal }).catch(() => {});
  for (let i = 0; i < 100; i++) {
    if (await metric("moeserve_num_requests_running") === 1) break;
    await new Promise((r) => setTimeout(r, 50));
  }
  assert.equal(await metric("moeserve_num_requests_running"), 1);
  c.abort();
  await done;
  // Cancelled, not generated to its end for nobody: counted CANCELLED.
  for (let i = 0; i < 100; i++) {
    if (await metric("moeserve_num_requests_running") === 0) break;
    await new Promise((r) => setTimeout(r, 50));
  }
  assert.equal(await metric("moeserve_num_requests_running"), 0);
  assert.equal(await series("moeserve_grpc_requests_total", ...cancelled),
               before + 1);
});

// vLLM's /tokenize and /detokenize, beside /v1 (BASE_URL ends in /v1).
async function post(path, body) {
  const r = await fetch(baseURL.replace(/\/v1$/, "") + path, {
    method: "POST", headers: { "Content-Type": "application/json" },
    body: JSON.stringify(body) });
  return { status: r.status, json: await r.json() };
}

await check("/tokenize counts what a generation is given; /detokenize",
            async () => {
  const t = await post("/tokenize", { prompt: PROMPT,
                                      return_token_strs: true });
  assert.equal(t.status, 200);
  const r = await complete({ max_tokens: 1 });
  assert.equal(t.json.count, r.usage.prompt_tokens);
  assert.equal(t.json.tokens.length, t.json.count);
  assert.equal(t.json.token_strs.length, t.json.count);
  assert.ok(t.json.max_model_len > 0);
  // Special tokens are kept unless asked, as Hugging Face's decode (and
  // vLLM's /detokenize) give them: "<s> The LORD".
  const d = await post("/detokenize", { tokens: t.json.tokens });
  assert.equal(d.status, 200);
  assert.equal(t.json.token_strs[0], "<s>");
  assert.equal(d.json.prompt, "<s> " + PROMPT);
  const skipped = await post("/detokenize", { tokens: t.json.tokens,
                                              skip_special_tokens: true });
  assert.equal(skipped.json.prompt, PROMPT);
  const notBool = await post("/detokenize", { tokens: [1],
                                              skip_special_tokens: "yes" });
  assert.equal(notBool.status, 400);
  assert.equal(notBool.json.error.param, "skip_special_tokens");
  const chat = await post("/tokenize", { messages: MESSAGES });
  const c = await client.chat.completions.create({
    model: MODEL, messages: MESSAGES, max_tokens: 1 });
  assert.equal(chat.json.count, c.usage.prompt_tokens);
  const bad = await post("/detokenize", { tokens: [1, -1] });
  assert.equal(bad.status, 400);
  assert.equal(bad.json.error.param, "tokens");
});

// The top-level README's chat example, on models/demo: the assistant
// answers in words (issue 33: under Mistral's [INST] template, which the
// demo models never saw, it emitted </s> at once: empty content, one
// completion token). Greedy, and sampled at temperature 1 (the README sends
// none) with two seeds.
await check("chat: the README's example answers in words", async () => {
  for (const extra of [{ temperature: 0 }, { seed: 1 }, { seed: 2 }]) {
    const s = await client.chat.completions.create({
      model: MODEL, max_tokens: 16, stream: true,
      messages: [{ role: "user", content: "Who made the heaven?" }],
      stream_options: { include_usage: true }, ...extra });
    let text = "";
    let usage = null;
    for await (const chunk of s) {
      text += chunk.choices[0]?.delta?.content ?? "";
      if (chunk.usage) usage = chunk.usage;
    }
    const words = text.match(/[A-Za-z]+/g) ?? [];
    assert.ok(words.length >= 2,
              `${JSON.stringify(extra)}: no words in ${JSON.stringify(text)}`);
    assert.ok(usage.completion_tokens > 1, JSON.stringify(usage));
  }
});

await check("chat: roles out of order are 400", async () => {
  const e = await refusal(client.chat.completions.create({
    model: MODEL, max_tokens: 2,
    messages: [{ role: "assistant", content: "a" }] }));
  assert.equal(e.status, 400);
  assert.equal(e.param, "messages[0].role");
});

await check("a full queue is 429", async () => {
  const long = { max_tokens: 512, temperature: 0, ignore_eos: true,
                 stream: true };
  // A runs (--max_num_seqs=1), B1 and B2 wait (--max_waiting=2), C is
  // refused.
  await idle();
  const a = await complete(long);
  await a[Symbol.asyncIterator]().next();  // A is running
  const waiters = [new AbortController(), new AbortController()];
  const waitersDone = waiters.map((w) => complete(long, { signal: w.signal })
    .then(async (s) => { for await (const _ of s) {} })
    .catch(() => {}));
  for (let i = 0; i < 100; i++) {
    if (await metric("moeserve_num_requests_waiting") === 2) break;
    await new Promise((r) => setTimeout(r, 50));
  }
  assert.equal(await metric("moeserve_num_requests_waiting"), 2);
  const e = await refusal(complete({ max_tokens: 2 }));
  assert.equal(e.status, 429);
  assert.equal(e.code, "rate_limit_exceeded");
  assert.match(e.message, /--max_waiting/);
  // The Bs leave while they wait: they have sent nothing that could fail,
  // their sockets' hangups are what tells; they leave the queue while A
  // runs on.
  for (const w of waiters) w.abort();
  await Promise.all(waitersDone);
  for (let i = 0; i < 100; i++) {
    if (await metric("moeserve_num_requests_waiting") === 0) break;
    await new Promise((r) => setTimeout(r, 50));
  }
  assert.equal(await metric("moeserve_num_requests_waiting"), 0);
  assert.equal(await metric("moeserve_num_requests_running"), 1);
  a.controller.abort();
  // Both leave the engine: nothing runs or waits after a moment.
  for (let i = 0; i < 100; i++) {
    if (await metric("moeserve_num_requests_running") === 0 &&
        await metric("moeserve_num_requests_waiting") === 0) break;
    await new Promise((r) => setTimeout(r, 100));
  }
  assert.equal(await metric("moeserve_num_requests_running"), 0);
  assert.equal(await metric("moeserve_num_requests_waiting"), 0);
});

console.log(`${passed} checks passed`);
