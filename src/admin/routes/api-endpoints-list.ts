// GET /api/endpoints?state: webhook endpoints with state, failing since and disabled reason (never a secret).
import { z } from 'zod';
import { endpointView, type EndpointView } from '../data.js';
import { notAvailable } from '../http.js';
import { defineRoute, optionalApi, parse, queryFields } from '../route.js';

const query = z.object({ state: z.enum(['enabled', 'failing', 'disabled'], { message: 'must be enabled, failing or disabled' }).optional() }).strict();

export default defineRoute({
  method: 'GET', path: '/api/endpoints', access: 'user', kind: 'api',
  async handle({ bus, query: q }) {
    const filter = parse(query, queryFields(q));
    const list = optionalApi<(f?: { state?: string }) => Promise<EndpointView[]>>((bus as { endpoints?: unknown }).endpoints, 'list');
    if (!list) throw notAvailable('bus.endpoints');
    return { json: { endpoints: (await list(filter)).map(endpointView) } };
  },
});
