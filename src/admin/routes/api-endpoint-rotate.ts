// POST /api/endpoints/:id/rotate: a new signing secret; the old one keeps verifying for the grace
// period. The new secret is in this one response only.
import { endpointView, type EndpointView } from '../data.js';
import { notAvailable } from '../http.js';
import { defineRoute, optionalApi } from '../route.js';
import { uuidParam } from '../schemas.js';

export default defineRoute({
  method: 'POST', path: '/api/endpoints/:id/rotate', access: 'user', kind: 'api',
  async handle({ bus, params }) {
    const id = uuidParam(params.id);
    const rotate = optionalApi<(id: string) => Promise<EndpointView & { secret: string }>>((bus as { endpoints?: unknown }).endpoints, 'rotateSecret');
    if (!rotate) throw notAvailable('bus.endpoints.rotateSecret');
    const { secret, ...endpoint } = await rotate(id);
    return { json: { endpoint: endpointView(endpoint), secret }, notice: 'Secret rotated; the previous one keeps verifying for the grace period.' };
  },
});
