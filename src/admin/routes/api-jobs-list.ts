// GET /api/jobs?state&kind&handler&eventId&cursor&limit: newest first, keyset pages.
import { defineRoute, parse, queryFields } from '../route.js';
import { jobListQuery } from '../schemas.js';

export default defineRoute({
  method: 'GET', path: '/api/jobs', access: 'user', kind: 'api',
  async handle({ bus, query }) {
    const filter = parse(jobListQuery, queryFields(query));
    const page = await bus.jobs.list(filter as Parameters<typeof bus.jobs.list>[0]);
    return { json: { jobs: page.items, nextCursor: page.nextCursor } };
  },
});
