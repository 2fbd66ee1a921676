// POST /api/jobs/cancel { ids }: cancel waiting jobs (available, retryable); running ones finish.
import { z } from 'zod';
import { notAvailable } from '../http.js';
import { bodyFields, defineRoute, optionalApi, parse } from '../route.js';
import { jobIds } from '../schemas.js';

const input = z.object({ ids: jobIds }).strict();

export default defineRoute({
  method: 'POST', path: '/api/jobs/cancel', access: 'user', kind: 'api',
  async handle({ bus, body }) {
    const { ids } = parse(input, bodyFields(body));
    const cancel = optionalApi<(ids: readonly string[]) => Promise<string[] | { ids: string[] }>>(bus.jobs, 'cancel');
    if (!cancel) throw notAvailable('bus.jobs.cancel');
    const result = await cancel(ids);
    const cancelled = Array.isArray(result) ? result : result.ids;
    return { json: { cancelled }, notice: `Cancelled ${cancelled.length} job${cancelled.length === 1 ? '' : 's'}.` };
  },
});
