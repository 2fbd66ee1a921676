// GET /api/endpoints/:id/attempts?cursor&limit: the endpoint's attempt log, newest first. The log
// outlives a deleted endpoint, so it is listed while attempts remain; an id with neither an
// endpoint nor an attempt is a 404, not an empty list that hides a typo.
import { z } from 'zod';
import { defineRoute, parse, queryFields } from '../route.js';
import { idCursor, uuidParam } from '../schemas.js';

const query = z.object({
  cursor: idCursor.optional(),
  limit: z.coerce.number({ message: 'must be a number' }).int().min(1, 'must be at least 1').max(500, 'must be at most 500').optional(),
}).strict();

export default defineRoute({
  method: 'GET', path: '/api/endpoints/:id/attempts', access: 'user', kind: 'api',
  async handle({ bus, params, query: q }) {
    const id = uuidParam(params.id);
    const { cursor, limit = 50 } = parse(query, queryFields(q));
    const page = await bus.endpoints.attemptPage(id, { limit, ...(cursor ? { before: cursor } : {}) }); // NotFoundError: 404
    return { json: { attempts: page.items, nextCursor: page.nextCursor } };
  },
});
