// POST /logout: end the session for good (every process serving the panel refuses its cookie from
// now on, a copy of it too), then drop the cookie from this browser.
import { sessionCookie } from '../auth.js';
import { defineRoute } from '../route.js';

export default defineRoute({
  method: 'POST', path: '/logout', access: 'user', kind: 'page',
  async handle({ base, bus, auth, principal }) {
    const session = principal && auth.sessionRecord(principal);
    // Not recorded (the database is down): a 503 says so, and the cookie stays for a retry.
    if (session) await bus.driver.admin.adminSessionEnd(session);
    return { redirect: `${base}/login`, setCookie: sessionCookie('', base || '/', false, 0) };
  },
});
