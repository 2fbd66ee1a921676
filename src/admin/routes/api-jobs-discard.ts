// POST /api/jobs/discard { ids }: dead-letter waiting jobs by hand (they stay visible, retryable).
import { z } from 'zod';
import { bodyFields, defineRoute, parse } from '../route.js';
import { jobIds } from '../schemas.js';

const input = z.object({ ids: jobIds }).strict();

export default defineRoute({
  method: 'POST', path: '/api/jobs/discard', access: 'user', kind: 'api',
  async handle({ bus, body }) {
    const { ids } = parse(input, bodyFields(body));
    const discarded = await bus.jobs.discard(ids);
    return { json: { discarded }, notice: `Discarded ${discarded.length} job${discarded.length === 1 ? '' : 's'}.` };
  },
});
