// The official TypeScript MCP SDK client against a Toolbus MCP front, run by
// TestTypeScriptSDKClient (sdk_test.go), which starts the stack and the front
// and passes them here:
//
//   TOOLBUS_MCP_URL    the front's endpoint, http://127.0.0.1:PORT/mcp
//   TOOLBUS_MCP_TOKEN  a bearer token of the agent analyst
//   TOOLBUS_MCP_TURN   the turn the session names with Toolbus-Turn
import assert from 'node:assert/strict';
import { after, before, test } from 'node:test';

import { Client } from '@modelcontextprotocol/sdk/client/index.js';
import { StreamableHTTPClientTransport } from '@modelcontextprotocol/sdk/client/streamableHttp.js';
import { ElicitRequestSchema, ListTasksResultSchema } from '@modelcontextprotocol/sdk/types.js';

const url = process.env.TOOLBUS_MCP_URL;
const token = process.env.TOOLBUS_MCP_TOKEN;
const turn = process.env.TOOLBUS_MCP_TURN;

let client;
let transport;

before(async () => {
  assert.ok(url && token && turn, 'TOOLBUS_MCP_URL, TOOLBUS_MCP_TOKEN and TOOLBUS_MCP_TURN must be set');
  transport = new StreamableHTTPClientTransport(new URL(url), {
    requestInit: { headers: { Authorization: `Bearer ${token}`, 'Toolbus-Turn': turn } },
  });
  client = new Client({ name: 'toolbus-sdk-test', version: '1.0.0' });
  await client.connect(transport);
});

after(async () => {
  await client?.close();
});

test('connects over streamable HTTP into the named turn', () => {
  assert.ok(transport.sessionId, 'the front issued no session ID');
  assert.ok(transport.sessionId.endsWith(`.${turn}`), `session ID ${transport.sessionId} does not carry turn ${turn}`);
  assert.equal(client.getServerVersion()?.name, 'toolbus');
  assert.ok(client.getServerCapabilities()?.tools, 'the front declares no tools capability');
});

test('lists the agent\'s tools', async () => {
  const { tools } = await client.listTools();
  const names = tools.map((t) => t.name);
  for (const want of ['llm_tools-list', 'demo-echo', 'demo-sleep']) {
    assert.ok(names.includes(want), `tools/list lacks ${want}: ${names}`);
  }
  assert.ok(!names.includes('weather-forecast'), `an on-demand tool is listed before discovery: ${names}`);
  const echo = tools.find((t) => t.name === 'demo-echo');
  assert.equal(echo.inputSchema.type, 'object');
});

test('calls a tool and gets its content and call ID', async () => {
  const result = await client.callTool({ name: 'demo-echo', arguments: { text: 'hello from the SDK' } });
  assert.notEqual(result.isError, true, JSON.stringify(result));
  assert.deepEqual(result.content.map((c) => c.text), ['hello from the SDK']);
  assert.ok(result._meta?.['toolbus/call_id'], `no call ID in _meta: ${JSON.stringify(result._meta)}`);
  assert.equal(result._meta['toolbus/state'], 'completed');
});

test('content blocks of every kind pass the SDK\'s result schema', async () => {
  const result = await client.callTool({ name: 'media-mixed', arguments: {} });
  assert.notEqual(result.isError, true, JSON.stringify(result));
  assert.deepEqual(result.content.map((c) => c.type), ['text', 'image', 'audio', 'resource', 'resource', 'resource_link', 'text']);
  const [text, image, audio, embedded, blob, link, json] = result.content;
  assert.deepEqual(text.annotations, { audience: ['user'], priority: 0.5 });
  assert.equal(Buffer.from(image.data, 'base64').toString('latin1'), 'PNG\x00\x01');
  assert.equal(image.mimeType, 'image/png');
  assert.equal(audio.mimeType, 'audio/wav');
  assert.deepEqual(embedded.resource, { uri: 'file:///notes.md', mimeType: 'text/markdown', text: '# notes' });
  assert.deepEqual(Buffer.from(blob.resource.blob, 'base64'), Buffer.from([0, 1, 2]));
  assert.deepEqual(link, { type: 'resource_link', uri: 'https://example.com/report', name: 'report', description: 'The full report', mimeType: 'text/html' });
  assert.equal(json.text, '{"points":3}');
  assert.deepEqual(result.structuredContent, { points: 3 });
});

test('a tool\'s error is a result with isError and the Toolbus code, not a rejection', async () => {
  const result = await client.callTool({ name: 'media-broken', arguments: {} });
  assert.equal(result.isError, true, JSON.stringify(result));
  assert.equal(result._meta?.['toolbus/code'], 'tool_error');
  assert.match(result.content[0].text, /the printer is on fire/);
});

test('an unknown tool is a JSON-RPC error, invalid params', async () => {
  await assert.rejects(client.callTool({ name: 'nosuch-tool', arguments: {} }), (err) => err.code === -32602);
});

test('a call made a task streams its creation, its status and its result, the task ID being the call\'s', async () => {
  const messages = [];
  for await (const message of client.experimental.tasks.callToolStream({ name: 'demo-echo', arguments: { text: 'as a task' } }, undefined, { task: {} })) {
    messages.push(message);
  }
  assert.equal(messages[0].type, 'taskCreated', JSON.stringify(messages));
  const taskId = messages[0].task.taskId;
  const last = messages.at(-1);
  assert.equal(last.type, 'result', JSON.stringify(messages));
  assert.deepEqual(last.result.content.map((c) => c.text), ['as a task']);
  assert.equal(last.result._meta['toolbus/call_id'], taskId);
  const task = await client.experimental.tasks.getTask(taskId);
  assert.equal(task.status, 'completed');
  const { tasks } = await client.experimental.tasks.listTasks();
  assert.ok(tasks.some((t) => t.taskId === taskId), JSON.stringify(tasks));
});

// connectAs opens another session of the turn, with the client's
// capabilities given.
async function connectAs(capabilities) {
  const t = new StreamableHTTPClientTransport(new URL(url), {
    requestInit: { headers: { Authorization: `Bearer ${token}`, 'Toolbus-Turn': turn } },
  });
  const c = new Client({ name: 'toolbus-sdk-test-elicitation', version: '1.0.0' }, { capabilities });
  await c.connect(t);
  return c;
}

test('a call held for the user\'s approval is asked through elicitation, and runs once approved', async () => {
  const asking = await connectAs({ elicitation: {} });
  try {
    const asked = [];
    asking.setRequestHandler(ElicitRequestSchema, (request) => {
      asked.push(request.params);
      return { action: 'accept', content: { approve: true } };
    });
    const result = await asking.callTool({ name: 'ops-restart', arguments: { city: 'web' } });
    assert.notEqual(result.isError, true, JSON.stringify(result));
    assert.equal(result.content[0].text, 'restart is sunny');
    assert.equal(asked.length, 1);
    assert.match(asked[0].message, /^Allow the call of ops-restart\? Restarts interrupt users\. Arguments: \{"city":"web"\}$/);
    assert.equal(asked[0].requestedSchema.properties.approve.type, 'boolean');
  } finally {
    await asking.close();
  }
});

test('without elicitation, a call held for the user\'s approval answers at once naming the approval', async () => {
  const result = await client.callTool({ name: 'ops-restart', arguments: { city: 'db' } });
  // Not the tool's result: an error result, which the SDK takes whatever
  // the tool's output schema (see the next test).
  assert.equal(result.isError, true, JSON.stringify(result));
  assert.equal(result._meta?.['toolbus/state'], 'awaiting_approval');
  const approval = result._meta?.['toolbus/approval_id'];
  assert.ok(approval, JSON.stringify(result._meta));
  assert.ok(result.content[0].text.includes(approval), result.content[0].text);
  assert.match(result.content[0].text, /\(prompt mode\) and has not run yet/);
});

test('a call held for an operator\'s approval of a tool with an output schema answers without the SDK throwing', async () => {
  const { tools } = await client.listTools();
  const held = tools.find((t) => t.name === 'ops-inventory');
  assert.ok(held?.outputSchema, `ops-inventory has no outputSchema: ${JSON.stringify(held)}`);
  // The SDK refuses a result without structuredContent for a tool with an
  // output schema, unless it is an error result.
  const result = await client.callTool({ name: 'ops-inventory', arguments: { service: 'web' } });
  assert.equal(result.isError, true, JSON.stringify(result));
  assert.equal(result._meta?.['toolbus/state'], 'awaiting_approval');
  const approval = result._meta?.['toolbus/approval_id'];
  assert.ok(approval && result.content[0].text.includes(approval), JSON.stringify(result));
  assert.match(result.content[0].text, /\(queue mode\) and has not run yet/);
});

test('a call with progress gets its progress notifications in order, then its result', async () => {
  const progress = [];
  const result = await client.callTool({ name: 'demo-sleep', arguments: { seconds: 0.5 } }, undefined, {
    onprogress: (p) => progress.push(p),
  });
  assert.notEqual(result.isError, true, JSON.stringify(result));
  // demo-sleep reports 0 of 10, then each tenth of the way; the worker
  // publishes at most a few reports a second, always the first and the last.
  const steps = progress.map((p) => p.progress);
  assert.ok(steps.length >= 3, `too few progress notifications: ${steps}`);
  assert.equal(steps[0], 0);
  assert.equal(steps.at(-1), 10);
  for (let i = 1; i < steps.length; i++) {
    assert.ok(steps[i] > steps[i - 1], `progress out of order: ${steps}`);
  }
  for (const p of progress) {
    assert.equal(p.total, 10);
    assert.ok(p.message, `a progress notification without its message: ${JSON.stringify(p)}`);
  }
  assert.equal(progress[0].message, 'sleeping');
});

test('aborting a call sends notifications/cancelled, which cancels the Toolbus call', async () => {
  const abort = new AbortController();
  let firstProgress;
  const started = new Promise((resolve) => { firstProgress = resolve; });
  const call = client.callTool({ name: 'demo-sleep', arguments: { seconds: 60 } }, undefined, {
    signal: abort.signal,
    onprogress: () => firstProgress(),
  });
  await started;
  abort.abort('the user stopped it');
  await assert.rejects(call, /the user stopped it/);

  // The session stays open: the cancellation is the notification's, not a
  // dropped connection's. The front's tasks/list reads the agent's calls
  // from the ledger; the call ends cancelled there.
  const deadline = Date.now() + 30_000;
  for (;;) {
    const { tasks } = await client.request({ method: 'tasks/list', params: {} }, ListTasksResultSchema);
    if (tasks.some((t) => t.status === 'cancelled')) {
      break;
    }
    assert.ok(Date.now() < deadline, `no cancelled call of the agent: ${JSON.stringify(tasks)}`);
    await new Promise((resolve) => setTimeout(resolve, 50));
  }
});
