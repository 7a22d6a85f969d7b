// The user's side of a sign-in at the test provider (provider.mjs), over plain HTTP like a browser
// without JavaScript: opens URL, then fills and submits each page's form (the user code, the
// login with any password, the consent, the device confirmation), keeping cookies and following
// redirects, until the provider says the device is signed in or redirects out of the provider
// (authorization code flow: the redirect is printed). Used by the tests and by device_flow.mjs.
//
//   node user_agent.mjs URL USER [USER_CODE]
export async function signIn(url, user, userCode) {
  const origin = new URL(url).origin;
  const jar = new Map();
  const go = async (target, opts = {}) => {
    const headers = { cookie: [...jar].map(([k, v]) => `${k}=${v}`).join('; '), ...(opts.headers || {}) };
    const res = await fetch(target, { ...opts, headers, redirect: 'manual' });
    for (const c of res.headers.getSetCookie()) {
      const kv = c.split(';')[0];
      const i = kv.indexOf('=');
      jar.set(kv.slice(0, i), kv.slice(i + 1));
    }
    return res;
  };
  let target = url;
  let opts = {};
  for (let step = 0; step < 20; step += 1) {
    const res = await go(target, opts);
    opts = {};
    if (res.status >= 300 && res.status < 400) {
      const next = new URL(res.headers.get('location'), target).href;
      if (!next.startsWith(origin)) return { redirect: next };
      target = next;
      continue;
    }
    const html = await res.text();
    if (res.status !== 200) throw new Error(`${target}: ${res.status}: ${html.slice(0, 300)}`);
    if (/Sign-in Success|successfully signed in|device is now connected|You can now close/i.test(html)) {
      return { done: true };
    }
    const form = /<form[^>]*>([\s\S]*?)<\/form>/i.exec(html);
    if (!form) throw new Error(`${target}: no form and no success: ${html.slice(-600)}`);
    const tag = /<form([^>]*)>/i.exec(form[0])[1];
    const action = (/action="([^"]*)"/i.exec(tag) || [, target])[1].replace(/&amp;/g, '&');
    const body = new URLSearchParams();
    for (const input of form[1].matchAll(/<input([^>]*)>/gi)) {
      const name = (/name="([^"]*)"/i.exec(input[1]) || [])[1];
      if (!name) continue;
      const value = (/value="([^"]*)"/i.exec(input[1]) || [, ''])[1];
      if (name === 'user_code') body.set(name, userCode || value);
      else if (name === 'login') body.set(name, user);
      else if (name === 'password') body.set(name, 'any-password');
      else body.set(name, value);
    }
    target = new URL(action, target).href;
    opts = { method: 'POST', body: body.toString(), headers: { 'content-type': 'application/x-www-form-urlencoded' } };
  }
  throw new Error('sign-in did not finish in 20 steps');
}

if (import.meta.url === `file://${process.argv[1]}`) {
  const [url, user, code] = process.argv.slice(2);
  signIn(url, user, code).then((r) => console.log(JSON.stringify(r)), (e) => {
    console.error(String(e));
    process.exit(1);
  });
}
