// POST /api/endpoints/:id/delete: remove an endpoint and its secrets (no undo; disable keeps it).
// Its waiting deliveries are cancelled.
import { notFound } from '../http.js';
import { defineRoute } from '../route.js';
import { uuidParam } from '../schemas.js';

export default defineRoute({
  method: 'POST', path: '/api/endpoints/:id/delete', access: 'user', kind: 'api',
  async handle({ bus, params }) {
    const id = uuidParam(params.id);
    const deleted = await bus.endpoints.delete(id);
    if (!deleted) throw notFound(`endpoint ${id}`);
    return { json: { deleted: id, cancelled: deleted.cancelled }, notice: `Deleted endpoint ${id}; cancelled ${deleted.cancelled} waiting ${deleted.cancelled === 1 ? 'delivery' : 'deliveries'}` };
  },
});
