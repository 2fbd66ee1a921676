// POST /api/jobs/retry { ids } | { state: 'discarded', handler? }: reschedule dead letters now.
import { z } from 'zod';
import { badRequest } from '../http.js';
import { bodyFields, defineRoute, parse } from '../route.js';
import { jobIds } from '../schemas.js';

const input = z.object({
  ids: jobIds.optional(),
  state: z.enum(['discarded', 'cancelled'], { message: 'must be discarded or cancelled' }).optional(),
  handler: z.string().min(1).max(200).optional(),
}).strict();

export default defineRoute({
  method: 'POST', path: '/api/jobs/retry', access: 'user', kind: 'api',
  async handle({ bus, body }) {
    const { ids, state, handler } = parse(input, bodyFields(body));
    if (!ids === !state) throw badRequest('ids', 'give either ids or state (with an optional handler)');
    const retried = await bus.jobs.retry(ids ?? { state: state!, ...(handler ? { handler } : {}) });
    return { json: { retried }, notice: `Retrying ${retried.length} job${retried.length === 1 ? '' : 's'}.` };
  },
});
