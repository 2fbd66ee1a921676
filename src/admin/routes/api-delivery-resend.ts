// POST /api/deliveries/:id/resend: send one webhook delivery again, under a new delivery id.
import { notAvailable } from '../http.js';
import { defineRoute, optionalApi } from '../route.js';
import { jobIdParam } from '../schemas.js';

export default defineRoute({
  method: 'POST', path: '/api/deliveries/:id/resend', access: 'user', kind: 'api',
  async handle({ bus, params }) {
    const id = jobIdParam(params.id);
    const resend = optionalApi<(id: string) => Promise<unknown>>((bus as { deliveries?: unknown }).deliveries, 'resend');
    if (!resend) throw notAvailable('bus.deliveries.resend');
    const delivery = await resend(id);
    return { json: { delivery }, notice: 'Resend scheduled as a new delivery.' };
  },
});
