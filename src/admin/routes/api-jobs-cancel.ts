// POST /api/jobs/cancel { ids }: cancel waiting jobs (available, retryable); running ones finish.
import { z } from 'zod';
import { bodyFields, defineRoute, parse } from '../route.js';
import { jobIds } from '../schemas.js';

const input = z.object({ ids: jobIds }).strict();

export default defineRoute({
  method: 'POST', path: '/api/jobs/cancel', access: 'user', kind: 'api',
  async handle({ bus, body }) {
    const { ids } = parse(input, bodyFields(body));
    const cancelled = await bus.jobs.cancel(ids);
    return { json: { cancelled }, notice: `Cancelled ${cancelled.length} job${cancelled.length === 1 ? '' : 's'}.` };
  },
});
