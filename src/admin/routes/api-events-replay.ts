// POST /api/events/replay { handler, type?, subject?, traceId?, since?, until? }: every stored,
// fanned-out event the filter and the handler take, to that handler again, as new jobs (history
// for a handler added since). The filter is checked by the bus (InvalidFilterError names it).
import { z } from 'zod';
import { bodyFields, defineRoute, parse } from '../route.js';

const text = z.string().max(1000);
const input = z.object({
  handler: z.string().min(1, 'must be a handler name').max(200, 'must be a handler name'),
  // Subjects and trace ids as stored: no cap (the request body's limit bounds them).
  type: text.optional(), subject: z.string().optional(), traceId: z.string().optional(), since: text.optional(), until: text.optional(),
}).strict();

export default defineRoute({
  method: 'POST', path: '/api/events/replay', access: 'user', kind: 'api',
  async handle({ bus, body }) {
    const { handler, ...filter } = parse(input, bodyFields(body));
    const replay = await bus.events.replay(filter, { handler });
    const skipped = replay.skipped ? `; ${replay.skipped} skipped (a job of it still waits or runs)` : '';
    return { json: { replay }, notice: `Replayed ${replay.replayed} event${replay.replayed === 1 ? '' : 's'} to ${handler}${skipped}.` };
  },
});
