// The official TypeScript MCP SDK client against a Toolbus MCP front whose
// tools answer null and results cut to their max_result_size, run by
// TestTypeScriptSDKResults (results_test.go):
//
//   TOOLBUS_MCP_URL    the front's endpoint, http://127.0.0.1:PORT/mcp
//   TOOLBUS_MCP_TOKEN  a bearer token of the agent analyst
import assert from 'node:assert/strict';
import { after, before, test } from 'node:test';

import { Client } from '@modelcontextprotocol/sdk/client/index.js';
import { StreamableHTTPClientTransport } from '@modelcontextprotocol/sdk/client/streamableHttp.js';
import { ErrorCode, McpError } from '@modelcontextprotocol/sdk/types.js';

const url = process.env.TOOLBUS_MCP_URL;
const token = process.env.TOOLBUS_MCP_TOKEN;

let client;

before(async () => {
  assert.ok(url && token, 'TOOLBUS_MCP_URL and TOOLBUS_MCP_TOKEN must be set');
  const transport = new StreamableHTTPClientTransport(new URL(url), {
    requestInit: { headers: { Authorization: `Bearer ${token}` } },
  });
  client = new Client({ name: 'toolbus-sdk-results', version: '1.0.0' });
  await client.connect(transport);
  // callTool checks structuredContent against the outputSchemas listed.
  await client.listTools();
});

after(async () => {
  await client?.close();
});

test('a null result of a tool with an output schema is structuredContent {"result": null}', async () => {
  const result = await client.callTool({ name: 'store-maybe', arguments: {} });
  assert.deepEqual(result.structuredContent, { result: null }, JSON.stringify(result));
  assert.equal(result.isError === true, false);
  assert.equal(result.content.at(-1).text, 'null');
});

test('a truncated result of a tool with an output schema is an error result saying where the whole one is', async () => {
  const result = await client.callTool({ name: 'store-big', arguments: {} });
  const what = JSON.stringify({ ...result, content: result.content.map((b) => ({ ...b, text: b.text?.slice(0, 300) })) });
  assert.equal(result.isError, true, what);
  assert.equal(result.structuredContent, undefined, what);
  assert.equal(result._meta?.['toolbus/truncated'], true, what);
  const ref = result._meta?.['toolbus/full_result'];
  assert.ok(ref?.bucket && ref?.name && ref?.size > 0, what);
  assert.match(result.content[0].text, /max_result_size/, what);
  assert.ok(result.content[0].text.includes(ref.name) && result.content[0].text.includes(ref.bucket), what);
});

test('a truncated result of a tool without an output schema is the cut text, marked in _meta', async () => {
  const result = await client.callTool({ name: 'texts-long', arguments: {} });
  assert.equal(result.isError === true, false);
  assert.equal(result._meta?.['toolbus/truncated'], true);
  assert.ok(result._meta?.['toolbus/full_result']?.name);
});

test('a tools/list cursor this server did not give is refused with invalid params', async () => {
  for (const cursor of ['not base64!', 'ZGVtby1lY2hv']) {
    await assert.rejects(client.listTools({ cursor }), (err) => {
      assert.ok(err instanceof McpError, String(err));
      assert.equal(err.code, ErrorCode.InvalidParams);
      assert.match(err.message, /cursor/);
      return true;
    });
  }
});
