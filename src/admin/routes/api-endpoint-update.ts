// POST /api/endpoints/:id/update { url?, eventTypes?, description? }: change where an endpoint
// receives and what; its state, attempt log and secret stay.
import { z } from 'zod';
import { changesSomething, NO_ENDPOINT_CHANGE, type EndpointChangeKey } from '../../core/endpoint-input.js';
import { redactUrl } from '../../core/redact-url.js';
import { endpointView } from '../data.js';
import { bodyFields, defineRoute, parse } from '../route.js';
import { uuidParam } from '../schemas.js';

const input = z.object({
  url: z.string().min(1, 'must not be empty').optional(),
  eventTypes: z.union([z.string(), z.array(z.string())]).transform((v) => (Array.isArray(v) ? v : v.split(',')).map((s) => s.trim()).filter(Boolean))
    .refine((v) => v.length > 0, 'give at least one event type or pattern').optional(),
  // Lengths are bus.endpoints' to bound (2,048 and 1,000): stricter here, an endpoint made in code
  // or by the CLI with a longer description could not be edited from the panel at all.
  description: z.string().optional(),
  // The keys bus.endpoints.update takes, and its refusal of an update that changes nothing (one list, in core).
} satisfies Record<EndpointChangeKey, z.ZodType>).strict().refine(changesSomething, NO_ENDPOINT_CHANGE);

export default defineRoute({
  method: 'POST', path: '/api/endpoints/:id/update', access: 'user', kind: 'api',
  async handle({ bus, params, body }) {
    const id = uuidParam(params.id);
    const fields = bodyFields(body);
    // The panel's edit form leaves the URL blank when the URL has secret parts it will not show:
    // a blank URL from a form keeps the current one (a JSON body must still give a real one).
    if (body.kind === 'form' && fields.url === '') delete fields.url;
    const changes = parse(input, fields);
    const endpoint = await bus.endpoints.update(id, changes); // NotFoundError (404) when missing
    return { json: { endpoint: endpointView(endpoint) }, notice: `Updated ${redactUrl(endpoint.url)}` };
  },
});
