// GET /api/overview: backlog, poisoned, oldest unfanned age, jobs by state, table sizes, alerts.
import { adminOverview } from '../overview.js';
import { defineRoute } from '../route.js';

export default defineRoute({
  method: 'GET', path: '/api/overview', access: 'user', kind: 'api',
  async handle({ bus }) {
    const { raw: _raw, ...overview } = await adminOverview(bus);
    return { json: overview };
  },
});
