// POST /api/endpoints/:id/test: send a signed test event now and report the attempt.
import { notAvailable } from '../http.js';
import { defineRoute, optionalApi } from '../route.js';
import { uuidParam } from '../schemas.js';

export default defineRoute({
  method: 'POST', path: '/api/endpoints/:id/test', access: 'user', kind: 'api',
  async handle({ bus, params }) {
    const id = uuidParam(params.id);
    const test = optionalApi<(id: string) => Promise<{ outcome: string; status: number | null }>>((bus as { endpoints?: unknown }).endpoints, 'test');
    if (!test) throw notAvailable('bus.endpoints.test');
    const attempt = await test(id);
    return { json: { attempt }, notice: `Test delivery: ${attempt.outcome}${attempt.status ? ` (HTTP ${attempt.status})` : ''}` };
  },
});
