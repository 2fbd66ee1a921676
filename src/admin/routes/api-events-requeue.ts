// POST /api/events/requeue { ids: [...] } | { poisoned: true }: put poisoned events back to the relay.
import { z } from 'zod';
import { badRequest } from '../http.js';
import { bodyFields, defineRoute, parse } from '../route.js';
import { eventIds, flag } from '../schemas.js';

const input = z.object({ ids: eventIds.optional(), poisoned: flag.optional() }).strict();

export default defineRoute({
  method: 'POST', path: '/api/events/requeue', access: 'user', kind: 'api',
  async handle({ bus, body }) {
    const { ids, poisoned } = parse(input, bodyFields(body));
    if (!ids === !poisoned) throw badRequest('ids', 'give either ids or poisoned: true');
    const requeued = await bus.events.requeue(ids ?? { poisoned: true });
    return { json: { requeued }, notice: `Requeued ${requeued.length} event${requeued.length === 1 ? '' : 's'}.` };
  },
});
