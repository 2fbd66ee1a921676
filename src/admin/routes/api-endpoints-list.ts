// GET /api/endpoints?state&cursor&limit: webhook endpoints with state, failing since and disabled
// reason (never a secret), oldest first, in keyset pages of up to limit (default 1000).
import { endpointView } from '../data.js';
import { defineRoute, parse, queryFields } from '../route.js';
import { endpointListQuery } from '../schemas.js';

const DEFAULT_LIMIT = 1000;

export default defineRoute({
  method: 'GET', path: '/api/endpoints', access: 'user', kind: 'api',
  async handle({ bus, query: q }) {
    const { state, cursor, limit = DEFAULT_LIMIT } = parse(endpointListQuery, queryFields(q));
    const page = await bus.endpoints.page({ ...(state ? { state } : {}), limit, ...(cursor ? { after: cursor } : {}) });
    return { json: { endpoints: page.items.map(endpointView), nextCursor: page.nextCursor } };
  },
});
