// GET /api/endpoints?state: webhook endpoints with state, failing since and disabled reason (never a secret).
import { z } from 'zod';
import { endpointView } from '../data.js';
import { defineRoute, parse, queryFields } from '../route.js';

const query = z.object({ state: z.enum(['enabled', 'failing', 'disabled'], { message: 'must be enabled, failing or disabled' }).optional() }).strict();

export default defineRoute({
  method: 'GET', path: '/api/endpoints', access: 'user', kind: 'api',
  async handle({ bus, query: q }) {
    const filter = parse(query, queryFields(q));
    return { json: { endpoints: (await bus.endpoints.list(filter)).map(endpointView) } };
  },
});
