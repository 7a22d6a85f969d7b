// Sign-in through the organisation's identity provider (OpenID Connect, authorization code with
// PKCE), beside the API-token box. Loaded before app.js and hooked into its sign-in form only
// through the DOM: when the server names a provider (GET /v1/auth/config), the form gains a
// "Sign in with your organisation" button; coming back from the provider with a code, the code is
// exchanged for tokens here, in the browser (a public client: no secret), and the ID token is
// handed to the form as if typed, so the rest of the page works with it as with any token. The
// refresh token, when the provider gives one, renews the ID token a minute before it expires.
"use strict";
(function () {
  const KEY = "tessera-oidc";  // sessionStorage: the flow in progress; localStorage: the refresh token
  const b64url = bytes => btoa(String.fromCharCode(...new Uint8Array(bytes)))
    .replace(/\+/g, "-").replace(/\//g, "_").replace(/=+$/, "");
  const random = () => b64url(crypto.getRandomValues(new Uint8Array(32)));
  const here = () => location.origin + location.pathname;
  let provider = null;  // {issuer, client_id, scopes, authorization_endpoint, token_endpoint}

  function why(text) { const p = document.getElementById("login-why"); if (p) p.textContent = text; }
  async function json(url, init) {
    const r = await fetch(url, init);
    const body = await r.json().catch(() => ({}));
    if (!r.ok) throw new Error(body.error_description || body.error || ("HTTP " + r.status));
    return body;
  }
  async function discover() {
    const cfg = await json("/v1/auth/config");
    if (!cfg.oidc) return null;
    const d = await json(cfg.oidc.issuer.replace(/\/$/, "") + "/.well-known/openid-configuration");
    return { ...cfg.oidc, authorization_endpoint: d.authorization_endpoint, token_endpoint: d.token_endpoint };
  }
  // The ID token into the page's own sign-in form, submitted: app.js signs in with it.
  function useToken(idToken) {
    const form = document.getElementById("login"), input = document.getElementById("token");
    if (!form || !input) return;
    input.value = idToken;
    form.requestSubmit();
  }
  function claims(idToken) {
    try { return JSON.parse(atob(idToken.split(".")[1].replace(/-/g, "+").replace(/_/g, "/"))); } catch (e) { return {}; }
  }
  function scheduleRefresh(idToken) {
    const exp = (claims(idToken).exp || 0) * 1000;
    const refreshToken = localStorage.getItem(KEY + "-refresh");
    if (!exp || !refreshToken || !provider) return;
    setTimeout(async () => {
      try {
        const t = await json(provider.token_endpoint, { method: "POST", body: new URLSearchParams({
          grant_type: "refresh_token", refresh_token: refreshToken, client_id: provider.client_id }) });
        if (t.refresh_token) localStorage.setItem(KEY + "-refresh", t.refresh_token);
        if (t.id_token) { useToken(t.id_token); scheduleRefresh(t.id_token); }
      } catch (e) { localStorage.removeItem(KEY + "-refresh"); }
    }, Math.max(0, exp - Date.now() - 60000));
  }
  async function start() {
    const verifier = random(), state = random(), nonce = random();
    const challenge = b64url(await crypto.subtle.digest("SHA-256", new TextEncoder().encode(verifier)));
    sessionStorage.setItem(KEY, JSON.stringify({ verifier, state, nonce, hash: location.hash }));
    location.assign(provider.authorization_endpoint + "?" + new URLSearchParams({
      response_type: "code", client_id: provider.client_id, redirect_uri: here(), scope: provider.scopes,
      state, nonce, code_challenge: challenge, code_challenge_method: "S256" }));
  }
  // Back from the provider: ?code=&state= (or ?error=) in the URL.
  async function finish(params) {
    const flow = JSON.parse(sessionStorage.getItem(KEY) || "null");
    sessionStorage.removeItem(KEY);
    history.replaceState(null, "", here() + (flow && flow.hash ? flow.hash : ""));
    if (params.get("error")) throw new Error(params.get("error_description") || params.get("error"));
    if (!flow || flow.state !== params.get("state")) throw new Error("the sign-in answer does not match a sign-in started here");
    const t = await json(provider.token_endpoint, { method: "POST", body: new URLSearchParams({
      grant_type: "authorization_code", code: params.get("code"), redirect_uri: here(),
      client_id: provider.client_id, code_verifier: flow.verifier }) });
    if (!t.id_token) throw new Error("the provider gave no ID token");
    if (claims(t.id_token).nonce !== flow.nonce) throw new Error("the ID token is not the answer to this sign-in (nonce)");
    if (t.refresh_token) localStorage.setItem(KEY + "-refresh", t.refresh_token);
    useToken(t.id_token);
    scheduleRefresh(t.id_token);
  }
  async function main() {
    try { provider = await discover(); } catch (e) { return; }  // no provider: tokens only
    if (!provider) return;
    const form = document.getElementById("login");
    if (form) {
      const button = document.createElement("button");
      button.type = "button";
      button.id = "oidc-sign-in";
      button.textContent = "Sign in with your organisation";
      button.addEventListener("click", () => start().catch(e => why("Sign-in failed: " + e.message)));
      form.insertBefore(button, form.querySelector("label"));
      const or = document.createElement("p");
      or.className = "note";
      or.textContent = "or with an API token:";
      form.insertBefore(or, form.querySelector("label"));
    }
    const params = new URLSearchParams(location.search);
    if (params.get("code") || params.get("error")) {
      await finish(params).catch(e => why("Sign-in through the provider failed: " + e.message));
    } else {
      const kept = localStorage.getItem("tessera-token");
      if (kept && kept.split(".").length === 3) scheduleRefresh(kept);
    }
  }
  main();
})();
