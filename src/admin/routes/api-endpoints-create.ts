// POST /api/endpoints { url, eventTypes, description?, secret? }: subscribe an endpoint. The
// secret (generated, or the receiver's own: whsec_… or the base64 alone) is in this one response
// only (the receiver needs it); reads show its last 4 characters before the padding.
// From the panel's form, the answer is a page that shows the secret once.
import { z } from 'zod';
import { endpointView } from '../data.js';
import { secretPage } from '../html.js';
import { bodyFields, defineRoute, parse } from '../route.js';
import { secretChecked } from '../schemas.js';

const input = z.object({
  url: z.string().min(1, 'is required'),
  eventTypes: z.union([z.string(), z.array(z.string())]).transform((v) => (Array.isArray(v) ? v : v.split(',')).map((s) => s.trim()).filter(Boolean))
    .refine((v) => v.length > 0, 'give at least one event type or pattern'),
  // Lengths are bus.endpoints' to bound (2,048 and 1,000): stricter here, an endpoint made in code
  // or by the CLI with a longer description could not be edited from the panel at all.
  description: z.string().optional(),
  // Checked by bus.endpoints.create (WebhookSecretError, which names the problem, never the secret).
  secret: z.string({ message: 'must be a Standard Webhooks secret (whsec_… or the base64 alone)' }).optional(),
}).strict();

export default defineRoute({
  method: 'POST', path: '/api/endpoints', access: 'user', kind: 'api',
  async handle({ bus, body, page }) {
    const fields = parse(input, bodyFields(body));
    const { secret, ...endpoint } = await secretChecked(bus.endpoints.create(fields));
    return {
      json: { endpoint: endpointView(endpoint), secret }, status: 201,
      formPage: (returnTo) => secretPage(page, 'Endpoint created', endpoint, secret, returnTo),
    };
  },
});
