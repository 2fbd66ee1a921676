// GET /healthz: 200 when the database answers and a leader was seen recently, else 503.
import { checkHealth } from '../health.js';
import { defineRoute } from '../route.js';

export default defineRoute({
  // Public unless publicHealth: false (the handler decides); it reveals no names or errors.
  method: 'GET', path: '/healthz', access: 'user', kind: 'api',
  async handle({ bus, leaderGraceMs }) {
    const health = await checkHealth(bus, leaderGraceMs);
    return { json: health, status: health.status === 'ok' ? 200 : 503 };
  },
});
