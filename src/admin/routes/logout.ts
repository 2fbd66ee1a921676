// POST /logout: drop the session cookie.
import { sessionCookie } from '../auth.js';
import { defineRoute } from '../route.js';

export default defineRoute({
  method: 'POST', path: '/logout', access: 'user', kind: 'page',
  async handle({ base }) {
    return { redirect: `${base}/login`, setCookie: sessionCookie('', base || '/', false, 0) };
  },
});
