// POST /api/endpoints/:id/enable: the owner re-enables an endpoint (clears failing and disabled).
import { endpointView, type EndpointView } from '../data.js';
import { notAvailable } from '../http.js';
import { defineRoute, optionalApi } from '../route.js';
import { uuidParam } from '../schemas.js';

export default defineRoute({
  method: 'POST', path: '/api/endpoints/:id/enable', access: 'user', kind: 'api',
  async handle({ bus, params }) {
    const id = uuidParam(params.id);
    const enable = optionalApi<(id: string) => Promise<EndpointView>>((bus as { endpoints?: unknown }).endpoints, 'enable');
    if (!enable) throw notAvailable('bus.endpoints.enable');
    const endpoint = await enable(id); // NotFoundError (404) when missing
    return { json: { endpoint: endpointView(endpoint) }, notice: `Enabled ${endpoint.url}` };
  },
});
