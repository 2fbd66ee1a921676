// POST /api/endpoints/:id/rotate { graceMs?, secret? }: a new signing secret (generated, or the
// receiver's own); the old one keeps verifying for the grace period (webhooks.secretGraceMs, or
// graceMs: 0 to end it now, for a leaked secret). The new secret is in this one response only
// (from the panel's button: a page showing it once).
import { z } from 'zod';
import { endpointView } from '../data.js';
import { secretPage } from '../html.js';
import { bodyFields, defineRoute, parse } from '../route.js';
import { secretChecked, uuidParam } from '../schemas.js';

// The body was not read: { graceMs: 0 }, sent to retire a leaked secret at once, was dropped, and
// the old secret went on verifying for the default 24 h.
const input = z.object({
  graceMs: z.number({ message: 'must be a number of ms' }).int('must be a whole number of ms').min(0, 'must be at least 0').optional(),
  secret: z.string({ message: 'must be a Standard Webhooks secret (whsec_… or the base64 alone)' }).optional(),
}).strict();

export default defineRoute({
  method: 'POST', path: '/api/endpoints/:id/rotate', access: 'user', kind: 'api',
  async handle({ bus, params, page, body }) {
    const id = uuidParam(params.id);
    const { graceMs, secret: given } = parse(input, bodyFields(body));
    const { secret, ...endpoint } = await secretChecked(bus.endpoints.rotateSecret(id, {
      ...(graceMs === undefined ? {} : { graceMs }), ...(given === undefined ? {} : { secret: given }),
    }));
    return {
      json: { endpoint: endpointView(endpoint), secret },
      formPage: (returnTo) => secretPage(page, 'Secret rotated: the previous one keeps verifying for the grace period', endpoint, secret, returnTo),
    };
  },
});
