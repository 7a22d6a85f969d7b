// Tokens for a test user from the test provider (provider.mjs) by the device code flow, both
// sides: the device asks, the user signs in (user_agent.mjs), the device polls. Prints the token
// answer as JSON (id_token, access_token, refresh_token, ...).
//
//   node device_flow.mjs ISSUER CLIENT_ID USER
import { signIn } from './user_agent.mjs';

const [issuer, clientId, user] = process.argv.slice(2);
const scope = 'openid offline_access profile groups unix';
const d = await (await fetch(`${issuer}/device/auth`, {
  method: 'POST', body: new URLSearchParams({ client_id: clientId, scope }),
})).json();
if (!d.device_code) throw new Error(JSON.stringify(d));
await signIn(d.verification_uri, user, d.user_code);
for (let i = 0; i < 50; i += 1) {
  const r = await fetch(`${issuer}/token`, {
    method: 'POST',
    body: new URLSearchParams({
      grant_type: 'urn:ietf:params:oauth:grant-type:device_code', device_code: d.device_code, client_id: clientId,
    }),
  });
  const t = await r.json();
  if (t.id_token) {
    console.log(JSON.stringify(t));
    process.exit(0);
  }
  if (t.error !== 'authorization_pending' && t.error !== 'slow_down') throw new Error(JSON.stringify(t));
  await new Promise((ok) => setTimeout(ok, 200));
}
throw new Error('no token');
