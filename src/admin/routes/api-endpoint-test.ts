// POST /api/endpoints/:id/test: send a signed test event now and report the attempt.
import { defineRoute } from '../route.js';
import { uuidParam } from '../schemas.js';

export default defineRoute({
  method: 'POST', path: '/api/endpoints/:id/test', access: 'user', kind: 'api',
  async handle({ bus, params }) {
    const id = uuidParam(params.id);
    const attempt = await bus.endpoints.test(id);
    return { json: { attempt }, notice: `Test delivery: ${attempt.outcome}${attempt.status ? ` (HTTP ${attempt.status})` : ''}` };
  },
});
