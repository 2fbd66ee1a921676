// POST /api/events/:id/replay { endpointId }: deliver a past event again, as a new delivery.
import { z } from 'zod';
import { bodyFields, defineRoute, parse } from '../route.js';
import { uuidParam } from '../schemas.js';

const input = z.object({ endpointId: z.string().regex(/^[0-9a-f-]{36}$/i, 'must be an endpoint id') }).strict();

export default defineRoute({
  method: 'POST', path: '/api/events/:id/replay', access: 'user', kind: 'api',
  async handle({ bus, params, body }) {
    const id = uuidParam(params.id);
    const { endpointId } = parse(input, bodyFields(body));
    const delivery = await bus.events.replay(id, { endpointId });
    return { json: { delivery }, notice: 'Replay scheduled as a new delivery.' };
  },
});
