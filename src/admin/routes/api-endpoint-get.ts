// GET /api/endpoints/:id: one endpoint (never its secret).
import { endpointView } from '../data.js';
import { notFound } from '../http.js';
import { defineRoute } from '../route.js';
import { uuidParam } from '../schemas.js';

export default defineRoute({
  method: 'GET', path: '/api/endpoints/:id', access: 'user', kind: 'api',
  async handle({ bus, params }) {
    const id = uuidParam(params.id);
    const endpoint = await bus.endpoints.get(id);
    if (!endpoint) throw notFound(`endpoint ${id}`);
    return { json: { endpoint: endpointView(endpoint) } };
  },
});
