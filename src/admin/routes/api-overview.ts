// GET /api/overview: backlog, poisoned, oldest unfanned age, jobs by state, table sizes, alerts.
import { defineRoute } from '../route.js';

export default defineRoute({
  method: 'GET', path: '/api/overview', access: 'user', kind: 'api',
  async handle({ bus }) {
    return { json: await bus.overview() };
  },
});
