// GET /api/events?type&subject&traceId&state&since&until&cursor&limit: newest first, keyset pages.
import { defineRoute, parse, queryFields } from '../route.js';
import { eventListQuery } from '../schemas.js';

export default defineRoute({
  method: 'GET', path: '/api/events', access: 'user', kind: 'api',
  async handle({ bus, query }) {
    const filter = parse(eventListQuery, queryFields(query));
    const page = await bus.events.list(filter as Parameters<typeof bus.events.list>[0]);
    return { json: { events: page.items, nextCursor: page.nextCursor } };
  },
});
