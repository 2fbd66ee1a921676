// POST /api/endpoints/:id/enable: the owner re-enables an endpoint (clears failing and disabled).
import { redactUrl } from '../../core/redact-url.js';
import { endpointView } from '../data.js';
import { defineRoute } from '../route.js';
import { uuidParam } from '../schemas.js';

export default defineRoute({
  method: 'POST', path: '/api/endpoints/:id/enable', access: 'user', kind: 'api',
  async handle({ bus, params }) {
    const id = uuidParam(params.id);
    const endpoint = await bus.endpoints.enable(id); // NotFoundError (404) when missing
    return { json: { endpoint: endpointView(endpoint) }, notice: `Enabled ${redactUrl(endpoint.url)}` };
  },
});
