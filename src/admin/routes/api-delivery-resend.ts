// POST /api/deliveries/:id/resend: send one webhook delivery again, under a new delivery id.
import { defineRoute } from '../route.js';
import { jobIdParam } from '../schemas.js';

export default defineRoute({
  method: 'POST', path: '/api/deliveries/:id/resend', access: 'user', kind: 'api',
  async handle({ bus, params }) {
    const id = jobIdParam(params.id);
    const delivery = await bus.deliveries.resend(id);
    return { json: { delivery }, notice: 'Resend scheduled as a new delivery.' };
  },
});
