// A real OpenID Connect provider (the npm package oidc-provider, not a mock) for Tessera's identity
// tests (tests/auth/). Started by the tests:
//
//   node provider.mjs --port P --keys FILE [--rotate] [--alg RS256|ES256] [--id-token-ttl S]
//                     [--redirect URI]...
//
// Issuer http://127.0.0.1:P. Its signing keys are kept in FILE (private JWKs, created when
// missing); --rotate adds a new key in front (the one it signs with from now on) and keeps the old
// one published, as a provider rotating its keys does. Clients: "tessera" (public: device code
// and authorization code with PKCE, refresh tokens) and "other-app" (the same, another
// audience). Users sign in on the provider's own development pages (any password); their claims
// come from USERS below. Prints "ready ISSUER" once listening.
import crypto from 'node:crypto';
import fs from 'node:fs';
import Provider from 'oidc-provider';

const args = process.argv.slice(2);
const arg = (name, def) => {
  const i = args.indexOf(name);
  return i >= 0 ? args[i + 1] : def;
};
const port = Number(arg('--port', '0'));
const keysFile = arg('--keys', '');
const alg = arg('--alg', 'RS256');
const idTokenTtl = Number(arg('--id-token-ttl', '3600'));
const redirects = args.flatMap((a, i) => (a === '--redirect' ? [args[i + 1]] : []));
if (!port || !keysFile) {
  console.error('usage: provider.mjs --port P --keys FILE [--rotate] [--alg A] [--id-token-ttl S]');
  process.exit(2);
}

// The people of the tests: their groups and Unix accounts.
const USERS = {
  alice: { groups: ['research', 'staff'], unix_account: 'alice' },
  bob: { groups: ['prod'], unix_account: 'bob' },
  // Her Unix account is one Debian has (nobody): the Slurm test runs her job under it.
  nora: { groups: ['research'], unix_account: 'nobody' },
  root1: { groups: ['tessera-admins'], unix_account: 'root1' },
  vera: { groups: ['research', 'tessera-viewers'] },
  prom: { groups: ['tessera-metrics'] },
};

function newKey() {
  const kid = `${alg.toLowerCase()}-${crypto.randomBytes(6).toString('hex')}`;
  const pair = alg === 'ES256'
    ? crypto.generateKeyPairSync('ec', { namedCurve: 'P-256' })
    : crypto.generateKeyPairSync('rsa', { modulusLength: 2048 });
  return { ...pair.privateKey.export({ format: 'jwk' }), kid, use: 'sig', alg };
}
let keys = fs.existsSync(keysFile) ? JSON.parse(fs.readFileSync(keysFile, 'utf8')) : [];
if (keys.length === 0 || args.includes('--rotate')) keys = [newKey(), ...keys];
fs.writeFileSync(keysFile, JSON.stringify(keys), { mode: 0o600 });

const issuer = `http://127.0.0.1:${port}`;
const client = (id) => ({
  client_id: id,
  token_endpoint_auth_method: 'none',
  grant_types: ['authorization_code', 'refresh_token', 'urn:ietf:params:oauth:grant-type:device_code'],
  response_types: ['code'],
  redirect_uris: redirects.length ? redirects : ['http://127.0.0.1/unused'],
  id_token_signed_response_alg: alg,
});
const provider = new Provider(issuer, {
  clients: [client('tessera'), client('other-app')],
  jwks: { keys },
  claims: {
    openid: ['sub'],
    profile: ['preferred_username', 'name'],
    groups: ['groups'],
    unix: ['unix_account'],
  },
  scopes: ['openid', 'offline_access', 'profile', 'groups', 'unix'],
  // Claims in the ID token itself (the token the API is given), not only from userinfo.
  conformIdTokenClaims: false,
  features: { devInteractions: { enabled: true }, deviceFlow: { enabled: true } },
  ttl: { IdToken: idTokenTtl, AccessToken: idTokenTtl, DeviceCode: 600 },
  // Refresh tokens for every grant that asked for offline_access (the device flow too).
  issueRefreshToken: async (ctx, c, code) => c.grantTypeAllowed('refresh_token') && code.scopes.has('offline_access'),
  async findAccount(ctx, id) {
    const user = USERS[id] || { groups: [] };
    return {
      accountId: id,
      async claims() {
        return { sub: id, preferred_username: id, name: id, ...user };
      },
    };
  },
  // Every client is first-party: no consent page beyond the development one.
  loadExistingGrant: async (ctx) => {
    const grantId = ctx.oidc.result?.consent?.grantId || ctx.oidc.session.grantIdFor(ctx.oidc.client.clientId);
    if (grantId) return ctx.oidc.provider.Grant.find(grantId);
    const grant = new ctx.oidc.provider.Grant({ clientId: ctx.oidc.client.clientId, accountId: ctx.oidc.session.accountId });
    grant.addOIDCScope('openid offline_access profile groups unix');
    await grant.save();
    return grant;
  },
});
provider.proxy = false;
const server = provider.listen(port, '127.0.0.1', () => {
  console.log(`ready ${issuer}`);
});
for (const sig of ['SIGTERM', 'SIGINT']) process.on(sig, () => server.close(() => process.exit(0)));
