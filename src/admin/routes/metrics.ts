// GET /metrics: Prometheus text format (backlog, poisoned, oldest age, jobs, tables, durations, deliveries).
import { defineRoute } from '../route.js';

export default defineRoute({
  method: 'GET', path: '/metrics', access: 'user', kind: 'api',
  async handle({ metrics }) {
    return { text: await metrics.render(), contentType: metrics.contentType };
  },
});
