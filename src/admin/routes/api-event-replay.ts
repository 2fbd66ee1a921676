// POST /api/events/:id/replay { endpointId }: deliver a past event again, as a new delivery.
import { z } from 'zod';
import { notAvailable } from '../http.js';
import { bodyFields, defineRoute, optionalApi, parse } from '../route.js';
import { uuidParam } from '../schemas.js';

const input = z.object({ endpointId: z.string().regex(/^[0-9a-f-]{36}$/i, 'must be an endpoint id') }).strict();

export default defineRoute({
  method: 'POST', path: '/api/events/:id/replay', access: 'user', kind: 'api',
  async handle({ bus, params, body }) {
    const id = uuidParam(params.id);
    const { endpointId } = parse(input, bodyFields(body));
    const replay = optionalApi<(id: string, o: { endpointId: string }) => Promise<unknown>>(bus.events, 'replay');
    if (!replay) throw notAvailable('bus.events.replay');
    const delivery = await replay(id, { endpointId });
    return { json: { delivery }, notice: 'Replay scheduled as a new delivery.' };
  },
});
