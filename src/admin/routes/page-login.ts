// GET /login: the login form (token, or username and password under basic auth).
import { html, layout } from '../html.js';
import { localPath } from '../http.js';
import { defineRoute } from '../route.js';

export default defineRoute({
  method: 'GET', path: '/login', access: 'public', kind: 'page',
  async handle(ctx) {
    const p = { ...ctx.page, csrf: null };
    const next = safeNext(ctx.query.get('next'));
    const failed = ctx.query.get('failed') === '1';
    const fields = ctx.auth.mode === 'basic'
      ? html`<label>Username <input name="username" autocomplete="username" required autofocus></label><label>Password <input type="password" name="password" autocomplete="current-password" required></label>`
      : html`<label>Admin token <input type="password" name="token" autocomplete="current-password" required autofocus></label>`;
    const body = ctx.auth.mode === 'none'
      ? html`<p>No login needed: this admin serves loopback clients only. <a href="${p.base}/">Open the overview</a>.</p>`
      : html`<div class="login"><h1>rea admin</h1>
${failed ? html`<p class="notice alert" role="alert">Wrong credentials.</p>` : ''}
<form class="stack" method="post" action="${p.base}/login">
<input type="hidden" name="next" value="${next}">
${fields}
<div><button type="submit" class="primary">Log in</button></div>
</form></div>`;
    return { html: layout(p, 'Log in', body), status: failed ? 401 : 200 };
  },
});

/** Only a path inside the admin: never another host (an open redirect). */
export function safeNext(next: string | null): string {
  return localPath(next) ?? '/';
}
