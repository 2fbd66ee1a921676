// POST /api/endpoints/:id/disable { reason? }: stop deliveries to an endpoint; fan-out skips it.
import { z } from 'zod';
import { redactUrl } from '../../core/redact-url.js';
import { endpointView } from '../data.js';
import { bodyFields, defineRoute, parse } from '../route.js';
import { uuidParam } from '../schemas.js';

// No length of its own: bus.endpoints.disable takes 1,000 characters and names the reason past it.
const input = z.object({ reason: z.string().optional() }).strict();

export default defineRoute({
  method: 'POST', path: '/api/endpoints/:id/disable', access: 'user', kind: 'api',
  async handle({ bus, params, body }) {
    const id = uuidParam(params.id);
    const { reason } = parse(input, bodyFields(body));
    const endpoint = await bus.endpoints.disable(id, { reason: reason || 'disabled by an operator from the admin' });
    return { json: { endpoint: endpointView(endpoint) }, notice: `Disabled ${redactUrl(endpoint.url)}` };
  },
});
