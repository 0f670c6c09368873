// The official TypeScript MCP SDK client against a Toolbus MCP front whose
// tools answer with structured results of every shape, run by
// TestTypeScriptSDKStructuredContent (structured_test.go):
//
//   TOOLBUS_MCP_URL           the front's endpoint, http://127.0.0.1:PORT/mcp
//   TOOLBUS_MCP_TOKEN         a bearer token of the agent analyst
//   TOOLBUS_STRUCTURED_CASES  the calls, as JSON: [{tool, args, structured?, wrapped, text, isError}]
import assert from 'node:assert/strict';
import { after, before, test } from 'node:test';

import { Client } from '@modelcontextprotocol/sdk/client/index.js';
import { StreamableHTTPClientTransport } from '@modelcontextprotocol/sdk/client/streamableHttp.js';

const url = process.env.TOOLBUS_MCP_URL;
const token = process.env.TOOLBUS_MCP_TOKEN;
const cases = JSON.parse(process.env.TOOLBUS_STRUCTURED_CASES ?? '[]');

let client;

before(async () => {
  assert.ok(url && token && cases.length > 0, 'TOOLBUS_MCP_URL, TOOLBUS_MCP_TOKEN and TOOLBUS_STRUCTURED_CASES must be set');
  const transport = new StreamableHTTPClientTransport(new URL(url), {
    requestInit: { headers: { Authorization: `Bearer ${token}` } },
  });
  client = new Client({ name: 'toolbus-sdk-structured', version: '1.0.0' });
  await client.connect(transport);
});

after(async () => {
  await client?.close();
});

test('lists the tools, compiling every output schema, each an object schema', async () => {
  // listTools compiles a validator of each outputSchema: one it cannot
  // compile (a reference into nowhere) fails the whole list.
  const { tools } = await client.listTools();
  for (const c of cases) {
    assert.ok(tools.some((t) => t.name === c.tool), `tools/list lacks ${c.tool}`);
  }
  for (const t of tools) {
    if (t.outputSchema) {
      assert.equal(t.outputSchema.type, 'object', `${t.name}: ${JSON.stringify(t.outputSchema)}`);
    }
  }
});

test('calls each tool: its structured content is an object that fits its outputSchema', async () => {
  await client.listTools();
  for (const c of cases) {
    // callTool refuses a structuredContent that is not an object (the
    // result's schema) and one that does not conform to the tool's
    // outputSchema: either would throw here.
    const result = await client.callTool({ name: c.tool, arguments: c.args });
    const what = `${c.tool} ${JSON.stringify(c.args)}: ${JSON.stringify(result)}`;
    assert.equal(result.isError === true, c.isError, what);
    if (c.structured === undefined) {
      assert.equal(result.structuredContent, undefined, what);
    } else {
      assert.deepEqual(result.structuredContent, c.structured, what);
    }
    assert.equal(result._meta?.['toolbus/wrapped'] === true, c.wrapped, what);
    assert.equal(result.content.at(-1).text, c.text, what);
  }
});
