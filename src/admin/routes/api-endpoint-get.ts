// GET /api/endpoints/:id: one endpoint (never its secret).
import { endpointView, type EndpointView } from '../data.js';
import { notAvailable, notFound } from '../http.js';
import { defineRoute, optionalApi } from '../route.js';
import { uuidParam } from '../schemas.js';

export default defineRoute({
  method: 'GET', path: '/api/endpoints/:id', access: 'user', kind: 'api',
  async handle({ bus, params }) {
    const id = uuidParam(params.id);
    const get = optionalApi<(id: string) => Promise<EndpointView | null>>((bus as { endpoints?: unknown }).endpoints, 'get');
    if (!get) throw notAvailable('bus.endpoints');
    const endpoint = await get(id);
    if (!endpoint) throw notFound(`endpoint ${id}`);
    return { json: { endpoint: endpointView(endpoint) } };
  },
});
