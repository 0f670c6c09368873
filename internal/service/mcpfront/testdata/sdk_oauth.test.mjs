// The official TypeScript MCP SDK client logs in to a Toolbus MCP front that is
// an OAuth resource server, run by TestTypeScriptSDKClientOAuth (oauth_test.go),
// which starts the stack, a test OpenID Connect issuer and the front:
//
//   TOOLBUS_MCP_URL         the front's endpoint (its resource), http://127.0.0.1:PORT/mcp
//   TOOLBUS_OIDC_CLIENT_ID  the public client registered at the issuer
//   TOOLBUS_OIDC_REDIRECT   its redirect URI
//   TOOLBUS_OIDC_USER       the user the issuer logs in (login_hint)
//
// The SDK does the discovery and the token exchange itself: the front's 401
// names its protected resource metadata, which names the issuer; the SDK reads
// the issuer's metadata and sends the user to its authorization endpoint with a
// PKCE challenge and the front as the resource. The provider below stands for
// the browser: it follows the authorization URL and takes the code from the
// redirect.
import assert from 'node:assert/strict';
import { test } from 'node:test';

import { Client } from '@modelcontextprotocol/sdk/client/index.js';
import { UnauthorizedError } from '@modelcontextprotocol/sdk/client/auth.js';
import { StreamableHTTPClientTransport } from '@modelcontextprotocol/sdk/client/streamableHttp.js';

const url = new URL(process.env.TOOLBUS_MCP_URL);
const clientId = process.env.TOOLBUS_OIDC_CLIENT_ID;
const redirect = process.env.TOOLBUS_OIDC_REDIRECT;
const user = process.env.TOOLBUS_OIDC_USER;

class BrowserlessProvider {
  constructor() {
    this.client = { client_id: clientId };
    this.authorizations = [];
  }

  get redirectUrl() { return redirect; }

  get clientMetadata() {
    return { client_name: 'toolbus-sdk-test', redirect_uris: [redirect], grant_types: ['authorization_code'], response_types: ['code'], token_endpoint_auth_method: 'none' };
  }

  clientInformation() { return this.client; }

  saveClientInformation(info) { this.client = info; }

  tokens() { return this.stored; }

  saveTokens(tokens) { this.stored = tokens; }

  saveCodeVerifier(verifier) { this.verifier = verifier; }

  codeVerifier() { return this.verifier; }

  // The user's browser: the issuer logs in login_hint at once and sends it
  // back to the redirect URI with a code.
  async redirectToAuthorization(authorizationUrl) {
    this.authorizations.push(new URL(authorizationUrl));
    authorizationUrl.searchParams.set('login_hint', user);
    const response = await fetch(authorizationUrl, { redirect: 'manual' });
    assert.equal(response.status, 302, `the authorization endpoint answered ${response.status}: ${await response.text()}`);
    const back = new URL(response.headers.get('location'));
    assert.equal(`${back.origin}${back.pathname}`, redirect);
    this.code = back.searchParams.get('code');
    assert.ok(this.code, `no code in ${back}`);
  }
}

test('logs in with the authorization code flow and PKCE, then lists and calls as the token\'s agent', async () => {
  const provider = new BrowserlessProvider();
  const first = new StreamableHTTPClientTransport(url, { authProvider: provider });
  await assert.rejects(new Client({ name: 'toolbus-sdk-oauth', version: '1.0.0' }).connect(first), UnauthorizedError);

  assert.equal(provider.authorizations.length, 1, 'the SDK did not send the user to the issuer');
  const asked = provider.authorizations[0];
  assert.equal(asked.searchParams.get('code_challenge_method'), 'S256');
  assert.ok(asked.searchParams.get('code_challenge'), 'no PKCE challenge');
  assert.equal(asked.searchParams.get('resource'), url.href, 'the resource indicator is not the front');
  assert.equal(asked.searchParams.get('client_id'), clientId);

  await first.finishAuth(provider.code);
  assert.ok(provider.stored?.access_token, 'no access token after the exchange');

  const transport = new StreamableHTTPClientTransport(url, { authProvider: provider });
  const client = new Client({ name: 'toolbus-sdk-oauth', version: '1.0.0' });
  await client.connect(transport);
  try {
    const { tools } = await client.listTools();
    const names = tools.map((t) => t.name);
    assert.ok(names.includes('demo-echo'), `tools/list lacks demo-echo: ${names}`);
    assert.ok(!names.includes('demo-word_count'), `the agent guest's view excludes demo-word_count: ${names}`);
    const result = await client.callTool({ name: 'demo-echo', arguments: { text: 'hello with OAuth' } });
    assert.notEqual(result.isError, true, JSON.stringify(result));
    assert.deepEqual(result.content.map((c) => c.text), ['hello with OAuth']);
  } finally {
    await client.close();
  }
});

test('a request without a token is answered 401 with the resource metadata', async () => {
  const response = await fetch(url, {
    method: 'POST',
    headers: { 'Content-Type': 'application/json', Accept: 'application/json, text/event-stream' },
    body: JSON.stringify({ jsonrpc: '2.0', id: 1, method: 'ping' }),
  });
  assert.equal(response.status, 401);
  const challenge = response.headers.get('www-authenticate');
  assert.match(challenge, /^Bearer resource_metadata="[^"]+\/\.well-known\/oauth-protected-resource\/mcp"$/);
  const metadata = await (await fetch(challenge.match(/"([^"]+)"/)[1])).json();
  assert.equal(metadata.resource, url.href);
  assert.equal(metadata.authorization_servers.length, 1);
});
