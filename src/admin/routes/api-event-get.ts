// GET /api/events/:id: the event with its payload, its jobs and its webhook delivery attempts.
import { loadEvent } from '../data.js';
import { defineRoute } from '../route.js';

export default defineRoute({
  method: 'GET', path: '/api/events/:id', access: 'user', kind: 'api',
  async handle({ bus, params }) {
    return { json: await loadEvent(bus, params.id) };
  },
});
