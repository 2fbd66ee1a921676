// POST /api/endpoints/:id/rotate: a new signing secret; the old one keeps verifying for the grace
// period. The new secret is in this one response only (from the panel's button: a page showing it once).
import { endpointView } from '../data.js';
import { secretPage } from '../html.js';
import { defineRoute } from '../route.js';
import { uuidParam } from '../schemas.js';

export default defineRoute({
  method: 'POST', path: '/api/endpoints/:id/rotate', access: 'user', kind: 'api',
  async handle({ bus, params, page }) {
    const id = uuidParam(params.id);
    const { secret, ...endpoint } = await bus.endpoints.rotateSecret(id);
    return {
      json: { endpoint: endpointView(endpoint), secret },
      formPage: (returnTo) => secretPage(page, 'Secret rotated: the previous one keeps verifying for the grace period', endpoint, secret, returnTo),
    };
  },
});
