// POST /api/events/:id/replay { endpointId } | { handler }: send a past event again, to one webhook
// endpoint (a new delivery) or to one in-process handler (a new job).
import { z } from 'zod';
import { bodyFields, defineRoute, parse } from '../route.js';
import { uuidParam } from '../schemas.js';

const input = z.object({
  endpointId: z.string().regex(/^[0-9a-f-]{36}$/i, 'must be an endpoint id').optional(),
  handler: z.string().min(1, 'must be a handler name').max(200, 'must be a handler name').optional(),
}).strict().refine((v) => (v.endpointId === undefined) !== (v.handler === undefined), {
  message: 'pass endpointId (a webhook endpoint) or handler (an in-process handler), one of the two',
});

export default defineRoute({
  method: 'POST', path: '/api/events/:id/replay', access: 'user', kind: 'api',
  async handle({ bus, params, body }) {
    const id = uuidParam(params.id);
    const target = parse(input, bodyFields(body));
    if (target.handler !== undefined) {
      const job = await bus.events.replay(id, { handler: target.handler });
      return { json: { job }, notice: `Replay scheduled: job ${job.jobId} of handler ${job.handler}.` };
    }
    const delivery = await bus.events.replay(id, { endpointId: target.endpointId! });
    return { json: { delivery }, notice: 'Replay scheduled as a new delivery.' };
  },
});
