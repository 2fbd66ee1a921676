// POST /api/endpoints/:id/disable { reason? }: stop deliveries to an endpoint; fan-out skips it.
import { z } from 'zod';
import { endpointView, type EndpointView } from '../data.js';
import { notAvailable } from '../http.js';
import { bodyFields, defineRoute, optionalApi, parse } from '../route.js';
import { uuidParam } from '../schemas.js';

const input = z.object({ reason: z.string().max(500).optional() }).strict();

export default defineRoute({
  method: 'POST', path: '/api/endpoints/:id/disable', access: 'user', kind: 'api',
  async handle({ bus, params, body }) {
    const id = uuidParam(params.id);
    const { reason } = parse(input, bodyFields(body));
    const disable = optionalApi<(id: string, o: { reason: string }) => Promise<EndpointView>>((bus as { endpoints?: unknown }).endpoints, 'disable');
    if (!disable) throw notAvailable('bus.endpoints.disable');
    const endpoint = await disable(id, { reason: reason || 'disabled by an operator from the admin' });
    return { json: { endpoint: endpointView(endpoint) }, notice: `Disabled ${endpoint.url}` };
  },
});
