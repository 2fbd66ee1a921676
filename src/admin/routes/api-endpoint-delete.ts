// POST /api/endpoints/:id/delete: remove an endpoint and its secrets (no undo; disable keeps it).
// Deliveries already queued for it are discarded when they come up.
import { notFound } from '../http.js';
import { defineRoute } from '../route.js';
import { uuidParam } from '../schemas.js';

export default defineRoute({
  method: 'POST', path: '/api/endpoints/:id/delete', access: 'user', kind: 'api',
  async handle({ bus, params }) {
    const id = uuidParam(params.id);
    if (!(await bus.endpoints.delete(id))) throw notFound(`endpoint ${id}`);
    return { json: { deleted: id }, notice: `Deleted endpoint ${id}` };
  },
});
