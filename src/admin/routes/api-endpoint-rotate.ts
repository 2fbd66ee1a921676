// POST /api/endpoints/:id/rotate: a new signing secret; the old one keeps verifying for the grace
// period. The new secret is in this one response only.
import { endpointView } from '../data.js';
import { defineRoute } from '../route.js';
import { uuidParam } from '../schemas.js';

export default defineRoute({
  method: 'POST', path: '/api/endpoints/:id/rotate', access: 'user', kind: 'api',
  async handle({ bus, params }) {
    const id = uuidParam(params.id);
    const { secret, ...endpoint } = await bus.endpoints.rotateSecret(id);
    return { json: { endpoint: endpointView(endpoint), secret }, notice: 'Secret rotated; the previous one keeps verifying for the grace period.' };
  },
});
