// A real OpenID Connect provider (oidc-provider) for Gatehouse's single
// sign-on tests. Usage: node server.mjs [--port N]   (0 or absent: a free port)
//
// Prints one JSON line on standard output once it listens:
//   {"issuer":"http://127.0.0.1:PORT","port":PORT}
// and stops when standard input closes (so a test that dies takes it along).
//
// Control endpoints (plain JSON, for tests only, under /_test/):
//   POST /_test/clients   {"client_id","client_secret","redirect_uris":[...]}  add or replace a client
//   POST /_test/next-user {"sub","email","email_verified","groups"}            who the next login is
//   POST /_test/deny      {"error","error_description"}                      the next login ends in an error
//   POST /_test/misbehave {"mode"}  the next ID token from /token is tampered with:
//        "wrong_key" (signed by another key under the same kid), "wrong_audience", "wrong_issuer",
//        "expired", "wrong_nonce", "hs256" (MAC-signed with the client secret)
//   POST /_test/rotate-keys  a new signing key replaces the old one (new kid), as a provider rotates
//   POST /_test/id-token-claims {"claims": bool}  true: e-mail and groups in the ID token too
//        (default false: they are only at the userinfo endpoint, as oidc-provider conforms)
//   GET  /_test/stats     {"jwks_fetches","userinfo_calls","token_calls"}
//
// Logins complete without a person: the interaction page logs in the
// "next user" and grants every requested scope at once.

import http from 'node:http';
import crypto from 'node:crypto';
import * as jose from 'jose';

// A test that stops reading our output must not crash us (EPIPE).
process.stdout.on('error', () => {});
// oidc-provider's development warnings (in-memory adapter, Node version) are
// expected here; keep the test output for real problems.
const warn = console.warn.bind(console);
console.warn = (...a) => {
  if (typeof a[0] === 'string' && a[0].startsWith('oidc-provider WARNING')) return;
  warn(...a);
};

// Imported after the filter above: it warns when loaded.
const { default: Provider } = await import('oidc-provider');

const args = process.argv.slice(2);
const portArg = args.indexOf('--port');
const wantedPort = portArg >= 0 ? Number(args[portArg + 1]) : 0;

const state = {
  clients: new Map(),
  accounts: new Map(),
  nextUser: null,
  deny: null,
  misbehave: null,
  idTokenClaims: false,
  key: null,
  stats: { jwks_fetches: 0, userinfo_calls: 0, token_calls: 0 },
};

async function newKey() {
  const { privateKey } = await jose.generateKeyPair('RS256', { extractable: true });
  const jwk = await jose.exportJWK(privateKey);
  jwk.kid = crypto.randomBytes(8).toString('hex');
  jwk.alg = 'RS256';
  jwk.use = 'sig';
  return jwk;
}

let issuer;
let provider;
let handler;
// Cookie keys survive rebuilds, so sessions and interactions in flight stay valid.
const cookieKeys = [crypto.randomBytes(32).toString('hex')];

// The provider is rebuilt when clients or keys change. Its default memory
// adapter keeps its storage at module level, so codes, sessions and grants
// carry over to the new instance, as they would on a restarted real provider.
function build() {
  const p = new Provider(issuer, {
    clients: [...state.clients.values()].map((c) => ({
      client_id: c.client_id,
      client_secret: c.client_secret,
      redirect_uris: c.redirect_uris,
      grant_types: ['authorization_code'],
      response_types: ['code'],
      token_endpoint_auth_method: 'client_secret_basic',
    })),
    jwks: { keys: [state.key] },
    cookies: { keys: cookieKeys },
    claims: {
      openid: ['sub'],
      email: ['email', 'email_verified'],
      profile: ['name'],
      groups: ['groups'],
    },
    scopes: ['openid', 'email', 'profile', 'groups'],
    conformIdTokenClaims: !state.idTokenClaims,
    features: { devInteractions: { enabled: false } },
    interactions: { url: (ctx, interaction) => `/interaction/${interaction.uid}` },
    pkce: { required: () => true },
    findAccount: async (ctx, id) => {
      const acc = state.accounts.get(id);
      if (!acc) return undefined;
      return {
        accountId: id,
        claims: async () => {
          const c = { sub: id };
          if (acc.email !== undefined) c.email = acc.email;
          if (acc.email_verified !== undefined) c.email_verified = acc.email_verified;
          if (acc.groups !== undefined) c.groups = acc.groups;
          c.name = acc.name ?? acc.email ?? id;
          return c;
        },
      };
    },
    // Consent is implied: every login gets a grant for what it asked.
    loadExistingGrant: async (ctx) => {
      const grantId = ctx.oidc.result?.consent?.grantId
        || ctx.oidc.session.grantIdFor(ctx.oidc.client.clientId);
      if (grantId) {
        const g = await ctx.oidc.provider.Grant.find(grantId);
        if (g) return g;
      }
      const grant = new ctx.oidc.provider.Grant({
        clientId: ctx.oidc.client.clientId,
        accountId: ctx.oidc.session.accountId,
      });
      grant.addOIDCScope(ctx.oidc.params.scope ?? 'openid');
      grant.addOIDCClaims(['email', 'email_verified', 'groups', 'name']);
      await grant.save();
      return grant;
    },
  });
  p.proxy = false;
  p.use(countAndTamper);
  return p;
}

function rebuild() {
  provider = build();
  handler = provider.callback();
}

function b64json(part) {
  return JSON.parse(Buffer.from(part, 'base64url').toString('utf8'));
}

async function tamper(idToken, mode, clientId) {
  const [h, pl] = idToken.split('.');
  const header = b64json(h);
  const payload = b64json(pl);
  const now = Math.floor(Date.now() / 1000);
  let key = await jose.importJWK(state.key, 'RS256');
  let alg = 'RS256';
  switch (mode) {
    case 'wrong_key': {
      // Same kid as the real key: only the signature check can catch it.
      const { privateKey } = await jose.generateKeyPair('RS256');
      key = privateKey;
      break;
    }
    case 'wrong_audience':
      payload.aud = 'some-other-client';
      break;
    case 'wrong_issuer':
      payload.iss = 'https://impostor.example.com';
      break;
    case 'expired':
      payload.iat = now - 7200;
      payload.exp = now - 3600;
      break;
    case 'wrong_nonce':
      payload.nonce = 'not-the-nonce-you-sent';
      break;
    case 'hs256': {
      const c = state.clients.get(clientId);
      key = new TextEncoder().encode(c ? c.client_secret : 'x');
      alg = 'HS256';
      break;
    }
    default:
      return idToken;
  }
  const jwtHeader = { alg };
  if (header.typ) jwtHeader.typ = header.typ;
  if (alg !== 'HS256') jwtHeader.kid = header.kid;
  return new jose.SignJWT(payload).setProtectedHeader(jwtHeader).sign(key);
}

async function countAndTamper(ctx, next) {
  await next();
  if (ctx.path === '/jwks') state.stats.jwks_fetches += 1;
  if (ctx.path === '/me') state.stats.userinfo_calls += 1;
  if (ctx.path === '/token' && ctx.method === 'POST') {
    state.stats.token_calls += 1;
    const mode = state.misbehave;
    if (mode && ctx.status === 200 && ctx.body && ctx.body.id_token) {
      state.misbehave = null;
      const clientId = ctx.oidc?.client?.clientId;
      ctx.body = { ...ctx.body, id_token: await tamper(ctx.body.id_token, mode, clientId) };
    }
  }
}

function readBody(req) {
  return new Promise((resolve, reject) => {
    let data = '';
    req.on('data', (c) => { data += c; });
    req.on('end', () => {
      try { resolve(data ? JSON.parse(data) : {}); } catch (e) { reject(e); }
    });
    req.on('error', reject);
  });
}

function send(res, status, body) {
  const s = JSON.stringify(body);
  res.writeHead(status, { 'content-type': 'application/json', 'content-length': Buffer.byteLength(s) });
  res.end(s);
}

async function control(req, res, path) {
  const body = req.method === 'POST' ? await readBody(req) : {};
  switch (path) {
    case '/_test/clients':
      if (!body.client_id || !body.client_secret || !Array.isArray(body.redirect_uris)) {
        return send(res, 400, { error: 'client_id, client_secret and redirect_uris are required' });
      }
      state.clients.set(body.client_id, body);
      rebuild();
      return send(res, 200, { ok: true });
    case '/_test/next-user':
      if (!body.sub) return send(res, 400, { error: 'sub is required' });
      state.accounts.set(body.sub, body);
      state.nextUser = body.sub;
      state.deny = null;
      return send(res, 200, { ok: true });
    case '/_test/deny':
      state.deny = { error: body.error ?? 'access_denied', error_description: body.error_description ?? 'The user declined.' };
      return send(res, 200, { ok: true });
    case '/_test/misbehave':
      state.misbehave = body.mode ?? null;
      return send(res, 200, { ok: true });
    case '/_test/rotate-keys':
      state.key = await newKey();
      rebuild();
      return send(res, 200, { kid: state.key.kid });
    case '/_test/id-token-claims':
      state.idTokenClaims = Boolean(body.claims);
      rebuild();
      return send(res, 200, { ok: true });
    case '/_test/stats':
      return send(res, 200, state.stats);
    default:
      return send(res, 404, { error: 'unknown control endpoint' });
  }
}

async function interaction(req, res) {
  const details = await provider.interactionDetails(req, res);
  if (state.deny) {
    const result = state.deny;
    state.deny = null;
    return provider.interactionFinished(req, res, result, { mergeWithLastSubmission: false });
  }
  if (details.prompt.name === 'login') {
    if (!state.nextUser) {
      return provider.interactionFinished(req, res, {
        error: 'login_required',
        error_description: 'The test chose no user (POST /_test/next-user).',
      }, { mergeWithLastSubmission: false });
    }
    const accountId = state.nextUser;
    return provider.interactionFinished(req, res, { login: { accountId } }, { mergeWithLastSubmission: false });
  }
  // Consent: grant what was asked.
  const grant = new provider.Grant({ clientId: details.params.client_id, accountId: details.session.accountId });
  grant.addOIDCScope(details.params.scope ?? 'openid');
  const grantId = await grant.save();
  return provider.interactionFinished(req, res, { consent: { grantId } }, { mergeWithLastSubmission: true });
}

state.key = await newKey();

const server = http.createServer(async (req, res) => {
  const path = new URL(req.url, 'http://x').pathname;
  try {
    if (path.startsWith('/_test/')) return await control(req, res, path);
    if (path.startsWith('/interaction/')) return await interaction(req, res);
    return handler(req, res);
  } catch (e) {
    return send(res, 500, { error: String(e && e.message ? e.message : e) });
  }
});

server.listen(wantedPort, '127.0.0.1', () => {
  const { port } = server.address();
  issuer = `http://127.0.0.1:${port}`;
  rebuild();
  process.stdout.write(`${JSON.stringify({ issuer, port })}\n`);
});

process.stdin.on('end', () => process.exit(0));
process.stdin.on('close', () => process.exit(0));
process.stdin.resume();
