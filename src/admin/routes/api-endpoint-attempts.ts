// GET /api/endpoints/:id/attempts?cursor&limit: the endpoint's attempt log, newest first. The log
// outlives a deleted endpoint, so it is listed while attempts remain; an id with neither an
// endpoint nor an attempt is a 404, not an empty list that hides a typo.
import { z } from 'zod';
import { notFound } from '../http.js';
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
    const rows = await bus.endpoints.attempts(id, { limit: limit + 1, ...(cursor ? { before: cursor } : {}) });
    // An empty page past the last attempt (a cursor) is a page all the same when the log exists.
    if (rows.length === 0 && !(await bus.endpoints.get(id)) && (!cursor || (await bus.endpoints.attempts(id, { limit: 1 })).length === 0)) {
      throw notFound(`endpoint ${id}`);
    }
    const attempts = rows.slice(0, limit);
    return { json: { attempts, nextCursor: rows.length > limit ? attempts.at(-1)!.id : null } };
  },
});
