// POST /login: check the credentials and set an HttpOnly, SameSite=Strict session cookie
// derived from them (the token itself never goes into a cookie or a page).
import { sessionCookie } from '../auth.js';
import { defineRoute } from '../route.js';
import { safeNext } from './page-login.js';

export default defineRoute({
  method: 'POST', path: '/login', access: 'public', kind: 'page',
  async handle({ body, auth, base, req }) {
    const f = body.kind === 'form' ? body.value : new URLSearchParams();
    const next = safeNext(f.get('next'));
    const session = auth.login({ token: f.get('token') ?? undefined, username: f.get('username') ?? undefined, password: f.get('password') ?? undefined });
    if (!session) return { redirect: `${base}/login?failed=1${next !== '/' ? `&next=${encodeURIComponent(next)}` : ''}` };
    const secure = (req.socket as { encrypted?: boolean }).encrypted === true || req.headers['x-forwarded-proto'] === 'https';
    return { redirect: base + next, setCookie: sessionCookie(session, base || '/', secure) };
  },
});
